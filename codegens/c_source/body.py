"""What a partition's C is emitted with: the translation unit, the body, and C literals and types.

:class:`_Unit` accumulates one source file (its constants, shapes and
arrays); :class:`_Body` the statements of one partition body in it. An
:data:`OpEmitter` writes one op call into a body. The float emitters
(:mod:`.emitter`) and the quantized ones (:mod:`.quantized`) both build on
this module, which imports neither.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from byoc.errors import UnsupportedOp
from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

#: ``\ooo`` for each byte value: every byte as a fixed-width octal escape, so no escape can absorb
#: the character after it (as ``\x`` escapes do) and the text is exactly four characters per byte.
_OCTAL = np.array([f"\\{i:03o}".encode() for i in range(256)], dtype="S4")


def c_string_literal(data: bytes, bytes_per_line: int = 1024) -> str:
    """``data`` as adjacent C string literals, one line per ``bytes_per_line`` bytes (no NUL added)."""
    escaped = _OCTAL[np.frombuffer(data, dtype=np.uint8)]
    lines = [escaped[i : i + bytes_per_line].tobytes().decode("ascii") for i in range(0, escaped.size, bytes_per_line)]
    return "\n".join(f'"{line}"' for line in lines) or '""'


def float_literal(value: float, dtype: str = "float32") -> str:
    """A C literal of the exact ``dtype`` (float32/float64) value; the value, not the bytes, so any byte order works."""
    value = float(value)
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    if dtype == "float64":
        return value.hex()  # C99 hexadecimal float literal, exact
    text = f"{np.float32(value):.9g}"
    if not any(c in text for c in ".en"):
        text += ".0"
    return text + "f"


#: dtype -> (C type, DLPack type code, bits) of the tensors the emitted C reads and writes.
_DTYPES = {"float32": ("float", 2, 32), "int8": ("int8_t", 0, 8), "uint8": ("uint8_t", 1, 8),
           "int32": ("int32_t", 0, 32)}


def c_type(dtype: str) -> str:
    """The C element type of a tensor of ``dtype``."""
    if dtype not in _DTYPES:
        raise UnsupportedOp(f"a {dtype} tensor (the C emitter takes {', '.join(_DTYPES)})")
    return _DTYPES[dtype][0]


def _int_list(values: Sequence[int]) -> str:
    return ", ".join(str(int(v)) for v in values) or "0"


class _Unit:
    """Accumulates one source file: constants, shapes, and functions."""

    def __init__(self, literals: bool = True):
        self.decls: list[str] = []
        self.counter = 0
        self.literals = literals  # False: only measuring (source_memory), the constants' bytes are not written
        self.memory: dict[str, tuple[int, int]] = {}  # symbol -> (bytes malloc'ed per call, constant bytes)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def shape(self, shape: Sequence[int]) -> str:
        name = self.fresh("byoc_shape")
        self.decls.append(f"static const int64_t {name}[] = {{{_int_list(shape)}}};")
        return name

    def constant(self, tensor: Tensor) -> str:
        """Declare ``tensor``'s data (see :mod:`.emitter`'s docstring, item 3); returns a pointer expression to it."""
        name = self.fresh("byoc_const")
        if not self.literals:
            return name
        ctype = c_type(tensor.dtype)
        flat = np.asarray(tensor.data, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(-1)
        size, width = max(flat.size, 1), flat.dtype.itemsize
        literal = c_string_literal(flat.tobytes())
        # the union gives the bytes a float's alignment; a literal exactly as long as the array
        # (no room for its NUL) is valid C
        decl = f"static const union {{ unsigned char bytes[{width * size}]; float align; }} {name}_le = {{\n{literal}\n}};"
        if width == 1:
            self.decls.append(f"{decl}\n#define {name} (({ctype}*){name}_le.bytes)")
        else:
            self.decls.append(
                f"{decl}\n#ifdef BYOC_BIG_ENDIAN\n"
                f"static {ctype} {name}_be[{size}];\nstatic int {name}_ready;\n"
                f"#define {name} (({ctype}*)byoc_le_words({name}_le.bytes, {name}_be, {size}, &{name}_ready))\n"
                f"#else\n#define {name} (({ctype}*){name}_le.bytes)\n#endif"
            )
        return name

    def array(self, ctype: str, values) -> str:
        """A static const C array of ``values`` (int32_t, double or float), by name."""
        name = self.fresh("byoc_arr")
        values = np.asarray(values).reshape(-1)
        if ctype == "int32_t":
            text = _int_list(values)
        else:
            text = ", ".join(float_literal(v, "float64" if ctype == "double" else "float32") for v in values)
        self.decls.append(f"static const {ctype} {name}[] = {{{text or '0'}}};")
        return name


OpEmitter = Callable[["_Body", OpCall], None]


class _Body:
    """Emits the statements of one partition body."""

    def __init__(self, unit: _Unit, graph: PartitionGraph, names: dict[int, str], temps: list):
        self.unit, self.graph, self.names, self.temps = unit, graph, names, temps
        self.lines: list[str] = []
        self.skip: set[int] = set()
        self.referenced: set[str] = set()

    def ref(self, tensor: Tensor) -> str:
        name = self.names[tensor.id]
        self.referenced.add(name)
        return name

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def scratch(self, dtype: str, shape: Sequence[int]) -> Tensor:
        """A fresh temporary tensor, allocated and freed with the body's other temporaries."""
        tensor = Tensor(-len(self.names) - 1, tuple(shape), dtype, "op")
        name = self.unit.fresh("t")
        self.names[tensor.id] = name
        self.temps.append((name, dtype, tensor.size))
        return tensor

"""What a partition's C is emitted with: the translation unit, the body, and C literals and types.

:class:`_Unit` accumulates one source file (its constants, shapes and
arrays); :class:`Body` the statements of one partition body in it. An
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
        self.slots: dict[str, str] = {}  # a device slot's name -> its C variable (.device)

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


OpEmitter = Callable[["Body", OpCall], None]

#: C for the operators of a symbolic dim's tree (:func:`byoc.vendor.values.dim_tree`). Dims are never
#: negative, so C's truncating division and remainder are the floor ones.
_C_DIM_OPS = {"+": "+", "-": "-", "*": "*", "//": "/", "%": "%"}


def graph_dim_names(graph: PartitionGraph) -> list[str]:
    """The symbolic dims ``graph``'s shapes read, by name, in order of first use: the body's ``dims[i]``."""
    from byoc.vendor.values import tree_names

    return list(dict.fromkeys(name for tree in graph.dims.values() for name in tree_names(tree)))


def c_dim(tree, index: dict[str, int]) -> str:
    """A dim as a C expression of type int64_t over ``dims[]`` (``index``: name -> position)."""
    if isinstance(tree, int):
        return str(tree)
    if isinstance(tree, str):
        return f"dims[{index[tree]}]"
    op, a, b = tree[0], c_dim(tree[1], index), c_dim(tree[2], index)
    if op in ("min", "max"):
        return f"(({a}) {'<' if op == 'min' else '>'} ({b}) ? ({a}) : ({b}))"
    return f"({a} {_C_DIM_OPS[op]} {b})"


class Body:
    """Emits the statements of one partition body.

    A shape may hold symbolic dims (their text, as in :class:`~byoc.vendor.graph.Tensor`): the body then
    reads their sizes from its ``dims`` argument, bound per call by the entry point, so one build runs
    every shape. Emitters write sizes with :meth:`dim`, :meth:`size` and :meth:`shape`, which give a
    literal for a static value and a C expression otherwise.
    """

    def __init__(self, unit: _Unit, graph: PartitionGraph, names: dict[int, str], temps: list):
        self.unit, self.graph, self.names, self.temps = unit, graph, names, temps
        self.lines: list[str] = []
        self.skip: set[int] = set()
        self.referenced: set[str] = set()
        self.dim_index = {name: i for i, name in enumerate(graph_dim_names(graph))}

    def dim(self, d) -> str:
        """One dim (an int or a symbolic dim's text) as C."""
        return str(int(d)) if isinstance(d, (int, np.integer)) else c_dim(self.graph.dims[d], self.dim_index)

    def size(self, shape: Sequence) -> str:
        """The number of elements of ``shape`` (a Tensor's shape, or part of it) as C."""
        static = int(np.prod([d for d in shape if isinstance(d, (int, np.integer))], dtype=np.int64))
        symbolic = [self.dim(d) for d in shape if not isinstance(d, (int, np.integer))]
        return " * ".join([str(static)] * (static != 1 or not symbolic) + symbolic)

    def shape(self, shape: Sequence) -> str:
        """A C array of ``shape``'s dims: a static one in the unit, or a local one where a dim is symbolic."""
        if all(isinstance(d, (int, np.integer)) for d in shape):
            return self.unit.shape(shape)
        name = self.unit.fresh("byoc_shape")
        self.emit(f"const int64_t {name}[] = {{{', '.join(self.dim(d) for d in shape)}}};")
        return name

    def ref(self, tensor: Tensor) -> str:
        """The C name of ``tensor`` (an op's input or output, or a :meth:`scratch`): a pointer to its data."""
        name = self.names[tensor.id]
        self.referenced.add(name)
        return name

    def emit(self, line: str) -> None:
        """Append one C statement to the body (the partition's function, in op order)."""
        self.lines.append("  " + line)

    def scratch(self, dtype: str, shape: Sequence[int]) -> Tensor:
        """A fresh temporary tensor, allocated and freed with the body's other temporaries."""
        tensor = Tensor(-len(self.names) - 1, tuple(shape), dtype, "op")
        name = self.unit.fresh("t")
        self.names[tensor.id] = name
        self.temps.append((name, dtype, tensor.shape))
        return tensor

"""C a codegen hands back with binary blobs beside it: weights as bytes, not as C literals.

A codegen whose output is C may return :class:`CSource` objects instead of TVM modules (from ``compile``, and
from ``standalone_source``). byoc packages the code as a C source module, and links each blob into the library
(or the standalone program) as a read-only symbol of its name, page aligned, with an ``.incbin`` of its bytes:
the code reads it as ``extern const unsigned char <name>[];``. 100 MB of weights are then 100 MB in the
library, not 500 MB of literals for a C compiler to parse. A blob's bytes are what the code reads, in whatever
byte order the code expects: a codegen that does not know its target's byte order writes one and converts on
the other (as byoc's C-source codegen does for big-endian targets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from byoc.errors import CodegenError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class CSource:
    """``code`` that defines the entry points ``symbols`` (partition symbols), and ``blobs``: symbol name ->
    bytes, each defined by the link (module docstring)."""

    code: str
    symbols: tuple = ()
    blobs: Mapping[str, bytes] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.code, str):
            raise CodegenError(f"CSource code must be a str, got {type(self.code).__name__}")
        object.__setattr__(self, "symbols", tuple(str(s) for s in self.symbols))
        blobs = {}
        for name, data in dict(self.blobs).items():
            if not isinstance(name, str) or not _IDENTIFIER.match(name):
                raise CodegenError(f"CSource blob name {name!r} is not a C identifier")
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise CodegenError(f"CSource blob {name!r} must be bytes, got {type(data).__name__}")
            blobs[name] = bytes(data)
        object.__setattr__(self, "blobs", blobs)

    def module(self):
        """The code as a TVM C source module (compiled when the artifact is exported)."""
        import tvm

        return tvm.get_global_func("runtime.CSourceModuleCreate")(self.code, "c", list(self.symbols), [])


def modules_and_blobs(items, owner: str) -> tuple[list, dict[str, bytes]]:
    """What a codegen returned (modules and :class:`CSource`) as modules, and every blob by name; a
    :class:`~byoc.errors.CodegenError` naming ``owner`` when two blobs share a name."""
    modules, blobs = [], {}
    for item in items:
        if not isinstance(item, CSource):
            modules.append(item)
            continue
        modules.append(item.module())
        for name, data in item.blobs.items():
            if name in blobs:
                raise CodegenError(f"{owner} returned two blobs named {name!r}")
            blobs[name] = data
    return modules, blobs

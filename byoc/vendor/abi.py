"""The C ABI of a partition's entry point, as a header a codegen pastes or writes beside its C.

``byoc_abi.h`` (next to this module) declares what the host program passes a partition's function
``__tvm_ffi_<symbol>``: the DLPack and tvm-ffi layouts, the type index of each argument kind, the error
function, and helpers that read and check the arguments (``byoc_arg``, ``byoc_tensor``, ``byoc_dim``,
``byoc_shape_value``, ``byoc_fail``). byoc's C-source codegen and standalone programs use the same header, so
what it says is what runs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Union

#: The header's file name.
ABI_HEADER = "byoc_abi.h"


def abi_header() -> str:
    """The text of ``byoc_abi.h``: paste it at the top of generated C (no include path needed)."""
    return resources.files(__package__).joinpath(ABI_HEADER).read_text()


def write_abi_header(folder: Union[str, Path]) -> Path:
    """Write ``byoc_abi.h`` into ``folder`` (for C compiled by the vendor's own toolchain, which then
    ``#include "byoc_abi.h"``); returns its path."""
    path = Path(folder) / ABI_HEADER
    path.write_text(abi_header())
    return path


def entry_point(symbol: str) -> str:
    """The declaration of partition ``symbol``'s entry point, as a codegen's C defines it."""
    return f"int __tvm_ffi_{symbol}(void* self, const byoc_any* args, int32_t num_args, byoc_any* result)"

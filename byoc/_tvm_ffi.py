"""Import tvm-ffi and TVM without the torch imports they make for their torch interop.

``import tvm_ffi`` imports torch whenever torch is installed (before its own library, and again for torch
dtypes and a DLPack extension it may load), and so does ``tvm.relax`` (its Python module class), which made
``byoc.load`` in a fresh process take 2.6 s instead of 0.9 s in a venv with torch. byoc hands tvm-ffi numpy
arrays and TVM tensors only, never torch tensors, so when the process has not imported torch yet, tvm-ffi
and ``tvm.relax`` are imported with torch hidden: their torch fast paths stay off for the process; torch
itself imports as usual afterwards, and a torch tensor still crosses into TVM through the DLPack protocol.
Set ``BYOC_TVM_FFI_TORCH=1`` to import them as they are.
"""

from __future__ import annotations

import os
import sys


def import_tvm_ffi() -> None:
    """Import tvm_ffi and tvm.relax (once per process), hiding torch from them unless torch is already
    imported."""
    if "tvm.relax" in sys.modules or "torch" in sys.modules or os.environ.get("BYOC_TVM_FFI_TORCH") == "1":
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # "import torch" raises ImportError while None
    try:
        import tvm_ffi  # noqa: F401 - imported for the side effect: the modules are cached
        import tvm.relax  # noqa: F401
    finally:
        del sys.modules["torch"]

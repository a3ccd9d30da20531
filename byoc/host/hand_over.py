"""Arrays handed to a program: a numpy array as a TVM tensor by DLPack, in place or as a copy aligned as TVM's
compiled functions assume (:data:`~byoc.host.run_io.HOST_ALIGNMENT`). ``Artifact.run`` hands its inputs over so,
and the host's sequence functions (:mod:`byoc.host.sequences`) the tensors they make."""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import tvm_ffi

from byoc.host.run_io import HOST_ALIGNMENT

__all__ = ["aligned_zeros", "tvm_tensor"]

#: the numpy dtype kinds numpy exchanges by DLPack: bool, integers, floats, complex
_DLPACK_KINDS = frozenset("biufc")


def tvm_tensor(array: np.ndarray, alignment: Optional[int] = None):
    """A TVM tensor of the C-contiguous ``array``: the array itself when its address is a multiple of
    ``alignment`` (what the program's readers of it need, :mod:`byoc.host.run_io`), else a copy aligned as
    TVM's compiled functions assume (``alignment`` None: always a copy).

    Made in numpy and handed over by DLPack, the copy costs a few microseconds
    plus its bytes, where ``tvm.runtime.tensor`` takes about 50 (a small model's
    whole run).
    """
    if array.size == 0:  # no bytes to share or copy: one tensor per shape and dtype, made once
        return _empty_tensor(array.shape, array.dtype)
    # numpy exports only its own kinds of dtype by DLPack (not ml_dtypes' bfloat16 or float8): those go the slow way
    if array.dtype.kind not in _DLPACK_KINDS:
        import tvm

        return tvm.runtime.tensor(array)
    if alignment is not None:
        try:  # tvm.runtime.from_dlpack would insist on 64 bytes
            tensor = tvm_ffi.from_dlpack(array, require_contiguous=True)
        except BufferError:  # a read-only array, which numpy exports only as DLPack 1.0 with its flag
            tensor = None
        # the tensor's address, not numpy's array.ctypes.data: that costs more than the rest of the hand-over
        if tensor is not None and (alignment == 1 or tensor.data_ptr() % alignment == 0):
            return tensor
    import tvm

    return tvm.runtime.from_dlpack(_aligned_copy(array))


def aligned_zeros(shape, dtype, alignment: int = HOST_ALIGNMENT) -> np.ndarray:
    """A zeroed C-contiguous array whose address is a multiple of ``alignment`` bytes (by default what TVM's
    compiled functions assume, :data:`byoc.host.run_io.HOST_ALIGNMENT`; :attr:`Artifact.input_alignment` for
    what every reader of a program's inputs needs): one a run reads in place, never through a copy."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.zeros(nbytes + alignment, np.uint8)
    start = -buffer.ctypes.data % alignment
    return buffer[start:start + nbytes].view(dtype).reshape(shape)


@functools.lru_cache(maxsize=256)
def _empty_tensor(shape: tuple, dtype: np.dtype):
    """A TVM tensor with no elements: numpy does not keep an empty view's offset for DLPack, and
    ``tvm.runtime.tensor`` takes about 50 us, which a decoder's prefill paid for each layer's empty past."""
    import tvm

    return tvm.runtime.tensor(np.empty(shape, dtype))


def _aligned_copy(array: np.ndarray) -> np.ndarray:
    copy = aligned_zeros(array.shape, array.dtype)
    np.copyto(copy, array, casting="no")
    return copy

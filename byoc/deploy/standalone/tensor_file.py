"""The tensor files a standalone program reads its inputs from and writes its outputs to.

Tensor file format (inputs and outputs; all integers little-endian)::

    magic   8 bytes   b"BYOCTNS1"
    count   uint32    number of tensors
    then per tensor:
      code  uint32    DLPack type code: 0 int, 1 uint, 2 float
      bits  uint32    8, 16, 32 or 64
      ndim  uint32
      dims  ndim x int64
      data  prod(dims) elements, each little-endian, C order
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np

from byoc.errors import StandaloneError

MAGIC = b"BYOCTNS1"
#: numpy dtype kind -> DLPack type code
CODES = {"i": 0, "u": 1, "f": 2}
CODES = {"i": 0, "u": 1, "f": 2}


def write_tensors(path: Union[str, os.PathLike], arrays) -> None:
    """Write ``arrays`` in the standalone tensor file format (see the module docstring)."""
    chunks = [MAGIC, np.uint32(len(arrays)).astype("<u4").tobytes()]
    for array in arrays:
        array = np.ascontiguousarray(array)
        if array.dtype.kind not in CODES:
            raise StandaloneError(f"cannot write a {array.dtype} tensor; use float or integer dtypes")
        header = np.array([CODES[array.dtype.kind], array.dtype.itemsize * 8, array.ndim], dtype="<u4")
        chunks += [header.tobytes(), np.array(array.shape, dtype="<i8").tobytes(),
                   array.astype(array.dtype.newbyteorder("<")).tobytes()]
    Path(path).write_bytes(b"".join(chunks))


def read_tensors(path: Union[str, os.PathLike]) -> list[np.ndarray]:
    """Read a file in the standalone tensor file format; arrays in native byte order."""
    data = Path(path).read_bytes()
    if data[:8] != MAGIC:
        raise StandaloneError(f"{str(path)!r} is not a byoc tensor file (bad magic)")
    pos, arrays = 12, []
    (count,) = np.frombuffer(data, "<u4", 1, 8)
    kinds = {v: k for k, v in CODES.items()}
    try:
        for _ in range(int(count)):
            code, bits, ndim = (int(v) for v in np.frombuffer(data, "<u4", 3, pos))
            pos += 12
            shape = tuple(int(v) for v in np.frombuffer(data, "<i8", ndim, pos))
            pos += 8 * ndim
            dtype = np.dtype(f"<{kinds[code]}{bits // 8}")
            size = int(np.prod(shape, dtype=np.int64))
            arrays.append(np.frombuffer(data, dtype, size, pos).reshape(shape).astype(dtype.newbyteorder("=")))
            pos += size * dtype.itemsize
    except (KeyError, ValueError) as err:
        raise StandaloneError(f"{str(path)!r} is truncated or corrupt: {err}") from None
    return arrays

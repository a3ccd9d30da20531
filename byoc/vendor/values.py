"""Small helpers over TVM 0.27's Relax object model, kept in one place.

TVM 0.27 renamed much of Relax (``ty`` for struct info, ``GenericConst`` for
constants, prim values as plain ``IntImm``/``FloatImm``); code elsewhere asks
these helpers instead of spelling the class names.
"""

from __future__ import annotations

from typing import Optional

import numpy as np


def is_tensor_const(expr) -> bool:
    """A Relax tensor constant (a weight)."""
    from tvm.ir.expr import GenericConst

    return isinstance(expr, GenericConst)


def const_array(expr) -> np.ndarray:
    """The numpy value of a tensor constant."""
    return expr.value.numpy()


def is_prim_value(expr) -> bool:
    """A scalar prim value argument (IntImm/FloatImm), as clip's bounds."""
    from tvm.ir.prim.expr import FloatImm, IntImm

    return isinstance(expr, (IntImm, FloatImm))


def const_nbytes(expr) -> int:
    """Bytes of a tensor constant, read from its shape and dtype (no copy to numpy)."""
    value = expr.value
    count = 1
    for extent in value.shape:
        count *= int(extent)
    return count * np.dtype(str(value.dtype)).itemsize


def static_dims(shape) -> Optional[tuple[int, ...]]:
    """The dims of a Relax shape (a ``ShapeExpr``, or a tensor type's ``shape``) as ints.

    None when the shape is unknown (``None``, a tensor of unknown rank) or any dim is symbolic.
    """
    if shape is None:
        return None
    dims = []
    for d in shape.values:
        value = getattr(d, "value", None)
        if not isinstance(value, int):
            return None
        dims.append(value)
    return tuple(dims)

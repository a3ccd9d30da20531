"""ONNX's CumSum and CumProd, with the axis a constant or a value given at run time.

TVM's converter takes CumSum with a constant axis only ("CumSum with non-constant axis input is not supported
yet"), and has no CumProd (opset 26). ONNX's own node tests feed the axis as an input, and onnxruntime runs
that. The axis decides no shape here, only which dim the running sum or product follows: with a constant axis
the result is one ``cumsum``/``cumprod``; with an axis given at run time it is computed along every dim of the
(statically ranked) input and the run picks the one the axis names (``take`` of the stacked results at
``axis mod rank``), rank times the work of one, which is small for the vectors and masks such axes come with.
``exclusive`` starts each from the identity (0, 1); ``reverse`` runs from the end (a flip before and after).
An axis given at run time outside [-rank, rank) fails the run, as onnxruntime refuses it.
"""

from __future__ import annotations

from typing import Optional

from tvm import relax, tirx

from byoc.pipeline.frontend.run_time_values import bound_scalar
from byoc.vendor.values import const_array, is_tensor_const

#: The ONNX ops this module converts, and the Relax op of each
CUMULATIVE = {"CumSum": relax.op.cumsum, "CumProd": relax.op.cumprod}


def cumulative(op_name: str, inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """The Relax expression of a CumSum or CumProd node (module docstring); None for a CumSum whose axis is a
    constant (TVM's converter) or an input whose rank is not known."""
    data, axis = inputs[0], inputs[1]
    ty = data.ty if isinstance(data, relax.Expr) else None
    if not isinstance(ty, relax.TensorType) or ty.ndim < 1:
        return None
    rank = ty.ndim
    constant = is_tensor_const(axis)
    if constant and op_name == "CumSum":
        return None
    exclusive, reverse = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))

    def along(dim: int) -> relax.Expr:
        x = relax.op.flip(data, axis=dim) if reverse else data
        y = CUMULATIVE[op_name](x, axis=dim, exclusive=exclusive)
        return bb.normalize(relax.op.flip(y, axis=dim) if reverse else y)

    if constant:
        return along(int(const_array(axis).reshape(-1)[0]) % rank)
    index = bb.normalize(relax.op.reshape(relax.op.astype(axis, "int64"), ()))
    # an axis outside [-rank, rank) fails the run, as onnxruntime refuses it (Artifact.run: InputShapeError)
    inside = relax.op.logical_and(relax.op.greater_equal(index, relax.const(-rank, "int64")),
                                  relax.op.less(index, relax.const(rank, "int64")))
    bound_scalar(relax.op.astype(inside, "int64"), tirx.IntImm("int64", 1), bb)
    if rank == 1:
        return along(0)
    index = relax.op.floor_mod(index, relax.const(rank, "int64"))
    stacked = relax.op.stack([along(dim) for dim in range(rank)], axis=0)
    return bb.normalize(relax.op.take(stacked, index, axis=0))

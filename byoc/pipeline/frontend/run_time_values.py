"""ONNX ops whose shape-deciding input is a tensor computed at run time, which TVM's converters refuse.

A reduction's ``axes`` decides which dims of its result are 1 (or gone), a Reshape's ``shape`` the result's
shape. Exporters write them as constants, and TVM's converters need them so. A graph may still compute them
or take them as inputs (ONNX's own node tests feed every one as an input), and onnxruntime runs that. These
converters compute such a value when the model runs, in ops TVM builds, and give each dim it decides a
variable of its own (``match_cast``), as TVM's importer does for a Range's length:

* **A reduction over axes given at run time** (ReduceSum from opset 13, the others from 18): the number of
  axes is the input's static length, not their values. Each dim of the input is reduced or kept by a
  ``strided_slice`` of ``concat(reduced, kept)`` along it, its bounds chosen by whether the axes name it.
  Reducing one dim after another gives the whole reduction: a sum of sums, a max of maxes, a mean of means of
  equal groups, a log-sum-exp of log-sum-exps, with an element-wise op before (L1's abs, L2's and
  SumSquare's square) or after (L2's sqrt, LogSum's log). A max or min over an empty dim is ONNX's -inf or
  +inf (byoc/host/legalize.py), a bool's False or True. Without
  keepdims, the reduced dims are dropped by a reshape to the kept dims, in order.
* **A ConstantOfShape of a shape given at run time**: a ``full`` of the dims the shape's values bind.
* **A Reshape to a shape given at run time**: ONNX's 0 (copy the input's dim, unless ``allowzero``) and -1
  (the count the others leave) are worked out on the tensor, and the input is reshaped to the result.

Each returns None where the value is a constant (TVM's converter runs) or the input's rank is unknown.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import onnx
from tvm import relax, tirx

from byoc.vendor.values import is_tensor_const

#: The reduction of one dim (keepdims) that a chain of computes each ONNX reduction
_ONE_DIM: dict[str, Callable] = {
    "ReduceSum": relax.op.sum, "ReduceMean": relax.op.mean, "ReduceMax": relax.op.max, "ReduceMin": relax.op.min,
    "ReduceProd": relax.op.prod, "ReduceL1": relax.op.sum, "ReduceL2": relax.op.sum,
    "ReduceSumSquare": relax.op.sum, "ReduceLogSum": relax.op.sum,
}
#: Element-wise ops before the chain and after it
_BEFORE: dict[str, Callable] = {"ReduceL1": relax.op.abs, "ReduceL2": relax.op.square,
                                "ReduceSumSquare": relax.op.square}
_AFTER: dict[str, Callable] = {"ReduceL2": relax.op.sqrt, "ReduceLogSum": relax.op.log}
#: A bool's max and min over an empty dim (False, True): reduced as int8, they would start from -128 and 127
_BOOL_IDENTITY = {"ReduceMax": 0, "ReduceMin": 1}
#: The reductions this module converts when their axes are computed at run time
REDUCTIONS = frozenset(_ONE_DIM) | {"ReduceLogSumExp"}


def static_shape(expr) -> Optional[list]:
    """The dims of the tensor ``expr`` (numbers or TIR expressions), or None where its type gives no shape."""
    ty = expr.ty if isinstance(expr, relax.Expr) else None
    if isinstance(ty, relax.TensorType) and isinstance(ty.shape, relax.ShapeExpr):
        return list(ty.shape.values)
    return None


def computed(value) -> bool:
    """Whether ``value`` is a tensor the model computes when it runs (an input, or from one), not a constant."""
    return isinstance(value, relax.Expr) and not is_tensor_const(value) and isinstance(value.ty, relax.TensorType)


def reduce_over_run_time_axes(op_name: str, inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """An ONNX reduction whose ``axes`` input is computed at run time (module docstring), or None."""
    if op_name not in REDUCTIONS or len(inputs) < 2 or not computed(inputs[1]):
        return None
    x, axes = inputs[0], inputs[1]
    shape, axes_shape = static_shape(x), static_shape(axes)
    if shape is None or axes_shape is None or len(axes_shape) != 1:
        return None
    rank, length = len(shape), axes_shape[0]
    keepdims, noop = bool(attrs.get("keepdims", 1)), bool(attrs.get("noop_with_empty_axes", 0))
    if isinstance(length, tirx.IntImm) and int(length) == 0:  # no axes: every dim, or none with noop
        return x if noop else _reduce(op_name, x, [True] * rank, keepdims, bb)
    named = _named_dims(axes, rank, bb)
    # As many dims named as axes given: none out of range or given twice (checked when the model runs).
    bound_scalar(relax.op.sum(relax.op.astype(named, "int64")), length, bb)
    if not isinstance(length, tirx.IntImm):
        # An empty input is given a symbolic length (ProvenanceImporter): no axes is every dim unless noop. The
        # rank of a result without keepdims would depend on the length.
        if not keepdims:
            return None
        if not noop:
            named = bb.normalize(relax.op.logical_or(named, _is_zero(length)))
    choices = [bb.normalize(relax.op.take(named, relax.const(i, "int64"), axis=0)) for i in range(rank)]
    return _reduce(op_name, x, choices, keepdims, bb, named, 0 if keepdims else rank - int(length))


def _named_dims(axes, rank: int, bb) -> relax.Expr:
    """A bool tensor of ``rank``: whether the (possibly negative) ``axes`` name each dim."""
    axes = bb.normalize(relax.op.astype(axes, "int64"))
    axes = bb.normalize(relax.op.where(relax.op.less(axes, relax.const(0, "int64")),
                                       relax.op.add(axes, relax.const(rank, "int64")), axes))
    hits = relax.op.equal(relax.op.expand_dims(axes, [1]), relax.const(np.arange(rank, dtype=np.int64)[None], "int64"))
    count = relax.op.sum(relax.op.astype(hits, "int32"), axis=[0])  # a max over no axes would be int32's least
    return bb.normalize(relax.op.greater(count, relax.const(0, "int32")))


def _reduce(op_name: str, x, reduced: list, keepdims: bool, bb, named=None, kept: int = 0) -> relax.Expr:
    """``x`` reduced over the dims ``reduced`` says: True (statically), False, or a bool scalar tensor; without
    ``keepdims``, reshaped to the ``kept`` dims ``named`` (a bool tensor) does not name."""
    dtype = str(x.ty.dtype)
    boolean = dtype == "bool"
    value = bb.normalize(relax.op.astype(x, "int8")) if boolean else x
    if op_name in _BEFORE:
        value = bb.normalize(_BEFORE[op_name](value))
    for dim, choice in enumerate(reduced):
        if choice is False:
            continue
        one = _one_dim(op_name, value, dim, boolean, bb)
        value = one if choice is True else _chosen(one, value, dim, choice, bb)
    if op_name in _AFTER:
        value = bb.normalize(_AFTER[op_name](value))
    if boolean:
        value = bb.normalize(relax.op.astype(value, "bool"))
    if keepdims:
        return value
    if named is None:  # every dim reduced
        return bb.normalize(relax.op.reshape(value, relax.ShapeExpr([])))
    return _without_reduced_dims(value, named, kept, bb)


def _one_dim(op_name: str, value, dim: int, boolean: bool, bb) -> relax.Expr:
    """``value`` reduced along ``dim`` with keepdims."""
    if op_name == "ReduceLogSumExp":  # max + log(sum(exp(x - max))), as TVM's converter computes it
        top = _one_dim("ReduceMax", value, dim, boolean, bb)
        total = relax.op.sum(relax.op.exp(relax.op.subtract(value, top)), axis=[dim], keepdims=True)
        return bb.normalize(relax.op.add(top, relax.op.log(total)))
    reduced = bb.normalize(_ONE_DIM[op_name](value, axis=[dim], keepdims=True))
    if not boolean or op_name not in _BOOL_IDENTITY:  # a float's max starts from -inf (byoc/host/legalize.py)
        return reduced
    identity = _BOOL_IDENTITY[op_name]
    empty = _is_zero(static_shape(value)[dim])
    return bb.normalize(relax.op.where(empty, relax.const(identity, str(value.ty.dtype)), reduced))


def _chosen(reduced, kept, dim: int, choice, bb) -> relax.Expr:
    """``reduced`` where the bool scalar ``choice`` holds, else ``kept``: a slice of their concat along ``dim``,
    its bounds chosen when the model runs, cast to a new dim of its own."""
    size = static_shape(kept)[dim]
    bounds = relax.op.where(choice, relax.const(np.array([0, 1], np.int64), "int64"),
                            relax.op.shape_to_tensor(relax.ShapeExpr([1, size + 1])))
    begin, end = run_time_dims(bounds, 2, "reduce_bound", bb)
    both = bb.normalize(relax.op.concat([reduced, kept], axis=dim))
    sliced = bb.normalize(relax.op.strided_slice(both, [dim], [begin], [end], assume_inbound=True))
    shape = static_shape(kept)
    shape[dim] = tirx.Var(f"reduced_dim{dim}", "int64")
    return bb.match_cast(sliced, relax.TensorType(shape, str(kept.ty.dtype)))


def _without_reduced_dims(value, named, kept: int, bb) -> relax.Expr:
    """``value`` (reduced with keepdims) reshaped to its ``kept`` dims that ``named`` does not name, in order."""
    rank = len(static_shape(value))
    # Sorting rank * named + position puts the kept dims first, in order.
    key = relax.op.add(relax.op.multiply(relax.op.astype(named, "int64"), relax.const(rank, "int64")),
                       relax.const(np.arange(rank, dtype=np.int64), "int64"))
    order = relax.op.strided_slice(relax.op.argsort(key, axis=0, dtype="int64"), [0], [0], [kept])
    # From the dims the value is known to have, not its shape_of: a vendor may merge the ops before this reshape
    # with it, and its shape must not depend on what that partition computes.
    dims = relax.op.take(relax.op.shape_to_tensor(relax.ShapeExpr(static_shape(value))), order, axis=0)
    return _reshape(value, run_time_dims(dims, kept, "kept_dim", bb), bb)


def run_time_dims(tensor, count: int, name: str, bb) -> list:
    """The values of a 1-D int64 ``tensor`` of ``count`` elements, as new TIR variables bound when the model
    runs."""
    return bound(tensor, [tirx.Var(f"{name}{i}", "int64") for i in range(count)], bb)


def bound(tensor, dims: list, bb) -> list:
    """``dims``, which the values of the 1-D int64 ``tensor`` bind when the model runs: a new variable takes its
    value, and an expression of known dims is checked against it (a mismatch fails the run)."""
    bb.match_cast(bb.normalize(relax.op.tensor_to_shape(tensor)), relax.ShapeType(dims))
    return dims


def reshape_to_run_time_shape(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A Reshape whose ``shape`` input is computed at run time (module docstring), or None."""
    if len(inputs) < 2 or not computed(inputs[1]) or not computed(inputs[0]):
        return None
    x, target = inputs
    shape, target_shape = static_shape(x), static_shape(target)
    if shape is None or target_shape is None or len(target_shape) != 1 \
            or not isinstance(target_shape[0], tirx.IntImm):
        return None
    length = int(target_shape[0])
    given = bb.normalize(relax.op.astype(target, "int64"))
    dims = relax.op.shape_to_tensor(relax.ShapeExpr(shape))
    if not attrs.get("allowzero", 0):  # 0 copies the input's dim at that position
        copied = relax.op.take(dims, relax.const(np.minimum(np.arange(length), len(shape) - 1), "int64"), axis=0)
        given = bb.normalize(relax.op.where(relax.op.equal(given, relax.const(0, "int64")), copied, given))
    # -1 is what the other dims leave of the input's elements (a product of 0 leaves 0, not a division by it)
    inferred = relax.op.equal(given, relax.const(-1, "int64"))
    others = relax.op.prod(relax.op.where(inferred, relax.const(1, "int64"), given))
    left = relax.op.floor_divide(relax.op.prod(dims), relax.op.maximum(others, relax.const(1, "int64")))
    given = bb.normalize(relax.op.where(inferred, left, given))
    return _reshape(x, run_time_dims(given, length, "reshape_dim", bb), bb)


def constant_of_run_time_shape(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A ConstantOfShape whose ``shape`` input is computed at run time (module docstring), or None."""
    if not inputs or not computed(inputs[0]):
        return None
    shape = static_shape(inputs[0])
    if shape is None or len(shape) != 1 or not isinstance(shape[0], tirx.IntImm):
        return None
    value = attrs.get("value")  # a TensorProto of one element; ONNX's default is a float32 0
    value = onnx.numpy_helper.to_array(value).reshape(()) if value is not None else np.array(0, np.float32)
    given = bb.normalize(relax.op.astype(inputs[0], "int64"))
    bound_none_negative(given, bb)  # a negative dim fails the run, as onnxruntime refuses it (it would size an allocation)
    dims = run_time_dims(given, int(shape[0]), "filled_dim", bb)
    return bb.normalize(relax.op.full(relax.ShapeExpr(dims), relax.const(value, str(value.dtype)), str(value.dtype)))


def _reshape(x, dims: list, bb) -> relax.Expr:
    """``x`` reshaped to ``dims`` bound when the model runs. They must hold its elements, checked then on the
    shapes alone (a cast of a tensor between two vendor ops would vanish into their partition)."""
    bound(relax.op.shape_to_tensor(relax.ShapeExpr([_product(static_shape(x))])), [_product(dims)], bb)
    return bb.normalize(relax.op.reshape(x, relax.ShapeExpr(dims)))


def split_at_run_time_sizes(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A Split whose ``split`` sizes are computed at run time: one slice per size along the axis, or None."""
    if len(inputs) < 2 or not computed(inputs[1]):
        return None
    x, sizes = inputs[0], inputs[1]
    shape, sizes_shape = static_shape(x), static_shape(sizes)
    if shape is None or sizes_shape is None or len(sizes_shape) != 1 or not isinstance(sizes_shape[0], tirx.IntImm):
        return None
    axis = attrs.get("axis", 0) % len(shape)
    sizes = bb.normalize(relax.op.astype(sizes, "int64"))
    # None negative, and all of the axis between them: checked when the model runs.
    counts = run_time_dims(relax.op.maximum(sizes, relax.const(0, "int64")), int(sizes_shape[0]), "split_size", bb)
    bound_scalar(relax.op.sum(sizes), shape[axis], bb)
    bound(sizes, counts, bb)
    pieces, begin = [], tirx.IntImm("int64", 0)
    for count in counts:
        pieces.append(_slice(x, axis, begin, begin + count, bb))
        begin = begin + count
    return relax.Tuple(pieces)


#: The dtypes TVM's topk kernel sorts (tvm/src/runtime/contrib/sort: it fails the run on others)
_SORTED_DTYPES = frozenset({"float32", "float64", "int32", "int64"})


def top_k_of_run_time_k(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A TopK whose ``k`` is computed at run time: every element of the axis in order (TVM's topk of the axis's
    static size), then the first k of the values and of the indices; or None."""
    if len(inputs) < 2 or not computed(inputs[1]) or attrs.get("sorted", 1) != 1:
        return None
    x = inputs[0]
    shape = static_shape(x)
    axis = attrs.get("axis", -1) % len(shape) if shape else 0
    if shape is None or not isinstance(shape[axis], tirx.IntImm) or str(x.ty.dtype) not in _SORTED_DTYPES:
        return None
    ordered = bb.normalize(relax.op.topk(x, int(shape[axis]), axis, ret_type="both",
                                         largest=bool(attrs.get("largest", 1)), dtype="int64"))
    k = bb.normalize(relax.op.reshape(relax.op.astype(inputs[1], "int64"), relax.ShapeExpr([1])))
    # 0 <= k <= the axis's size, checked when the model runs
    (count,) = run_time_dims(relax.op.clip(k, relax.prim_value(0), relax.prim_value(int(shape[axis]))), 1, "top_k", bb)
    bound(k, [count], bb)
    return relax.Tuple([_slice(relax.TupleGetItem(ordered, i), axis, 0, count, bb) for i in range(2)])


def _slice(x, axis: int, begin, end, bb) -> relax.Expr:
    """``x[begin:end]`` along ``axis``; the caller has checked the bounds."""
    return bb.normalize(relax.op.strided_slice(x, [axis], [begin], [end], assume_inbound=True))


def bound_scalar(tensor, dim, bb) -> None:
    """A check, when the model runs, that the one value of ``tensor`` equals the dim ``dim`` (:func:`bound`)."""
    bound(relax.op.reshape(tensor, relax.ShapeExpr([1])), [dim], bb)


def bound_none_negative(values, bb) -> None:
    """A check, when the model runs, that no value of the int64 tensor ``values`` is negative (:func:`bound`)."""
    negative = relax.op.less(values, relax.const(0, "int64"))
    bound_scalar(relax.op.sum(relax.op.astype(negative, "int64")), tirx.IntImm("int64", 0), bb)


def _is_zero(dim) -> relax.Expr:
    """A bool tensor [1]: whether the dim ``dim`` is 0 when the model runs."""
    return relax.op.equal(relax.op.shape_to_tensor(relax.ShapeExpr([dim])), relax.const(0, "int64"))


def _product(dims: list):
    total = tirx.IntImm("int64", 1)
    for dim in dims:
        total = total * dim
    return total

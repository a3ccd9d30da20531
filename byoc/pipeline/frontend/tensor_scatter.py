"""ONNX's TensorScatter (opset 24): a KV cache's update, which TVM's importer lacks.

``present = TensorScatter(past_cache, update, write_indices)``: the cache and the present have one shape
``(batch, ..., max_sequence_length, ...)``, and each row's ``update`` (``sequence_length`` along ``axis``) is
written from its ``write_indices`` entry on (0 without one), modulo the cache's length in ``mode="circular"``.
It becomes a ``scatter_elements`` of the update at those positions. In ``mode="linear"`` a row whose update
would run past the cache's end (or start before it) fails the run, as onnxruntime refuses it: a scatter out of
range would write outside the cache.
"""

from __future__ import annotations

from typing import Optional

from tvm import relax, tirx

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.run_time_values import bound_scalar


def tensor_scatter(node_name: str, inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """The Relax expression of a TensorScatter node (module docstring); None where the inputs' ranks are not
    known."""
    past, update = inputs[0], inputs[1]
    write = inputs[2] if len(inputs) > 2 else None
    types = [x.ty if isinstance(x, relax.Expr) else None for x in (past, update)]
    if not all(isinstance(t, relax.TensorType) and isinstance(t.shape, relax.ShapeExpr) for t in types):
        return None
    rank = types[0].ndim
    axis = int(attrs.get("axis", -2))
    mode = attrs.get("mode", b"linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if not -rank <= axis < rank or axis % rank == 0:
        raise UnsupportedAttributeError(f"TensorScatter node {node_name!r}: axis={axis} for a cache of rank {rank} "
                                        "(the sequence axis, after the batch)", node_name, "axis")
    if mode not in ("linear", "circular"):
        raise UnsupportedAttributeError(f"TensorScatter node {node_name!r}: mode={mode!r} (linear or circular)",
                                        node_name, "mode")
    axis %= rank
    length, steps = types[0].shape.values[axis], types[1].shape.values[axis]
    along = [1] * rank
    along[axis] = steps
    index = relax.op.reshape(relax.op.arange(0, steps, 1, "int64"), relax.ShapeExpr(along))
    first = None
    if write is not None and isinstance(write, relax.Expr):
        first = bb.normalize(relax.op.astype(write, "int64"))
        index = relax.op.add(relax.op.expand_dims(first, list(range(1, rank))), index)
    cache_length = relax.op.shape_to_tensor(relax.ShapeExpr([length]))
    if mode == "circular":
        index = relax.op.floor_mod(index, cache_length)
    else:
        start = first if first is not None else relax.const([0], "int64")
        end = relax.op.add(start, relax.op.shape_to_tensor(relax.ShapeExpr([steps])))
        outside = relax.op.logical_or(relax.op.less(start, relax.const(0, "int64")),
                                      relax.op.greater(end, cache_length))
        bound_scalar(relax.op.sum(relax.op.astype(outside, "int64")), tirx.IntImm("int64", 0), bb)
    index = relax.op.broadcast_to(index, types[1].shape)
    return bb.normalize(relax.op.scatter_elements(past, index, update, axis=axis))

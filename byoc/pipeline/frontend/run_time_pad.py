"""ONNX's Pad whose widths are computed at run time (a graph input, or a shape computation), which TVM's converter
refuses ("Dynamic pads are not supported yet"), or whose axes are: CenterCropPad's expansion computes its widths
from the shape it is given, and ONNX's node tests feed every width and axis as an input.

Each width becomes a variable of its own, bound when the model runs (``run_time_values.bound``), and the result's
dims are the input's plus the widths on each side. One TVM compute reads each output element from the input at
the position the mode gives: ``constant`` the value (or the input, inside it), ``edge`` the nearest border
element, ``reflect`` the mirror image without repeating the border, ``wrap`` the input's other end. A negative
width crops in the constant and edge modes, as ONNX's does; a crop past the input's extent, or any crop in the
reflect and wrap modes (onnx.reference refuses it, onnxruntime wraps over what it keeps), fails the run
(``InputShapeError``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import (computed, run_time_dims, static_shape, bound_none_negative,
                                                     bound_scalar)

MODES = ("constant", "edge", "reflect", "wrap")


def pad_by_run_time_widths(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A Pad (opset 11 on) whose ``pads`` input, or ``axes`` input, is computed at run time (module docstring), or
    None: constant widths and axes (TVM's converter, or byoc's ``relax.nn.pad``), an unknown rank."""
    operands = [inputs[i] if len(inputs) > i else None for i in range(4)]
    x, widths_input, value, axes_input = operands
    if widths_input is None or not any(computed(each) for each in (widths_input, axes_input)):
        return None
    shape, widths_shape = static_shape(x), static_shape(widths_input)
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if shape is None or widths_shape is None or len(widths_shape) != 1 or mode not in MODES:
        return None
    rank, count = len(shape), int(widths_shape[0])
    widths = bb.normalize(relax.op.astype(widths_input, "int64"))
    if axes_input is not None:  # each axis's widths, at its place among all the input's axes
        axes_shape = static_shape(axes_input)
        if axes_shape is None or len(axes_shape) != 1 or 2 * int(axes_shape[0]) != count:
            return None
        widths = _per_axis(widths, relax.op.astype(axes_input, "int64"), count // 2, rank, bb)
    elif count != 2 * rank:
        return None
    amounts = run_time_dims(widths, 2 * rank, "pad_width", bb)
    before, after = amounts[:rank], amounts[rank:]
    dims = [shape[d] + before[d] + after[d] for d in range(rank)]
    # a crop past the input's extent fails the run, as onnxruntime refuses it; so does a crop in the modes that
    # read the input's far side (onnx.reference refuses it, onnxruntime wraps over the part it keeps)
    checked = dims if mode in ("constant", "edge") else dims + amounts
    bound_none_negative(relax.op.shape_to_tensor(relax.ShapeExpr(checked)), bb)
    dtype = str(x.ty.dtype)
    value = relax.const(0, dtype) if value is None else bb.normalize(
        relax.op.reshape(relax.op.astype(value, dtype), relax.ShapeExpr([])))
    return bb.emit_te(_padded, x, value, before, dims, mode, primfunc_name_hint="run_time_pad")


def _per_axis(widths, axes, count: int, rank: int, bb) -> relax.Expr:
    """ONNX's widths for ``axes`` (``[begins..., ends...]``, ``count`` axes) as widths for every axis of a tensor of
    ``rank`` (0 on the others), computed when the model runs: each axis matched against 0..rank-1. An axis out of
    [-rank, rank) or named twice fails the run."""
    axes = relax.op.where(relax.op.less(axes, relax.const(0, "int64")), axes + relax.const(rank, "int64"), axes)
    hits = bb.normalize(relax.op.astype(relax.op.equal(relax.op.expand_dims(axes, 1),
                                                       relax.const(np.arange(rank)[None, :], "int64")), "int64"))
    bound_scalar(relax.op.sum(hits), tirx.IntImm("int64", count), bb)  # each axis in range
    once = relax.op.less_equal(relax.op.sum(hits, axis=0), relax.const(1, "int64"))
    bound_scalar(relax.op.sum(relax.op.astype(relax.op.logical_not(once), "int64")), tirx.IntImm("int64", 0), bb)

    def spread(first: int) -> relax.Expr:  # [rank]: each axis's width from the slice [first, first + count)
        part = relax.op.strided_slice(widths, [0], [first], [first + count])
        return relax.op.sum(relax.op.multiply(hits, relax.op.expand_dims(part, 1)), axis=0)

    return bb.normalize(relax.op.concat([spread(0), spread(count)], axis=0))


def _padded(x: te.Tensor, value: te.Tensor, before: list, dims: list, mode: str) -> te.Tensor:
    """``x`` padded to ``dims``, ``before[d]`` elements before it on axis d, in ONNX's ``mode``."""
    def source(d: int, i):  # the input's index on axis d that output index i reads
        n, j = x.shape[d], i - before[d]
        if mode == "edge":
            return tirx.max(tirx.min(j, n - 1), 0)
        if mode == "wrap":
            return tirx.floormod(j, tirx.max(n, 1))
        if mode == "reflect":  # period 2 (n - 1): 0 1 .. n-1 n-2 .. 1, then again
            period = tirx.max(2 * (n - 1), 1)
            m = tirx.floormod(j, period)
            return tirx.Select(m >= n, period - m, m)
        return tirx.max(tirx.min(j, n - 1), 0)  # constant: read inside, the value chosen outside

    def element(*index):
        at = [source(d, i) for d, i in enumerate(index)]
        if mode != "constant":
            return x(*at)
        inside = tirx.const(True, "bool")
        for d, i in enumerate(index):
            j = i - before[d]
            inside = tirx.all(inside, j >= 0, j < x.shape[d])
        return tirx.Select(inside, x(*at), value())

    return te.compute(dims, element, name="pad")

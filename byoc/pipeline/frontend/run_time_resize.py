"""ONNX's Resize whose ``scales`` or ``sizes`` are computed at run time (a graph input, or a shape computation: the
form older exports of ``F.interpolate(scale_factor=...)`` write), which TVM's converter refuses ("Type Var for
scale is currently unsupported"), and constant scales whose products with the extents are no whole sizes, which
TVM's converter computes as another function.

The output's resized dims become variables bound when the model runs (``run_time_values.run_time_dims``):
``floor(size * scale)`` for scales; for sizes, the sizes, or under ``keep_aspect_ratio_policy`` one scale for every
resized axis (the least or the most of ``size / extent``) and ``round_half_up(extent * scale)``. The resize itself
follows ``onnx.reference``, one axis at a time as it does (so a tf_crop_and_resize's extrapolation on one axis is
interpolated along the next, as there): each output coordinate is mapped to the input in float64 by the
coordinate transformation mode, with the scale as given (TVM's resize uses the ratio of the extents, which differs
where ``extent * scale`` is no whole number); ``nearest`` picks the neighbour its rounding mode names, ``linear``
and ``cubic`` weigh 2 and 4 neighbours (cubic's ``cubic_coeff_a``; ``exclude_outside`` renormalizes over those
inside), the input's edge standing in beyond it. With ``antialias`` linear's and cubic's kernels stretch by
``1 / scale`` where an axis shrinks, over as many neighbours as they cover (a number bound when the model runs);
TVM's resize does not antialias, so every antialiased linear or cubic Resize is byoc's.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import computed, run_time_dims, static_shape, bound_none_negative
from byoc.vendor.values import const_array, is_tensor_const

MODES = ("nearest", "linear", "cubic")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
POLICIES = ("stretch", "not_larger", "not_smaller")


def _text(attrs, name: str, default: str) -> str:
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def resize_by_run_time_scales(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """A Resize (opset 11 on) whose ``scales`` or ``sizes`` input is computed at run time (module docstring), or
    None: constant ones (TVM's converter), an unknown rank, a dtype other than float, an attribute it does not
    know."""
    if len(inputs) < 3:  # opset 10's (X, scales): its own semantics, TVM's converter
        return None
    x, roi, scales, sizes = (list(inputs) + [None])[:4]
    shape = static_shape(x)
    if scales is not None and (static_shape(scales) or [1])[0] == 0:
        scales = None  # an empty scales beside sizes
    given = scales if scales is not None else sizes
    if given is None or shape is None or "float" not in str(x.ty.dtype):
        return None
    antialias = bool(attrs.get("antialias", 0)) and _text(attrs, "mode", "nearest") != "nearest"
    if not computed(given) and not antialias and not _scaled_to_no_whole_size(scales, shape, attrs):
        return None
    options = {"mode": _text(attrs, "mode", "nearest"),
               "transform": _text(attrs, "coordinate_transformation_mode", "half_pixel"),
               "nearest": _text(attrs, "nearest_mode", "round_prefer_floor"),
               "a": float(attrs.get("cubic_coeff_a", -0.75)), "exclude": bool(attrs.get("exclude_outside", 0)),
               "extrapolation": float(attrs.get("extrapolation_value", 0.0))}
    policy = _text(attrs, "keep_aspect_ratio_policy", "stretch")
    if (options["mode"] not in MODES or options["transform"] not in TRANSFORMS or options["nearest"] not in NEAREST_MODES
            or policy not in POLICIES):
        return None
    rank = len(shape)
    axes = [int(a) % rank for a in attrs.get("axes", [])] or list(range(rank))
    given_shape = static_shape(given)
    if given_shape is None or len(given_shape) != 1 or int(given_shape[0]) != len(axes):
        return None
    extents = relax.op.astype(relax.op.take(relax.op.shape_to_tensor(relax.ShapeExpr(shape)),
                                            relax.const(np.array(axes, np.int64)), axis=0), "float64")
    if given is scales:
        factors = bb.normalize(relax.op.astype(scales, "float64"))
        lengths = relax.op.astype(relax.op.floor(relax.op.multiply(factors, extents)), "int64")
    else:
        wanted = relax.op.astype(sizes, "int64")
        factors = relax.op.divide(relax.op.astype(wanted, "float64"), extents)
        if policy == "stretch":
            lengths = wanted
        else:
            one = (relax.op.min if policy == "not_larger" else relax.op.max)(factors)
            factors = relax.op.broadcast_to(one, relax.ShapeExpr([len(axes)]))
            lengths = relax.op.astype(relax.op.floor(relax.op.add(relax.op.multiply(factors, extents),
                                                                 relax.const(0.5, "float64"))), "int64")
        factors = bb.normalize(factors)
    lengths = bb.normalize(lengths)
    bound_none_negative(lengths, bb)  # a negative scale or size fails the run
    dims = run_time_dims(lengths, len(axes), "resized", bb)
    box = _roi(roi, axes, rank, bb) if options["transform"] == "tf_crop_and_resize" else None
    if options["transform"] == "tf_crop_and_resize" and box is None:
        return None
    # an axis a constant scale of 1 leaves as it is, outside a crop (onnx.reference skips it too; a run-time
    # scale may be anything)
    kept = _unit_scales(scales) if given is scales and options["transform"] != "tf_crop_and_resize" else set()
    steps = [(index, axis, length) for index, (axis, length) in enumerate(zip(axes, dims)) if index not in kept]
    result = x
    if antialias:  # each axis's taps: 2 - 2 * (floor(-support / min(scale, 1)) + 1), support 1 (linear) or 2 (cubic)
        support = relax.const(-1.0 if options["mode"] == "linear" else -2.0, "float64")
        shrink = relax.op.minimum(factors, relax.const(1.0, "float64"))
        starts = relax.op.add(relax.op.floor(relax.op.divide(support, shrink)), relax.const(1.0, "float64"))
        counts = relax.op.astype(relax.op.subtract(relax.const(2.0, "float64"),
                                                   relax.op.multiply(relax.const(2.0, "float64"), starts)), "int64")
        taps = run_time_dims(bb.normalize(counts), len(axes), "taps", bb)
        for index, axis, length in steps:
            result = bb.emit_te(_antialiased_axis, result, factors, box, index, axis, length, taps[index], options,
                                primfunc_name_hint="run_time_resize")
        return result
    for index, axis, length in steps:
        result = bb.emit_te(_resize_axis, result, factors, box, index, axis, length, options,
                            primfunc_name_hint="run_time_resize")
    return result


def upsample_by_run_time_scales(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """Upsample (opset 9: its scales an input) as the Resize it was replaced by: coordinates ``i / scale``
    (asymmetric), nearest rounding down (``repeat`` for whole scales, as onnx.reference's), or linear; None for
    opset 7's attribute, or the forms :func:`resize_by_run_time_scales` leaves to TVM."""
    if len(inputs) != 2:
        return None
    mode = _text(attrs, "mode", "nearest")
    return resize_by_run_time_scales([inputs[0], None, inputs[1]], {
        "mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, bb)


def _unit_scales(scales) -> set:
    """The positions of constant ``scales`` that are 1 (none for scales computed at run time)."""
    if not is_tensor_const(scales):
        return set()
    return {i for i, f in enumerate(const_array(scales).reshape(-1)) if float(f) == 1.0}


def _scaled_to_no_whole_size(scales, shape: list, attrs) -> bool:
    """Whether constant ``scales`` times the extents of the input's ``shape`` are no whole sizes somewhere: TVM's
    resize would compute another function (it maps coordinates by the ratio of the extents)."""
    if scales is None or not is_tensor_const(scales):
        return False
    factors = const_array(scales).reshape(-1).astype(np.float64)
    axes = [int(a) % len(shape) for a in attrs.get("axes", [])] or list(range(len(shape)))
    if len(factors) != len(axes):
        return False
    # within float32's rounding of the scale (5 x 0.6f is 3.0000001) the ratio TVM maps by is the scale
    return any(isinstance(shape[a], tirx.IntImm) and abs(int(shape[a]) * f - round(int(shape[a]) * f)) > 1e-6
               for a, f in zip(axes, factors))


def _roi(roi, axes: list, rank: int, bb) -> Optional[relax.Expr]:
    """tf_crop_and_resize's box as float64 ``[starts..., ends...]`` for the resized axes, or None without one."""
    roi_shape = static_shape(roi) if roi is not None else None
    if roi_shape is None or len(roi_shape) != 1:
        return None
    count = int(roi_shape[0])
    box = relax.op.astype(roi, "float64")
    if count == 2 * rank and len(axes) != rank:  # one start and end per axis of the input: the resized ones'
        picks = axes + [rank + a for a in axes]
        box = relax.op.take(box, relax.const(np.array(picks, np.int64)), axis=0)
    elif count != 2 * len(axes):
        return None
    return bb.normalize(box)


def _resize_axis(x: te.Tensor, factors: te.Tensor, box: Optional[te.Tensor], index: int, axis: int, length,
                 options: dict) -> te.Tensor:
    """``x`` resized along ``axis`` to ``length`` by the scale ``factors[index]`` (module docstring)."""
    n = x.shape[axis]
    dims = list(x.shape)
    dims[axis] = length
    f64 = "float64"

    def read(at: list, i) -> tirx.PrimExpr:
        return tirx.Cast(f64, x(*[i if d == axis else at[d] for d in range(len(at))]))

    def element(*at):
        at = list(at)
        position = _source(at[axis], factors, box, index, n, length, options["transform"])
        low = tirx.floor(position)
        ratio = position - low
        first = tirx.Cast("int64", low)

        def clamp(i):
            return tirx.max(tirx.min(i, n - 1), tirx.IntImm("int64", 0))

        mode = options["mode"]
        if mode == "nearest":
            up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": ratio < 0.0,
                  "ceil": ratio > 0.0}[options["nearest"]]
            value = read(at, clamp(first + tirx.Select(up, tirx.IntImm("int64", 1), tirx.IntImm("int64", 0))))
        else:
            taps = _linear(ratio) if mode == "linear" else _cubic(ratio, options["a"])
            start = 0 if mode == "linear" else -1
            weights = []
            for k, weight in enumerate(taps):
                i = first + (start + k)
                if options["exclude"]:
                    weight = tirx.Select(tirx.all(i >= 0, i < n), weight, tirx.const(0.0, f64))
                weights.append((weight, read(at, clamp(i))))
            value = sum((w * v for w, v in weights[1:]), weights[0][0] * weights[0][1])
            if options["exclude"]:
                value = value / sum((w for w, _ in weights[1:]), weights[0][0])
        return tirx.Cast(x.dtype, _extrapolated(value, position, n, options))

    return te.compute(dims, element, name="resize")


def _source(o, factors: te.Tensor, box: Optional[te.Tensor], index: int, n, length, transform: str):
    """The input coordinate (float64) that output index ``o`` along an axis of ``n`` resized to ``length`` by
    ``factors[index]`` maps to, as onnx.reference's: its ``output_width`` is ``n * scale``, not ``length``."""
    f64 = "float64"
    scale, extent = factors[index], tirx.Cast(f64, n)
    width, out = scale * extent, tirx.Cast(f64, o)
    if transform == "align_corners":
        return tirx.Select(width == 1.0, tirx.const(0.0, f64), out * (extent - 1.0) / (width - 1.0))
    if transform == "asymmetric":
        return out / scale
    if transform == "tf_crop_and_resize":
        start, end = box[index], box[index + int(box.shape[0]) // 2]  # box: [starts..., ends...]
        inner = tirx.Select(width == 1.0, (end - start) * (extent - 1.0) / 2.0,
                            out * (end - start) * (extent - 1.0) / (width - 1.0))
        return inner + start * (extent - 1.0)
    centred = (out + 0.5) / scale - 0.5
    if transform == "pytorch_half_pixel":
        return tirx.Select(width == 1.0, tirx.const(-0.5, f64), centred)
    if transform == "half_pixel_symmetric":
        return extent / 2.0 * (1.0 - tirx.Cast(f64, length) / width) + centred
    return centred  # half_pixel


def _extrapolated(value, position, n, options: dict):
    """tf_crop_and_resize's extrapolation value where ``position`` is outside the axis of ``n``; else ``value``."""
    if options["transform"] != "tf_crop_and_resize":
        return value
    outside = tirx.any(position < 0.0, position > tirx.Cast("float64", n) - 1.0)
    return tirx.Select(outside, tirx.const(options["extrapolation"], "float64"), value)


def _antialiased_axis(x: te.Tensor, factors: te.Tensor, box: Optional[te.Tensor], index: int, axis: int, length,
                      taps, options: dict) -> te.Tensor:
    """``x`` resized along ``axis`` as :func:`_resize_axis`, antialiased: linear's and cubic's kernels stretched by
    ``1 / scale`` where the axis shrinks, over ``taps`` neighbours (as many as the stretched support covers), their
    weights normalized to sum 1 (onnx.reference's ``_linear_coeffs_antialias``, ``_cubic_coeffs_antialias``)."""
    n = x.shape[axis]
    dims = list(x.shape)
    dims[axis] = length
    f64 = "float64"
    support = 1.0 if options["mode"] == "linear" else 2.0

    def geometry(o):  # the first neighbour's index, the position's distance past the one before it, the stretch
        position = _source(o, factors, box, index, n, length, options["transform"])
        base = tirx.Cast("int64", tirx.ceil(position)) - 1  # ratio in (0, 1], as onnx.reference's
        shrink = tirx.min(factors[index], tirx.const(1.0, f64))
        start = tirx.Cast("int64", tirx.floor(-support / shrink)) + 1
        return position, base + start, tirx.Cast(f64, start) - (position - tirx.Cast(f64, base)), shrink

    def weight(o, k):
        _, first, offset, shrink = geometry(o)
        distance = tirx.abs(shrink * (offset + tirx.Cast(f64, k)))
        if options["mode"] == "linear":
            w = tirx.max(1.0 - distance, tirx.const(0.0, f64))
        else:
            a = tirx.const(options["a"], f64)
            near = ((a + 2.0) * distance - (a + 3.0)) * distance * distance + 1.0
            far = ((a * distance - 5.0 * a) * distance + 8.0 * a) * distance - 4.0 * a
            w = tirx.Select(distance <= 1.0, near, tirx.Select(distance < 2.0, far, tirx.const(0.0, f64)))
        if options["exclude"]:
            i = first + k
            w = tirx.Select(tirx.all(i >= 0, i < n), w, tirx.const(0.0, f64))
        return w

    k = te.reduce_axis((0, taps), name="tap")
    total = te.compute([length], lambda o: te.sum(weight(o, k), axis=k), name="resize_weights")
    j = te.reduce_axis((0, taps), name="tap")

    def weighed(*at):
        at = list(at)
        first = geometry(at[axis])[1]
        i = tirx.max(tirx.min(first + j, n - 1), tirx.IntImm("int64", 0))  # the edge beyond the input
        source = x(*[i if d == axis else at[d] for d in range(len(at))])
        return te.sum(weight(at[axis], j) * tirx.Cast(f64, source), axis=j)

    sums = te.compute(dims, weighed, name="resize_sums")

    def element(*at):
        value = sums(*at) / total[at[axis]]
        return tirx.Cast(x.dtype, _extrapolated(value, geometry(at[axis])[0], n, options))

    return te.compute(dims, element, name="resize")


def _linear(ratio) -> list:
    return [1.0 - ratio, ratio]


def _cubic(ratio, a: float) -> list:
    """onnx.reference's cubic coefficients of the neighbours at -1, 0, 1 and 2 from the floor."""
    a = tirx.const(a, "float64")
    one = 1.0 - ratio
    return [((a * (ratio + 1.0) - 5.0 * a) * (ratio + 1.0) + 8.0 * a) * (ratio + 1.0) - 4.0 * a,
            ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0,
            ((a + 2.0) * one - (a + 3.0)) * one * one + 1.0,
            ((a * (one + 1.0) - 5.0 * a) * (one + 1.0) + 8.0 * a) * (one + 1.0) - 4.0 * a]

"""ONNX's Resize whose ``scales`` or ``sizes`` are computed at run time (a graph input, or a shape computation: the
form older exports of ``F.interpolate(scale_factor=...)`` write), which TVM's converter refuses ("Type Var for
scale is currently unsupported"), and constant scales whose products with the extents are no whole sizes, which
TVM's converter computes as another function.

The output's resized dims become variables bound when the model runs (``run_time_values._run_time_dims``):
``floor(size * scale)`` for scales; for sizes, the sizes, or under ``keep_aspect_ratio_policy`` one scale for every
resized axis (the least or the most of ``size / extent``) and ``round_half_up(extent * scale)``. The resize itself
follows ``onnx.reference``, one axis at a time as it does (so a tf_crop_and_resize's extrapolation on one axis is
interpolated along the next, as there): each output coordinate is mapped to the input in float64 by the
coordinate transformation mode, with the scale as given (TVM's resize uses the ratio of the extents, which differs
where ``extent * scale`` is no whole number); ``nearest`` picks the neighbour its rounding mode names, ``linear``
and ``cubic`` weigh 2 and 4 neighbours (cubic's ``cubic_coeff_a``; ``exclude_outside`` renormalizes over those
inside), the input's edge standing in beyond it. Antialiasing is refused before the import
(``prepare.standard_ops._resize``) where an axis may shrink, as it is for every Resize.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import _computed, _run_time_dims, _static_shape, bound_none_negative
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
    shape = _static_shape(x)
    if scales is not None and (_static_shape(scales) or [1])[0] == 0:
        scales = None  # an empty scales beside sizes
    given = scales if scales is not None else sizes
    if given is None or shape is None or "float" not in str(x.ty.dtype):
        return None
    if not _computed(given) and not _scaled_to_no_whole_size(scales, shape, attrs):
        return None
    options = {"mode": _text(attrs, "mode", "nearest"),
               "transform": _text(attrs, "coordinate_transformation_mode", "half_pixel"),
               "nearest": _text(attrs, "nearest_mode", "round_prefer_floor"),
               "a": float(attrs.get("cubic_coeff_a", -0.75)), "exclude": bool(attrs.get("exclude_outside", 0)),
               "extrapolation": float(attrs.get("extrapolation_value", 0.0))}
    policy = _text(attrs, "keep_aspect_ratio_policy", "stretch")
    if (options["mode"] not in MODES or options["transform"] not in TRANSFORMS or options["nearest"] not in NEAREST_MODES
            or policy not in POLICIES or attrs.get("antialias", 0)):
        return None
    rank = len(shape)
    axes = [int(a) % rank for a in attrs.get("axes", [])] or list(range(rank))
    given_shape = _static_shape(given)
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
    dims = _run_time_dims(lengths, len(axes), "resized", bb)
    box = _roi(roi, axes, rank, bb) if options["transform"] == "tf_crop_and_resize" else None
    if options["transform"] == "tf_crop_and_resize" and box is None:
        return None
    result = x
    for index, (axis, length) in enumerate(zip(axes, dims)):
        result = bb.emit_te(_resize_axis, result, factors, box, index, axis, length, options,
                            primfunc_name_hint="run_time_resize")
    return result


def _scaled_to_no_whole_size(scales, shape: list, attrs) -> bool:
    """Whether constant ``scales`` times the extents of the input's ``shape`` are no whole sizes somewhere: TVM's
    resize would compute another function (it maps coordinates by the ratio of the extents)."""
    if scales is None or not is_tensor_const(scales):
        return False
    factors = const_array(scales).reshape(-1).astype(np.float64)
    axes = [int(a) % len(shape) for a in attrs.get("axes", [])] or list(range(len(shape)))
    if len(factors) != len(axes):
        return False
    return any(isinstance(shape[a], tirx.IntImm) and not float(int(shape[a]) * f).is_integer()
               for a, f in zip(axes, factors))


def _roi(roi, axes: list, rank: int, bb) -> Optional[relax.Expr]:
    """tf_crop_and_resize's box as float64 ``[starts..., ends...]`` for the resized axes, or None without one."""
    roi_shape = _static_shape(roi) if roi is not None else None
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

    def source(o) -> tirx.PrimExpr:  # the input coordinate output index o maps to, as onnx.reference's
        scale, extent = factors[index], tirx.Cast(f64, n)
        width, out = scale * extent, tirx.Cast(f64, o)
        transform = options["transform"]
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
            offset = extent / 2.0 * (1.0 - tirx.Cast(f64, length) / width)
            return offset + centred
        return centred  # half_pixel

    def element(*at):
        at = list(at)
        position = source(at[axis])
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
        if options["transform"] == "tf_crop_and_resize":  # outside the input: the extrapolation value
            outside = tirx.any(position < 0.0, position > tirx.Cast(f64, n) - 1.0)
            value = tirx.Select(outside, tirx.const(options["extrapolation"], f64), value)
        return tirx.Cast(x.dtype, value)

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

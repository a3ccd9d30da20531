"""ONNX ops and attributes TVM's importer lacks or silently ignores, written as ops it converts right (one entry
per op).

Ops ONNX defines by a function are inlined as that function instead
(:mod:`~byoc.pipeline.frontend.prepare.function_ops`); this table holds ops whose definition is prose only, and
attributes TVM's converters read past, giving a wrong answer without an error:

* LpNormalization and ReverseSequence (TVM has neither);
* IsInf with ``detect_negative`` or ``detect_positive`` 0 (TVM flags both infinities);
* SpaceToDepth in ``mode="CRD"`` (opset 28; TVM computes DCR);
* ConvTranspose with ``output_shape`` (TVM ignores it): explicit pads and output padding instead, as ONNX
  works them out;
* BatchNormalization with ``training_mode=1`` (TVM computes the inference form): the batch's own statistics;
* BitShift by an amount outside ``[0, bits)``: ONNX's 0 (a right shift of a negative signed value: -1), where
  TVM's shift is the machine's, which wraps the amount;
* a float Mod with ``fmod=0`` by an infinity: ONNX's (Python's) x where x has the divisor's sign or is zero, else
  the divisor, where TVM's ``x - floor(x / y) * y`` is NaN;
* EyeLike with a ``dtype`` (TVM's converter refuses one that differs from the input's): EyeLike in the input's
  type, then a Cast;
* Resize is refused by name where TVM would compute another function and byoc's own resize
  (``frontend/run_time_resize.py``, which antialiases, and maps coordinates by a scale whose product with the
  size is not whole) cannot take it: ``antialias=1`` on an input of unknown rank or not float.

Each entry says which nodes it applies to; :func:`standard_rewrites` gives the entries a graph needs, so a model
with none of these forms is not copied. The entries go through
:func:`~byoc.pipeline.frontend.prepare.node_rewrite.rewrite_nodes`, as the contrib ops do.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import helper

from byoc.pipeline.frontend.prepare.node_rewrite import NodeRewrite, Rewrites, node_key

__all__ = ["standard_rewrites"]


def _attr(node: onnx.NodeProto, name: str, default=None):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _lp_normalization(u: NodeRewrite) -> None:
    """LpNormalization(x) = x / ||x||_p along ``axis`` (p 1 or 2); a zero norm divides by 1, as x is 0 there."""
    p, axis = u.attr("p", 2), u.attr("axis", -1)
    if p not in (1, 2):
        raise u.refuse_attr("p", "p = 1 or 2 (ONNX's LpNormalization)")
    norm = u.reduce("ReduceL2" if p == 2 else "ReduceL1", u.input(0), [axis], "norm")
    zero = u.add("Equal", [norm, u.scalar("zero", 0.0)], "norm_is_zero")
    safe = u.add("Where", [zero, u.scalar("one", 1.0), norm], "safe_norm")
    u.add("Div", [u.input(0), safe], "normalized", output=u.output(0))


def _is_inf(u: NodeRewrite) -> None:
    """IsInf of one sign: IsInf(x) and x > -x (x < -x): the sign test in x's own type."""
    x, negative, positive = u.input(0), u.attr("detect_negative", 1), u.attr("detect_positive", 1)
    infinite = u.add("IsInf", [x], "infinite")
    if not negative and not positive:
        u.add("And", [infinite, u.add("Not", [infinite], "finite")], "none", output=u.output(0))
        return
    sign = u.add("Greater" if positive else "Less", [x, u.add("Neg", [x], "negated")], "signed")
    u.add("And", [infinite, sign], "of_sign", output=u.output(0))


def _space_to_depth_crd(u: NodeRewrite) -> None:
    """SpaceToDepth, mode CRD: channel c's b x b block in place (c * b * b + i * b + j), as Reshape, Transpose,
    Reshape."""
    shape, b = u.shapes.get(u.input(0)), int(u.attr("blocksize"))
    if shape is None or len(shape) != 4 or any(not isinstance(d, int) for d in shape[1:]):
        raise u.refuse("mode=CRD over a channel count or spatial size not known when the model is compiled",
                       "give the model static input shapes (dims=)")
    _, c, h, w = shape
    blocks = u.add("Reshape", [u.input(0), u.ints("blocks", [0, c, h // b, b, w // b, b])], "blocked")
    moved = u.add("Transpose", [blocks], "moved", perm=[0, 1, 3, 5, 2, 4])
    u.add("Reshape", [moved, u.ints("depth", [0, c * b * b, h // b, w // b])], "depth", output=u.output(0))


def _conv_transpose_output_shape(u: NodeRewrite) -> None:
    """ConvTranspose with ``output_shape``: the pads ONNX works out from it, a negative end pad as output padding."""
    x_shape, w_shape = u.shapes.get(u.input(0)), None
    if u.input(1) in u.constants:
        w_shape = list(u.constants[u.input(1)].shape)
    elif u.shapes.get(u.input(1)) is not None:
        w_shape = u.shapes[u.input(1)]
    if x_shape is None or w_shape is None or any(not isinstance(d, int) for d in x_shape[2:] + w_shape[2:]):
        raise u.refuse("output_shape over sizes not known when the model is compiled",
                       "give the model static input shapes (dims=), or pads instead of output_shape")
    n = len(x_shape) - 2
    out = list(u.attr("output_shape"))[-n:]
    kernel = list(u.attr("kernel_shape", w_shape[2:]))
    strides, dilations = list(u.attr("strides", [1] * n)), list(u.attr("dilations", [1] * n))
    output_padding = list(u.attr("output_padding", [0] * n))
    upper = u.attr("auto_pad", b"NOTSET") in (b"SAME_UPPER", "SAME_UPPER")
    begin, end = [], []
    for i in range(n):
        total = strides[i] * (x_shape[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1 - out[i]
        first, second = (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)
        if first < 0:
            raise u.refuse(f"output_shape {out} (a negative start padding along axis {2 + i})",
                           "give pads instead of output_shape")
        if second < 0:  # the output reaches past the full result: output padding, as ONNX's reference pads it
            output_padding[i] -= second
            second = 0
        begin.append(first)
        end.append(second)
    attrs = u.plain_attrs(drop=("output_shape", "auto_pad", "pads", "output_padding"))
    u.add("ConvTranspose", [name for name in u.node.input], "conv_transpose", output=u.output(0),
          pads=begin + end, output_padding=output_padding, **attrs)


def _batch_norm_training(u: NodeRewrite) -> None:
    """BatchNormalization, training_mode=1 (TVM computes the inference form): x normalized by its own mean and
    (population) variance over every axis but the channels, and the running statistics updated by ``momentum``
    (``running = given * momentum + batch * (1 - momentum)``), as onnx.reference computes them."""
    x = u.input(0)
    rank = u.rank(x)
    if rank is None or rank < 2:
        raise u.refuse(f"training_mode=1 on an input of {'unknown rank' if rank is None else f'rank {rank}'}",
                       "give the input's shape")
    axes = spread = [0] + list(range(2, rank))  # reduced over; a [C] vector unsqueezed there broadcasts against x
    dtype = u.dtype(x) or np.dtype(np.float32)
    mean = u.reduce("ReduceMean", x, axes, "batch_mean", keepdims=0)
    centred = u.add("Sub", [x, u.unsqueeze(mean, spread, "mean_spread")], "centred")
    variance = u.reduce("ReduceMean", u.add("Mul", [centred, centred], "squares"), axes, "batch_variance", keepdims=0)
    deviation = u.add("Sqrt", [u.add("Add", [variance, u.const("epsilon", np.array(u.attr("epsilon", 1e-5), dtype))],
                                     "variance_eps")], "deviation")
    scale = u.add("Div", [u.input(1), deviation], "scale_over_deviation")
    normalized = u.add("Mul", [centred, u.unsqueeze(scale, spread, "scale_spread")], "normalized")
    u.add("Add", [normalized, u.unsqueeze(u.input(2), spread, "bias_spread")], "batch_norm", output=u.output(0))
    momentum = float(u.attr("momentum", 0.9))
    for index, given, batch in ((1, u.input(3), mean), (2, u.input(4), variance)):
        if u.read(index):
            u.add("Add", [u.add("Mul", [given, u.const(f"momentum{index}", np.array(momentum, dtype))], f"kept{index}"),
                          u.add("Mul", [batch, u.const(f"rest{index}", np.array(1.0 - momentum, dtype))], f"new{index}")],
                  f"running{index}", output=u.output(index))


def _bit_shift(u: NodeRewrite) -> bool:
    """BitShift whose amount may be outside [0, bits): the shift where it is inside, ONNX's fill elsewhere."""
    x, amount, dtype = u.input(0), u.input(1), u.dtype(u.input(0))
    if dtype is None or dtype.kind not in "iu":
        return False  # BitShift is of integers: a type the model does not say keeps TVM's shift
    bits, right = dtype.itemsize * 8, u.attr("direction", b"LEFT") in (b"RIGHT", "RIGHT")
    inside = u.add("Less", [amount, u.int_scalar("bits", bits, dtype)], "inside")
    if dtype.kind == "i":
        inside = u.add("And", [inside, u.add("GreaterOrEqual", [amount, u.int_scalar("zero", 0, dtype)],
                                             "not_negative")], "in_range")
    safe = u.add("Where", [inside, amount, u.int_scalar("no_shift", 0, dtype)], "safe_amount")
    shifted = u.add("BitShift", [x, safe], "shifted", direction="RIGHT" if right else "LEFT")
    fill = u.int_scalar("fill", 0, dtype)
    if right and dtype.kind == "i":  # the sign, shifted in from the left
        fill = u.add("Where", [u.add("Less", [x, fill], "negative"), u.int_scalar("ones", -1, dtype), fill], "sign")
    u.add("Where", [inside, shifted, fill], "bit_shift", output=u.output(0))
    return True


def _float_mod(u: NodeRewrite) -> bool:
    """Mod (fmod=0) of floats, with ONNX's remainder by an infinity: x where x is zero or has y's sign, else y."""
    x, y, dtype = u.input(0), u.input(1), u.dtype(u.input(0))
    if dtype is None or dtype.kind != "f":
        return False
    plain = u.add("Mod", [x, y], "remainder", fmod=0)
    zero = u.const("zero", np.array(0, dtype))
    kept = u.add("Or", [u.add("Equal", [u.add("Sign", [x], "x_sign"), u.add("Sign", [y], "y_sign")], "same_sign"),
                        u.add("Equal", [x, zero], "x_zero")], "x_kept")
    finite = u.add("Not", [u.add("Or", [u.add("IsInf", [x], "x_inf"), u.add("IsNaN", [x], "x_nan")], "x_unbounded")],
                   "x_finite")
    by_infinity = u.add("And", [u.add("IsInf", [y], "y_inf"), finite], "by_infinity")
    u.add("Where", [by_infinity, u.add("Where", [kept, x, y], "infinite_case"), plain], "mod", output=u.output(0))
    return True


def _resize(u: NodeRewrite) -> bool:
    """An antialiased linear or cubic Resize that byoc's own resize cannot take (an input of unknown rank, or not
    float), refused by name: TVM's would compute another function (module docstring). False keeps the rest."""
    mode = u.attr("mode", b"nearest")
    if u.attr("antialias", 0) and mode not in (b"nearest", "nearest"):
        dtype = u.dtype(u.input(0))
        if u.rank(u.input(0)) is None or dtype is None or dtype.kind != "f":
            raise u.refuse_attr("antialias", "antialias=1 on a float input of known rank")
    return False


def _eye_like_dtype(u: NodeRewrite) -> None:
    """EyeLike(x, dtype=T): the identity in x's type (ones and zeros, exact in every type), cast to T."""
    eye = u.add("EyeLike", [u.input(0)], "eye", k=u.attr("k", 0))
    u.cast(eye, u.attr("dtype"), "typed", output=u.output(0))


def _reverse_sequence(u: NodeRewrite) -> None:
    """ReverseSequence (TVM has none): ``y[t, b] = x[len_b - 1 - t, b]`` where ``t < len_b``, else ``x[t, b]``, as a
    GatherElements along the time axis of indices worked out from the lengths (rows: time, columns: batch)."""
    shape, time_axis = u.shapes.get(u.input(0)), u.attr("time_axis", 0)  # the batch axis is the other of 0 and 1
    if shape is None or not isinstance(shape[time_axis], int):
        raise u.refuse("a time axis whose length is not known when the model is compiled",
                       "give the model static input shapes (dims=)")
    steps = np.arange(shape[time_axis], dtype=np.int64).reshape((-1, 1) if time_axis == 0 else (1, -1))
    t = u.const("steps", steps)
    lengths = u.unsqueeze(u.input(1), [0 if time_axis == 0 else 1], "lengths")
    last = u.add("Sub", [lengths, u.int_scalar("one", 1)], "last")
    inside = u.add("Less", [t, lengths], "inside")
    index = u.add("Where", [inside, u.add("Sub", [last, t], "reversed"), t], "index")
    if len(shape) > 2:  # the same index for every element of a step: broadcast over the trailing axes
        index = u.unsqueeze(index, list(range(2, len(shape))), "index_expanded")
        index = u.add("Expand", [index, u.add("Shape", [u.input(0)], "shape")], "index_full")
    u.add("GatherElements", [u.input(0), index], "reversed_sequence", output=u.output(0), axis=time_axis)


#: (domain, op type) -> (which of its nodes need the entry, the rewrite)
_ENTRIES: dict[tuple[str, str], tuple[Callable[[onnx.NodeProto], bool], Callable[[NodeRewrite], None]]] = {
    ("", "LpNormalization"): (lambda node: True, _lp_normalization),
    ("", "IsInf"): (lambda node: not (_attr(node, "detect_negative", 1) and _attr(node, "detect_positive", 1)),
                    _is_inf),
    ("", "SpaceToDepth"): (lambda node: _attr(node, "mode", b"DCR") in (b"CRD", "CRD"), _space_to_depth_crd),
    ("", "ConvTranspose"): (lambda node: _attr(node, "output_shape") is not None, _conv_transpose_output_shape),
    ("", "BatchNormalization"): (lambda node: bool(_attr(node, "training_mode", 0)), _batch_norm_training),
    ("", "Resize"): (lambda node: True, _resize),
    ("", "BitShift"): (lambda node: True, _bit_shift),
    ("", "Mod"): (lambda node: not _attr(node, "fmod", 0), _float_mod),
    ("", "ReverseSequence"): (lambda node: True, _reverse_sequence),
    ("", "EyeLike"): (lambda node: _attr(node, "dtype") is not None, _eye_like_dtype),
}


def standard_rewrites(graph: onnx.GraphProto) -> Rewrites:
    """The entries ``graph``'s nodes need, each leaving the nodes of its op it does not apply to as they are."""
    def only_where(applies, rewrite):
        return lambda u: rewrite(u) if applies(u.node) else False

    keys = {node_key(n) for n in graph.node if node_key(n) in _ENTRIES and _ENTRIES[node_key(n)][0](n)}
    return {key: only_where(*_ENTRIES[key]) for key in keys}

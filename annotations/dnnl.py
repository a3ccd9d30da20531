"""Rules of the ``dnnl`` vendor: what the oneDNN runtime executes, and when.

Heavy ops with what oneDNN folds into them (post-ops), largest patterns
first:

* conv2d and conv1d (depthwise too) [+ per-channel constant bias] [+ inference
  batch norm] [+ residual add] [+ relu | clip], or [+ bias] [+ batch norm] +
  hard-sigmoid | hard-swish | swish;
* conv2d_transpose [+ per-channel bias] [+ relu | clip] (oneDNN deconvolution);
* matmul [+ constant bias over the last axis] [+ GELU (the erf form ONNX
  exports) | relu | a scalar scale];
* max / average pooling, reductions (mean, sum, max, min; global pooling and
  ONNX's n-ary Sum / Mean / Max / Min among them), softmax,
  layer norm over the last axis, inference batch norm, LRN (across channels),
  resize (the ONNX modes oneDNN resampling matches exactly), concat, split,
  strided slice (positive strides), constant padding, GELU, hard-sigmoid, hard-swish, swish, and
  element-wise add / subtract / multiply / divide, power by a scalar, relu,
  leaky relu, clip, sigmoid, tanh, sqrt, exp, negative, and the layout ops reshape,
  squeeze, expand_dims, flatten, transpose, stack and broadcast_to (adding
  unit dims, or copies of the input), so the glue between heavy ops stays in the same partition and
  activations keep oneDNN's blocked layouts.

Every check enforces a limit of the runtime (``codegens/dnnl/runtime/``)
and names it when it rejects: float32, non-empty shapes of rank <= 8 (dims may be symbolic),
NCHW/OIHW or NCW/OIW (IOHW for transposed convs), constant conv weights (they are
reordered once, at load), matmul operands of rank >= 2, the second operand of
an element-wise op broadcastable to the first (oneDNN broadcasts one side
only).

The vendor is published as an entry point of byoc (:mod:`byoc.vendor.registry`); importing this module
works even without oneDNN installed: partitioning and reports work anywhere; building says what to install.

Checks read the plain view of their match (``match.op``, ``match.ops_of``, ``match.tensor``: the
``OpCall`` and ``Tensor`` objects the codegen gets), where a symbolic dim is its text ("batch"), equal only
to itself. The runtime compiles each partition per set of sizes (graph_runtime/graph.h), so a dim need not be
static to be taken, in an int8 QDQ unit as in a float op.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from byoc.vendor.checks import (all_of, avg_pool_plain, constant_conv_weight, conv_layout_nchw, dtypes, known_ranks,
                                per_channel_bias, pool_layout_nchw, scalar)
from byoc.codegens.dnnl import DnnlCodegen
# The forms the codegen rewrites as one op, with the constants that make them that form (one source).
from byoc.codegens.dnnl.activations import GELU_CONSTANTS, HARDSWISH_CONSTANTS, near
from byoc.codegens.limits import MAX_RANK
from byoc.vendor import SUPPORTED, Match, OpRule, PatternRule, Vendor
from byoc.vendor.quantized import (OPTIONAL_UNIT_OPS, UNIT_OPS, WEIGHTED, QuantizedUnitRule, qdq_rules, qdq_supported,
                                   qdq_table_rule)

NAME = "dnnl"


def _non_empty(match: Match):
    """no zero-sized tensors."""
    for call in match.ops:
        # A split's results are _split_results' to judge; the operands a concat or stack takes as a tuple
        # are not looked at here.
        results = [] if call.op == "relax.split" else [call.output]
        for t in results + ([] if call.op in ("relax.concat", "relax.stack") else call.inputs):
            if t is not None and t.shape is not None and 0 in t.shape:
                return f"zero-sized tensor {t.shape}: oneDNN primitives need non-empty tensors"
    return SUPPORTED


_base = all_of(dtypes("float32"), known_ranks(MAX_RANK), _non_empty)
# Ops that only pick or move values also take the 8-bit integers a QOperator model leaves
# between its integer ops (codegens/dnnl/quantized.py runs them on the values as floats).
def _float_constants(match: Match):
    """constants float32 (8-bit tensors move through the runtime as activations only)."""
    for call in match.ops:
        for t in call.inputs:
            if t is not None and t.kind == "const" and t.dtype != "float32":
                return f"a {t.dtype} constant: the dnnl runtime holds float32 constants"
    return SUPPORTED


_moves = all_of(dtypes("float32", "uint8", "int8"), known_ranks(MAX_RANK), _non_empty, _float_constants)


def _number(value):
    """A scalar attribute (clip's bounds) as a float, else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# -- activations TVM imports as several ops ------------------------------------------------
# hardsigmoid: clip(alpha*x + beta, 0, 1) (ONNX HardSigmoid); hardswish: x*clip(x + 3, 0, 6)/6
# (ONNX HardSwish); hardswish_hardsigmoid: x*hardsigmoid(x) (exports that spell hard-swish
# out); swish: x*sigmoid(x) (SiLU). oneDNN runs each as one eltwise op or post-op.
ACTIVATIONS = ("hardswish", "hardswish_hardsigmoid", "hardsigmoid", "swish")


def _activation(kind: str, x):
    """(pattern, annotations) of activation ``kind`` applied to the pattern ``x``."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    def either(op, a, b):
        return is_op(op)(a, b) | is_op(op)(b, a)

    if kind == "swish":
        return either("relax.multiply", x, is_op("relax.sigmoid")(x)), {}
    if kind == "hardswish":
        c = {"hs_three": is_const(), "hs_six": is_const()}
        clipped = is_op("relax.clip")(either("relax.add", x, c["hs_three"]), wildcard(), wildcard())
        return either("relax.multiply", x, is_op("relax.divide")(clipped, c["hs_six"])), c
    c = {"hs_alpha": is_const(), "hs_beta": is_const()}
    hardsigmoid = is_op("relax.clip")(either("relax.add", either("relax.multiply", x, c["hs_alpha"]), c["hs_beta"]),
                                      wildcard(), wildcard())
    if kind == "hardsigmoid":
        return hardsigmoid, c
    return either("relax.multiply", x, hardsigmoid), c


def _activation_check(kind: str):
    clip_bounds = {"hardswish": (0.0, 6.0), "hardswish_hardsigmoid": (0.0, 1.0), "hardsigmoid": (0.0, 1.0)}

    def check(match: Match):
        rank = len(match.op.output.shape or ())
        for name in match.names:
            if not name.startswith("hs_"):
                continue
            value = scalar(match.tensor(name))
            shape = match.tensor(name).shape
            if value is None or len(shape) > rank:
                return f"{kind}: {name[3:]} of shape {shape} is not a scalar constant"
            if name in HARDSWISH_CONSTANTS and not near(value, HARDSWISH_CONSTANTS[name]):
                return f"{kind}: {value:g} where hard-swish has {HARDSWISH_CONSTANTS[name]:g}"
        for call in match.ops_of("relax.clip"):
            bounds = (_number(call.attrs.get("min")), _number(call.attrs.get("max")))
            if bounds != clip_bounds[kind]:
                lo, hi = clip_bounds[kind]
                return f"{kind}: clip bounds {bounds} are not ({lo:g}, {hi:g})"
        return SUPPORTED

    check.doc = {"hardswish": "x * clip(x + 3, 0, 6) / 6.",
                 "hardswish_hardsigmoid": "x * clip(a*x + b, 0, 1), scalar a, b.",
                 "hardsigmoid": "clip(a*x + b, 0, 1), scalar a, b.", "swish": "x * sigmoid(x)."}[kind]
    return check


def _activation_pattern(kind: str):
    def build():
        from tvm.relax.dpl import wildcard

        return _activation(kind, wildcard())

    return build


# -- conv2d -----------------------------------------------------------------------------
def _conv_residual(match: Match):
    """residual of the conv's output shape."""
    out = match.tensor("conv").shape
    residual = match.tensor("residual").shape
    if residual != out:
        return f"residual shape {residual} differs from the conv output {out}"
    return SUPPORTED


def _conv_pattern(op: str, bias: bool, batch_norm: bool, residual: bool, act: str):
    def build():
        from tvm.relax.dpl import is_const, is_op, is_tuple_get_item, wildcard

        conv = is_op(f"relax.nn.{op}")(wildcard(), is_const())
        out, annotations = conv, {"conv": conv}
        if bias:
            annotations["bias"] = is_const()
            out = is_op("relax.add")(out, annotations["bias"])
        if batch_norm:
            out = is_tuple_get_item(is_op("relax.nn.batch_norm")(out, is_const(), is_const(), is_const(), is_const()), 0)
        if residual:
            annotations["residual"] = wildcard()
            out = is_op("relax.add")(out, annotations["residual"])
        if act == "relu":
            out = is_op("relax.nn.relu")(out)
        elif act == "clip":
            out = is_op("relax.clip")(out, wildcard(), wildcard())
        elif act:
            out, constants = _activation(act, out)
            annotations.update(constants)
        return out, annotations

    return build


def _conv_rules(op: str):
    """The fused rules of ``op`` (conv1d or conv2d: oneDNN runs both, with the same post-ops).

    An inference batch norm after the conv (opset 13+ exports keep it; byoc's
    preparation fuses only older ones) is folded into the conv's weights and
    bias by the codegen (``codegens/dnnl/batch_norm.py``), so the activation
    after it is still a post-op.
    """
    rules = []
    # Longest first, so conv + bias + batch norm + residual + relu is taken whole.
    # The multi-op activations follow a conv (+ bias, + batch norm) only: no residual before them.
    combos = [*itertools.product((True, False), (True, False), (True, False), ("relu", "clip", "")),
              *itertools.product((True, False), (True, False), (False,), ACTIVATIONS)]
    for bias, bn, residual, act in sorted(combos, key=lambda c: -(c[0] + c[1] + c[2] + bool(c[3]))):
        name = op + "_bias" * bias + "_bn" * bn + "_add" * residual + (f"_{act}" if act else "")
        # A pattern cannot end in the batch norm's TupleGetItem (TVM roots a match at a call): the codegen
        # folds a batch norm taken alone into the conv before it all the same.
        if (bias or bn or residual or act) and not (bn and not residual and not act):
            check = all_of(_base, conv_layout_nchw, constant_conv_weight, *([per_channel_bias] if bias else []),
                           *([_batch_norm] if bn else []), *([_conv_residual] if residual else []),
                           *([_activation_check(act)] if act in ACTIVATIONS else []))
            rules.append(PatternRule(name, _conv_pattern(op, bias, bn, residual, act), check))
    rules.append(OpRule(op, f"relax.nn.{op}", all_of(_base, conv_layout_nchw, constant_conv_weight)))
    return rules


# -- matmul -----------------------------------------------------------------------------
def _matmul_ranks(match: Match):
    """operands of rank >= 2."""
    for call in match.ops_of("relax.matmul"):
        for operand in call.inputs[:2]:
            shape = operand.shape
            if shape is not None and len(shape) < 2:
                return f"matmul operand of rank {len(shape)} (oneDNN matmul takes rank >= 2; vectors stay on the host)"
    return SUPPORTED


def _matmul_bias(match: Match):
    """bias is a constant over the last axis."""
    n = match.tensor("matmul").shape[-1]
    shape = match.tensor("bias").shape
    if not shape or shape[-1] != n or any(d != 1 for d in shape[:-1]):
        return f"bias shape {shape} is not (..., {n}) over the last axis"
    return SUPPORTED


def _gelu(x, half: bool = True):
    """x * 0.5 * (1 + erf(x / sqrt 2)), as ONNX exports of GELU spell it (the legacy exporter's
    (x * (1 + e)) * 0.5, the dynamo exporter's x * (0.5 * (1 + e)) and x * (1 / sqrt 2)); without ``half``, the
    legacy form times 2, as it is left where the preparation folded the 0.5 into the next conv or matmul;
    (pattern, annotations)."""
    from tvm.relax.dpl import is_const, is_op

    c = {name: is_const() for name in GELU_CONSTANTS if half or name != "gelu_half"}
    scaled = is_op("relax.divide")(x, c["gelu_sqrt2"]) | is_op("relax.multiply")(x, c["gelu_inv_sqrt2"])
    one_plus = is_op("relax.add")(is_op("relax.erf")(scaled), c["gelu_one"])
    doubled = is_op("relax.multiply")(x, one_plus)
    if not half:
        return doubled, c
    return (is_op("relax.multiply")(doubled, c["gelu_half"])
            | is_op("relax.multiply")(x, is_op("relax.multiply")(one_plus, c["gelu_half"]))), c


def _gelu_constants(match: Match):
    """the constants are sqrt(2), 1 and (but for twice GELU) 0.5."""
    for name, want in GELU_CONSTANTS.items():
        if name not in match.names:
            continue
        got = scalar(match.tensor(name))
        if not near(got, want):
            shown = f"{got:g}" if got is not None else f"a tensor of shape {match.tensor(name).shape}"
            return f"{shown} where GELU has {want:g}: not the erf form of GELU"
    return SUPPORTED


def _scale_is_scalar(match: Match):
    """scale is a one-element constant."""
    if scalar(match.tensor("scale")) is None:
        return f"scale of shape {match.tensor('scale').shape} is not a scalar constant"
    return SUPPORTED


def _matmul_pattern(bias: bool, tail: str):
    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        matmul = is_op("relax.matmul")(wildcard(), wildcard())
        out, annotations = matmul, {"matmul": matmul}
        if bias:
            annotations["bias"] = is_const()
            out = is_op("relax.add")(out, annotations["bias"])
        if tail == "gelu":
            out, constants = _gelu(out)
            annotations.update(constants)
        elif tail == "relu":
            out = is_op("relax.nn.relu")(out)
        elif tail == "scale":
            annotations["scale"] = is_const()
            out = is_op("relax.divide")(out, annotations["scale"]) | is_op("relax.multiply")(out, annotations["scale"])
        return out, annotations

    return build


def _matmul_rules():
    base = all_of(_base, _matmul_ranks)
    tails = {"gelu": _gelu_constants, "relu": None, "scale": _scale_is_scalar, "": None}
    rules = []
    for bias in (True, False):
        for tail, extra in tails.items():
            if not bias and not tail:
                continue  # the plain matmul is an OpRule
            check = all_of(base, *([_matmul_bias] if bias else []), *([extra] if extra else []))
            name = "matmul" + "_bias" * bias + (f"_{tail}" if tail else "")
            rules.append(PatternRule(name, _matmul_pattern(bias, tail), check))
    return rules


# -- weight-only int4/int8 matmul (onnxruntime's MatMulNBits) ------------------------------
def _matmul_nbits_pattern(bits: int, sliced: bool, bias: bool):
    """MatMulNBits as byoc imports it (byoc.pipeline.frontend.matmul_nbits): the dequantization of a packed
    uint8 constant, then the matmul [+ a constant bias]; one unit, computed on the packed weight."""
    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        annotations = {"packed": is_const(), "zero_point": is_const(), "scale": is_const()}
        codes = annotations["packed"]
        if bits == 4:
            codes = is_op("relax.expand_dims")(codes)
            codes = is_op("relax.right_shift")(codes, is_const())
            codes = is_op("relax.bitwise_and")(codes, is_const())
            codes = is_op("relax.reshape")(codes, wildcard())
        w = is_op("relax.astype")(codes)
        w = is_op("relax.subtract")(w, annotations["zero_point"])
        w = is_op("relax.multiply")(w, annotations["scale"])
        w = is_op("relax.reshape")(w, wildcard())
        if sliced:
            w = is_op("relax.strided_slice")(w, varg_default_wildcard=True)
        w = is_op("relax.permute_dims")(w)
        out = annotations["matmul"] = is_op("relax.matmul")(wildcard(), w)
        if bias:
            annotations["bias"] = is_const()
            out = is_op("relax.add")(out, annotations["bias"])
        return out, annotations

    return build


def _matmul_nbits(match: Match):
    """the packed weight is uint8 [N, blocks, block*bits/8] (block a power of 2 >= 16), the activation float32."""
    from byoc.codegens.dnnl.nbits import nbits_geometry

    why = nbits_geometry(match)
    if isinstance(why, str):
        return why
    x = match.op.inputs[0] if match.op.op == "relax.matmul" else match.ops_of("relax.matmul")[0].inputs[0]
    if x.dtype != "float32" or len(x.shape or ()) < 2:
        return f"activation {x.dtype} of rank {len(x.shape or ())} (float32, rank >= 2)"
    return SUPPORTED


def _matmul_nbits_rules():
    rules = []
    for bits, sliced, bias in itertools.product((4, 8), (False, True), (True, False)):
        name = f"matmul_nbits{bits}" + "_sliced" * sliced + "_bias" * bias
        checks = all_of(_non_empty, _matmul_nbits, *([_matmul_bias] if bias else []))
        rules.append(PatternRule(name, _matmul_nbits_pattern(bits, sliced, bias), checks))
    return rules


# -- the rest -----------------------------------------------------------------------------
def _layer_norm_last_axis(match: Match):
    """normalizes over the last axis of a tensor of rank >= 2."""
    call = match.op
    rank = len(call.inputs[0].shape or ())
    axes = [int(a) for a in call.attrs["axes"]]
    if rank < 2 or [a % rank for a in axes] != [rank - 1]:
        return f"layer norm over axes {axes} of a rank-{rank} tensor (oneDNN: the last axis of rank >= 2 only)"
    return SUPPORTED


def _group_norm_over_channels(match: Match):
    """normalizes groups of the channels (axis 1) over all the dims after them."""
    call = match.op
    rank = len(call.inputs[0].shape or ())
    axes = sorted(int(a) % rank for a in call.attrs["axes"]) if rank else []
    if rank < 3 or int(call.attrs["channel_axis"]) % rank != 1 or axes != list(range(2, rank)):
        return (f"group norm over axes {axes} with channel axis {int(call.attrs['channel_axis'])} of a rank-{rank} "
                "tensor (dnnl: channel axis 1, normalized over every dim after it)")
    return SUPPORTED


def _both_broadcast(call) -> str:
    out, a, b = call.output.shape, call.inputs[0].shape, call.inputs[1].shape
    return f"operands {a} and {b} both broadcast to {out} (oneDNN broadcasts the second operand only)"


def _outer_product(a, b, out) -> bool:
    """a * b with one operand [..., M, 1] and the other [..., 1, N] over the output's leading dims."""
    rank = len(out)
    if rank < 2 or len(a) > rank or len(b) > rank:
        return False
    a, b = ((1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b)
    if a[-1] != 1:
        a, b = b, a
    return a[:-1] == out[:-1] and a[-1] == 1 and b[-2] == 1 and b[:-2] + b[-1:] == out[:-2] + out[-1:]


def _broadcast_second(match: Match):
    """the first operand has the output shape (the second may broadcast), or c - x, c / x with a scalar
    constant c, or an outer product [.., M, 1] * [.., 1, N]."""
    call = match.op
    out = call.output.shape
    a, b = (operand.shape for operand in call.inputs[:2])
    if a == out or (call.op in ("relax.add", "relax.multiply") and b == out):
        return SUPPORTED
    if call.op in ("relax.subtract", "relax.divide") and b == out and scalar(call.inputs[0]) is not None:
        return SUPPORTED  # the runtime computes it as an eltwise: linear (-1 * x + c) or pow (c * x^-1)
    if call.op == "relax.multiply" and _outer_product(a, b, out):
        return SUPPORTED  # a matmul with K = 1
    return _both_broadcast(call)


def _resize_supported(match: Match):
    """NCHW; linear with half_pixel; nearest at integer upscales with half_pixel + round_*, or asymmetric + floor."""
    call = match.op
    a = call.attrs
    xs, ys = call.inputs[0].shape, call.output.shape
    if a["layout"] != "NCHW" or len(xs) != 4:
        return f"resize in layout {a['layout']} of a rank-{len(xs)} tensor (oneDNN: 4-D NCHW only)"
    method, ctm, rounding = str(a["method"]), str(a["coordinate_transformation_mode"]), str(a["rounding_method"])
    # oneDNN's source coordinate is (x + 0.5) * in / out - 0.5 (ONNX half_pixel),
    # clamped at the edges, rounded for nearest: the combinations below give the
    # same result as ONNX Resize (checked against onnxruntime in tests/test_dnnl_ops_layout.py).
    half_pixel = ctm == "half_pixel" or (ctm == "pytorch_half_pixel" and ys[2] > 1 and ys[3] > 1)
    if method == "cubic":
        return "cubic resize (oneDNN resampling has nearest and linear only)"
    if method == "linear":
        if not half_pixel:
            return (f"linear resize with coordinate_transformation_mode={ctm} (oneDNN computes half_pixel "
                    "coordinates; pytorch_half_pixel only when no output extent is 1)")
        return SUPPORTED
    if method != "nearest_neighbor":
        return f"resize method {method} (oneDNN: nearest and linear only)"
    if ys[2] % xs[2] or ys[3] % xs[3]:
        return (f"nearest resize {xs} -> {ys} is not an integer upscale (oneDNN rounds half_pixel "
                "coordinates, which differs from ONNX nearest otherwise)")
    # At an integer upscale s, output y = q*s + r has the half_pixel coordinate
    # q + (r + 0.5)/s - 0.5, within 0.5 of q: rounding gives q (as oneDNN does), floor
    # and ceil do not; the asymmetric coordinate q + r/s floors to q.
    if (half_pixel and rounding.startswith("round_")) or (ctm == "asymmetric" and rounding == "floor"):
        return SUPPORTED
    return (f"nearest resize with coordinate_transformation_mode={ctm} and nearest_mode={rounding} (oneDNN "
            "matches half_pixel with round_prefer_floor/round_prefer_ceil, or asymmetric with floor)")


def _concat_rank(match: Match):
    """tensors of rank >= 1."""
    if not match.op.output.shape:
        return "concat of scalars (oneDNN concatenates tensors of rank >= 1)"
    return SUPPORTED


def _slice_positive_strides(match: Match):
    """constant bounds, positive strides, static extents along stepped axes."""
    call = match.op
    # Its axes, begin, end and strides are tuple arguments the op does not name: attrs arg1 to arg4.
    for index, what in ((1, "axes"), (2, "begin"), (3, "end"), (4, "strides")):
        if f"arg{index}" not in call.attrs and what == "strides":
            continue
        value = call.attrs.get(f"arg{index}")
        if not isinstance(value, tuple) or not all(isinstance(v, (int, float)) for v in value):
            return f"strided_slice with {what} computed at run time (constant bounds only)"
    strides = [int(v) for v in call.attrs.get("arg4", ())]
    if any(st < 1 for st in strides):
        return f"strided_slice with strides {strides} (oneDNN memory views: positive strides only)"
    # A stepped axis is a strided view, or two where n elements at step s span more than the axis (the runtime's
    # CopySteppedPieces); both need the extents.
    shape, out = call.inputs[0].shape, call.output.shape
    for axis, step in zip((int(v) for v in call.attrs["arg1"]), strides):
        extent, n = shape[axis], out[axis]
        if step > 1 and not (isinstance(n, int) and isinstance(extent, int)):
            return f"strided_slice at step {step} along the symbolic dim {extent!r} (static extents only)"
    return SUPPORTED


def _strided_slice_pattern():
    from tvm.relax.dpl import is_op, wildcard

    # Its axes, begin, end (and strides) are tuple arguments the op does not count as inputs.
    return is_op("relax.strided_slice")(wildcard(), varg_default_wildcard=True)


def _constant_pad(match: Match):
    """constant mode, widths >= 0."""
    attrs = match.op.attrs
    if attrs["pad_mode"] != "constant":
        return f"pad mode {attrs['pad_mode']} (oneDNN here: constant padding, a fill and a copy)"
    if min((int(w) for w in attrs["pad_width"]), default=0) < 0:
        return "negative pad widths (a crop)"
    return SUPPORTED


def _split_results(match: Match):
    """static, non-empty results; a number of sections divides the axis."""
    # The runtime's Split takes equal sections only; TVM splits an uneven axis (7 into 4:
    # ONNX Split opset 18 num_outputs) into ceil-sized parts and a short last one.
    splits = match.ops_of("relax.split")  # one per result
    for call in splits:
        sections = call.attrs["indices_or_sections"]
        if isinstance(sections, int):
            x_shape = call.inputs[0].shape
            axis = int(call.attrs["axis"])
            extent = x_shape[axis] if x_shape is not None and -len(x_shape) <= axis < len(x_shape) else None
            if not isinstance(extent, int) or sections < 1 or extent % sections:
                return f"split of an axis of {extent} into {sections} unequal sections"
    for call in splits if match.op.op == "relax.split" else ():
        shape = call.output.shape
        if shape is None:
            return "split with a result of dynamic shape (static shapes only)"
        if 0 in shape:
            return f"split with an empty result {shape}: oneDNN primitives need non-empty tensors"
    return SUPPORTED


def _deconv(match: Match):
    """NCHW/IOHW layouts, constant weight."""
    for call in match.ops_of("relax.nn.conv2d_transpose"):
        a = call.attrs
        if (a["data_layout"], a["kernel_layout"], a["out_layout"]) != ("NCHW", "IOHW", "NCHW"):
            return f"layout {a['data_layout']}/{a['kernel_layout']} not supported (NCHW/IOHW only)"
        if call.inputs[1].kind != "const":
            return "the weight is not a constant (it is prepared once, at build or load time)"
    return SUPPORTED


def _batch_norm(match: Match):
    """inference form over axis 1 of a rank-2..5 tensor."""
    call = match.ops_of("relax.nn.batch_norm")[0]
    rank = len(call.inputs[0].shape or ())
    if call.attrs["training"]:
        return "batch norm in training mode (oneDNN: inference with the moving statistics only)"
    if not 2 <= rank <= 5 or int(call.attrs["axis"]) % rank != 1:
        return f"batch norm over axis {int(call.attrs['axis'])} of a rank-{rank} tensor (oneDNN: axis 1, rank 2 to 5)"
    return SUPPORTED


def _lrn_pattern():
    """ONNX LRN as TVM imports it: x / (bias + alpha * avg_pool3d(x * x over n channels))^beta."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    x = wildcard()
    c = {"lrn_alpha": is_const(), "lrn_bias": is_const(), "lrn_beta": is_const()}
    pool = is_op("relax.nn.avg_pool3d")(is_op("relax.expand_dims")(is_op("relax.multiply")(x, x)))
    scaled = is_op("relax.multiply")(is_op("relax.squeeze")(pool), c["lrn_alpha"])
    denominator = is_op("relax.power")(is_op("relax.add")(scaled, c["lrn_bias"]), c["lrn_beta"])
    return is_op("relax.divide")(x, denominator), {"x": x, "pool": pool, **c}


def _avg_pool_window(match: Match):
    """no dilation; ceil_mode where oneDNN's average is ONNX's: padding excluded from the count (the end padding
    ceil_mode adds is then excluded too), or a window ceil_mode does not extend."""
    for call in match.ops_of("relax.nn.avg_pool2d"):
        a = call.attrs
        if tuple(a["dilation"]) != (1, 1):
            return f"dilation {tuple(a['dilation'])} not supported for average pooling"
        if not (a["ceil_mode"] and a["count_include_pad"]):
            continue
        xs, ys = call.inputs[0].shape, call.output.shape
        for d in range(2):
            size, out = xs[2 + d], ys[2 + d]
            if not isinstance(size, int) or not isinstance(out, int):
                return "ceil_mode=1 average pooling that counts its padding, over a symbolic size"
            span, stride = int(a["pool_size"][d]), int(a["strides"][d])
            if (size + int(a["padding"][d]) + int(a["padding"][d + 2]) - span) // stride + 1 != out:
                return ("ceil_mode=1 average pooling that counts its padding, with a last window ceil_mode extends "
                        "(oneDNN would count the extension as padding too)")
    return SUPPORTED


def _where_mask(match: Match):
    """a bool mask computed at run time, float32 operands and result (byoc's Select kernel)."""
    call = match.op
    cond, *operands = call.inputs
    if cond.dtype != "bool":
        return f"a {cond.dtype} condition (bool only)"
    if cond.kind == "const":
        return "a constant condition (the dnnl runtime holds float32 constants only)"
    for t in (*operands, call.output):
        if t.dtype != "float32":
            return f"{t.dtype} operands (float32 only)"
    return SUPPORTED


def _gather_elements_index(match: Match):
    """float32 data, an int64 index (a constant one below 2**24, which float32 holds exactly: byoc's GatherElements
    kernel)."""
    from byoc.codegens.dnnl.gather import EXACT_IN_FLOAT32

    call = match.op
    data, index = call.inputs
    if data.dtype != "float32" or call.output.dtype != "float32":
        return f"{data.dtype} data (float32 only)"
    if index.dtype != "int64":
        return f"a {index.dtype} index (int64 only)"
    if index.kind == "const" and (index.data is None or np.abs(index.data).max(initial=0) >= EXACT_IN_FLOAT32):
        return "a constant index of values float32 does not hold exactly"
    return SUPPORTED


def _scatter_elements(match: Match):
    """float32 data and updates, an int64 index computed in the run, each update replacing (byoc's ScatterElements
    kernel, which writes a cache's new entries in place where nothing else reads the data)."""
    call = match.op
    data, index, updates = call.inputs
    if data.dtype != "float32" or updates.dtype != "float32":
        return f"{data.dtype} data (float32 only)"
    if index.dtype != "int64":
        return f"a {index.dtype} index (int64 only)"
    if index.kind == "const":
        return "a constant index (the kernel reads one computed in the run)"
    reduction = str(call.attrs.get("reduction", "update"))
    if reduction != "update":
        return f"reduction {reduction!r} (replacing only)"
    return SUPPORTED


def _lrn(match: Match):
    """4-D NCHW input, an odd window over channels, scalar constants."""
    shape = match.tensor("x").shape
    if len(shape) != 4:
        return f"LRN of a rank-{len(shape)} tensor (oneDNN: 4-D NCHW here)"
    for name in ("lrn_alpha", "lrn_bias", "lrn_beta"):
        constant = match.tensor(name)
        if scalar(constant) is None or len(constant.shape) > 4:
            return f"LRN {name[4:]} of shape {constant.shape} is not a scalar constant"
    a = match.call("pool").attrs
    n = int(a["pool_size"][0])
    window = ([int(v) for v in a["pool_size"]], [int(v) for v in a["strides"]], [int(v) for v in a["dilation"]],
              [int(v) for v in a["padding"]], bool(a["count_include_pad"]), bool(a["ceil_mode"]))
    if n % 2 == 0 or window != ([n, 1, 1], [1, 1, 1], [1, 1, 1], [n // 2, 0, 0, n // 2, 0, 0], True, False):
        return f"LRN window {window[0]} padding {window[3]} is not an odd window over channels (oneDNN's LRN)"
    return SUPPORTED


def _deconv_pattern(bias: bool, act: str):
    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        out = conv = is_op("relax.nn.conv2d_transpose")(wildcard(), is_const())
        annotations = {"conv": conv}
        if bias:
            annotations["bias"] = is_const()
            out = is_op("relax.add")(out, annotations["bias"])
        if act == "relu":
            out = is_op("relax.nn.relu")(out)
        elif act == "clip":
            out = is_op("relax.clip")(out, wildcard(), wildcard())
        return out, annotations

    return build


def _deconv_rules():
    rules = []
    for bias, act in sorted(itertools.product((True, False), ("relu", "clip", "")), key=lambda c: -(c[0] + bool(c[1]))):
        if bias or act:
            name = "conv2d_transpose" + "_bias" * bias + (f"_{act}" if act else "")
            check = all_of(_base, _deconv, *([per_channel_bias] if bias else []))
            rules.append(PatternRule(name, _deconv_pattern(bias, act), check))
    return rules


#: the most copies along one axis a broadcast_to makes (kMaxBroadcastCopies, codegens/dnnl/runtime/common.h)
MAX_BROADCAST_COPIES = 64


def _broadcast_copies(match: Match):
    """adds unit dims, or copies the input a fixed number of times, at most 64, along axes where it has 1.

    The copies are a concat (MAX_BROADCAST_COPIES inputs at most); symbolic dims are compared by name."""
    shape, out = match.op.inputs[0].shape, match.op.output.shape
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    for d, o in zip(padded, out):
        if d == o:
            continue
        if len(shape) > len(out) or d != 1 or not isinstance(o, int):
            return f"broadcast_to {shape} -> {out} repeats values a number of times known only at run time"
        if o > MAX_BROADCAST_COPIES:
            return (f"broadcast_to {shape} -> {out} repeats values {o} times (oneDNN here: a concat of at most "
                    f"{MAX_BROADCAST_COPIES} copies)")
    return SUPPORTED


def _scalar_exponent(match: Match):
    """the exponent is a scalar constant."""
    call = match.op
    exponent = call.inputs[1]
    if scalar(exponent) is None or call.output.shape != call.inputs[0].shape:
        return f"exponent of shape {exponent.shape} is not a scalar constant (oneDNN pow: x ** c)"
    return SUPPORTED


def _prelu_slope(match: Match):
    """the slope is a float32 constant with one value, or one per index of the axis (oneDNN's PReLU weights)."""
    call = match.op
    x, slope = call.inputs[0], call.inputs[1]
    axis = int(call.attrs.get("axis", 1))
    if slope.kind != "const" or slope.dtype != "float32" or slope.data is None:
        return "the slope is not a float32 constant"
    if slope.data.size != 1 and (x.shape is None or not isinstance(x.shape[axis], int)
                                 or slope.data.size != x.shape[axis]):
        return f"slope of shape {slope.shape} is neither one value nor one per index of axis {axis}"
    return SUPPORTED


def _doubled_gelu_pattern():
    from tvm.relax.dpl import wildcard

    return _gelu(wildcard(), half=False)


def _nan_guard_pattern():
    from tvm.relax.dpl import is_const, is_op, wildcard

    x = wildcard()
    return is_op("relax.where")(is_op("relax.isnan")(x), is_const(), x)


def _nan_guard(match: Match):
    """float32, and NaN becomes one float32 constant."""
    _, value, x = match.ops_of("relax.where")[0].inputs
    if x.dtype != "float32":
        return f"NaNs of a {x.dtype} tensor (float32 only)"
    if value.dtype != "float32" or value.data is None or value.data.size != 1:
        return "NaNs become no single float32 constant"
    return SUPPORTED


def _gelu_pattern():
    from tvm.relax.dpl import wildcard

    return _gelu(wildcard())


_elementwise = all_of(_base, _broadcast_second)


def _int8_limits(match: Match):
    """int8 conv/matmul weights: constant s8 with zero point 0; per-tensor zero points; the core's float limits."""
    core = match.call("core")
    for call in match.ops_of("relax.quantize", "relax.dequantize"):
        zero_points = call.inputs[2].data.reshape(-1)
        if zero_points.size > 1 and (zero_points != zero_points[0]).any():
            return "per-axis zero points (oneDNN takes one zero point per tensor)"
    if core is None:
        return SUPPORTED
    name, a = core.op, core.attrs
    if name == "relax.nn.conv2d_transpose" and (a["data_layout"], a["kernel_layout"]) != ("NCHW", "IOHW"):
        return f"layout {a['data_layout']}/{a['kernel_layout']} not supported (NCHW/IOHW only)"
    if name in WEIGHTED:
        weights = [c for c in match.ops_of("relax.dequantize") if c.inputs[0].kind == "const"
                   and c.inputs[0].dtype != "int32"]  # an int32 one is the bias
        if not weights:
            return "the second matmul operand is not a constant (oneDNN int8 weights are reordered at load)"
        weight, zero_point = weights[0].inputs[0], weights[0].inputs[2]
        if weight.dtype != "int8":
            return f"{weight.dtype} weights (oneDNN int8 weights are s8)"
        if zero_point.data.any():
            return "a weight zero point other than 0 (oneDNN int8 weights are symmetric)"
    if name in ("relax.add", "relax.multiply") and core.output.shape not in [t.shape for t in core.inputs[:2]]:
        return _both_broadcast(core)
    if name == "relax.concat" and len(core.output.shape) > MAX_RANK:
        return f"rank above {MAX_RANK}"
    return SUPPORTED


# -- dynamic int8 matmuls (onnxruntime's quantize_dynamic) ----------------------------------
def _dynamic_matmul_pattern(bias: bool, core: str = "matmul"):
    """``DynamicQuantizeLinear(x) -> MatMulInteger(x_q, w) -> Cast -> Mul(x_scale * w_scale) [-> Add(bias)]`` as
    TVM imports it: the scale and zero point of x computed from its min and max (with 0), ``relax.quantize``, the
    zero points subtracted in int32, an int32 matmul, its cast to float32 times the product of the scales."""

    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        def either(op, a, b):
            return is_op(op)(a, b) | is_op(op)(b, a)

        x = wildcard()
        c = {"dq_zero_hi": is_const(), "dq_zero_lo": is_const(), "dq_255": is_const(), "dq_zero": is_const()}
        hi = is_op("relax.maximum")(c["dq_zero_hi"], is_op("relax.max")(x))
        lo = is_op("relax.minimum")(c["dq_zero_lo"], is_op("relax.min")(x))
        scale = is_op("relax.divide")(is_op("relax.subtract")(hi, lo), c["dq_255"])
        clipped = is_op("relax.clip")(is_op("relax.subtract")(c["dq_zero"], is_op("relax.divide")(lo, scale)),
                                      wildcard(), wildcard())
        zero_point = is_op("relax.astype")(is_op("relax.round")(clipped))
        quantize = is_op("relax.quantize")(x, scale, zero_point)
        centred = is_op("relax.subtract")(is_op("relax.astype")(quantize), is_op("relax.astype")(zero_point))
        w, w_zp, w_scale = is_const(), is_const(), is_const()
        annotations = {"x": x, "w": w, "w_scale": w_scale, "quantize": quantize, "clip": clipped, **c}
        if core == "conv2d":  # ConvInteger as preparation writes it: float32 sums of the integers (exact)
            product = annotations["conv"] = is_op("relax.nn.conv2d")(centred, w)
        else:
            w_int = is_op("relax.astype")(w)
            w_centred = is_op("relax.subtract")(w_int, is_op("relax.astype")(w_zp) | w_zp) | w_int
            annotations["matmul"] = is_op("relax.matmul")(centred, w_centred)
            annotations["w_zp"] = w_zp
            product = is_op("relax.astype")(annotations["matmul"])
        out = either("relax.multiply", product, either("relax.multiply", scale, w_scale))
        if bias:
            annotations["bias"] = is_const()
            out = either("relax.add", out, annotations["bias"])
        return out, annotations

    return build


def _dynamic_conv(match: Match):
    """float32 NCHW x quantized to u8 as ONNX defines it; a constant OIHW weight of int8 values, zero point 0.

    One weight scale; any groups (depthwise included); a bias of one value per output channel."""
    x, w, w_scale = match.tensor("x"), match.tensor("w"), match.tensor("w_scale")
    reason = _dynamic_quantization(match)
    if reason:
        return reason
    conv = match.call("conv")
    a = conv.attrs
    if (a["data_layout"], a["kernel_layout"], a["out_layout"]) != ("NCHW", "OIHW", "NCHW"):
        return f"a dynamic int8 conv of layout {a['data_layout']}/{a['kernel_layout']} (NCHW/OIHW)"
    if x.dtype != "float32" or w.data is None or np.any(w.data != np.round(w.data)) or np.abs(w.data).max() > 127:
        return "a dynamic int8 conv whose weight is not int8 values (preparation writes ConvInteger's so)"
    if w_scale.data is None or w_scale.data.size != 1:
        return f"a dynamic int8 conv with weight scales of shape {w_scale.shape} (one per tensor)"
    if "bias" in match.names:
        bias = match.tensor("bias")
        channels = w.shape[0]
        if bias.dtype != "float32" or bias.size != channels or (len(bias.shape) >= 3 and bias.shape[-3] != channels):
            return f"a bias of shape {bias.shape} (one float32 per output channel: {channels})"
    return SUPPORTED


def _dynamic_quantization(match: Match):
    """The scale and zero point of x computed as ONNX's DynamicQuantizeLinear does, or why not."""
    for name, want in (("dq_zero_hi", 0.0), ("dq_zero_lo", 0.0), ("dq_255", 255.0), ("dq_zero", 0.0)):
        if scalar(match.tensor(name)) != want:
            return f"a scale or zero point computed otherwise than ONNX's DynamicQuantizeLinear ({name})"
    clip = match.call("clip")
    if clip is None or (_number(clip.attrs.get("min")), _number(clip.attrs.get("max"))) != (0.0, 255.0) \
            or match.call("quantize").output.dtype != "uint8":
        return "a dynamic quantization to another range than uint8's (ONNX's DynamicQuantizeLinear: 0..255)"
    return None


def _dynamic_matmul(match: Match):
    """float32 x of rank >= 2 quantized to u8 as ONNX defines it; constant 2-D s8 weights, zero point 0.

    Weight scales per tensor or per output column; a float32 bias per output column."""
    x, w, w_scale = match.tensor("x"), match.tensor("w"), match.tensor("w_scale")
    if x.dtype != "float32" or len(x.shape or ()) < 2:
        return f"dynamic int8 matmul of a {x.dtype} tensor of rank {len(x.shape or ())} (float32, rank >= 2)"
    reason = _dynamic_quantization(match)
    if reason:
        return reason
    if w.dtype != "int8":
        return f"{w.dtype} weights of a dynamic int8 matmul (oneDNN int8 weights are s8)"
    if len(w.shape) != 2:
        return f"a dynamic int8 matmul weight of rank {len(w.shape)} (2-D only)"
    if "w_zp" in match.names and match.tensor("w_zp").data is not None and match.tensor("w_zp").data.any():
        return "a weight zero point other than 0 (oneDNN int8 weights are symmetric)"
    columns = w.shape[1]
    if w_scale.data is None or w_scale.data.size not in (1, columns) or (w_scale.data.size > 1 and (
            len(w_scale.shape) != 1)):
        return f"weight scales of shape {w_scale.shape} (per tensor, or one per output column: {columns})"
    if "bias" in match.names:
        bias = match.tensor("bias")
        if bias.dtype != "float32" or tuple(bias.shape)[-1:] != (columns,) or bias.size != columns:
            return f"a bias of shape {bias.shape} (one float32 per output column: {columns})"
    return SUPPORTED


@dataclass(frozen=True)
class _DynamicMatmulRule(PatternRule):
    """A dynamic int8 matmul rule; its op-table line names the ONNX chain (the pattern spells out every form)."""

    def describe(self) -> str:
        bias = " -> Add(const bias)" if self.name.endswith("_bias") else ""
        core = "ConvInteger" if "conv" in self.name else "MatMulInteger"
        return (f"dynamic int8 unit: DynamicQuantizeLinear(*) -> {core}(x_q, const s8) -> Cast -> "
                f"Mul(x_scale * w_scale){bias}")


def _dynamic_matmul_rules():
    return [_DynamicMatmulRule(f"dynamic_int8_{core}" + "_bias" * bias, _dynamic_matmul_pattern(bias, core),
                               all_of(known_ranks(MAX_RANK), _non_empty, check))
            for core, check in (("matmul", _dynamic_matmul), ("conv2d", _dynamic_conv)) for bias in (True, False)]


_QDQ_RULES = qdq_rules(all_of(qdq_supported, known_ranks(MAX_RANK), _non_empty, conv_layout_nchw, pool_layout_nchw,
                               avg_pool_plain, _int8_limits), ops=UNIT_OPS + OPTIONAL_UNIT_OPS)
_QDQ_UNITS = tuple(r for r in _QDQ_RULES if isinstance(r, QuantizedUnitRule))
_LONE_QDQ = tuple(r for r in _QDQ_RULES if not isinstance(r, QuantizedUnitRule))  # lone quantize and dequantize

_RULES = (
    # int8 QDQ units (byoc.vendor.quantized), before the float rules: oneDNN int8 conv and matmul,
    # the other units as dequantize -> float primitive -> quantize; symbolic dims as in the float rules.
    *_QDQ_UNITS,
    # element-wise QDQ units (DQ -> Div -> Erf -> Q of an erf GELU, and any chain of element-wise ops with scalar
    # constants between a DQ and a Q) as one 256-entry byte table each, computed from the ONNX definition; before
    # the lone Q and DQ rules, which would take their ends
    qdq_table_rule(all_of(known_ranks(MAX_RANK), _non_empty)),
    *_LONE_QDQ,
    # quantize_dynamic's matmuls: the activation quantized per call, one oneDNN u8 x s8 matmul
    *_dynamic_matmul_rules(),
    # weight-only int4/int8 matmuls, before the float rules that would take their matmul alone
    *_matmul_nbits_rules(),
    *_conv_rules("conv2d"),
    *_conv_rules("conv1d"),
    *_matmul_rules(),
    OpRule("matmul", "relax.matmul", all_of(_base, _matmul_ranks)),
    *_deconv_rules(),
    OpRule("conv2d_transpose", "relax.nn.conv2d_transpose", all_of(_base, _deconv)),
    PatternRule("gelu", _gelu_pattern, all_of(_base, _gelu_constants)),
    PatternRule("gelu_doubled", _doubled_gelu_pattern, all_of(_base, _gelu_constants)),
    *(PatternRule(kind, _activation_pattern(kind), all_of(_base, _activation_check(kind)))
      for kind in ACTIVATIONS),
    OpRule("batch_norm", "relax.nn.batch_norm", all_of(_base, _batch_norm)),
    PatternRule("lrn", _lrn_pattern, all_of(_base, _lrn)),
    OpRule("concat", "relax.concat", all_of(_moves, _concat_rank)),
    OpRule("split", "relax.split", all_of(_base, _split_results)),
    OpRule("resize2d", "relax.image.resize2d", all_of(_base, _resize_supported)),
    PatternRule("strided_slice", _strided_slice_pattern, all_of(_base, _slice_positive_strides)),
    OpRule("pad", "relax.nn.pad", all_of(_base, _constant_pad)),
    OpRule("max_pool2d", "relax.nn.max_pool2d", all_of(_moves, pool_layout_nchw)),
    OpRule("avg_pool2d", "relax.nn.avg_pool2d", all_of(_base, pool_layout_nchw, _avg_pool_window)),
    OpRule("mean", "relax.mean", _base),
    OpRule("sum", "relax.sum", _base),
    OpRule("max", "relax.max", _base),
    OpRule("min", "relax.min", _base),
    # ONNX Sum (Max, Min) of one tensor as TVM imports it: broadcast_to, stack, reduce over the new axis (of
    # several, byoc imports a chain of add, maximum or minimum).
    OpRule("stack", "relax.stack", _base),
    OpRule("softmax", "relax.nn.softmax", _base),
    OpRule("layer_norm", "relax.nn.layer_norm", all_of(_base, _layer_norm_last_axis)),
    OpRule("group_norm", "relax.nn.group_norm", all_of(_base, _group_norm_over_channels)),
    OpRule("add", "relax.add", _elementwise),
    OpRule("subtract", "relax.subtract", _elementwise),
    OpRule("multiply", "relax.multiply", _elementwise),
    OpRule("divide", "relax.divide", _elementwise),
    OpRule("maximum", "relax.maximum", _elementwise),
    OpRule("minimum", "relax.minimum", _elementwise),
    OpRule("relu", "relax.nn.relu", _base),
    OpRule("clip", "relax.clip", _base),
    OpRule("sigmoid", "relax.sigmoid", _base),
    OpRule("tanh", "relax.tanh", _base),
    # ONNX's Gelu op (opset 20; torch's dynamo exporter writes it), both approximations, and SiLU
    OpRule("gelu_op", "relax.nn.gelu", _base),
    OpRule("gelu_tanh_op", "relax.nn.gelu_tanh", _base),
    OpRule("silu", "relax.nn.silu", _base),
    OpRule("sqrt", "relax.sqrt", _base),
    OpRule("exp", "relax.exp", _base),
    # ONNX's Erf where it is no GELU and no quantized unit's (those are gelu_erf and byte tables): a byoc kernel
    OpRule("erf", "relax.erf", _base),
    # Sin and Cos (a decoder's rotary tables): byoc kernels too
    OpRule("sin", "relax.sin", _base),
    OpRule("cos", "relax.cos", _base),
    # where(isnan(x), c, x), the guard transformers' exports write after each softmax: one byoc kernel (nan_guard.py)
    PatternRule("nan_to", _nan_guard_pattern, all_of(known_ranks(MAX_RANK), _non_empty, _nan_guard)),
    # Glue inside a layer (after nan_to, which takes a NaN guard's where whole): a mask computed from the input's
    # (DeBERTa's, T5's), relative positions gathered.
    OpRule("where", "relax.where", all_of(known_ranks(MAX_RANK), _non_empty, _where_mask)),
    OpRule("gather_elements", "relax.gather_elements",
           all_of(known_ranks(MAX_RANK), _non_empty, _gather_elements_index)),
    # a cache's new keys and values written at their positions (onnxruntime-genai's GroupQueryAttention)
    OpRule("scatter_elements", "relax.scatter_elements",
           all_of(known_ranks(MAX_RANK), _non_empty, _scatter_elements)),
    OpRule("negative", "relax.negative", _base),
    OpRule("leakyrelu", "relax.nn.leakyrelu", _base),
    # PRelu (MTCNN's and other face models' activation): oneDNN's PReLU primitive
    OpRule("prelu", "relax.nn.prelu", all_of(_base, _prelu_slope)),
    OpRule("power", "relax.power", all_of(_base, _scalar_exponent)),
    # Layout ops, so the glue between heavy ops does not split a partition:
    # reshapes are views of the same buffer, a transpose is one reorder.
    OpRule("reshape", "relax.reshape", _moves),
    OpRule("squeeze", "relax.squeeze", _moves),
    OpRule("expand_dims", "relax.expand_dims", _moves),
    OpRule("flatten", "relax.flatten", _moves),
    OpRule("transpose", "relax.permute_dims", _moves),
    # Last: a composite of a broadcast_to to a symbolic shape gives its result no shape until its shape argument
    # is written into it (byoc.pipeline.annotate.shape_args), and the rules matched after it would read it so.
    OpRule("broadcast_to", "relax.broadcast_to", all_of(_base, _broadcast_copies)),
)

VENDOR = Vendor(
    NAME,
    _RULES,
    DnnlCodegen(),
    description="oneDNN 3.2 primitives (conv1d/2d, matmul, pooling, softmax, layer norm, element-wise; float32, "
                "and int8 QDQ units)",
    targets=("x86_64",),  # the oneDNN wheels are built for x86_64 only
    # a mask's where, a gather and a scatter join the layer they sit in; alone they are a boundary for no compute
    joining_rules=("where", "gather_elements", "scatter_elements"),
)
#: The vendor's rules, as it names them ("dnnl.<rule>").
RULES = VENDOR.rules

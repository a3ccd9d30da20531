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
and names it when it rejects: float32, static non-empty shapes of rank <= 8,
NCHW/OIHW or NCW/OIW (IOHW for transposed convs), constant conv weights (they are
reordered once, at load), matmul operands of rank >= 2, the second operand of
an element-wise op broadcastable to the first (oneDNN broadcasts one side
only).

Importing this module registers the vendor even without oneDNN installed:
partitioning and reports work anywhere; building says what to install.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from byoc.vendor.values import const_array, is_prim_value, is_tensor_const
from byoc.vendor.checks import (all_of, avg_pool_plain, calls_of, constant_conv_weight, conv_layout_nchw, dtypes,
                         known_ranks, per_channel_bias, pool_layout_nchw, static_shapes)
# Shapes as the checks compare them: a symbolic dim is its text ("batch"), equal only to itself. The runtime
# compiles each partition per set of sizes (graph_runtime.h), so a dim need not be static to be taken.
from byoc.vendor.checks import dims as static_shape
from byoc.codegens.dnnl import DnnlCodegen
# The forms the codegen rewrites as one op, with the constants that make them that form (one source).
from byoc.codegens.dnnl.activations import GELU_CONSTANTS, HARDSWISH_CONSTANTS, near
from byoc.codegens.limits import MAX_RANK
from byoc.vendor.registry import register_vendor
from byoc.vendor import SUPPORTED, Match, OpRule, PatternRule, Vendor
from byoc.vendor.quantized import OPTIONAL_UNIT_OPS, UNIT_OPS, WEIGHTED, qdq_rules, qdq_supported

NAME = "dnnl"


def _non_empty(match: Match):
    """no zero-sized tensors."""
    for call in match.calls:
        for expr in (call, *call.args):
            shape = static_shape(expr)
            if shape is not None and 0 in shape:
                return f"zero-sized tensor {shape}: oneDNN primitives need non-empty tensors"
    return SUPPORTED


_base = all_of(dtypes("float32"), known_ranks(MAX_RANK), _non_empty)
# Ops that only pick or move values also take the 8-bit integers a QOperator model leaves
# between its integer ops (codegens/dnnl/quantized.py runs them on the values as floats).
_moves = all_of(dtypes("float32", "uint8", "int8"), known_ranks(MAX_RANK), _non_empty)


def _scalar(expr):
    """The value of a one-element constant, else None."""
    if not is_tensor_const(expr):
        return None
    value = const_array(expr)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def _prim(expr):
    """The value of a scalar prim argument (clip's bounds), else None."""
    return float(expr.value) if is_prim_value(expr) else None


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
        rank = len(static_shape(match.root) or ())
        for name, expr in match.annotated.items():
            if not name.startswith("hs_"):
                continue
            value = _scalar(expr)
            shape = static_shape(expr)
            if value is None or len(shape) > rank:
                return f"{kind}: {name[3:]} of shape {shape} is not a scalar constant"
            if name in HARDSWISH_CONSTANTS and not near(value, HARDSWISH_CONSTANTS[name]):
                return f"{kind}: {value:g} where hard-swish has {HARDSWISH_CONSTANTS[name]:g}"
        for call in calls_of(match, "relax.clip"):
            bounds = (_prim(call.args[1]), _prim(call.args[2]))
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
    out = static_shape(match.annotated["conv"])
    residual = static_shape(match.annotated["residual"])
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
            rules.append(PatternRule(f"{NAME}.{name}", _conv_pattern(op, bias, bn, residual, act), check))
    rules.append(OpRule(f"{NAME}.{op}", f"relax.nn.{op}", all_of(_base, conv_layout_nchw, constant_conv_weight)))
    return rules


# -- matmul -----------------------------------------------------------------------------
def _matmul_ranks(match: Match):
    """operands of rank >= 2."""
    for call in calls_of(match, "relax.matmul"):
        for operand in call.args[:2]:
            shape = static_shape(operand)
            if shape is not None and len(shape) < 2:
                return f"matmul operand of rank {len(shape)} (oneDNN matmul takes rank >= 2; vectors stay on the host)"
    return SUPPORTED


def _matmul_bias(match: Match):
    """bias is a constant over the last axis."""
    bias = match.annotated["bias"]
    n = static_shape(match.annotated["matmul"])[-1]
    shape = static_shape(bias)
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
        if name not in match.annotated:
            continue
        got = _scalar(match.annotated[name])
        if not near(got, want):
            shown = f"{got:g}" if got is not None else f"a tensor of shape {static_shape(match.annotated[name])}"
            return f"{shown} where GELU has {want:g}: not the erf form of GELU"
    return SUPPORTED


def _scale_is_scalar(match: Match):
    """scale is a one-element constant."""
    if _scalar(match.annotated["scale"]) is None:
        return f"scale of shape {static_shape(match.annotated['scale'])} is not a scalar constant"
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
            rules.append(PatternRule(f"{NAME}.{name}", _matmul_pattern(bias, tail), check))
    return rules


# -- the rest -----------------------------------------------------------------------------
def _layer_norm_last_axis(match: Match):
    """normalizes over the last axis of a tensor of rank >= 2."""
    call = match.root
    rank = len(static_shape(call.args[0]) or ())
    axes = [int(a) for a in call.attrs.axes]
    if rank < 2 or [a % rank for a in axes] != [rank - 1]:
        return f"layer norm over axes {axes} of a rank-{rank} tensor (oneDNN: the last axis of rank >= 2 only)"
    return SUPPORTED


def _group_norm_over_channels(match: Match):
    """normalizes groups of the channels (axis 1) over all the dims after them."""
    call = match.root
    rank = len(static_shape(call.args[0]) or ())
    axes = sorted(int(a) % rank for a in call.attrs.axes) if rank else []
    if rank < 3 or int(call.attrs.channel_axis) % rank != 1 or axes != list(range(2, rank)):
        return (f"group norm over axes {axes} with channel axis {int(call.attrs.channel_axis)} of a rank-{rank} "
                "tensor (dnnl: channel axis 1, normalized over every dim after it)")
    return SUPPORTED


def _both_broadcast(call) -> str:
    out, a, b = static_shape(call), static_shape(call.args[0]), static_shape(call.args[1])
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
    call = match.root
    out = static_shape(call)
    a, b = (static_shape(arg) for arg in call.args[:2])
    if a == out or (call.op.name in ("relax.add", "relax.multiply") and b == out):
        return SUPPORTED
    if call.op.name in ("relax.subtract", "relax.divide") and b == out and _scalar(call.args[0]) is not None:
        return SUPPORTED  # the runtime computes it as an eltwise: linear (-1 * x + c) or pow (c * x^-1)
    if call.op.name == "relax.multiply" and _outer_product(a, b, out):
        return SUPPORTED  # a matmul with K = 1
    return _both_broadcast(call)


def _resize_supported(match: Match):
    """NCHW; linear with half_pixel; nearest at integer upscales with half_pixel + round_*, or asymmetric + floor."""
    call = match.root
    a = call.attrs
    xs, ys = static_shape(call.args[0]), static_shape(call)
    if a.layout != "NCHW" or len(xs) != 4:
        return f"resize in layout {a.layout} of a rank-{len(xs)} tensor (oneDNN: 4-D NCHW only)"
    method, ctm, rounding = str(a.method), str(a.coordinate_transformation_mode), str(a.rounding_method)
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
    if not static_shape(match.root):
        return "concat of scalars (oneDNN concatenates tensors of rank >= 1)"
    return SUPPORTED


def _slice_positive_strides(match: Match):
    """constant bounds, positive strides, elements * step <= extent."""
    from tvm import relax

    call = match.root
    for index, what in ((1, "axes"), (2, "begin"), (3, "end"), (4, "strides")):
        arg = call.args[index] if index < len(call.args) else None
        if arg is None and what == "strides":
            continue
        if not isinstance(arg, relax.Tuple) or not all(is_prim_value(f) for f in arg.fields):
            return f"strided_slice with {what} computed at run time (constant bounds only)"
    strides = [int(f.value) for f in call.args[4].fields] if len(call.args) > 4 else []
    if any(st < 1 for st in strides):
        return f"strided_slice with strides {strides} (oneDNN memory views: positive strides only)"
    # oneDNN takes a strided view only if n elements at step s span at most the axis (n * s <= extent).
    shape, out = static_shape(call.args[0]), static_shape(call)
    for axis, step in zip((int(f.value) for f in call.args[1].fields), strides):
        extent, n = shape[axis], out[axis]
        if step > 1 and not (isinstance(n, int) and isinstance(extent, int)):
            return f"strided_slice at step {step} along the symbolic dim {extent!r} (static extents only)"
        if step > 1 and n > 1 and n * step > extent:
            return (f"strided_slice of {n} elements at step {step} along an axis of {extent} (oneDNN views a "
                    "stepped axis only when elements * step <= its extent)")
    return SUPPORTED


def _strided_slice_pattern():
    from tvm.relax.dpl import is_op, wildcard

    # Its axes, begin, end (and strides) are tuple arguments the op does not count as inputs.
    return is_op("relax.strided_slice")(wildcard(), varg_default_wildcard=True)


def _constant_pad(match: Match):
    """constant mode, widths >= 0."""
    attrs = match.root.attrs
    if attrs.pad_mode != "constant":
        return f"pad mode {attrs.pad_mode} (oneDNN here: constant padding, a fill and a copy)"
    if min((int(w) for w in attrs.pad_width), default=0) < 0:
        return "negative pad widths (a crop)"
    return SUPPORTED


def _split_results(match: Match):
    """static, non-empty results; a number of sections divides the axis."""
    from tvm import relax

    # The runtime's Split takes equal sections only; TVM splits an uneven axis (7 into 4:
    # ONNX Split opset 18 num_outputs) into ceil-sized parts and a short last one.
    for call in calls_of(match, "relax.split"):
        sections = call.attrs.indices_or_sections
        if hasattr(sections, "value"):
            x_shape = static_shape(call.args[0])
            axis = int(call.attrs.axis)
            extent = x_shape[axis] if x_shape is not None and -len(x_shape) <= axis < len(x_shape) else None
            if not isinstance(extent, int) or int(sections.value) < 1 or extent % int(sections.value):
                return f"split of an axis of {extent} into {int(sections.value)} unequal sections"
    ty = match.root.ty
    for field in ty.fields if isinstance(ty, relax.TupleType) else ():
        shape = static_shape(SimpleNamespace(ty=field))  # static_shape reads an expression's type
        if shape is None:
            return "split with a result of dynamic shape (static shapes only)"
        if 0 in shape:
            return f"split with an empty result {shape}: oneDNN primitives need non-empty tensors"
    return SUPPORTED


def _deconv(match: Match):
    """NCHW/IOHW layouts, constant weight."""
    for call in calls_of(match, "relax.nn.conv2d_transpose"):
        a = call.attrs
        if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "IOHW", "NCHW"):
            return f"layout {a.data_layout}/{a.kernel_layout} not supported (NCHW/IOHW only)"
        if not is_tensor_const(call.args[1]):
            return "the weight is not a constant (it is prepared once, at build or load time)"
    return SUPPORTED


def _batch_norm(match: Match):
    """inference form over axis 1 of a rank-2..5 tensor."""
    call = calls_of(match, "relax.nn.batch_norm")[0]
    rank = len(static_shape(call.args[0]) or ())
    if call.attrs.training:
        return "batch norm in training mode (oneDNN: inference with the moving statistics only)"
    if not 2 <= rank <= 5 or int(call.attrs.axis) % rank != 1:
        return f"batch norm over axis {int(call.attrs.axis)} of a rank-{rank} tensor (oneDNN: axis 1, rank 2 to 5)"
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


def _lrn(match: Match):
    """4-D NCHW input, an odd window over channels, scalar constants."""
    shape = static_shape(match.annotated["x"])
    if len(shape) != 4:
        return f"LRN of a rank-{len(shape)} tensor (oneDNN: 4-D NCHW here)"
    for name in ("lrn_alpha", "lrn_bias", "lrn_beta"):
        expr = match.annotated[name]
        if _scalar(expr) is None or len(static_shape(expr)) > 4:
            return f"LRN {name[4:]} of shape {static_shape(expr)} is not a scalar constant"
    a = match.annotated["pool"].attrs
    n = int(a.pool_size[0])
    window = ([int(v) for v in a.pool_size], [int(v) for v in a.strides], [int(v) for v in a.dilation],
              [int(v) for v in a.padding], bool(a.count_include_pad), bool(a.ceil_mode))
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
            rules.append(PatternRule(f"{NAME}.{name}", _deconv_pattern(bias, act), check))
    return rules


#: the most copies along one axis a broadcast_to makes (kMaxBroadcastCopies, codegens/dnnl/runtime/common.h)
MAX_BROADCAST_COPIES = 64


def _broadcast_copies(match: Match):
    """adds unit dims, or copies the input a fixed number of times, at most 64, along axes where it has 1.

    The copies are a concat (MAX_BROADCAST_COPIES inputs at most); symbolic dims are compared by name."""
    shape, out = static_shape(match.root.args[0]), static_shape(match.root)
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
    call = match.root
    exponent = call.args[1]
    if _scalar(exponent) is None or static_shape(call) != static_shape(call.args[0]):
        return f"exponent of shape {static_shape(exponent)} is not a scalar constant (oneDNN pow: x ** c)"
    return SUPPORTED


def _doubled_gelu_pattern():
    from tvm.relax.dpl import wildcard

    return _gelu(wildcard(), half=False)


def _gelu_pattern():
    from tvm.relax.dpl import wildcard

    return _gelu(wildcard())


_elementwise = all_of(_base, _broadcast_second)


def _int8_limits(match: Match):
    """int8 conv/matmul weights: constant s8 with zero point 0; per-tensor zero points; the core's float limits."""
    core = match.annotated.get("core")
    for call in (c for c in match.calls if c.op.name in ("relax.quantize", "relax.dequantize")):
        zero_points = const_array(call.args[2]).reshape(-1)
        if zero_points.size > 1 and (zero_points != zero_points[0]).any():
            return "per-axis zero points (oneDNN takes one zero point per tensor)"
    if core is None:
        return SUPPORTED
    name = core.op.name
    if name == "relax.nn.conv2d_transpose" and (core.attrs.data_layout, core.attrs.kernel_layout) != ("NCHW", "IOHW"):
        return f"layout {core.attrs.data_layout}/{core.attrs.kernel_layout} not supported (NCHW/IOHW only)"
    if name in WEIGHTED:
        weights = [c for c in match.calls if c.op.name == "relax.dequantize" and is_tensor_const(c.args[0])
                   and str(c.args[0].ty.dtype) != "int32"]  # an int32 one is the bias
        if not weights:
            return "the second matmul operand is not a constant (oneDNN int8 weights are reordered at load)"
        weight = weights[0]
        if str(weight.args[0].ty.dtype) != "int8":
            return f"{weight.args[0].ty.dtype} weights (oneDNN int8 weights are s8)"
        if const_array(weight.args[2]).any():
            return "a weight zero point other than 0 (oneDNN int8 weights are symmetric)"
    if name in ("relax.add", "relax.multiply") and static_shape(core) not in map(static_shape, core.args[:2]):
        return _both_broadcast(core)
    if name == "relax.concat" and len(static_shape(core)) > MAX_RANK:
        return f"rank above {MAX_RANK}"
    return SUPPORTED


RULES = (
    # int8 QDQ units (byoc.vendor.quantized), before the float rules: oneDNN int8 conv and matmul,
    # the other units as dequantize -> float primitive -> quantize.
    *qdq_rules(NAME, all_of(qdq_supported, static_shapes(MAX_RANK), _non_empty, conv_layout_nchw, pool_layout_nchw,
                            avg_pool_plain, _int8_limits), ops=UNIT_OPS + OPTIONAL_UNIT_OPS),
    *_conv_rules("conv2d"),
    *_conv_rules("conv1d"),
    *_matmul_rules(),
    OpRule(f"{NAME}.matmul", "relax.matmul", all_of(_base, _matmul_ranks)),
    *_deconv_rules(),
    OpRule(f"{NAME}.conv2d_transpose", "relax.nn.conv2d_transpose", all_of(_base, _deconv)),
    PatternRule(f"{NAME}.gelu", _gelu_pattern, all_of(_base, _gelu_constants)),
    PatternRule(f"{NAME}.gelu_doubled", _doubled_gelu_pattern, all_of(_base, _gelu_constants)),
    *(PatternRule(f"{NAME}.{kind}", _activation_pattern(kind), all_of(_base, _activation_check(kind)))
      for kind in ACTIVATIONS),
    OpRule(f"{NAME}.batch_norm", "relax.nn.batch_norm", all_of(_base, _batch_norm)),
    PatternRule(f"{NAME}.lrn", _lrn_pattern, all_of(_base, _lrn)),
    OpRule(f"{NAME}.concat", "relax.concat", all_of(_moves, _concat_rank)),
    OpRule(f"{NAME}.split", "relax.split", all_of(_base, _split_results)),
    OpRule(f"{NAME}.resize2d", "relax.image.resize2d", all_of(_base, _resize_supported)),
    PatternRule(f"{NAME}.strided_slice", _strided_slice_pattern, all_of(_base, _slice_positive_strides)),
    OpRule(f"{NAME}.pad", "relax.nn.pad", all_of(_base, _constant_pad)),
    OpRule(f"{NAME}.max_pool2d", "relax.nn.max_pool2d", all_of(_moves, pool_layout_nchw)),
    OpRule(f"{NAME}.avg_pool2d", "relax.nn.avg_pool2d", all_of(_base, pool_layout_nchw, avg_pool_plain)),
    OpRule(f"{NAME}.mean", "relax.mean", _base),
    OpRule(f"{NAME}.sum", "relax.sum", _base),
    OpRule(f"{NAME}.max", "relax.max", _base),
    OpRule(f"{NAME}.min", "relax.min", _base),
    # ONNX Sum (Max, Min) of n tensors as TVM imports it: broadcast_to each, stack, reduce over the new axis.
    OpRule(f"{NAME}.stack", "relax.stack", _base),
    OpRule(f"{NAME}.softmax", "relax.nn.softmax", _base),
    OpRule(f"{NAME}.layer_norm", "relax.nn.layer_norm", all_of(_base, _layer_norm_last_axis)),
    OpRule(f"{NAME}.group_norm", "relax.nn.group_norm", all_of(_base, _group_norm_over_channels)),
    OpRule(f"{NAME}.add", "relax.add", _elementwise),
    OpRule(f"{NAME}.subtract", "relax.subtract", _elementwise),
    OpRule(f"{NAME}.multiply", "relax.multiply", _elementwise),
    OpRule(f"{NAME}.divide", "relax.divide", _elementwise),
    OpRule(f"{NAME}.relu", "relax.nn.relu", _base),
    OpRule(f"{NAME}.clip", "relax.clip", _base),
    OpRule(f"{NAME}.sigmoid", "relax.sigmoid", _base),
    OpRule(f"{NAME}.tanh", "relax.tanh", _base),
    # ONNX's Gelu op (opset 20; torch's dynamo exporter writes it), both approximations, and SiLU
    OpRule(f"{NAME}.gelu_op", "relax.nn.gelu", _base),
    OpRule(f"{NAME}.gelu_tanh_op", "relax.nn.gelu_tanh", _base),
    OpRule(f"{NAME}.silu", "relax.nn.silu", _base),
    OpRule(f"{NAME}.sqrt", "relax.sqrt", _base),
    OpRule(f"{NAME}.exp", "relax.exp", _base),
    OpRule(f"{NAME}.negative", "relax.negative", _base),
    OpRule(f"{NAME}.leakyrelu", "relax.nn.leakyrelu", _base),
    OpRule(f"{NAME}.power", "relax.power", all_of(_base, _scalar_exponent)),
    # Layout ops, so the glue between heavy ops does not split a partition:
    # reshapes are views of the same buffer, a transpose is one reorder.
    OpRule(f"{NAME}.reshape", "relax.reshape", _moves),
    OpRule(f"{NAME}.squeeze", "relax.squeeze", _moves),
    OpRule(f"{NAME}.expand_dims", "relax.expand_dims", _moves),
    OpRule(f"{NAME}.flatten", "relax.flatten", _moves),
    OpRule(f"{NAME}.transpose", "relax.permute_dims", _moves),
    # Last: a composite of a broadcast_to to a symbolic shape gives its result no shape until its shape argument
    # is written into it (byoc.pipeline.shape_args), and the rules matched after it would read it so.
    OpRule(f"{NAME}.broadcast_to", "relax.broadcast_to", all_of(_base, _broadcast_copies)),
)

VENDOR = register_vendor(
    Vendor(
        NAME,
        RULES,
        DnnlCodegen(),
        description="oneDNN 3.2 primitives (conv1d/2d, matmul, pooling, softmax, layer norm, element-wise; float32, "
                    "and int8 QDQ units)",
        targets=("x86_64",),  # the oneDNN wheels are built for x86_64 only
    )
)

"""Rules of the ``dnnl`` vendor: what the oneDNN runtime executes, and when.

Heavy ops with what oneDNN folds into them (post-ops), largest patterns
first:

* conv2d [+ per-channel constant bias] [+ residual add] [+ relu | clip];
* matmul [+ constant bias over the last axis] [+ GELU (the erf form ONNX
  exports) | relu | a scalar scale];
* max / average pooling, mean (global average pooling), softmax, layer norm
  over the last axis, GELU, and element-wise add / subtract / multiply /
  divide, relu, clip, sigmoid, tanh, and the layout ops reshape, squeeze,
  expand_dims, flatten and transpose, so the glue between heavy ops stays in
  the same partition and activations keep oneDNN's blocked layouts.

Every check enforces a limit of the runtime (``codegens/dnnl/dnnl_runtime.cc``)
and names it when it rejects: float32, static non-empty shapes of rank <= 8,
NCHW/OIHW, constant conv weights (they are reordered once, at load), matmul
operands of rank >= 2, the second operand of an element-wise op
broadcastable to the first (oneDNN broadcasts one side only).

Importing this module registers the vendor even without oneDNN installed:
partitioning and reports work anywhere; building says what to install.
"""

from __future__ import annotations

import itertools
import math

from byoc._tvm import const_array, is_tensor_const
from byoc.checks import (all_of, avg_pool_plain, calls_of, constant_conv_weight, conv_layout_nchw, dtypes,
                         per_channel_bias, pool_layout_nchw, static_shape, static_shapes)
from byoc.codegens.dnnl import DnnlCodegen
from byoc.registry import register_vendor
from byoc.vendor import SUPPORTED, Match, OpRule, PatternRule, Vendor

NAME = "dnnl"
MAX_RANK = 8  # graph_runtime.h's kMaxRank


def _non_empty(match: Match):
    """no zero-sized tensors."""
    for call in match.calls:
        for expr in (call, *call.args):
            shape = static_shape(expr)
            if shape is not None and 0 in shape:
                return f"zero-sized tensor {shape}: oneDNN primitives need non-empty tensors"
    return SUPPORTED


_base = all_of(dtypes("float32"), static_shapes(MAX_RANK), _non_empty)


def _scalar(expr):
    """The value of a one-element constant, else None."""
    if not is_tensor_const(expr):
        return None
    value = const_array(expr)
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def _near(value, want: float) -> bool:
    return value is not None and math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-7)


# -- conv2d -----------------------------------------------------------------------------
def _conv_residual(match: Match):
    """residual of the conv's output shape."""
    out = static_shape(match.annotated["conv"])
    residual = static_shape(match.annotated["residual"])
    if residual != out:
        return f"residual shape {residual} differs from the conv output {out}"
    return SUPPORTED


def _conv_pattern(bias: bool, residual: bool, act: str):
    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        conv = is_op("relax.nn.conv2d")(wildcard(), is_const())
        out, annotations = conv, {"conv": conv}
        if bias:
            annotations["bias"] = is_const()
            out = is_op("relax.add")(out, annotations["bias"])
        if residual:
            annotations["residual"] = wildcard()
            out = is_op("relax.add")(out, annotations["residual"])
        if act == "relu":
            out = is_op("relax.nn.relu")(out)
        elif act == "clip":
            out = is_op("relax.clip")(out, wildcard(), wildcard())
        return out, annotations

    return build


def _conv_rules():
    rules = []
    # Longest first, so conv + bias + residual + relu is taken whole.
    for bias, residual, act in sorted(itertools.product((True, False), (True, False), ("relu", "clip", "")),
                                      key=lambda c: -(c[0] + c[1] + bool(c[2]))):
        name = "conv2d" + "_bias" * bias + "_add" * residual + (f"_{act}" if act else "")
        if bias or residual or act:
            check = all_of(_base, conv_layout_nchw, constant_conv_weight, *([per_channel_bias] if bias else []),
                           *([_conv_residual] if residual else []))
            rules.append(PatternRule(f"{NAME}.{name}", _conv_pattern(bias, residual, act), check))
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


GELU_CONSTANTS = {"gelu_sqrt2": math.sqrt(2.0), "gelu_one": 1.0, "gelu_half": 0.5}


def _gelu(x):
    """x * 0.5 * (1 + erf(x / sqrt 2)), as ONNX exports of GELU spell it; (pattern, annotations)."""
    from tvm.relax.dpl import is_const, is_op

    c = {name: is_const() for name in GELU_CONSTANTS}
    scaled = is_op("relax.divide")(x, c["gelu_sqrt2"])
    one_plus = is_op("relax.add")(is_op("relax.erf")(scaled), c["gelu_one"])
    return is_op("relax.multiply")(is_op("relax.multiply")(x, one_plus), c["gelu_half"]), c


def _gelu_constants(match: Match):
    """the constants are sqrt(2), 1 and 0.5."""
    for name, want in GELU_CONSTANTS.items():
        got = _scalar(match.annotated[name])
        if not _near(got, want):
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


def _broadcast_second(match: Match):
    """the first operand has the output shape (the second may broadcast)."""
    call = match.root
    out = static_shape(call)
    a, b = (static_shape(arg) for arg in call.args[:2])
    if a == out or (call.op.name in ("relax.add", "relax.multiply") and b == out):
        return SUPPORTED
    return f"operands {a} and {b} both broadcast to {out} (oneDNN broadcasts the second operand only)"


def _gelu_pattern():
    from tvm.relax.dpl import wildcard

    return _gelu(wildcard())


_elementwise = all_of(_base, _broadcast_second)

RULES = (
    *_conv_rules(),
    OpRule(f"{NAME}.conv2d", "relax.nn.conv2d", all_of(_base, conv_layout_nchw, constant_conv_weight)),
    *_matmul_rules(),
    OpRule(f"{NAME}.matmul", "relax.matmul", all_of(_base, _matmul_ranks)),
    PatternRule(f"{NAME}.gelu", _gelu_pattern, all_of(_base, _gelu_constants)),
    OpRule(f"{NAME}.max_pool2d", "relax.nn.max_pool2d", all_of(_base, pool_layout_nchw)),
    OpRule(f"{NAME}.avg_pool2d", "relax.nn.avg_pool2d", all_of(_base, pool_layout_nchw, avg_pool_plain)),
    OpRule(f"{NAME}.mean", "relax.mean", _base),
    OpRule(f"{NAME}.softmax", "relax.nn.softmax", _base),
    OpRule(f"{NAME}.layer_norm", "relax.nn.layer_norm", all_of(_base, _layer_norm_last_axis)),
    OpRule(f"{NAME}.add", "relax.add", _elementwise),
    OpRule(f"{NAME}.subtract", "relax.subtract", _elementwise),
    OpRule(f"{NAME}.multiply", "relax.multiply", _elementwise),
    OpRule(f"{NAME}.divide", "relax.divide", _elementwise),
    OpRule(f"{NAME}.relu", "relax.nn.relu", _base),
    OpRule(f"{NAME}.clip", "relax.clip", _base),
    OpRule(f"{NAME}.sigmoid", "relax.sigmoid", _base),
    OpRule(f"{NAME}.tanh", "relax.tanh", _base),
    # Layout ops, so the glue between heavy ops does not split a partition:
    # reshapes are views of the same buffer, a transpose is one reorder.
    OpRule(f"{NAME}.reshape", "relax.reshape", _base),
    OpRule(f"{NAME}.squeeze", "relax.squeeze", _base),
    OpRule(f"{NAME}.expand_dims", "relax.expand_dims", _base),
    OpRule(f"{NAME}.flatten", "relax.flatten", _base),
    OpRule(f"{NAME}.transpose", "relax.permute_dims", _base),
)

VENDOR = register_vendor(
    Vendor(
        NAME,
        RULES,
        DnnlCodegen(),
        description="oneDNN 3.2 primitives (conv2d, matmul, pooling, softmax, layer norm, element-wise; float32)",
        targets=("x86_64",),  # the oneDNN wheels are built for x86_64 only
    )
)

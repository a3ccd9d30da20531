"""Rules of the ``c_source`` vendor: what the reference C kernels support.

float32 with any known rank (a symbolic dim is read from each call's inputs:
one build runs every shape), NCHW/OIHW layouts; and int8 QDQ node units with
static shapes (see :mod:`byoc.vendor.quantized`), computed with ONNX's
integer semantics.
Patterns come before the single-op rules they contain, so conv2d + bias +
relu is taken whole, and a QDQ unit before the float op at its core.
"""

from __future__ import annotations

from byoc.vendor.checks import (all_of, avg_pool_plain, conv_layout_nchw, dtypes, known_ranks, per_channel_bias,
                                pool_layout_nchw, static_shapes)
from byoc.vendor.quantized import qdq_rules, qdq_supported
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.limits import MAX_RANK
from byoc.vendor.registry import register_vendor
from byoc.vendor import OpRule, PatternRule, Vendor

NAME = "c_source"

def _conv_pattern(bias: bool, relu: bool):
    def build():
        from tvm.relax.dpl import is_const, is_op, wildcard

        conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
        out, annotations = conv, {"conv": conv}
        if bias:
            b = is_const()
            out = is_op("relax.add")(out, b)
            annotations["bias"] = b
        if relu:
            out = is_op("relax.nn.relu")(out)
        return out, annotations

    return build


def _matmul_bias_pattern():
    from tvm.relax.dpl import is_op, wildcard

    matmul = is_op("relax.matmul")(wildcard(), wildcard())
    return is_op("relax.add")(matmul, wildcard()), {"matmul": matmul}


def _integers_static(match) -> str:
    """8-bit integer tensors have static shapes (the integer kernels take them compiled in)."""
    from byoc.vendor import SUPPORTED
    from byoc.vendor.checks import dynamic_dims, match_tensors, tensor_type

    for t in match_tensors(match):
        names = dynamic_dims(t)
        if names and str(tensor_type(t).dtype) in ("int8", "uint8"):
            return f"dim {names[0]!r} of an 8-bit integer tensor is dynamic (static shapes only for integers)"
    return SUPPORTED


def float_and_int8_rules(name: str = NAME) -> tuple:
    """The reference kernels' rules under vendor ``name`` (json_runtime takes the float ones too). Float ops
    take symbolic dims, which both runtimes read from each call; QDQ units stay static."""
    shapes = known_ranks(MAX_RANK)
    base = all_of(dtypes("float32"), shapes)
    # Ops that only pick or move values also run on the 8-bit integers a QOperator model
    # leaves between its integer ops (its MaxPool and Flatten read uint8 as they are).
    moves = all_of(dtypes("float32", "int8", "uint8"), shapes, _integers_static)
    conv_check = all_of(base, conv_layout_nchw)
    conv_bias_check = all_of(conv_check, per_channel_bias)
    return (
        *qdq_rules(name, all_of(qdq_supported, static_shapes(MAX_RANK), conv_layout_nchw, pool_layout_nchw, avg_pool_plain)),
        PatternRule(f"{name}.conv2d_bias_relu", _conv_pattern(True, True), conv_bias_check),
        PatternRule(f"{name}.conv2d_bias", _conv_pattern(True, False), conv_bias_check),
        PatternRule(f"{name}.conv2d_relu", _conv_pattern(False, True), conv_check),
        OpRule(f"{name}.conv2d", "relax.nn.conv2d", conv_check),
        PatternRule(f"{name}.matmul_bias", _matmul_bias_pattern, base),
        OpRule(f"{name}.matmul", "relax.matmul", base),
        OpRule(f"{name}.add", "relax.add", base),
        OpRule(f"{name}.subtract", "relax.subtract", base),
        OpRule(f"{name}.multiply", "relax.multiply", base),
        OpRule(f"{name}.divide", "relax.divide", base),
        OpRule(f"{name}.relu", "relax.nn.relu", base),
        OpRule(f"{name}.sigmoid", "relax.sigmoid", base),
        OpRule(f"{name}.tanh", "relax.tanh", base),
        OpRule(f"{name}.clip", "relax.clip", base),
        OpRule(f"{name}.max_pool2d", "relax.nn.max_pool2d", all_of(moves, pool_layout_nchw)),
        OpRule(f"{name}.avg_pool2d", "relax.nn.avg_pool2d", all_of(base, pool_layout_nchw, avg_pool_plain)),
        OpRule(f"{name}.mean", "relax.mean", base),
        OpRule(f"{name}.softmax", "relax.nn.softmax", base),
        OpRule(f"{name}.reshape", "relax.reshape", moves),
        OpRule(f"{name}.concat", "relax.concat", moves),
        OpRule(f"{name}.transpose", "relax.permute_dims", moves),
    )


RULES = float_and_int8_rules()

VENDOR = register_vendor(
    Vendor(
        NAME,
        RULES,
        CSourceCodegen(),
        description="Reference C kernels compiled into the artifact (float32, and int8 QDQ units; NCHW)",
    )
)

"""Rules of the ``c_source`` vendor: what the reference C kernels support.

float32 with any known rank (a symbolic dim is read from each call's inputs:
one build runs every shape), NCHW/OIHW layouts; and int8 QDQ node units (see
:mod:`byoc.vendor.quantized`), computed with ONNX's integer semantics, with
symbolic dims too.
Patterns come before the single-op rules they contain, so conv2d + bias +
relu is taken whole, and a QDQ unit before the float op at its core.
"""

from __future__ import annotations

from byoc.vendor.checks import (all_of, avg_pool_plain, conv_layout_nchw, dtypes, known_ranks, per_channel_bias,
                                pool_layout_nchw)
from byoc.vendor.quantized import qdq_rules, qdq_supported
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.limits import MAX_RANK
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


def float_and_int8_rules() -> tuple:
    """The reference kernels' rules (json_runtime takes the float ones too; each vendor prefixes the names
    with its own). Every op takes symbolic dims, float or int8: the C reads them from each call's inputs
    (json_runtime's runtime specializes a partition per shape)."""
    shapes = known_ranks(MAX_RANK)
    base = all_of(dtypes("float32"), shapes)
    # Ops that only pick or move values also run on the 8-bit integers a QOperator model
    # leaves between its integer ops (its MaxPool and Flatten read uint8 as they are).
    moves = all_of(dtypes("float32", "int8", "uint8"), shapes)
    conv_check = all_of(base, conv_layout_nchw)
    conv_bias_check = all_of(conv_check, per_channel_bias)
    return (
        *qdq_rules(all_of(qdq_supported, shapes, conv_layout_nchw, pool_layout_nchw, avg_pool_plain)),
        PatternRule("conv2d_bias_relu", _conv_pattern(True, True), conv_bias_check),
        PatternRule("conv2d_bias", _conv_pattern(True, False), conv_bias_check),
        PatternRule("conv2d_relu", _conv_pattern(False, True), conv_check),
        OpRule("conv2d", "relax.nn.conv2d", conv_check),
        PatternRule("matmul_bias", _matmul_bias_pattern, base),
        OpRule("matmul", "relax.matmul", base),
        OpRule("add", "relax.add", base),
        OpRule("subtract", "relax.subtract", base),
        OpRule("multiply", "relax.multiply", base),
        OpRule("divide", "relax.divide", base),
        OpRule("relu", "relax.nn.relu", base),
        OpRule("sigmoid", "relax.sigmoid", base),
        OpRule("tanh", "relax.tanh", base),
        OpRule("clip", "relax.clip", base),
        OpRule("max_pool2d", "relax.nn.max_pool2d", all_of(moves, pool_layout_nchw)),
        OpRule("avg_pool2d", "relax.nn.avg_pool2d", all_of(base, pool_layout_nchw, avg_pool_plain)),
        OpRule("mean", "relax.mean", base),
        OpRule("softmax", "relax.nn.softmax", base),
        OpRule("reshape", "relax.reshape", moves),
        OpRule("concat", "relax.concat", moves),
        OpRule("transpose", "relax.permute_dims", moves),
    )


VENDOR = Vendor(
    NAME,
    float_and_int8_rules(),
    CSourceCodegen(),
    description="Reference C kernels compiled into the artifact (float32, and int8 QDQ units; NCHW)",
)
#: The vendor's rules, as it names them ("c_source.<rule>").
RULES = VENDOR.rules

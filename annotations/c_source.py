"""Rules of the ``c_source`` vendor: what the reference C kernels support.

float32, static shapes, NCHW/OIHW layouts; and int8 QDQ node units (see
:mod:`byoc.vendor.quantized`), computed with ONNX's integer semantics.
Patterns come before the single-op rules they contain, so conv2d + bias +
relu is taken whole, and a QDQ unit before the float op at its core.
"""

from __future__ import annotations

from byoc.vendor.checks import all_of, avg_pool_plain, conv_layout_nchw, dtypes, per_channel_bias, pool_layout_nchw, static_shapes
from byoc.vendor.quantized import qdq_rules, qdq_supported
from byoc.codegens.c_source import CSourceCodegen
from byoc.codegens.limits import MAX_RANK
from byoc.vendor.registry import register_vendor
from byoc.vendor import OpRule, PatternRule, Vendor

NAME = "c_source"

_base = all_of(dtypes("float32"), static_shapes(MAX_RANK))
# Ops that only pick or move values also run on the 8-bit integers a QOperator model
# leaves between its integer ops (its MaxPool and Flatten read uint8 as they are).
_moves = all_of(dtypes("float32", "int8", "uint8"), static_shapes(MAX_RANK))


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


_conv_check = all_of(_base, conv_layout_nchw)
_conv_bias_check = all_of(_conv_check, per_channel_bias)

RULES = (
    *qdq_rules(NAME, all_of(qdq_supported, static_shapes(MAX_RANK), conv_layout_nchw, pool_layout_nchw, avg_pool_plain)),
    PatternRule(f"{NAME}.conv2d_bias_relu", _conv_pattern(True, True), _conv_bias_check),
    PatternRule(f"{NAME}.conv2d_bias", _conv_pattern(True, False), _conv_bias_check),
    PatternRule(f"{NAME}.conv2d_relu", _conv_pattern(False, True), _conv_check),
    OpRule(f"{NAME}.conv2d", "relax.nn.conv2d", _conv_check),
    PatternRule(f"{NAME}.matmul_bias", _matmul_bias_pattern, _base),
    OpRule(f"{NAME}.matmul", "relax.matmul", _base),
    OpRule(f"{NAME}.add", "relax.add", _base),
    OpRule(f"{NAME}.subtract", "relax.subtract", _base),
    OpRule(f"{NAME}.multiply", "relax.multiply", _base),
    OpRule(f"{NAME}.divide", "relax.divide", _base),
    OpRule(f"{NAME}.relu", "relax.nn.relu", _base),
    OpRule(f"{NAME}.sigmoid", "relax.sigmoid", _base),
    OpRule(f"{NAME}.tanh", "relax.tanh", _base),
    OpRule(f"{NAME}.clip", "relax.clip", _base),
    OpRule(f"{NAME}.max_pool2d", "relax.nn.max_pool2d", all_of(_moves, pool_layout_nchw)),
    OpRule(f"{NAME}.avg_pool2d", "relax.nn.avg_pool2d", all_of(_base, pool_layout_nchw, avg_pool_plain)),
    OpRule(f"{NAME}.mean", "relax.mean", _base),
    OpRule(f"{NAME}.softmax", "relax.nn.softmax", _base),
    OpRule(f"{NAME}.reshape", "relax.reshape", _moves),
    OpRule(f"{NAME}.concat", "relax.concat", _moves),
    OpRule(f"{NAME}.transpose", "relax.permute_dims", _moves),
)

VENDOR = register_vendor(
    Vendor(
        NAME,
        RULES,
        CSourceCodegen(),
        description="Reference C kernels compiled into the artifact (float32, and int8 QDQ units; NCHW)",
    )
)

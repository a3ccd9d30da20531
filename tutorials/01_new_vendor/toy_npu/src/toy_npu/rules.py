"""What the toy NPU supports. Each check returns SUPPORTED or a reason a person can read.

The first line of each check's docstring is what ``python -m byoc.optable``
prints as the rule's constraints, so keep it in step with the limits below.
"""

from byoc import SUPPORTED, OpRule, PatternRule
from byoc.vendor.checks import all_of, conv_layout_nchw, dtypes, per_channel_bias, static_shapes

MAX_KERNEL = 5  # kernel height and width
CHANNEL_MULTIPLE = 8  # the NPU's vector width, in channels
MAX_K = 4096  # matmul reduction length the accumulators hold


def conv_limits(match):
    """kernel <= 5x5, in and out channels a multiple of 8."""
    for conv in match.ops_of("relax.nn.conv2d"):
        out_ch, in_ch, kh, kw = conv.inputs[1].shape
        if kh > MAX_KERNEL or kw > MAX_KERNEL:
            return f"kernel {kh}x{kw} > {MAX_KERNEL}x{MAX_KERNEL}"
        for what, channels in (("input", in_ch * conv.attrs["groups"]), ("output", out_ch)):
            if channels % CHANNEL_MULTIPLE:
                return f"{what} channels {channels} not a multiple of {CHANNEL_MULTIPLE}"
    return SUPPORTED


def matmul_limits(match):
    """reduction dim K <= 4096."""
    k = match.op.inputs[0].shape[-1]
    return SUPPORTED if k <= MAX_K else f"matmul K={k} > {MAX_K}"


def conv_bias_relu():
    """conv2d -> add(bias constant) -> relu, matched as one unit."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    bias = is_const()
    return is_op("relax.nn.relu")(is_op("relax.add")(conv, bias)), {"conv": conv, "bias": bias}


# float32, static shapes and NCHW first: the other checks read static NCHW shapes.
_conv = all_of(dtypes("float32"), static_shapes(4), conv_layout_nchw, conv_limits)

# Larger patterns before the single ops they contain; the vendor prefixes each name ("toy_npu.conv2d").
RULES = (
    PatternRule("conv2d_bias_relu", conv_bias_relu, all_of(_conv, per_channel_bias)),
    OpRule("conv2d", "relax.nn.conv2d", _conv),
    OpRule("matmul", "relax.matmul", all_of(dtypes("float32"), static_shapes(4), matmul_limits)),
)

"""What the toy NPU supports. Each check returns SUPPORTED or a reason a person can read.

The first line of each check's docstring is what ``python -m byoc.optable``
prints as the rule's constraints, so keep it in step with the limits below.
"""

from byoc import SUPPORTED, OpRule, PatternRule
from byoc.vendor.checks import all_of, calls_of, dtypes, static_shape, static_shapes

MAX_KERNEL = 5  # kernel height and width
CHANNEL_MULTIPLE = 8  # the NPU's vector width, in channels
MAX_K = 4096  # matmul reduction length the accumulators hold


def conv_limits(match):
    """NCHW/OIHW, kernel <= 5x5, in and out channels a multiple of 8."""
    for call in calls_of(match, "relax.nn.conv2d"):
        a = call.attrs
        if (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return f"layout {a.data_layout}/{a.kernel_layout} not supported (NCHW/OIHW only)"
        out_ch, in_ch, kh, kw = static_shape(call.args[1])
        if kh > MAX_KERNEL or kw > MAX_KERNEL:
            return f"kernel {kh}x{kw} > {MAX_KERNEL}x{MAX_KERNEL}"
        for what, channels in (("input", in_ch * a.groups), ("output", out_ch)):
            if channels % CHANNEL_MULTIPLE:
                return f"{what} channels {channels} not a multiple of {CHANNEL_MULTIPLE}"
    return SUPPORTED


def per_channel_bias(match):
    """bias is a per-channel constant."""
    channels = static_shape(match.annotated["conv"])[1]
    shape = static_shape(match.annotated["bias"])
    if shape not in ((1, channels, 1, 1), (channels, 1, 1)):
        return f"bias shape {shape} is not per-channel (1, {channels}, 1, 1)"
    return SUPPORTED


def matmul_limits(match):
    """reduction dim K <= 4096."""
    k = static_shape(match.root.args[0])[-1]
    return SUPPORTED if k <= MAX_K else f"matmul K={k} > {MAX_K}"


def conv_bias_relu():
    """conv2d -> add(bias constant) -> relu, matched as one unit."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    bias = is_const()
    return is_op("relax.nn.relu")(is_op("relax.add")(conv, bias)), {"conv": conv, "bias": bias}


# float32 and static shapes first: the other checks read static shapes.
_base = all_of(dtypes("float32"), static_shapes(4))

# Larger patterns before the single ops they contain.
RULES = (
    PatternRule("toy_npu.conv2d_bias_relu", conv_bias_relu, all_of(_base, conv_limits, per_channel_bias)),
    OpRule("toy_npu.conv2d", "relax.nn.conv2d", all_of(_base, conv_limits)),
    OpRule("toy_npu.matmul", "relax.matmul", all_of(_base, matmul_limits)),
)

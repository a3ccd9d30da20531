"""What the NPU takes, and how much of it fits in its SRAM at once."""

from byoc.vendor import SUPPORTED, LeaveOut, OpRule, Split, Vendor
from byoc.vendor.checks import all_of, attr_equals, constant_conv_weight, conv_layout_nchw, dtypes, static_shapes

from npu.codegen import NpuCodegen

base = all_of(dtypes("float32"), static_shapes(4))


def two_dims(match):
    """matmul of 2-D operands."""
    return SUPPORTED if all(len(t.shape) == 2 for t in match.op.inputs) else "matmul of more than 2 dims"


def sram_bytes(call) -> int:
    size = 4
    for dim in call.output.shape:
        size *= dim
    return size


def fits_sram(graph):
    """Every value a partition computes stays in SRAM: an op too large alone is left out, and the partition is
    split before each op that would overflow it."""
    budget = graph.options["sram_kib"] * 1024
    too_large = [LeaveOut([c], f"its output alone, {sram_bytes(c)} bytes, > SRAM {budget}")
                 for c in graph.ops if sram_bytes(c) > budget]
    if too_large:
        return too_large
    starts, used = [], 0
    for call in graph.ops:
        used += sram_bytes(call)
        if used > budget:
            starts, used = starts + [call], sram_bytes(call)
    return Split(starts, f"its activations > SRAM {budget}") if starts else SUPPORTED


VENDOR = Vendor(
    "npu",
    (
        OpRule("conv2d", "relax.nn.conv2d", all_of(base, conv_layout_nchw, constant_conv_weight)),
        OpRule("add", "relax.add", base),
        OpRule("relu", "relax.nn.relu", base),
        OpRule("max_pool2d", "relax.nn.max_pool2d",
               all_of(base, attr_equals("relax.nn.max_pool2d", "layout", ("NCHW",)),
                      attr_equals("relax.nn.max_pool2d", "ceil_mode", (False,)))),
        OpRule("matmul", "relax.matmul", all_of(base, two_dims)),
    ),
    NpuCodegen(),
    description="tutorial 4's NPU: static shapes, an SRAM budget, an external compiler",
    partition_check=fits_sram,
)

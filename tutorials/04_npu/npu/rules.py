"""What the NPU takes, and how much of it fits in its SRAM at once."""

from byoc.vendor import SUPPORTED, OpRule, Vendor
from byoc.vendor.checks import (all_of, attr_equals, constant_conv_weight, conv_layout_nchw, dtypes, output_bytes,
                                static_shapes, within_budget)

from npu.codegen import NpuCodegen

base = all_of(dtypes("float32"), static_shapes(4))


def two_dims(match):
    """matmul of 2-D operands."""
    return SUPPORTED if all(len(t.shape) == 2 for t in match.op.inputs) else "matmul of more than 2 dims"


def sram_bytes(graph) -> int:
    return graph.options["sram_kib"] * 1024


# Every value a partition computes stays in SRAM: an op too large alone is left out, and the partition is split
# before each op that would overflow it.
fits_sram = within_budget(output_bytes, sram_bytes, "bytes of activations")


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
    static_shapes=True,  # on a model with symbolic dims: one program per size the build names (specialize=)
)

"""Toy NPU: an example byoc vendor, registered through the ``byoc.vendors`` entry point.

The rules say what the (imaginary) NPU supports and why it rejects the rest;
the codegen (:mod:`toy_npu.codegen`) turns the accepted partitions into C.
"""

from byoc import Vendor

from .codegen import ToyNpuCodegen
from .rules import RULES

VENDOR = Vendor(
    "toy_npu",
    RULES,
    ToyNpuCodegen(),
    description="Toy NPU: conv2d (kernel <= 5x5, channels % 8 == 0), conv + bias + relu, matmul (K <= 4096)",
)

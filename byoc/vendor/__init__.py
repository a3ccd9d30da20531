"""The vendor API: everything a vendor writes against, and nothing else.

- :mod:`byoc.vendor.rules` - :class:`Vendor`, :class:`OpRule`,
  :class:`PatternRule`, :class:`Match`, :data:`SUPPORTED` and
  :class:`Codegen`, the codegen interface (the required ``compile`` and a
  default for each optional capability), which a vendor's codegen subclasses,
  and what a partition check returns (:class:`LeaveOut`, :class:`Split`);
- :mod:`byoc.vendor.ops` - :class:`~byoc.vendor.ops.OpCall` and
  :class:`~byoc.vendor.ops.Tensor`, the one plain view of op calls: a check
  reads its match so (``match.op``, ``match.ops_of``, ``match.tensor``), a
  codegen its partition;
- :mod:`byoc.vendor.options` - :class:`VendorOption`, an option a codegen
  declares, and how a build resolves them (:class:`OptionSetting`);
- :mod:`byoc.vendor.checks` - reusable checks and combinators (dtypes,
  static shapes, layouts, constant weights, ``all_of``);
- :mod:`byoc.vendor.graph` - :class:`~byoc.vendor.graph.PartitionGraph`,
  the plain-Python view of a partition that a codegen compiles;
- :mod:`byoc.vendor.values` - readers of Relax values (constants, prim
  values, static shapes) that hide TVM 0.27's class names;
- :mod:`byoc.vendor.abi` - ``byoc_abi.h``, the C ABI of a partition's entry
  point, to paste or write beside a codegen's C;
- :mod:`byoc.vendor.csource` - :class:`CSource`, C a codegen returns with
  binary blobs (weights as bytes) that byoc links in;
- :mod:`byoc.vendor.device` - :class:`DeviceMemory`, a codegen's memory
  apart from the host's, which byoc keeps values in between partitions;
- :mod:`byoc.vendor.registry` - the vendors published as ``byoc.vendors``
  entry points (byoc's own among them), and :func:`register_vendor` for a
  script's.

A vendor module usually needs only::

    from byoc.vendor import SUPPORTED, Codegen, OpRule, PatternRule, Vendor
    from byoc.vendor.checks import all_of, dtypes, static_shapes

    def small_kernel(match):
        '''kernel <= 5x5.'''
        kh, kw = match.op.inputs[1].shape[2:]
        return SUPPORTED if kh <= 5 and kw <= 5 else f"kernel {kh}x{kw} > 5x5"

    VENDOR = Vendor("acme", (OpRule("conv2d", "relax.nn.conv2d",  # the rule "acme.conv2d"
                                    all_of(dtypes("float32"), static_shapes(4), small_kernel)),), AcmeCodegen())
"""

from byoc.vendor.rules import (SUPPORTED, Check, CheckResult, Codegen, LeaveOut, Match, OpRule, PatternRule, Rule,
                               RuntimeMemory, Split, Vendor, always, as_codegen, cost_estimator, runtime_memory,
                               runtime_module_kinds, standalone_source)
from byoc.vendor.csource import CSource
from byoc.vendor.device import DeviceMemory
from byoc.vendor.ops import OpCall, Tensor
from byoc.vendor.options import OptionSetting, VendorOption
from byoc.vendor.registry import get_vendor, list_vendors, register_vendor, unregister_vendor

__all__ = [
    "SUPPORTED", "CSource", "Check", "CheckResult", "Codegen", "DeviceMemory", "LeaveOut", "Match", "OpCall", "OpRule", "OptionSetting", "PatternRule",
    "Rule", "RuntimeMemory", "Split", "Tensor", "Vendor", "VendorOption",
    "always", "as_codegen", "cost_estimator", "get_vendor", "list_vendors",
    "register_vendor", "runtime_memory", "runtime_module_kinds", "standalone_source", "unregister_vendor",
]

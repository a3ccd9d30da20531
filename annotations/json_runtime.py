"""Rules of the ``json_runtime`` vendor: what byoc's JSON-graph runtime executes.

The runtime runs the reference kernels that the C-source codegen compiles in
(``byoc_kernels.h``), so it supports exactly the same ops, patterns and
limits: the rules are c_source's float rules, under this vendor's name, with
the same checks and rejection reasons (float32 only, rank <= 8, NCHW/OIHW,
per-channel conv bias, no dilated or ceil-mode average pooling), except that
dims may be symbolic: the runtime compiles a partition for each set of sizes
it is called with. c_source's int8 rules (QDQ units, lone Q/DQ, data movement on 8-bit
integers) are not taken: the runtime's kernels are float32 only.

Importing this module loads nothing: the runtime library (compiled when byoc
is installed) is loaded when an artifact that needs it is built or loaded.
"""

from __future__ import annotations

from dataclasses import replace

from byoc.annotations.c_source import float_and_int8_rules
from byoc.codegens.json_runtime import JsonRuntimeCodegen
from byoc.vendor.checks import all_of, dtypes
from byoc.vendor.quantized import QuantizedUnitRule
from byoc.vendor import Vendor

NAME = "json_runtime"
_FLOAT32 = dtypes("float32")
_INT8_OPS = ("relax.quantize", "relax.dequantize")

_FLOAT_RULES = tuple(
    replace(rule, check=all_of(_FLOAT32, rule.check))
    for rule in float_and_int8_rules()
    if not isinstance(rule, QuantizedUnitRule) and getattr(rule, "op", None) not in _INT8_OPS
)

VENDOR = Vendor(
    NAME,
    _FLOAT_RULES,
    JsonRuntimeCodegen(),
    description="Subgraphs as JSON run by byoc's own runtime module (float32, NCHW)",
)
#: The vendor's rules, as it names them ("json_runtime.<rule>").
RULES = VENDOR.rules

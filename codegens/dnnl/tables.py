"""Element-wise QDQ units (the ``dnnl.qtable`` rule) as one ``byoc.byte_table`` op each.

``byoc.vendor.quantized.qdq_table_rule`` takes ``DQ(x) -> element-wise float ops -> Q`` with 8-bit, per-tensor
``x`` and output: the float ops may be ones oneDNN has no primitive for (ONNX's Erf, which onnxruntime's
quantizer leaves between a DQ and a Q in every erf GELU: ``DQ -> Div -> Erf -> Q``). Such a unit's output is a
function of x's 256 codes, so this rewrite computes those 256 output bytes here, from each op's ONNX definition
(``byoc.vendor.quantized.unit_table``), and replaces the unit by one op ``byoc.byte_table(x)`` with the table as
its ``table`` attribute. The runtime (``runtime/byte_tables.cc``) maps the tensor through it (``byte_table.h``),
composing it with a byte table computed just before from the same tensor when nothing else reads that one.

A unit the matcher folded into one ``qnn.*`` call (one op between DQ and Q, and a relu or clip after it as the
call's output range) is computed the same way, its output range applied to the codes (quantizing after a relu
or clip is clamping the codes).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from byoc.errors import CodegenError
from byoc.vendor.graph import OpCall, PartitionGraph, qdq_params
from byoc.vendor.quantized import unit_table

BYTE_TABLE = "byoc.byte_table"
RULE = "dnnl.qtable"


def tables_computed(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each ``dnnl.qtable`` unit replaced by one ``byoc.byte_table`` op."""
    if not any(call.rule == RULE for call in graph.ops):
        return graph
    groups: dict[int, list[OpCall]] = {}
    for call in graph.ops:
        if call.rule == RULE:
            groups.setdefault(call.group, []).append(call)
    ops: list[OpCall] = []
    done: set[int] = set()
    for call in graph.ops:
        if call.rule != RULE:
            ops.append(call)
        elif call.group not in done:
            done.add(call.group)
            ops.append(_table_op(groups[call.group]))
    return replace(graph, ops=ops)


def _table_op(calls: list[OpCall]) -> OpCall:
    """One ``byoc.byte_table`` op for one unit's calls (in program order: DQ, the chain, Q; or one qnn call)."""
    last = calls[-1]
    if last.quant is not None:  # folded: qnn.<op>(x) with its output range
        if len(calls) != 1:
            raise CodegenError(f"byte table unit {last.output.name}: a folded unit among {len(calls)} calls")
        unit = last.quant
        core = OpCall(unit.float_ops[0], [last.inputs[0]], last.output, dict(last.attrs), last.rule, last.group)
        table = unit_table(unit.inputs[0], [core], unit.output)
        lo, hi = unit.output_range
        codes = np.clip(table.view(unit.output.dtype).astype(np.int64), lo, hi).astype(unit.output.dtype)
        return _op(last.inputs[0], codes.view(np.uint8), last)
    dequantize, quantize, steps = calls[0], calls[-1], calls[1:-1]
    if dequantize.op != "relax.dequantize" or quantize.op != "relax.quantize" or not steps:
        raise CodegenError(f"byte table unit {last.output.name}: not DQ -> element-wise ops -> Q "
                           f"({', '.join(c.op for c in calls)})")
    previous = dequantize.output.id
    for step in steps:  # a chain: each op reads the one before
        if previous not in [t.id for t in step.inputs]:
            raise CodegenError(f"byte table unit {last.output.name}: {step.op} does not read the op before it")
        previous = step.output.id
    table = unit_table(qdq_params(dequantize), steps, qdq_params(quantize))
    return _op(dequantize.inputs[0], table, quantize)


def _op(source, table: np.ndarray, quantize: OpCall) -> OpCall:
    return OpCall(BYTE_TABLE, [source], quantize.output, {"table": [int(b) for b in table]}, quantize.rule,
                  quantize.group)


__all__ = ["BYTE_TABLE", "tables_computed"]

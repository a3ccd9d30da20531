"""NaN guards as one op: ``where(isnan(x), c, x)``, which transformers' exports write after every attention's
softmax (a row with every key masked is NaN in PyTorch), becomes ``byoc.nan_to {value: c}`` on ``x``, a byoc
kernel of the runtime (``NanTo``, ``runtime/kernels.h``). Left as two ops, its boolean mask is no tensor the
runtime holds, so the guard ran on the host and cut every decoder layer into two partitions."""

from __future__ import annotations

from dataclasses import replace

from byoc.vendor.graph import PartitionGraph
from byoc.vendor.ops import OpCall

__all__ = ["NAN_TO", "nan_guards_fused"]

NAN_TO = "byoc.nan_to"


def nan_guards_fused(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each ``isnan`` whose mask only a ``where(mask, c, x)`` of the same ``x`` reads (the dnnl
    rule ``nan_to`` takes no other) replaced, with that ``where``, by one ``byoc.nan_to`` op."""
    masks = {call.output.id: call for call in graph.ops if call.op == "relax.isnan"}
    if not masks:
        return graph
    ops = []
    for call in graph.ops:
        if call.op == "relax.isnan":
            continue
        guard = masks.pop(call.inputs[0].id, None) if call.op == "relax.where" else None
        if guard is None:
            ops.append(call)
            continue
        value = float(call.inputs[1].data.reshape(()))
        ops.append(OpCall(NAN_TO, [guard.inputs[0]], call.output, {"value": value}, call.rule, call.group))
    ops = [masks[i] for i in masks] + ops if masks else ops  # a mask read otherwise stays (the serializer names it)
    return replace(graph, ops=ops)

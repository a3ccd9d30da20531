"""Constant indices of ``gather_elements`` as float32 constants: the dnnl runtime holds float32 constants only,
and its GatherElements kernel reads a float32 index as well as an int64 one (``runtime/kernels.h``). The rule
takes a constant index only where float32 holds every value exactly (below 2**24). DeBERTa's relative positions
are such a constant when the sequence length is static."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from byoc.vendor.graph import PartitionGraph

__all__ = ["EXACT_IN_FLOAT32", "constant_indices_as_floats"]

#: the integers float32 holds exactly
EXACT_IN_FLOAT32 = 2 ** 24


def constant_indices_as_floats(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each int64 constant index of a ``relax.gather_elements`` given as a float32 constant."""
    ops, changed = [], False
    for call in graph.ops:
        index = call.inputs[1] if call.op == "relax.gather_elements" else None
        if index is None or index.kind != "const" or index.dtype != "int64":
            ops.append(call)
            continue
        as_float = replace(index, dtype="float32", data=np.asarray(index.data, np.float32))
        ops.append(replace(call, inputs=[call.inputs[0], as_float]))
        changed = True
    return replace(graph, ops=ops) if changed else graph

"""Rotary position embeddings as one op: ``x * cos + rotate_half(x) * sin``.

transformers' exports (Llama, Qwen2, Mistral, ...) apply the rotary embedding to every layer's queries and keys as
seven ops, where ``rotate_half(x)`` is ``concat(-x[..., d/2:], x[..., :d/2])`` over the last axis::

    x[..., d/2:] -> negative -> concat(., x[..., :d/2]) -> * sin -> + (x * cos)

Each is a primitive of its own in the runtime, fourteen a layer at every token. This rewrite makes each form one
``byoc.rotary`` op on ``x``, ``cos`` and ``sin`` (which broadcast to ``x``'s shape: one table for every head), and
the runtime computes it in one pass (``Rotary``, ``runtime/kernels.h``). A form is taken only when its intermediate
values are read by nothing else, nor are outputs of the partition.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from byoc.vendor.graph import OpCall, PartitionGraph

from .op_index import OpIndex

__all__ = ["ROTARY", "rotaries_fused"]

ROTARY = "byoc.rotary"


def rotaries_fused(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each rotary embedding spelled as several ops replaced by one ``byoc.rotary`` op (the caller's
    graph is left as it was)."""
    index_of = OpIndex(graph)
    forms: dict[int, OpCall] = {}  # the position of a form's add -> the op replacing the form
    taken: set[int] = set()
    for index, call in enumerate(graph.ops):
        if call.op == "relax.add":
            found = _form(graph.ops, index, index_of)
            if found is not None and not taken.intersection(found[0]):
                forms[index] = found[1]
                taken.update(found[0])
    if not forms:
        return graph
    # The op takes the add's place: cos and sin may be computed after the slices (they are in Llama's graph).
    ops = [forms.get(index, call) for index, call in enumerate(graph.ops) if index in forms or index not in taken]
    return replace(graph, ops=ops)


def _form(ops, add_at: int, index_of: OpIndex) -> Optional[tuple[set, OpCall]]:
    """The rotary embedding whose final add is ``ops[add_at]``: its op positions and the op replacing them."""
    producer, only_reader = index_of.producer, index_of.only_reader
    add = ops[add_at]
    products = [producer.get(t.id) for t in add.inputs]
    if len(products) != 2 or None in products or any(only_reader(t) != add_at for t in add.inputs):
        return None
    for rotated_at, plain_at in (products, products[::-1]):
        rotated, plain = ops[rotated_at], ops[plain_at]
        if rotated.op != "relax.multiply" or plain.op != "relax.multiply":
            continue
        for half_turn, sin in (rotated.inputs, rotated.inputs[::-1]):
            found = _rotate_half(ops, index_of, producer.get(half_turn.id), rotated_at)
            if found is None:
                continue
            x, positions = found
            cos = [t for t in plain.inputs if t.id != x.id]
            if len(cos) != 1 or x.id not in {t.id for t in plain.inputs}:
                continue
            if add.output.shape != x.shape or x.dtype != "float32":
                continue
            chain = positions | {rotated_at, plain_at, add_at}
            first = ops[min(chain)]
            return chain, OpCall(ROTARY, [x, cos[0], sin], add.output, {}, first.rule, first.group)
    return None


def _rotate_half(ops, index_of: OpIndex, concat_at: Optional[int], reader_at: int):
    """``(x, op positions)`` when ``ops[concat_at]`` is ``concat(-x[..., d/2:], x[..., :d/2])`` over the last axis,
    read only by ``ops[reader_at]``; else None."""
    producer, only_reader = index_of.producer, index_of.only_reader
    if concat_at is None or ops[concat_at].op != "relax.concat" or only_reader(ops[concat_at].output) != reader_at:
        return None
    concat = ops[concat_at]
    rank = len(concat.output.shape)
    if len(concat.inputs) != 2 or concat.attrs.get("axis") not in (-1, rank - 1):
        return None
    negated, low = concat.inputs
    neg_at, low_at = producer.get(negated.id), producer.get(low.id)
    if neg_at is None or low_at is None or ops[neg_at].op != "relax.negative":
        return None
    high_at = producer.get(ops[neg_at].inputs[0].id)
    if high_at is None:
        return None
    high, low_slice = ops[high_at], ops[low_at]
    if high.op != "relax.strided_slice" or low_slice.op != "relax.strided_slice":
        return None
    x = high.inputs[0]
    width = x.shape[-1] if x.shape else None
    if low_slice.inputs[0].id != x.id or not isinstance(width, int) or width % 2:
        return None
    half = width // 2
    if not (_slice_of_last(high, rank, half, width) and _slice_of_last(low_slice, rank, 0, half)):
        return None
    if any(only_reader(ops[at].output) != reader for at, reader in
           ((high_at, neg_at), (neg_at, concat_at), (low_at, concat_at))):
        return None
    return x, {concat_at, neg_at, high_at, low_at}


def _slice_of_last(call: OpCall, rank: int, begin: int, end: int) -> bool:
    """Whether ``call`` (a strided_slice: axes, begin, end, strides as arg1..arg4) takes ``begin:end`` of the last
    axis with step 1 (an end past the axis, as exports write ``x[..., d/2:]``, is its end)."""
    a = call.attrs
    axes, begins, ends, strides = (tuple(a.get(k) or ()) for k in ("arg1", "arg2", "arg3", "arg4"))
    if len(axes) != 1 or axes[0] % rank != rank - 1 or begins != (begin,) or strides not in ((), (1,)):
        return False
    to_the_end = end == call.inputs[0].shape[-1] and len(ends) == 1 and ends[0] >= end
    return ends == (end,) or to_the_end

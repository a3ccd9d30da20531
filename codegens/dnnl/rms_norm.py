"""RMS normalization as one op: ``x / sqrt(mean(x * x) + eps)`` over the last axis, times a weight.

transformers' exports write RMSNorm (Llama, Qwen2, Mistral, ...) as seven ops, and byoc's import of onnxruntime's
SimplifiedLayerNormalization as six (``prepare/node_rewrite.NodeRewrite.rms_norm``)::

    power(x, 2) | x * x  ->  mean(-1, keepdims)  ->  + eps  ->  sqrt  ->  1 / s, then x * r  |  x / s
                                                                         ->  * weight (optional)

Each is a primitive of its own in the runtime, and a decoder runs two per layer at every token. This rewrite
makes each form one ``byoc.rms_norm {epsilon}`` op on ``x`` (and the weight), which the runtime computes in one
pass per row (``RmsNorm``, ``runtime/kernels.h``). A form is taken only when its intermediate values are read by
nothing else (nor are outputs of the partition), its epsilon is a scalar constant and its weight a constant of the
last axis' width.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

from .op_index import OpIndex

__all__ = ["RMS_NORM", "rms_norms_fused"]

RMS_NORM = "byoc.rms_norm"


def rms_norms_fused(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each RMSNorm spelled as several ops replaced by one ``byoc.rms_norm`` op (the caller's graph
    is left as it was)."""
    index_of = OpIndex(graph)
    forms: dict[int, tuple[list[int], OpCall]] = {}  # the first op of a form -> (its ops, the op replacing them)
    taken: set[int] = set()
    for index, call in enumerate(graph.ops):
        if call.op == "relax.mean":
            found = _form(graph, index, index_of)
            if found is not None and not taken.intersection(found[0]):
                forms[min(found[0])] = found
                taken.update(found[0])
    if not forms:
        return graph
    ops = []
    for index, call in enumerate(graph.ops):
        if index in forms:
            ops.append(forms[index][1])
        elif index not in taken:
            ops.append(call)
    return replace(graph, ops=ops)


def _form(graph, mean_at: int, index_of: OpIndex) -> Optional[tuple[list[int], OpCall]]:
    """The RMSNorm whose mean is ``graph.ops[mean_at]``: its op positions and the op replacing them, or None."""
    ops, only_reader, producer = graph.ops, index_of.only_reader, index_of.producer
    mean = ops[mean_at]
    x_rank = len(mean.output.shape)
    if not mean.attrs.get("keepdims") or [a % max(x_rank, 1) for a in mean.attrs.get("axis") or ()] != [x_rank - 1]:
        return None

    square_at = producer.get(mean.inputs[0].id)
    if square_at is None or only_reader(mean.inputs[0]) != mean_at:
        return None
    x = _squared(ops[square_at])
    if x is None or x.shape[-1:] != mean.inputs[0].shape[-1:] or x.dtype != "float32":
        return None
    chain = [square_at, mean_at]
    add_at = only_reader(mean.output)
    if add_at is None or ops[add_at].op != "relax.add":
        return None
    epsilon = _scalar_other(ops[add_at], mean.output)
    if epsilon is None:
        return None
    chain.append(add_at)
    root_at = only_reader(ops[add_at].output)
    if root_at is None or ops[root_at].op != "relax.sqrt":
        return None
    root = ops[root_at]
    chain.append(root_at)
    after = only_reader(root.output)
    if after is None or ops[after].op != "relax.divide" or ops[after].inputs[1].id != root.output.id:
        return None
    call = ops[after]
    if call.inputs[0].id == x.id:  # x / s
        normed_at = after
    elif _scalar_value(call.inputs[0]) == 1.0:  # 1 / s, then x * r
        chain.append(after)
        normed_at = only_reader(call.output)
        if normed_at is None or not _product_of(ops[normed_at], x, call.output):
            return None
    else:
        return None
    chain.append(normed_at)
    normed = ops[normed_at].output
    inputs, last = [x], normed
    weighted_at = only_reader(normed)
    if weighted_at is not None and ops[weighted_at].op == "relax.multiply":
        weight = next((t for t in ops[weighted_at].inputs if t.id != normed.id), None)
        if (weight is not None and weight.kind == "const" and tuple(weight.shape) == tuple(x.shape[-1:])
                and ops[weighted_at].output.shape == normed.shape):
            chain.append(weighted_at)
            inputs.append(weight)
            last = ops[weighted_at].output
    first = ops[min(chain)]
    return chain, OpCall(RMS_NORM, inputs, last, {"epsilon": epsilon}, first.rule, first.group)


def _squared(call: OpCall) -> Optional[Tensor]:
    """``x`` when ``call`` is ``x * x`` or ``power(x, 2)``."""
    if call.op == "relax.multiply" and len(call.inputs) == 2 and call.inputs[0].id == call.inputs[1].id:
        return call.inputs[0]
    if call.op == "relax.power" and _scalar_value(call.inputs[1]) == 2.0:
        return call.inputs[0]
    return None


def _product_of(call: OpCall, x: Tensor, factor: Tensor) -> bool:
    """Whether ``call`` is ``x * factor`` (either order) of ``x``'s shape."""
    return (call.op == "relax.multiply" and {t.id for t in call.inputs} == {x.id, factor.id}
            and call.output.shape == x.shape)


def _scalar_other(call: OpCall, tensor: Tensor) -> Optional[float]:
    """The scalar constant ``call`` adds to ``tensor``, or None."""
    other = [t for t in call.inputs if t.id != tensor.id]
    return _scalar_value(other[0]) if len(other) == 1 and call.output.shape == tensor.shape else None


def _scalar_value(tensor: Tensor) -> Optional[float]:
    """The value of a one-element constant, else None."""
    if tensor.kind != "const" or tensor.data is None or tensor.data.size != 1:
        return None
    return float(tensor.data.reshape(-1)[0])

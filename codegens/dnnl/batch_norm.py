"""Inference batch norms folded into the convolution before them, or sent as a per-channel scale and
shift, for the oneDNN runtime.

Exporters from opset 13 on keep a BatchNormalization after each Conv (byoc's
preparation fuses only older ones, so that reports keep naming the user's
node). oneDNN has no batch-norm post-op: as a primitive of its own the batch
norm reads and writes the whole activation once more, and the activation
after it can no longer be the conv's post-op. RapidAI's MobileNetV3
orientation classifier ran 27 batch-norm and 28 hard-swish primitives, 1.0 of
its 2.6 ms.

Per channel, ``BN(y) = y * s + t`` with ``s = gamma / sqrt(var + eps)`` and
``t = beta - mean * s``. So ``conv(x, w) [+ b]`` followed by it is
``conv(x, w * s) + (b * s + t)``: the conv and its bias, which the runtime
fuses into one primitive with the post-ops after it. onnxruntime's
Conv + BatchNormalization fusion computes the same. A batch norm that folds
into no conv is ``x * s + t``: two binary ops, post-ops of the op before them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Optional

import numpy as np

from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

_CONVS = ("relax.nn.conv1d", "relax.nn.conv2d")


def batch_norms_folded(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each inference batch norm that follows a conv [+ bias] folded into it, and each other
    one with constant statistics as a multiply and an add per channel.

    The conv is of the batch norm's own composite (a ``conv2d_bn_relu`` rule), or the batch norm is a
    composite of its own (a pattern cannot end in it). Either way nothing else reads the conv's output.

    The caller's graph is left as it was.
    """
    if not any(c.op == "relax.nn.batch_norm" for c in graph.ops):
        return graph
    producer = {c.output.id: c for c in graph.ops}
    group_sizes = Counter(c.group for c in graph.ops)
    readers = Counter([t.id for c in graph.ops for t in c.inputs] + [t.id for t in graph.outputs])
    next_id = graph.unused_id()
    folded: dict[int, list[OpCall]] = {}  # id(call) -> the calls replacing it ([] for the ones folded away)
    for bn in graph.ops:
        chain = _foldable(bn, producer, readers, alone=group_sizes[bn.group] == 1)
        if chain is None:
            if _constant_stats(bn):
                folded[id(bn)] = _scale_and_shift(bn, next_id)
                next_id += 3
            continue
        conv, bias = chain
        weight, shift = _folded_constants(conv, bias, bn)
        shift = shift.reshape((1, -1) + (1,) * (len(conv.output.shape) - 2))  # per channel of NCW / NCHW
        weight = Tensor(next_id, conv.inputs[1].shape, "float32", "const", weight)
        shift = Tensor(next_id + 1, shift.shape, "float32", "const", shift)
        next_id += 2
        folded[id(conv)] = [replace(conv, inputs=[conv.inputs[0], weight, *conv.inputs[2:]]),
                            OpCall("relax.add", [conv.output, shift], bn.output, {}, conv.rule, conv.group)]
        for call in (bias, bn):
            if call is not None:
                folded[id(call)] = []
    ops = [new for call in graph.ops for new in folded.get(id(call), [call])]
    return replace(graph, ops=ops)  # the same graph otherwise: its symbolic dims, its shape arguments


def _constant_stats(bn: OpCall) -> bool:
    """``bn`` is an inference batch norm over axis 1 of float32 with constant statistics and parameters."""
    return (bn.op == "relax.nn.batch_norm" and not bn.attrs.get("training") and bn.output.dtype == "float32"
            and all(t.kind == "const" for t in bn.inputs[1:5])
            and int(bn.attrs.get("axis", 1)) % len(bn.output.shape) == 1)


def _scale_and_shift(bn: OpCall, next_id: int) -> list[OpCall]:
    """``bn`` as ``x * s + t`` per channel: two binary ops, which the runtime fuses into the op before them
    as post-ops, or runs as one binary primitive with a post-op. oneDNN's own batch norm primitive is a
    pass of its own over the activation (and took an AVX2 kernel on AVX-512: PP-OCRv4 det's 1.4 ms)."""
    scale, shift = _statistics(bn)
    per_channel = (1, -1) + (1,) * (len(bn.output.shape) - 2)
    s = Tensor(next_id, scale.reshape(per_channel).shape, "float32", "const",
               scale.reshape(per_channel).astype(np.float32))
    t = Tensor(next_id + 1, s.shape, "float32", "const", shift.reshape(per_channel).astype(np.float32))
    scaled = Tensor(next_id + 2, bn.output.shape, "float32", "op")
    return [OpCall("relax.multiply", [bn.inputs[0], s], scaled, {}, bn.rule, bn.group),
            OpCall("relax.add", [scaled, t], bn.output, {}, bn.rule, bn.group)]


def _statistics(bn: OpCall) -> tuple[np.ndarray, np.ndarray]:
    """Per channel, ``s = gamma / sqrt(var + eps)`` and ``t = beta - mean * s`` (float64)."""
    gamma, beta, mean, var = (t.data.astype(np.float64).reshape(-1) for t in bn.inputs[1:5])
    if not bn.attrs.get("scale", True):
        gamma = np.ones_like(gamma)
    if not bn.attrs.get("center", True):
        beta = np.zeros_like(beta)
    scale = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    return scale, beta - mean * scale


def _foldable(bn: OpCall, producer: dict, readers: Counter,
              alone: bool) -> Optional[tuple[OpCall, Optional[OpCall]]]:
    """(conv, its bias add or None) that ``bn`` folds into, or None. ``alone``: the batch norm is its composite."""
    if not _constant_stats(bn):
        return None

    def made_by(tensor: Tensor, ops) -> Optional[OpCall]:
        call = producer.get(tensor.id)
        ok = call is not None and call.op in ops and (alone or call.group == bn.group) and readers[tensor.id] == 1
        return call if ok else None

    bias = made_by(bn.inputs[0], ("relax.add",))
    if bias is not None and not _per_channel(bias.inputs[1], bn.output.shape):
        return None
    conv = made_by(bias.inputs[0] if bias is not None else bn.inputs[0], _CONVS)
    if conv is None or conv.inputs[1].kind != "const" or conv.inputs[1].dtype != "float32":
        return None
    return conv, bias


def _per_channel(t: Tensor, shape: tuple) -> bool:
    """``t`` is a constant of one value per channel (axis 1) of ``shape``, broadcast over the rest."""
    if t.kind != "const" or len(t.shape) > len(shape):
        return False
    padded = (1,) * (len(shape) - len(t.shape)) + tuple(t.shape)
    return padded[1] == shape[1] and all(d == 1 for i, d in enumerate(padded) if i != 1)


def _folded_constants(conv: OpCall, bias: Optional[OpCall], bn: OpCall) -> tuple[np.ndarray, np.ndarray]:
    """The conv's weight scaled per output channel, and the per-channel shift after it (float32)."""
    scale, shift = _statistics(bn)
    b = bias.inputs[1].data.astype(np.float64).reshape(-1) if bias is not None else 0.0
    weight = conv.inputs[1].data.astype(np.float64)
    weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))  # axis 0: output channels, grouped or not
    return weight.astype(np.float32), (b * scale + shift).astype(np.float32)

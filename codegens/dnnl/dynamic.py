"""Dynamic int8 matmuls (onnxruntime's ``quantize_dynamic``) as the one op the oneDNN runtime runs.

The ``dnnl.dynamic_int8_matmul[_bias]`` rules (``annotations/dnnl.py``) take the chain TVM imports
``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale) [-> Add(bias)]`` as: the
activation's scale and zero point from its min and max, ``relax.quantize`` to u8, both zero points
subtracted in int32, an int32 matmul, its cast to float32 times the product of the scales. This rewrite
replaces each such match by one body op, ``byoc.dynamic_int8_matmul(x, w[, bias])`` with the weight
scales as ``w_scale`` (one, or one per output column). The runtime (``runtime/int8.cc``) computes x's
scale and zero point per call as ONNX defines DynamicQuantizeLinear, quantizes x to u8 (once for every
such op of the partition that reads the same x: Q, K and V), and runs one oneDNN u8 x s8 matmul with the
source scale and zero point as run-time arguments, the weight scales, and the bias.

The weight travels at 8 bits: its int8 bytes viewed as a float32 constant of a quarter of the elements
(``packed_bytes``; ``w_shape`` gives its [K, N]), which the runtime reads back as s8 and packs once at load.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from byoc.errors import CodegenError
from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

DYNAMIC_MATMUL = "byoc.dynamic_int8_matmul"
DYNAMIC_CONV = "byoc.dynamic_int8_conv2d"
_RULES = ("dnnl.dynamic_int8_matmul", "dnnl.dynamic_int8_matmul_bias", "dnnl.dynamic_int8_conv2d",
          "dnnl.dynamic_int8_conv2d_bias")


def dynamic_matmuls_fused(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each dynamic int8 matmul match replaced by one ``byoc.dynamic_int8_matmul`` op."""
    if not any(call.rule in _RULES for call in graph.ops):
        return graph
    groups: dict[int, list[OpCall]] = {}
    for call in graph.ops:
        if call.rule in _RULES:
            groups.setdefault(call.group, []).append(call)
    ops: list[OpCall] = []
    done: set[int] = set()
    fresh = itertools.count(graph.unused_id())  # ids of the tensors a rewrite adds
    for call in graph.ops:
        if call.rule not in _RULES:
            ops.append(call)
        elif call.group not in done:
            done.add(call.group)
            ops.append(_fused(groups[call.group], fresh))
    return replace(graph, ops=ops)


def packed_bytes(values: np.ndarray) -> np.ndarray:
    """The bytes of an int8 array (row-major), zero-padded to a multiple of 4, viewed as float32: the graph carries
    float32 constants, and an int8 weight so travels at 8 bits (its float32 values took 4x the bytes). The runtime
    reads the same bytes as s8; nothing computes on them as floats (copies keep the bits)."""
    raw = np.ascontiguousarray(values, dtype=np.int8).reshape(-1)
    padded = np.zeros(-(-raw.size // 4) * 4, np.int8)
    padded[:raw.size] = raw
    return padded.view(np.float32)


def _fused(calls: list[OpCall], fresh: Iterator[int]) -> OpCall:
    first, last = calls[0], calls[-1]
    where = f"{first.rule} (group {first.group})"
    x = next((c.inputs[0] for c in calls if c.op == "relax.quantize"), None)
    conv = next((c for c in calls if c.op == "relax.nn.conv2d"), None)
    if conv is not None and x is not None:
        return _fused_conv(calls, x, conv, where, next(fresh))
    matmul = next((c for c in calls if c.op == "relax.matmul"), None)
    weight = next((t for c in calls if c.op == "relax.astype" for t in c.inputs
                   if t.kind == "const" and t.dtype == "int8" and len(t.shape) == 2), None)
    if x is None or matmul is None or weight is None or weight.data is None:
        raise CodegenError(f"{where}: not the form of a dynamic int8 matmul (the rule's pattern)")
    w_scale = _weight_scale(calls, where)
    w = Tensor(weight.id, (-(-weight.size // 4),), "float32", "const", data=packed_bytes(weight.data))
    inputs = [x, w]
    if last.op == "relax.add":
        inputs.append(next(t for t in last.inputs if t.kind == "const"))
    attrs = {"w_scale": [float(s) for s in np.asarray(w_scale, np.float32).reshape(-1)],
             "w_shape": [int(d) for d in weight.shape]}
    return OpCall(DYNAMIC_MATMUL, inputs, last.output, attrs, first.rule, first.group)


def _weight_scale(calls: list[OpCall], where: str) -> np.ndarray:
    """The weight scales: the constant of ``x_scale * w_scale`` (the one multiply of tensors of rank <= 1)."""
    scale_product = next((c for c in calls if c.op == "relax.multiply" and any(
        t.kind == "const" for t in c.inputs) and all(len(t.shape) <= 1 for t in c.inputs)), None)
    if scale_product is None:
        raise CodegenError(f"{where}: no constant weight scale")
    return next(t for t in scale_product.inputs if t.kind == "const").data


def _fused_conv(calls: list[OpCall], x: Tensor, conv: OpCall, where: str, bias_id: int) -> OpCall:
    """``byoc.dynamic_int8_conv2d(x, w[, bias])``: the conv's attributes, the weight scale and ``w_shape``; the
    weight (the float32 constant of int8 values preparation wrote) travels packed at 8 bits as a matmul's does, the
    bias one value per output channel."""
    first, last = calls[0], calls[-1]
    weight = conv.inputs[1]
    if weight.data is None:
        raise CodegenError(f"{where}: the conv's weight is not a constant")
    packed = Tensor(weight.id, (-(-weight.size // 4),), "float32", "const",
                    data=packed_bytes(np.asarray(weight.data).astype(np.int8)))
    inputs = [x, packed]
    if last.op == "relax.add":
        bias = next(t for t in last.inputs if t.kind == "const")
        channels = int(conv.inputs[1].shape[0])
        inputs.append(Tensor(bias_id, (channels,), "float32", "const",
                             data=np.asarray(bias.data, np.float32).reshape(channels)))
    attrs = dict(conv.attrs)
    attrs["w_shape"] = [int(d) for d in weight.shape]
    attrs["w_scale"] = [float(s) for s in np.asarray(_weight_scale(calls, where), np.float32).reshape(-1)]
    return OpCall(DYNAMIC_CONV, inputs, last.output, attrs, first.rule, first.group)

"""Weight-only int4/int8 matmuls (onnxruntime's MatMulNBits) as one op of the dnnl runtime, on the packed weight.

The import writes MatMulNBits as the dequantization of its packed uint8 constant B followed by a matmul
(:mod:`byoc.pipeline.frontend.matmul_nbits`); the dnnl rules ``matmul_nbits*`` take that chain as one match.
Here each match becomes one ``byoc.matmul_nbits`` op whose inputs are

    x (float32 [..., K]), B (the packed bytes), scales (float32 [N * blocks]), [zero points], [bias (float32 [N])]

and whose attributes are ``k``, ``n``, ``bits``, ``block_size``, ``accuracy_level`` (4: x quantized to int8 per
block, as onnxruntime computes MatMulNBits' accuracy_level 4; else 0, float32) and ``zero_points``: ``"uniform"`` (one
value for every block, attribute ``zero_point``: onnxruntime's default 2^(bits-1)), ``"u8"`` (one byte per
block: every zero point an integer in [0, 255], as onnxruntime's quantizer writes them) or ``"f32"``.

The graph's constants travel as float32 (the module blob's one type, ``graph_runtime/blob.h``): B and u8
zero points travel as their bytes four to a float32 word, so the artifact holds B at its packed size (an
int4 weight is half a byte, not four), and the runtime reads the words back as bytes, never as numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Union

import numpy as np

from byoc.vendor.quantized import INT8_ACTIVATIONS_LEVEL, int8_activations
from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

#: the runtime's kernel
KERNEL = "byoc.matmul_nbits"


@dataclass
class NbitsUnit:
    x: Tensor
    packed: Tensor
    scale: np.ndarray  # float32 [N, blocks]
    zero_point: np.ndarray  # float32 [N, blocks]
    bias: Optional[Tensor]
    output: Tensor
    k: int
    n: int
    bits: int
    block: int
    accuracy_level: int = 0


def unit_of(ops) -> Union[NbitsUnit, str]:
    """The parts of one MatMulNBits chain (its op calls, any order), or why they are not one the runtime takes."""
    by_op: dict[str, list[OpCall]] = {}
    for call in ops:
        by_op.setdefault(call.op, []).append(call)
    try:
        (astype,), (subtract,), (multiply,), (matmul,) = (by_op[o] for o in (
            "relax.astype", "relax.subtract", "relax.multiply", "relax.matmul"))
    except (KeyError, ValueError):
        return "not one MatMulNBits dequantization and matmul"
    bits = 4 if "relax.bitwise_and" in by_op else 8
    packed = by_op["relax.expand_dims"][0].inputs[0] if bits == 4 else astype.inputs[0]
    zero, scale = subtract.inputs[1], multiply.inputs[1]
    if packed.kind != "const" or packed.dtype != "uint8" or len(packed.shape) != 3:
        return f"packed weight {packed.dtype} {packed.shape} is not a uint8 constant [N, blocks, bytes]"
    if zero.kind != "const" or scale.kind != "const" or zero.data is None or scale.data is None:
        return "zero points and scales are not constants"
    n, blocks, per_block = (int(d) for d in packed.shape)
    block = per_block * 8 // bits
    if block < 16 or block & (block - 1):
        return f"block size {block} (a power of 2 >= 16)"
    weight = matmul.inputs[1]
    if len(weight.shape or ()) != 2 or not all(isinstance(d, int) for d in weight.shape):
        return "the dequantized weight is not a static [K, N] matrix"
    k = int(weight.shape[0])
    if int(weight.shape[1]) != n or not (blocks - 1) * block < k <= blocks * block:
        return f"weight [{k}, {weight.shape[1]}] does not fit packed [{n}, {blocks}, {per_block}]"
    try:
        scales = np.broadcast_to(np.asarray(scale.data, np.float32).reshape(
            np.asarray(scale.data).shape + (1,) * (3 - np.ndim(scale.data))), (n, blocks, 1))[..., 0]
        zeros = np.broadcast_to(np.asarray(zero.data, np.float32).reshape(
            np.asarray(zero.data).shape + (1,) * (3 - np.ndim(zero.data))), (n, blocks, 1))[..., 0]
    except ValueError:
        return f"scales {scale.shape} or zero points {zero.shape} are not one per block [{n}, {blocks}, 1]"
    adds = by_op.get("relax.add", [])
    # the pattern's add is commutative (Add(bias, y) matches too): the bias is its constant operand
    bias = next((t for t in adds[0].inputs if t.kind == "const"), None) if adds else None
    if adds and (bias is None or tuple(bias.shape)[-1:] != (n,) or bias.size != n):
        return f"the bias is not a constant [{n}]"
    output = adds[0].output if adds else matmul.output
    level = INT8_ACTIVATIONS_LEVEL if int8_activations(matmul.attrs) else 0
    return NbitsUnit(matmul.inputs[0], packed, np.ascontiguousarray(scales), np.ascontiguousarray(zeros), bias,
                     output, k, n, bits, block, level)


def nbits_geometry(match) -> Union[NbitsUnit, str]:
    """For the rule's check: the unit of ``match``, or why not."""
    return unit_of(list(match.ops))


def as_words(data: np.ndarray) -> np.ndarray:
    """The bytes of ``data`` as float32 words (zero-padded to a whole word): how the graph carries bytes."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    padded = np.zeros(-(-raw.size // 4) * 4, np.uint8)
    padded[:raw.size] = raw
    return padded.view(np.float32)


def _lowered(unit: NbitsUnit, new_tensor, rule: str, group: int) -> OpCall:
    attrs: dict = {"k": unit.k, "n": unit.n, "bits": unit.bits, "block_size": unit.block,
                   "accuracy_level": unit.accuracy_level}
    inputs = [unit.x, new_tensor(as_words(unit.packed.data))]
    inputs.append(new_tensor(unit.scale.reshape(-1)))
    zeros = unit.zero_point
    if np.all(zeros == zeros.flat[0]):
        attrs.update(zero_points="uniform", zero_point=float(zeros.flat[0]))
    elif np.all((zeros >= 0) & (zeros <= 255) & (zeros == np.round(zeros))):
        attrs["zero_points"] = "u8"
        inputs.append(new_tensor(as_words(zeros.astype(np.uint8).reshape(-1))))
    else:
        attrs["zero_points"] = "f32"
        inputs.append(new_tensor(zeros.reshape(-1).astype(np.float32)))
    attrs["bias"] = unit.bias is not None
    if unit.bias is not None:
        inputs.append(unit.bias)
    return OpCall(KERNEL, inputs, unit.output, attrs, rule, group)


def nbits_lowered(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each ``matmul_nbits`` match as one :data:`KERNEL` op (see the module docstring)."""
    if not any("matmul_nbits" in (c.rule or "") for c in graph.ops):
        return graph
    next_id = [graph.unused_id()]

    def new_tensor(data: np.ndarray) -> Tensor:
        next_id[0] += 1
        return Tensor(next_id[0], tuple(data.shape), "float32", "const", data)

    ops: list[OpCall] = []
    index = 0
    while index < len(graph.ops):
        call = graph.ops[index]
        if "matmul_nbits" not in (call.rule or ""):
            ops.append(call)
            index += 1
            continue
        end = index
        while end < len(graph.ops) and graph.ops[end].group == call.group:
            end += 1
        unit = unit_of(graph.ops[index:end])
        if isinstance(unit, str):  # the rule's check took it: cannot happen but by a change of the import
            ops.extend(graph.ops[index:end])
        else:
            ops.append(_lowered(unit, new_tensor, call.rule, call.group))
        index = end
    return replace(graph, ops=ops)

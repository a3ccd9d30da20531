"""onnxruntime's ``com.microsoft`` ``MatMulNBits``: weight-only int4/int8 matmul, as LLM exporters write it.

What onnxruntime-genai's model builder and ``MatMulNBitsQuantizer`` write: ``Y = A @ dequant(B)^T (+ bias)``
with B ``uint8 [N, n_blocks, blob_size]`` holding ``bits``-bit codes low bits first along K, one scale (and
zero point, default ``2^(bits-1)``) per block of ``block_size`` codes of a row of B^T
(onnxruntime's ContribOperators.md).

The import writes the dequantization in standard Relax ops on the packed constant, so every vendor and the
host can compute it, and one pattern (:data:`DEQUANTIZE_OPS`) names it for a vendor that keeps B packed:

    codes = bitwise_and(right_shift(expand_dims(B, -1), [0, 4]), 15) -> reshape [N, n_blocks, block]   (4 bits)
    codes = B                                                                                         (8 bits)
    w = (astype(codes, float32) - zero_point[N, n_blocks, 1]) * scale[N, n_blocks, 1]
    w = reshape(w, [N, n_blocks*block]) [-> strided_slice to K] -> permute_dims -> matmul(A, w) [+ bias]

``accuracy_level`` 4 (onnxruntime computes with A quantized to int8 per block: its CompInt8) is kept as the
matmul's ``out_dtype="float32"`` (:data:`byoc.vendor.quantized.INT8_ACTIVATIONS_OUT_DTYPE`), the same float32 result for every other
reader: the dnnl runtime reads it (:func:`byoc.vendor.quantized.int8_activations`) and computes as onnxruntime does; the host and other
levels compute in float32, and so do float zero points at level 4 (onnxruntime's CompInt8 takes uint8 ones only,
and computes those in float32 too).

Relax's constant folding would widen B into float32 (8 times its bytes): B is held as a parameter while
the import folds (:func:`byoc.pipeline.frontend.prepare.qdq_form.held_integer_constants`), as int8 weights
are. Zero points and scales are small and become float32 constants here.

:func:`check_matmul_nbits` refuses by name what the import does not take (``g_idx``, bits other than 4 and 8,
B, scales or zero points that are not initializers).
"""

from __future__ import annotations

import numpy as np
import onnx

from byoc.errors import UnsupportedAttributeError
from byoc.vendor.quantized import INT8_ACTIVATIONS_LEVEL, INT8_ACTIVATIONS_OUT_DTYPE

#: The contrib ops byoc imports itself: (domain, op type).
IMPORTED_CONTRIB_OPS = frozenset({("com.microsoft", "MatMulNBits")})
#: The bit widths taken.
BITS = (4, 8)
_INPUTS = ("A", "B", "scales", "zero_points", "g_idx", "bias")


def is_matmul_nbits(node: onnx.NodeProto) -> bool:
    return node.op_type == "MatMulNBits" and node.domain == "com.microsoft"


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def check_matmul_nbits(graph: onnx.GraphProto, origin=None) -> None:
    """Refuse, naming the node and what, each MatMulNBits node the import does not take."""
    origin = origin or {}
    initializers = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if not is_matmul_nbits(node):
            continue
        name = origin.get(node.name, node.name)
        attrs = _attrs(node)

        def refuse(what: str, why: str):
            raise UnsupportedAttributeError(f"MatMulNBits node {name!r}: {why}", name, what)

        bits = int(attrs.get("bits", 4))
        if bits not in BITS:
            refuse("bits", f"bits={bits}; byoc takes {' and '.join(map(str, BITS))}-bit weights")
        block = int(attrs.get("block_size", 0))
        if block < 16 or block & (block - 1):
            refuse("block_size", f"block_size={block}; MatMulNBits needs a power of 2 >= 16")
        if "K" not in attrs or "N" not in attrs:
            refuse("K" if "K" not in attrs else "N", "attributes K and N are required")
        present = {role: x for role, x in zip(_INPUTS, node.input) if x}
        if "g_idx" in present:
            refuse("g_idx", "a g_idx input (act-order GPTQ, deprecated by onnxruntime) is not supported; "
                            "quantize without act-order (desc_act=False)")
        for role in ("B", "scales", "zero_points"):
            if role in present and present[role] not in initializers:
                refuse(role, f"input {role} ({present[role]!r}) is not a constant initializer; byoc takes "
                             "weight-only quantization with constant weights, scales and zero points")
        k, n = int(attrs["K"]), int(attrs["N"])
        blocks = -(-k // block)
        b = initializers[present["B"]]
        if b.data_type != onnx.TensorProto.UINT8 or list(b.dims) != [n, blocks, block * bits // 8]:
            refuse("B", f"B is {onnx.helper.tensor_dtype_to_np_dtype(b.data_type)} {list(b.dims)}, not uint8 "
                        f"[{n}, {blocks}, {block * bits // 8}] (N, ceil(K/block_size), block_size*bits/8)")
        scales = initializers[present["scales"]]
        if scales.data_type != onnx.TensorProto.FLOAT or int(np.prod(scales.dims)) != n * blocks:
            refuse("scales", f"scales are {onnx.helper.tensor_dtype_to_np_dtype(scales.data_type)} "
                             f"{list(scales.dims)}; byoc takes float32 [N * ceil(K/block_size)] = [{n * blocks}]")
        if "zero_points" in present:
            zp = initializers[present["zero_points"]]
            packed = -(-blocks * bits // 8)
            if zp.data_type == onnx.TensorProto.UINT8:
                if int(np.prod(zp.dims)) != n * packed:
                    refuse("zero_points", f"uint8 zero points of shape {list(zp.dims)}, not [{n * packed}]")
            elif zp.data_type != onnx.TensorProto.FLOAT or int(np.prod(zp.dims)) != n * blocks:
                refuse("zero_points", "zero points must be packed uint8 or float32 [N * ceil(K/block_size)]")


def zero_points_array(zp: np.ndarray | None, n: int, blocks: int, bits: int) -> np.ndarray:
    """The zero point of each block as float32 ``[n, blocks]``: unpacked from uint8 (low bits first, each row
    padded to whole bytes), as given when float, ``2^(bits-1)`` when absent."""
    if zp is None:
        return np.full((n, blocks), float(1 << (bits - 1)), np.float32)
    if zp.dtype != np.uint8:
        return zp.astype(np.float32).reshape(n, blocks)
    rows = zp.reshape(n, -1)
    if bits == 8:
        return rows[:, :blocks].astype(np.float32)
    per = 8 // bits
    codes = np.stack([(rows >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], axis=-1).reshape(n, -1)
    return codes[:, :blocks].astype(np.float32)


def convert(bb, inputs, attrs):
    """The Relax expression of a MatMulNBits node (see the module docstring); ``inputs`` as TVM's importer
    gives them (None for an absent optional input)."""
    from tvm import relax

    from byoc.vendor.values import const_array, is_tensor_const

    a, b, scales = inputs[0], inputs[1], inputs[2]
    zp = inputs[3] if len(inputs) > 3 else None
    bias = inputs[5] if len(inputs) > 5 else None
    k, n = int(attrs["K"]), int(attrs["N"])
    bits, block = int(attrs.get("bits", 4)), int(attrs["block_size"])
    blocks = -(-k // block)
    zp_value = const_array(zp) if zp is not None and is_tensor_const(zp) else None
    if zp is not None and zp_value is None or not is_tensor_const(scales):
        raise UnsupportedAttributeError("MatMulNBits: scales and zero points must be constants")
    zero = zero_points_array(zp_value, n, blocks, bits).reshape(n, blocks, 1)
    scale = const_array(scales).astype(np.float32).reshape(n, blocks, 1)
    op = relax.op
    codes = b
    if bits == 4:
        shifts = relax.const(np.array([0, 4], np.uint8))
        codes = bb.normalize(op.expand_dims(codes, [-1]))
        codes = bb.normalize(op.right_shift(codes, shifts))
        codes = bb.normalize(op.bitwise_and(codes, relax.const(np.uint8(15))))
        codes = bb.normalize(op.reshape(codes, [n, blocks, block]))
    w = bb.normalize(op.astype(codes, "float32"))
    w = bb.normalize(op.subtract(w, relax.const(zero)))
    w = bb.normalize(op.multiply(w, relax.const(scale)))
    w = bb.normalize(op.reshape(w, [n, blocks * block]))
    if blocks * block != k:
        w = bb.normalize(op.strided_slice(w, axes=[1], begin=[0], end=[k]))
    w = bb.normalize(op.permute_dims(w, [1, 0]))
    # onnxruntime computes float zero points in float32 whatever the level (MLAS's CompInt8 takes uint8 ones)
    int8 = int(attrs.get("accuracy_level", 0)) == INT8_ACTIVATIONS_LEVEL and (
        zp_value is None or zp_value.dtype == np.uint8)
    y = bb.normalize(op.matmul(a, w, out_dtype=INT8_ACTIVATIONS_OUT_DTYPE if int8 else None))
    if bias is not None:
        y = bb.normalize(op.add(y, bias))
    return y


def held_weights(model: onnx.ModelProto) -> set[str]:
    """The names of the packed weights (B) of the model's MatMulNBits nodes that are initializers."""
    initializers = {t.name for t in model.graph.initializer}
    return {n.input[1] for n in model.graph.node if is_matmul_nbits(n) and len(n.input) > 1
            and n.input[1] in initializers}


def dequantized(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, bits: int,
                block: int) -> np.ndarray:
    """B^T as float32 ``[N, K]``, as onnxruntime defines it (for tools and tests)."""
    n, blocks = b.shape[0], b.shape[1]
    if bits == 4:
        codes = np.stack([b & 15, b >> 4], axis=-1).reshape(n, blocks, block)
    else:
        codes = b.reshape(n, blocks, block)
    zero = zero_points_array(zero_points, n, blocks, bits).reshape(n, blocks, 1)
    w = (codes.astype(np.float32) - zero) * scales.astype(np.float32).reshape(n, blocks, 1)
    return w.reshape(n, blocks * block)[:, :k]


__all__ = ["BITS", "IMPORTED_CONTRIB_OPS", "check_matmul_nbits", "convert", "dequantized", "held_weights",
           "is_matmul_nbits", "zero_points_array"]

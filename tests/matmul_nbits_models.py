"""MatMulNBits models (onnxruntime's com.microsoft weight-only int4/int8 matmul) packed by hand as
onnxruntime's ContribOperators.md specifies, and the float32 MatMul models they dequantize to.

Codes, scales and zero points are random (not quantized from a float weight): any valid packing is a
model users may have, and the float model is the same weight dequantized exactly."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 codes ``[..., m]`` packed ``8 // bits`` to a byte, low bits first (``m`` padded to whole bytes)."""
    per = 8 // bits
    m = codes.shape[-1]
    padded = np.zeros(codes.shape[:-1] + (-(-m // per) * per,), np.uint8)
    padded[..., :m] = codes
    grouped = padded.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint8)
    out = np.zeros(grouped.shape[:-1], np.uint8)
    for i in range(per):
        out |= (grouped[..., i] << (bits * i)).astype(np.uint8)
    return out


def quantized_weight(k: int, n: int, bits: int, block: int, zero_points: str, seed: int = 0):
    """``(B, scales, zero_points or None, W)``: W float32 ``[K, N]`` the dequantized weight of B.

    ``zero_points``: "none" (the default 2^(bits-1)), "packed" (uint8, as onnxruntime's quantizer writes
    them) or "float" (float32, the same dtype as the scales)."""
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    codes = rng.integers(0, 1 << bits, size=(n, blocks * block), dtype=np.uint8)
    codes[:, k:] = 0  # the padding of the last block
    scales = (rng.random((n, blocks), np.float32) * 0.02 + 0.001).astype(np.float32)
    b = pack(codes, bits).reshape(n, blocks, block * bits // 8)
    if zero_points == "none":
        zp_real, zp = np.full((n, blocks), float(1 << (bits - 1)), np.float32), None
    elif zero_points == "packed":
        zp_codes = rng.integers(0, 1 << bits, size=(n, blocks), dtype=np.uint8)
        zp_real, zp = zp_codes.astype(np.float32), pack(zp_codes, bits).reshape(-1)
    else:
        zp_real = (rng.random((n, blocks), np.float32) * (1 << bits)).astype(np.float32)
        zp = zp_real.reshape(-1)
    w = ((codes.reshape(n, blocks, block).astype(np.float32) - zp_real[:, :, None]) * scales[:, :, None])
    w = w.reshape(n, blocks * block)[:, :k].T.copy()
    return b, scales.reshape(-1), zp, w


def nbits_model(k: int, n: int, bits: int = 4, block: int = 32, zero_points: str = "none", bias: bool = False,
                a_shape=("batch", "seq"), seed: int = 0, g_idx: bool = False, layers: int = 1):
    """``(nbits_model, float_model)``: ``layers`` MatMulNBits [K, N] (K = N after the first) one after another
    on A ``[*a_shape, K]`` (dims named or sized), and the same network with float32 MatMul + Add."""
    a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [*a_shape, k])
    nodes, inits, fnodes, finits = [], [], [], []
    x = "A"
    for layer in range(layers):
        kk = k if layer == 0 else n
        b, scales, zp, w = quantized_weight(kk, n, bits, block, zero_points, seed + layer)
        p = f"l{layer}_"
        inputs = [x, p + "B", p + "scales"]
        inits += [numpy_helper.from_array(b, p + "B"), numpy_helper.from_array(scales, p + "scales")]
        if zp is not None or g_idx or bias:
            inputs.append(p + "zp" if zp is not None else "")
            if zp is not None:
                inits.append(numpy_helper.from_array(zp, p + "zp"))
        if g_idx or bias:
            inputs.append(p + "g_idx" if g_idx else "")
            if g_idx:
                inits.append(numpy_helper.from_array((np.arange(kk) // block).astype(np.int32), p + "g_idx"))
        y = f"Y{layer}" if layer < layers - 1 else "Y"
        if bias:
            bias_value = np.random.default_rng(seed + 100 + layer).standard_normal(n).astype(np.float32)
            inputs.append(p + "bias")
            inits.append(numpy_helper.from_array(bias_value, p + "bias"))
            finits.append(numpy_helper.from_array(bias_value, p + "fbias"))
        nodes.append(helper.make_node("MatMulNBits", inputs, [y], name=f"nbits{layer}", domain="com.microsoft",
                                      K=kk, N=n, bits=bits, block_size=block))
        finits.append(numpy_helper.from_array(w, p + "W"))
        if bias:
            fnodes.append(helper.make_node("MatMul", [x, p + "W"], [y + "_mm"], name=f"mm{layer}"))
            fnodes.append(helper.make_node("Add", [y + "_mm", p + "fbias"], [y], name=f"add{layer}"))
        else:
            fnodes.append(helper.make_node("MatMul", [x, p + "W"], [y], name=f"mm{layer}"))
        x = y
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [*a_shape, n])
    graph = helper.make_graph(nodes, "nbits", [a], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    fmodel = helper.make_model(helper.make_graph(fnodes, "float", [a], [out], finits),
                               opset_imports=[helper.make_opsetid("", 17)])
    fmodel.ir_version = 8
    return model, fmodel


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]

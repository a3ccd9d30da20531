"""Float models built with onnx.helper and quantized by onnxruntime's ``quantize_dynamic`` (no torch).

The quantized form is what hubs publish as ``model_quantized.onnx``: each MatMul with a constant weight becomes
``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale)``, its bias Add after it.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _w(rng, *shape, scale=0.1):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, inits, hidden, out=None, name="m"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", hidden])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", out or hidden])
    graph = helper.make_graph(nodes, name, [x], [y], [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def mlp(hidden=64, inner=128, out=32, seed=0) -> onnx.ModelProto:
    """x @ W1 + b1 -> relu -> @ W2 + b2, over [batch, sequence, hidden]."""
    rng = np.random.default_rng(seed)
    inits = {"w1": _w(rng, hidden, inner), "b1": _w(rng, inner), "w2": _w(rng, inner, out), "b2": _w(rng, out)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
             helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
             helper.make_node("Add", ["h3", "b2"], ["y"], name="fc2_bias")]
    return _model(nodes, inits, hidden, out, "mlp")


def encoder(layers=1, hidden=64, heads=4, ffn=128, seed=0) -> onnx.ModelProto:
    """BERT encoder layers as Hugging Face exports them: separate Q, K and V projections of one input, attention
    over heads split by Reshape(0, 0, heads, d), residual + LayerNorm, an erf GELU FFN; [batch, sequence] symbolic."""
    rng = np.random.default_rng(seed)
    d = hidden // heads
    inits = {"heads_shape": np.array([0, 0, heads, d], np.int64), "merged_shape": np.array([0, 0, hidden], np.int64),
             "sqrt_d": np.array(math.sqrt(d), np.float32), "sqrt2": np.array(math.sqrt(2.0), np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    nodes = []
    x = "x"
    for i in range(layers):
        p = f"l{i}_"

        def linear(inp, out, n_in, n_out, name):
            inits[p + name + "_w"] = _w(rng, n_in, n_out)
            inits[p + name + "_b"] = _w(rng, n_out, scale=0.02)
            nodes.extend([helper.make_node("MatMul", [inp, p + name + "_w"], [out + "_mm"], name=p + name),
                          helper.make_node("Add", [out + "_mm", p + name + "_b"], [out], name=p + name + "_bias")])

        for part in "qkv":
            linear(x, p + part, hidden, hidden, part)
            nodes.append(helper.make_node("Reshape", [p + part, "heads_shape"], [p + part + "_h"], name=p + part + "_r"))
        nodes += [helper.make_node("Transpose", [p + "q_h"], [p + "qt"], perm=[0, 2, 1, 3], name=p + "qt"),
                  helper.make_node("Transpose", [p + "k_h"], [p + "kt"], perm=[0, 2, 3, 1], name=p + "kt"),
                  helper.make_node("Transpose", [p + "v_h"], [p + "vt"], perm=[0, 2, 1, 3], name=p + "vt"),
                  helper.make_node("MatMul", [p + "qt", p + "kt"], [p + "s0"], name=p + "scores"),
                  helper.make_node("Div", [p + "s0", "sqrt_d"], [p + "s1"], name=p + "scale"),
                  helper.make_node("Softmax", [p + "s1"], [p + "probs"], axis=-1, name=p + "softmax"),
                  helper.make_node("MatMul", [p + "probs", p + "vt"], [p + "c0"], name=p + "context"),
                  helper.make_node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3], name=p + "ct"),
                  helper.make_node("Reshape", [p + "c1", "merged_shape"], [p + "ctx"], name=p + "merge")]
        linear(p + "ctx", p + "o", hidden, hidden, "out")
        inits[p + "g1"], inits[p + "be1"] = 1 + _w(rng, hidden), _w(rng, hidden)
        nodes += [helper.make_node("Add", [x, p + "o"], [p + "r1"], name=p + "residual1"),
                  helper.make_node("LayerNormalization", [p + "r1", p + "g1", p + "be1"], [p + "h"], axis=-1,
                                   epsilon=1e-12, name=p + "ln1")]
        linear(p + "h", p + "f1", hidden, ffn, "ffn1")
        nodes += [helper.make_node("Div", [p + "f1", "sqrt2"], [p + "gd"], name=p + "gelu_div"),
                  helper.make_node("Erf", [p + "gd"], [p + "ge"], name=p + "gelu_erf"),
                  helper.make_node("Add", [p + "ge", "one"], [p + "ga"], name=p + "gelu_add"),
                  helper.make_node("Mul", [p + "f1", p + "ga"], [p + "gm"], name=p + "gelu_mul"),
                  helper.make_node("Mul", [p + "gm", "half"], [p + "f2"], name=p + "gelu_half")]
        linear(p + "f2", p + "f3", ffn, hidden, "ffn2")
        inits[p + "g2"], inits[p + "be2"] = 1 + _w(rng, hidden), _w(rng, hidden)
        out = "y" if i == layers - 1 else p + "out"
        nodes += [helper.make_node("Add", [p + "h", p + "f3"], [p + "r2"], name=p + "residual2"),
                  helper.make_node("LayerNormalization", [p + "r2", p + "g2", p + "be2"], [out], axis=-1,
                                   epsilon=1e-12, name=p + "ln2")]
        x = out
    return _model(nodes, inits, hidden, name="encoder")


def small_conv(channels=4, out=8, size=16, seed=0) -> onnx.ModelProto:
    """Conv 3x3 (pad 1) + bias -> Relu over [batch, channels, size, size]."""
    rng = np.random.default_rng(seed)
    inits = {"w": _w(rng, out, channels, 3, 3, scale=0.2), "b": _w(rng, out)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return _image_model(nodes, inits, channels, out, size, "conv")


def depthwise_conv(channels=32, size=14, seed=2) -> onnx.ModelProto:
    """ConvNeXt's block head: a depthwise 7x7 conv (pad 3, groups = channels) + bias, then a pointwise 1x1 conv:
    quantize_dynamic makes both ConvInteger (the first with its group attribute)."""
    rng = np.random.default_rng(seed)
    inits = {"wd": _w(rng, channels, 1, 7, 7, scale=0.2), "bd": _w(rng, channels),
             "wp": _w(rng, channels, channels, 1, 1), "bp": _w(rng, channels)}
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["d"], pads=[3, 3, 3, 3], group=channels, name="dw"),
             helper.make_node("Conv", ["d", "wp", "bp"], ["y"], name="pw")]
    return _image_model(nodes, inits, channels, channels, size, "depthwise")


def two_branch_conv(channels=64, out=16, size=8, seed=1) -> onnx.ModelProto:
    """A residual block's two branches reading one input (a 3x3 conv, 576 terms a sum, and a 1x1 shortcut),
    added: quantize_dynamic gives them one DynamicQuantizeLinear."""
    rng = np.random.default_rng(seed)
    inits = {"wa": _w(rng, out, channels, 3, 3), "ba": _w(rng, out), "wb": _w(rng, out, channels, 1, 1),
             "bb": _w(rng, out)}
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
             helper.make_node("Conv", ["x", "wb", "bb"], ["b"], name="conv_b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    return _image_model(nodes, inits, channels, out, size, "branches")


def _image_model(nodes, inits: dict, channels: int, out: int, size: int, name: str) -> onnx.ModelProto:
    """``x [batch, channels, size, size] -> y [batch, out, size, size]`` through ``nodes``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", channels, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", out, size, size])
    graph = helper.make_graph(nodes, name, [x], [y], [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def quantize_dynamic(m: onnx.ModelProto, per_channel=False, weight_type="QInt8", op_types=("MatMul",)) -> onnx.ModelProto:
    """``m`` quantized by onnxruntime's quantize_dynamic (MatMul only by default, as hubs' model_quantized.onnx)."""
    import logging

    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(m, src)
        ort_quantize_dynamic(src, dst, per_channel=per_channel, weight_type=getattr(QuantType, weight_type),
                             op_types_to_quantize=list(op_types))
        return onnx.load(dst)

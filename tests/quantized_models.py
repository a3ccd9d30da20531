"""Quantized test models: float graphs quantized by onnxruntime.quantization, as users make them.

Each float model is built with onnx.helper and quantized with
``quantize_static`` (calibrated on a few random inputs) in QDQ or QOperator
format, per tensor or per channel: u8 activations and s8 weights, the
quantizer's defaults for CPUs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(rng, name: str, shape, scale: float = 0.2) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, x_shape, y_shape, inits, name: str) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def residual_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv-relu-conv-relu, a 1x1 conv added back to the first activation, pools, a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "w2", (8, 8, 3, 3)),
             _init(rng, "b2", (8,)), _init(rng, "w3", (8, 8, 1, 1)), _init(rng, "fc", (8, 10)), _init(rng, "fcb", (10,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, name="conv2"),
             node("Relu", ["c2"], ["r2"], name="relu2"),
             node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
             node("Add", ["c3", "r1"], ["s"], name="add"),
             node("Relu", ["s"], ["r3"], name="relu3"),
             node("MaxPool", ["r3"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             node("Flatten", ["g"], ["f"], name="flatten"),
             node("MatMul", ["f", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 3, 16, 16], [1, 10], inits, "residual_cnn")


def depthwise_cnn(seed: int = 0) -> onnx.ModelProto:
    """MobileNet-like: a strided conv, a depthwise conv with relu6, a pointwise conv, a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "dw", (8, 1, 3, 3), 0.5),
             _init(rng, "dwb", (8,)), _init(rng, "pw", (16, 8, 1, 1)), _init(rng, "pwb", (16,)),
             _init(rng, "fc", (16, 10)), _init(rng, "fcb", (10,)),
             numpy_helper.from_array(np.float32(0.0), "zero"), numpy_helper.from_array(np.float32(6.0), "six")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2], name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "dw", "dwb"], ["c2"], pads=[1] * 4, group=8, name="depthwise"),
             node("Clip", ["c2", "zero", "six"], ["r2"], name="relu6"),
             node("Conv", ["r2", "pw", "pwb"], ["c3"], name="pointwise"),
             node("Relu", ["c3"], ["r3"], name="relu3"),
             node("AveragePool", ["r3"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             node("Flatten", ["g"], ["f"], name="flatten"),
             node("MatMul", ["f", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 3, 32, 32], [1, 10], inits, "depthwise_cnn")


def activation_cnn(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV3-like activations: a swish (x * sigmoid(x)), a hard-swish, and a squeeze-excitation scale
    (global pool, two 1x1 convs, hard-sigmoid, a per-channel multiply), then a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "w2", (8, 8, 3, 3)),
             _init(rng, "b2", (8,)), _init(rng, "se1", (4, 8, 1, 1)), _init(rng, "se1b", (4,)),
             _init(rng, "se2", (8, 4, 1, 1)), _init(rng, "se2b", (8,)), _init(rng, "fc", (8, 10)),
             _init(rng, "fcb", (10,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             node("Sigmoid", ["c1"], ["s1"], name="sigmoid"),
             node("Mul", ["c1", "s1"], ["a1"], name="swish"),
             node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1] * 4, name="conv2"),
             node("HardSwish", ["c2"], ["a2"], name="hardswish"),
             node("GlobalAveragePool", ["a2"], ["g"], name="se_pool"),
             node("Conv", ["g", "se1", "se1b"], ["e1"], name="se_reduce"),
             node("Relu", ["e1"], ["e2"], name="se_relu"),
             node("Conv", ["e2", "se2", "se2b"], ["e3"], name="se_expand"),
             node("HardSigmoid", ["e3"], ["e4"], alpha=1.0 / 6, beta=0.5, name="se_gate"),
             node("Mul", ["a2", "e4"], ["a3"], name="se_scale"),
             node("GlobalAveragePool", ["a3"], ["p"], name="gap"),
             node("Flatten", ["p"], ["f"], name="flatten"),
             node("MatMul", ["f", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 3, 16, 16], [1, 10], inits, "activation_cnn")


def conv1d_net(seed: int = 0) -> onnx.ModelProto:
    """Silero-VAD-like, on a 1-D signal: a strided filter bank, a depthwise conv1d with relu, a pointwise conv1d
    with asymmetric padding, a residual add, a global pool and a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "bank", (16, 1, 16)), _init(rng, "dw", (16, 1, 5), 0.5), _init(rng, "dwb", (16,)),
             _init(rng, "pw", (16, 16, 2)), _init(rng, "pwb", (16,)), _init(rng, "fc", (16, 4)),
             _init(rng, "fcb", (4,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "bank"], ["f"], strides=[8], name="filter_bank"),
             node("Conv", ["f", "dw", "dwb"], ["d"], pads=[2, 2], group=16, name="depthwise"),
             node("Relu", ["d"], ["r1"], name="relu1"),
             node("Conv", ["r1", "pw", "pwb"], ["p"], pads=[0, 1], name="pointwise"),
             node("Add", ["p", "f"], ["s"], name="residual"),
             node("Relu", ["s"], ["r2"], name="relu2"),
             node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             node("Flatten", ["g"], ["fl"], name="flatten"),
             node("MatMul", ["fl", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 1, 136], [1, 4], inits, "conv1d_net")


def windowed_conv(rank: int = 3, seed: int = 0) -> onnx.ModelProto:
    """Magika-like: a stride-1 unpadded 5-tap conv over a sequence (a conv1d, or with ``rank`` 4 a conv2d over a
    W = 1 image with a 5x1 kernel, as Keras exports Conv1D), relu, a second 3-tap one, then a global pool."""
    rng = np.random.default_rng(seed)
    tail = (1,) if rank == 4 else ()
    inits = [_init(rng, "w1", (24, 16, 5) + tail), _init(rng, "b1", (24,)), _init(rng, "w2", (8, 24, 3) + tail)]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], name="taps5"), node("Relu", ["c1"], ["r1"], name="relu"),
             node("Conv", ["r1", "w2"], ["c2"], name="taps3"),
             node("GlobalAveragePool", ["c2"], ["y"], name="gap")]
    return _model(nodes, [1, 16, 40, *tail], [1, 8, 1, *tail], inits, f"windowed_conv{rank}")


def gemm_classifier(seed: int = 0) -> onnx.ModelProto:
    """A torch-exported classifier head: conv, relu, global pool, flatten, then Gemm with transB=1 (torch's Linear)."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "fc", (10, 8), 0.5),
             _init(rng, "fcb", (10,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("GlobalAveragePool", ["r1"], ["g"], name="gap"),
             node("Flatten", ["g"], ["f"], name="flatten"),
             node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1, name="classifier")]
    return _model(nodes, [1, 3, 16, 16], [1, 10], inits, "gemm_classifier")


def grouped_cnn(seed: int = 0) -> onnx.ModelProto:
    """ShuffleNet-like: grouped 1x1 convs with 6 channels per group (oneDNN's int8 kernels take 4 at a time),
    a channel shuffle, a depthwise conv, then a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (12, 3, 3, 3)), _init(rng, "b1", (12,)), _init(rng, "g1", (12, 6, 1, 1), 0.4),
             _init(rng, "g1b", (12,)), _init(rng, "dw", (12, 1, 3, 3), 0.5), _init(rng, "dwb", (12,)),
             _init(rng, "fc", (12, 10)), _init(rng, "fcb", (10,)),
             numpy_helper.from_array(np.array([1, 2, 6, 16, 16], np.int64), "split"),
             numpy_helper.from_array(np.array([1, 12, 16, 16], np.int64), "merged")]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "g1", "g1b"], ["c2"], group=2, name="grouped"),
             node("Relu", ["c2"], ["r2"], name="relu2"),
             node("Reshape", ["r2", "split"], ["s1"], name="shuffle_split"),
             node("Transpose", ["s1"], ["s2"], perm=[0, 2, 1, 3, 4], name="shuffle"),
             node("Reshape", ["s2", "merged"], ["s3"], name="shuffle_merge"),
             node("Conv", ["s3", "dw", "dwb"], ["c3"], pads=[1] * 4, group=12, name="depthwise"),
             node("GlobalAveragePool", ["c3"], ["g"], name="gap"),
             node("Flatten", ["g"], ["f"], name="flatten"),
             node("MatMul", ["f", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 3, 16, 16], [1, 10], inits, "grouped_cnn")


def wide_cnn(seed: int = 0) -> onnx.ModelProto:
    """A CNN whose weights make most of its file (0.9 M of them) on a small image: convs of 64 and 256 channels, a
    grouped conv (4 groups: run in float32), a depthwise conv, a residual add, a classifier."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (64, 3, 3, 3)), _init(rng, "b1", (64,)), _init(rng, "w2", (256, 64, 3, 3), 0.05),
             _init(rng, "b2", (256,)), _init(rng, "w3", (256, 256, 3, 3), 0.03), _init(rng, "b3", (256,)),
             _init(rng, "g", (256, 64, 1, 1), 0.1), _init(rng, "gb", (256,)), _init(rng, "dw", (256, 1, 3, 3), 0.5),
             _init(rng, "dwb", (256,)), _init(rng, "fc", (256, 10), 0.1), _init(rng, "fcb", (10,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2], name="conv2"),
             node("Relu", ["c2"], ["r2"], name="relu2"),
             node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1] * 4, name="conv3"),
             node("Relu", ["c3"], ["r3"], name="relu3"),
             node("Conv", ["r3", "g", "gb"], ["c4"], group=4, name="grouped"),
             node("Add", ["c4", "r2"], ["s"], name="add"),
             node("Relu", ["s"], ["r4"], name="relu4"),
             node("Conv", ["r4", "dw", "dwb"], ["c5"], pads=[1] * 4, group=256, name="depthwise"),
             node("GlobalAveragePool", ["c5"], ["p"], name="gap"),
             node("Flatten", ["p"], ["f"], name="flatten"),
             node("MatMul", ["f", "fc"], ["m"], name="fc"),
             node("Add", ["m", "fcb"], ["y"], name="fc_bias")]
    return _model(nodes, [1, 3, 16, 16], [1, 10], inits, "wide_cnn")


def deconv_net(seed: int = 0) -> onnx.ModelProto:
    """A detector's upsampling neck (PP-OCR det's DBNet head): a conv, a stride-2 ConvTranspose with a bias, relu."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (8, 3, 3, 3)), _init(rng, "b1", (8,)), _init(rng, "up", (8, 4, 2, 2), 0.4),
             _init(rng, "upb", (4,))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4, strides=[2, 2], name="conv1"),
             node("Relu", ["c1"], ["r1"], name="relu1"),
             node("ConvTranspose", ["r1", "up", "upb"], ["u"], strides=[2, 2], name="upsample"),
             node("Relu", ["u"], ["y"], name="relu2")]
    return _model(nodes, [1, 3, 16, 16], [1, 4, 16, 16], inits, "deconv_net")


def transformer_mlp(seed: int = 0) -> onnx.ModelProto:
    """A transformer's MLP block on 8 tokens of width 16: two linear layers, relu, a residual add, softmax."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (16, 32), 0.3), _init(rng, "b1", (32,)), _init(rng, "w2", (32, 16), 0.3),
             _init(rng, "b2", (16,))]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
             node("Relu", ["hb"], ["a"], name="relu"),
             node("MatMul", ["a", "w2"], ["o"], name="fc2"),
             node("Add", ["o", "b2"], ["ob"], name="fc2_bias"),
             node("Add", ["ob", "x"], ["s"], name="residual"),
             node("Softmax", ["s"], ["y"], axis=-1, name="softmax")]
    return _model(nodes, [1, 8, 16], [1, 8, 16], inits, "transformer_mlp")


def gelu_mlp(seed: int = 0) -> onnx.ModelProto:
    """A transformer's MLP block on 8 tokens of width 16 with an erf GELU as ONNX exporters write it: linear,
    ``x * (1 + erf(x / sqrt 2)) * 0.5`` (Div, Erf, Add, Mul, Mul), linear, a residual add. Quantized, the
    quantizer leaves ``DQ -> Div -> Erf -> Q`` (it quantizes no Div or Erf) between the Add and Mul units."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w1", (16, 32), 0.3), _init(rng, "b1", (32,)), _init(rng, "w2", (32, 16), 0.3),
             _init(rng, "b2", (16,)), numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w1"], ["h"], name="fc1"), node("Add", ["h", "b1"], ["hb"], name="fc1_bias"),
             node("Div", ["hb", "sqrt2"], ["d"], name="gelu_div"), node("Erf", ["d"], ["e"], name="gelu_erf"),
             node("Add", ["e", "one"], ["e1"], name="gelu_add"), node("Mul", ["hb", "e1"], ["m"], name="gelu_mul"),
             node("Mul", ["m", "half"], ["a"], name="gelu_half"),
             node("MatMul", ["a", "w2"], ["o"], name="fc2"), node("Add", ["o", "b2"], ["ob"], name="fc2_bias"),
             node("Add", ["ob", "x"], ["y"], name="residual")]
    return _model(nodes, [1, 8, 16], [1, 8, 16], inits, "gelu_mlp")


def qdq_chain(ops, source_dtype: int = TensorProto.UINT8, output_dtype: int = TensorProto.UINT8,
              source=(0.05, 128), output=(1 / 128, 0), shape=(2, 64)) -> onnx.ModelProto:
    """``x -> Q -> DQ -> ops -> Q -> DQ -> y``, the QDQ form of a lone element-wise unit: ``ops`` are
    ``(op_type, constant or None, constant first)``, each reading the one before, a constant a float32 scalar.
    ``source`` and ``output`` are the (scale, zero point) of the two quantizations."""
    node = helper.make_node
    zero = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}
    inits = [numpy_helper.from_array(np.array(source[0], np.float32), "xs"),
             numpy_helper.from_array(np.array(source[1], zero[source_dtype]), "xz"),
             numpy_helper.from_array(np.array(output[0], np.float32), "ys"),
             numpy_helper.from_array(np.array(output[1], zero[output_dtype]), "yz")]
    nodes = [node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), node("DequantizeLinear", ["xq", "xs", "xz"], ["t0"])]
    for i, (op, constant, first) in enumerate(ops):
        inputs = [f"t{i}"]
        if constant is not None:
            inits.append(numpy_helper.from_array(np.array(constant, np.float32), f"c{i}"))
            inputs = [f"c{i}", f"t{i}"] if first else [f"t{i}", f"c{i}"]
        nodes.append(node(op, inputs, [f"t{i + 1}"], name=f"{op.lower()}{i}"))
    n = len(ops)
    nodes += [node("QuantizeLinear", [f"t{n}", "ys", "yz"], ["yq"]), node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return _model(nodes, list(shape), list(shape), inits, "qdq_chain")


def attention_block(seed: int = 0, width: int = 16, heads: int = 2) -> onnx.ModelProto:
    """A transformer layer on 8 tokens of width 16: Q, K, V projections, heads split by Reshape (copying the batch
    and sequence dims: shape ``[0, 0, heads, width / heads]``) and Transpose, scaled scores, softmax, the context
    merged back, an output projection with a residual add, then an MLP (linear, relu, linear) with a residual add.
    Symbolic batch and sequence dims (:func:`with_symbolic_dims`) keep every shape in it symbolic."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, name, shape, 0.3) for name, shape in (
        ("wq", (width, width)), ("bq", (width,)), ("wk", (width, width)), ("bk", (width,)), ("wv", (width, width)),
        ("bv", (width,)), ("wo", (width, width)), ("bo", (width,)), ("w1", (width, 32)), ("b1", (32,)),
        ("w2", (32, width)), ("b2", (width,)))]
    inits += [numpy_helper.from_array(np.array([0, 0, heads, width // heads], np.int64), "split"),
              numpy_helper.from_array(np.array([0, 0, width], np.int64), "merge"),
              numpy_helper.from_array(np.array(1 / np.sqrt(width // heads), np.float32), "scale")]
    node = helper.make_node
    nodes = []
    for p in "qkv":  # K is transposed to [batch, heads, d, seq]
        nodes += [node("MatMul", ["x", f"w{p}"], [f"{p}0"], name=f"{p}_proj"),
                  node("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"{p}_bias"),
                  node("Reshape", [f"{p}1", "split"], [f"{p}2"], name=f"{p}_split"),
                  node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3],
                       name=f"{p}_heads")]
    nodes += [node("MatMul", ["q3", "k3"], ["s0"], name="scores"), node("Mul", ["s0", "scale"], ["s1"], name="scaled"),
              node("Softmax", ["s1"], ["p"], axis=-1, name="softmax"),
              node("MatMul", ["p", "v3"], ["c0"], name="context"),
              node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3], name="unheads"),
              node("Reshape", ["c1", "merge"], ["c2"], name="merge"),
              node("MatMul", ["c2", "wo"], ["o0"], name="out_proj"), node("Add", ["o0", "bo"], ["o1"], name="out_bias"),
              node("Add", ["o1", "x"], ["r"], name="residual"),
              node("MatMul", ["r", "w1"], ["h0"], name="fc1"), node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
              node("Relu", ["h1"], ["h2"], name="relu"), node("MatMul", ["h2", "w2"], ["f0"], name="fc2"),
              node("Add", ["f0", "b2"], ["f1"], name="fc2_bias"), node("Add", ["f1", "r"], ["y"], name="residual2")]
    return _model(nodes, [1, 8, width], [1, 8, width], inits, "attention_block")


def with_symbolic_dims(model: onnx.ModelProto, dims: dict) -> onnx.ModelProto:
    """A copy of ``model`` whose input and output dims ``dims`` names (axis -> name) are symbolic, as an exporter's
    ``dynamic_axes`` leaves them; quantize first (calibration reads the static shape)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in [*out.graph.input, *out.graph.output]:
        shape = value.type.tensor_type.shape
        for axis, name in dims.items():
            if axis < len(shape.dim):
                shape.dim[axis].ClearField("dim_value")
                shape.dim[axis].dim_param = name
    del out.graph.value_info[:]  # the quantizer's inferred shapes are the static ones
    return out


def quantize(model: onnx.ModelProto, fmt: str = "QDQ", per_channel: bool = False, reduce_range: bool = False,
             seed: int = 1, samples: int = 8, weight_type: str = "QInt8",
             activation_type: str = "QUInt8") -> onnx.ModelProto:
    """``model`` quantized by onnxruntime (``fmt``: "QDQ" or "QOperator"), calibrated on random inputs.

    ``reduce_range`` quantizes weights to 7 bits, as onnxruntime advises for CPUs
    without VNNI: its AVX2 u8 x s8 kernels add pairs of products in int16, which
    saturates with full-range weights.
    """
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    batches = [{model.graph.input[0].name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter(batches)

        def get_next(self):
            return next(self.data, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "float.onnx", Path(tmp) / "quantized.onnx"
        onnx.save(model, src)
        quantize_static(str(src), str(out), Reader(), quant_format=getattr(QuantFormat, fmt),
                        per_channel=per_channel, reduce_range=reduce_range,
                        activation_type=getattr(QuantType, activation_type),
                        weight_type=getattr(QuantType, weight_type))
        return onnx.load(out)


def output_scale(model: onnx.ModelProto) -> float:
    """The scale of the quantized tensor the model's float output is dequantized from: one quantum."""
    producer = {out: n for n in model.graph.node for out in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = producer[model.graph.output[0].name]
    if node.op_type != "DequantizeLinear":
        raise ValueError(f"output {model.graph.output[0].name} comes from {node.op_type}, not DequantizeLinear")
    return float(inits[node.input[1]].reshape(-1)[0])

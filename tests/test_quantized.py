"""Quantized models (issue 16, first part): QDQ and QOperator import, run and match onnxruntime's int8 run.

Models are quantized here by onnxruntime.quantization (tests/quantized_models.py).
Every result is compared with onnxruntime running the same quantized model
twice, within one quantum of the output: with its integer kernels (QDQ units
fused into QLinearConv and friends), and with graph optimizations off, which
computes each Quantize/DequantizeLinear and float op as ONNX defines them.
Per-channel models are quantized with ``reduce_range`` (7-bit weights), as
onnxruntime advises on CPUs without VNNI; with full-range weights its AVX2
kernels saturate (measured: up to 22 quanta from its own unfused run), and
byoc follows the ONNX definition (test_full_range_weights_follow_the_definition).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import byoc
from byoc.errors import InvalidModelError
from byoc.pipeline.quantized import QuantizationError, rewrite_qoperators
from quantized_models import output_scale, quantize, residual_cnn

FORMATS = [("QDQ", False), ("QDQ", True), ("QOperator", False), ("QOperator", True)]  # (format, per channel)


VENDOR_SETS = [[], ["c_source"], ["dnnl", "c_source"]]  # dnnl is installed wherever the tests run (.ci/run)


@pytest.fixture(scope="module")
def quantized():
    cache = {}

    def get(fmt: str, per_channel: bool) -> onnx.ModelProto:
        if (fmt, per_channel) not in cache:
            cache[fmt, per_channel] = quantize(residual_cnn(), fmt, per_channel, reduce_range=per_channel)
        return cache[fmt, per_channel]

    return get


def _feed(seed: int = 5) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)}


def _ort(model: onnx.ModelProto, feed: dict, integer_kernels: bool = True) -> np.ndarray:
    """onnxruntime's output: with its int8 kernels, or (``integer_kernels=False``) every op as ONNX defines it."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not integer_kernels:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None,
                                                                                                            feed)[0]


def test_the_quantizer_wrote_what_the_tests_are_about(quantized):
    qdq = {n.op_type for n in quantized("QDQ", False).graph.node}
    qop = {n.op_type for n in quantized("QOperator", False).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "MatMul"} <= qdq
    assert {"QLinearConv", "QLinearAdd", "QLinearMatMul"} <= qop and "Conv" not in qop


@pytest.mark.parametrize("vendors", VENDOR_SETS, ids=lambda v: ",".join(v) or "host")
@pytest.mark.parametrize("fmt,per_channel", FORMATS, ids=[f"{f}-{'channel' if c else 'tensor'}" for f, c in FORMATS])
def test_quantized_model_matches_onnxruntime_int8_within_one_quantum(quantized, fmt, per_channel, vendors):
    model = quantized(fmt, per_channel)
    quantum = output_scale(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=vendors)
    for seed in (5, 6):
        feed = _feed(seed)
        got = artifact.run(feed)[0]
        for integer_kernels in (True, False):
            expected = _ort(model, feed, integer_kernels)
            assert got.shape == expected.shape
            error = np.abs(got - expected).max() / quantum
            assert error <= 1.001, (integer_kernels, error)
        assert np.abs(expected).max() > 10 * quantum  # the output is not all zero: the bound says something


def test_full_range_weights_follow_the_definition():
    model = quantize(residual_cnn(), "QDQ", per_channel=True, reduce_range=False)
    quantum = output_scale(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["c_source"])
    feed = _feed(5)
    got = artifact.run(feed)[0]
    assert np.abs(got - _ort(model, feed, integer_kernels=False)).max() <= quantum * 1.001


def test_qoperator_nodes_become_qdq_units_named_after_them(quantized):
    model = quantized("QOperator", False)
    rewritten, made_from = rewrite_qoperators(model)
    qlinear = {n.name for n in model.graph.node if n.op_type.startswith("QLinear")}
    assert set(made_from.values()) == qlinear
    assert not any(n.op_type.startswith("QLinear") for n in rewritten.graph.node)
    onnx.checker.check_model(rewritten, full_check=True)
    imported = byoc.import_model(model)
    for name in qlinear:
        assert imported.prepared[name].startswith("decomposed into"), (name, imported.prepared.get(name))


@pytest.mark.parametrize("per_channel", [False, True], ids=["scalar-zero-point", "per-channel-zero-point"])
def test_conv_integer_is_exact(per_channel):
    # onnxruntime's ConvInteger takes a scalar weight zero point only; the per-channel one the
    # spec allows is checked against onnx.reference.
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    w_zp = rng.integers(-5, 5, (4,) if per_channel else (), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], pads=[1] * 4, name="convint")], "ci",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4, 9, 9])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(131), "x_zp"),
         numpy_helper.from_array(np.asarray(w_zp), "w_zp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.integers(0, 256, (1, 3, 9, 9), dtype=np.uint8)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0] if per_channel else _ort(model, {"x": x})
    got = byoc.compile(model, vendors=[]).run({"x": x})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, expected)


def _with_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for index, init in enumerate(out.graph.initializer):
        if init.name == name:
            out.graph.initializer[index].CopyFrom(numpy_helper.from_array(value, name))
            return out
    raise KeyError(name)


def _weight_dequantize(model: onnx.ModelProto) -> onnx.NodeProto:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
                and inits[n.input[0]].dtype == np.int8 and inits[n.input[0]].ndim == 4)


@pytest.mark.parametrize("bad,why", [(0.0, "positive and finite"), (-0.5, "positive and finite"),
                                     (np.inf, "positive and finite")])
def test_a_bad_scale_is_named_with_its_node(quantized, bad, why):
    model = quantized("QDQ", False)
    node = _weight_dequantize(model)
    broken = _with_initializer(model, node.input[1], np.array(bad, np.float32))
    with pytest.raises(QuantizationError, match=f"{node.name}.*{why}"):
        byoc.import_model(broken)


def test_a_per_axis_scale_of_the_wrong_length_is_named(quantized):
    model = quantized("QDQ", True)
    node = _weight_dequantize(model)
    with pytest.raises(QuantizationError, match=f"{node.name}.*axis 0"):
        byoc.import_model(_with_initializer(model, node.input[1], np.full(3, 0.01, np.float32)))


def test_a_zero_point_of_another_type_is_named(quantized):
    model = quantized("QDQ", False)
    node = _weight_dequantize(model)
    with pytest.raises(InvalidModelError, match=node.name):
        byoc.import_model(_with_initializer(model, node.input[2], np.array(200, np.uint8)))


def test_what_the_rewrite_cannot_take_is_named():
    from onnx import TensorProto, helper

    from byoc.errors import UnsupportedAttributeError

    def model_of(node, inputs, initializers=()):
        graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                                  list(initializers))
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                       helper.make_opsetid("com.microsoft", 1)])

    conv = helper.make_node("ConvInteger", ["x", "w", "", "w_zp"], ["y"], name="convint")
    weight_input = model_of(conv, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 5, 5]),
                                   helper.make_tensor_value_info("w", TensorProto.INT8, [4, 3, 3, 3])],
                            [numpy_helper.from_array(np.zeros(4, np.int8), "w_zp")])
    with pytest.raises(UnsupportedAttributeError, match="ConvInteger node 'convint': a weight that is not a constant"):
        rewrite_qoperators(weight_input)
    pool = helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"], name="gap",
                            domain="com.microsoft", channels_last=1)
    channels_last = model_of(pool, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 5, 5, 3])],
                             [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    with pytest.raises(UnsupportedAttributeError, match="QLinearGlobalAveragePool node 'gap': channels_last=1"):
        rewrite_qoperators(channels_last)

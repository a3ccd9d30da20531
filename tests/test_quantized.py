"""Quantized models: QDQ and QOperator import, their node units go to vendors as int8 ops, and match onnxruntime.

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

import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import byoc
from byoc.errors import InvalidModelError
from byoc.pipeline.quantized import QuantizationError, rewrite_qoperators
from quantized_models import (activation_cnn, windowed_conv, conv1d_net, deconv_net, depthwise_cnn, gemm_classifier, grouped_cnn,
                              output_scale, quantize, residual_cnn, transformer_mlp)

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


def _feed(seed: int = 5, shape=(1, 3, 16, 16)) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


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


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_gemm_with_transb_reads_its_integer_weight_transposed_and_computes_the_same(per_channel):
    """The importer spells transB as a transpose between DQ(w) and the matmul, hiding the unit; prepare transposes
    the integer constant instead (moving a per-channel axis with it), on a copy."""
    from byoc.pipeline.qdq_form import untransposed_gemm_weights

    model = quantize(gemm_classifier(), "QDQ", per_channel, reduce_range=True)
    before = model.SerializeToString()
    rewritten = untransposed_gemm_weights(model)
    assert model.SerializeToString() == before
    gemm = next(n for n in rewritten.graph.node if n.op_type == "Gemm")
    assert all(a.name != "transB" for a in gemm.attribute)
    dq = next(n for n in rewritten.graph.node if gemm.input[1] in n.output)
    weight = next(t for t in rewritten.graph.initializer if t.name == dq.input[0])
    assert list(weight.dims) == [8, 10]
    if per_channel:
        assert onnx.helper.get_attribute_value(next(a for a in dq.attribute if a.name == "axis")) == 1
    for seed in (5, 6):  # onnxruntime's float gemm may sum in another order: a rounding may move by one quantum
        feed = _feed(seed)
        expected = _ort(model, feed, integer_kernels=False)
        assert np.abs(_ort(rewritten, feed, integer_kernels=False) - expected).max() <= 1.001 * output_scale(model)
        assert np.abs(expected).max() > 10 * output_scale(model)


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
    softmax = helper.make_node("QLinearSoftmax", ["x", "s", "z", "s", "z"], ["y"], name="sm", domain="com.microsoft",
                               axis=1, opset=13)
    other_axis = model_of(softmax, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 5, 3])],
                          [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    with pytest.raises(UnsupportedAttributeError, match="QLinearSoftmax node 'sm': axis=1 is not supported"):
        rewrite_qoperators(other_axis)
    other_axis.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 5, 3]))
    with pytest.raises(UnsupportedAttributeError, match="QLinearSoftmax node 'sm'"):
        byoc.import_model(other_axis)  # the typed error reaches the user, not a traceback from TVM


def test_a_dynamically_quantized_model_is_refused_with_what_to_do_instead():
    """ddddocr's old OCR model was quantized by quantize_dynamic: its LSTM is onnxruntime's DynamicQuantizeLSTM."""
    from onnx import TensorProto, helper

    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r"], ["y"], name="lstm_quant", domain="com.microsoft",
                            hidden_size=4)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1, 4])],
                              [numpy_helper.from_array(np.zeros((1, 3, 16), np.int8), "w"),
                               numpy_helper.from_array(np.zeros((1, 4, 16), np.int8), "r")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(byoc.UnsupportedOpsError, match=r"lstm_quant \(DynamicQuantizeLSTM in domain com.microsoft\)"
                       r".*onnxruntime's own, not ONNX.*quantize_static \(QDQ format\)"):
        byoc.import_model(m)


# -- int8 units offered to vendors -----------------------------------------------------------------

MODELS = {"residual": (residual_cnn, (1, 3, 16, 16)), "depthwise": (depthwise_cnn, (1, 3, 32, 32)),
          "mlp": (transformer_mlp, (1, 8, 16)), "conv1d": (conv1d_net, (1, 1, 136)),
          "gemm": (gemm_classifier, (1, 3, 16, 16)), "grouped": (grouped_cnn, (1, 3, 16, 16))}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


def _within_one_quantum(model: onnx.ModelProto, artifact, shape, int8_reference: bool = True) -> None:
    """``artifact``'s outputs are within one quantum of onnxruntime's definition of ``model`` and, when
    ``int8_reference``, of onnxruntime's int8 kernels too (see ``_ort_int8_is_a_reference``)."""
    quantum = output_scale(model)
    for seed in (5, 6):
        feed = _feed(seed, shape)
        got = artifact.run(feed)[0]
        for integer_kernels in (True, False) if int8_reference else (False,):
            expected = _ort(model, feed, integer_kernels)
            assert np.abs(got - expected).max() <= 1.001 * quantum, (integer_kernels, np.abs(got - expected).max())
        assert np.abs(expected).max() > 10 * quantum


@pytest.mark.parametrize("fmt,per_channel", FORMATS, ids=[f"{f}-{'channel' if c else 'tensor'}" for f, c in FORMATS])
@pytest.mark.parametrize("name", ["depthwise", "mlp", "residual", "conv1d", "gemm", "grouped"])
@pytest.mark.parametrize("vendors", [["c_source"], ["dnnl"], ["json_runtime", "c_source"]], ids=",".join)
def test_every_unit_goes_to_an_int8_vendor_and_matches_onnxruntime(name, fmt, per_channel, vendors):
    """json_runtime (float only) first: its float rules do not split a unit (they would take the conv at its core)."""
    make, shape = MODELS[name]
    model = quantize(make(), fmt, per_channel, reduce_range=per_channel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=vendors)
        artifact = byoc.compile(model, vendors=vendors)
    on_host = {h.node.op_type for h in plan.host_nodes if h.node is not None}
    assert not on_host & QDQ_OPS, [(h.node.name, dict(h.reasons)) for h in plan.host_nodes]
    assert len(plan.partitions) <= 2
    cores = {n.name for n in model.graph.node if n.op_type in ("Conv", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul")}
    taken = {d.node.name: d.rule for d in plan.decisions.values() if d.node is not None and not d.on_host}
    int8_vendor = vendors[-1]
    for core in cores:
        assert taken.get(core, "").startswith(f"{int8_vendor}.q"), (core, taken.get(core))  # an int8 unit, not float
    _within_one_quantum(model, artifact, shape)


class _Recording:
    """A codegen that keeps the partitions it is given and compiles them as c_source does."""

    def __init__(self):
        from byoc.codegens.c_source import CSourceCodegen

        self.inner, self.partitions = CSourceCodegen(), []

    def compile(self, partitions, options):
        self.partitions.extend(partitions)
        return self.inner.compile(partitions, options)


def _probe_vendor():
    from byoc.vendor.quantized import qdq_rules, qdq_supported

    codegen = _Recording()
    return byoc.Vendor("probe", qdq_rules("probe", qdq_supported), codegen), codegen


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_vendor_sees_int8_tensors_scales_and_zero_points(quantized, per_channel):
    model = quantized("QDQ", per_channel)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    vendor, codegen = _probe_vendor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        byoc.compile(model, vendors=[vendor])
    convs = [c for g in codegen.partitions for c in g.ops if c.op == "qnn.conv2d"]
    assert len(convs) == 3
    first = next(c for c in convs if c.inputs[1].shape == (8, 3, 3, 3))
    x, w, b = first.inputs
    assert (x.dtype, w.dtype, b.dtype) == ("uint8", "int8", "int32")
    np.testing.assert_array_equal(w.data, inits["w1_quantized"])
    np.testing.assert_array_equal(b.data, inits["b1_quantized"])
    weight = first.quant.inputs[1]
    np.testing.assert_array_equal(weight.scale, inits["w1_scale"])
    assert weight.axis == (0 if per_channel else None) and weight.per_channel == per_channel
    assert first.quant.output.dtype == "uint8" and first.quant.output.scale.shape == ()
    assert first.quant.float_ops == ("relax.nn.conv2d", "relax.add")
    assert first.attrs["padding"] == (1, 1, 1, 1)  # the conv's own attributes
    # No op of the partitions is a float op between Q/DQ nodes.
    assert not [c.op for g in codegen.partitions for c in g.ops
                if not c.op.startswith("qnn.") and c.op not in ("relax.quantize", "relax.dequantize")]


def _qdq_conv_relu(zero_point: int, act: str) -> onnx.ModelProto:
    """DQ(x), DQ(w) -> Conv -> Relu or Clip(-1, 2) -> Q(y, zero point) -> DQ, written by hand (the quantizer drops the
    activation)."""
    rng = np.random.default_rng(3)
    node = onnx.helper.make_node
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (4, 2, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.float32(0.01), "w_scale"), numpy_helper.from_array(np.int8(0), "w_zp"),
             numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "zp"),
             numpy_helper.from_array(np.float32(0.03), "y_scale"), numpy_helper.from_array(np.uint8(zero_point), "y_zp"),
             numpy_helper.from_array(np.float32(-1.0), "lo"), numpy_helper.from_array(np.float32(2.0), "hi")]
    act_node = node("Relu", ["c"], ["a"], name="act") if act == "relu" else node("Clip", ["c", "lo", "hi"], ["a"],
                                                                                  name="act")
    nodes = [node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q_x"),
             node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="dq_x"),
             node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wd"], name="dq_w"),
             node("Conv", ["xd", "wd"], ["c"], pads=[1] * 4, name="conv"), act_node,
             node("QuantizeLinear", ["a", "y_scale", "y_zp"], ["yq"], name="q_y"),
             node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"], name="dq_y")]
    graph = onnx.helper.make_graph(
        nodes, "qdq_conv_relu", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 6, 6])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])  # onnx.reference has Q/DQ from 19
    model.ir_version = 9
    return model


@pytest.mark.parametrize("act,zero_point,expected", [("relu", 10, (10, 255)), ("relu", 0, (0, 255)),
                                                     ("clip", 100, (67, 167))])
def test_a_folded_activation_narrows_the_output_range(act, zero_point, expected):
    from onnx.reference import ReferenceEvaluator

    model = _qdq_conv_relu(zero_point, act)
    vendor, codegen = _probe_vendor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=[vendor])
    (conv,) = [c for g in codegen.partitions for c in g.ops if c.op == "qnn.conv2d"]
    assert conv.quant.output_range == expected  # clip: -1/0.03 -> -33 + 100, 2/0.03 -> 67 + 100
    assert conv.quant.float_ops[-1] == ("relax.nn.relu" if act == "relu" else "relax.clip")
    feed = {"x": np.random.default_rng(1).uniform(-6, 6, (1, 2, 6, 6)).astype(np.float32)}
    expected_y = ReferenceEvaluator(model).run(None, feed)[0]
    got = artifact.run(feed)[0]
    assert np.abs(got - expected_y).max() <= 0.03 * 1.001
    assert got.min() >= (expected[0] - zero_point) * 0.03 - 1e-6 and np.any(got != got.flat[0])


def test_quantize_rounds_half_to_even_and_saturates():
    """Lone QuantizeLinear/DequantizeLinear on c_source, at ties and beyond the range, bit for bit with onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    node = onnx.helper.make_node
    inits = [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.int8(3), "zp")]
    graph = onnx.helper.make_graph(
        [node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"),
         node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq")], "qdq",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [12])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [12])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])  # onnx.reference has Q/DQ from 19
    model.ir_version = 9
    # x / 0.5 = -2.5, -1.5, -0.5, 0.5, 1.5, 2.5 (ties), 0.75, then far beyond int8 on both sides, and NaN
    x = np.array([-1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 0.375, 1000, -1000, 62.0, -66.0, np.nan], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=["c_source"])
        artifact = byoc.compile(model, vendors=["c_source"])
    assert not plan.host_nodes
    got = artifact.run({"x": x})[0]
    with np.errstate(invalid="ignore"):  # the reference casts the NaN
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got[:-1], expected[:-1])
    assert got[7] == (127 - 3) * 0.5 and got[8] == (-128 - 3) * 0.5  # saturated


def test_units_a_vendor_does_not_take_stay_on_the_host_with_a_reason():
    """int16 activations (QDQ with QuantType.QInt16) are no int8 unit; the model still runs as ONNX defines it."""
    import tempfile

    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    batches = iter([_feed(s) for s in range(4)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(residual_cnn(), Path(tmp) / "f.onnx")
        quantize_static(str(Path(tmp) / "f.onnx"), str(Path(tmp) / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt16, weight_type=QuantType.QInt8)
        model = onnx.load(Path(tmp) / "q.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=["c_source"])
        artifact = byoc.compile(model, vendors=["c_source"])
    reasons = {h.node.name: h.reasons.get("c_source", "") for h in plan.host_nodes if h.node is not None}
    assert reasons["x_QuantizeLinear"] == reasons["r1_DequantizeLinear"] == "int16 QDQ (int8 and uint8 only)"
    rules = {d.rule for d in plan.decisions.values() if d.node is not None and d.node.name == "conv1"}
    assert "c_source.conv2d" in rules and not any(r.startswith("c_source.q") for r in rules)  # float, not int8
    feed = _feed(5)
    expected = _ort(model, feed, integer_kernels=False)
    np.testing.assert_allclose(artifact.run(feed)[0], expected, atol=2 * output_scale(model))


def test_the_report_names_int8_units(quantized, tmp_path):
    from byoc.partition.__main__ import main

    path = tmp_path / "qdq.onnx"
    onnx.save(quantized("QDQ", False), path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = tmp_path / "report.txt"
        assert main([str(path), "--vendor", "c_source", "--output", str(report)]) == 0
    text = report.read_text()
    assert "conv1 (QDQ int8)" in text and "fc (QDQ int8)" in text
    assert "x_QuantizeLinear (QDQ int8)" not in text  # Q/DQ nodes belong to a unit; the core op is named


#: The oneDNN ISA caps a test runs under: "" (the CPU's own) and, where the CPU has VNNI, AVX2 too, so the
#: path of CPUs without VNNI is tested on every machine (ONEDNN_MAX_CPU_ISA; the runtime reads oneDNN's
#: effective ISA). The oneDNN wheel's x86_64 builds need AVX2 at least for their int8 kernels.
CPU_HAS_VNNI = any(flag in open("/proc/cpuinfo").read().split() for flag in ("avx512_vnni", "avx_vnni"))
ISA_CAPS = ["", "AVX2"] if CPU_HAS_VNNI else [""]


def _ort_int8_is_a_reference(reduce_range: bool) -> bool:
    """Whether onnxruntime's int8 kernels compute a model's definition here, to within a quantum.

    Without VNNI they sum u8 x s8 pairs in int16, which saturates with full-range weights (the quantizer's
    default): on an AVX2 machine the windowed conv's per-channel full-range weights put them 2 quanta from the
    definition. There only the definition is a reference (onnxruntime's own ISA cannot be capped, oneDNN's can)."""
    return reduce_range or CPU_HAS_VNNI


def _executed(make: str, reduce_range: bool, activation_type: str = "QUInt8", isa: str = "",
              shape: tuple = (1, 3, 16, 16), args: tuple = (), per_channel: bool = False) -> list[str]:
    """oneDNN's log of the primitives one run of ``make(*args)`` (from quantized_models, input of ``shape``),
    quantized per tensor (or ``per_channel``), executes (under oneDNN ISA cap ``isa``, if given)."""
    script = (
        "import sys, warnings; sys.path.insert(0, %r)\n"
        "import numpy as np, byoc\n"
        "from quantized_models import quantize, %s as make\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    model = quantize(make(*%r), per_channel=%r, reduce_range=%r, activation_type=%r)\n"
        "    artifact = byoc.compile(model, vendors=['dnnl'], strict=True)\n"
        "print('RUN', flush=True)\n"
        "artifact.run({'x': np.ones(%r, np.float32)})\n"
    ) % (str(Path(__file__).parent), make, tuple(args), per_channel, reduce_range, activation_type, tuple(shape))
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    log = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert log.returncode == 0, log.stderr[-2000:]
    run = log.stdout.split("RUN\n", 1)[1]  # after the build (whose weight reorders are logged too)
    return [line for line in run.splitlines() if line.startswith("onednn_verbose") and ",exec," in line]


def _onednn_log(reduce_range: bool, activation_type: str = "QUInt8", isa: str = "") -> tuple[list, list]:
    """oneDNN's log of one run of the residual CNN quantized per tensor: (convolutions, matmuls) executed."""
    executed = _executed("residual_cnn", reduce_range, activation_type, isa)
    return [x for x in executed if ",convolution," in x], [x for x in executed if ",matmul," in x]


def _under_isa(isa: str, model: onnx.ModelProto, seeds=(5, 6, 7), shape=(1, 3, 16, 16)) -> list[np.ndarray]:
    """``model`` built for dnnl and run on ``seeds``' inputs of ``shape`` (as ``_feed`` makes them) in a process
    whose oneDNN is capped at ``isa``."""
    script = (
        "import sys, warnings, numpy as np, onnx, byoc\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    artifact = byoc.compile(onnx.load_from_string(sys.stdin.buffer.read()), vendors=['dnnl'], strict=True)\n"
        "outs = [artifact.run({'x': np.random.default_rng(s).standard_normal(%r).astype(np.float32)})[0]\n"
        "        for s in %r]\n"
        "np.save(sys.stdout.buffer, np.stack(outs))\n"
    ) % (tuple(shape), tuple(seeds))
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa} if isa else dict(os.environ)
    run = subprocess.run([sys.executable, "-c", script], input=model.SerializeToString(), capture_output=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    import io

    return list(np.load(io.BytesIO(run.stdout)))


def test_activation_units_run_on_8_bit_tensors_on_dnnl():
    """Swish, hard-swish and squeeze-excitation units, which run as their float definition, are each one binary
    primitive reading and writing 8-bit tensors: no float copy of an activation is made but the pooled ones (the
    two global pools go DQ -> mean -> Q) and the model's output."""
    executed = _executed("activation_cnn", True)
    to_float = [x for x in executed if ",reorder," in x and "dst_f32" in x]
    assert len(to_float) == 3, to_float  # the two pools' inputs, the output
    assert len([x for x in executed if ",binary," in x and "src_u8" in x and "dst_u8" in x]) >= 4, executed
    model = quantize(activation_cnn(), reduce_range=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    _within_one_quantum(model, artifact, (1, 3, 16, 16))


def _scalar_unit(op: str, x_first: bool) -> onnx.ModelProto:
    """Q -> DQ -> (x op 1.5, or 1.5 op x) -> Q -> DQ on u8 activations: one element-wise unit with a float scalar."""
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s_in"),
             numpy_helper.from_array(np.array(128, np.uint8), "z_in"),
             numpy_helper.from_array(np.array(0.04, np.float32), "s_out"),
             numpy_helper.from_array(np.array(100, np.uint8), "z_out"),
             numpy_helper.from_array(np.array(1.5, np.float32), "c")]
    operands = ["xd", "c"] if x_first else ["c", "xd"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]),
             helper.make_node(op, operands, ["y"]),
             helper.make_node("QuantizeLinear", ["y", "s_out", "z_out"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "z_out"], ["out"])]
    graph = helper.make_graph(nodes, "scalar_unit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 5])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 6, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("op,x_first", [(op, first) for op in ("Sub", "Add", "Mul") for first in (True, False)]
                         + [("Div", True)], ids=lambda v: str(v))
@pytest.mark.parametrize("vendors", [["dnnl"], ["c_source"]], ids=",".join)
def test_element_wise_units_with_a_scalar_keep_their_operand_order(op, x_first, vendors):
    """x - c is not c - x. dnnl runs such a unit as one primitive on the 8-bit tensor whose post-ops are the
    unit's float definition; it once passed the operand order to the post-op builder before reading it, and
    computed c - x (5 quanta off and more). c / x is left out: x crosses zero."""
    model = _scalar_unit(op, x_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=vendors, strict=True)
    feed = {"x": np.random.default_rng(3).uniform(-6, 6, (1, 8, 6, 5)).astype(np.float32)}
    got = artifact.run(feed)[0]
    expected = _ort(model, feed, False)
    assert np.abs(got - expected).max() <= 1.001 * 0.04, np.abs(got - expected).max()


def _activation_unit(op: str, zero_point: np.ndarray) -> onnx.ModelProto:
    """Q -> DQ -> activation -> Q -> DQ on 8-bit activations of ``zero_point``'s type; "Silu" is x * sigmoid(x),
    "QuantizedSilu" the same with the sigmoid's output quantized (a sigmoid unit, then a multiply unit of two
    8-bit tensors that are both functions of x); "QuantizedHardSwish" x * relu6(x + 3) / 6 as three units."""
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s_in"),
             numpy_helper.from_array(zero_point, "z_in"),
             numpy_helper.from_array(np.array(0.03, np.float32), "s_out"),
             numpy_helper.from_array(zero_point, "z_out")]
    if op == "Silu":
        body = [helper.make_node("Sigmoid", ["xd"], ["sig"]), helper.make_node("Mul", ["xd", "sig"], ["y"])]
    elif op == "QuantizedSilu":  # onnxruntime's quantizer's SiLU: two units, the sigmoid's output quantized
        inits += [numpy_helper.from_array(np.array(1 / 255, np.float32), "s_sig"),
                  numpy_helper.from_array(np.array(0 if zero_point.dtype == np.uint8 else -128, zero_point.dtype),
                                          "z_sig")]
        body = [helper.make_node("Sigmoid", ["xd"], ["sig"]),
                helper.make_node("QuantizeLinear", ["sig", "s_sig", "z_sig"], ["sig_q"]),
                helper.make_node("DequantizeLinear", ["sig_q", "s_sig", "z_sig"], ["sig_d"]),
                helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd2"]),
                helper.make_node("Mul", ["xd2", "sig_d"], ["y"])]
    elif op == "QuantizedHardSwish":  # PP-OCR's x * relu6(x + 3) / 6 quantized: three units, each of the one before
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                  (("three", 3.0), ("zero", 0.0), ("six", 6.0), ("s_mid", 0.04))]
        body = [helper.make_node("Add", ["xd", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["r"]),
                helper.make_node("QuantizeLinear", ["r", "s_mid", "z_out"], ["r_q"]),
                helper.make_node("DequantizeLinear", ["r_q", "s_mid", "z_out"], ["r_d"]),
                helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd2"]),
                helper.make_node("Mul", ["xd2", "r_d"], ["m"]),
                helper.make_node("QuantizeLinear", ["m", "s_mid", "z_out"], ["m_q"]),
                helper.make_node("DequantizeLinear", ["m_q", "s_mid", "z_out"], ["m_d"]),
                helper.make_node("Div", ["m_d", "six"], ["y"])]
    else:
        body = [helper.make_node(op, ["xd"], ["y"])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]), *body,
             helper.make_node("QuantizeLinear", ["y", "s_out", "z_out"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "z_out"], ["out"])]
    shape = [1, 16, 16, 16]
    graph = helper.make_graph(nodes, "activation_unit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zero_point", [np.array(100, np.uint8), np.array(-20, np.int8)], ids=["u8", "s8"])
@pytest.mark.parametrize("op", ["Sigmoid", "HardSwish", "Tanh", "Silu", "QuantizedSilu", "QuantizedHardSwish"])
def test_element_wise_units_of_one_8_bit_tensor_run_as_a_byte_table_on_dnnl(op, zero_point):
    """A unit whose output depends on its one 8-bit input alone is a 256-entry table the runtime fills with the
    unit's own primitive when the module is made: no oneDNN primitive runs on the tensor but the input's quantize
    and the output's dequantize. A unit reading another unit's table of the same input composes it, and so does a
    unit whose source is another's table (the quantized SiLU and hard-swish are one table each; the tables they
    read are not computed). Every one of the 256 input codes is fed, in every position
    mod 64 (the vector width), and the output is within one quantum of onnxruntime's definition."""
    model = _activation_unit(op, zero_point)
    codes = np.arange(256) + (0 if zero_point.dtype == np.uint8 else -128)
    x = ((codes - int(zero_point)) * 0.05).astype(np.float32)
    feed = {"x": np.stack([np.roll(x, shift) for shift in range(16)]).reshape(1, 16, 16, 16)}
    script = (
        "import sys, warnings, numpy as np, onnx, byoc\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    artifact = byoc.compile(onnx.load_from_string(sys.stdin.buffer.read()), vendors=['dnnl'], strict=True)\n"
        "import tvm_ffi\n"
        "print('RUN', flush=True)\n"
        "np.save(%r, artifact.run({'x': np.load(%r)})[0])\n"
        "print('KERNEL RUNS', tvm_ffi.get_global_func('byoc.dnnl.kernel_runs')())\n")
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", feed["x"])
        run = subprocess.run([sys.executable, "-c", script % (f"{tmp}/y.npy", f"{tmp}/x.npy")],
                             input=model.SerializeToString(), capture_output=True, timeout=300,
                             env={**os.environ, "ONEDNN_VERBOSE": "1"})
        assert run.returncode == 0, run.stderr[-2000:]
        got = np.load(Path(tmp) / "y.npy")
    log = run.stdout.decode().split("RUN\n", 1)[1]
    assert log.splitlines()[-1] == "KERNEL RUNS 1", log.splitlines()[-1]  # one table per call, composed
    executed = [line for line in log.splitlines() if ",exec," in line]
    # the first run makes the module's primitives, the table's (one binary on the 256 codes) among them
    on_the_tensor = [line.split(",")[3] for line in executed if ",1x16x16x16" in line]
    assert on_the_tensor == ["reorder", "reorder"], executed
    expected = _ort(model, feed, False)
    assert np.abs(got - expected).max() <= 1.001 * 0.03, np.abs(got - expected).max()


def test_dnnl_runs_int8_primitives_for_7_bit_weights():
    """oneDNN's own log: with reduce_range weights the convolutions and the matmul read u8 and s8, write u8.

    The matmul (a [1, 8] x [8, 10] classifier) runs as a 1x1 convolution over its rows: oneDNN's int8 gemm is
    2.5-7x slower for a few rows."""
    convs, matmuls = _onednn_log(reduce_range=True)
    assert len(convs) == 4 and not matmuls, convs + matmuls
    assert sum("mb1_ic8oc10_ih1oh1kh1" in line for line in convs) == 1, convs
    for line in convs + matmuls:
        assert "src_u8" in line and "wei_s8" in line and "dst_u8" in line, line


def _vnni_under(isa: str) -> bool:
    return CPU_HAS_VNNI and not isa


@pytest.mark.parametrize("isa", ISA_CAPS, ids=lambda isa: isa or "native")
def test_full_range_weights_run_int8_with_vnni_else_in_float_and_follow_the_definition(isa):
    """onnxruntime's quantizer writes full-range weights unless told reduce_range. Without VNNI, int8 kernels add
    u8 x s8 pairs in int16 and saturate (onnxruntime's do: PP-OCR cls quantized per tensor moved by 0.185 of its
    output range), so dnnl runs such units in float32 and equals the definition; with VNNI (int32 sums) the same
    artifact runs them on the int8 kernels, within one quantum of it."""
    convs, matmuls = _onednn_log(reduce_range=False, isa=isa)
    if _vnni_under(isa):  # the three convs and the classifier (an int8 matmul runs as a 1x1 conv over its rows)
        assert len(convs) == 4 and not matmuls, convs + matmuls
        assert all("src_u8" in line and "wei_s8" in line and "dst_u8" in line for line in convs), convs
    else:
        assert len(convs) == 3 and len(matmuls) == 1, convs + matmuls
        assert all("src_f32" in line and "wei_f32" in line for line in convs + matmuls), convs + matmuls
    model = quantize(residual_cnn(), "QDQ", reduce_range=False)
    quantum = output_scale(model)
    for seed, got in zip((5, 6, 7), _under_isa(isa, model)):
        want = _ort(model, _feed(seed), integer_kernels=False)
        if _vnni_under(isa):
            assert np.abs(got - want).max() <= 1.001 * quantum
        else:
            np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("isa", ISA_CAPS, ids=lambda isa: isa or "native")
@pytest.mark.parametrize("make", [residual_cnn, activation_cnn])
def test_s8_activations_run_int8_with_vnni_else_in_float_and_follow_the_definition(make, isa):
    """onnxruntime's QInt8 activations: without VNNI oneDNN's int8 kernels shift an s8 source to u8 and halve the
    weights, and a conv moved by up to 6 quanta, so such units run as their definition in float32; with VNNI
    the int8 kernels are exact and run them."""
    convs = [x for x in _executed(make.__name__, True, "QInt8", isa) if ",convolution," in x]
    int8 = [x for x in convs if "src_s8" in x and "wei_s8" in x]
    assert (len(int8) == len(convs)) if _vnni_under(isa) else not int8, convs
    model = quantize(make(), reduce_range=True, activation_type="QInt8")
    quantum = output_scale(model)
    for seed, got in zip((5, 6, 7), _under_isa(isa, model)):
        assert np.abs(got - _ort(model, _feed(seed), integer_kernels=False)).max() <= 1.001 * quantum


def test_dnnl_names_the_int8_units_it_cannot_run():
    """uint8 weights: oneDNN's int8 weights are s8; the units go to c_source, listed after it, with dnnl's reason."""
    model = quantize(residual_cnn(), "QDQ", weight_type="QUInt8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=["dnnl", "c_source"])
        artifact = byoc.compile(model, vendors=["dnnl", "c_source"])
    conv = next(d for d in plan.decisions.values() if d.node is not None and d.node.name == "conv1"
                and d.op == "relax.nn.conv2d")
    assert conv.rule == "c_source.qconv2d"
    assert conv.reasons["dnnl"] == "uint8 weights (oneDNN int8 weights are s8)"
    _within_one_quantum(model, artifact, (1, 3, 16, 16))


def test_verify_compares_quantized_outputs_in_quanta_against_the_definition(quantized):
    """verify compares a quantized output within one quantum of onnxruntime's unfused run (the definition), not its
    fused int8 kernels, and says what it compared."""
    from byoc.tools.verify import output_quanta, random_inputs, verify

    model = quantized("QDQ", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=["dnnl"])
        result = verify(plan)
    assert result.ok, result.lines
    quantum = output_scale(model)
    assert output_quanta(plan.imported.model) == {"y": quantum}
    assert any("within one quantum" in line for line in result.lines)
    assert any("as ONNX defines it" in line for line in result.lines)
    # The definition is the reference: on CPUs without VNNI onnxruntime's fused kernels saturate int16 pair sums of
    # these full-range weights (2 quanta off on the AVX2 machine); with VNNI they equal it. byoc equals it on both.
    feed = random_inputs(plan.imported.inputs)
    got = byoc.build(plan).run(feed)[0]
    assert np.abs(got - _ort(model, feed, False)).max() <= quantum * 1.001


def test_a_dequantized_constant_that_a_dnnl_partition_returns():
    """Magika quantized by onnxruntime: a partition output is DQ of a constant (the JSON carries float constants
    only, so the runtime copies the one computed at build)."""
    node = onnx.helper.make_node
    inits = [numpy_helper.from_array(np.arange(-3, 3, dtype=np.int8).reshape(2, 3), "wq"),
             numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.int8(1), "zp")]
    graph = onnx.helper.make_graph(
        [node("DequantizeLinear", ["wq", "s", "zp"], ["w"], name="dq_w"), node("Add", ["x", "w"], ["y"], name="add")],
        "dq_out", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3]),
         onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2, 3])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a failed codegen falling back to the host warns
        plan = byoc.partition(model, vendors=["dnnl"])
        artifact = byoc.build(plan)
    assert {p.vendor for p in artifact.plan.partitions} == {"dnnl"} and not artifact.plan.host_ops
    x = np.ones((2, 3), np.float32)
    for got, want in zip(artifact.run({"x": x}), _ort_all(model, {"x": x})):
        np.testing.assert_array_equal(got, want)


def _ort_all(model: onnx.ModelProto, feed: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def test_a_dequantized_weight_whose_conv_is_no_unit_becomes_a_float_constant():
    """DQ(x), DQ(w), DQ(b) -> Conv -> Relu with a float output (Silero VAD's last encoder conv, once a simplifier
    folded its output's Q/DQ away): no unit can form, so the weight's DQ is computed into a float32 constant and
    the conv runs on dnnl with it, instead of DQ(w) as a partition of its own and the conv on the host."""
    from onnx import TensorProto, helper

    from byoc.pipeline.prepare import prepare

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.integers(-64, 64, (8, 3, 3, 3), dtype=np.int8), "w_q"),
             numpy_helper.from_array(np.float32(0.01), "w_scale"), numpy_helper.from_array(np.int8(0), "w_zp"),
             numpy_helper.from_array(rng.integers(-500, 500, (8,), dtype=np.int32), "b_q"),
             numpy_helper.from_array(np.float32(0.0002), "b_scale"), numpy_helper.from_array(np.int32(0), "b_zp"),
             numpy_helper.from_array(np.float32(0.02), "x_scale"), numpy_helper.from_array(np.uint8(128), "x_zp")]
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="x_q"),
             node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], name="x_dq"),
             node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], name="w_dq"),
             node("DequantizeLinear", ["b_q", "b_scale", "b_zp"], ["b"], name="b_dq"),
             node("Conv", ["xd", "w", "b"], ["c"], pads=[1] * 4, name="conv"),
             node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    prepared = prepare(model)
    assert {n.op_type for n in prepared.model.graph.node} == {"QuantizeLinear", "DequantizeLinear", "Conv", "Relu"}
    assert [n.name for n in prepared.model.graph.node if n.op_type == "DequantizeLinear"] == ["x_dq"]
    assert prepared.fate["w_dq"] == prepared.fate["b_dq"] == "folded into a constant"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert not artifact.plan.host_ops and len(artifact.plan.partitions) == 1
    feed = {"x": np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(artifact.run(feed)[0], _ort(model, feed, integer_kernels=False), rtol=1e-5, atol=1e-5)


def test_grouped_convs_run_in_float_on_dnnl_never_on_the_reference_kernel():
    """oneDNN's int8 kernels on AVX2 take 4 channels per group at a time; with 6 they fall back to the reference
    kernel (ShuffleNet int8: 10 ms per conv). The grouped unit runs as its definition in float32 instead."""
    executed = _executed("grouped_cnn", True)
    assert not [x for x in executed if ",ref:" in x], executed
    convs = [x for x in executed if ",convolution," in x]
    assert len(convs) == 4 and sum("src_f32" in x and "wei_f32" in x for x in convs) == 1, convs  # the fc too


def test_a_conv_of_one_input_channel_runs_in_float_on_dnnl():
    """Silero VAD's 256-tap filter bank reads the raw signal, one channel: oneDNN's int8 kernels take input channels
    4 at a time and ran it at 4x the float32 definition's time. conv1d_net's filter bank runs in float32 (with
    weights within +-64 it would otherwise be int8 on every CPU); its other convs stay int8."""
    executed = _executed("conv1d_net", True, shape=(1, 1, 136))
    convs = [x for x in executed if ",convolution," in x]
    bank = [x for x in convs if "_ic1oc16_" in x]
    assert len(bank) == 1 and "src_f32" in bank[0] and "wei_f32" in bank[0], convs
    assert sum("src_u8" in x for x in convs) >= 2, convs


@pytest.mark.parametrize("reduce_range", [True, False], ids=["7-bit", "full-range"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("rank", [3, 4], ids=["conv1d", "conv2d-w1"])
def test_stride_1_unpadded_int8_conv1d_runs_as_windows_and_one_matmul(rank, per_channel, reduce_range):
    """oneDNN's int8 direct conv ran Magika's 5-tap conv at 40% of its int8 matmul's rate: byoc copies the
    windows (contiguous in NWC) as the rows of a matrix and runs one int8 matmul. Where the CPU has VNNI (the
    full-range weights' int8 path), oneDNN's log shows matmuls and no convolution. The output is within one
    quantum of onnxruntime's definition on every ISA class (here, and with oneDNN capped at AVX2 where the CPU
    has VNNI), and of onnxruntime's int8 kernels where those compute the definition."""
    model = quantize(windowed_conv(rank), "QDQ", per_channel, reduce_range=reduce_range)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops
    shape = (1, 16, 40, 1) if rank == 4 else (1, 16, 40)
    _within_one_quantum(model, artifact, shape, int8_reference=_ort_int8_is_a_reference(reduce_range))
    for isa in ISA_CAPS[1:]:  # the AVX2 machine's path, where this one has VNNI
        for seed, got in zip((5, 6), _under_isa(isa, model, (5, 6), shape)):
            want = _ort(model, _feed(seed, shape), integer_kernels=False)
            assert np.abs(got - want).max() <= 1.001 * output_scale(model), (isa, np.abs(got - want).max())
    if reduce_range or CPU_HAS_VNNI:
        executed = _executed("windowed_conv", reduce_range, shape=shape, args=(rank,), per_channel=per_channel)
        assert not [x for x in executed if ",convolution," in x], executed
        assert len([x for x in executed if ",matmul," in x and "src_u8" in x and "wei_s8" in x]) == 2, executed


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_conv_transpose_unit_goes_to_dnnl_whole(per_channel):
    """DQ(x), DQ(w), DQ(b) -> ConvTranspose -> Q is one dnnl unit (PP-OCR det int8 kept its ConvTranspose on the
    host, in 5 partitions); it runs as its definition on the float32 deconvolution."""
    model = quantize(deconv_net(), "QDQ", per_channel, reduce_range=per_channel)
    assert "ConvTranspose" in {n.op_type for n in model.graph.node}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert len(artifact.plan.partitions) == 1
    rules = {d.rule for d in artifact.plan.decisions.values() if d.node is not None and d.node.name == "upsample"}
    assert rules == {"dnnl.qconv2d_transpose"}, rules
    _within_one_quantum(model, artifact, (1, 3, 16, 16))


def test_a_quantized_constant_computation_is_folded_not_offloaded():
    """YOLOv8 quantized by onnxruntime (NudeNet): its anchor grid is computed from constants alone, through
    DQ(c) + constant -> Q -> DQ -> Reshape -> Expand. Held back from folding as if DQ(c) were a unit's weight,
    the grid was six dnnl partitions recomputed on every call, with its Expands on the host between them. Its
    integer constant is left to be folded (by Relax's FoldConstant: onnxsim folds no Q/DQ), rounding half to even
    as ONNX does; a DQ that runtime data reads is still held (a unit's)."""
    from onnx import TensorProto, helper

    from byoc.pipeline.qdq_form import held_integer_constants

    inits = [numpy_helper.from_array(np.array([1, 2, 3, 4], np.uint8), "c_q"),
             numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(0), "zp"),
             numpy_helper.from_array(np.array([0.5, 0, 1.5, 3], np.float32), "offsets"),  # ties: 0.5, 1.5, 2.5
             numpy_helper.from_array(np.float32(2), "s_grid"),
             numpy_helper.from_array(np.array([4, 1], np.int64), "column"),
             numpy_helper.from_array(np.array([4, 4], np.int64), "square"),
             numpy_helper.from_array(np.array([3, 1, 2, 2], np.int8), "k_q")]
    node = helper.make_node
    nodes = [node("DequantizeLinear", ["c_q", "s", "zp"], ["c"], name="c_dq"),
             node("Add", ["c", "offsets"], ["grid"], name="grid_add"),
             node("QuantizeLinear", ["grid", "s_grid", "zp"], ["grid_q"], name="grid_q"),
             node("DequantizeLinear", ["grid_q", "s_grid", "zp"], ["grid_dq"], name="grid_dq"),
             node("Reshape", ["grid_dq", "column"], ["col"], name="reshape"),
             node("Expand", ["col", "square"], ["anchors"], name="expand"),
             node("DequantizeLinear", ["k_q", "s"], ["k"], name="k_dq"),
             node("Mul", ["x", "k"], ["xk"], name="scale_x"),
             node("Add", ["xk", "anchors"], ["y"], name="boxes")]
    graph = helper.make_graph(nodes, "anchors", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert set(held_integer_constants(model)[1]) == {"k_q"}
    artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops
    assert {d.node.name for d in artifact.plan.decisions.values()} == {"scale_x", "boxes"}
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(artifact.run({"x": x})[0], _ort(model, {"x": x}, integer_kernels=False))

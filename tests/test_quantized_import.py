"""Quantized models through import and prepare: QDQ and QOperator models end to end on every vendor set,
QOperator nodes rewritten into QDQ units, integer constants rewritten or folded, and the errors that name
the node a model cannot be taken at.

Models and references as tests/quantized_helpers.py describes: within one quantum of onnxruntime's output,
with its int8 kernels and as ONNX defines each op.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import byoc
from byoc.errors import InvalidModelError
from byoc.pipeline.frontend.prepare.qoperators import QuantizationError, rewrite_qoperators
from quantized_helpers import FORMATS, _feed, _ort, quantized  # noqa: F401 - quantized: a fixture
from quantized_models import gemm_classifier, output_scale, quantize, residual_cnn


VENDOR_SETS = [[], ["c_source"], ["dnnl", "c_source"]]  # dnnl is installed wherever the tests run (.ci/run)


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
    from byoc.pipeline.frontend.prepare.qdq_form import untransposed_gemm_weights

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


def test_a_dequantized_weight_whose_conv_is_no_unit_becomes_a_float_constant():
    """DQ(x), DQ(w), DQ(b) -> Conv -> Relu with a float output (Silero VAD's last encoder conv, once a simplifier
    folded its output's Q/DQ away): no unit can form, so the weight's DQ is computed into a float32 constant and
    the conv runs on dnnl with it, instead of DQ(w) as a partition of its own and the conv on the host."""
    from onnx import TensorProto, helper

    from byoc.pipeline.frontend.prepare import prepare

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


def test_a_quantized_constant_computation_is_folded_not_offloaded():
    """YOLOv8 quantized by onnxruntime (NudeNet): its anchor grid is computed from constants alone, through
    DQ(c) + constant -> Q -> DQ -> Reshape -> Expand. Held back from folding as if DQ(c) were a unit's weight,
    the grid was six dnnl partitions recomputed on every call, with its Expands on the host between them. Its
    integer constant is left to be folded (by Relax's FoldConstant: onnxsim folds no Q/DQ), rounding half to even
    as ONNX does; a DQ that runtime data reads is still held (a unit's)."""
    from onnx import TensorProto, helper

    from byoc.pipeline.frontend.prepare.qdq_form import held_integer_constants

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


def test_an_embedding_lookup_gathers_8_bit_rows_then_dequantizes_them():
    """quantize_static's embedding, Gather(DQ(table), ids), is Gather then DQ of the rows: the same values, without
    dequantizing the whole table on every call (GPT-2's token embedding was a partition of its own)."""
    from onnx import TensorProto, helper

    from byoc.pipeline.frontend.prepare import prepare
    from models import onnxruntime_outputs

    r = np.random.default_rng(5)
    table = r.integers(-128, 128, (50, 16)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["table", "s", "zp"], ["table_f"], name="dq_table"),
             helper.make_node("Gather", ["table_f", "ids"], ["rows"], name="embed"),
             helper.make_node("Relu", ["rows"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 7, 16])],
                              [numpy_helper.from_array(table, "table"),
                               numpy_helper.from_array(np.array(0.02, np.float32), "s"),
                               numpy_helper.from_array(np.array(3, np.int8), "zp")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    prepared = prepare(m)
    gathers = [n for n in prepared.model.graph.node if n.op_type == "Gather"]
    assert [n.input[0] for n in gathers] == ["table"]  # the int8 table itself, no float copy of it
    assert prepared.origin[gathers[0].name] == "embed"
    artifact = byoc.compile(m, vendors=["dnnl"])
    for batch in (1, 3):
        ids = r.integers(0, 50, (batch, 7)).astype(np.int64)
        np.testing.assert_array_equal(artifact.run({"ids": ids})[0], onnxruntime_outputs(m, {"ids": ids})[0])

"""Quantized models' int8 units offered to vendors: every unit goes to an int8 vendor, a vendor sees integer
tensors with their scales and zero points, folded activations narrow the output range, Q/DQ round and
saturate as ONNX does, an element-wise unit with a scalar keeps its operand order, a unit no vendor takes
stays on the host with its reason, and the report and verify speak of units and quanta.

Models and references as tests/quantized_helpers.py describes: within one quantum of onnxruntime's output,
with its int8 kernels and as ONNX defines each op.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import byoc
from quantized_helpers import FORMATS, _feed, _ort, _within_one_quantum, quantized  # noqa: F401 - quantized: a fixture
from quantized_models import (conv1d_net, depthwise_cnn, gemm_classifier, grouped_cnn, output_scale, quantize,
                              residual_cnn, transformer_mlp)


# -- int8 units offered to vendors -----------------------------------------------------------------

MODELS = {"residual": (residual_cnn, (1, 3, 16, 16)), "depthwise": (depthwise_cnn, (1, 3, 32, 32)),
          "mlp": (transformer_mlp, (1, 8, 16)), "conv1d": (conv1d_net, (1, 1, 136)),
          "gemm": (gemm_classifier, (1, 3, 16, 16)), "grouped": (grouped_cnn, (1, 3, 16, 16))}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


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

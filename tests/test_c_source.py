"""The reference vendors: every op and pattern against onnxruntime, and every rejection.

Op and pattern tests run for both reference codegens (c_source and json_runtime
share their rules), and for dnnl where its rules have the same names
(``any_vendor``); dnnl's own cases are in test_dnnl.py. Rejection tests check
the c_source reasons.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.pipeline.frontend import ImportedModel, TensorSpec

from models import const, model, onnxruntime_outputs, random_inputs, rng, single_op, tensor

RTOL, ATOL = 1e-4, 1e-5


def _f(*shape, seed=3):
    return rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture(params=["c_source", "json_runtime"])
def vendor(request):
    return request.param


@pytest.fixture(params=["c_source", "json_runtime", "dnnl"])
def any_vendor(request):
    return request.param


def _check_offloaded(m, expect_rules=None, vendor="c_source", **kwargs):
    """Compile, assert every op went to ``vendor`` by the expected rules, and compare with onnxruntime.

    ``expect_rules`` are rule names without the vendor prefix.
    """
    artifact = byoc.compile(m, vendors=[vendor], **kwargs)
    plan = artifact.plan
    assert plan.host_ops == [], [(d.op, d.reasons) for d in plan.host_ops]
    assert all(p.vendor == vendor for p in plan.partitions)
    if expect_rules is not None:
        assert {f"{vendor}.{r}" for r in expect_rules} <= {d.rule for d in plan.decisions.values()}
    inputs = random_inputs(m)
    got = artifact.run(inputs)
    want = onnxruntime_outputs(m, inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return plan


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a,b,out", [([2, 3, 4], [3, 1], [2, 3, 4]), ([1, 4], [3, 1], [3, 4]), ([5], [5], [5])])
def test_binary_broadcasting(op, a, b, out, vendor):
    m = single_op(op, {"a": a, "b": b}, out)
    if op == "Div":
        m = single_op(op, {"a": a}, out, initializers=[const("b", np.abs(_f(*b)) + 0.5)])
    _check_offloaded(m, [{"Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide"}[op]], vendor)


@pytest.mark.parametrize("op,rule", [("Relu", "relu"), ("Sigmoid", "sigmoid"), ("Tanh", "tanh")])
def test_unary(op, rule, any_vendor):
    _check_offloaded(single_op(op, {"x": [2, 3, 5]}, [2, 3, 5]), [rule], any_vendor)


@pytest.mark.parametrize("bounds", [(-0.5, 0.7), (0.0, None), (None, 0.25)])
def test_clip(bounds, any_vendor):
    low, high = bounds
    inits, names = [], ["x"]
    names.append("lo" if low is not None else "")
    names.append("hi" if high is not None else "")
    if low is not None:
        inits.append(const("lo", np.array(low, np.float32)))
    if high is not None:
        inits.append(const("hi", np.array(high, np.float32)))
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("Clip", names, ["y"], name="clip")
    m = model([node], [tensor("x", [3, 4])], [tensor("y", [3, 4])], inits)
    _check_offloaded(m, ["clip"], any_vendor)


def test_clip_opset6_attributes(any_vendor):
    node = helper.make_node("Clip", ["x"], ["y"], name="clip", min=-0.2, max=0.3)
    m = model([node], [tensor("x", [3, 4])], [tensor("y", [3, 4])], opset=6)
    _check_offloaded(m, ["clip"], any_vendor)


@pytest.mark.parametrize("a,b,out", [([3, 4], [4, 5], [3, 5]), ([2, 3, 4], [4, 5], [2, 3, 5]),
                                     ([2, 1, 3, 4], [3, 4, 5], [2, 3, 3, 5]), ([4], [4, 5], [5])])
def test_matmul(a, b, out, vendor):
    _check_offloaded(single_op("MatMul", {"a": a, "b": b}, out), ["matmul"], vendor)


@pytest.mark.parametrize("attrs", [{}, {"transB": 1}, {"alpha": 0.5, "beta": 2.0}, {"transA": 1}])
def test_gemm_with_bias(attrs, vendor):
    a_shape = [6, 3] if attrs.get("transA") else [3, 6]
    w = _f(5, 6) if attrs.get("transB") else _f(6, 5)
    m = single_op("Gemm", {"a": a_shape}, [3, 5], attrs, [const("w", w), const("c", _f(5))])
    _check_offloaded(m, ["matmul_bias"], vendor)


@pytest.mark.parametrize("attrs,w_shape,x_shape", [
    ({"pads": [1, 1, 1, 1]}, [4, 3, 3, 3], [1, 3, 8, 8]),
    ({"strides": [2, 2], "pads": [1, 0, 2, 1]}, [4, 3, 3, 3], [2, 3, 9, 7]),
    ({"dilations": [2, 2], "pads": [2, 2, 2, 2]}, [4, 3, 3, 3], [1, 3, 8, 8]),
    ({"group": 2}, [6, 2, 3, 3], [1, 4, 7, 7]),
    ({"group": 4, "pads": [1, 1, 1, 1]}, [4, 1, 3, 3], [1, 4, 6, 6]),  # depthwise
])
def test_conv2d_bias(attrs, w_shape, x_shape, any_vendor):
    m = model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)],
              [tensor("x", x_shape)], [tensor("y", _conv_out(x_shape, w_shape, attrs))],
              [const("w", _f(*w_shape)), const("b", _f(w_shape[0]))])
    _check_offloaded(m, ["conv2d_bias"], any_vendor)


def _conv_out(x_shape, w_shape, attrs):
    import onnx
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    g = helper.make_graph([node], "s", [tensor("x", x_shape), tensor("w", w_shape)], [helper.make_tensor_value_info("y", 1, None)])
    inferred = onnx.shape_inference.infer_shapes(helper.make_model(g, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]))
    return [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]


@pytest.mark.parametrize("bias,rule", [(True, "conv2d_bias_relu"), (False, "conv2d_relu")])
def test_conv_relu_patterns(bias, rule, any_vendor):
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    inits = [const("w", _f(4, 3, 3, 3)), const("b", _f(4))][: len(inputs) - 1]
    m = model([helper.make_node("Conv", inputs, ["c"], name="conv", pads=[1, 1, 1, 1]),
               helper.make_node("Relu", ["c"], ["y"], name="relu")],
              [tensor("x", [1, 3, 5, 5])], [tensor("y", [1, 4, 5, 5])], inits)
    plan = _check_offloaded(m, [rule], any_vendor)
    assert {d.rule for d in plan.decisions.values()} == {f"{any_vendor}.{rule}"}


def test_conv_without_bias(any_vendor):
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
              [tensor("x", [1, 3, 5, 5])], [tensor("y", [1, 2, 3, 3])], [const("w", _f(2, 3, 3, 3))])
    _check_offloaded(m, ["conv2d"], any_vendor)


@pytest.mark.parametrize("attrs,out", [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 2, 3, 3]),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [1, 2, 7, 7]),
    ({"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, [1, 2, 4, 4]),
    ({"kernel_shape": [2, 2], "dilations": [2, 2]}, [1, 2, 5, 5]),
])
def test_max_pool(attrs, out, any_vendor):
    _check_offloaded(single_op("MaxPool", {"x": [1, 2, 7, 7]}, out, attrs), ["max_pool2d"], any_vendor)


@pytest.mark.parametrize("attrs,out", [
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 2, 3, 3]),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}, [1, 2, 7, 7]),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}, [1, 2, 7, 7]),
])
def test_avg_pool(attrs, out, any_vendor):
    _check_offloaded(single_op("AveragePool", {"x": [1, 2, 7, 7]}, out, attrs), ["avg_pool2d"], any_vendor)


def test_global_average_pool(any_vendor):
    _check_offloaded(single_op("GlobalAveragePool", {"x": [2, 3, 5, 4]}, [2, 3, 1, 1]), ["mean"], any_vendor)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax(axis, any_vendor):
    _check_offloaded(single_op("Softmax", {"x": [2, 3, 4]}, [2, 3, 4], {"axis": axis}), ["softmax"], any_vendor)


def test_reshape_and_flatten(any_vendor):
    m = model([helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
               helper.make_node("Relu", ["r"], ["r2"], name="relu"),
               helper.make_node("Flatten", ["r2"], ["y"], name="flatten", axis=2)],
              [tensor("x", [2, 12])], [tensor("y", [6, 4])], [const("shape", np.array([3, 2, 4], np.int64))])
    _check_offloaded(m, ["reshape"], any_vendor)


def test_concat_three_inputs(vendor):
    node = helper.make_node("Concat", ["a", "b", "c"], ["y"], name="concat", axis=1)
    m = model([node], [tensor("a", [2, 1, 3]), tensor("b", [2, 4, 3]), tensor("c", [2, 2, 3])], [tensor("y", [2, 7, 3])])
    _check_offloaded(m, ["concat"], vendor)


@pytest.mark.parametrize("perm,out", [(None, [4, 3, 2]), ([1, 2, 0], [3, 4, 2])])
def test_transpose(perm, out, any_vendor):
    attrs = {} if perm is None else {"perm": perm}
    _check_offloaded(single_op("Transpose", {"x": [2, 3, 4]}, out, attrs), ["transpose"], any_vendor)


def test_partition_with_several_inputs_and_outputs(any_vendor):
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y1"], name="relu"),
             helper.make_node("Mul", ["s", "c"], ["y2"], name="mul")]
    m = model(nodes, [tensor("a", [3, 4]), tensor("b", [3, 4]), tensor("c", [4])],
              [tensor("y1", [3, 4]), tensor("y2", [3, 4])])
    plan = _check_offloaded(m, vendor=any_vendor)
    assert len(plan.partitions) == 1
    part = plan.partitions[0]
    assert len(part.inputs) == 3 and len(part.outputs) == 2


def test_generated_c_has_no_model_names():
    node = helper.make_node("Relu", ["x*/ #include"], ["y"], name='evil"*/\n#include <x>')
    m = model([node], [tensor("x*/ #include", [2, 2])], [tensor("y", [2, 2])])
    plan = byoc.partition(m, ["c_source"])
    from byoc.vendor.graph import partition_graph
    vendor = byoc.get_vendor("c_source")
    source = vendor.codegen.source([partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions])
    assert "evil" not in source and "x*/" not in source
    _check_offloaded(m)


# -- rejections: every check declines with a reason, and the model still matches -------
def _host_reason(m, op):
    artifact = byoc.compile(m, vendors=["c_source"])
    inputs = random_inputs(m)
    for g, w in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return [d.reasons["c_source"] for d in artifact.plan.host_ops if d.op == op]


def test_rejects_float64():
    import onnx
    node = helper.make_node("Add", ["a", "b"], ["y"], name="add64")
    m = model([node], [tensor("a", [2, 2], onnx.TensorProto.DOUBLE), tensor("b", [2, 2], onnx.TensorProto.DOUBLE)],
              [tensor("y", [2, 2], onnx.TensorProto.DOUBLE)])
    plan = byoc.partition(m, ["c_source"])
    assert [d.reasons["c_source"] for d in plan.host_ops] == ["dtype float64 not supported (float32 only)"]
    a = rng(0).standard_normal((2, 2))
    art = byoc.build(plan)
    np.testing.assert_allclose(art.run({"a": a, "b": a})[0], onnxruntime_outputs(m, {"a": a, "b": a})[0])


def test_rejects_rank_above_8():
    shape = [1, 2, 1, 2, 1, 2, 1, 2, 2]
    assert _host_reason(single_op("Relu", {"x": shape}, shape), "relax.nn.relu") == ["rank 9 > 8 not supported"]


def test_rejects_avg_pool_ceil_mode():
    m = single_op("AveragePool", {"x": [1, 2, 7, 7]}, [1, 2, 4, 4], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1})
    assert _host_reason(m, "relax.nn.avg_pool2d") == ["ceil_mode=1 not supported for average pooling"]


def test_rejects_unsupported_op_with_no_rule():
    m = single_op("Exp", {"x": [2, 3]}, [2, 3])
    assert _host_reason(m, "relax.exp") == ["no c_source rule for relax.exp"]


def test_rejects_bias_that_is_not_per_channel():
    """conv + add(const of shape (W,)) is not a conv bias: the pattern declines, ops go alone."""
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node("Add", ["c", "b"], ["y"], name="add")],
              [tensor("x", [1, 3, 5, 5])], [tensor("y", [1, 2, 3, 3])],
              [const("w", _f(2, 3, 3, 3)), const("b", _f(3))])
    plan = _check_offloaded(m, ["conv2d", "add"])
    conv = next(d for d in plan.decisions.values() if d.op == "relax.nn.conv2d")
    assert ("c_source.conv2d_bias", "bias shape (3,) is not per-channel (1, 2, 1, 1)") in conv.rejections


def test_rejects_pattern_whose_intermediate_escapes():
    """conv's raw output is also a model output, so conv+relu cannot be fused."""
    m = model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
               helper.make_node("Relu", ["c"], ["y"], name="relu")],
              [tensor("x", [1, 3, 5, 5])], [tensor("y", [1, 2, 3, 3]), tensor("c", [1, 2, 3, 3])],
              [const("w", _f(2, 3, 3, 3))])
    plan = _check_offloaded(m, ["conv2d", "relu"])
    conv = next(d for d in plan.decisions.values() if d.op == "relax.nn.conv2d")
    assert any("also" in reason for rule, reason in conv.rejections if rule == "c_source.conv2d_relu")


def _relax_only(build):
    """An ImportedModel around a hand-built Relax module (for layouts ONNX cannot express)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 6, 6, 4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(build(x)))
        bb.emit_func_output(out)
    mod = bb.get()
    out_ty = mod["main"].ret_ty
    return ImportedModel(mod, None, [TensorSpec("x", (1, 6, 6, 4), "float32")],
                         [TensorSpec("y", tuple(int(d) for d in out_ty.shape.values), "float32")])


def test_rejects_nhwc_conv_and_pool():
    from tvm import relax

    w = relax.const(_f(4, 3, 3, 4))
    conv = _relax_only(lambda x: relax.op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="OHWI"))
    pool = _relax_only(lambda x: relax.op.nn.max_pool2d(x, (2, 2), layout="NHWC"))
    assert [d.reasons["c_source"] for d in byoc.annotate(conv, ["c_source"]).decisions.values()] == \
        ["layout NHWC/OHWI not supported (NCHW/OIHW only)"]
    assert [d.reasons["c_source"] for d in byoc.annotate(pool, ["c_source"]).decisions.values()] == \
        ["layout NHWC not supported (NCHW only)"]


def test_rejects_avg_pool_dilation():
    from tvm import relax

    imported = _relax_only(lambda x: relax.op.nn.avg_pool2d(x, (2, 2), dilation=(2, 2)))
    decision, = byoc.annotate(imported, ["c_source"]).decisions.values()
    assert decision.reasons["c_source"] == "dilation (2, 2) not supported for average pooling"


def test_takes_symbolic_dims_and_reads_them_per_call():
    """A symbolic dim is no reason to refuse: the C reads each call's dims from its arguments."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    artifact = byoc.compile(model, ["c_source"])
    assert [p.vendor for p in artifact.plan.partitions] == ["c_source"]
    session = ort.InferenceSession(model.SerializeToString())
    for rows in (1, 5, 2):
        x = np.linspace(-1, 1, rows * 4, dtype=np.float32).reshape(rows, 4)
        np.testing.assert_array_equal(artifact.run([x])[0], session.run(None, {"x": x})[0])


def test_the_vendor_guides_emitter_example_emits_what_the_host_computes():
    """The guide's "Emitters" block, run as written: its ReLU emitter, through the public Body, builds (strict)
    and computes what the host build does."""
    import re
    from pathlib import Path

    from byoc.vendor import OpRule, Vendor, always

    guide = (Path(__file__).resolve().parents[1] / "docs" / "vendor_guide.md").read_text()
    section = guide[guide.index("### Emitters"):]
    (code,) = re.findall(r"```python\n(.*?)```", section[:section.index("### The exported function")], re.S)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the guide's own example
    vendor = Vendor("guide_relu", (OpRule("guide_relu.relu", "relax.nn.relu", always),), namespace["AcmeCodegen"]())
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2, 5])], [tensor("y", [2, 5])])
    artifact = byoc.compile(m, [vendor], strict=True)
    assert [p.vendor for p in artifact.plan.partitions] == ["guide_relu"]
    x = rng().standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_array_equal(artifact.run({"x": x})[0], onnxruntime_outputs(m, {"x": x})[0])

"""Ops whose shape-deciding input is given when the model runs (byoc/pipeline/frontend/run_time_values.py).

One artifact per model, built with a symbolic batch, runs every value of the axes, shape, sizes or k, and
matches onnxruntime on each; a value the data does not allow is a typed error, as onnxruntime refuses it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from models import onnxruntime_outputs

VENDORS = ["dnnl", "c_source"]


def _model(op: str, attrs: dict, value_length: int, outputs: list[tuple[str, int, int]], opset: int = 18,
           dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``op(x, v)`` with x of shape (batch, 3, 4) and v an int64 input of ``value_length``; each output is
    (name, element type, rank), its dims unnamed."""
    inputs = [helper.make_tensor_value_info("x", dtype, ["batch", 3, 4]),
              helper.make_tensor_value_info("v", TensorProto.INT64, [value_length])]
    outs = [helper.make_tensor_value_info(name, elem, [None] * rank) for name, elem, rank in outputs]
    node = helper.make_node(op, ["x", "v"], [name for name, _, _ in outputs], name="node", **attrs)
    return helper.make_model(helper.make_graph([node], "g", inputs, outs),
                             opset_imports=[helper.make_opsetid("", opset)])


def _x(batch: int = 2, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(dtype)


def _matches(model: onnx.ModelProto, artifact, x: np.ndarray, value) -> None:
    v = np.array(value, np.int64)
    expected = onnxruntime_outputs(model, {"x": x, "v": v})
    got = artifact.run([x, v])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape, (value, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=str(value))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_a_reduction_over_axes_given_at_run_time_matches_onnxruntime_for_every_axes_value(op, keepdims):
    for count, values in ((1, [[0], [1], [-1], [2]]), (2, [[0, 2], [-1, 1], [2, 0]])):
        model = _model(op, {"keepdims": keepdims}, count, [("y", TensorProto.FLOAT, 3 if keepdims else 3 - count)])
        artifact = byoc.compile(model, vendors=["dnnl"])  # c_source takes no reduction
        for batch in (1, 3):
            for axes in values:
                _matches(model, artifact, _x(batch), axes)


def test_no_axes_at_run_time_reduces_every_dim_or_none_with_noop():
    every = _model("ReduceSum", {"keepdims": 1}, 0, [("y", TensorProto.FLOAT, 3)], opset=13)
    _matches(every, byoc.compile(every, vendors=VENDORS), _x(), [])
    none = _model("ReduceSum", {"keepdims": 1, "noop_with_empty_axes": 1}, 0, [("y", TensorProto.FLOAT, 3)], opset=13)
    _matches(none, byoc.compile(none, vendors=VENDORS), _x(), [])


def test_a_max_over_an_empty_dim_is_minus_infinity_as_onnx_defines_it():
    model = _model("ReduceMax", {"keepdims": 1}, 1, [("y", TensorProto.FLOAT, 3)])
    artifact = byoc.compile(model, vendors=VENDORS, dims={"batch": (0, 4)})
    _matches(model, artifact, np.zeros((0, 3, 4), np.float32), [0])
    _matches(model, artifact, _x(), [0])


@pytest.mark.parametrize("axes", [[3], [-4], [1, 1]], ids=["past-the-rank", "before-it", "twice"])
def test_axes_out_of_range_or_named_twice_are_an_input_error(axes):
    model = _model("ReduceSum", {"keepdims": 0}, len(axes), [("y", TensorProto.FLOAT, 3 - len(axes))])
    artifact = byoc.compile(model, vendors=VENDORS)
    with pytest.raises(byoc.InputShapeError, match="reduction axes"):
        artifact.run([_x(), np.array(axes, np.int64)])


@pytest.mark.parametrize("allowzero", [0, 1])
def test_a_reshape_to_a_shape_given_at_run_time_matches_onnxruntime(allowzero):
    model = _model("Reshape", {"allowzero": allowzero}, 3, [("y", TensorProto.FLOAT, 3)], opset=14)
    artifact = byoc.compile(model, vendors=VENDORS)
    shapes = [[4, 3, -1], [-1, 2, 2], [2, 12, 1]] + ([[0, 4, 3], [0, -1, 2]] if not allowzero else [])
    for shape in shapes:
        _matches(model, artifact, _x(2), shape)


def test_a_reshape_to_another_element_count_is_an_input_error():
    model = _model("Reshape", {}, 2, [("y", TensorProto.FLOAT, 2)], opset=14)
    artifact = byoc.compile(model, vendors=VENDORS)
    with pytest.raises(byoc.InputShapeError, match="Reshape's shape"):
        artifact.run([_x(2), np.array([5, 5], np.int64)])


def test_a_split_at_sizes_given_at_run_time_matches_onnxruntime_and_refuses_sizes_that_miss_the_axis():
    model = _model("Split", {"axis": 2}, 3, [(f"y{i}", TensorProto.FLOAT, 3) for i in range(3)])
    artifact = byoc.compile(model, vendors=VENDORS)
    for sizes in ([1, 2, 1], [0, 4, 0], [2, 1, 1]):
        _matches(model, artifact, _x(2), sizes)
    for sizes in ([1, 1, 1], [5, -1, 0]):
        with pytest.raises(byoc.InputShapeError, match="Split sizes"):
            artifact.run([_x(2), np.array(sizes, np.int64)])


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_of_a_k_given_at_run_time_matches_onnxruntime_and_refuses_a_k_past_the_axis(largest):
    model = _model("TopK", {"axis": 2, "largest": largest}, 1,
                   [("values", TensorProto.FLOAT, 3), ("indices", TensorProto.INT64, 3)], opset=11)
    artifact = byoc.compile(model, vendors=VENDORS)
    for k in ([1], [3], [4], [0]):
        _matches(model, artifact, _x(2), k)
    with pytest.raises(byoc.InputShapeError, match="TopK k"):
        artifact.run([_x(2), np.array([5], np.int64)])


def test_a_constant_of_a_shape_given_at_run_time_matches_onnxruntime_for_every_shape():
    value = onnx.helper.make_tensor("value", TensorProto.INT32, [1], [7])
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="filled", value=value)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [None, None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    artifact = byoc.compile(model, vendors=VENDORS)
    for shape in ([2, 3, 4], [1, 5, 1], [0, 2, 3]):
        feeds = {"shape": np.array(shape, np.int64)}
        got, want = artifact.run(feeds)[0], onnxruntime_outputs(model, feeds)[0]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    with pytest.raises(byoc.InputShapeError, match="ConstantOfShape"):
        artifact.run({"shape": np.array([2, -1, 3], np.int64)})

"""CumSum and CumProd (byoc/pipeline/frontend/cumulative.py): the axis a constant or given at run time.

CumSum is checked against onnxruntime, CumProd (opset 26, which onnxruntime 1.32 does not run) against
onnx.reference. One artifact runs every axis value; an axis out of range is a typed error.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs

OPSET = {"CumSum": 14, "CumProd": 26}


def _model(op: str, exclusive: int, reverse: int, axis=None, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``op(x, axis)`` on x of shape (batch, 3, 4); the axis an int64 scalar input, or the constant ``axis``."""
    inputs = [helper.make_tensor_value_info("x", dtype, ["batch", 3, 4])]
    inits = []
    if axis is None:
        inputs.append(helper.make_tensor_value_info("axis", TensorProto.INT64, []))
    else:
        inits.append(onnx.numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    node = helper.make_node(op, ["x", "axis"], ["y"], name="cumulative", exclusive=exclusive, reverse=reverse)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", dtype, ["batch", 3, 4])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET[op])])


def _expected(op: str, model: onnx.ModelProto, feeds: dict) -> list:
    if op == "CumSum":
        return onnxruntime_outputs(model, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def _x(dtype=np.float32) -> np.ndarray:
    """Values whose products stay near 1 (a fifth of them negative), or small integers."""
    if dtype != np.float32:
        return (np.arange(24, dtype=dtype).reshape(2, 3, 4) % 4 + 1).astype(dtype)
    signs = np.where(np.arange(24) % 5 == 0, -1.0, 1.0).reshape(2, 3, 4)
    return (np.random.default_rng(0).uniform(0.5, 1.5, (2, 3, 4)) * signs).astype(dtype)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_an_axis_given_at_run_time_matches_for_every_value(op, exclusive, reverse):
    model = _model(op, exclusive, reverse)
    artifact = byoc.compile(model, vendors=["dnnl"])
    x = _x()
    for axis in range(-3, 3):
        feeds = {"x": x, "axis": np.array(axis, np.int64)}
        np.testing.assert_allclose(artifact.run(feeds)[0], _expected(op, model, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_an_axis_out_of_range_is_a_typed_error(op):
    artifact = byoc.compile(_model(op, 0, 0), vendors=["dnnl"])
    for axis in (3, -4):
        with pytest.raises(InputShapeError, match="axis out of range"):
            artifact.run({"x": _x(), "axis": np.array(axis, np.int64)})


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_cumprod_of_a_constant_axis_matches_the_reference(axis):
    model = _model("CumProd", 1, 1, axis=axis)
    feeds = {"x": _x()}
    np.testing.assert_allclose(byoc.compile(model, vendors=["dnnl"]).run(feeds)[0],
                               _expected("CumProd", model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_cumprod_of_integers_matches_the_reference():
    model = _model("CumProd", 0, 0, dtype=TensorProto.INT32)
    artifact = byoc.compile(model, vendors=[])
    for axis in (0, 1, -1):
        feeds = {"x": _x(np.int32), "axis": np.array(axis, np.int64)}
        np.testing.assert_array_equal(artifact.run(feeds)[0], _expected("CumProd", model, feeds)[0])


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
def test_a_vector_takes_axis_0_or_minus_1_only(op):
    node = helper.make_node(op, ["x", "axis"], ["y"], name="cumulative", reverse=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                                            helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET[op])])
    artifact = byoc.compile(model, vendors=["dnnl"])
    x = _x().reshape(-1)[:7]
    for axis in (0, -1):
        feeds = {"x": x, "axis": np.array(axis, np.int64)}
        np.testing.assert_allclose(artifact.run(feeds)[0], _expected(op, model, feeds)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(InputShapeError, match="axis out of range"):
        artifact.run({"x": x, "axis": np.array(1, np.int64)})

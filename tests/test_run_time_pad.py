"""Pad whose widths or axes are given at run time (byoc/pipeline/frontend/run_time_pad.py), against onnxruntime:
one artifact runs every width, each mode, negative widths crop; widths that crop past the input, or an axis out of
range or named twice, are typed errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs


def _model(mode: str, axes=None, axes_input: bool = False, value_input: bool = False) -> onnx.ModelProto:
    """Pad(x [2, 3, 5], pads, value, axes): the widths an int64 input; the axes a constant, an input or absent;
    the constant value an input or absent."""
    count = 2 * (len(axes) if axes is not None else 3)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5]),
              helper.make_tensor_value_info("pads", TensorProto.INT64, [count])]
    inits = []
    names = ["x", "pads", "value" if value_input else ""]
    if value_input:
        inputs.append(helper.make_tensor_value_info("value", TensorProto.FLOAT, []))
    if axes is not None:
        names.append("axes")
        if axes_input:
            inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
        else:
            inits.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    node = helper.make_node("Pad", names, ["y"], name="pad", mode=mode)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["y0", "y1", "y2"])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


X = np.arange(30, dtype=np.float32).reshape(2, 3, 5) - 7.5


def _check(model: onnx.ModelProto, feeds: dict, artifact=None):
    artifact = artifact or byoc.compile(model, vendors=["dnnl"])
    (got,) = artifact.run(feeds)
    (want,) = onnxruntime_outputs(model, feeds)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    return artifact


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_one_artifact_pads_by_every_width_given_at_run_time(mode):
    model = _model(mode)
    artifact = None
    for pads in ([0, 1, 2, 1, 0, 3], [1, 0, 0, 0, 2, 4], [0, 0, 0, 0, 0, 0], [0, 2, 1, 0, 2, 4]):
        artifact = _check(model, {"x": X, "pads": np.array(pads, np.int64)}, artifact)


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_negative_widths_crop(mode):
    _check(_model(mode), {"x": X, "pads": np.array([0, -1, -2, -1, 1, 1], np.int64)})


def test_a_constant_value_given_at_run_time():
    _check(_model("constant", value_input=True), {"x": X, "pads": np.array([1, 0, 2, 0, 1, 1], np.int64),
                                                    "value": np.array(-3.5, np.float32)})


@pytest.mark.parametrize("axes_input", [False, True])
def test_widths_for_some_axes_constant_or_given_at_run_time(axes_input):
    model = _model("edge", axes=[2, -2], axes_input=axes_input)
    feeds = {"x": X, "pads": np.array([1, 2, 3, 0], np.int64)}
    if axes_input:
        feeds["axes"] = np.array([2, -2], np.int64)
    artifact = _check(model, feeds)
    if axes_input:  # another choice of axes, the same artifact
        _check(model, {**feeds, "axes": np.array([0, 1], np.int64)}, artifact)


@pytest.mark.parametrize("pads,axes,what", [
    ([0, 0, -3, 0, 0, -3], None, "a crop past the input's extent"),
    ([0, -1, 0, 0, 0, 0], None, "a crop in wrap mode"),
    ([1, 1, 1, 1], [0, 3], "an axis out of range"),
    ([1, 1, 1, 1], [1, -2], "an axis named twice"),
])
def test_widths_or_axes_that_make_no_tensor_are_typed_errors(pads, axes, what):
    model = _model("wrap" if "wrap" in what else "constant", axes=axes, axes_input=axes is not None)
    artifact = byoc.compile(model, vendors=["dnnl"])
    feeds = {"x": X, "pads": np.array(pads, np.int64)}
    if axes is not None:
        feeds["axes"] = np.array(axes, np.int64)
    with pytest.raises(InputShapeError):
        artifact.run(feeds)

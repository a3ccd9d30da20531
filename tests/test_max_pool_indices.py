"""MaxPool's second output, its Indices (byoc/pipeline/frontend/max_pool_indices.py), against onnxruntime: 1-D,
2-D and 3-D windows with pads, strides and dilations, row- and column-major indices, equal maxima in a window."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from models import onnxruntime_outputs


def _model(x_shape, **attrs) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool", **attrs)
    rank = len(x_shape)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{d}" for d in range(rank)]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [f"i{d}" for d in range(rank)])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


CASES = [
    ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    ((1, 2, 6, 7), {"kernel_shape": [2, 3], "strides": [2, 2]}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "storage_order": 1}),
    ((1, 2, 7, 7), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2]}),
]


@pytest.mark.parametrize("shape,attrs", CASES, ids=["1d", "2d-strides", "2d-pads-column-major", "2d-dilations", "3d"])
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_indices_match_onnxruntime(shape, attrs, ties):
    """With ties (values rounded to a few levels) a window holds equal maxima: the first in row-major order wins."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    if ties:
        x = np.round(x)
    model = _model(shape, **attrs)
    got = byoc.compile(model, vendors=["dnnl"]).run({"x": x})
    for g, want in zip(got, onnxruntime_outputs(model, {"x": x})):
        assert g.shape == want.shape and g.dtype == want.dtype
        np.testing.assert_array_equal(g, want)

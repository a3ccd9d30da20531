"""Pow of a base and an exponent of other types, and of integers (byoc/pipeline/frontend/pow_types.py), against
onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import byoc
from models import onnxruntime_outputs

_TYPES = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32, "int64": TensorProto.INT64}


@pytest.mark.parametrize("base,exponent", [("float32", "int32"), ("float32", "int64"), ("int32", "float32"),
                                           ("int64", "float32"), ("int32", "int32"), ("int64", "int64")])
def test_pow_of_other_types_matches_onnxruntime(base, exponent):
    node = helper.make_node("Pow", ["x", "y"], ["z"], name="pow")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", _TYPES[base], ["n"]),
                                            helper.make_tensor_value_info("y", _TYPES[exponent], ["n"])],
                              [helper.make_tensor_value_info("z", _TYPES[base], ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    x = np.array([2, -3, 5, 7, 0, 1, -2, 10], dtype=base)
    if exponent == "float32":  # fractional and negative powers of integers: onnxruntime truncates toward zero
        y = np.array([3, 2, 0.5, -1, 2, 1.5, 3, 0.3], dtype=exponent)
    else:
        y = np.array([3, 2, 4, 0, 2, 9, 5, 3], dtype=exponent)
    feeds = {"x": x, "y": y}
    got = byoc.compile(model, vendors=["dnnl"]).run(feeds)[0]
    want = onnxruntime_outputs(model, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)

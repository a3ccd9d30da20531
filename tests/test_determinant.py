"""Det (byoc/pipeline/frontend/determinant.py), which TVM's importer lacks, against onnxruntime: square matrices of
order 1 to 5, batched; a larger or symbolic order is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import UnsupportedAttributeError
from models import onnxruntime_outputs


def _model(shape) -> onnx.ModelProto:
    node = helper.make_node("Det", ["x"], ["y"], name="det")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape[:-2]))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3, 3), (2, 2, 4, 4), (5, 5)])
def test_determinants_match_onnxruntime(shape):
    x = np.random.default_rng(shape[-1]).standard_normal(shape).astype(np.float32)
    model = _model(shape)
    (got,) = byoc.compile(model, vendors=["dnnl"]).run({"x": x})
    (want,) = onnxruntime_outputs(model, {"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 6), (2, "n", "n")])
def test_a_determinant_of_a_larger_or_unknown_order_is_refused_by_name(shape):
    with pytest.raises(UnsupportedAttributeError, match=r"Det node 'det': .* up to 5x5"):
        byoc.compile(_model(shape), vendors=[])

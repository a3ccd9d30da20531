"""AffineGrid with its size given at run time (byoc/pipeline/frontend/affine_grid.py), against onnxruntime: one
artifact makes grids of every size, in 2-D and 3-D, through the pixels' centres or corners; a size whose batch is
not theta's is a typed error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs


def _model(spatial: int, align_corners: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("theta", TensorProto.FLOAT, ["n", spatial, spatial + 1]),
              helper.make_tensor_value_info("size", TensorProto.INT64, [spatial + 2])]
    out = helper.make_tensor_value_info("grid", TensorProto.FLOAT, ["n"] + [f"s{i}" for i in range(spatial)] + [spatial])
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid", align_corners=align_corners)
    return helper.make_model(helper.make_graph([node], "g", inputs, [out]), opset_imports=[helper.make_opsetid("", 20)])


SIZES = {2: ([2, 3, 5, 7], [2, 1, 1, 4], [2, 2, 6, 1]), 3: ([2, 1, 3, 4, 5], [2, 2, 1, 2, 3])}


@pytest.mark.parametrize("spatial", [2, 3])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_one_artifact_makes_grids_of_every_size_given_at_run_time(spatial, align_corners):
    model = _model(spatial, align_corners)
    artifact = byoc.compile(model, vendors=["dnnl"])
    theta = np.random.default_rng(spatial).uniform(-1, 1, (2, spatial, spatial + 1)).astype(np.float32)
    for size in SIZES[spatial]:
        if align_corners and 1 in size[2:]:
            continue  # one point through the corners: onnx.reference puts it at -1 (as byoc), onnxruntime at +1
        feeds = {"theta": theta, "size": np.array(size, np.int64)}
        (got,) = artifact.run(feeds)
        (want,) = onnxruntime_outputs(model, feeds)
        assert got.shape == want.shape == (2, *size[2:], spatial)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_size_of_another_batch_than_theta_is_an_input_shape_error():
    artifact = byoc.compile(_model(2, 0), vendors=["dnnl"])
    with pytest.raises(InputShapeError):
        artifact.run({"theta": np.zeros((2, 2, 3), np.float32), "size": np.array([3, 1, 4, 4], np.int64)})

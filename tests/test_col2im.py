"""Col2Im (byoc/pipeline/frontend/col2im.py), which TVM's importer lacks, against onnxruntime and onnx.reference:
image and block shapes as constants or given at run time, with strides, dilations and pads, in 2-D and 3-D; an
input whose columns do not match the block positions is a typed error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs


def _model(x_shape, rank: int, constants=None, **attrs) -> onnx.ModelProto:
    """Col2Im(input, image_shape, block_shape): the shapes inputs, or initializers where ``constants`` gives them."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inits = []
    for name, value in zip(("image_shape", "block_shape"), constants or (None, None)):
        if value is None:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, [rank]))
        else:
            inits.append(onnx.numpy_helper.from_array(np.array(value, np.int64), name))
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], name="col2im", **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(rank + 2)])
    return helper.make_model(helper.make_graph([node], "g", inputs, [out], inits),
                             opset_imports=[helper.make_opsetid("", 18)])


def _check(model, feeds, artifact=None):
    from onnx.reference import ReferenceEvaluator

    artifact = artifact or byoc.compile(model, vendors=["dnnl"])
    (got,) = artifact.run(feeds)
    for want in (onnxruntime_outputs(model, feeds)[0], ReferenceEvaluator(model).run(None, feeds)[0]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return artifact


def _columns(batch, channels, block, positions, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, channels * int(np.prod(block)), positions)) \
        .astype(np.float32)


CASES = [  # image, block, attrs, block positions
    ([5, 5], [2, 2], {}, 16),
    ([6, 5], [3, 2], {"strides": [2, 1]}, 2 * 4),
    ([5, 7], [2, 3], {"dilations": [2, 1], "pads": [1, 0, 1, 2]}, 5 * 7),
    ([4, 4], [2, 2], {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 9),
]


@pytest.mark.parametrize("image,block,attrs,positions", CASES)
def test_col2im_of_shapes_given_at_run_time(image, block, attrs, positions):
    model = _model((2, 3 * int(np.prod(block)), positions), 2, **attrs)
    feeds = {"x": _columns(2, 3, block, positions), "image_shape": np.array(image, np.int64),
             "block_shape": np.array(block, np.int64)}
    _check(model, feeds)


@pytest.mark.parametrize("image,block,attrs,positions", CASES[:2])
def test_col2im_of_constant_shapes(image, block, attrs, positions):
    model = _model((1, 2 * int(np.prod(block)), positions), 2, constants=(image, block), **attrs)
    _check(model, {"x": _columns(1, 2, block, positions, seed=1)})


def test_col2im_in_three_dimensions():
    model = _model((1, 2 * 8, 2 * 3 * 2), 3)
    feeds = {"x": _columns(1, 2, [2, 2, 2], 12, seed=2), "image_shape": np.array([3, 4, 3], np.int64),
             "block_shape": np.array([2, 2, 2], np.int64)}
    _check(model, feeds)


def test_one_artifact_runs_other_block_shapes_and_a_mismatch_is_an_input_shape_error():
    model = _model((1, 12, "columns"), 2)
    artifact = None
    for block, positions in (([2, 2], 16), ([1, 3], 15), ([2, 3], 12)):  # 12 channels: 3, 4 and 2 blocks
        feeds = {"x": _columns(1, 12 // int(np.prod(block)), block, positions, seed=3),
                 "image_shape": np.array([5, 5], np.int64), "block_shape": np.array(block, np.int64)}
        artifact = _check(model, feeds, artifact)
    with pytest.raises(InputShapeError):  # 16 columns for blocks of [2, 3] over a 5 x 5 image, which has 12
        artifact.run({"x": _columns(1, 2, [2, 3], 16), "image_shape": np.array([5, 5], np.int64),
                      "block_shape": np.array([2, 3], np.int64)})

"""Resize whose scales or sizes are given at run time (byoc/pipeline/frontend/run_time_resize.py), against
onnx.reference (ONNX's semantics) and, where their products with the extents are whole sizes, onnxruntime too:
one artifact runs every scale, each mode, rounding and coordinate transformation, sizes under each aspect-ratio
policy; a negative scale is a typed error. (onnxruntime takes align_corners' output length as the whole size
where onnx.reference takes extent x scale, and computes coordinates in float32 where onnx.reference does in
float64; ONNX's node tests follow onnx.reference.)"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import InputShapeError
from models import onnxruntime_outputs

X = (np.arange(2 * 3 * 5 * 6, dtype=np.float32).reshape(2, 3, 5, 6) * 0.37) % 7.0 - 3.0


def _model(given: str, count: int = 4, x_shape=(2, 3, 5, 6), roi: bool = False, **attrs) -> onnx.ModelProto:
    """Resize(x, roi, scales or sizes): ``given`` ("scales", float, or "sizes", int64) an input of ``count``
    values; the roi an input where ``roi``."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    names = ["x", "roi" if roi else "", "scales" if given == "scales" else "", "sizes" if given == "sizes" else ""]
    if roi:
        inputs.append(helper.make_tensor_value_info("roi", TensorProto.FLOAT, [2 * count]))
    dtype = TensorProto.FLOAT if given == "scales" else TensorProto.INT64
    inputs.append(helper.make_tensor_value_info(given, dtype, [count]))
    node = helper.make_node("Resize", names[:4] if given == "sizes" else names[:3], ["y"], name="resize", **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"y{i}" for i in range(len(x_shape))])
    graph = helper.make_graph([node], "g", inputs, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _check(model: onnx.ModelProto, feeds: dict, artifact=None, onnxruntime: bool = False):
    """The artifact's output against onnx.reference's, and onnxruntime's where ``onnxruntime``."""
    from onnx.reference import ReferenceEvaluator

    artifact = artifact or byoc.compile(model, vendors=["dnnl"])
    (got,) = artifact.run(feeds)
    references = [ReferenceEvaluator(model).run(None, feeds)[0]]
    if onnxruntime:
        references.append(onnxruntime_outputs(model, feeds)[0])
    for want in references:
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return artifact


def _whole(scales) -> bool:
    return all(float(n * s).is_integer() for n, s in zip(X.shape, scales))


# binary fractions, so that float32 (onnxruntime's) and float64 (onnx.reference's) coordinates agree; 0.75 x 5 and
# 1.25 x 5 are no whole sizes
SCALES = ([1, 1, 2, 1.5], [1, 1, 0.75, 0.5], [1, 1, 1.25, 1.5], [1, 1, 1, 1])


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners"])
def test_nearest_by_scales_given_at_run_time(nearest_mode, transform):
    model = _model("scales", mode="nearest", nearest_mode=nearest_mode, coordinate_transformation_mode=transform)
    artifact = None
    for scales in SCALES:
        artifact = _check(model, {"x": X, "scales": np.array(scales, np.float32)}, artifact, _whole(scales))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("transform", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                       "asymmetric"])
def test_linear_and_cubic_by_scales_given_at_run_time(mode, transform):
    """The coordinates use the scale as given, not the ratio of the extents."""
    model = _model("scales", mode=mode, coordinate_transformation_mode=transform)
    artifact = None
    for scales in SCALES:
        artifact = _check(model, {"x": X, "scales": np.array(scales, np.float32)}, artifact, _whole(scales))


def test_a_coordinate_on_the_edge_of_a_rounding_follows_onnx_reference():
    """(1 + 0.5) / 0.6 - 0.5 is 2 - 8e-8 for float32's 0.6 in float64, as onnx.reference computes it (onnxruntime,
    in float32, gets 2): floor takes row 1, as ONNX's node test test_resize_downsample_scales_nearest expects."""
    from onnx.reference import ReferenceEvaluator

    model = _model("scales", mode="nearest", nearest_mode="floor")
    feeds = {"x": X, "scales": np.array([1, 1, 0.6, 0.6], np.float32)}
    (got,) = byoc.compile(model, vendors=[]).run(feeds)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feeds)[0])
    assert got[0, 0, 1, 0] == X[0, 0, 1, 0]


def test_cubic_of_another_coefficient_excluding_outside():
    model = _model("scales", mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)
    artifact = None
    for scales in SCALES[:3]:
        artifact = _check(model, {"x": X, "scales": np.array(scales, np.float32)}, artifact, _whole(scales))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_sizes_given_at_run_time_under_each_aspect_ratio_policy(policy, mode):
    model = _model("sizes", count=2, axes=[2, 3], mode=mode, keep_aspect_ratio_policy=policy)
    artifact = None
    for sizes in ([7, 9], [3, 4], [5, 6], [2, 11]):
        artifact = _check(model, {"x": X, "sizes": np.array(sizes, np.int64)}, artifact, policy == "stretch")


def test_tf_crop_and_resize_with_a_run_time_box():
    model = _model("sizes", count=2, axes=[3, 2], roi=True, mode="linear",
                   coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-9.0)
    artifact = None
    for sizes, roi in (([4, 3], [0.2, 0.4, 0.9, 0.6]), ([7, 6], [-0.3, 0.1, 1.2, 0.8])):  # the second reaches outside
        artifact = _check(model, {"x": X, "sizes": np.array(sizes, np.int64), "roi": np.array(roi, np.float32)},
                          artifact)


def test_a_symbolic_batch_and_height_run_with_run_time_scales():
    model = _model("scales", x_shape=("batch", 3, "h", 6), mode="linear")
    artifact = None
    for batch, height, scales in ((1, 5, [1, 1, 2, 0.5]), (3, 4, [1, 1, 0.75, 1.5])):
        x = np.random.default_rng(batch).standard_normal((batch, 3, height, 6)).astype(np.float32)
        artifact = _check(model, {"x": x, "scales": np.array(scales, np.float32)}, artifact, onnxruntime=True)


def test_a_negative_scale_is_an_input_shape_error():
    model = _model("scales", mode="nearest")
    artifact = byoc.compile(model, vendors=[])
    with pytest.raises(InputShapeError):
        artifact.run({"x": X, "scales": np.array([1, 1, -2, 1], np.float32)})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_antialiased_by_scales_given_at_run_time(mode, exclude_outside):
    """The kernel stretches by 1 / scale where an axis shrinks: 2 to 8 neighbours a tap here, one artifact."""
    model = _model("scales", mode=mode, antialias=1, exclude_outside=exclude_outside)
    artifact = None
    for scales in ([1, 1, 0.5, 0.25], [1, 1, 0.6, 1.5], [1, 1, 2, 1]):
        artifact = _check(model, {"x": X, "scales": np.array(scales, np.float32)}, artifact)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_by_scales_given_at_run_time(mode):
    """Opset 9's Upsample, its scales an input: coordinates i / scale (asymmetric), nearest rounding down (onnx.reference
    repeats each element, and knows nearest only); onnxruntime for both modes."""
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], name="upsample", mode=mode)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5, 6]),
                      helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["y0", "y1", "y2", "y3"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    artifact = byoc.compile(model, vendors=["dnnl"])
    for scales in ([1, 1, 2, 3], [1, 1, 1, 1.5]):  # onnxruntime's linear takes the outer two at 1
        feeds = {"x": X, "scales": np.array(scales, np.float32)}
        (got,) = artifact.run(feeds)
        np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)
        if mode == "nearest" and float(scales[3]).is_integer():
            np.testing.assert_array_equal(got, np.repeat(np.repeat(X, scales[1], axis=1), scales[2], axis=2).repeat(
                scales[3], axis=3))

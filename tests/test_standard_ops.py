"""Forms TVM's ONNX converters compute wrong without an error, which byoc rewrites (prepare/standard_ops.py) or
imports its own way (importer.py), checked on ONNX's node test cases against their expected outputs."""

from __future__ import annotations

import onnx
import pytest

import byoc
from byoc.conformance import collect_cases, run_cases
from byoc.errors import UnsupportedAttributeError

# Each failed with TVM alone, with no error: a wrong value or a wrong shape.
SILENTLY_WRONG_IN_TVM = [
    "test_isinf_negative", "test_isinf_positive",  # IsInf's detect_negative / detect_positive ignored
    "test_spacetodepth_crd_mode_example",  # SpaceToDepth mode=CRD computed as DCR
    "test_convtranspose_output_shape",  # ConvTranspose's output_shape ignored: (1, 2, 9, 7) for (1, 2, 10, 8)
    "test_expand_dim_changed",  # Expand to a run-time shape: a 1 in the shape did not keep the input's 3
    "test_bitshift_left_int32_negative_shift", "test_bitshift_right_int32_shift_ge_width",  # the amount wrapped
    "test_mod_float_edge_cases_fmod_0_float32",  # x % inf was NaN
    # ONNX's Attention function finds the rows its mask hides entirely by comparing their max with -inf: TVM's max
    # of -inf values was -3.4e38, and those rows were NaN (TVM alone cannot import opset 23's Attention at all)
    "test_attention_23_fullymasked_qk_matmul_output_mode3_zero", "test_attention_causal_boolmask_nan_robustness",
]


def test_forms_tvm_computes_wrong_give_onnx_expected_outputs():
    summary = run_cases(collect_cases(SILENTLY_WRONG_IN_TVM), jobs=2, timeout=180)
    assert [(r.name, r.byoc_error) for r in summary.results if not r.byoc] == []
    assert [r.name for r in summary.results if r.plain] == []  # TVM alone still gets them wrong
    assert len(summary.results) == len(SILENTLY_WRONG_IN_TVM)


# Each failed to import with TVM alone: an op it lacks (CumProd, TensorScatter, BitCast), an input it takes only as a
# constant (CumSum's axis, ConstantOfShape's shape), operand types it refuses (Pow), an attribute it refuses
# (EyeLike's dtype). A sample of each family's node tests; tests/test_cumulative.py, test_pow_types.py and
# test_tensor_scatter.py check more forms against onnxruntime.
REFUSED_BY_TVM = [
    "test_cumprod_2d_axis_1", "test_cumprod_1d_int32_exclusive", "test_cumsum_1d_reverse_exclusive",
    "test_pow_types_int64_int64", "test_pow_types_float32_uint64", "test_tensorscatter_circular",
    "test_constantofshape_int_shape_zero", "test_eyelike_with_dtype", "test_eyelike_populate_off_main_diagonal",
    "test_bitcast_2d_float32_to_int32", "test_bitcast_bool_to_uint8", "test_bitcast_uint16_to_int16",
]


def test_forms_tvm_refuses_give_onnx_expected_outputs():
    summary = run_cases(collect_cases(REFUSED_BY_TVM), jobs=2, timeout=180)
    assert [(r.name, r.byoc_error) for r in summary.results if not r.byoc] == []
    assert [r.name for r in summary.results if r.plain] == []  # TVM alone still fails them
    assert len(summary.results) == len(REFUSED_BY_TVM)


def test_a_bit_cast_to_another_width_is_refused_by_name():
    node = onnx.helper.make_node("BitCast", ["x"], ["y"], name="widen", to=onnx.TensorProto.INT64)
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [2])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 26)])
    with pytest.raises((UnsupportedAttributeError, byoc.errors.InvalidModelError), match="widen|BitCast"):
        byoc.compile(model, vendors=[])


@pytest.mark.parametrize("shape,momentum", [((2, 3, 4, 5), 0.9), ((4, 3), 0.25), ((2, 3, 4, 2, 3), 0.5)])
def test_batch_normalization_in_training_mode_matches_onnxruntime(shape, momentum):
    """The batch's own mean and variance normalize it; the running mean and variance come back updated."""
    import numpy as np

    from models import onnxruntime_outputs

    node = onnx.helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "rm", "rv"],
                                 name="bn", training_mode=1, momentum=momentum, epsilon=1e-3)
    channels = [shape[1]]
    info = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "g", [info("x", onnx.TensorProto.FLOAT, list(shape))] + [
            info(name, onnx.TensorProto.FLOAT, channels) for name in ("scale", "bias", "mean", "var")],
        [info("y", onnx.TensorProto.FLOAT, list(shape)), info("rm", onnx.TensorProto.FLOAT, channels),
         info("rv", onnx.TensorProto.FLOAT, channels)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 15)])
    r = np.random.default_rng(len(shape))
    feeds = {"x": r.standard_normal(shape).astype(np.float32) * 2 + 1,
             **{name: r.random(channels).astype(np.float32) + 0.5 for name in ("scale", "bias", "mean", "var")}}
    got = byoc.compile(model, vendors=["dnnl"]).run(feeds)
    for g, want in zip(got, onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("vendors", [[], ["dnnl"]], ids=["host", "dnnl"])  # c_source takes no reduction
def test_a_max_or_min_of_infinities_is_that_infinity_on_every_vendor(vendors):
    """TVM's and oneDNN's max (min) start from the least (greatest) finite float: a row of -inf gave -3.4e38."""
    import numpy as np
    from onnx import TensorProto, helper

    from models import onnxruntime_outputs

    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["high"], keepdims=1),
             helper.make_node("ReduceMin", ["x", "axes"], ["low"], keepdims=0)]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("high", TensorProto.FLOAT, [3, 1]),
         helper.make_tensor_value_info("low", TensorProto.FLOAT, [3])], [axes]),
        opset_imports=[helper.make_opsetid("", 18)])
    x = np.array([[-np.inf] * 4, [np.inf] * 4, [1, -2, 3, -4]], np.float32)
    got = byoc.compile(model, vendors=vendors).run([x])
    for g, e in zip(got, onnxruntime_outputs(model, {"x": x})):
        np.testing.assert_array_equal(g, e)


def _resize(scales, size: int = 8, mode: str = "linear", **attrs) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    out = [int(size * s) for s in scales[2:]]
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode=mode, **attrs)
    return helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, *out])],
        [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)]), opset_imports=[helper.make_opsetid("", 18)])


def test_an_antialiased_resize_byoc_cannot_compute_is_refused_by_name():
    """byoc's own resize antialiases float inputs only; TVM's would ignore the attribute."""
    model = _resize([1, 1, 0.5, 0.5], antialias=1)
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.UINT8
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.UINT8
    with pytest.raises(UnsupportedAttributeError, match="Resize node 'resize': antialias=1 is not supported; "
                                                        "byoc computes Resize with antialias=1 on a float input"):
        byoc.compile(model, vendors=["dnnl"])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_a_resize_by_constant_scales_to_no_whole_size_follows_onnx_reference(mode):
    """4 x 0.6 is 2.4: ONNX maps coordinates by the scale, where TVM's resize maps them by 2 / 4 (byoc's own
    resize, frontend/run_time_resize.py)."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    model = _resize([1, 1, 0.6, 0.6], size=4, mode=mode)
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    (got,) = byoc.compile(model, vendors=["dnnl"]).run([x])
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.25], [1, 1, 0.6, 1.5]], ids=["down", "down-and-up"])
def test_an_antialiased_resize_by_constant_scales_follows_onnx_reference(mode, scales):
    """TVM's resize does not antialias: an antialiased Resize is byoc's own (frontend/run_time_resize.py)."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    model = _resize(scales, mode=mode, antialias=1)
    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    (got,) = byoc.compile(model, vendors=["dnnl"]).run([x])
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", [_resize([1, 1, 0.5, 0.5]), _resize([1, 1, 2.0, 2.0], antialias=1),
                                   _resize([1, 1, 0.25, 0.5], mode="cubic")], ids=["half", "antialias-up", "cubic"])
def test_a_resize_of_whole_sizes_matches_onnxruntime(model):
    import numpy as np

    from models import onnxruntime_outputs

    x = np.random.default_rng(0).standard_normal((1, 2, 8, 8)).astype(np.float32)
    got = byoc.compile(model, vendors=["dnnl"]).run([x])
    np.testing.assert_allclose(got[0], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-5)

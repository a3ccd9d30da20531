"""ONNX ops TVM lacks, inlined as the functions ONNX defines them by (prepare/function_ops.py), or rewritten
(prepare/standard_ops.py); checked against onnxruntime's own kernels for the ops."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import UnsupportedAttributeError

RNG = np.random.default_rng(3)


def one_node(node, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph([node], "function_op", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def check(model, feed, vendors=("dnnl",), tol=1e-5):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=list(vendors))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    expected = ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"]).run(None, feed)
    for got, want in zip(artifact.run(feed), expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)
    return artifact


@pytest.mark.parametrize("causal", [0, 1])
def test_opset_23_attention_is_the_matmuls_and_softmax_of_one_dnnl_partition(causal):
    q, k, v = (RNG.standard_normal((2, 4, 6, 8)).astype(np.float32) for _ in range(3))
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attention", is_causal=causal)
    model = one_node(node, [value(n, [2, 4, 6, 8]) for n in "qkv"], [value("y", [2, 4, 6, 8])], 23)
    artifact = check(model, {"q": q, "k": k, "v": v})
    plan = artifact.plan
    assert [p.vendor for p in plan.partitions] == ["dnnl"]
    assert {"relax.matmul", "relax.nn.softmax"} <= set(plan.partitions[0].ops)
    assert plan.imported.prepared["attention"].startswith("decomposed into")


def test_softmax_cross_entropy_expands_through_the_function_it_calls():
    # SoftmaxCrossEntropyLoss's function calls NegativeLogLikelihoodLoss, itself a function.
    scores = RNG.standard_normal((3, 5)).astype(np.float32)
    labels = np.array([0, 4, 2], np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name="sce", reduction="mean")
    model = one_node(node, [value("scores", [3, 5]), value("labels", [3], TensorProto.INT64)],
                     [value("loss", [])], 13)
    check(model, {"scores": scores, "labels": labels}, vendors=("c_source",))


def test_layer_normalization_whose_mean_is_read_is_expanded():
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv_std"], name="ln", axis=-1)
    g = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "g")
    b = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "b")
    model = one_node(node, [value("x", [4, 8])], [value("y", [4, 8]), value("mean", [4, 1]),
                                                   value("inv_std", [4, 1])], 17, [g, b])
    check(model, {"x": RNG.standard_normal((4, 8)).astype(np.float32)}, vendors=("c_source",))


def test_layer_normalization_whose_mean_nobody_reads_stays_one_op():
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1)
    g = numpy_helper.from_array(np.ones(8, np.float32), "g")
    b = numpy_helper.from_array(np.zeros(8, np.float32), "b")
    model = one_node(node, [value("x", [4, 8])], [value("y", [4, 8])], 17, [g, b])
    artifact = check(model, {"x": RNG.standard_normal((4, 8)).astype(np.float32)})
    assert artifact.plan.partitions[0].ops == ["relax.nn.layer_norm"]


def test_rms_normalization_over_every_axis():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=0)
    scale = numpy_helper.from_array(RNG.standard_normal((3, 4)).astype(np.float32), "scale")
    model = one_node(node, [value("x", [3, 4])], [value("y", [3, 4])], 23, [scale])
    check(model, {"x": RNG.standard_normal((3, 4)).astype(np.float32)}, vendors=("c_source",))


@pytest.mark.parametrize("p,axis", [(1, 1), (2, -1), (2, 0)])
def test_lp_normalization(p, axis):
    node = helper.make_node("LpNormalization", ["x"], ["y"], name="lp", p=p, axis=axis)
    model = one_node(node, [value("x", [3, 5])], [value("y", [3, 5])], 17)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    x[1] = 0  # a zero norm
    check(model, {"x": x})


def test_lp_normalization_of_another_p_is_refused_by_name():
    node = helper.make_node("LpNormalization", ["x"], ["y"], name="lp3", p=3)
    model = one_node(node, [value("x", [3, 5])], [value("y", [3, 5])], 17)
    with pytest.raises(UnsupportedAttributeError, match="LpNormalization node 'lp3': p=3"):
        byoc.compile(model, vendors=["dnnl"])

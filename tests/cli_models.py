"""Small ONNX models for the CLI and report tests, built with onnx.helper.

Weights come from a fixed seed so goldens stay stable.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8  # onnxruntime 1.31 accepts IR <= 13
OPSET = 13


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array.astype(np.float32), name)


def small_cnn() -> onnx.ModelProto:
    """Conv+Relu, Conv, BatchNormalization, Relu, MaxPool, Flatten, Gemm.

    c_source has no rule for BatchNormalization (it is inlined by the importer
    into ops c_source may or may not take) and none for Flatten/Gemm
    specifics, so the report has both offloaded and host ops.
    """
    rng = np.random.default_rng(0)
    inits = [
        _init("w1", rng.standard_normal((4, 3, 3, 3)) * 0.3),
        _init("b1", rng.standard_normal(4) * 0.1),
        _init("w2", rng.standard_normal((8, 4, 3, 3)) * 0.3),
        _init("b2", rng.standard_normal(8) * 0.1),
        _init("bn_scale", 1.0 + rng.random(8) * 0.5),
        _init("bn_bias", rng.standard_normal(8) * 0.1),
        _init("bn_mean", rng.standard_normal(8) * 0.1),
        _init("bn_var", 0.5 + rng.random(8)),
        _init("fc_w", rng.standard_normal((10, 8 * 4 * 4)) * 0.1),
        _init("fc_b", rng.standard_normal(10) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                         ["bn"], name="bn1"),
        helper.make_node("Relu", ["bn"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten1"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc1", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return _finish(graph)


def small_mlp() -> onnx.ModelProto:
    """MatMul+Add, Relu, MatMul+Add, Softmax."""
    rng = np.random.default_rng(1)
    inits = [
        _init("w1", rng.standard_normal((16, 32)) * 0.2),
        _init("b1", rng.standard_normal(32) * 0.1),
        _init("w2", rng.standard_normal((32, 4)) * 0.2),
        _init("b2", rng.standard_normal(4) * 0.1),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1_matmul"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_add"),
        helper.make_node("Relu", ["a1"], ["r1"], name="act1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2_matmul"),
        helper.make_node("Add", ["m2", "b2"], ["a2"], name="fc2_add"),
        helper.make_node("Softmax", ["a2"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "small_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        inits,
    )
    return _finish(graph)


def _finish(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, producer_name="byoc-tests")
    onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path) -> str:
    """Write ``model`` to ``path``; returns the path as a string."""
    onnx.save(model, str(path))
    return str(path)

"""Small ONNX models for the cross-target and standalone tests, built with onnx.helper.

Weights come from a seeded generator, so every run builds the same bytes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.examples import model


def _init(name: str, array: np.ndarray):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _model(nodes, inputs, outputs, inits, name: str) -> onnx.ModelProto:
    return model(nodes, inputs, outputs, inits, name=name)


def small_cnn(seed: int = 0, batch=1) -> onnx.ModelProto:
    """Conv+bias, BatchNormalization, Relu, MaxPool, Conv+Relu, MaxPool, Flatten, Gemm, Sigmoid.

    Input ``x`` [batch, 3, 16, 16]; output ``y`` [batch, 10]; ``batch`` is 1, or a dim name to make it
    symbolic. BatchNormalization has no
    c_source rule, so it always runs as a TVM host kernel; the tests also keep
    Sigmoid on the host to put a host kernel after the last partition.
    """
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _init("b1", rng.normal(0, 0.1, (8,))),
        _init("bn_scale", rng.uniform(0.5, 1.5, (8,))),
        _init("bn_bias", rng.normal(0, 0.1, (8,))),
        _init("bn_mean", rng.normal(0, 0.1, (8,))),
        _init("bn_var", rng.uniform(0.5, 1.5, (8,))),
        _init("w2", rng.normal(0, 0.2, (16, 8, 3, 3))),
        _init("b2", rng.normal(0, 0.1, (16,))),
        _init("wg", rng.normal(0, 0.1, (10, 16 * 4 * 4))),
        _init("bg", rng.normal(0, 0.1, (10,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"],
                         name="bn1", epsilon=1e-5),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wg", "bg"], ["g"], name="gemm", transB=1),
        helper.make_node("Sigmoid", ["g"], ["y"], name="sigmoid"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        inits,
        "small_cnn",
    )


def mlp(seed: int = 1) -> onnx.ModelProto:
    """Two inputs and two outputs: MatMul+Add, Relu, MatMul+Add, Softmax, and a Tanh side output.

    Inputs ``a`` [4, 32] and ``b`` [4, 32] (summed first); outputs ``probs``
    [4, 8] and ``hidden`` [4, 64], so the program returns a tuple.
    """
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", rng.normal(0, 0.2, (32, 64))),
        _init("b1", rng.normal(0, 0.1, (64,))),
        _init("w2", rng.normal(0, 0.2, (64, 8))),
        _init("b2", rng.normal(0, 0.1, (8,))),
    ]
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"], name="sum"),
        helper.make_node("MatMul", ["s", "w1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "b1"], ["h1"], name="bias1"),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["m2", "b2"], ["logits"], name="bias2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
        helper.make_node("Tanh", ["r1"], ["hidden"], name="tanh"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 32]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [4, 64])],
        inits,
        "mlp",
    )


def inputs_for(model: onnx.ModelProto, seed: int = 7) -> dict[str, np.ndarray]:
    """Random float32 inputs for every graph input."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.normal(0, 1, shape).astype(np.float32)
    return out

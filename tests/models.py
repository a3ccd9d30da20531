"""ONNX test models built with onnx.helper (no downloads), and the onnxruntime reference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8  # onnxruntime reads IR <= 13; 8 is what opset 17 exporters write
OPSET = 17

_rng_seed = 20261122


def rng(seed: int = _rng_seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def tensor(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def const(name: str, array: np.ndarray):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(m)
    return m


def single_op(op_type: str, input_shapes: dict, output_shape, attrs=None, initializers=(), extra_inputs=()):
    """A model with one node: inputs named as given, then the initializers by name."""
    names = list(input_shapes) + list(extra_inputs) + [i.name for i in initializers]
    node = helper.make_node(op_type, names, ["y"], name=f"{op_type.lower()}_node", **(attrs or {}))
    return model([node], [tensor(n, s) for n, s in input_shapes.items()], [tensor("y", output_shape)], initializers)


def random_inputs(m: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    r = rng(seed)
    initializers = {i.name for i in m.graph.initializer}
    out = {}
    for vi in m.graph.input:
        if vi.name in initializers:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        out[vi.name] = r.standard_normal(shape).astype(dtype)
    return out


def onnxruntime_outputs(m: onnx.ModelProto, inputs: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def small_cnn(seed: int = 1) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> MaxPool -> Conv(+bias, relu) -> GlobalAveragePool -> Flatten -> Gemm."""
    r = rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float32) * 0.5  # noqa: E731
    inits = [
        const("w1", f(8, 3, 3, 3)), const("b1", f(8)),
        const("bn_scale", 1 + 0.1 * f(8)), const("bn_bias", f(8)), const("bn_mean", f(8)),
        const("bn_var", np.abs(f(8)) + 0.5),
        const("w2", f(16, 8, 3, 3)), const("b2", f(16)),
        const("fc_w", f(10, 16)), const("fc_b", f(10)),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    return model(nodes, [tensor("input", [1, 3, 16, 16])], [tensor("logits", [1, 10])], inits, name="small_cnn")


def small_mlp(seed: int = 2) -> onnx.ModelProto:
    """MatMul+Add -> Relu -> Gemm -> Sigmoid -> Gemm -> Softmax, two inputs added first."""
    r = rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float32) * 0.3  # noqa: E731
    inits = [const("w1", f(32, 64)), const("b1", f(64)), const("w2", f(64, 32)), const("b2", f(32)),
             const("w3", f(32, 5)), const("b3", f(5))]
    nodes = [
        helper.make_node("Add", ["x", "bias_in"], ["xa"], name="add_in"),
        helper.make_node("MatMul", ["xa", "w1"], ["h1"], name="mm1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="mm1_bias"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="act1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], name="fc2"),
        helper.make_node("Sigmoid", ["h2"], ["a2"], name="act2"),
        helper.make_node("Gemm", ["a2", "w3", "b3"], ["h3"], name="fc3"),
        helper.make_node("Softmax", ["h3"], ["probs"], name="softmax", axis=-1),
    ]
    return model(nodes, [tensor("x", [4, 32]), tensor("bias_in", [32])], [tensor("probs", [4, 5])], inits,
                 name="small_mlp")

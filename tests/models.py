"""ONNX test models built with onnx.helper (no downloads), and the onnxruntime reference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from byoc.examples import const, model, small_cnn, small_mlp, tensor  # noqa: F401 - shared builders

_rng_seed = 20261122


def rng(seed: int = _rng_seed) -> np.random.Generator:
    return np.random.default_rng(seed)


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



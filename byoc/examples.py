"""Example models, built with onnx.helper so nothing is downloaded.

``python -m byoc.examples OUT.onnx [--model small_cnn|small_mlp]`` writes one;
the README's first command partitions and verifies it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.errors import ByocError

IR_VERSION = 8  # readable by onnxruntime (IR <= 13) and every recent tool
OPSET = 17


def tensor(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def const(name: str, array: np.ndarray):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)
    onnx.checker.check_model(m)
    return m


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def small_cnn(seed: int = 1) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> MaxPool -> Conv(+bias, relu) -> GlobalAveragePool -> Flatten -> Gemm."""
    r = _rng(seed)

    def f(*s: int) -> np.ndarray:
        return r.standard_normal(s).astype(np.float32) * 0.5

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
    r = _rng(seed)

    def f(*s: int) -> np.ndarray:
        return r.standard_normal(s).astype(np.float32) * 0.3

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


EXAMPLES = {"small_cnn": small_cnn, "small_mlp": small_mlp}


def write_example(name: str, path: Union[str, os.PathLike]) -> bool:
    """Write the example model ``name`` to ``path``; False if ``path`` already holds exactly that model.

    Any other file at ``path`` is kept and is a :class:`~byoc.errors.ByocError`:
    running a set-up twice is fine, replacing a file of the user's is not.
    """
    out = Path(path)
    data = EXAMPLES[name]().SerializeToString()
    if out.exists():
        if out.is_file() and out.read_bytes() == data:
            return False
        raise ByocError(f"{out} already exists and is not the {name} example; choose another path")
    out.write_bytes(data)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m byoc.examples", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="where to write the .onnx file (another file there is never overwritten)")
    parser.add_argument("--model", choices=sorted(EXAMPLES), default="small_cnn")
    args = parser.parse_args(argv)
    try:
        written = write_example(args.model, args.out)
    except ByocError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.model} to {args.out}" if written else f"{args.out} already holds {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

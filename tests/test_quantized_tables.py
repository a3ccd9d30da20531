"""Element-wise QDQ units as 256-entry byte tables on dnnl (``dnnl.qtable``, ``codegens/dnnl/tables.py``).

onnxruntime's quantizer leaves each erf GELU of a transformer as ``DQ -> Div -> Erf -> Q`` (it quantizes no Div
or Erf), and oneDNN has no erf: before, each such unit cut a quantized ViT's partition (13 partitions where the
float model is one). A unit whose input and output are 8-bit and per tensor and whose core is a chain of
element-wise float ops (with scalar constants) is a function of the input's 256 codes; byoc computes those 256
bytes at compile time from each op's ONNX definition and the runtime maps the tensor through them.

Compared with onnxruntime's definition run (graph optimizations off), within one quantum of the output; the lone
units over every input code.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import byoc
from quantized_helpers import _feed, _ort
from quantized_models import gelu_mlp, output_scale, qdq_chain, quantize, with_symbolic_dims

_QDQ = ("relax.quantize", "relax.dequantize")


def _compiled(model: onnx.ModelProto):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return byoc.compile(model, vendors=["dnnl"], strict=True)


def _one_partition(artifact) -> None:
    """One dnnl partition and no op on the host: no Q, DQ or Erf."""
    plan = artifact.plan
    host = [(d.op, d.node.name if d.node is not None else None) for d in plan.host_ops]
    assert [p.vendor for p in plan.partitions] == ["dnnl"] and not host, (byoc.report(plan), host)


def _tables(artifact) -> list[str]:
    return [s for s in artifact.implementations()["dnnl_0"] if "byte_table" in s]


@pytest.fixture(scope="module")
def gelu_qdq():
    return quantize(gelu_mlp())


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "batch-seq"])
def test_a_quantized_erf_gelu_mlp_is_one_dnnl_partition(gelu_qdq, symbolic):
    """The QDQ transformer MLP with an erf GELU (``quantize_static``'s defaults, per tensor): one dnnl partition,
    no Q/DQ/Erf on the host, within one quantum of onnxruntime's definition, at each shape of a symbolic batch
    and sequence."""
    erfs = [n for n in gelu_qdq.graph.node if n.op_type == "Erf"]
    assert len(erfs) == 1
    model = with_symbolic_dims(gelu_qdq, {0: "batch", 1: "seq"}) if symbolic else gelu_qdq
    artifact = _compiled(model)
    _one_partition(artifact)
    quantum = output_scale(model)
    shapes = [(1, 8, 16), (2, 5, 16), (3, 11, 16)] if symbolic else [(1, 8, 16)]
    for shape in shapes:
        for seed in (5, 6):
            feed = _feed(seed, shape)
            got = artifact.run(feed)[0]
            want = _ort(model, feed, integer_kernels=False)
            assert got.shape == want.shape
            assert np.abs(got - want).max() <= 1.001 * quantum, (shape, seed, np.abs(got - want).max() / quantum)
            assert np.abs(want).max() > 10 * quantum
    assert _tables(artifact), artifact.implementations()


def _every_code(model: onnx.ModelProto, source_scale: float, source_zero: int, signed: bool) -> np.ndarray:
    """An input whose quantization holds each of the 256 codes (four times, in a (4, 256) tensor)."""
    codes = np.arange(-128, 128) if signed else np.arange(256)
    x = ((codes - source_zero) * np.float32(source_scale)).astype(np.float32)
    return np.tile(x, (4, 1))


# (name, ops, source dtype, output dtype, source (scale, zero point), output (scale, zero point))
CHAINS = {
    "erf": ([("Erf", None, False)], TensorProto.UINT8, TensorProto.UINT8, (0.05, 128), (1 / 128, 0)),
    "erf-s8": ([("Erf", None, False)], TensorProto.INT8, TensorProto.INT8, (0.03, -3), (1 / 127, 0)),
    "gelu-div-erf": ([("Div", 1.4142135, False), ("Erf", None, False)], TensorProto.UINT8, TensorProto.UINT8,
                     (0.04, 120), (1 / 127.5, 128)),
    # one op and a relu: the matcher folds them into one qnn.erf call whose output range is the relu's
    "erf-relu": ([("Erf", None, False), ("Relu", None, False)], TensorProto.UINT8, TensorProto.INT8, (0.05, 128),
                 (1 / 127, 0)),
    # a chain of several ops, constants on either side, into a signed output
    "mul-tanh-add-sigmoid-sub": ([("Mul", 0.7, False), ("Tanh", None, False), ("Add", 0.25, False),
                                  ("Sigmoid", None, False), ("Sub", 1.0, True)], TensorProto.UINT8,
                                 TensorProto.INT8, (0.05, 128), (1 / 200, 10)),
    "exp-sqrt-pow": ([("Exp", None, False), ("Sqrt", None, False), ("Pow", 1.5, False), ("Neg", None, False)],
                     TensorProto.INT8, TensorProto.UINT8, (0.02, 0), (0.05, 255)),
    "softplus-like": ([("Exp", None, False), ("Add", 1.0, True), ("Log", None, False), ("Abs", None, False)],
                      TensorProto.UINT8, TensorProto.UINT8, (0.05, 128), (0.03, 0)),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_lone_elementwise_unit_is_one_byte_table(name):
    """``DQ -> element-wise ops -> Q`` alone (a lone Erf, the GELU's Div -> Erf, chains of several ops with
    constants either side, u8 and s8 on either end): one dnnl op, a byte table, and over every input code at
    most one quantum from onnxruntime's definition (exact where no rounding tie moves: almost everywhere)."""
    ops, source_type, output_type, source, output = CHAINS[name]
    model = qdq_chain(ops, source_type, output_type, source, output, shape=(4, 256))
    artifact = _compiled(model)
    _one_partition(artifact)
    assert len(_tables(artifact)) == 1, artifact.implementations()
    x = _every_code(model, *source, signed=source_type == TensorProto.INT8)
    got = artifact.run({"x": x})[0]
    want = _ort(model, {"x": x}, integer_kernels=False)
    quanta = np.abs(got - want) / np.float32(output[0])
    assert quanta.max() <= 1.001, (quanta.max(), np.argmax(quanta))
    assert (quanta < 0.5).mean() >= 0.99, (quanta >= 0.5).sum()
    assert len(np.unique(want)) > 16  # the chain is no constant over the codes


def test_unit_table_is_the_onnx_definition():
    """``unit_table`` over the 256 codes of a lone Erf equals onnxruntime's definition run code for code."""
    model = qdq_chain([("Erf", None, False)], shape=(1, 256))
    x = _every_code(model, 0.05, 128, signed=False)[:1]
    want = np.rint(_ort(model, {"x": x}, integer_kernels=False) * 128).astype(np.int64).reshape(-1)

    from types import SimpleNamespace

    from byoc.vendor.quantized import QParams, unit_table

    source = QParams(np.float32(0.05).reshape(()), np.uint8(128).reshape(()), None, "uint8")
    out = QParams(np.float32(1 / 128).reshape(()), np.uint8(0).reshape(()), None, "uint8")
    table = unit_table(source, [SimpleNamespace(op="relax.erf", inputs=[], attrs={})], out)
    np.testing.assert_array_equal(table.astype(np.int64), want)


@pytest.mark.parametrize("symbolic", [False, True], ids=["static", "batch"])
def test_a_float_erf_between_float_ops_runs_on_dnnl(symbolic):
    """An Erf that is no GELU and in no quantized unit (``x -> Mul -> Erf -> Add``, float32) is dnnl's too
    (``dnnl.erf``, the runtime's Erf kernel: std::erf per element), within 2 float32 ulps of onnxruntime."""
    from onnx import helper, numpy_helper

    node = helper.make_node
    inits = [numpy_helper.from_array(np.array(0.8, np.float32), "a"), numpy_helper.from_array(np.array(0.5, np.float32),
                                                                                               "b")]
    nodes = [node("Mul", ["x", "a"], ["t"]), node("Erf", ["t"], ["e"]), node("Add", ["e", "b"], ["y"])]
    shape: list = ["batch", 37] if symbolic else [3, 37]
    graph = helper.make_graph(nodes, "float_erf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    artifact = _compiled(model)
    _one_partition(artifact)
    for batch in (3, 5) if symbolic else (3,):
        x = np.random.default_rng(batch).standard_normal((batch, 37)).astype(np.float32) * 2
        got = artifact.run({"x": x})[0]
        want = _ort(model, {"x": x}, integer_kernels=False)
        np.testing.assert_allclose(got, want, rtol=0, atol=2 * np.spacing(np.float32(1.5)))

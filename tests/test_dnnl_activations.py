"""The dnnl codegen's activation rewrite (codegens/dnnl/activations.py), on the JSON graph it sends: no oneDNN.

An activation TVM imports as several ops (GELU in its erf and tanh forms, swish, hard-swish in both
spellings, hard-sigmoid, LRN) reaches the runtime as one body op, ``byoc.eltwise`` with oneDNN's
algorithm and its alpha and beta, or ``byoc.lrn``; the runtime recognizes no form itself. Each node a dnnl
rule took as an activation (a rule of its own, or a conv's tail) carries exactly that one op; the same
spelling with another constant is not rewritten. The numerics and the primitives oneDNN runs are checked
against onnxruntime by tests/test_dnnl_ops_conv.py and test_dnnl_ops_eltwise.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.codegens.dnnl import DnnlCodegen
from byoc.codegens.dnnl.activations import ELTWISE, LRN, activations_fused
from byoc.vendor.graph import partition_graph

from dnnl_op_helpers import ACTIVATIONS, _activation_nodes, _compile, _conv, _f, _gelu_tanh_nodes
from models import const, model, single_op, tensor

SPELLED = {"relax.erf", "relax.tanh", "relax.sigmoid", "relax.clip", "relax.nn.avg_pool3d", "relax.power"}
ALGORITHM = {"hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "hardswish_hardsigmoid": "hardswish",
             "swish": "swish", "swish_reversed": "swish"}


def _nodes(m) -> list[dict]:
    """The JSON nodes the dnnl codegen sends for every partition of ``m``."""
    plan = byoc.partition(m, ["dnnl"])
    graphs = [partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions]
    return [node for g in graphs for node in json.loads(DnnlCodegen().serialize(g).json)["nodes"]]


def _kernels(nodes) -> list[str]:
    return [op["kernel"] for node in nodes for op in node["body"]]


def _attrs(op) -> dict:
    return {name: attr["value"] for name, attr in op["attrs"].items()}


def _gelu_erf_nodes(x, out, sqrt2=math.sqrt(2.0), exporter="legacy"):
    """x * 0.5 * (1 + erf(x / sqrt 2)) as torch's legacy exporter writes it, or as its dynamo exporter does:
    x * (1 / sqrt 2) (as Div by sqrt 2 at opset 18), then x * (0.5 * (1 + e))."""
    n = helper.make_node
    scalars = [const(name, np.array(v, np.float32)) for name, v in
               (("erf_sqrt2", sqrt2), ("erf_inv_sqrt2", 1 / sqrt2), ("erf_one", 1.0), ("erf_half", 0.5))]
    if exporter == "legacy":
        return [n("Div", [x, "erf_sqrt2"], ["e1"]), n("Erf", ["e1"], ["e2"]), n("Add", ["e2", "erf_one"], ["e3"]),
                n("Mul", [x, "e3"], ["e4"]), n("Mul", ["e4", "erf_half"], [out])], scalars
    scale = n("Mul", [x, "erf_inv_sqrt2"], ["e1"]) if exporter == "dynamo_mul" else n("Div", [x, "erf_sqrt2"], ["e1"])
    return [scale, n("Erf", ["e1"], ["e2"]), n("Add", ["e2", "erf_one"], ["e3"]),
            n("Mul", ["erf_half", "e3"], ["e4"]), n("Mul", [x, "e4"], [out])], scalars


@pytest.mark.parametrize("exporter", ["legacy", "dynamo", "dynamo_mul"])
def test_gelu_erf_as_each_exporter_writes_it_is_one_eltwise_op_after_the_matmul(exporter):
    """BERT's intermediate dense + GELU, as each torch exporter writes it: one gelu_erf op in the partition of
    the matmul, where the dynamo export's spelling stayed on the host and split the encoder (bert_tiny_dynamo: 4
    partitions, now 2 as its legacy export)."""
    nodes, scalars = _gelu_erf_nodes("h", "y", exporter=exporter)
    m = model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["h"]), *nodes],
              [tensor("x", [2, 5, 16])], [tensor("y", [2, 5, 24])],
              [const("w", _f(16, 24, seed=2, scale=0.3)), const("b", _f(24, seed=3))] + scalars)
    sent = _nodes(m)
    assert not SPELLED & set(_kernels(sent)), _kernels(sent)
    assert [_attrs(op)["algorithm"] for node in sent for op in node["body"] if op["kernel"] == ELTWISE] == ["gelu_erf"]
    assert len(_compile(m, scale=2.0).plan.partitions) == 1


@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("after_conv", [False, True], ids=["alone", "conv-tail"])
def test_an_activation_rule_sends_one_eltwise_op(kind, after_conv):
    shape = [1, 6, 5, 7]
    nodes, inits, source = [], [], "x"
    if after_conv:
        conv, inits = _conv("x", "c", 6, 6, "conv")
        nodes, source = [conv], "c"
    m = model(nodes + _activation_nodes(kind, source, "y"), [tensor("x", shape)], [tensor("y", shape)], inits)
    sent = _nodes(m)
    rule = sent[-1]["op"]
    assert rule == ("dnnl.conv2d_bias_" if after_conv else "dnnl.") + kind.replace("_reversed", ""), rule
    eltwise = [op for op in sent[-1]["body"] if op["kernel"] == ELTWISE]
    assert len(eltwise) == 1 and not SPELLED & set(_kernels(sent)), _kernels(sent)
    attrs = _attrs(eltwise[0])
    assert attrs["algorithm"] == ALGORITHM[kind]
    if kind == "hardsigmoid":  # ONNX's alpha and beta, as float32
        assert (attrs["alpha"], attrs["beta"]) == (float(np.float32(0.2)), 0.5)
    elif "hardswish" in kind:
        assert attrs["alpha"] == pytest.approx(1 / 6) and attrs["beta"] == 0.5


@pytest.mark.parametrize("spelling", ["keras", "torch"])
def test_gelu_in_both_forms_is_one_eltwise_op(spelling):
    conv, inits = _conv("x", "a", 3, 8, "c1", seed=6)
    erf, erf_scalars = _gelu_erf_nodes("a", "g")
    tanh, tanh_scalars = _gelu_tanh_nodes(spelling, "g", "y")
    m = model([conv, *erf, *tanh], [tensor("x", [1, 3, 10, 12])], [tensor("y", [1, 8, 10, 12])],
              inits + erf_scalars + tanh_scalars)
    sent = _nodes(m)
    eltwise = [_attrs(op)["algorithm"] for node in sent for op in node["body"] if op["kernel"] == ELTWISE]
    assert eltwise == ["gelu_erf", "gelu_tanh"] and not SPELLED & set(_kernels(sent)), _kernels(sent)


def test_the_same_spellings_with_other_constants_are_not_rewritten():
    """A tanh GELU with 0.04 for 0.044715 is sent op by op. (The erf form with another constant is refused by the
    dnnl.gelu rule, and dnnl takes no erf alone: it stays on the host.)"""
    tanh, tanh_scalars = _gelu_tanh_nodes("wrong", "x", "y")
    m = model(tanh, [tensor("x", [2, 8])], [tensor("y", [2, 8])], tanh_scalars)
    kernels = _kernels(_nodes(m))
    assert ELTWISE not in kernels and "relax.tanh" in kernels, kernels


def test_an_activation_whose_intermediate_is_read_elsewhere_is_not_rewritten():
    """swish's sigmoid is also an output: replacing x * sigmoid(x) by one op would lose it."""
    n = helper.make_node
    m = model([n("Sigmoid", ["x"], ["s"]), n("Mul", ["x", "s"], ["y"])], [tensor("x", [2, 8])],
              [tensor("y", [2, 8]), tensor("s", [2, 8])])
    kernels = _kernels(_nodes(m))
    assert kernels == ["relax.sigmoid", "relax.multiply"], kernels


def test_lrn_is_one_op_with_onnx_parameters():
    shape = [1, 6, 5, 5]
    sent = _nodes(single_op("LRN", {"x": shape}, shape, {"size": 5, "alpha": 2e-4, "beta": 0.75, "bias": 2.0}))
    (lrn,) = [op for node in sent for op in node["body"]]
    assert lrn["kernel"] == LRN
    attrs = _attrs(lrn)
    assert attrs["size"] == 5 and attrs["beta"] == 0.75 and attrs["bias"] == 2.0
    assert attrs["alpha"] == pytest.approx(2e-4, rel=1e-6)  # TVM's LRN multiplies by alpha itself


def test_a_graph_without_forms_is_returned_as_it_is():
    m = single_op("Relu", {"x": [2, 3]}, [2, 3])
    plan = byoc.partition(m, ["dnnl"])
    (graph,) = [partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions]
    assert activations_fused(graph) is graph


def test_the_dnnl_runtime_tells_an_artifact_that_still_spells_activations_to_be_rebuilt():
    """A dnnl graph of schema version 2 (before this rewrite) spells its activations as several ops, which the
    runtime no longer finds: it refuses it by its version, saying to rebuild; version 3 loads. The JSON runtime
    still reads version 2 (its graphs did not change)."""
    import tvm_ffi

    m = model(_activation_nodes("swish", "x", "y"), [tensor("x", [2, 8])], [tensor("y", [2, 8])])
    plan = byoc.partition(m, ["dnnl"])
    (graph,) = [partition_graph(plan.mod[p.global_var], p.name) for p in plan.partitions]
    text = DnnlCodegen().serialize(graph).json
    assert text.endswith(',"version":3}')
    byoc.get_vendor("dnnl").codegen.load_runtime()
    create = tvm_ffi.get_global_func("byoc.dnnl.create")
    create(graph.symbol, text, [], [])
    with pytest.raises(ValueError, match="graph schema version 2 is not supported .*reads 3 to 4.*an earlier byoc; "
                                         "rebuild it"):
        create(graph.symbol, text.replace('"version":3', '"version":2'), [], [])


def test_gelu_whose_half_was_folded_into_the_next_conv_is_gelu_then_a_scale():
    """x * (1 + erf(x / sqrt 2)) between two convs: the preparation (onnxsim) folds a GELU's final * 0.5 into the
    next conv's weights (a wav2vec2-style feature encoder), and the erf stayed on the host, a partition cut at each
    GELU. It is now one dnnl rule, sent as GELU and a linear scale of 2, and matches onnxruntime."""
    import onnxruntime as ort

    first, inits1 = _conv("x", "a", 3, 8, "c1", seed=6)
    second, inits2 = _conv("g", "y", 8, 4, "c2", seed=7)
    gelu, scalars = _gelu_erf_nodes("a", "g")
    doubled = gelu[:4]  # no * 0.5
    doubled[3].output[0] = "g"
    m = model([first, *doubled, second], [tensor("x", [1, 3, 10, 12])], [tensor("y", [1, 4, 10, 12])],
              inits1 + inits2 + [s for s in scalars if s.name in ("erf_sqrt2", "erf_one")])
    artifact = byoc.compile(m, ["dnnl"])
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops
    sent = _nodes(m)
    eltwise = [_attrs(op) for node in sent for op in node["body"] if op["kernel"] == ELTWISE]
    assert [(e["algorithm"], e["alpha"]) for e in eltwise] == [("gelu_erf", 0.0), ("linear", 2.0)], eltwise
    assert not SPELLED & set(_kernels(sent)), _kernels(sent)
    x = np.random.default_rng(2).standard_normal((1, 3, 10, 12)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(artifact.run([x])[0], want, rtol=1e-4, atol=1e-5)

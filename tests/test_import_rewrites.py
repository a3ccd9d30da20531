"""ONNX nodes imported as ops vendors take (byoc.pipeline.frontend.import_rewrites): an Einsum that is a batched matmul, and
an Expand that the op reading it broadcasts past. Each against onnxruntime, with the ops that stayed on the host."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import byoc


def _model(nodes, inputs, outputs, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "rewrites", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _check(model, shapes: dict):
    """Compiled for dnnl: the outputs against onnxruntime's; returns the artifact."""
    artifact = byoc.compile(model, ["dnnl"], strict=True)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, expected in zip(artifact.run(feeds), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return artifact


@pytest.mark.parametrize("equation, a, b", [
    ("bhid,bhjd->bhij", [1, 3, 24, 64], [1, 3, 20, 64]),  # MaxViT's q k^T
    ("bhij,bhjd->bhid", [1, 3, 24, 20], [1, 3, 20, 64]),  # and its attention times v
    ("ij,jk->ik", [24, 64], [64, 16]),
    ("bij,bjk->bki", [2, 24, 64], [2, 64, 16]),  # a transposed result
    ("ki,kj->ij", [64, 24], [64, 16]),  # a transposed operand
])
def test_an_einsum_that_is_a_batched_matmul_runs_on_the_vendor(equation, a, b):
    letters_a, rest = equation.split(",")
    letters_b, out = rest.split("->")
    size = {c: n for letters, shape in ((letters_a, a), (letters_b, b)) for c, n in zip(letters, shape)}
    model = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
                   [("a", a), ("b", b)], [("y", [size[c] for c in out])])
    artifact = _check(model, {"a": a, "b": b})
    assert not artifact.plan.host_ops and [p.vendor for p in artifact.plan.partitions] == ["dnnl"]


@pytest.mark.parametrize("equation, shapes, out", [
    ("ij,ij->ij", {"a": [4, 5], "b": [4, 5]}, [4, 5]),  # element-wise: no summed letter
    ("ij,jk", {"a": [3, 4], "b": [4, 5]}, [3, 5]),  # a matmul, but its output implicit (none given)
    ("ijk,jk->i", {"a": [3, 4, 5], "b": [4, 5]}, [3]),  # two summed letters
])
def test_other_einsums_keep_tvms_form_and_its_answer(equation, shapes, out):
    model = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)], list(shapes.items()),
                   [("y", out)])
    _check(model, shapes)


def _normalized(expand_to_reader: bool) -> onnx.ModelProto:
    """Swin V2's cosine attention: q / Expand(max(||q||, eps), Shape(q)), q [batch, 3, 16, 8]. Or (not
    ``expand_to_reader``) the norm expanded to [batch, 3, 16, 8] and divided into a [1] tensor: the Expand then
    makes the result's last dim itself and stays."""
    nodes = [helper.make_node("ReduceL2", ["q"], ["norm"], axes=[-1], keepdims=1),
             helper.make_node("Clip", ["norm", "eps"], ["clipped"]),
             helper.make_node("Shape", ["q"], ["shape"]),
             helper.make_node("Expand", ["clipped", "shape"], ["expanded"], name="expand")]
    nodes.insert(0, helper.make_node("Constant", [], ["eps"], value=helper.make_tensor("e", TensorProto.FLOAT, [],
                                                                                      [1e-12])))
    if expand_to_reader:
        nodes.append(helper.make_node("Div", ["q", "expanded"], ["y"], name="div"))
        return _model(nodes, [("q", ["batch", 3, 16, 8])], [("y", ["batch", 3, 16, 8])])
    nodes.append(helper.make_node("Div", ["one", "expanded"], ["y"], name="div"))
    return _model(nodes, [("q", ["batch", 3, 16, 8]), ("one", [1])], [("y", ["batch", 3, 16, 8])])


def test_an_expand_its_reader_broadcasts_past_is_not_computed():
    artifact = _check(_normalized(True), {"q": [2, 3, 16, 8]})
    assert not artifact.plan.host_ops and len(artifact.plan.partitions) == 1
    assert "broadcasting implies" in artifact.plan.imported.prepared["expand"]
    for batch in (1, 3):  # one artifact, every batch
        q = np.random.default_rng(batch).standard_normal((batch, 3, 16, 8)).astype(np.float32)
        np.testing.assert_allclose(artifact.run({"q": q})[0], q / np.linalg.norm(q, axis=-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)


def test_an_expand_that_makes_the_result_shape_stays():
    artifact = _check(_normalized(False), {"q": [2, 3, 16, 8], "one": [1]})
    assert "expand" not in artifact.plan.imported.prepared


def test_an_expand_another_op_still_reads_is_computed_and_not_reported_absorbed():
    model = _normalized(True)
    model.graph.node.append(helper.make_node("Relu", ["expanded"], ["norms"], name="relu"))
    model.graph.output.append(helper.make_tensor_value_info("norms", TensorProto.FLOAT, ["batch", 3, 16, 8]))
    artifact = _check(model, {"q": [2, 3, 16, 8]})
    assert "expand" not in artifact.plan.imported.prepared
    assert "expand" in {n.name for n in artifact.plan.imported.node_of.values()}


@pytest.mark.parametrize("op, ops", [("Sum", ["relax.add", "relax.add"]), ("Max", ["relax.maximum"] * 2),
                                     ("Min", ["relax.minimum"] * 2),
                                     ("Mean", ["relax.add", "relax.add", "relax.divide"])])
def test_a_variadic_op_of_tensors_is_a_chain_of_its_binary_op(op, ops):
    """A residual Sum of three tensors (one broadcast) arrives as two adds, which a vendor with an element-wise
    add takes whole, not as broadcast_to, stack and a reduction."""
    m = _model([helper.make_node(op, ["a", "b", "c"], ["y"])], [("a", [2, 8]), ("b", [2, 8]), ("c", [8])],
               [("y", [2, 8])])
    artifact = _check(m, {"a": [2, 8], "b": [2, 8], "c": [8]})
    assert [d.op for d in artifact.plan.decisions.values()] == ops
    assert not artifact.plan.host_ops

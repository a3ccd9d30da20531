"""The partitioner: cycles, diamonds, vendor priority, min_ops and keep_on_host."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.pipeline.annotate.annotator import PolicyError
from byoc.codegens.c_source import CSourceCodegen
from byoc.vendor import OpRule, Vendor

from models import model, onnxruntime_outputs, random_inputs, small_cnn, tensor


def _vendor(name: str, ops: dict[str, str]) -> Vendor:
    """A test vendor on the C-source codegen that takes only ``ops`` (rule -> relax op)."""
    return Vendor(name, tuple(OpRule(f"{name}.{rule}", op) for rule, op in ops.items()), CSourceCodegen())


def _matches_onnxruntime(m, plan):
    inputs = random_inputs(m)
    for got, want in zip(byoc.build(plan).run(inputs), onnxruntime_outputs(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _assert_acyclic(plan):
    """Every partition's inputs are computed before it is called (the module is well formed)."""
    from tvm import relax

    relax.analysis.well_formed(plan.mod)  # raises on an ill-formed module (e.g. a use before def)


def _cycle_model():
    # relu -> exp (host) -> add(exp, relu): merging relu and add would need exp inside and outside.
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e"], name="exp"),
             helper.make_node("Add", ["e", "r"], ["y"], name="add")]
    return model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])


def test_no_cycle_through_a_host_op():
    m = _cycle_model()
    plan = byoc.partition(m, ["c_source"])
    assert [p.onnx_nodes for p in plan.partitions] == [["relu"], ["add"]]
    assert [d.node.name for d in plan.host_ops] == ["exp"]
    _assert_acyclic(plan)
    _matches_onnxruntime(m, plan)


def test_diamond_is_one_partition():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="top"),
             helper.make_node("Sigmoid", ["r"], ["s"], name="left"),
             helper.make_node("Tanh", ["r"], ["t"], name="right"),
             helper.make_node("Add", ["s", "t"], ["y"], name="bottom")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    plan = byoc.partition(m, ["c_source"])
    assert [p.onnx_nodes for p in plan.partitions] == [["top", "left", "right", "bottom"]]
    _matches_onnxruntime(m, plan)


def test_diamond_with_a_host_branch():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="top"),
             helper.make_node("Exp", ["r"], ["s"], name="left"),
             helper.make_node("Tanh", ["r"], ["t"], name="right"),
             helper.make_node("Add", ["s", "t"], ["y"], name="bottom")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    plan = byoc.partition(m, ["c_source"])
    assert [d.node.name for d in plan.host_ops] == ["left"]
    assert sorted(n for p in plan.partitions for n in p.onnx_nodes) == ["bottom", "right", "top"]
    _assert_acyclic(plan)
    _matches_onnxruntime(m, plan)


def test_vendor_priority_is_the_given_order():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["y"], name="tanh")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    a = _vendor("vendor_a", {"relu": "relax.nn.relu"})
    b = _vendor("vendor_b", {"relu": "relax.nn.relu", "tanh": "relax.tanh"})

    plan = byoc.partition(m, [a, b])
    assert {d.node.name: d.vendor for d in plan.decisions.values()} == {"relu": "vendor_a", "tanh": "vendor_b"}
    assert [p.name for p in plan.partitions] == ["vendor_a_0", "vendor_b_0"]
    tanh = next(d for d in plan.decisions.values() if d.node.name == "tanh")
    assert tanh.reasons == {"vendor_a": "no vendor_a rule for relax.tanh"}
    _matches_onnxruntime(m, plan)

    plan = byoc.partition(m, [b, a])
    assert {d.vendor for d in plan.decisions.values()} == {"vendor_b"}
    _matches_onnxruntime(m, plan)


def test_min_ops_sends_small_partitions_home():
    m = _cycle_model()
    plan = byoc.partition(m, ["c_source"], min_ops=2)
    assert plan.partitions == []
    assert {d.reasons["c_source"] for d in plan.host_ops if d.node.name != "exp"} == {
        "below min_ops: its partition would have 1 op(s) < 2"}
    _matches_onnxruntime(m, plan)


def test_min_ops_lets_a_lower_priority_vendor_take_over():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Tanh", ["r"], ["y"], name="tanh")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    small = _vendor("vendor_small", {"relu": "relax.nn.relu"})
    plan = byoc.partition(m, [small, "c_source"], min_ops=2)
    assert [(p.name, p.onnx_nodes) for p in plan.partitions] == [("c_source_0", ["relu", "tanh"])]
    relu = next(d for d in plan.decisions.values() if d.node.name == "relu")
    assert relu.reasons["vendor_small"].startswith("below min_ops")


def test_min_ops_must_be_positive():
    with pytest.raises(byoc.ByocError, match="min_ops"):
        byoc.partition(_cycle_model(), ["c_source"], min_ops=0)


def test_keep_on_host_by_node_name_and_op_type():
    m = small_cnn()
    plan = byoc.partition(m, ["c_source"], keep_on_host=["conv2", "Gemm"])
    host_nodes = {d.node.name for d in plan.host_ops}
    assert {"conv2", "fc", "bn1"} <= host_nodes
    conv2 = next(d for d in plan.host_ops if d.node.name == "conv2")
    assert conv2.reasons["c_source"] == "kept on host by keep_on_host='conv2'"
    _matches_onnxruntime(m, plan)


def test_keep_on_host_unknown_entry_is_an_error():
    with pytest.raises(PolicyError, match="no_such_node"):
        byoc.partition(small_cnn(), ["c_source"], keep_on_host=["no_such_node"])


def test_plan_describes_partitions():
    plan = byoc.partition(small_cnn(), ["c_source"])
    assert [p.name for p in plan.partitions] == ["c_source_0", "c_source_1"]
    first, second = plan.partitions
    assert first.onnx_nodes == ["conv1"]
    assert first.inputs[0].source == "input" and first.inputs[0].shape == (1, 3, 16, 16)
    assert first.constant_bytes == (8 * 3 * 3 * 3 + 8) * 4
    assert second.onnx_nodes == ["relu1", "pool1", "conv2", "relu2", "gap", "flatten", "fc"]
    assert second.outputs[0].shape == (1, 10)
    assert plan.offloaded_ops + len(plan.host_ops) == len(plan.decisions)
    assert byoc.partition(small_cnn(), ["c_source"]).partitions[1].bindings == second.bindings  # deterministic


def test_boundary_tensors_are_labelled_by_their_tensor_names_across_vendors():
    """Merging renames variables; labels must still name each boundary tensor.

    A node's whole result is its ONNX tensor (conv1 -> c1); a value inside a
    node (the convolution before Conv's bias add) is named by its node.
    """
    convs = _vendor("convs", {"conv2d": "relax.nn.conv2d", "matmul": "relax.matmul"})
    plan = byoc.partition(small_cnn(), [convs, "c_source"])
    edges = [(p.name, [t.source for t in p.inputs], [t.source for t in p.outputs]) for p in plan.partitions]
    assert edges == [
        ("convs_0", ["input"], ["conv1"]), ("c_source_0", ["conv1"], ["c1"]),
        ("c_source_1", ["bn1"], ["p1"]), ("convs_1", ["p1"], ["conv2"]),
        ("c_source_2", ["conv2"], ["flat"]), ("convs_2", ["flat"], ["fc"]), ("c_source_3", ["fc"], ["logits"]),
    ]


# -- the plan as a user meets it -------------------------------------------------------------
def test_plan_repr_is_one_line_and_report_renders_every_format():
    plan = byoc.partition(small_cnn(), ["c_source"], keep_on_host=["fc"])
    text = repr(plan)
    assert "\n" not in text and len(text) < 300
    assert text.startswith("<PartitionPlan 'small_cnn' for x86_64: ") and "c_source_0" in text
    report = byoc.report(plan)
    assert report.startswith("byoc partition report: small_cnn") and "kept on host by keep_on_host='fc'" in report
    assert byoc.report(plan, "json").lstrip().startswith("{") and "digraph" in byoc.report(plan, "dot")
    assert "<html" in byoc.report(plan, "html").lower()
    with pytest.raises(byoc.ByocError, match="unknown report format 'yaml'"):
        byoc.report(plan, "yaml")


def test_host_nodes_group_the_host_ops_per_onnx_node():
    """Gemm imports as two Relax ops (matmul + add); host_nodes lists the node once with both."""
    plan = byoc.partition(small_cnn(), ["c_source"], keep_on_host=["fc"])
    assert len(plan.host_ops) > len(plan.host_nodes)
    fc = [h for h in plan.host_nodes if h.node.name == "fc"]
    assert len(fc) == 1 and len(fc[0].ops) == len([d for d in plan.host_ops if d.node.name == "fc"]) >= 2
    assert fc[0].reasons == {"c_source": "kept on host by keep_on_host='fc'"}


def test_partition_shows_its_real_signature():
    import inspect

    params = inspect.signature(byoc.partition).parameters
    assert list(params)[:2] == ["model", "vendors"]
    assert {"target", "min_ops", "keep_on_host", "input_shapes", "strict"} <= set(params)
    assert "Annotate ``model`` for ``vendors``" in byoc.partition.__doc__


def _branches(*heads, reader_between=False):
    """x -> Exp (host) -> one c_source op per head, each a model output; with ``reader_between``, a host Exp
    reads the first head's result before the second head in the model's node order."""
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp")]
    outputs = []
    for k, op in enumerate(heads):
        nodes.append(helper.make_node(op, ["e"], [f"h{k}"], name=f"head{k}"))
        outputs.append(tensor(f"h{k}", [2, 3]))
        if reader_between and k == 0:
            nodes.append(helper.make_node("Exp", ["h0"], ["r"], name="reader"))
            outputs.append(tensor("r", [2, 3]))
    return model(nodes, [tensor("x", [2, 3])], outputs)


@pytest.mark.parametrize("heads", [("Relu", "Sigmoid"), ("Relu", "Sigmoid", "Tanh")])
def test_sibling_partitions_that_read_one_host_tensor_are_one(heads):
    m = _branches(*heads)
    plan = byoc.partition(m, ["c_source"])
    assert [p.onnx_nodes for p in plan.partitions] == [[f"head{k}" for k in range(len(heads))]]
    assert [t.source for t in plan.partitions[0].inputs] == ["e"]
    assert [t.source for t in plan.partitions[0].outputs] == [f"h{k}" for k in range(len(heads))]
    _assert_acyclic(plan)
    _matches_onnxruntime(m, plan)


def test_a_host_reader_between_siblings_moves_after_them():
    m = _branches("Relu", "Sigmoid", reader_between=True)
    plan = byoc.partition(m, ["c_source"])
    assert [p.onnx_nodes for p in plan.partitions] == [["head0", "head1"]]
    _assert_acyclic(plan)
    _matches_onnxruntime(m, plan)


def test_siblings_that_depend_on_each_other_stay_apart():
    # Both read e; the second also reads Exp(relu), so it runs after the first: merged, the two would be one
    # partition that reads its own result through a host op.
    nodes = [helper.make_node("Exp", ["x"], ["e"], name="exp"),
             helper.make_node("Relu", ["e"], ["r"], name="relu"),
             helper.make_node("Exp", ["r"], ["e2"], name="exp2"),
             helper.make_node("Sigmoid", ["e"], ["s"], name="sigmoid"),
             helper.make_node("Add", ["s", "e2"], ["y"], name="add")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    plan = byoc.partition(m, ["c_source"])
    assert sorted(p.onnx_nodes for p in plan.partitions) == [["relu"], ["sigmoid", "add"]]
    _assert_acyclic(plan)
    _matches_onnxruntime(m, plan)


def test_siblings_of_two_vendors_stay_apart():
    m = _branches("Relu", "Sigmoid")
    vendors = [_vendor("left", {"relu": "relax.nn.relu"}), _vendor("right", {"sigmoid": "relax.sigmoid"})]
    plan = byoc.partition(m, vendors)
    assert [(p.vendor, p.onnx_nodes) for p in plan.partitions] == [("left", ["head0"]), ("right", ["head1"])]
    _matches_onnxruntime(m, plan)


def test_a_vendor_that_cannot_build_for_the_target_warns_once(recwarn):
    """One RuntimeWarning per partition() for a vendor whose runtime does not run on the target, not one per op."""
    x86_only = Vendor("acme", (OpRule("acme.relu", "relax.nn.relu"), OpRule("acme.add", "relax.add")),
                      CSourceCodegen(), targets=("x86_64",))
    plan = byoc.partition(_cycle_model(), [x86_only, "c_source"], target="s390x")
    assert {p.vendor for p in plan.partitions} == {"c_source"}
    assert [str(w.message) for w in recwarn.list if w.category is RuntimeWarning] == [
        "acme cannot build for s390x (its runtime is x86_64 only): all its ops stay on the host"]
    recwarn.clear()
    byoc.partition(_cycle_model(), [x86_only], target="x86_64")
    assert not [w for w in recwarn.list if w.category is RuntimeWarning]

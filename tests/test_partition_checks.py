"""Partition-level control: a vendor's partition check and its options, seen where the vendor decides.

A partition check sees each whole partition as the codegen would get it (with the build's options and the
model's dim bounds). It accepts it, refuses it with a reason, or leaves some ops out. Refused ops go to the host
with the reason in the report; the vendor's other partitions stay offloaded, and the outputs stay onnxruntime's.
The build's vendor options reach rule checks, partition checks and codegen alike.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import VendorError
from byoc.vendor import SUPPORTED, LeaveOut, OpRule, Split, Vendor, VendorOption
from byoc.vendor.checks import output_bytes, within_budget

from models import const, model, onnxruntime_outputs, tensor


class Npu(CSourceCodegen):
    """The C-source codegen with an SRAM option; keeps the graphs each compile received."""

    declared_options = (VendorOption("sram_values", int, 64, "values the on-chip memory holds", minimum=1),)

    def __init__(self):
        self.graphs = []

    def compile(self, partitions, options):
        self.graphs.extend(partitions)
        return super().compile(partitions, options)


def _npu(partition_check=None, rule_check=None):
    rules = tuple(OpRule(name, f"relax.{op}", rule_check) if rule_check else OpRule(name, f"relax.{op}")
                  for name, op in (("relu", "nn.relu"), ("add", "add"), ("multiply", "multiply")))
    return Vendor("npu", rules, Npu(), partition_check=partition_check)


def _chain():
    """x -> Relu, Add, Relu, Mul -> Sigmoid (no npu rule) -> Relu, Add, Relu: two npu regions, four ops each."""
    ops = [("Relu", None), ("Add", "b1"), ("Relu", None), ("Mul", "s1"), ("Sigmoid", None), ("Relu", None),
           ("Add", "b2"), ("Relu", None)]
    nodes, previous = [], "x"
    for index, (op, constant) in enumerate(ops):
        inputs = [previous] + ([constant] if constant else [])
        previous = "y" if index == len(ops) - 1 else f"t{index}"
        nodes.append(helper.make_node(op, inputs, [previous], name=f"{op.lower()}{index}"))
    rng = np.random.default_rng(0)
    weights = [const(name, rng.standard_normal(8).astype(np.float32)) for name in ("b1", "s1", "b2")]
    return model(nodes, [tensor("x", ["batch", 8])], [tensor("y", ["batch", 8])], weights)


def _matches_onnxruntime(artifact, m):
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    (got,) = artifact.run({"x": x})
    np.testing.assert_allclose(got, onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def _host_reason(plan, node):
    (host,) = [h for h in plan.host_nodes if h.node is not None and h.node.name == node]
    return host.reasons["npu"]


def test_a_partition_check_sees_each_partition_as_the_codegen_gets_it():
    seen = []

    def check(graph):
        seen.append(graph)
        return SUPPORTED

    m = _chain()
    artifact = byoc.compile(m, [_npu(check)], dims={"batch": "1..16"}, vendor_options={"npu": {"sram_values": 32}})
    assert [p.name for p in artifact.plan.partitions] == ["npu_0", "npu_1"]
    assert [[c.op for c in g.ops] for g in seen] == [["relax.nn.relu", "relax.add", "relax.nn.relu",
                                                      "relax.multiply"], ["relax.nn.relu", "relax.add",
                                                                          "relax.nn.relu"]]
    compiled = artifact.plan.vendors[0].codegen.graphs
    for graph in seen + compiled:
        assert graph.options == {"sram_values": 32}
        assert graph.dim_bounds == {"batch": (1, 16)}
    _matches_onnxruntime(artifact, m)


def test_a_refused_partition_goes_to_the_host_alone_with_the_reason():
    def at_most_three_ops(graph):
        return SUPPORTED if len(graph.ops) <= 3 else f"{len(graph.ops)} ops > 3"

    m = _chain()
    artifact = byoc.compile(m, [_npu(at_most_three_ops)])
    plan = artifact.plan
    assert [(p.name, p.onnx_nodes) for p in plan.partitions] == [("npu_0", ["relu5", "add6", "relu7"])]
    assert _host_reason(plan, "mul3") == "the npu partition check refused partition npu_0 (4 ops): 4 ops > 3"
    assert "npu_0 (4 ops) back from npu: its partition check: 4 ops > 3" in byoc.report(plan)
    assert byoc.report(plan, "json").count('"fallbacks"') == 1
    _matches_onnxruntime(artifact, m)


def test_left_out_ops_go_to_the_host_and_the_rest_is_checked_again():
    shown = []

    def fits_sram(graph):
        """Leave out the last op of a partition whose values exceed the SRAM."""
        shown.append(len(graph.ops))
        values = sum(int(np.prod([d if isinstance(d, int) else 1 for d in c.output.shape])) for c in graph.ops)
        if values <= graph.options["sram_values"]:
            return SUPPORTED
        return LeaveOut([graph.ops[-1]], f"{values} values > SRAM {graph.options['sram_values']}")

    m = _chain()
    artifact = byoc.compile(m, [_npu(fits_sram)], vendor_options={"npu": {"sram_values": 16}})
    plan = artifact.plan
    assert [p.onnx_nodes for p in plan.partitions] == [["relu0", "add1"], ["relu5", "add6"]]
    assert shown == [4, 3, 3, 2, 2, 2]  # each round shows every partition again
    assert _host_reason(plan, "mul3").endswith("(4 ops): 32 values > SRAM 16")
    assert _host_reason(plan, "relu2").endswith("(3 ops): 24 values > SRAM 16")
    _matches_onnxruntime(artifact, m)


@pytest.mark.parametrize("check, reason", [
    (lambda graph: 1 / 0, "its partition check raised ZeroDivisionError: division by zero"),
    (lambda graph: 42, "its partition check returned 42, not SUPPORTED, a reason, LeaveOut or Split"),
    (lambda graph: [LeaveOut(graph.ops[:1], "a"), Split(graph.ops[1:2], "b")],
     "its partition check returned [LeaveOut(call...), reason='a'), Split(calls=(...), reason='b')], not "
     "SUPPORTED, a reason, LeaveOut or Split"),
    (lambda graph: LeaveOut([object()], "x"), "its partition check named an op call that is not one of the "
                                              "partition's (LeaveOut takes the graph's own OpCalls)"),
])
def test_a_broken_partition_check_costs_its_partitions_not_the_build(check, reason):
    m = _chain()
    artifact = byoc.compile(m, [_npu(check)])
    assert artifact.plan.partitions == []
    assert _host_reason(artifact.plan, "relu0").endswith(reason)
    _matches_onnxruntime(artifact, m)


def test_a_partition_check_must_be_callable_and_a_leave_out_needs_a_reason():
    with pytest.raises(VendorError, match="partition_check must be a function"):
        _npu(partition_check="yes")
    with pytest.raises(VendorError, match="LeaveOut needs a reason"):
        LeaveOut([], "")


def _relu_fits(match):
    """relu only when the SRAM holds 32 values."""
    return SUPPORTED if match.op.op != "relax.nn.relu" or match.options["sram_values"] >= 32 else "SRAM too small"


def test_the_builds_options_reach_the_rules_checks():
    m = _chain()
    small = byoc.compile(m, [_npu(rule_check=_relu_fits)], vendor_options={"npu": {"sram_values": 16}})
    assert _host_reason(small.plan, "relu0") == "SRAM too small"
    large = byoc.compile(m, [_npu(rule_check=_relu_fits)], vendor_options={"npu": {"sram_values": 32}})
    assert large.plan.offloaded_ops == 7
    _matches_onnxruntime(small, m)


def test_a_build_with_other_options_than_the_plans_cuts_again():
    m = _chain()
    plan = byoc.partition(m, [_npu(rule_check=_relu_fits)])  # the default, 64 values: relu is taken
    assert plan.offloaded_ops == 7 and plan.options_for(plan.vendors[0]) == {"sram_values": 64}
    artifact = byoc.build(plan, vendor_options={"npu": {"sram_values": 16}})
    assert _host_reason(artifact.plan, "relu0") == "SRAM too small"
    assert artifact.vendor_options == {"npu": {"sram_values": 16}}
    assert all(g.options == {"sram_values": 16} for g in artifact.plan.vendors[0].codegen.graphs)
    same = byoc.build(plan, vendor_options={"npu": {"sram_values": 40}})  # the checks judge alike: no new cut
    assert same.plan.partitions[0].bindings == plan.partitions[0].bindings
    assert same.vendor_option_settings["npu"]["sram_values"].source == "build"
    _matches_onnxruntime(artifact, m)


def test_a_split_makes_pieces_each_a_partition_checked_again():
    shown = []

    def two_ops_a_piece(graph):
        """At most two ops a partition: split after the second."""
        shown.append([c.op.split(".")[-1] for c in graph.ops])
        return SUPPORTED if len(graph.ops) <= 2 else Split([graph.ops[2]], "2 ops fill the SRAM")

    m = _chain()
    artifact = byoc.compile(m, [_npu(two_ops_a_piece)])
    plan = artifact.plan
    assert [p.onnx_nodes for p in plan.partitions] == [["relu0", "add1"], ["relu2", "mul3"], ["relu5", "add6"],
                                                       ["relu7"]]
    assert [p.split for p in plan.partitions] == ["", "2 ops fill the SRAM", "", "2 ops fill the SRAM"]
    assert plan.offloaded_ops == 7 and len(shown) == 6
    assert all(c.rule.startswith("npu.") for g in plan.vendors[0].codegen.graphs for c in g.ops)
    text = byoc.report(plan)
    assert "npu_1 split off by its vendor's partition check: 2 ops fill the SRAM" in text
    _matches_onnxruntime(artifact, m)


def test_a_split_at_the_first_op_alone_refuses_the_partition():
    m = _chain()
    artifact = byoc.compile(m, [_npu(lambda graph: Split([graph.ops[0]], "no"))])
    assert artifact.plan.partitions == []
    assert _host_reason(artifact.plan, "relu0").endswith("its partition check split it at its first op alone (no)")


def test_within_budget_leaves_out_what_is_too_large_and_splits_the_rest():
    """The checks helper for a per-partition budget: an op over it alone is left out, a total over it split."""
    budget = within_budget(lambda call: 100 if call.op == "relax.multiply" else 10, lambda graph: 25, "units")
    m = _chain()
    plan = byoc.partition(m, [_npu(budget)])
    assert [p.onnx_nodes for p in plan.partitions] == [["relu0", "add1"], ["relu2"], ["relu5", "add6"], ["relu7"]]
    assert _host_reason(plan, "mul3").endswith("(4 ops): 100 units alone, over the budget of 25")
    assert [p.split for p in plan.partitions] == ["", "units over the budget of 25"] * 2
    _matches_onnxruntime(byoc.build(plan), m)


def test_output_bytes_counts_static_results_and_refuses_symbolic_ones():
    m = _chain()
    shown = []
    byoc.partition(m, [_npu(lambda graph: shown.append(graph) or SUPPORTED)], dims={"batch": 3})
    assert {output_bytes(c) for g in shown for c in g.ops} == {3 * 8 * 4}
    shown.clear()
    byoc.partition(m, [_npu(lambda graph: shown.append(graph) or SUPPORTED)])
    with pytest.raises(ValueError, match="symbolic dims"):
        output_bytes(shown[0].ops[0])


def test_each_partition_given_back_is_one_fallback_line_when_check_and_codegen_both_give_back():
    """A partition check refuses one partition; the codegen then fails on the other, and the model is cut again:
    the check's refusal, worked out afresh by that cut, is still listed once."""

    class NoMultiply(Npu):
        def compile(self, partitions, options):
            if any(c.op == "relax.multiply" for g in partitions for c in g.ops):
                raise RuntimeError("no multiplier")
            return super().compile(partitions, options)

    def short_only(graph):
        """Only partitions with a multiply."""
        return SUPPORTED if any(c.op == "relax.multiply" for c in graph.ops) else "no multiply in it"

    m = _chain()
    vendor = Vendor("npu", _npu().rules, NoMultiply(), partition_check=short_only)
    with pytest.warns(RuntimeWarning, match="no multiplier"):
        artifact = byoc.compile(m, [vendor])  # the check refuses npu_1; npu_0 fails at codegen
    fallbacks = [(f.partition, f.reason) for f in artifact.plan.fallbacks]
    assert len(fallbacks) == len(set(fallbacks)), fallbacks
    assert [reason.split(":")[0] for _, reason in fallbacks].count("its partition check") == 1
    _matches_onnxruntime(artifact, m)

"""Static-shape vendors on models with symbolic dims: partitions specialized for the sizes the build names.

A vendor that runs static shapes only (``Vendor(static_shapes=True)``) gets each of its partitions once per size
of its symbolic dims that the build names (``specialize=``), as static graphs. The artifact dispatches each call
by its sizes, runs the partition on the host at any other size (or refuses the call, as the vendor declares),
and never runs a specialization at sizes it was not compiled for. Outputs are compared with onnxruntime at sizes
inside and outside the specializations.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.errors import DynamicShapeError, InputShapeError, StandaloneError, VendorError
from byoc.pipeline.partitioning.specializations import parse_specialize, partition_sizes
from byoc.pipeline.frontend.onnx_model import DimRange
from byoc.tools.report import REPORT_SCHEMA
from byoc.vendor import SUPPORTED, LeaveOut, OpRule, Vendor
from byoc.vendor.checks import all_of, conv_layout_nchw, dtypes, output_bytes, static_shapes

from models import const, model, onnxruntime_outputs, tensor


class Recording(CSourceCodegen):
    """The C-source codegen, keeping the graphs each compile received."""

    def __init__(self):
        self.graphs = []

    def compile(self, partitions, options):
        self.graphs.extend(partitions)
        return super().compile(partitions, options)


def _fixed(partition_check=None, other_sizes="host", rule_check=None):
    """A static-shape NPU: convs, relu and add of static shapes (or of dims the build specializes)."""
    base = rule_check or all_of(dtypes("float32"), static_shapes(4))
    rules = (OpRule("conv2d", "relax.nn.conv2d", all_of(base, conv_layout_nchw)),
             OpRule("relu", "relax.nn.relu", base), OpRule("add", "relax.add", base))
    return Vendor("fixed", rules, Recording(), static_shapes=True, other_sizes=other_sizes,
                  partition_check=partition_check)


def _residual():
    """x(batch, 3, 8, 8) -> Conv+bias, Relu, Conv, Add -> Softmax (host) -> Relu: two npu regions."""
    rng = np.random.default_rng(0)
    weights = [const("w1", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
               const("b1", rng.standard_normal(8).astype(np.float32)),
               const("w2", (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["s"], axis=1, name="softmax"),
             helper.make_node("Relu", ["s"], ["y"], name="relu2")]
    return model(nodes, [tensor("x", ["batch", 3, 8, 8])], [tensor("y", ["batch", 8, 8, 8])], weights)


def _input(batch):
    return np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def _matches_onnxruntime(run, m, batch):
    x = _input(batch)
    (got,) = run(x)
    np.testing.assert_allclose(got, onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def _called(artifact, batch) -> dict:
    """Each call one run at ``batch`` makes -> where the profile puts it."""
    return {c.name: c.where for c in artifact.profile(_input(batch), runs=1).calls if c.where != "vm"}


def test_each_partition_is_compiled_per_size_and_each_call_dispatched_by_its_sizes():
    m = _residual()
    artifact = byoc.compile(m, [_fixed()], specialize={"batch": [1, 2]})
    plan = artifact.plan
    assert [(p.name, [s.describe() for s in p.specializations]) for p in plan.partitions] == [
        ("fixed_0", ["batch=1", "batch=2"]), ("fixed_1", ["batch=1", "batch=2"])]
    graphs = plan.vendors[0].codegen.graphs
    assert [(g.symbol, g.sizes, g.inputs[0].shape) for g in graphs] == [
        ("fixed_0__batch_1", {"batch": 1}, (1, 3, 8, 8)), ("fixed_0__batch_2", {"batch": 2}, (2, 3, 8, 8)),
        ("fixed_1__batch_1", {"batch": 1}, (1, 8, 8, 8)), ("fixed_1__batch_2", {"batch": 2}, (2, 8, 8, 8))]
    assert all(not g.dims and all(isinstance(d, int) for c in g.ops for d in c.output.shape) for g in graphs)
    for batch in (1, 2, 3):
        _matches_onnxruntime(artifact.run, m, batch)
    at_two = _called(artifact, 2)
    assert at_two["fixed_0__batch_2"] == "fixed" and at_two["fixed_0"] == "dispatch"
    assert not any(name.startswith("fixed_0__") for name in _called(artifact, 3))  # batch 3: the host code


def test_the_rules_see_the_specialized_dims_as_static_and_bounded_by_their_sizes():
    seen = []

    def check(match):
        seen.append((dict(match.specialized), match.dim_bounds["batch"]))
        return static_shapes(4)(match)

    plan = byoc.partition(_residual(), [_fixed(rule_check=check)], specialize={"batch": [2, 8]})
    assert seen and all(entry == ({"batch": (2, 8)}, (2, 8)) for entry in seen)
    assert plan.offloaded_ops == 6


def test_a_size_its_partition_check_refuses_runs_on_the_host_with_the_reason_in_the_report():
    budget = 2 * 8 * 8 * 8 * 4  # bytes: batch 2 fits, batch 4 does not

    def fits(graph):
        too_big = [c for c in graph.ops if output_bytes(c) > budget]
        return SUPPORTED if not too_big else f"{output_bytes(too_big[0])} bytes > SRAM {budget}"

    m = _residual()
    artifact = byoc.compile(m, [_fixed(fits)], specialize={"batch": [2, 4]})
    part = artifact.plan.partitions[0]
    assert [(s.describe(), s.refused) for s in part.specializations] == [("batch=2", ""),
                                                                         ("batch=4", "8192 bytes > SRAM 4096")]
    assert [g.symbol for g in artifact.plan.vendors[0].codegen.graphs] == ["fixed_0__batch_2", "fixed_1__batch_2"]
    text = byoc.report(artifact.plan)
    assert "fixed_0 (fixed): batch=2 (fixed_0__batch_2)" in text
    assert "batch=4: on the host, its partition check refused it: 8192 bytes > SRAM 4096" in text
    assert "any other size: on the host" in text
    report = json.loads(byoc.report(artifact.plan, "json"))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["partitions"][0]["specializations"][1] == {"sizes": {"batch": 4}, "symbol": "fixed_0__batch_4",
                                                             "refused": "8192 bytes > SRAM 4096"}
    assert not any(name.startswith("fixed_0__") for name in _called(artifact, 4))
    for batch in (2, 4):
        _matches_onnxruntime(artifact.run, m, batch)


def test_a_partition_refused_at_every_size_goes_to_the_host():
    artifact = byoc.compile(_residual(), [_fixed(lambda graph: "never")], specialize={"batch": [1, 2]})
    assert artifact.plan.partitions == []
    reasons = {h.node.name: h.reasons["fixed"] for h in artifact.plan.host_nodes}
    assert reasons["conv1"].endswith("at every size it names (batch=1: never)")


def test_a_leave_out_at_one_size_refuses_that_size_while_another_takes_the_partition_whole():
    def no_add_from(batch):
        def check(graph):
            adds = [c for c in graph.ops if c.op == "relax.add"]
            return LeaveOut(adds, "no adder this wide") if adds and graph.sizes["batch"] >= batch else SUPPORTED
        return check

    m = _residual()
    artifact = byoc.compile(m, [_fixed(no_add_from(2))], specialize={"batch": [1, 2]})
    (first, _) = artifact.plan.partitions
    assert "add" in first.onnx_nodes
    assert [(s.describe(), s.refused) for s in first.specializations] == [("batch=1", ""),
                                                                          ("batch=2", "no adder this wide")]
    _matches_onnxruntime(artifact.run, m, 2)
    everywhere = byoc.compile(m, [_fixed(no_add_from(1))], specialize={"batch": [1, 2]})  # no size takes it whole
    assert "add" not in [n for p in everywhere.plan.partitions for n in p.onnx_nodes]
    assert all(s.refused == "" for p in everywhere.plan.partitions for s in p.specializations)
    _matches_onnxruntime(everywhere.run, m, 2)


def test_a_vendor_that_refuses_other_sizes_refuses_the_call_in_every_form_of_the_artifact(tmp_path):
    m = _residual()
    artifact = byoc.compile(m, [_fixed(other_sizes="refuse")], specialize={"batch": [1, 2]})
    with pytest.raises(InputShapeError, match=r"batch=3: partition fixed_0 of vendor 'fixed' was built for "
                                              r"batch=1; batch=2 only") as err:
        artifact.run(_input(3))
    assert err.value.dim == "batch"
    assert "any other size: refused by the artifact" in byoc.report(artifact.plan)
    library = artifact.export(tmp_path / "model.so")
    loaded = byoc.load(library)
    with pytest.raises(InputShapeError, match="refuses other sizes"):
        loaded.run(_input(3))
    _matches_onnxruntime(loaded.run, m, 2)
    with pytest.raises(StandaloneError, match="was built for batch=1; batch=2 only"):
        artifact.export_standalone(tmp_path / "standalone", dims={"batch": 3})


def test_the_standalone_program_runs_the_specialization_of_its_sizes_or_the_host_code(tmp_path):
    m = _residual()
    artifact = byoc.compile(m, [_fixed()], specialize={"batch": [2]})
    _matches_onnxruntime(artifact.run_emulated, m, 2)
    source = (artifact.export_standalone(tmp_path / "two", dims={"batch": 2}).directory / "model.c").read_text()
    assert "fixed_0__batch_2" in source
    source = (artifact.export_standalone(tmp_path / "three", dims={"batch": 3}).directory / "model.c").read_text()
    assert "fixed_0" not in source  # the partition's ops, as host kernels
    _matches_onnxruntime(artifact.run_emulated, m, 3)


def test_a_symbolic_dim_the_build_names_no_sizes_for_is_the_partitions_reason():
    plan = byoc.partition(_residual(), [_fixed()])
    assert plan.partitions == []
    assert {h.reasons["fixed"] for h in plan.host_nodes if h.node.name == "relu1"} == {
        "dim 'batch' is dynamic (static shapes only)"}
    anything = _fixed(rule_check=lambda match: SUPPORTED)  # rules that take symbolic dims: the partition refuses
    plan = byoc.partition(_residual(), [anything])
    assert plan.partitions == []
    (reason,) = {h.reasons["fixed"] for h in plan.host_nodes if h.node.name == "relu1"}
    assert reason.endswith("dim 'batch' is symbolic and fixed runs static shapes only: name the sizes to compile "
                           "it for (specialize={'batch': [...]})")


def test_the_cli_specializes_and_reports_the_sizes(tmp_path, capsys):
    from byoc.partition.__main__ import main

    path = tmp_path / "residual.onnx"
    path.write_bytes(_residual().SerializeToString())
    byoc.vendor.register_vendor(_fixed())
    try:
        assert main([str(path), "--vendor", "fixed", "--specialize", "batch=1,2"]) == 0
    finally:
        byoc.vendor.unregister_vendor("fixed")
    out = capsys.readouterr().out
    assert "fixed_0 (fixed): batch=1 (fixed_0__batch_1); batch=2 (fixed_0__batch_2)" in out


def test_specialize_is_checked_against_the_models_dims():
    dims = {"batch": DimRange("batch", 1, 8), "seq": DimRange("seq")}
    assert parse_specialize({"batch": (1, 3), "seq": 128}, dims) == (
        {"batch": 1, "seq": 128}, {"batch": 2, "seq": 128}, {"batch": 3, "seq": 128})
    profiles = parse_specialize([{"batch": 1, "seq": 128}, {"batch": "8", "seq": [64, 128]}], dims)
    assert profiles == ({"batch": 1, "seq": 128}, {"batch": 8, "seq": 64}, {"batch": 8, "seq": 128})
    assert partition_sizes(profiles, ["batch"]) == [{"batch": 1}, {"batch": 8}]
    assert partition_sizes(profiles, ["width"]) == []
    with pytest.raises(DynamicShapeError, match="no symbolic dim of the model"):
        parse_specialize({"width": 4}, dims)
    with pytest.raises(DynamicShapeError, match="9 is outside the dim's range 1..8"):
        parse_specialize({"batch": [2, 9]}, dims)
    with pytest.raises(DynamicShapeError, match="give a size"):
        parse_specialize({"batch": 2.5}, dims)
    with pytest.raises(DynamicShapeError, match="more than 64 sizes"):
        parse_specialize({"seq": "1..65"}, dims)
    with pytest.raises(VendorError, match="other_sizes must be one of host, refuse"):
        dataclasses.replace(_fixed(), other_sizes="pad")


def test_measured_placement_places_static_shape_partitions():
    m = _residual()
    artifact = byoc.compile(m, [_fixed()], specialize={"batch": [2]}, placement="measured",
                            sample_inputs={"x": _input(2)})
    decisions = artifact.plan.placement.decisions
    assert decisions and all(d.times_ms["fixed"] > 0 for d in decisions)
    _matches_onnxruntime(artifact.run, m, 2)

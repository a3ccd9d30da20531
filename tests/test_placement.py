"""Measured placement (``byoc.compile(..., placement="measured")``): the decisions follow the times, the
artifact still computes what onnxruntime does, and the times and decisions survive export and load.

Tests check structure and the decision rule, not speed: the times come from a cost hook where a decision
must be exact, and from measurements only where the gap is orders of magnitude (a 1e6 ms estimate)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import onnx.helper as oh
import pytest

import byoc
from byoc.codegens.c_source import CSourceCodegen
from byoc.pipeline.placement.host_bound import (COVERED_SHARE, MIN_VENDOR_RATE, could_settle, distinct_heavy_ops, heaviest,
                                      host_lower_bounds)
from byoc.pipeline.placement.placement import choose
from byoc.pipeline.artifact.placement_record import PlacedPartition
from byoc.tools.report import REPORT_SCHEMA, build_report, render
from byoc.vendor import OpRule, Vendor, always
from models import const, model as make_model, onnxruntime_outputs, random_inputs, small_cnn, tensor


class _Priced(CSourceCodegen):
    """The C source codegen with a cost hook that answers what the test injects."""

    def __init__(self, ms):
        super().__init__()
        self.ms = ms
        self.asked = []

    def estimate_cost(self, partition):
        self.asked.append(partition.symbol)
        if isinstance(self.ms, Exception):
            raise self.ms
        return self.ms


def _priced(ms, name="priced"):
    return Vendor(name, (OpRule(f"{name}.conv", "relax.nn.conv2d", always),
                         OpRule(f"{name}.relu", "relax.nn.relu", always)), _Priced(ms))


@pytest.mark.parametrize("times, vendor, min_speedup, place", [
    ({"dnnl": 1.0, "host": 1.1}, "dnnl", 1.1, "dnnl"),  # exactly the factor: kept
    ({"dnnl": 1.0, "host": 1.09}, "dnnl", 1.1, "host"),  # faster, but not by the factor
    ({"dnnl": 1.0, "host": 0.5}, "dnnl", 1.1, "host"),
    ({"c_source": 5.0, "host": 3.0, "dnnl": 1.0}, "c_source", 1.1, "dnnl"),  # the fastest other place
    ({"c_source": 5.0, "host": 1.0, "dnnl": 3.0}, "c_source", 1.1, "host"),
    ({"dnnl": 1.0, "host": 1.09}, "dnnl", 1.0, "dnnl"),
    ({"dnnl": 1.0}, "dnnl", 1.1, "dnnl"),  # nowhere else to run it
])
def test_the_decision_rule(times, vendor, min_speedup, place):
    chosen, reason = choose(times, vendor, min_speedup)
    assert chosen == place
    assert reason.startswith({"host": "kept on host: ", vendor: f"kept on {vendor}: "}.get(place, f"placed on {place}: "))
    for where, ms in times.items():  # the reason quotes every time
        assert f"{where} {ms:.3g} ms" in reason


@pytest.mark.parametrize("estimate, place", [(1e6, "host"), (1e-6, "priced")])
def test_measured_placement_follows_the_cost_hook(estimate, place):
    vendor = _priced(estimate)
    model = small_cnn()
    inputs = random_inputs(model)
    artifact = byoc.compile(model, [vendor], placement="measured", sample_inputs=inputs)
    placement = artifact.placement
    assert placement is not None and placement == artifact.plan.placement
    assert len(placement.decisions) >= 1 and vendor.codegen.asked
    for decision in placement.decisions:
        assert decision.estimated == ["priced"] and decision.times_ms["priced"] == estimate
        assert decision.times_ms["host"] > 0
        # the decision is the rule applied to the recorded times, exactly
        assert (decision.place, decision.reason) == choose(decision.times_ms, "priced", 1.1, ["priced"])
        assert decision.place == place
    assert placement.candidate_builds == 1  # the whole model on the host; no other vendor
    if place == "host":
        assert not artifact.plan.partitions
        offloaded = {d.binding for d in byoc.partition(model, [vendor]).decisions.values() if not d.on_host}
        reasons = {artifact.plan.decisions[b].reasons["priced"] for b in offloaded}
        assert offloaded and all(r.startswith("kept on host: priced 1e+06 ms (estimated), host ")
                                 and r.endswith(" ms (measured placement)") for r in reasons)
    else:
        assert artifact.plan.partitions and all(p.vendor == "priced" for p in artifact.plan.partitions)
    got = artifact.run(inputs)
    for g, want in zip(got, onnxruntime_outputs(model, inputs)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_a_cost_hook_that_raises_is_warned_about_and_measured_instead():
    vendor = _priced(RuntimeError("no price list"), "broken")
    model = small_cnn()
    with pytest.warns(RuntimeWarning, match=r"vendor 'broken': estimate_cost failed on broken_0 \(RuntimeError: "
                                            r"no price list\); measuring it instead"):
        artifact = byoc.compile(model, [vendor], placement="measured", sample_inputs=random_inputs(model))
    for decision in artifact.placement.decisions:
        assert decision.estimated == [] and decision.times_ms["broken"] > 0 and decision.times_ms["host"] > 0


def test_a_partition_moves_to_a_faster_vendor_that_takes_all_its_ops():
    """c_source comes first in priority and takes the convs; dnnl, timed on the same ops, is far faster."""
    model = small_cnn()
    inputs = random_inputs(model)
    artifact = byoc.compile(model, ["c_source", "dnnl"], placement="measured", sample_inputs=inputs)
    decisions = artifact.placement.decisions
    by_c_source = [d for d in decisions if d.vendor == "c_source"]
    assert by_c_source
    for decision in decisions:
        assert (decision.place, decision.reason) == choose(decision.times_ms, decision.vendor, 1.1)
    for decision in by_c_source:
        assert set(decision.times_ms) == {"c_source", "host", "dnnl"}  # dnnl takes conv and relu
    # the whole model on the host, and each partition's ops on the other vendor
    assert artifact.placement.candidate_builds == 1 + len(decisions)
    assert {p.vendor for p in artifact.plan.partitions} <= {d.place for d in decisions} - {"host"}
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(model, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _conv_chain():
    """Two identical 3x3 convs of 16 channels at 24x24 and a 1x1 conv to 8, with ReLUs between: one partition
    of the priced vendor, with two distinct heavy ops."""
    rng = np.random.default_rng(0)
    w3 = [const(f"w{i}", rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1) for i in range(2)]
    w1 = const("w2", rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.1)
    nodes = [oh.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["a"], ["b"]),
             oh.make_node("Conv", ["b", "w1"], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["d"]),
             oh.make_node("Conv", ["d", "w2"], ["y"])]
    return make_model(nodes, [tensor("x", [1, 16, 24, 24])], [tensor("y", [1, 8, 24, 24])], [*w3, w1])


def test_heavy_ops_are_grouped_counted_and_ranked():
    ranked = distinct_heavy_ops(byoc.import_model(_conv_chain()).mod["main"])
    per_output_3x3, per_output_1x1 = 16 * 3 * 3, 16
    assert [(op.count, op.macs) for op in ranked] == [(2, 16 * 24 * 24 * per_output_3x3),
                                                      (1, 8 * 24 * 24 * per_output_1x1)]
    # the two 3x3 convs hold 97% of the multiply-adds: they alone are enough for the bound
    assert heaviest(ranked) == ranked[:1] and COVERED_SHARE < 0.97


def test_no_bound_without_heavy_ops_or_static_shapes():
    relu = make_model([oh.make_node("Relu", ["x"], ["y"])], [tensor("x", [1, 4])], [tensor("y", [1, 4])])

    def must_not_build(*_):
        raise AssertionError("nothing is built when a partition has no heavy op")

    functions = {"convs": byoc.import_model(_conv_chain()).mod["main"], "relu": byoc.import_model(relu).mod["main"]}
    assert host_lower_bounds(functions, {"convs": 1e-6, "relu": 1e-6}, must_not_build, 3, must_not_build) == {}
    assert not could_settle(distinct_heavy_ops(functions["relu"]), 1.0)
    # a vendor at scalar speed on the heavy ops is not worth a bound; one at twice the floor is
    ranked = distinct_heavy_ops(functions["convs"])
    floor_ms = sum(op.count * op.macs for op in ranked) / MIN_VENDOR_RATE * 1e3
    assert could_settle(ranked, floor_ms / 2) and not could_settle(ranked, floor_ms * 2)
    assert host_lower_bounds({"convs": functions["convs"]}, {"convs": floor_ms * 2}, must_not_build, 3,
                             must_not_build) == {}
    matmul = make_model([oh.make_node("MatMul", ["x", "w"], ["y"])], [tensor("x", ["batch", 4])],
                        [tensor("y", ["batch", 2])], [const("w", np.ones((4, 2), np.float32))])
    assert distinct_heavy_ops(byoc.import_model(matmul).mod["main"]) == []  # a symbolic dim: no size to time


def test_a_lower_bound_from_the_heaviest_ops_settles_a_clear_win_without_the_whole_host_build():
    model = _conv_chain()
    inputs = random_inputs(model)
    artifact = byoc.compile(model, [_priced(1e-6)], placement="measured", sample_inputs=inputs)
    (decision,) = artifact.placement.decisions
    assert decision.bounds == {"host": "its 1 heaviest distinct op(s), 97% of its multiply-adds"}
    assert decision.place == "priced" and decision.times_ms["host"] > 0
    assert (decision.place, decision.reason) == choose(decision.times_ms, "priced", 1.1, ["priced"], decision.bounds)
    assert decision.reason.startswith("kept on priced: priced 1e-06 ms (estimated), host >= ")
    assert artifact.placement.candidate_builds == 1  # the heaviest ops on the host, not the whole model
    assert "priced 1e-06 ms (estimated), host >= " in render(build_report(artifact.plan, "conv_chain"), "text")
    # a record written before bounds existed still loads
    record = decision.as_json()
    del record["bounds"]
    assert PlacedPartition.from_json(record).bounds == {}
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(model, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_decisions_survive_export_and_load_and_reach_the_reports(tmp_path):
    import jsonschema

    model = small_cnn()
    artifact = byoc.compile(model, [_priced(1e6)], placement="measured", sample_inputs=random_inputs(model))
    loaded = byoc.load(artifact.export(tmp_path / "m.so"))
    assert loaded.placement == artifact.placement
    report = build_report(artifact.plan, "small_cnn")
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["placement"] == artifact.placement.as_json()
    text = render(report, "text")
    assert "Placement (measured: a vendor keeps a partition when it is at least 1.1x faster" in text
    decision = artifact.placement.decisions[0]
    assert re.search(rf"{decision.partition} +priced +host [0-9.e+-]+ ms, priced 1e\+06 ms \(estimated\) +host\n", text)
    assert "<h2>Placement (measured" in render(report, "html")
    assert byoc.compile(model, ["c_source"]).placement is None


def test_symbolic_dims_need_sample_inputs_or_fixed_dims():
    m = make_model([oh.make_node("Relu", ["x"], ["y"])], [tensor("x", ["batch", 4])], [tensor("y", ["batch", 4])])
    with pytest.raises(byoc.InputShapeError, match=r"input 'x' has symbolic dims batch: give sample inputs .* or "
                                                   r"fix the dims \(dims= / --dim NAME=SIZE\)"):
        byoc.compile(m, ["c_source"], placement="measured")
    x = np.ones((2, 4), np.float32)
    artifact = byoc.compile(m, ["c_source"], placement="measured", sample_inputs={"x": x})
    assert artifact.placement.decisions and artifact.run({"x": -x})[0].shape == (2, 4)  # still every size


def test_bad_placement_arguments_and_a_foreign_target_are_named():
    with pytest.raises(byoc.ByocError, match="placement must be one of rules, measured, got 'fastest'"):
        byoc.compile(small_cnn(), ["c_source"], placement="fastest")
    with pytest.raises(byoc.ByocError, match="min_speedup must be at least 1.0"):
        byoc.compile(small_cnn(), ["c_source"], placement="measured", min_speedup=0.5)
    with pytest.raises(byoc.TargetError, match="measured placement times every candidate on this machine, which "
                                               "cannot run s390x code"):
        byoc.compile(small_cnn(), ["c_source"], "s390x", placement="measured")


def test_cli_places_by_measurement(tmp_path):
    model = small_cnn()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **random_inputs(model))
    cli = [sys.executable, "-m", "byoc.partition", str(path), "--vendor", "c_source,dnnl"]
    done = subprocess.run(cli + ["--placement", "measured", "--inputs", str(inputs), "--format", "json", "-q"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["placement"]["decisions"] and report["placement"]["min_speedup"] == 1.1
    placed = {d["place"] for d in report["placement"]["decisions"]}
    assert set(report["summary"]["partitions"]) >= placed - {"host"}
    done = subprocess.run(cli + ["--min-speedup", "1.5"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "--min-speedup is only used with --placement measured" in done.stderr


def test_when_nothing_moves_the_rule_based_build_is_relinked_not_built_again(monkeypatch, tmp_path):
    """The decisions are recorded by relinking the rule-based build's parts (byoc.host.relink): the host program
    is built for the rules (in parts) and for the heaviest ops' bound, and not a third time. The relinked artifact
    computes what onnxruntime does, and its decisions survive export and load."""
    from byoc.pipeline.build import builder

    linkable = []
    compile_host = builder.compile_host

    def counted(*args, **kwargs):
        linkable.append(kwargs.get("linkable", False))
        return compile_host(*args, **kwargs)

    monkeypatch.setattr(builder, "compile_host", counted)
    model = _conv_chain()
    inputs = random_inputs(model)
    artifact = byoc.compile(model, [_priced(1e-6)], placement="measured", sample_inputs=inputs)
    assert [d.place for d in artifact.placement.decisions] == ["priced"]
    assert linkable == [True, False]
    assert artifact.metadata["placement"] == artifact.placement.as_json()
    loaded = byoc.load(artifact.export(tmp_path / "m.so"))
    assert loaded.placement == artifact.placement
    want = onnxruntime_outputs(model, inputs)
    for got in (artifact.run(inputs), loaded.run(inputs)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)

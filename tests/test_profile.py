"""Artifact.profile: every partition and host function appears, the times are positive and add up, a dnnl
partition's steps name what ran them, the trace is Trace Event JSON, and bad inputs get run()'s errors.
Structure and consistency only: no speed is asserted."""

from __future__ import annotations

import json

import numpy as np
import pytest

import byoc
from byoc.errors import InputShapeError
from byoc.examples import small_cnn
from byoc.pipeline.artifact.profile import PROFILE_SCHEMA

pytest.importorskip("byoc.codegens.dnnl")


@pytest.fixture(scope="module")
def artifact():
    # the head stays on the host: a profile with both sides
    return byoc.compile(small_cnn(), vendors=["dnnl"], keep_on_host=["gap", "flatten", "fc"])


def _inputs(artifact):
    return [np.random.default_rng(0).standard_normal(s.shape).astype(np.float32) for s in artifact.inputs]


def test_every_partition_and_host_function_appears_and_the_parts_add_up(artifact):
    profile = artifact.profile(_inputs(artifact), runs=5)
    names = {c.name for c in profile.calls}
    assert {p.name for p in artifact.plan.partitions} <= names
    assert any(c.where == "host" for c in profile.calls) and any(c.where == "vm" for c in profile.calls)
    (partition,) = profile.partitions
    assert partition.where == "dnnl" and partition.calls == 1
    assert set(partition.onnx_nodes) == set(artifact.plan.partitions[0].onnx_nodes)
    assert all(c.median_ms > 0 and c.min_ms <= c.median_ms for c in profile.calls)
    parts = sum(c.median_ms for c in profile.calls) + profile.outside_ms
    assert parts == pytest.approx(profile.hooked_median_ms, rel=0.10)  # medians of parts against the median run
    assert sum(c.share for c in profile.calls) <= 1.0 + 1e-9
    # the partition's steps: what the runtime ran, in the order of Artifact.implementations, each timed
    (steps,) = artifact.implementations().values()
    assert [s.implementation for s in partition.steps] == steps
    assert all(s.ms > 0 for s in partition.steps) and sum(s.ms for s in partition.steps) <= partition.median_ms * 1.5
    assert "dnnl" in str(profile) and profile.to_json()["schema"] == PROFILE_SCHEMA
    # each host function names the user's nodes it computes: together, every node with an op on the host
    # but a reshape (a view the VM makes itself, with no function)
    host = [c for c in profile.calls if c.where == "host"]
    assert all(c.onnx_nodes for c in host), host
    assert {n for c in host for n in c.onnx_nodes} == _computed_on_host(artifact)


def test_the_trace_is_trace_event_json(artifact, tmp_path):
    profile = artifact.profile(_inputs(artifact), runs=2)
    events = json.loads(profile.to_chrome_trace(tmp_path / "t.json").read_text())["traceEvents"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    partition = next(e for e in events if e["name"] == profile.partitions[0].name)
    assert partition["args"]["where"] == "dnnl" and partition["args"]["steps_ms_per_run"]
    assert {e["name"] for e in events} >= {c.name for c in profile.calls if c.where != "vm"}


def test_an_ordinary_run_times_no_step(artifact):
    """Step timing is on only during a profile's instrumented runs: the runtime's counters do not move on run()."""
    from byoc.pipeline.artifact.profile import _step_times, runtime_modules

    artifact.profile(_inputs(artifact), runs=1)
    (module,) = runtime_modules(artifact._loaded_library(), "get_step_times").values()
    before = _step_times(module)
    artifact.run(_inputs(artifact))
    assert _step_times(module) == before and all(calls > 0 for calls, _ in before)


def test_bad_inputs_get_the_errors_of_run(artifact):
    with pytest.raises(InputShapeError):
        artifact.profile([np.ones((1, 3, 5, 5), np.float32)])
    with pytest.raises(ValueError, match="runs >= 1"):
        artifact.profile(_inputs(artifact), runs=0)


def test_a_loaded_artifact_profiles_with_its_partitions_nodes(artifact, tmp_path):
    loaded = byoc.load(artifact.export(tmp_path / "m.so"))
    profile = loaded.profile(_inputs(artifact), runs=2)
    (partition,) = profile.partitions
    assert partition.onnx_nodes == list(artifact.plan.partitions[0].onnx_nodes) and partition.steps
    assert loaded.host_calls() == artifact.host_calls() and loaded.host_calls()
    assert {n for c in profile.calls if c.where == "host" for n in c.onnx_nodes} == _computed_on_host(artifact)


def _computed_on_host(artifact) -> set:
    nodes = {h.node.name for h in artifact.plan.host_nodes if set(h.ops) != {"relax.reshape"}}
    assert nodes
    return nodes

"""A vendor with a device memory: values kept on the device between its partitions, transfers counted.

The simulated device (:mod:`sim_device`) has a memory of its own, handed out full of NaN bytes: each copy in and
out is a real copy, which it counts. The outputs are compared with onnxruntime, so a copy byoc leaves out makes
them wrong; the device's counts are compared with what the report says each partition moves.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.errors import VendorError
from byoc.tools.report import REPORT_SCHEMA
from byoc.vendor import SUPPORTED, Split
from byoc.vendor.device import DeviceMemory

import sim_device
from models import const, model, onnxruntime_outputs, tensor


def _model(batch=2):
    """conv1, relu1 -> conv2, add -> Erf (host) -> relu2, mul: the device's partitions, with r1 a model output and
    a read by the host and the device alike."""
    rng = np.random.default_rng(0)
    weights = [const("w1", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
               const("w2", (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
             helper.make_node("Erf", ["a"], ["e"], name="erf"),
             helper.make_node("Relu", ["e"], ["z"], name="relu2"),
             helper.make_node("Mul", ["z", "a"], ["y"], name="mul")]
    return model(nodes, [tensor("x", [batch, 3, 8, 8])], [tensor("y", [batch, 8, 8, 8]), tensor("r1", [batch, 8, 8, 8])],
                 weights)


def _one_conv_a_partition(graph):
    convs = [c for c in graph.ops if c.op == "relax.nn.conv2d"]
    return Split(convs[1:2], "one conv a partition") if len(convs) > 1 else SUPPORTED


def _run(m, plan, path, batches=(2,)):
    """Build and export ``plan``, load it, run it once per batch size against onnxruntime; the device's counters."""
    loaded = byoc.load(byoc.build(plan).export(path))
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        for got, want in zip(loaded.run({"x": x}), onnxruntime_outputs(m, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return sim_device.counters(path)


def _totals(plan) -> tuple[int, int, int]:
    moved = plan.transfers().values()
    return (sum(t.to_device for t in moved), sum(t.to_host for t in moved), sum(t.weights for t in moved))


@pytest.mark.parametrize("check", [None, _one_conv_a_partition], ids=["merged", "split"])
def test_the_devices_copies_are_what_the_report_says_each_partition_moves(check, tmp_path):
    m = _model()
    plan = byoc.partition(m, [sim_device.vendor(partition_check=check)])
    to_device, to_host, weights = _totals(plan)
    counted = _run(m, plan, tmp_path / "model.so")
    assert counted["sim_bytes_to_device"] == to_device + weights  # the weights go once, on the first run
    assert counted["sim_bytes_to_host"] == to_host
    assert counted["sim_live_bytes"] > 0  # the weights and the slots stay on the device


def test_values_only_the_devices_partitions_read_never_cross_to_the_host(tmp_path):
    plan = byoc.partition(_model(), [sim_device.vendor(partition_check=_one_conv_a_partition)])
    assert [p.onnx_nodes for p in plan.partitions] == [["conv1", "relu1"], ["conv2", "add"], ["relu2", "mul"]]
    moved = plan.transfers()
    nbytes = 2 * 8 * 8 * 8 * 4
    # r1 is a model output: copied out, and read on the device by sim_1, which copies nothing in
    assert (moved["sim_0"].to_host, moved["sim_1"].to_device, moved["sim_1"].kept) == (nbytes, 0, nbytes)
    assert moved["sim_1"].resident_inputs == ("sim_0:0",)
    # a: read by the host's Erf (copied out) and by sim_2 on the device; Erf's result is copied in
    assert (moved["sim_1"].to_host, moved["sim_2"].to_device, moved["sim_2"].resident_inputs) == (
        nbytes, nbytes, ("sim_1:0",))
    graph = plan.graph(plan.partition("sim_1"))
    assert (graph.resident_inputs, graph.resident_outputs, graph.device_only_outputs) == (
        {0: "sim_0:0"}, {0: "sim_1:0"}, frozenset())


def test_merging_never_adds_a_transfer():
    merged = byoc.partition(_model(), [sim_device.vendor()])
    split = byoc.partition(_model(), [sim_device.vendor(partition_check=_one_conv_a_partition)])
    assert len(merged.partitions) < len(split.partitions)
    assert sum(_totals(merged)[:2]) <= sum(_totals(split)[:2])


def test_symbolic_dims_grow_the_devices_slots_per_call(tmp_path):
    m = _model(batch="batch")
    plan = byoc.partition(m, [sim_device.vendor(partition_check=_one_conv_a_partition)])
    assert plan.transfers()["sim_1"].to_host is None  # per call: a dim is symbolic
    counted = _run(m, plan, tmp_path / "model.so", batches=(1, 3, 2))
    nbytes = 8 * 8 * 8 * 4  # per image
    weights = sum(t.weights for t in plan.transfers().values())
    # per image: x in (3*8*8*4) and Erf's result in; r1, a (twice: sim_1 to the host) and y out
    assert counted["sim_bytes_to_device"] == weights + 6 * (3 * 8 * 8 * 4 + nbytes)
    assert counted["sim_bytes_to_host"] == 6 * 3 * nbytes


def test_the_report_and_the_runtime_memory_show_the_device_apart(tmp_path):
    m = _model()
    plan = byoc.partition(m, [sim_device.vendor(partition_check=_one_conv_a_partition)])
    text = byoc.report(plan)
    assert "Device memory (sim: simulated device)" in text
    assert "sim_1: 0 bytes in, 4096 bytes out; reads sim_0:0 there; leaves sim_1:0 there" in text
    report = json.loads(byoc.report(plan, "json"))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, REPORT_SCHEMA)
    assert report["device"]["sim"]["to_device_bytes"] == _totals(plan)[0]
    artifact = byoc.build(plan)
    memory = artifact.runtime_memory
    assert memory["sim_1"].device_bytes == 2304 + 4096  # conv2's weights and its temporary, on the device
    assert memory["sim_1"].workspace_bytes == 0  # nothing in host memory per call


def test_the_standalone_program_runs_on_the_device_too():
    m = _model()
    artifact = byoc.compile(m, [sim_device.vendor(partition_check=_one_conv_a_partition)])
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    for got, want in zip(artifact.run_emulated({"x": x}), onnxruntime_outputs(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_device_memory_must_name_functions_its_source_defines():
    with pytest.raises(VendorError, match="its source does not define to_host function 'copy_out'"):
        DeviceMemory("npu", sim_device.SOURCE, "sim_alloc", "sim_release", "sim_to_device", "copy_out")
    with pytest.raises(VendorError, match="alloc must name a C function"):
        DeviceMemory("npu", sim_device.SOURCE, "sim alloc", "sim_release", "sim_to_device", "sim_to_host")

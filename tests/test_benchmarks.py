"""Smoke tests of benchmarks/run.py, where_time_goes.py, roofline.py and deployed.py on tiny onnx.helper models.

No torch, no timing assertions.

Everything runs in subprocesses, as the scripts are run: each puts benchmarks/ first on sys.path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "run.py"
WHERE_TIME_GOES = ROOT / "benchmarks" / "where_time_goes.py"
GOALS = ["byoc / onnxruntime latency on every model", "speedup vs plain TVM on every model",
         "boundary overhead per offloaded call", "partitioning 10k ops vs TVM's passes alone"]


def _run(cmd, timeout=900):
    proc = subprocess.run([sys.executable, *map(str, cmd)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_quick_run_times_every_default_vendor_set_in_its_own_process(tmp_path):
    out = tmp_path / "bench.json"
    stdout = _run([RUN, "--quick", "--models", "tiny_mlp", "--scaling-sizes", "30", "--boundary-ops", "6",
                   "--build", tmp_path / "build", "--json", out])
    for heading in ("## Latency", "## Partition scaling", "## Boundary overhead", "## Skipped", "## Goals"):
        assert heading in stdout
    for key in ("onnxruntime", "plain_tvm", "byoc[c_source]", "byoc[json_runtime]", "byoc[dnnl]"):
        assert f"| tiny_mlp | {key} |" in stdout

    report = json.loads(out.read_text())
    assert set(report) >= {"machine", "settings", "models", "scaling", "boundary", "skipped", "goals"}
    configs = report["models"]["tiny_mlp"]
    assert list(configs) == ["onnxruntime", "plain_tvm", "byoc[c_source]", "byoc[json_runtime]", "byoc[dnnl]"]
    assert all(c["status"] == "ok" for c in configs.values()), configs
    assert configs["onnxruntime"]["latency_ms"] > 0
    for key in ("byoc[c_source]", "byoc[json_runtime]", "byoc[dnnl]"):
        entry = configs[key]
        for field in ("latency_ms", "vs_onnxruntime", "speedup_vs_plain_tvm", "compile_s", "partitions", "memory",
                      "max_abs_err_vs_onnxruntime"):
            assert field in entry, (key, field)
        memory = entry["memory"]
        assert memory["planned_bytes"] >= memory["lower_bound_bytes"] >= 0
        # the whole model: every vendor runtime reports its workspace (the tiny MLP has intermediates)
        assert memory["total_planned_bytes"] >= memory["planned_bytes"] and memory["model_lower_bound_bytes"] > 0
        # outputs saved by the timing process, compared with onnxruntime's: the same function
        assert entry["max_abs_err_vs_onnxruntime"] < 1e-4
    assert [(r["graph"], r["ops"], r["status"], r["vendors"]) for r in report["scaling"]] == [
        ("chain", 30, "ok", "c_source"), ("dag", 30, "ok", "c_source")]
    assert {"tvm_s", "byoc_s", "ratio"} <= set(report["scaling"][0])
    assert [(r["vendors"], r["partitions"]) for r in report["boundary"]] == [
        ("c_source", 3), ("json_runtime", 3), ("dnnl", 3)]
    assert all("us_per_call" in r for r in report["boundary"])

    assert [g["goal"] for g in report["goals"]] == GOALS
    for goal in report["goals"]:
        assert goal["met"] in (True, False) and goal["vendors"] and goal["value"] is not None, goal
        assert f"| {goal['goal']} | {goal['target']} | {goal['vendors']} |" in stdout
    assert "at 30 ops, 10k not measured" in report["goals"][3]["measured"]
    # the ratios of the best vendor set are the ones in the latency table
    best = report["goals"][0]
    assert best["value"] == configs[f"byoc[{best['vendors']}]"]["vs_onnxruntime"]


def test_skipped_configurations_are_reported(tmp_path):
    out = tmp_path / "bench.json"
    stdout = _run([RUN, "--quick", "--models", "tiny_mlp", "--vendors", "c_source", "--vendors", "json_runtime",
                   "--skip-plain-tvm-for", "tiny_mlp", "--skip", "tiny_mlp:json_runtime", "--no-scaling",
                   "--no-boundary", "--build", tmp_path / "build", "--json", out])
    report = json.loads(out.read_text())
    configs = report["models"]["tiny_mlp"]
    assert configs["plain_tvm"] == {"status": "skipped", "why": "--skip-plain-tvm-for"}
    assert configs["byoc[json_runtime]"] == {"status": "skipped", "why": "--skip"}
    assert configs["byoc[c_source]"]["status"] == "ok" and "speedup_vs_plain_tvm" not in configs["byoc[c_source]"]
    whats = [s["what"] for s in report["skipped"]]
    assert {"tiny_mlp: plain_tvm", "tiny_mlp: byoc[json_runtime]", "partition scaling",
            "boundary overhead"} <= set(whats)
    assert "- tiny_mlp: plain_tvm: skipped: --skip-plain-tvm-for" in stdout
    assert "| tiny_mlp | byoc[json_runtime] | skipped: --skip |" in stdout
    goals = {g["goal"]: g for g in report["goals"]}
    assert goals[GOALS[1]]["met"] is None and goals[GOALS[1]]["measured"] == "not measured"  # no plain TVM
    assert goals[GOALS[2]]["met"] is None and goals[GOALS[3]]["met"] is None
    assert goals[GOALS[0]]["vendors"] == "c_source"


def test_skip_takes_model_vendor_set_pairs():
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import run; "
            "print(json.dumps([run.parse_args([]).skip, run.parse_args(['--skip', 'bert:c_source']).skip]))")
    default, given = json.loads(_run(["-c", code, ROOT / "benchmarks"]))
    assert default == {}  # c_source builds BERT's 340 MB of weights in about a minute: nothing is skipped unasked
    assert given == {"bert:c_source": "--skip"}


def test_a_timing_process_that_hangs_is_killed_and_reported(tmp_path):
    # --round-timeout 0: no process can answer in time, so every one is treated as hung
    out = tmp_path / "bench.json"
    stdout = _run([RUN, "--quick", "--models", "tiny_mlp", "--vendors", "json_runtime", "--round-timeout", "0",
                   "--skip-plain-tvm-for", "tiny_mlp", "--no-scaling", "--build", tmp_path / "build",
                   "--boundary-ops", "4", "--json", out])
    report = json.loads(out.read_text())
    configs = report["models"]["tiny_mlp"]
    for key in ("onnxruntime", "byoc[json_runtime]"):
        assert configs[key]["status"] == "timeout", key
        assert configs[key]["why"] == "timing process: no reply to 'run 3' within 0 s"
    assert "| tiny_mlp | byoc[json_runtime] | timeout: timing process: no reply to 'run 3' within 0 s |" in stdout
    assert report["boundary"] == []
    assert "- boundary: all-host chain: timeout: timing process: no reply to 'run 20' within 0 s" in stdout
    assert all(g["met"] is None for g in report["goals"])


def test_a_timing_process_that_dies_is_reported_with_its_error(tmp_path):
    code = """
import argparse, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import benchmark_models, run
tmp = Path(sys.argv[2])
path = benchmark_models.model_path("tiny_mlp", tmp / "build")
args = argparse.Namespace(timeout=300, round_timeout=300)
configs = {"broken": ("byoc", tmp / "missing.so"), "onnxruntime": ("onnxruntime", path)}
results = run.time_interleaved(configs, run.random_inputs(path), args, tmp, rounds=2, warmup=1)
print(json.dumps({name: {k: v for k, v in r.items() if k != "outputs"} for name, r in results.items()}))
"""
    results = json.loads(_run(["-c", code, ROOT / "benchmarks", tmp_path]).splitlines()[-1])
    assert results["broken"]["status"] == "error"
    assert results["broken"]["why"].startswith("timing process: died during 'load': ")
    assert "artifact not found" in results["broken"]["why"]
    assert results["onnxruntime"]["status"] == "ok" and results["onnxruntime"]["samples"] == 2


def test_where_time_goes_groups_time_by_partition_and_host_with_onednn_primitives(tmp_path):
    out = tmp_path / "profile.json"
    stdout = _run([WHERE_TIME_GOES, "tiny_cnn", "--vendors", "dnnl", "--keep-on-host", "bn1", "--runs", "3",
                   "--warmup", "1", "--onednn-verbose", "--build", tmp_path / "build", "--json", out])
    for heading in ("# Profile: tiny_cnn with byoc[dnnl]", "## Top", "## Totals", "## oneDNN primitives"):
        assert heading in stdout
    report = json.loads(out.read_text())
    calls = {r["function"]: r for r in report["calls"]}
    partitions = [name for name, r in calls.items() if r["where"] == "offloaded (dnnl)"]
    assert len(partitions) == report["partitions"] >= 1
    assert all(calls[name]["calls"] == 1 and calls[name]["ops"][0].isdigit() for name in partitions)
    assert any(r["where"] == "host (TIR)" for r in report["calls"])  # BatchNormalization, kept on the host
    groups = {g["group"]: g for g in report["totals"]}
    assert {"offloaded (dnnl)", "host (TIR)", "host (VM builtins)", "host total", "run (hooked)"} <= set(groups)
    assert groups["run (hooked)"]["ms"] == report["hooked_ms"] > 0
    kinds = {k["kind"]: k for k in report["onednn"]}
    assert kinds["convolution"]["per_run"] == 2  # the model's two convs, steady state: no load-time reorders
    assert abs(sum(k["percent"] for k in kinds.values()) - 100) < 1e-6


def test_where_time_goes_without_onednn(tmp_path):
    out = tmp_path / "profile.json"
    stdout = _run([WHERE_TIME_GOES, "tiny_mlp", "--vendors", "json_runtime", "--runs", "2", "--warmup", "1",
                   "--build", tmp_path / "build", "--json", out])
    assert "## oneDNN primitives" not in stdout
    report = json.loads(out.read_text())
    assert report["onednn"] is None
    assert [r["where"] for r in report["calls"]].count("offloaded (json_runtime)") == report["partitions"]


ROOFLINE = ROOT / "benchmarks" / "roofline.py"


def _roofline_model(path: Path) -> None:
    """A 3x3 stride-1 conv, a depthwise 3x3 stride-2 conv, a 1x1 conv, and a Gemm with transB: MACs counted by hand."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)

    def const(name, shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),                      # 8x8 out
             helper.make_node("Conv", ["a", "w2"], ["b"], group=4, strides=[2, 2], pads=[1, 1, 1, 1]),  # 4x4 out
             helper.make_node("Conv", ["b", "w3"], ["c"]),
             helper.make_node("Flatten", ["c"], ["f"]),
             helper.make_node("Gemm", ["f", "w4"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
                              [const("w1", [4, 2, 3, 3]), const("w2", [4, 1, 3, 3]), const("w3", [6, 4, 1, 1]),
                               const("w4", [10, 96])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_roofline_counts_multiply_adds_and_prints_the_floor(tmp_path):
    model = tmp_path / "small.onnx"
    _roofline_model(model)
    out = tmp_path / "roofline.json"
    stdout = _run([ROOFLINE, model, "--runs", "3", "--json", out])
    assert "| small |" in stdout
    row = json.loads(out.read_text())["models"][0]
    conv3x3 = 4 * 8 * 8 * 2 * 9    # out channels x pixels x (in channels x kernel)
    depthwise = 4 * 4 * 4 * 9       # 4 channels x 4x4 pixels x 9 taps, one input channel each
    conv1x1 = 6 * 4 * 4 * 4
    gemm = 10 * 96                  # transB: the weight is [N, K]
    assert {k: row[k] for k in ("dense", "dense_3x3_s1", "depthwise", "unknown")} == {
        "dense": conv3x3 + conv1x1 + gemm, "dense_3x3_s1": conv3x3, "depthwise": depthwise, "unknown": []}
    assert row["floor_ms"] > 0 and row["onnxruntime_ms"] > 0
    assert row["best_ratio"] == row["floor_ms"] / row["onnxruntime_ms"]


DEPLOYED = ROOT / "benchmarks" / "deployed.py"


def _deployed_catalog(folder: Path) -> None:
    """A tiny MatMul + Relu model with a symbolic batch, cataloged as deployed_models.py writes it, and an entry
    whose file is missing."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                              "tiny", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "tiny_float.onnx")
    inputs = [{"name": "x", "dtype": "float32", "dims": ["batch", 8]}]
    entries = [{"name": "tiny_float", "arch": "tiny", "form": "float", "path": str(folder / "tiny_float.onnx"),
                "contrib_ops": {}, "inputs": inputs, "test_dims": {"batch": 2}},
               {"name": "tiny_qdq", "arch": "tiny", "form": "qdq", "path": str(folder / "tiny_qdq.onnx"),
                "contrib_ops": {}, "inputs": inputs, "test_dims": {"batch": 2}}]
    (folder / "catalog.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


def test_deployed_builds_a_cataloged_file_and_reports_failure_rows(tmp_path):
    _deployed_catalog(tmp_path)
    out = tmp_path / "deployed.json"
    stdout = _run([DEPLOYED, "--models-dir", tmp_path, "--runs", "1", "--warmup", "0", "--calls", "1", "--json", out])
    report = json.loads(out.read_text())
    assert report["machine"]["class"] in stdout  # the CPU is named
    ok, missing = report["models"]["tiny_float"], report["models"]["tiny_qdq"]
    assert ok["status"] == "ok" and ok["partitions"] >= 1 and ok["max_abs_err"] < 1e-4, ok
    assert ok["onnxruntime_ms"] > 0 and ok["byoc_ms"] > 0 and ok["artifact_bytes"] > 0
    assert missing["status"] == "missing"
    assert "| tiny | float | - | yes |" in stdout and "| tiny | qdq | - | missing: " in stdout
    assert "1 of 2 files build" in stdout
    # a compile failure with an untyped error (a library bug) and a crashed worker: flagged in the table
    code = """
import sys; sys.path.insert(0, sys.argv[1]); import deployed
rows = [{"name": "m_qdq", "arch": "m", "form": "qdq", "contrib_ops": {"com.microsoft:MatMulNBits": 3},
         "status": "compile failed", "why": "KeyError: 'a|b'", "typed": False, "ort_fused_vs_definition": 0.5},
        {"name": "m_fp16", "arch": "m", "form": "fp16", "status": "crashed", "why": "x" * 500, "typed": False}]
print("\\n".join(deployed.table(rows) + deployed.summary(rows)))
"""
    lines = _run(["-c", code, ROOT / "benchmarks"]).splitlines()
    assert lines[2].startswith("| m | qdq | MatMulNBits x3 | compile failed: KeyError: 'a/b' (untyped) | - |")
    assert "| 0.5 |" in lines[2] and len(lines[3]) < 400 and "(untyped)" in lines[3]
    assert lines[4] == "0 of 2 files build, run and export with symbolic dims."
    assert lines[5].startswith("Untyped failures")


def test_memory_measures_both_sides_in_fresh_processes(tmp_path):
    """benchmarks/memory.py on the tiny cataloged model: both sides measured, the ratio and what byoc's runtime
    holds reported, the missing file a SKIP row (the figures themselves are the kernel's: nothing to assert)."""
    _deployed_catalog(tmp_path)
    out = tmp_path / "memory.json"
    stdout = _run([ROOT / "benchmarks" / "memory.py", "--models", "tiny_float,tiny_qdq", "--models-dir", tmp_path,
                   "--repeat", "1", "--vendors", "dnnl", "--json", out])
    report = json.loads(out.read_text())
    row = report["models"]["tiny_float"]
    assert row["status"] == "ok" and row["byoc_vs_ort"] > 0, row
    assert row["byoc"]["held"]["model_constant_bytes"] == 8 * 4 * 4  # the MatMul's weight, given to dnnl
    assert report["models"]["tiny_qdq"]["status"] == "skipped"
    assert "| tiny_float | 0 |" in stdout and "| tiny_qdq | SKIP: " in stdout and report["machine"]["class"] in stdout

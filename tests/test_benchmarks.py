"""Smoke test of benchmarks/run.py --quick on the tiny onnx.helper models (no torch, no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_run_prints_tables_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--models", "tiny_mlp",
           "--vendors", "c_source", "--scaling-sizes", "30", "--boundary-ops", "6",
           "--build", str(tmp_path / "build"), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for heading in ("## Latency", "## Partition scaling", "## Boundary overhead", "## Skipped"):
        assert heading in proc.stdout
    assert "| tiny_mlp | byoc[c_source] |" in proc.stdout

    report = json.loads(out.read_text())
    assert set(report) >= {"machine", "settings", "models", "scaling", "boundary", "skipped"}
    configs = report["models"]["tiny_mlp"]
    assert set(configs) == {"onnxruntime", "plain_tvm", "byoc[c_source]"}
    byoc_entry = configs["byoc[c_source]"]
    assert byoc_entry["status"] == "ok"
    for key in ("latency_ms", "vs_onnxruntime", "speedup_vs_plain_tvm", "compile_s", "partitions", "memory",
                "max_abs_err_vs_onnxruntime"):
        assert key in byoc_entry
    assert byoc_entry["memory"]["planned_bytes"] >= byoc_entry["memory"]["lower_bound_bytes"] >= 0
    assert byoc_entry["max_abs_err_vs_onnxruntime"] < 1e-4  # the tiny model computes the same function
    assert [(r["graph"], r["ops"], r["status"]) for r in report["scaling"]] == [("chain", 30, "ok"), ("dag", 30, "ok")]
    assert {"tvm_s", "byoc_s", "ratio"} <= set(report["scaling"][0])
    [boundary] = report["boundary"]
    assert boundary["partitions"] == 3 and "us_per_call" in boundary


def test_skipped_configurations_are_reported(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--models", "tiny_mlp",
           "--vendors", "c_source", "--skip-plain-tvm-for", "tiny_mlp", "--no-scaling", "--no-boundary",
           "--build", str(tmp_path / "build"), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert "plain_tvm" not in report["models"]["tiny_mlp"]
    whats = [s["what"] for s in report["skipped"]]
    assert "tiny_mlp: plain TVM" in whats and "partition scaling" in whats
    assert "tiny_mlp: plain TVM: --skip-plain-tvm-for" in proc.stdout

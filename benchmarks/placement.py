"""Measured placement against the rules, on the real-model suite: what it moves, what it costs to compile,
and what the model's run time becomes.

Run from the repo root::

    python benchmarks/placement.py                                    # every suite model, dnnl
    python benchmarks/placement.py --configs dnnl c_source dnnl,c_source --models squeezenet,ppocr_cls
    python benchmarks/placement.py --json out.json

For each model and vendor configuration, in a fresh process of its own: ``byoc.compile`` with the rules,
then with ``placement="measured"`` on the model's realistic inputs (real_models_catalog.make_inputs), each
timed (import included: both pay it). Both artifacts are then run in turns, ``--rounds`` rounds of
``--runs`` runs each, and the medians compared: ``run ratio`` is measured / rules (below 1: placement
helped). ``+run 1`` is the compile ratio counting each artifact's first run too (a C source artifact compiles
its C there; LLVM's JIT and oneDNN's primitives are made there). ``candidate builds`` counts builds of one partition's ops on one place; the rule-based build and the
final build come on top. The measured artifact's outputs are compared with onnxruntime's (``max rel err``).
The machine class is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from real_models_catalog import MODELS, make_inputs, model_path, onnxruntime_outputs, static_shapes  # noqa: E402
from timing_processes import machine_class  # noqa: E402

DEFAULT_CONFIGS = ("dnnl",)
# the zoo's ConstantOfShape graphs and the models that need a fetch or a com.microsoft op byoc refuses
SKIP = ("ddddocr_ocr_dynamic_int8",)


def _max_rel_err(outputs, reference) -> float:
    import numpy as np

    return max(float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))
               for a, b in zip(outputs, reference)) if outputs else 0.0


def _work(name: str, vendors: list, runs: int, rounds: int) -> dict:
    """One model and configuration, in this process."""
    import warnings

    import onnx

    import byoc

    warnings.simplefilter("ignore")
    model = MODELS[name]
    path = model_path(model)
    inputs = make_inputs(model, path)
    shapes = static_shapes(model, onnx.load(str(path), load_external_data=False))
    t0 = time.perf_counter()
    rules = byoc.compile(str(path), vendors, input_shapes=shapes)
    t1 = time.perf_counter()
    measured = byoc.compile(str(path), vendors, input_shapes=shapes, placement="measured", sample_inputs=inputs)
    t2 = time.perf_counter()
    samples = {"rules": [], "measured": []}
    first = {}
    for key, artifact in (("rules", rules), ("measured", measured)):
        t = time.perf_counter()
        artifact.run(inputs)  # the first call pays one-time costs: a C compile, LLVM's JIT, oneDNN's primitives
        first[key] = time.perf_counter() - t
    for _ in range(rounds):
        for key, artifact in (("rules", rules), ("measured", measured)):
            for _ in range(runs):
                t = time.perf_counter()
                artifact.run(inputs)
                samples[key].append(time.perf_counter() - t)
    decisions = measured.placement.decisions
    return {
        "model": name, "vendors": ",".join(vendors),
        "rules_partitions": len(rules.plan.partitions), "measured_partitions": len(measured.plan.partitions),
        "moved": [f"{d.partition}->{d.place}" for d in decisions if d.place != d.vendor],
        "decisions": [d.as_json() for d in decisions],
        "candidate_builds": measured.placement.candidate_builds,
        "compile_rules_s": t1 - t0, "compile_measured_s": t2 - t1,
        "first_run_rules_s": first["rules"], "first_run_measured_s": first["measured"],
        "run_rules_ms": statistics.median(samples["rules"]) * 1e3,
        "run_measured_ms": statistics.median(samples["measured"]) * 1e3,
        "max_rel_err": _max_rel_err(measured.run(inputs), onnxruntime_outputs(path, inputs)),
    }


def _ready(r: dict, key: str) -> float:
    """Seconds from compile() to the first run's outputs: what a C source artifact's compile leaves to that
    first run (the C compiler), and LLVM's JIT and oneDNN's primitives, counted for both."""
    return r[f"compile_{key}_s"] + r[f"first_run_{key}_s"]


def _row(r: dict) -> str:
    if "error" in r:
        return f"{r['model']:<22} {r['vendors']:<14} error: {r['error']}"
    return (f"{r['model']:<22} {r['vendors']:<14} {r['rules_partitions']:>3} -> {r['measured_partitions']:<3} "
            f"{len(r['moved']):>5} {r['candidate_builds']:>6} {r['compile_rules_s']:>7.1f} {r['compile_measured_s']:>7.1f} "
            f"{r['compile_measured_s'] / r['compile_rules_s']:>6.2f} {_ready(r, 'measured') / _ready(r, 'rules'):>6.2f} "
            f"{r['run_rules_ms']:>9.2f} {r['run_measured_ms']:>9.2f} "
            f"{r['run_measured_ms'] / r['run_rules_ms']:>6.2f} {r['max_rel_err']:>9.1e}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated suite models (default: all)")
    parser.add_argument("--configs", nargs="+", default=list(DEFAULT_CONFIGS),
                        help="vendor lists, e.g. dnnl c_source dnnl,c_source (default dnnl)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        name, vendors, out = args.worker
        try:
            result = _work(name, vendors.split(","), args.runs, args.rounds)
        except Exception as err:  # noqa: BLE001 - one model's failure is a row, not the end of the table
            result = {"model": name, "vendors": vendors, "error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}
        Path(out).write_text(json.dumps(result))
        return 0
    names = args.models.split(",") if args.models else [n for n in MODELS if n not in SKIP]
    print(f"machine class: {machine_class()}; {args.rounds} rounds of {args.runs} runs per artifact")
    print(f"{'model':<22} {'vendors':<14} {'partitions':<10} {'moved':>5} {'builds':>6} {'rules s':>7} "
          f"{'meas. s':>7} {'ratio':>6} {'+run 1':>6} {'rules ms':>9} {'meas. ms':>9} {'ratio':>6} {'rel err':>9}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for config in args.configs:
            for name in names:
                out = Path(tmp) / "row.json"
                subprocess.run([sys.executable, __file__, "--worker", name, config, str(out), "--runs",
                                str(args.runs), "--rounds", str(args.rounds)], check=False)
                row = json.loads(out.read_text()) if out.exists() else {"model": name, "vendors": config,
                                                                       "error": "the worker died"}
                out.unlink(missing_ok=True)
                rows.append(row)
                print(_row(row), flush=True)
    done = [r for r in rows if "error" not in r]
    if done:
        compile_ratio = statistics.geometric_mean([r["compile_measured_s"] / r["compile_rules_s"] for r in done])
        run_ratio = statistics.geometric_mean([r["run_measured_ms"] / r["run_rules_ms"] for r in done])
        ready_ratio = statistics.geometric_mean([_ready(r, "measured") / _ready(r, "rules") for r in done])
        print(f"geometric mean: compile {compile_ratio:.2f}x (with the first run {ready_ratio:.2f}x), run "
              f"{run_ratio:.2f}x; worst run ratio "
              f"{max(r['run_measured_ms'] / r['run_rules_ms'] for r in done):.2f}; worst compile ratio "
              f"{max(r['compile_measured_s'] / r['compile_rules_s'] for r in done):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine_class": machine_class(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

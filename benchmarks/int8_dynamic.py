"""Quantized (QDQ int8) models with a symbolic batch: partitions, and one artifact's latency at several batch sizes
against onnxruntime's int8 run.

Run from the repository root (no torch needed: the models are written with onnx.helper and quantized by
onnxruntime, ``benchmarks/benchmark_models.py``)::

    python benchmarks/int8_dynamic.py                                  # resnet18_int8, resnet50_helper_int8
    python benchmarks/int8_dynamic.py --models resnet50_helper_int8 --batches 1,2 --runs 20
    python benchmarks/int8_dynamic.py --before /tmp/byoc-before         # partitions of another checkout too

Each model's input and output get a symbolic batch (``batch``), as an exporter's ``dynamic_axes`` leaves them.

* **partitions**: ``byoc.partition`` with ``vendors=dnnl,c_source`` and ``dnnl``, in a fresh process each; with
  ``--before DIR`` also with ``PYTHONPATH=DIR`` (a checkout, say ``git archive <commit>`` unpacked there), so the
  figures before and after a change come from one run. The row names the partitions per vendor and the
  QuantizeLinear/DequantizeLinear ops left on the host.
* **latency**: one dnnl artifact, exported once, timed at each batch size against onnxruntime on the same
  symbolic-batch model, each in its own process (``timing_processes.py``), one process at a time per round;
  with ``--before``, the artifact that checkout builds too (``byoc before``); with ``--static``, a static build
  per batch size (``byoc static``).
* **error**: at each batch, byoc's and onnxruntime's int8 outputs against onnxruntime with graph optimizations off
  (each op as ONNX defines it), in units of the output's quantum (the scale of its DequantizeLinear). byoc counts as
  correct when its distance is within one quantum or within onnxruntime's own.

``--json FILE`` writes every figure. The machine class and the CPU are printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import benchmark_models  # noqa: E402 - benchmarks/benchmark_models.py
import timing_processes as timing  # noqa: E402

DEFAULT_MODELS = ("resnet18_int8", "resnet50_helper_int8")
VENDOR_SETS = ("dnnl,c_source", "dnnl")

_PARTITION_SCRIPT = """
import json, sys, warnings
import onnx, byoc
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    plan = byoc.partition(onnx.load(sys.argv[1]), vendors=sys.argv[2].split(","))
per_vendor = {}
for p in plan.partitions:
    per_vendor[p.vendor] = per_vendor.get(p.vendor, 0) + 1
qdq = [d for d in plan.host_ops if d.op in ("relax.quantize", "relax.dequantize")]
reasons = sorted({r for d in qdq for r in d.reasons.values()})
print(json.dumps({"partitions": len(plan.partitions), "per_vendor": per_vendor, "host_ops": len(plan.host_ops),
                  "host_qdq": len(qdq), "qdq_reasons": reasons[:3]}))
"""


def symbolic_batch(model):
    """``model`` with dim 0 of its inputs and outputs named ``batch``."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    for value in [*out.graph.input, *out.graph.output]:
        dim = value.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del out.graph.value_info[:]
    return out


def output_quantum(model) -> float:
    """The scale of the DequantizeLinear the model's output comes from (1.0 if it comes from elsewhere)."""
    from onnx import numpy_helper

    producer = {out: n for n in model.graph.node for out in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = producer.get(model.graph.output[0].name)
    if node is None or node.op_type != "DequantizeLinear":
        return 1.0
    return float(inits[node.input[1]].reshape(-1)[0])


def partitions(path: Path, vendors: str, tree: Path) -> dict:
    """The plan's figures, from ``byoc.partition`` in a fresh process importing byoc from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # run in ``tree``: ``python -c`` puts the working directory first on sys.path, before PYTHONPATH
    run = subprocess.run([sys.executable, "-c", _PARTITION_SCRIPT, str(path), vendors], capture_output=True, text=True,
                         env=env, cwd=tree, timeout=1800)
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    return json.loads(run.stdout.strip().splitlines()[-1])


_EXPORT_SCRIPT = """
import sys, warnings
import onnx, byoc
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    byoc.compile(onnx.load(sys.argv[1]), vendors=["dnnl"]).export(sys.argv[2])
"""


def exported_before(path: Path, library: Path, tree: Path):
    """The dnnl artifact of ``path`` as the checkout ``tree`` builds it, exported to ``library`` (None, said, if
    that fails)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    run = subprocess.run([sys.executable, "-c", _EXPORT_SCRIPT, str(path), str(library)], capture_output=True,
                         text=True, env=env, cwd=tree, timeout=3600)
    if run.returncode != 0:
        print(f"the build in {tree} failed: {run.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return library


def _plan_text(figures: dict) -> str:
    if "error" in figures:
        return f"failed: {figures['error']}"
    vendors = ", ".join(f"{v} {n}" for v, n in sorted(figures["per_vendor"].items()))
    return f"{figures['partitions']} ({vendors}); host ops {figures['host_ops']}, Q/DQ on host {figures['host_qdq']}"


def _reference(path: Path, inputs: dict, optimized: bool) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, inputs)[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated, from {', '.join(benchmark_models.INT8_MODELS)}")
    p.add_argument("--batches", default="1,2", help="batch sizes to time (default 1,2)")
    p.add_argument("--runs", type=int, default=20, help="timed rounds (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    p.add_argument("--before", type=Path, help="a checkout whose partitions to count too (its root, on PYTHONPATH)")
    p.add_argument("--static", action="store_true",
                   help="time a static build per batch size too (input_shapes of that batch: what the symbolic batch costs)")
    p.add_argument("--build", type=Path, default=benchmark_models.DEFAULT_BUILD, help="model cache folder")
    p.add_argument("--timeout", type=float, default=600, help="seconds for a timing process to load")
    p.add_argument("--round-timeout", type=float, default=120, help="seconds for one timed call")
    p.add_argument("--json", type=Path, help="write every figure here")
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"machine: {timing.machine_class()}")
    figures: dict = {"machine": timing.machine_class(), "models": {}}
    import byoc
    import onnx

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name in args.models.split(","):
            model = symbolic_batch(onnx.load(str(benchmark_models.model_path(name, args.build))))
            path = tmp / f"{name}_batch.onnx"
            onnx.save(model, str(path))
            quantum = output_quantum(model)
            entry: dict = {"plans": {}, "batches": {}}
            for vendors in VENDOR_SETS:
                trees = {"after": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
                for when, tree in trees.items():
                    entry["plans"][f"{vendors} {when}"] = plan = partitions(path, vendors, tree)
                    print(f"{name} [{vendors}] {when}: {_plan_text(plan)}", flush=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                artifact = byoc.compile(model, vendors=["dnnl"])
            library = artifact.export(tmp / f"{name}.so")
            del artifact
            configs = {"onnxruntime": ("onnxruntime", path), "byoc": ("byoc", library)}
            if args.before is not None:
                before = exported_before(path, tmp / f"{name}-before.so", args.before)
                if before is not None:
                    configs["byoc before"] = ("byoc", before, {"PYTHONPATH": str(args.before)})
            for batch in batches:
                shape = [batch] + [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
                inputs = {model.graph.input[0].name: np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
                timed = dict(configs)
                if args.static:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        static = byoc.compile(model, vendors=["dnnl"], input_shapes={model.graph.input[0].name: shape})
                    timed["byoc static"] = ("byoc", static.export(tmp / f"{name}-static-{batch}.so"))
                    del static
                results = timing.time_interleaved(timed, inputs, args, tmp, args.runs, args.warmup)
                definition = _reference(path, inputs, optimized=False)
                row: dict = {}
                for who, result in results.items():
                    if result["status"] != "ok":
                        row[who] = {"status": result["status"], "why": result["why"]}
                        continue
                    error = float(np.abs(result["outputs"][0] - definition).max()) / quantum
                    row[who] = {"median_ms": result["median_s"] * 1e3, "error_quanta": error}
                entry["batches"][batch] = row
                o = row["onnxruntime"]
                for who in [w for w in row if w != "onnxruntime"]:
                    b = row[who]
                    if "median_ms" not in b or "median_ms" not in o:
                        print(f"{name} batch {batch} {who}: {b} (onnxruntime: {o})", flush=True)
                        continue
                    ok = b["error_quanta"] <= max(1.001, o["error_quanta"])
                    print(f"{name} batch {batch}: {who} {b['median_ms']:.2f} ms, onnxruntime int8 "
                          f"{o['median_ms']:.2f} ms -> {b['median_ms'] / o['median_ms']:.2f}x; error vs the definition "
                          f"{who} {b['error_quanta']:.2f} quanta, onnxruntime {o['error_quanta']:.2f} quanta"
                          f" ({'within' if ok else 'NOT within'})", flush=True)
            figures["models"][name] = entry
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmarks: latency, compile time, memory, partition scaling and boundary overhead.

Run from the repo root::

    python benchmarks/run.py                       # mobilenetv2, resnet50, bert; vendors c_source and json_runtime
    python benchmarks/run.py --models mobilenetv2 --vendors c_source --json out.json
    python benchmarks/run.py --quick               # tiny onnx.helper models, few repetitions (smoke run)

Every compilation (plain TVM, byoc per vendor set) and every scaling point
runs in its own subprocess with a time limit (``--timeout``): a configuration
that does not finish in time is reported as skipped, never waited on. The
compiled libraries are then loaded into this process and timed interleaved
(one run of each configuration per round, so machine noise hits all alike);
a latency is the median of ``--runs`` rounds after ``--warmup`` rounds, with
numpy inputs converted and outputs read back in every case.

* onnxruntime: CPU provider, ``intra_op_num_threads=2``.
* plain TVM: ``tvm.compile(byoc.import_model(model).mod)`` for the same host
  target byoc builds for.
* byoc: ``byoc.partition`` + ``byoc.build`` per vendor set (``--vendors``,
  repeatable, a set is comma-separated in priority order).
* memory: ``byoc.memory.estimate_memory(plan)``: TVM's planned activation
  bytes next to the ONNC lower bound.
* scaling: ``byoc.partition`` (annotate + merge + plan) on synthetic Relax
  chains and DAGs against TVM's ``FuseOpsByPattern`` + ``MergeCompositeFunctions``
  alone with the same patterns and checks.
* boundary: a chain alternating an offloaded Add with a host Neg, against the
  same chain all on the host; (difference of medians) / number of partitions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402 - benchmarks/models.py, next to this file

HOST_TARGET = "x86_64"
FULL_MODELS = ("mobilenetv2", "resnet50", "bert")
QUICK_MODELS = ("tiny_cnn", "tiny_mlp")
DEFAULT_VENDOR_SETS = ("c_source", "json_runtime")


# -- workers: one subprocess per compilation / scaling point --------------------------
def _host_target():
    from byoc.targets import resolve_target

    return resolve_target(HOST_TARGET).tvm_target()


def _work_plain_tvm(task: dict) -> dict:
    import tvm

    import byoc

    t0 = time.perf_counter()
    mod = byoc.import_model(task["model"]).mod
    t1 = time.perf_counter()
    executable = tvm.compile(mod, target=_host_target())
    t2 = time.perf_counter()
    executable.export_library(task["out"])
    return {"import_s": t1 - t0, "compile_s": t2 - t1}


def _work_byoc(task: dict) -> dict:
    import byoc
    from byoc.memory import estimate_memory

    t0 = time.perf_counter()
    imported = byoc.import_model(task["model"])
    t1 = time.perf_counter()
    plan = byoc.partition(imported, task["vendors"])
    t2 = time.perf_counter()
    artifact = byoc.build(plan, target=HOST_TARGET)
    t3 = time.perf_counter()
    artifact.export(task["out"], overwrite=True)
    memory = estimate_memory(plan, HOST_TARGET)
    return {
        "import_s": t1 - t0, "partition_s": t2 - t1, "compile_s": t3 - t2,
        "partitions": len(plan.partitions), "offloaded_ops": plan.offloaded_ops, "host_ops": len(plan.host_ops),
        "memory": {"planned_bytes": memory.planned_bytes, "lower_bound_bytes": memory.lower_bound_bytes},
    }


def synthetic_module(kind: str, ops: int):
    """A Relax ``main`` of ``ops`` elementwise calls on (1, 16): a chain, or a DAG where each add reads two earlier values."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            values = [x]
            for i in range(ops):
                last = values[-1]
                if i % 2:
                    value = relax.op.nn.relu(last)
                elif kind == "dag" and len(values) > 2:
                    value = relax.op.add(last, values[-3])
                else:
                    value = relax.op.add(last, relax.const(rng.standard_normal((1, 16)).astype("float32")))
                values.append(bb.emit(value))
            out = bb.emit_output(values[-1])
        bb.emit_func_output(out)
    return bb.get()


def _work_scaling(task: dict) -> dict:
    from tvm.relax.transform import FuseOpsByPattern, MergeCompositeFunctions

    import byoc
    from byoc.annotator import _fusion_patterns, _State
    from byoc.frontend import ImportedModel, TensorSpec

    vendors = byoc.registry.resolve_vendors(task["vendors"])

    def tvm_alone(mod):
        # byoc's own FusionPatterns (same patterns and checks): without the checks TVM
        # matches differently (measured: only the adds of a chain), so it is not a like-for-like baseline.
        patterns = _fusion_patterns(vendors, _State({}, {}))
        MergeCompositeFunctions()(FuseOpsByPattern(patterns, bind_constants=True, annotate_codegen=False)(mod))

    def with_byoc(mod):
        return byoc.partition(ImportedModel(mod, None, [TensorSpec("x", (1, 16), "float32")], [], {}), vendors)

    warm = synthetic_module(task["graph"], 10)  # first calls pay one-time costs; keep them out of both
    tvm_alone(warm), with_byoc(warm)
    mod = synthetic_module(task["graph"], task["ops"])
    t0 = time.perf_counter()
    tvm_alone(mod)
    t1 = time.perf_counter()
    plan = with_byoc(mod)
    t2 = time.perf_counter()
    return {"tvm_s": t1 - t0, "byoc_s": t2 - t1, "partitions": len(plan.partitions)}


WORKERS = {"plain_tvm": _work_plain_tvm, "byoc": _work_byoc, "scaling": _work_scaling}


def _worker_main(task_file: str) -> int:
    task = json.loads(Path(task_file).read_text())
    result = WORKERS[task["kind"]](task)
    Path(task["result"]).write_text(json.dumps(result))
    return 0


def run_worker(task: dict, timeout: float, tmp: Path) -> dict:
    """Run one task in a subprocess (own process group, killed whole on timeout)."""
    task = dict(task, result=str(tmp / f"result-{os.getpid()}-{time.monotonic_ns()}.json"))
    task_file = tmp / "task.json"
    task_file.write_text(json.dumps(task))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(task_file)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # gcc and friends are in the same group
        proc.communicate()
        return {"status": "timeout", "why": f"did not finish within --timeout {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return {"status": "error", "why": lines[-1] if lines else f"exit code {proc.returncode}"}
    return dict(json.loads(Path(task["result"]).read_text()), status="ok")


# -- latency --------------------------------------------------------------------------
def _random_inputs(path: Path) -> dict:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(1)
    initializers = {i.name for i in model.graph.initializer}
    inputs = {}
    for vi in model.graph.input:
        if vi.name not in initializers:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            inputs[vi.name] = rng.standard_normal(shape).astype(dtype)
    return inputs


def _ort_runner(path: Path, inputs: dict):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, inputs)


def _tvm_runner(lib_path: str, inputs: dict):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())
    arrays = list(inputs.values())

    def run():
        result = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
        items = [result] if hasattr(result, "numpy") else list(result)
        return [item.numpy() for item in items]

    return run


def _byoc_runner(lib_path: str, inputs: dict):
    import byoc

    artifact = byoc.load(lib_path)
    return lambda: artifact.run(inputs)


def time_interleaved(runners: dict, runs: int, warmup: int) -> dict:
    """Median seconds per runner, one call of each per round; also the outputs of the last call."""
    times = {name: [] for name in runners}
    outputs = {}
    for round_ in range(warmup + runs):
        for name, run in runners.items():
            t = time.perf_counter()
            outputs[name] = run()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}, outputs


def _max_err(outputs, reference) -> float:
    return max(float(np.max(np.abs(np.asarray(o, dtype=np.float64) - r))) for o, r in zip(outputs, reference))


def bench_model(name: str, args, tmp: Path, skipped: list) -> dict:
    path = models.model_path(name, args.build)
    inputs = _random_inputs(path)
    configs = {}
    runners = {"onnxruntime": _ort_runner(path, inputs)}
    if name in args.skip_plain_tvm_for:
        skipped.append({"what": f"{name}: plain TVM", "why": "--skip-plain-tvm-for"})
    else:
        lib = str(tmp / f"{name}-plain.so")
        configs["plain_tvm"] = run_worker({"kind": "plain_tvm", "model": str(path), "out": lib}, args.timeout, tmp)
        if configs["plain_tvm"]["status"] == "ok":
            runners["plain_tvm"] = _tvm_runner(lib, inputs)
    for vendor_set in args.vendors:
        key = f"byoc[{vendor_set}]"
        if f"{name}:{vendor_set}" in args.skip:
            skipped.append({"what": f"{name}: {key}", "why": "--skip"})
            continue
        lib = str(tmp / f"{name}-{vendor_set.replace(',', '+')}.so")
        task = {"kind": "byoc", "model": str(path), "vendors": vendor_set.split(","), "out": lib}
        configs[key] = run_worker(task, args.timeout, tmp)
        if configs[key]["status"] == "ok":
            runners[key] = _byoc_runner(lib, inputs)
    for key, config in configs.items():
        if config["status"] != "ok":
            skipped.append({"what": f"{name}: {key}", "why": f"{config['status']}: {config['why']}"})
    medians, outputs = time_interleaved(runners, args.runs, args.warmup)
    result = {"onnxruntime": {"status": "ok", "latency_ms": medians["onnxruntime"] * 1e3}}
    result.update(configs)
    for key in runners:
        if key == "onnxruntime":
            continue
        entry = result[key]
        entry["latency_ms"] = medians[key] * 1e3
        entry["vs_onnxruntime"] = medians[key] / medians["onnxruntime"]
        if "plain_tvm" in medians and key != "plain_tvm":
            entry["speedup_vs_plain_tvm"] = medians["plain_tvm"] / medians[key]
        entry["max_abs_err_vs_onnxruntime"] = _max_err(outputs[key], outputs["onnxruntime"])
    return result


# -- partition scaling and boundary overhead ------------------------------------------
def bench_scaling(args, tmp: Path, skipped: list) -> list:
    rows = []
    vendors = args.vendors[0].split(",")
    for graph in ("chain", "dag"):
        for ops in args.scaling_sizes:
            row = {"graph": graph, "ops": ops, "vendors": args.vendors[0]}
            row.update(run_worker({"kind": "scaling", "graph": graph, "ops": ops, "vendors": vendors},
                                  args.timeout, tmp))
            if row["status"] == "ok":
                row["ratio"] = row["byoc_s"] / row["tvm_s"]
            else:
                skipped.append({"what": f"scaling {graph} {ops} ops", "why": f"{row['status']}: {row['why']}"})
            rows.append(row)
    return rows


def boundary_chain(ops: int):
    """(1, 8) chain alternating Add (a constant; offloaded) and Neg (host for every built-in vendor)."""
    from byoc.examples import const, model, tensor
    from onnx import helper

    nodes, inits, last = [], [], "x"
    for i in range(ops):
        out = f"v{i}"
        if i % 2 == 0:
            inits.append(const(f"c{i}", np.full((1, 8), 0.5, np.float32)))
            nodes.append(helper.make_node("Add", [last, f"c{i}"], [out], name=f"add{i}"))
        else:
            nodes.append(helper.make_node("Neg", [last], [out], name=f"neg{i}"))
        last = out
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    return model(nodes, [tensor("x", [1, 8])], [tensor("y", [1, 8])], inits, name="boundary_chain")


def bench_boundary(args, tmp: Path, skipped: list) -> list:
    import onnx

    path = tmp / f"boundary-{args.boundary_ops}.onnx"
    onnx.save(boundary_chain(args.boundary_ops), str(path))
    inputs = _random_inputs(path)
    host = run_worker({"kind": "byoc", "model": str(path), "vendors": [], "out": str(tmp / "b-host.so")},
                      args.timeout, tmp)
    if host["status"] != "ok":
        skipped.append({"what": "boundary: all-host chain", "why": f"{host['status']}: {host['why']}"})
        return []
    runners, built = {"host": _byoc_runner(str(tmp / "b-host.so"), inputs)}, {}
    for vendor_set in args.vendors:
        lib = str(tmp / f"b-{vendor_set.replace(',', '+')}.so")
        result = run_worker({"kind": "byoc", "model": str(path), "vendors": vendor_set.split(","), "out": lib},
                            args.timeout, tmp)
        if result["status"] == "ok":
            runners[vendor_set], built[vendor_set] = _byoc_runner(lib, inputs), result
        else:
            skipped.append({"what": f"boundary: {vendor_set}", "why": f"{result['status']}: {result['why']}"})
    medians, _ = time_interleaved(runners, args.runs * 10, args.warmup * 10)  # tiny: more rounds are cheap
    rows = []
    for vendor_set, result in built.items():
        calls = max(result["partitions"], 1)
        rows.append({"vendors": vendor_set, "ops": args.boundary_ops, "partitions": result["partitions"],
                     "chain_us": medians[vendor_set] * 1e6, "host_chain_us": medians["host"] * 1e6,
                     "us_per_call": (medians[vendor_set] - medians["host"]) * 1e6 / calls})
    return rows


# -- output ---------------------------------------------------------------------------
def _fmt(value, spec=".1f", unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def _bytes(n):
    if n is None:
        return "-"
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def print_tables(report: dict) -> None:
    print("## Latency (median of %d runs after %d warm-up; onnxruntime with 2 threads)" %
          (report["settings"]["runs"], report["settings"]["warmup"]))
    print()
    print("| model | config | latency | vs onnxruntime | speedup vs plain TVM | compile | partitions | "
          "planned act. memory | lower bound | max abs err |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, configs in report["models"].items():
        for key, c in configs.items():
            if c.get("status") != "ok":
                print(f"| {name} | {key} | {c['status']}: {c['why']} | | | | | | | |")
                continue
            mem = c.get("memory", {})
            print(f"| {name} | {key} | {_fmt(c.get('latency_ms'), '.2f', ' ms')} | "
                  f"{_fmt(c.get('vs_onnxruntime'), '.2f', 'x')} | {_fmt(c.get('speedup_vs_plain_tvm'), '.2f', 'x')} | "
                  f"{_fmt(c.get('compile_s'), '.1f', ' s')} | {c.get('partitions', '-')} | "
                  f"{_bytes(mem.get('planned_bytes'))} | {_bytes(mem.get('lower_bound_bytes'))} | "
                  f"{_fmt(c.get('max_abs_err_vs_onnxruntime'), '.2g')} |")
    print()
    print("## Partition scaling: byoc.partition vs FuseOpsByPattern + MergeCompositeFunctions alone")
    print()
    print("| graph | ops | vendors | TVM passes | byoc annotate+partition | ratio | partitions |")
    print("|---|---|---|---|---|---|---|")
    for r in report["scaling"]:
        if r["status"] != "ok":
            print(f"| {r['graph']} | {r['ops']} | {r['vendors']} | {r['status']}: {r['why']} | | | |")
        else:
            print(f"| {r['graph']} | {r['ops']} | {r['vendors']} | {r['tvm_s']:.3f} s | {r['byoc_s']:.3f} s | "
                  f"{r['ratio']:.2f}x | {r['partitions']} |")
    print()
    print("## Boundary overhead: chain alternating offloaded Add / host Neg vs the same chain all on host")
    print()
    print("| vendors | ops | partitions | chain | all-host chain | per offloaded call |")
    print("|---|---|---|---|---|---|")
    for r in report["boundary"]:
        print(f"| {r['vendors']} | {r['ops']} | {r['partitions']} | {r['chain_us']:.1f} us | "
              f"{r['host_chain_us']:.1f} us | {r['us_per_call']:.2f} us |")
    print()
    print("## Skipped")
    print()
    for s in report["skipped"] or [{"what": "nothing", "why": ""}]:
        print(f"- {s['what']}" + (f": {s['why']}" if s["why"] else ""))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(models.ALL_MODELS)} "
                                    f"(default {','.join(FULL_MODELS)}; with --quick {','.join(QUICK_MODELS)})")
    p.add_argument("--vendors", action="append", help="a vendor set, comma-separated in priority order; "
                                                      f"repeatable (default: {' and '.join(DEFAULT_VENDOR_SETS)})")
    p.add_argument("--runs", type=int, help="timed rounds (default 10; --quick 3)")
    p.add_argument("--warmup", type=int, help="untimed rounds first (default 2; --quick 1)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per compilation or scaling point")
    p.add_argument("--skip-plain-tvm-for", default="", help="comma-separated models not to build with plain TVM")
    p.add_argument("--skip", action="append", default=[], help="MODEL:VENDORSET not to build (repeatable)")
    p.add_argument("--scaling-sizes", help="comma-separated op counts (default 1000,10000,50000; --quick 100,300)")
    p.add_argument("--boundary-ops", type=int, help="ops in the boundary chain (default 200; --quick 20)")
    p.add_argument("--no-scaling", action="store_true")
    p.add_argument("--no-boundary", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny models and few repetitions: a smoke run")
    p.add_argument("--build", type=Path, default=models.DEFAULT_BUILD, help="model cache (default benchmarks/build)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    q = args.quick
    args.models = (args.models or ",".join(QUICK_MODELS if q else FULL_MODELS)).split(",")
    args.vendors = args.vendors or list(DEFAULT_VENDOR_SETS)
    args.runs = args.runs or (3 if q else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    args.skip_plain_tvm_for = [m for m in args.skip_plain_tvm_for.split(",") if m]
    args.scaling_sizes = [int(s) for s in (args.scaling_sizes or ("100,300" if q else "1000,10000,50000")).split(",")]
    args.boundary_ops = args.boundary_ops or (20 if q else 200)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1])
    args = parse_args(argv)
    import onnxruntime
    import tvm

    import byoc

    skipped: list = []
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": {}, "scaling": [], "boundary": [], "skipped": skipped,
    }
    with tempfile.TemporaryDirectory(prefix="byoc-bench-") as tmp:
        tmp = Path(tmp)
        for name in args.models:
            report["models"][name] = bench_model(name, args, tmp, skipped)
        if args.no_scaling:
            skipped.append({"what": "partition scaling", "why": "--no-scaling"})
        else:
            report["scaling"] = bench_scaling(args, tmp, skipped)
        if args.no_boundary:
            skipped.append({"what": "boundary overhead", "why": "--no-boundary"})
        else:
            report["boundary"] = bench_boundary(args, tmp, skipped)
    print_tables(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

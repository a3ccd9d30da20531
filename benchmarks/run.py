"""Benchmarks: latency, compile time, memory, partition scaling and boundary overhead.

Run from the repo root::

    python benchmarks/run.py                       # mobilenetv2, resnet50, bert; vendors c_source, json_runtime, dnnl
    python benchmarks/run.py --models mobilenetv2 --vendors dnnl --json out.json
    python benchmarks/run.py --quick               # tiny onnx.helper models, few repetitions (smoke run)

Every compilation (plain TVM, byoc per vendor set) and every scaling point
runs in its own subprocess with a time limit (``--timeout``): a configuration
that does not finish in time is reported as skipped, never waited on.

Timing: each configuration runs in its own long-lived timing process, because
in one process the thread pools of onnxruntime (spinning intra-op threads),
oneDNN (OpenMP) and TVM fight for the cores (measured: byoc[dnnl] BERT 536 ms
next to an onnxruntime session in the same process, 83 ms alone), which
measures contention, not the runtimes. Each timing process loads its model or
library once; the parent then runs rounds, asking one process at a time to run
(line protocol on stdin/stdout: ``run N`` -> N elapsed seconds), so only one
configuration works at a time and machine noise hits all alike. A latency is
the median of ``--runs`` rounds after ``--warmup`` rounds, measured in the
timing process around one call that includes converting the numpy inputs and
reading the outputs back. Before each request the parent pauses ``--settle-ms``
(default 50): onnxruntime's idle intra-op threads spin on after its call, and
whatever runs next would share the cores with them (measured: byoc[dnnl]
ResNet-50 int8 31.8 ms timed alone, 58.6 ms right after onnxruntime's turn,
31.6 ms with the pause). Each request runs ``--calls`` (default 3) calls back
to back, each one a sample: the first wakes the process's sleeping threads,
and the median is the steady latency (MobileNetV2, byoc[dnnl] / onnxruntime
in one run: 14.2 / 7.2 ms one call right after onnxruntime, 7.6 / 8.8 ms with
the pause and 4 calls). At the end each process saves its outputs
(``save`` -> ``np.savez``) and the parent compares them with onnxruntime's. A
process that dies, or does not answer within ``--round-timeout``, is killed
and reported as skipped with the reason.

* onnxruntime: CPU provider, ``intra_op_num_threads=2``.
* plain TVM: ``tvm.compile(byoc.import_model(model).mod)`` for the same host
  target byoc builds for.
* byoc: ``byoc.partition`` + ``byoc.build`` per vendor set (``--vendors``,
  repeatable, a set is comma-separated in priority order); ``--skip`` leaves a
  pair out.
* memory: ``byoc.tools.memory.estimate_memory(plan)`` with the built artifact's
  vendor runtimes: planned in all (the host's planned activations plus every
  vendor runtime's workspace, as the runtime reports it) next to the whole
  model's ONNC lower bound (every op, whatever the split).
* scaling: ``byoc.partition`` (annotate + merge + plan) on synthetic Relax
  chains and DAGs against TVM's ``FuseOpsByPattern`` + ``MergeCompositeFunctions``
  alone with the same patterns and checks (``byoc.pipeline.annotate.annotator.fusion_patterns``).
* boundary: a chain alternating an offloaded Add with a host Atan, against the
  same chain all on the host; (difference of medians) / number of partitions.
* in one process (``--in-process``): each byoc build loaded in a process that
  also holds an onnxruntime session of the same model (as it comes, and with
  ``session.intra_op.allow_spinning = 0``) and the plain TVM module, calls
  alternating: byoc's median after the peer's call against byoc alone. Every
  other figure here keeps each runtime in its own process.
* goals: issue 7's goal figures, each for the vendor set that does best on it,
  met or missed (printed, never asserted).

The timing processes are in ``benchmarks/timing_processes.py``, the goals and tables in
``benchmarks/run_report.py``.

byoc loads oneDNN's OpenMP with a short spin (``GOMP_SPINCOUNT=10000``) unless the
environment sets a wait policy (``codegens/dnnl/__init__.py`` has the figures).
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

import benchmark_models  # noqa: E402 - next to this file
from run_report import evaluate_goals, print_tables  # noqa: E402
from timing_processes import SETTLE_MS, _tvm_runner, machine_class, random_inputs, time_interleaved  # noqa: E402

HOST_TARGET = "x86_64"
FULL_MODELS = ("mobilenetv2", "resnet50", "bert")
QUICK_MODELS = ("tiny_cnn", "tiny_mlp")
DEFAULT_VENDOR_SETS = ("c_source", "json_runtime", "dnnl")
# Calls per timed request: after the pause, a first call wakes the process's sleeping threads
# (oneDNN's OpenMP team, onnxruntime's pool); the median over the calls is the steady latency.
CALLS_PER_REQUEST = 3
BOUNDARY_CALLS = 20  # calls per round in the boundary chain: a few us each, so one request runs several


# -- workers: one subprocess per compilation / scaling point --------------------------
def _host_target():
    from byoc.deploy.targets import resolve_target

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
    from byoc.tools.memory import estimate_memory

    t0 = time.perf_counter()
    imported = byoc.import_model(task["model"])
    t1 = time.perf_counter()
    plan = byoc.partition(imported, task["vendors"])
    t2 = time.perf_counter()
    artifact = byoc.build(plan, target=HOST_TARGET)
    t3 = time.perf_counter()
    artifact.export(task["out"], overwrite=True)
    memory = estimate_memory(plan, HOST_TARGET).with_runtimes(artifact.plan, artifact.runtime_memory)
    return {
        "import_s": t1 - t0, "partition_s": t2 - t1, "compile_s": t3 - t2,
        "partitions": len(plan.partitions), "offloaded_ops": plan.offloaded_ops, "host_ops": len(plan.host_ops),
        "memory": {k: v for k, v in memory.as_dict().items() if k.endswith("_bytes")},
    }


def synthetic_module(kind: str, ops: int):
    """A Relax ``main`` of ``ops`` elementwise calls on (1, 16).

    A chain, or a DAG where each add reads two earlier values.
    """
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
    from byoc.pipeline.annotate.annotator import fusion_patterns
    from byoc.pipeline.frontend import ImportedModel, TensorSpec

    vendors = byoc.vendor.registry.resolve_vendors(task["vendors"])

    def tvm_alone(mod):
        # byoc's own FusionPatterns (same patterns and checks): without the checks TVM
        # matches differently (measured: only the adds of a chain), so it is not a like-for-like baseline.
        patterns = fusion_patterns(vendors)
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


def _work_in_process(task: dict) -> dict:
    """byoc's latency in a process that also runs a peer runtime on the same model, calls alternating.

    Peers: an onnxruntime session (2 intra-op threads) as it comes, whose pool keeps spinning for a
    while after each call; the same with ``session.intra_op.allow_spinning = 0``; a plain TVM module
    (TVM's own thread pool), when one was built. Each peer's latency alone and alternating is given too.
    """
    import onnxruntime as ort

    import byoc

    artifact = byoc.load(task["lib"])
    inputs = random_inputs(Path(task["model"]))
    arrays = list(inputs.values())
    runs = task["runs"]

    def median_ms(*calls):
        """The median time of each of ``calls`` over ``runs`` rounds that call them in turn."""
        times = [[] for _ in calls]
        for _ in range(runs):
            for k, call in enumerate(calls):
                t = time.perf_counter()
                call()
                times[k].append(time.perf_counter() - t)
        return [statistics.median(ts) * 1e3 for ts in times]

    def session(spinning: bool):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        s = ort.InferenceSession(task["model"], options, providers=["CPUExecutionProvider"])
        return lambda: s.run(None, inputs)

    peers = {"onnxruntime": session(True), "onnxruntime, allow_spinning=0": session(False)}
    if task.get("plain_lib"):
        plain = _tvm_runner(task["plain_lib"])
        peers["plain TVM"] = lambda: plain(inputs)
    byoc_run = lambda: artifact.run(arrays)  # noqa: E731
    for run in [byoc_run, *peers.values()]:  # warm-up
        for _ in range(3):
            run()
    alone, = median_ms(byoc_run)
    rows = []
    for name, peer in peers.items():
        time.sleep(0.2)  # the last peer's threads go idle
        peer_alone, = median_ms(peer)
        peer_next, byoc_next = median_ms(peer, byoc_run)
        rows.append({"peer": name, "byoc_alone_ms": alone, "byoc_alternating_ms": byoc_next,
                     "peer_alone_ms": peer_alone, "peer_alternating_ms": peer_next})
    return {"rows": rows}


WORKERS = {"plain_tvm": _work_plain_tvm, "byoc": _work_byoc, "scaling": _work_scaling,
           "in_process": _work_in_process}


def worker_main(task_file: str, workers: dict | None = None) -> int:
    """The ``--worker TASK.json`` side of :func:`run_worker`: run the task by its ``kind`` with ``workers`` (default
    this script's ``WORKERS``) and write its result where the task says."""
    task = json.loads(Path(task_file).read_text())
    result = (workers or WORKERS)[task["kind"]](task)
    Path(task["result"]).write_text(json.dumps(result))
    return 0


def run_worker(task: dict, timeout: float, tmp: Path, script: Path | str = __file__) -> dict:
    """Run one task in a subprocess (own process group, killed whole on timeout).

    ``script`` is the program run as ``script --worker TASK.json`` (default this one, with ``WORKERS``;
    benchmarks/real_models.py passes itself, with its own workers).
    """
    task = dict(task, result=str(tmp / f"result-{os.getpid()}-{time.monotonic_ns()}.json"))
    task_file = tmp / "task.json"
    task_file.write_text(json.dumps(task))
    proc = subprocess.Popen([sys.executable, str(script), "--worker", str(task_file)], start_new_session=True,
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


def _max_err(outputs, reference) -> float:
    return max(float(np.max(np.abs(np.asarray(o, dtype=np.float64) - r))) for o, r in zip(outputs, reference))


def bench_model(name: str, args, tmp: Path, skipped: list) -> dict:
    """Compile every configuration of one model (workers), then time them interleaved (timing processes)."""
    path = benchmark_models.model_path(name, args.build)
    result = {"onnxruntime": {"status": "ok"}}
    timed = {"onnxruntime": ("onnxruntime", path)}
    if name in args.skip_plain_tvm_for:
        result["plain_tvm"] = {"status": "skipped", "why": "--skip-plain-tvm-for"}
    else:
        lib = tmp / f"{name}-plain.so"
        result["plain_tvm"] = run_worker({"kind": "plain_tvm", "model": str(path), "out": str(lib)}, args.timeout, tmp)
        timed["plain_tvm"] = ("tvm", lib)
    for vendor_set in args.vendors:
        key = f"byoc[{vendor_set}]"
        reason = args.skip.get(f"{name}:{vendor_set}")
        if reason:
            result[key] = {"status": "skipped", "why": reason}
            continue
        lib = tmp / f"{name}-{vendor_set.replace(',', '+')}.so"
        task = {"kind": "byoc", "model": str(path), "vendors": vendor_set.split(","), "out": str(lib)}
        result[key] = run_worker(task, args.timeout, tmp)
        timed[key] = ("byoc", lib)
    timed = {key: config for key, config in timed.items() if result[key]["status"] == "ok"}
    measured = time_interleaved(timed, random_inputs(path), args, tmp, args.runs, args.warmup,
                                calls=args.calls, settle_ms=args.settle_ms)
    for key, m in measured.items():
        if m["status"] == "ok":
            result[key]["latency_ms"] = m["median_s"] * 1e3
        else:
            result[key].update(status=m["status"], why=m["why"])
    ort = measured["onnxruntime"]
    plain = measured.get("plain_tvm", {})
    for key, m in measured.items():
        if key == "onnxruntime" or m["status"] != "ok":
            continue
        entry = result[key]
        if ort["status"] == "ok":
            entry["vs_onnxruntime"] = m["median_s"] / ort["median_s"]
            entry["max_abs_err_vs_onnxruntime"] = _max_err(m["outputs"], ort["outputs"])
        if plain.get("status") == "ok" and key != "plain_tvm":
            entry["speedup_vs_plain_tvm"] = plain["median_s"] / m["median_s"]
    for key, entry in result.items():
        if entry["status"] != "ok":
            skipped.append({"what": f"{name}: {key}", "why": f"{entry['status']}: {entry['why']}"})
    if args.in_process:
        for key, (kind, lib) in timed.items():
            if kind != "byoc" or result[key]["status"] != "ok":
                continue
            task = {"kind": "in_process", "model": str(path), "lib": str(lib), "runs": max(args.runs, 10) * 3,
                    "plain_lib": str(timed["plain_tvm"][1]) if result.get("plain_tvm", {}).get("status") == "ok"
                    else None}
            shared = run_worker(task, args.timeout, tmp)
            if shared["status"] == "ok":
                result[key]["in_process"] = shared["rows"]
            else:
                skipped.append({"what": f"{name}: {key} in one process", "why": f"{shared['status']}: {shared['why']}"})
    return result


# -- partition scaling and boundary overhead ------------------------------------------
def bench_scaling(args, tmp: Path, skipped: list) -> list:
    rows = []
    vendors = args.scaling_vendors.split(",")
    for graph in ("chain", "dag"):
        for ops in args.scaling_sizes:
            row = {"graph": graph, "ops": ops, "vendors": args.scaling_vendors}
            row.update(run_worker({"kind": "scaling", "graph": graph, "ops": ops, "vendors": vendors},
                                  args.timeout, tmp))
            if row["status"] == "ok":
                row["ratio"] = row["byoc_s"] / row["tvm_s"]
            else:
                skipped.append({"what": f"scaling {graph} {ops} ops", "why": f"{row['status']}: {row['why']}"})
            rows.append(row)
    return rows


def boundary_chain(ops: int):
    """(1, 8) chain alternating Add (a constant; offloaded) and Atan (host for every built-in vendor; dnnl has taken
    Neg, Sin and Cos since rotary embeddings needed them)."""
    from byoc.examples import const, model, tensor
    from onnx import helper

    nodes, inits, last = [], [], "x"
    for i in range(ops):
        out = f"v{i}"
        if i % 2 == 0:
            inits.append(const(f"c{i}", np.full((1, 8), 0.5, np.float32)))
            nodes.append(helper.make_node("Add", [last, f"c{i}"], [out], name=f"add{i}"))
        else:
            nodes.append(helper.make_node("Atan", [last], [out], name=f"atan{i}"))
        last = out
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    return model(nodes, [tensor("x", [1, 8])], [tensor("y", [1, 8])], inits, name="boundary_chain")


def bench_boundary(args, tmp: Path, skipped: list) -> list:
    import onnx

    path = tmp / f"boundary-{args.boundary_ops}.onnx"
    onnx.save(boundary_chain(args.boundary_ops), str(path))
    host_lib = tmp / "b-host.so"
    host = run_worker({"kind": "byoc", "model": str(path), "vendors": [], "out": str(host_lib)}, args.timeout, tmp)
    if host["status"] != "ok":
        skipped.append({"what": "boundary: all-host chain", "why": f"{host['status']}: {host['why']}"})
        return []
    configs, built = {"host": ("byoc", host_lib)}, {}
    for vendor_set in args.vendors:
        lib = tmp / f"b-{vendor_set.replace(',', '+')}.so"
        result = run_worker({"kind": "byoc", "model": str(path), "vendors": vendor_set.split(","), "out": str(lib)},
                            args.timeout, tmp)
        if result["status"] == "ok":
            configs[vendor_set], built[vendor_set] = ("byoc", lib), result
        else:
            skipped.append({"what": f"boundary: {vendor_set}", "why": f"{result['status']}: {result['why']}"})
    measured = time_interleaved(configs, random_inputs(path), args, tmp, args.runs, args.warmup, BOUNDARY_CALLS,
                                settle_ms=args.settle_ms)
    if measured["host"]["status"] != "ok":
        skipped.append({"what": "boundary: all-host chain", "why": f"{measured['host']['status']}: "
                                                                  f"{measured['host']['why']}"})
        return []
    host_s = measured["host"]["median_s"]
    rows = []
    for vendor_set, result in built.items():
        m = measured[vendor_set]
        if m["status"] != "ok":
            skipped.append({"what": f"boundary: {vendor_set}", "why": f"{m['status']}: {m['why']}"})
            continue
        calls = max(result["partitions"], 1)
        rows.append({"vendors": vendor_set, "ops": args.boundary_ops, "partitions": result["partitions"],
                     "chain_us": m["median_s"] * 1e6, "host_chain_us": host_s * 1e6,
                     "us_per_call": (m["median_s"] - host_s) * 1e6 / calls})
    return rows


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(benchmark_models.ALL_MODELS)} "
                                    f"(default {','.join(FULL_MODELS)}; with --quick {','.join(QUICK_MODELS)})")
    p.add_argument("--vendors", action="append", help="a vendor set, comma-separated in priority order; "
                                                      f"repeatable (default: {', '.join(DEFAULT_VENDOR_SETS)})")
    p.add_argument("--runs", type=int, help="timed rounds (default 10; --quick 3)")
    p.add_argument("--warmup", type=int, help="untimed rounds first (default 2; --quick 1)")
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds per compilation or scaling point, and for a timing process to load (default 1200)")
    p.add_argument("--calls", type=int, default=CALLS_PER_REQUEST,
                   help=f"back-to-back calls per timed request, each one a sample (default {CALLS_PER_REQUEST})")
    p.add_argument("--settle-ms", type=float, default=SETTLE_MS,
                   help=f"pause before each timed request, so no other process's threads still spin "
                        f"(default {SETTLE_MS})")
    p.add_argument("--round-timeout", type=float, default=300,
                   help="seconds a timing process may take for one run before it is killed and skipped (default 300)")
    p.add_argument("--skip-plain-tvm-for", default="", help="comma-separated models not to build with plain TVM")
    p.add_argument("--skip", action="append", default=[], metavar="MODEL:VENDORSET",
                   help="a model / vendor set pair not to build (repeatable)")
    p.add_argument("--scaling-sizes", help="comma-separated op counts (default 1000,10000,50000; --quick 100,300)")
    p.add_argument("--scaling-vendors", help="the vendor set of the scaling runs (default: the first --vendors)")
    p.add_argument("--boundary-ops", type=int, help="ops in the boundary chain (default 200; --quick 20)")
    p.add_argument("--in-process", action="store_true",
                   help="also time each byoc build in one process with an onnxruntime session (spinning, and "
                        "allow_spinning=0) and the plain TVM module, calls alternating")
    p.add_argument("--no-scaling", action="store_true")
    p.add_argument("--no-boundary", action="store_true")
    p.add_argument("--quick", action="store_true", help="tiny models and few repetitions: a smoke run")
    p.add_argument("--build", type=Path, default=benchmark_models.DEFAULT_BUILD, help="model cache (default benchmarks/build)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    q = args.quick
    args.models = (args.models or ",".join(QUICK_MODELS if q else FULL_MODELS)).split(",")
    args.vendors = args.vendors or list(DEFAULT_VENDOR_SETS)
    args.runs = args.runs or (3 if q else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    args.skip_plain_tvm_for = [m for m in args.skip_plain_tvm_for.split(",") if m]
    args.skip = skipped_pairs(p, args.skip)
    args.scaling_sizes = [int(s) for s in (args.scaling_sizes or ("100,300" if q else "1000,10000,50000")).split(",")]
    args.scaling_vendors = args.scaling_vendors or args.vendors[0]
    args.boundary_ops = args.boundary_ops or (20 if q else 200)
    return args


def skipped_pairs(p: argparse.ArgumentParser, values: list) -> dict:
    """--skip's MODEL:VENDORSET values as {pair: why} (a usage error names the malformed ones); real_models.py too."""
    bad = [s for s in values if s.count(":") != 1]
    if bad:
        p.error(f"--skip takes MODEL:VENDORSET, got {', '.join(bad)}")
    return {s: "--skip" for s in values}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1])
    args = parse_args(argv)
    import onnxruntime
    import tvm

    import byoc

    skipped: list = []
    report = {
        "machine": {"class": machine_class(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__,
                    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")},
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
    report["goals"] = evaluate_goals(report)
    print_tables(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

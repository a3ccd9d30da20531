"""Where the time goes in a byoc build: offloaded partitions against host functions.

Run from the repo root::

    python benchmarks/where_time_goes.py bert --vendors dnnl
    python benchmarks/where_time_goes.py resnet50 --vendors dnnl --onednn-verbose --json profile.json

``MODEL`` is a name from ``benchmarks/benchmark_models.py`` (exported to
``benchmarks/build/<name>.onnx`` on first use) or a path to an ``.onnx`` file.
This process builds byoc (partition + build + export for ``--target``); a
child process loads the library and measures, so nothing of the build is in
the measurement. Inputs are random, converted to TVM tensors once.

* run: median wall time of ``main`` over ``--runs`` runs after ``--warmup``.
* calls: TVM 0.27's Relax VM has no profiler any more (``VirtualMachine(...,
  profile=True)`` and ``vm.profile`` are gone from the 0.27 wheel), so the
  child installs the VM's instrument hook (``vm.set_instrument``), which the VM
  calls before and after every Call instruction, and times each call between
  the two. Names are grouped: a partition's symbol is "offloaded (<vendor>)";
  a TIR function of the host build is "host (TIR)"; ``vm.builtin.*``
  (allocation, shape checks, reshape views) is "host (VM builtins)"; what is
  in no call is VM dispatch plus the hook's own cost (a few us per call,
  which is why the hooked run is longer than the plain one; percentages are
  of the hooked run).
* ``--onednn-verbose``: a second child with ``ONEDNN_VERBOSE=profile_exec``;
  oneDNN prints one line per primitive execution with its time in ms. Only
  the lines of the ``--runs`` steady-state runs count (not load, not the
  warm-up runs): their sum per primitive kind, per run.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
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
from timing_processes import machine_class  # noqa: E402

BUILTIN_PREFIX = "vm.builtin."


# -- child: load the library and measure ------------------------------------------------
def _load(spec: dict):
    import tvm
    from tvm import relax

    from byoc.pipeline.artifact.artifact import load_library

    vm = relax.VirtualMachine(load_library(spec["library"]), tvm.cpu())  # loads the vendor runtimes it holds
    with np.load(spec["inputs"]) as saved:
        args = [tvm.runtime.tensor(saved[f"arr_{i}"]) for i in range(len(saved.files))]
    for _ in range(spec["warmup"]):
        vm["main"](*args)
    return vm, args


def _timed_runs(vm, args, runs: int) -> list:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        vm["main"](*args)
        times.append(time.perf_counter() - t)
    return times


def _child_calls(spec: dict) -> dict:
    """Plain runs, then hooked runs: seconds per call name, per run."""
    vm, args = _load(spec)
    runs = spec["runs"]
    plain = _timed_runs(vm, args, runs)
    totals: dict = {}
    started: list = []

    def hook(_func, name, before, _ret, *_args):
        if before:
            started.append(time.perf_counter())
        else:
            elapsed = time.perf_counter() - started.pop()
            entry = totals.setdefault(str(name), [0, 0.0])
            entry[0] += 1
            entry[1] += elapsed

    vm.set_instrument(hook)
    hooked = _timed_runs(vm, args, runs)
    return {"run_s": statistics.median(plain), "hooked_s": sum(hooked) / runs,
            "calls": {name: [count / runs, seconds / runs] for name, (count, seconds) in totals.items()}}


def _child_onednn(spec: dict) -> dict:
    """Steady-state runs under ONEDNN_VERBOSE: the byte range of stdout that holds their lines."""
    vm, args = _load(spec)
    libc = ctypes.CDLL(None)
    libc.fflush(None)  # oneDNN prints with C stdio: flush before reading the file's size
    start = os.fstat(1).st_size
    _timed_runs(vm, args, spec["runs"])
    libc.fflush(None)
    return {"start": start, "end": os.fstat(1).st_size}


CHILDREN = {"calls": _child_calls, "onednn": _child_onednn}


def _child_main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    result = CHILDREN[spec["mode"]](spec)
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


def run_child(spec: dict, tmp: Path, timeout: float, env=None, stdout=subprocess.DEVNULL) -> dict:
    spec = dict(spec, result=str(tmp / f"{spec['mode']}-result.json"))
    spec_file = tmp / f"{spec['mode']}-spec.json"
    spec_file.write_text(json.dumps(spec))
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", str(spec_file)], env=env, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"where_time_goes: the {spec['mode']} run did not finish within --timeout {timeout:g} s"
                         ) from None
    if proc.returncode != 0:
        raise SystemExit(f"where_time_goes: the {spec['mode']} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(Path(spec["result"]).read_text())


# -- parent: build, group, print -----------------------------------------------------------
def _op_summary(ops) -> str:
    counts = collections.Counter(op.rsplit(".", 1)[-1] for op in ops)
    return f"{len(ops)}: " + ", ".join(f"{op} {n}" for op, n in counts.most_common())


def group_calls(calls: dict, partitions: dict) -> list:
    """One row per call name: where it ran (offloaded (<vendor>) | host (TIR) | host (VM builtins)), ms per run."""
    rows = []
    for name, (count, seconds) in calls.items():
        partition = partitions.get(name)
        if partition is not None:
            where, ops = f"offloaded ({partition.vendor})", _op_summary(partition.ops)
        else:
            where, ops = ("host (VM builtins)" if name.startswith(BUILTIN_PREFIX) else "host (TIR)"), "-"
        rows.append({"function": name, "where": where, "ops": ops, "calls": count, "ms": seconds * 1e3})
    return sorted(rows, key=lambda r: -r["ms"])


def group_totals(rows: list, hooked_ms: float) -> list:
    groups: dict = {}
    for r in rows:
        g = groups.setdefault(r["where"], {"group": r["where"], "functions": 0, "calls": 0.0, "ms": 0.0})
        g["functions"] += 1
        g["calls"] += r["calls"]
        g["ms"] += r["ms"]
    totals = sorted(groups.values(), key=lambda g: (not g["group"].startswith("offloaded"), -g["ms"]))
    host = [g for g in totals if g["group"].startswith("host")]
    if host:
        totals.append({"group": "host total", "functions": sum(g["functions"] for g in host),
                       "calls": sum(g["calls"] for g in host), "ms": sum(g["ms"] for g in host)})
    in_calls = sum(r["ms"] for r in rows)
    totals.append({"group": "not in any call (VM dispatch, hook)", "functions": None, "calls": None,
                   "ms": hooked_ms - in_calls})
    totals.append({"group": "run (hooked)", "functions": None, "calls": None, "ms": hooked_ms})
    for g in totals:
        g["percent"] = 100 * g["ms"] / hooked_ms
    return totals


def parse_onednn(text: str, runs: int) -> list:
    """Per primitive kind: executions and ms per run, from ONEDNN_VERBOSE=profile_exec lines."""
    kinds: dict = {}
    for line in text.splitlines():
        fields = line.strip().split(",")
        if not fields[0].startswith("onednn_verbose") or "exec" not in fields:
            continue
        i = fields.index("exec")  # onednn_verbose[,timestamp][,primitive],exec,cpu,<kind>,<impl>,...,<ms>
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        k = kinds.setdefault(fields[i + 2], {"kind": fields[i + 2], "impls": collections.Counter(), "count": 0,
                                             "ms": 0.0})
        k["impls"][fields[i + 3]] += 1
        k["count"] += 1
        k["ms"] += ms
    total = sum(k["ms"] for k in kinds.values()) or 1.0
    return [{"kind": k["kind"], "implementations": [impl for impl, _ in k["impls"].most_common()],
             "per_run": k["count"] / runs, "ms": k["ms"] / runs, "percent": 100 * k["ms"] / total}
            for k in sorted(kinds.values(), key=lambda k: -k["ms"])]


def _model_path(model: str, build: Path) -> Path:
    if model.endswith(".onnx"):
        path = Path(model)
        if not path.is_file():
            raise SystemExit(f"where_time_goes: {model} does not exist")
        return path
    return benchmark_models.model_path(model, build)


def build(path: Path, vendors: list, target: str, out: Path, keep_on_host=(), input_shapes=None):
    """partition + build + export; returns the plan and the artifact's input specs."""
    import byoc

    imported = byoc.import_model(str(path), input_shapes=input_shapes or None)
    plan = byoc.partition(imported, vendors, target=target, keep_on_host=keep_on_host)
    artifact = byoc.build(plan)
    artifact.export(out)
    return plan, artifact.inputs


def print_report(report: dict, top: int) -> None:
    print(f"# Profile: {report['model']} with byoc[{report['vendors']}], target {report['target']}, "
          f"machine class {machine_class()}")
    print()
    print(f"partitions: {report['partitions']}; ops offloaded {report['offloaded_ops']} of "
          f"{report['offloaded_ops'] + report['host_ops']}; build {report['build_s']:.1f} s")
    print(f"run: {report['run_ms']:.2f} ms (median of {report['runs']}, no hook); with the hook "
          f"{report['hooked_ms']:.2f} ms (mean of {report['runs']}): the 100% below")
    print()
    print(f"## Top {min(top, len(report['calls']))} of {len(report['calls'])} functions (ms per run)")
    print()
    print("| function | where | ops | calls | total | % of run |")
    print("|---|---|---|---|---|---|")
    for r in report["calls"][:top]:
        print(f"| {r['function']} | {r['where']} | {r['ops']} | {r['calls']:g} | {r['ms']:.3f} ms | "
              f"{100 * r['ms'] / report['hooked_ms']:.1f}% |")
    print()
    print("## Totals")
    print()
    print("| group | functions | calls | total | % of run |")
    print("|---|---|---|---|---|")
    for g in report["totals"]:
        functions = "" if g["functions"] is None else g["functions"]
        calls = "" if g["calls"] is None else f"{g['calls']:g}"
        print(f"| {g['group']} | {functions} | {calls} | {g['ms']:.2f} ms | {g['percent']:.1f}% |")
    if report.get("onednn") is not None:
        total = sum(k["ms"] for k in report["onednn"])
        print()
        print(f"## oneDNN primitives (ONEDNN_VERBOSE=profile_exec, mean of {report['runs']} steady-state runs; "
              f"{total:.2f} ms per run in primitives)")
        print()
        print("| primitive kind | implementations | executions per run | total | % of oneDNN time |")
        print("|---|---|---|---|---|")
        for k in report["onednn"]:
            print(f"| {k['kind']} | {', '.join(k['implementations'])} | {k['per_run']:g} | {k['ms']:.3f} ms | "
                  f"{k['percent']:.1f}% |")


def _input_shape(text: str):
    from byoc.partition.__main__ import _input_shape as parse  # the CLI's own NAME=D1,D2 parser

    return parse(text)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help=f"one of {', '.join(benchmark_models.ALL_MODELS)}, or a path to an .onnx file")
    p.add_argument("--vendors", required=True, help="the vendor set, comma-separated in priority order")
    p.add_argument("--target", default="x86_64", help="a target preset that runs on this machine (default x86_64)")
    p.add_argument("--keep-on-host", default="", metavar="NODE|OPTYPE[,...]",
                   help="ONNX node names or op types to keep on the host, comma-separated")
    p.add_argument("--input-shape", type=_input_shape, action="append", default=[], metavar="NAME=D1,D2,...",
                   help="static shape of an input with symbolic dimensions (repeatable), as in byoc.partition")
    p.add_argument("--runs", type=int, default=10, help="measured runs (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="runs first, not measured (default 2, at least 1)")
    p.add_argument("--top", type=int, default=20, help="functions listed (default 20)")
    p.add_argument("--onednn-verbose", action="store_true",
                   help="also time oneDNN primitives (ONEDNN_VERBOSE=profile_exec in a second child)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per measuring child (default 1800)")
    p.add_argument("--build", type=Path, default=benchmark_models.DEFAULT_BUILD, help="model cache (default benchmarks/build)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.runs < 1 or args.warmup < 1:
        p.error("--runs and --warmup must be at least 1 (the first call is never measured)")
    from byoc.deploy.targets import resolve_target

    if not resolve_target(args.target).is_host:
        p.error(f"--target {args.target} does not run on this machine; measure a host target")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child_main(argv[1])
    args = parse_args(argv)
    path = _model_path(args.model, args.build)
    vendors = args.vendors.split(",")
    with tempfile.TemporaryDirectory(prefix="byoc-where-time-goes-") as tmp:
        tmp = Path(tmp)
        library = tmp / "model.so"
        t0 = time.perf_counter()
        keep = [name for name in args.keep_on_host.split(",") if name]
        plan, specs = build(path, vendors, args.target, library, keep, dict(args.input_shape))
        build_s = time.perf_counter() - t0
        rng = np.random.default_rng(1)
        np.savez(tmp / "inputs.npz", *[rng.standard_normal(s.shape).astype(s.dtype) for s in specs])
        spec = {"library": str(library), "inputs": str(tmp / "inputs.npz"), "runs": args.runs,
                "warmup": args.warmup}
        measured = run_child(dict(spec, mode="calls"), tmp, args.timeout)
        onednn = None
        if args.onednn_verbose:
            log = tmp / "onednn.log"
            with open(log, "w") as out:
                span = run_child(dict(spec, mode="onednn"), tmp, args.timeout,
                                 env=dict(os.environ, ONEDNN_VERBOSE="profile_exec"), stdout=out)
            with open(log, "rb") as f:
                f.seek(span["start"])
                text = f.read(span["end"] - span["start"]).decode(errors="replace")
            onednn = parse_onednn(text, args.runs)
    hooked_ms = measured["hooked_s"] * 1e3
    rows = group_calls(measured["calls"], {p.name: p for p in plan.partitions})
    report = {
        "model": args.model, "vendors": args.vendors, "target": args.target, "runs": args.runs,
        "warmup": args.warmup, "build_s": build_s, "partitions": len(plan.partitions),
        "offloaded_ops": plan.offloaded_ops, "host_ops": len(plan.host_ops),
        "run_ms": measured["run_s"] * 1e3, "hooked_ms": hooked_ms,
        "calls": rows, "totals": group_totals(rows, hooked_ms), "onednn": onednn,
    }
    print_report(report, args.top)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Latency on a busy machine: byoc and onnxruntime idle and beside busy processes.

    python benchmarks/under_load.py [--models ppocr_det,shufflenet,...] [--busy 1] [--processes 2]

For each model (real-model suite names from ``benchmarks/real_models.py``, or
``benchmarks/run.py`` model names with ``--run-models``) byoc builds the
model once with ``--vendors`` and exports it. Then, for each load (idle, and
``--busy`` busy-looping processes), each side is timed in fresh processes:
``--processes`` of them per side, one after the other, each loading the model
and reporting the median of ``--runs`` calls after ``--warmup``. The worst
median over a side's processes counts, so a slowdown that shows in one process
and not the next is not averaged away. Only one side runs at a time.

The busy processes are plain Python loops, started before a load's first
timing process and ended by their pid after its last one. Each also ends itself
after ``--busy-seconds``, so none outlives a crashed run.

onnxruntime runs the original model with ``intra_op_num_threads=2``, as in
the other benchmarks; byoc runs with its defaults (no ``threads=``), or with
``--threads``. Each ``--byoc-env KEY=VALUE[,...]`` adds a byoc side run with
those environment settings (``BYOC_DNNL_CONTENTION=off``, the behaviour before
the dnnl runtime chose programs per call; ``OMP_WAIT_POLICY=PASSIVE``), so a
setting is compared with the default in the same run, under the same noise.
The script prints ratios, never asserts timings.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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

import real_models_catalog as rm  # noqa: E402 - benchmarks/real_models_catalog.py: the suite's models, inputs
import run as bench  # noqa: E402 - benchmarks/run.py: run_worker
import timing_processes as timing  # noqa: E402 - benchmarks/timing_processes.py: TimingProcess, random_inputs

DEFAULT_MODELS = ("ppocr_det", "ppocr_cls", "shufflenet", "squeezenet", "silero_vad_openvino", "magika",
                  "nudenet_320n")
BUSY_LOOP = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


def start_busy(count: int, seconds: float) -> list[subprocess.Popen]:
    """``count`` busy-looping processes, each ending itself after ``seconds``."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds)]) for _ in range(count)]


def stop_busy(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def sides(args) -> dict[str, tuple[str, dict]]:
    """What is timed, by label: its kind (``byoc`` or ``onnxruntime``) and the environment it adds.

    ``byoc`` and ``onnxruntime`` run in this process's environment; every
    ``--byoc-env`` adds a byoc side labelled by its settings, so a setting is
    compared with byoc's default in the same run.
    """
    chosen = {"byoc": ("byoc", {}), "onnxruntime": ("onnxruntime", {})}
    for settings in args.byoc_env:
        chosen[f"byoc {settings}"] = ("byoc", dict(item.split("=", 1) for item in settings.split(",")))
    return chosen


def time_once(kind: str, path: Path, inputs: tuple[str, list], args, tmp: Path, env: dict) -> dict:
    """One fresh timing process: load, warm up, time; ``{"median_s"}`` or ``{"why"}``.

    ``inputs`` is the .npz file of the inputs and their names, written once per model.
    """
    input_file, input_names = inputs
    spec = {"kind": kind, "path": str(path), "inputs": input_file, "input_names": input_names,
            "outputs": str(tmp / f"out-{time.monotonic_ns()}.npz")}
    if kind == "byoc" and args.threads:
        spec["threads"] = args.threads
    proc = timing.TimingProcess(kind, spec, tmp, env)
    try:
        if proc.reply("load", args.timeout, expect="ready") is None:
            return {"why": proc.why}
        if args.warmup and proc.request(f"run {args.warmup}", args.round_timeout * args.warmup) is None:
            return {"why": proc.why}
        line = proc.request(f"run {args.runs}", args.round_timeout * args.runs)
        if line is None:
            return {"why": proc.why}
        return {"median_s": statistics.median(float(t) for t in line.split())}
    finally:
        proc.close()


def time_side(kind: str, path: Path, inputs: tuple[str, list], args, tmp: Path, env: dict) -> dict:
    """The worst median over ``--processes`` fresh processes, and every median."""
    medians = []
    for _ in range(args.processes):
        result = time_once(kind, path, inputs, args, tmp, env)
        if "why" in result:
            return {"status": "error", "why": result["why"]}
        medians.append(result["median_s"])
    return {"status": "ok", "worst_ms": max(medians) * 1e3, "medians_ms": [m * 1e3 for m in medians]}


def model_source(name: str, args) -> tuple[Path, dict, dict | None]:
    """The model's path, its inputs, and the static input shapes byoc needs."""
    if name in rm.MODELS:
        model = rm.MODELS[name]
        path = rm.model_path(model, args.cache)
        return path, rm.make_inputs(model, path), model.input_shapes or None
    import benchmark_models  # needs torch to build them

    path = benchmark_models.model_path(name)
    return path, timing.random_inputs(path), None


def bench_model(name: str, args, tmp: Path) -> dict:
    try:
        path, inputs, shapes = model_source(name, args)
    except Exception as err:  # noqa: BLE001 - a model that cannot be had is a row, not a crash
        return {"status": "unavailable", "why": f"{type(err).__name__}: {err}"}
    lib = tmp / f"{name}.so"
    task = {"kind": "build", "model": str(path), "input_shapes": shapes, "vendors": args.vendors.split(","),
            "inputs": str(tmp / f"{name}-in.npz"), "input_names": list(inputs),
            "outputs": str(tmp / f"{name}-out.npz"), "export": str(lib)}
    np.savez(task["inputs"], *inputs.values())
    built = bench.run_worker(task, args.timeout, tmp, script=HERE / "real_models.py")
    if built.get("status") != "ok" or built.get("stage") != "done":
        return {"status": "build failed", "why": built.get("why") or built.get("error")}
    entry = {"status": "ok", "partitions": built["partitions"], "loads": {}}
    saved = (task["inputs"], task["input_names"])
    for busy in (0, args.busy):
        procs = start_busy(busy, args.busy_seconds)
        try:
            time.sleep(0.5 if busy else 0)  # let the loops get going
            # keyed by the count as text, as the JSON holds it
            entry["loads"][str(busy)] = {
                label: time_side(kind, path if kind == "onnxruntime" else lib, saved, args, tmp, env)
                for label, (kind, env) in sides(args).items()}
        finally:
            stop_busy(procs)
    return entry


def _ms(side: dict) -> str:
    return f"{side['worst_ms']:.2f} ms" if side.get("status") == "ok" else side.get("status", "-")


def print_table(report: dict, busy: int) -> None:
    print(f"## Latency idle and beside {busy} busy process(es) (worst median of {report['processes']} fresh "
          f"processes per side, {report['runs']} runs each; byoc[{report['vendors']}], onnxruntime with "
          f"2 threads; {report['cpus']} CPUs available)\n")
    print("| model | byoc idle | byoc busy | busy / idle | onnxruntime idle | onnxruntime busy | busy / idle | "
          "byoc / ort idle | byoc / ort busy |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = {"byoc_slowdown": [], "ort_slowdown": [], "idle": [], "busy": []}
    for name, entry in report["models"].items():
        if entry["status"] != "ok":
            print(f"| {name} | {entry['status']}: {entry['why']} | | | | | | | |")
            continue
        idle, loaded = entry["loads"]["0"], entry["loads"][str(busy)]
        cells = [_ms(idle["byoc"]), _ms(loaded["byoc"]), "", _ms(idle["onnxruntime"]), _ms(loaded["onnxruntime"]),
                 "", "", ""]
        if all(s.get("status") == "ok" for load in (idle, loaded) for s in load.values()):
            b0, b1 = idle["byoc"]["worst_ms"], loaded["byoc"]["worst_ms"]
            o0, o1 = idle["onnxruntime"]["worst_ms"], loaded["onnxruntime"]["worst_ms"]
            for key, value in (("byoc_slowdown", b1 / b0), ("ort_slowdown", o1 / o0), ("idle", b0 / o0),
                               ("busy", b1 / o1)):
                ratios[key].append(value)
            cells[2], cells[5], cells[6], cells[7] = (f"{b1 / b0:.2f}x", f"{o1 / o0:.2f}x", f"{b0 / o0:.2f}x",
                                                      f"{b1 / o1:.2f}x")
        print(f"| {name} | " + " | ".join(cells) + " |")
    geo = {key: math.exp(statistics.fmean(math.log(v) for v in values)) for key, values in ratios.items() if values}
    if geo:
        print(f"\nGeometric means: byoc busy/idle {geo['byoc_slowdown']:.2f}x (worst "
              f"{max(ratios['byoc_slowdown']):.2f}x), onnxruntime busy/idle {geo['ort_slowdown']:.2f}x; "
              f"byoc/onnxruntime idle {geo['idle']:.2f}x, busy {geo['busy']:.2f}x")


def print_variants(report: dict, busy: int) -> None:
    """Each ``--byoc-env`` side against byoc's default, idle and busy, in the same run."""
    print("\n## byoc settings compared in the same run (worst median; ratio to byoc's default)\n")
    print("| model | side | idle | vs default idle | busy | vs default busy | busy / idle |")
    print("|---|---|---|---|---|---|---|")
    for name, entry in report["models"].items():
        if entry["status"] != "ok":
            continue
        idle, loaded = entry["loads"]["0"], entry["loads"][str(busy)]
        for label in idle:
            if label == "onnxruntime" or not all(load[s].get("status") == "ok" for load in (idle, loaded)
                                                 for s in (label, "byoc")):
                continue
            i, b = idle[label]["worst_ms"], loaded[label]["worst_ms"]
            print(f"| {name} | {label} | {i:.2f} ms | {i / idle['byoc']['worst_ms']:.2f}x | {b:.2f} ms | "
                  f"{b / loaded['byoc']['worst_ms']:.2f}x | {b / i:.2f}x |")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help=f"comma-separated real-model suite names (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--run-models", default="", help="comma-separated benchmarks/run.py models too (needs torch)")
    p.add_argument("--vendors", default="dnnl,c_source", help="byoc's vendor set (default dnnl,c_source)")
    p.add_argument("--threads", type=int, default=None, help="byoc.load(threads=...) (default: byoc's default)")
    p.add_argument("--byoc-env", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="also time byoc with these environment settings (repeatable), e.g. OMP_WAIT_POLICY=PASSIVE")
    p.add_argument("--busy", type=int, default=1, help="busy processes beside the model (default 1)")
    p.add_argument("--busy-seconds", type=float, default=900, help="a busy process ends itself after this")
    p.add_argument("--processes", type=int, default=2, help="fresh timing processes per side and load (>= 2)")
    p.add_argument("--runs", type=int, default=30, help="timed calls per process (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds for a build, or for a process to load")
    p.add_argument("--round-timeout", type=float, default=120, help="seconds one call may take")
    p.add_argument("--cache", type=Path, default=None, help="model cache (as benchmarks/real_models.py)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if args.processes < 1 or args.busy < 1:
        p.error("--processes and --busy take a count >= 1")
    for settings in args.byoc_env:
        if not all("=" in item and item.split("=", 1)[0] for item in settings.split(",")):
            p.error(f"--byoc-env takes KEY=VALUE[,KEY=VALUE], not {settings!r}")
    args.cache = args.cache or rm.default_cache()
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from byoc.host.threads import available_cpus

    names = [n for n in args.models.split(",") + args.run_models.split(",") if n]
    report = {"vendors": args.vendors, "processes": args.processes, "runs": args.runs, "busy": args.busy,
              "cpus": available_cpus(), "threads": args.threads, "models": {}}
    with tempfile.TemporaryDirectory(prefix="byoc-load-") as tmp:
        for name in names:
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            report["models"][name] = bench_model(name, args, Path(tmp))
    print_table(report, args.busy)
    if args.byoc_env:
        print_variants(report, args.busy)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Dynamic shapes: one artifact for every shape, against a static build per shape and onnxruntime.

Run from the repo root, after ``benchmarks/dynamic_models.py`` has exported the models (its docstring says
how: it needs torch, this script does not)::

    python benchmarks/dynamic.py                         # every cached model, vendors dnnl
    python benchmarks/dynamic.py bert_tiny_dyn --vendors dnnl,json_runtime --runs 30
    python benchmarks/dynamic.py --cache-check bert_tiny_dyn   # 50 distinct shapes: the cache's bound

For each model of ``dynamic_models.MODELS`` whose file is cached, at each of its test shapes:

* builds, each in a fresh process (``--build`` worker): the dynamic artifact once, with no
  ``input_shapes``, and a static artifact per shape (``input_shapes`` of that shape); compile time is
  ``byoc.compile`` in that process, export not included;
* timing, each configuration in its own long-lived process (``timing_processes.py``): onnxruntime and
  the dynamic artifact load every shape's inputs, a static artifact its own shape's;
* **first call**: the dynamic artifact's first call at each shape, in the order listed, before anything
  else runs in its process. The first shape's also pays the process's own start (thread pools, the
  runtime's first allocation): it is reported apart, and the goal ("at most 5x a steady call") is judged
  on the shapes after it, which are new shapes of an artifact already running;
* **steady**: per round, every process runs ``--calls`` calls at each shape in turn (single-shape
  medians), and the dynamic artifact and onnxruntime then run ``--calls`` round-robin cycles A, B, C,
  A, B, C (the round-robin medians). One process works at a time, after a pause (``--settle-ms``);
* correctness: each build's outputs at each shape against onnxruntime's (max relative error).

The table gives per model and shape: static, dynamic and onnxruntime steady medians, the dynamic
round-robin median, the first call, and the ratios the goals of issue 30 name: dynamic / static (goal
<= 1.05), dynamic / onnxruntime (goal: geometric mean <= 1), round-robin / single (goal <= 1.05), first /
steady (goal <= 5); and per model the dynamic compile time over the mean static one (goal <= 1.2).
``--json FILE`` writes every figure.

``--cache-check MODEL`` runs the dynamic artifact at 50 distinct shapes (one dim over a range of 50 sizes, in a
scrambled order) in a fresh process and prints,
after every 10, the specializations alive and made in each dnnl partition (``get_specializations``) and
the process's resident memory: the bound (``shape_cache``, default 8) must hold and memory stay flat.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import dynamic_models as catalog  # noqa: E402 - benchmarks/dynamic_models.py: MODELS, inputs (torch not needed)
import timing_processes as timing  # noqa: E402 - TimingProcess, SETTLE_MS

GOALS = {"dyn/static": 1.05, "rr/single": 1.05, "first/steady": 5.0, "compile": 1.2}


# -- models and inputs -----------------------------------------------------------------
def model_file(name: str, folder: Path) -> Path | None:
    """The model's cached ONNX file, or None (not exported yet)."""
    if catalog.MODELS[name].module is None:
        try:
            return catalog._ppocr_path()
        except catalog.Skip:
            return None
    path = folder / f"{name}.onnx"
    return path if path.exists() else None


def shape_inputs(path: Path, name: str) -> list[dict]:
    """Seeded inputs per test shape of the model (dynamic_models' feeds: token ids, padded masks, N(0, 1))."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    specs = catalog._graph_inputs(model)
    dtypes = {vi.name: catalog._ONNX_NUMPY[vi.type.tensor_type.elem_type] for vi in specs}
    sets = []
    for k, binding in enumerate(catalog.MODELS[name].test_dims):
        shapes = {vi.name: catalog._concrete(catalog._dims(vi), binding) for vi in specs}
        sets.append(catalog._feeds(shapes, dtypes, np.random.default_rng(k)))
    return sets


def shape_label(binding: dict) -> str:
    return ",".join(f"{dim}={size}" for dim, size in binding.items())


# -- build worker: one compile per fresh process ---------------------------------------------
def _build_main(task_file: str) -> int:
    import byoc

    task = json.loads(Path(task_file).read_text())
    start = time.perf_counter()
    artifact = byoc.compile(task["model"], vendors=task["vendors"], input_shapes=task["input_shapes"])
    compile_s = time.perf_counter() - start
    artifact.export(task["out"], overwrite=True)
    partitions = [p.vendor for p in artifact.plan.partitions]
    print(json.dumps({"compile_s": compile_s, "partitions": len(partitions),
                      "host_ops": len(artifact.plan.host_ops)}))
    return 0


def build(model: Path, vendors: list, input_shapes: dict | None, out: Path, timeout: float) -> dict:
    """Compile in a fresh process; ``{"compile_s", "partitions", "host_ops"}`` or ``{"why"}``."""
    task = out.with_suffix(".json")
    task.write_text(json.dumps({"model": str(model), "vendors": vendors, "input_shapes": input_shapes,
                                "out": str(out)}))
    try:
        done = subprocess.run([sys.executable, __file__, "--build", str(task)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"why": f"build took over {timeout:g} s"}
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return {"why": lines[-1] if lines else f"exit code {done.returncode}"}
    return json.loads(done.stdout.splitlines()[-1])


# -- timing ----------------------------------------------------------------------------------
def max_rel_err(outputs: list, reference: list) -> float:
    worst = 0.0
    for got, want in zip(outputs, reference):
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        if got.shape != want.shape:
            return math.inf
        worst = max(worst, float(np.abs(got - want).max(initial=0.0)) / max(float(np.abs(want).max(initial=0.0)),
                                                                             1e-30))
    return worst


def _saved(proc, k: int, sets: int, timeout: float):
    if not proc.request(f"save {k}", timeout, expect="saved"):
        return None
    with np.load(timing.outputs_file(proc.spec, k, sets)) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def time_model(name: str, path: Path, args, tmp: Path) -> dict:
    """Builds, first calls, steady and round-robin medians, errors: the figures of one model."""
    bindings = catalog.MODELS[name].test_dims
    sets = shape_inputs(path, name)
    names = list(sets[0])
    files = []
    for k, feeds in enumerate(sets):
        files.append(str(tmp / f"{name}-in-{k}.npz"))
        np.savez(files[-1], *feeds.values())
    entry = {"model": name, "shapes": [shape_label(b) for b in bindings], "vendors": args.vendors}
    entry["dynamic_build"] = build(path, args.vendors, None, tmp / f"{name}-dyn.so", args.timeout)
    entry["static_builds"] = [build(path, args.vendors, {n: list(feeds[n].shape) for n in names},
                                    tmp / f"{name}-static-{k}.so", args.timeout) for k, feeds in enumerate(sets)]

    def spec(kind, lib, inputs, tag):
        return {"kind": kind, "path": str(lib), "inputs": inputs, "input_names": names,
                "outputs": str(tmp / f"{name}-{tag}-out.npz")}

    procs = {"onnxruntime": timing.TimingProcess("onnxruntime", spec("onnxruntime", path, files, "ort"), tmp)}
    if "why" not in entry["dynamic_build"]:
        procs["dynamic"] = timing.TimingProcess("dynamic", spec("byoc", tmp / f"{name}-dyn.so", files, "dyn"), tmp)
    for k, built in enumerate(entry["static_builds"]):
        if "why" not in built:
            procs[f"static-{k}"] = timing.TimingProcess(f"static-{k}", spec("byoc", tmp / f"{name}-static-{k}.so",
                                                                             [files[k]], f"static{k}"), tmp)
    for proc in procs.values():
        proc.reply("load", args.timeout, expect="ready")
    first = {}
    for label in ("dynamic", "onnxruntime"):  # nothing has run in these processes yet
        if label in procs:
            first[label] = [_one(procs[label].request(f"run 1 {k}", args.round_timeout)) for k in range(len(sets))]
    single = {label: [[] for _ in sets] for label in procs}
    cycled = {label: [[] for _ in sets] for label in ("dynamic", "onnxruntime") if label in procs}
    for round_ in range(args.warmup + args.runs):
        for label, proc in procs.items():
            own = [int(label.split("-")[1])] if label.startswith("static-") else range(len(sets))
            for k in own:
                time.sleep(args.settle_ms / 1e3)
                line = proc.request(f"run {args.calls} {0 if label.startswith('static-') else k}",
                                    args.round_timeout * args.calls)
                if line and round_ >= args.warmup:
                    single[label][k].extend(float(t) for t in line.split())
            if label in cycled:
                time.sleep(args.settle_ms / 1e3)
                line = proc.request(f"cycle {args.calls}", args.round_timeout * args.calls * len(sets))
                if line and round_ >= args.warmup:
                    for i, t in enumerate(line.split()):
                        cycled[label][i % len(sets)].append(float(t))
    reference = [_saved(procs["onnxruntime"], k, len(sets), args.round_timeout) for k in range(len(sets))]
    rows = []
    for k, label in enumerate(entry["shapes"]):
        row = {"shape": label}
        for kind, proc_label, idx in (("ort", "onnxruntime", k), ("dynamic", "dynamic", k),
                                      ("static", f"static-{k}", 0)):
            proc = procs.get(proc_label)
            samples = single.get(proc_label, [[]] * len(sets))[k]
            row[f"{kind}_ms"] = statistics.median(samples) * 1e3 if proc and not proc.why and samples else None
            if kind != "ort" and proc and not proc.why:
                outputs = _saved(proc, idx, len(proc.spec["inputs"]), args.round_timeout)
                row[f"{kind}_err"] = (max_rel_err(outputs, reference[k])
                                      if outputs is not None and reference[k] is not None else None)
        for label_, key in (("dynamic", "dynamic_rr_ms"), ("onnxruntime", "ort_rr_ms")):
            samples = cycled.get(label_, [[]] * len(sets))[k]
            row[key] = statistics.median(samples) * 1e3 if samples else None
        row["first_ms"] = first["dynamic"][k] * 1e3 if first.get("dynamic") and first["dynamic"][k] else None
        row["ort_first_ms"] = (first["onnxruntime"][k] * 1e3
                               if first.get("onnxruntime") and first["onnxruntime"][k] else None)
        rows.append(row)
    entry["rows"] = rows
    entry["failed"] = {label: proc.why for label, proc in procs.items() if proc.why}
    for proc in procs.values():
        proc.close()
    return entry


def _one(line):
    return float(line.split()[0]) if line else None


# -- cache check -----------------------------------------------------------------------------
def _cache_main(task_file: str) -> int:
    """Worker: 50 distinct shapes through one dynamic artifact; one JSON line per 10 shapes."""
    import byoc

    task = json.loads(Path(task_file).read_text())
    artifact = byoc.load(task["lib"])
    library = artifact._loaded_library()  # the loaded .so: its imports are the vendor runtime modules
    modules = [m for m in getattr(library, "mod", library).imports if m.kind == "byoc_dnnl"]
    for i, feeds in enumerate(_cache_shapes(Path(task["model"]), task["name"], task["count"])):
        artifact.run(feeds)
        if (i + 1) % 10 == 0:
            counts = [list(m.get_function("get_specializations")()) for m in modules]
            print(json.dumps({"shapes": i + 1, "alive": max((c[0] for c in counts), default=0),
                              "made": max((c[1] for c in counts), default=0), "rss_mb": _rss_mb()}), flush=True)
    return 0


def _cache_shapes(path: Path, name: str, count: int):
    """``count`` distinct input sets: the model's first test shape with its last symbolic dim (a sequence length,
    a width, a number of samples) plus 0 .. count-1, in a scrambled order (7 i mod count), so the sizes of the
    shapes alive stay in one range while the shapes change."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    specs = catalog._graph_inputs(model)
    dtypes = {vi.name: catalog._ONNX_NUMPY[vi.type.tensor_type.elem_type] for vi in specs}
    base = dict(catalog.MODELS[name].test_dims[0])
    grown = list(base)[-1]
    for i in range(count):
        binding = dict(base, **{grown: base[grown] + (7 * i) % count})
        yield catalog._feeds({vi.name: catalog._concrete(catalog._dims(vi), binding) for vi in specs}, dtypes,
                             np.random.default_rng(i))


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kb / 1024


def cache_check(name: str, path: Path, args, tmp: Path) -> list:
    built = build(path, args.vendors, None, tmp / f"{name}-cache.so", args.timeout)
    if "why" in built:
        return [{"why": built["why"]}]
    task = tmp / f"{name}-cache-task.json"
    task.write_text(json.dumps({"lib": str(tmp / f"{name}-cache.so"), "model": str(path), "name": name,
                                "count": 50}))
    done = subprocess.run([sys.executable, __file__, "--cache-worker", str(task)], capture_output=True, text=True,
                          timeout=args.timeout * 4)
    if done.returncode:
        return [{"why": (done.stderr.strip().splitlines() or ["?"])[-1]}]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


# -- report ------------------------------------------------------------------------------------
def _fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(a, b):
    return a / b if a is not None and b else None


def print_report(entries: list) -> None:
    print("| model | shape | static ms | dynamic ms | onnxruntime ms | dyn rr ms | first ms | ort first ms | "
          "dyn/static | dyn/ort | rr/single | first/steady | max rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    dyn_ort = []
    for entry in entries:
        for k, row in enumerate(entry.get("rows", [])):
            first_ratio = _ratio(row["first_ms"], row["dynamic_ms"])
            ratio = _ratio(row["dynamic_ms"], row["ort_ms"])
            if ratio:
                dyn_ort.append(ratio)
            err = max((e for e in (row.get("dynamic_err"), row.get("static_err")) if e is not None), default=None)
            print(f"| {entry['model']} | {row['shape']} | {_fmt(row['static_ms'])} | {_fmt(row['dynamic_ms'])} | "
                  f"{_fmt(row['ort_ms'])} | {_fmt(row['dynamic_rr_ms'])} | {_fmt(row['first_ms'], 1)}"
                  f"{' (process start)' if k == 0 else ''} | {_fmt(row['ort_first_ms'], 1)} | "
                  f"{_fmt(_ratio(row['dynamic_ms'], row['static_ms']))} | "
                  f"{_fmt(ratio)} | {_fmt(_ratio(row['dynamic_rr_ms'], row['dynamic_ms']))} | "
                  f"{_fmt(first_ratio, 1)} | {'-' if err is None else f'{err:.1e}'} |")
    print()
    print("| model | dynamic compile s | static compile s (mean) | ratio | partitions dyn / static | failures |")
    print("|---|---|---|---|---|---|")
    for entry in entries:
        dyn = entry.get("dynamic_build", {})
        statics = [b for b in entry.get("static_builds", []) if "compile_s" in b]
        mean = statistics.mean(b["compile_s"] for b in statics) if statics else None
        failures = [f"{k}: {v}" for k, v in entry.get("failed", {}).items()]
        failures += [f"dynamic build: {dyn['why']}"] if "why" in dyn else []
        failures += [f"static build {k}: {b['why']}" for k, b in enumerate(entry.get("static_builds", [])) if "why" in b]
        print(f"| {entry['model']} | {_fmt(dyn.get('compile_s'))} | {_fmt(mean)} | "
              f"{_fmt(_ratio(dyn.get('compile_s'), mean))} | {dyn.get('partitions', '-')} / "
              f"{'/'.join(str(b['partitions']) for b in statics) or '-'} | {'; '.join(failures) or '-'} |")
    if dyn_ort:
        geo = math.exp(statistics.mean(math.log(r) for r in dyn_ort))
        print(f"\ndynamic / onnxruntime, geometric mean over {len(dyn_ort)} model-shapes: {geo:.2f} (goal <= 1)")


def model_arguments(parser: argparse.ArgumentParser, runs: int) -> None:
    """The options of a script that builds and times the exported models (this one, steadiness.py)."""
    parser.add_argument("names", nargs="*", help=f"models (default: every cached one of {', '.join(catalog.MODELS)})")
    parser.add_argument("--vendors", default="dnnl", help="comma-separated, in priority order (default dnnl)")
    parser.add_argument("--models-dir", type=Path, default=None, help="where dynamic_models.py wrote the models")
    parser.add_argument("--runs", type=int, default=runs, help=f"timed rounds (default {runs})")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    parser.add_argument("--calls", type=int, default=3, help="calls per request, each a sample (default 3)")
    parser.add_argument("--settle-ms", type=float, default=timing.SETTLE_MS)
    parser.add_argument("--timeout", type=float, default=600, help="per build or load, seconds")
    parser.add_argument("--round-timeout", type=float, default=60, help="per call, seconds")
    parser.add_argument("--json", type=Path, help="write every figure here")


def parse_model_arguments(parser: argparse.ArgumentParser, argv) -> tuple:
    """``(args, folder, names)``: the options of :func:`model_arguments`, the models' folder, the models chosen."""
    args = parser.parse_args(argv)
    args.vendors = [v for v in args.vendors.split(",") if v]
    folder = (args.models_dir or catalog.default_out()).expanduser()
    names = args.names or list(catalog.MODELS)
    unknown = [n for n in names if n not in catalog.MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(catalog.MODELS)}")
    return args, folder, names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    model_arguments(parser, runs=15)
    parser.add_argument("--cache-check", action="store_true", help="50 distinct shapes per model instead")
    args, folder, names = parse_model_arguments(parser, argv)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {timing.machine_class()}; vendors {','.join(args.vendors)}")
    entries = []
    with tempfile.TemporaryDirectory(prefix="byoc-dynamic-") as tmp:
        for name in names:
            path = model_file(name, folder)
            if path is None:
                print(f"SKIP {name}: not in {folder}; export it with benchmarks/dynamic_models.py", file=sys.stderr)
                continue
            if args.cache_check:
                for line in cache_check(name, path, args, Path(tmp)):
                    print(name, json.dumps(line), flush=True)
                    entries.append(dict(line, model=name))
                continue
            entry = time_model(name, path, args, Path(tmp))
            entries.append(entry)
            print_report([entry])
            sys.stdout.flush()
    if not args.cache_check and len(entries) > 1:
        print("\nAll models:")
        print_report(entries)
    if args.json:
        args.json.write_text(json.dumps({"cpu": timing.machine_class(), "entries": entries}, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--build", "--cache-worker"):
        sys.exit((_build_main if sys.argv[1] == "--build" else _cache_main)(sys.argv[2]))
    sys.exit(main())

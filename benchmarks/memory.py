"""Memory: the resident memory a process gains from loading a model to after a few runs, byoc against onnxruntime.

The open issue "Memory: a loaded model no larger than onnxruntime's". Run from the repo root with byoc's own
Python, after ``benchmarks/deployed_models.py`` has written the deployed files (its docstring says how: it needs
torch) and the real models are in the cache (``python benchmarks/real_models.py --fetch``)::

    python benchmarks/memory.py                                        # the default models, vendors dnnl
    python benchmarks/memory.py --models bert_base_float,ppocr_det --runs 3 --threads 2
    python benchmarks/memory.py --keep /tmp/byoc-memory --md out.md --json out.json
    python benchmarks/memory.py --list                                 # the default models and their files

The models (``--models``; default ``DEFAULT_MODELS``): files of the deployed catalog (``<cache>/deployed``,
``--models-dir``; run at the catalog's ``test_dims``, built with no ``input_shapes``: the symbolic dims stay
symbolic) and third-party models of the real-model suite (benchmarks/real_models_catalog.py; built with the
suite's ``input_shapes`` for their dynamic inputs, as benchmarks/real_models.py builds them, and run on its
seeded realistic inputs). A model whose file is not there is a ``SKIP`` line saying what makes it.

For each model:

* **build**: in a fresh worker process (``--worker``), ``byoc.compile(file, vendors=--vendors)`` then
  ``artifact.export`` to a ``.so`` in a temporary folder, or in ``--keep DIR`` (``<model>-<vendors>.so``,
  reused while it is newer than the ONNX file: a byoc change is not seen, delete the folder). The inputs are
  saved once as ``.npz``: both sides run the same arrays.
* **measure**: each side in its own fresh process (this script with ``--measure SPEC.json``), ``--repeat``
  times (default 3), the sides in turn; the repeat with the median gain is reported (the table shows the range
  beside it when the repeats are 4 MiB or more apart). The process imports its side's library (``onnxruntime``; ``byoc`` and ``tvm`` with
  ``tvm.relax``), loads the inputs, then reads ``/proc/self/status`` (VmRSS, RssAnon, RssFile, RssShmem,
  VmHWM) three times: right before load, right after load (onnxruntime: ``InferenceSession`` on the ONNX file,
  CPUExecutionProvider, ``intra_op_num_threads=--threads``, otherwise its defaults; byoc:
  ``byoc.load(lib, threads=--threads)``) and after ``--runs`` runs (their outputs dropped, then
  ``gc.collect()``). Reported per side: the gain at load (after load - before), **the gain after the runs**
  (after runs - before: the headline figure, what the loaded model costs a user's process) with its anonymous /
  file-backed split, and the peak gain (VmHWM after the runs - VmRSS before: the high-water mark, imports
  included in VmHWM, can only be higher).
* **held**: byoc's side also reports what its vendor runtimes hold after the runs (``Artifact.memory()``): the
  constants they keep over those the model gave their partitions (1.00: each weight once; more where a kernel's
  layout is larger, as Winograd's transformed filters, or wider, as int8 weights dequantized for a float kernel).
* **process**: each side's whole resident set after the runs, imports included (``import byoc`` imports TVM's
  compiler, about 150 MiB more than ``import onnxruntime``): beside the headline, not in it.
* **weights**: the bytes of the model's weights, the ONNX initializers plus the Constant nodes' tensors
  (subgraphs included; external data not loaded, its size read from the dims), and each side's gain over them.

The Markdown table (stdout, ``--md FILE``) has one line per model, a failed side's first error line in its
cells; the summary gives the geometric mean and the worst of byoc / onnxruntime over the models both sides
measured, and the machine class (``timing_processes.machine_class``). ``--json FILE`` has every figure, written
after every model. Every figure comes from the runs of the invocation.

Unlike timings, these figures mostly do not suffer from a busy machine: resident memory is what the process maps
and touches, not how fast. One exception: byoc's dnnl runtime, when its calls find the cores busy, compiles a
serial program beside a partition's team program (docs/design.md, "A busy machine"), whose reordered weights
add to the team's where their layouts differ (ddddocr's OCR 1.11x on a quiet machine, 1.31x beside a test run):
measure on a quiet machine. They do depend on the thread count
(per-thread scratch) and on the allocator: which glibc arena a thread's allocation lands in, and so what a free
gives back, can differ from one process to the next (onnxruntime's gain on some models moves by tens of MiB),
hence the repeats and the median.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MEASURING = sys.argv[1:2] == ["--measure"]  # a measuring process imports its side's library and nothing more
if not MEASURING:
    import deployed as deployed_bench  # noqa: E402 - _first_line, source_tree
    import deployed_models as catalog  # noqa: E402 - read_catalog, feeds, ARCHS, default_out
    import run as bench  # noqa: E402 - run_worker, worker_main
    import timing_processes as timing  # noqa: E402 - machine_class
    from real_models_catalog import MODELS, FetchError, default_cache, make_inputs, model_path  # noqa: E402

DEFAULT_MODELS = ("vit_small_float", "bert_base_float", "gpt2_small_float", "resnet50_float", "bert_base_dynamic_int8",
                  "resnet50_qdq", "bert_base_int4_sym", "convnext_tiny_float", "convnext_tiny_dynamic_int8",
                  "distilbert_float", "distilbert_dynamic_int8",
                  "ppocr_det", "ppocr_rec", "nudenet_320n", "ddddocr_ocr", "silero_vad_op15", "magika")
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")
SIDES = ("ort", "byoc")
MIB = 1 << 20
WHY_CHARS = 120  # a failure's first line in the table
SPREAD_SHOWN = 4 * MIB  # repeats further apart than this show their range beside the median


# -- the measuring process (a fresh one per side and model) ---------------------------------
def read_status() -> dict:
    """VmRSS, RssAnon, RssFile, RssShmem and VmHWM of this process, in bytes."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS:
            fields[key] = int(value.split()[0]) * 1024  # kB
    return fields


def measure(spec: dict) -> dict:
    """Import the side's library, load the inputs, then the readings before load, after load, after the runs."""
    import gc

    if spec["side"] == "ort":
        import onnxruntime as ort
    else:
        import tvm
        from tvm import relax  # noqa: F401 - imported by byoc.load: an import, not the model's memory

        import byoc
    with np.load(spec["inputs"]) as saved:
        inputs = {name: saved[f"arr_{i}"] for i, name in enumerate(spec["input_names"])}
    gc.collect()
    result = {"pid": os.getpid(), "before": read_status()}
    stage = "load"
    try:
        start = time.perf_counter()
        if spec["side"] == "ort":
            options = ort.SessionOptions()
            options.intra_op_num_threads = spec["threads"]
            session = ort.InferenceSession(spec["model"], options, providers=["CPUExecutionProvider"])

            def run():
                return session.run(None, inputs)
        else:
            artifact = byoc.load(spec["lib"], threads=spec["threads"])

            def run():
                return artifact.run(inputs)
        result["load_s"] = time.perf_counter() - start
        result["after_load"] = read_status()
        stage = "run"
        start = time.perf_counter()
        for _ in range(spec["runs"]):
            outputs = run()
            del outputs
        result["runs_s"] = time.perf_counter() - start
        gc.collect()
        result["after_runs"] = read_status()
        if spec["side"] == "byoc" and hasattr(artifact, "memory"):  # what the runtimes hold (byoc 0.2 after 7066f2a)
            held = artifact.memory().values()
            result["held"] = {"constant_bytes": sum(m.constant_bytes for m in held),
                              "model_constant_bytes": sum(m.model_constant_bytes or 0 for m in held)}
    except Exception as err:  # noqa: BLE001 - the side's failure is a cell of the table
        result.update(stage=stage, error=f"{type(err).__name__}: {err}"[:2000])
    if spec["side"] == "byoc":
        result["tvm"] = tvm.__version__
    return result


def measure_main(spec_file: str) -> int:
    spec = json.loads(Path(spec_file).read_text())
    Path(spec["result"]).write_text(json.dumps(measure(spec)))
    return 0


# -- the build worker ----------------------------------------------------------------------------
def _work_build(task: dict) -> dict:
    """``byoc.compile`` (the real models with their static input shapes), then export."""
    import byoc

    start = time.perf_counter()
    try:
        artifact = byoc.compile(task["model"], vendors=task["vendors"], input_shapes=task["input_shapes"] or None)
    except Exception as err:  # noqa: BLE001 - recorded
        return {"stage": "compile", "error": deployed_bench._first_line(err)[:400]}
    compile_s = time.perf_counter() - start
    try:
        artifact.export(task["export"], overwrite=True)
    except Exception as err:  # noqa: BLE001
        return {"stage": "export", "error": deployed_bench._first_line(err)[:400], "compile_s": compile_s}
    return {"stage": "done", "compile_s": compile_s, "partitions": len(artifact.plan.partitions),
            "host_ops": len(artifact.plan.host_ops)}


WORKERS = {"build": _work_build}


# -- the models ------------------------------------------------------------------------------------
def weight_bytes(path: Path) -> int:
    """The initializers' and Constant nodes' tensor bytes, subgraphs included (from the dims: external data is
    not loaded)."""
    import onnx
    from onnx import helper

    bits = {getattr(onnx.TensorProto, n): b for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2),
                                                          ("UINT2", 2)) if hasattr(onnx.TensorProto, n)}

    def tensor(t) -> int:
        count = math.prod(t.dims)
        if t.data_type in bits:  # packed
            return (count * bits[t.data_type] + 7) // 8
        return count * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize

    def graph(g) -> int:
        total = sum(tensor(t) for t in g.initializer)
        total += sum(tensor(s.values) + tensor(s.indices) for s in g.sparse_initializer)
        for node in g.node:
            for attr in node.attribute:
                if node.op_type == "Constant" and attr.name == "value":
                    total += tensor(attr.t)
                elif node.op_type == "Constant" and attr.name in ("value_floats", "value_ints"):
                    total += len(attr.floats) * 4 + len(attr.ints) * 8
                total += sum(graph(sub) for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs))
        return total

    return graph(onnx.load(str(path), load_external_data=False).graph)


def resolve(name: str, args, entries: dict) -> dict:
    """The model's file, inputs and build shapes, or ``{"status": "skipped", "why": what makes it}``."""
    if name in entries or name not in MODELS:
        entry = entries.get(name)
        path = Path(entry["path"]) if entry else None
        if entry is None or not path.exists():
            arch = next((a for a in catalog.ARCHS if name.startswith(f"{a}_")), None)
            form = name[len(arch) + 1:] if arch else None
            if not (arch and form in catalog.FORMS):
                return {"status": "skipped", "why": f"unknown model: not in {args.models_dir}/catalog.jsonl, "
                                                    "not in the real-model suite"}
            return {"status": "skipped", "why": f"{path or name} is not there: make it with /tmp/torchenv/bin/python "
                    f"benchmarks/deployed_models.py --archs {arch} --forms {form} (a Python with torch: see its "
                    "docstring)"}
        return {"source": "deployed", "path": str(path), "input_shapes": None, "test_dims": entry["test_dims"],
                "inputs": catalog.feeds(entry["inputs"], entry["test_dims"])}
    model = MODELS[name]
    try:
        path = model_path(model, args.cache)
    except FetchError as err:
        return {"status": "skipped", "why": f"{err}: python benchmarks/real_models.py --fetch --models {name}"}
    return {"source": "real", "path": str(path), "input_shapes": model.input_shapes,
            "inputs": make_inputs(model, path)}


def build(name: str, found: dict, args, tmp: Path) -> dict:
    """The byoc artifact's path, built in a worker (or kept from a run before)."""
    folder = args.keep or tmp
    lib = folder / f"{name}-{'+'.join(args.vendors)}.so"
    source = Path(found["path"])
    if args.keep and lib.exists() and lib.stat().st_mtime >= source.stat().st_mtime:
        return {"status": "ok", "lib": str(lib), "kept": True}
    task = {"kind": "build", "model": str(source), "vendors": args.vendors, "input_shapes": found["input_shapes"],
            "export": str(lib)}
    result = bench.run_worker(task, args.timeout, tmp, script=Path(__file__))
    if result.pop("status") != "ok":
        return {"status": "failed", "why": f"build worker: {result['why']}"}
    stage = result.pop("stage")
    if stage != "done":
        return dict(result, status="failed", why=f"{stage}: {result.pop('error')}")
    return dict(result, status="ok", lib=str(lib), kept=False)


def run_side(side: str, spec: dict, args, tmp: Path) -> dict:
    """One fresh process measuring one side."""
    spec = dict(spec, side=side, result=str(tmp / f"measure-{side}-{time.monotonic_ns()}.json"))
    spec_file = tmp / f"measure-{side}.json"
    spec_file.write_text(json.dumps(spec))
    try:
        done = subprocess.run([sys.executable, str(Path(__file__)), "--measure", str(spec_file)],
                              capture_output=True, text=True, timeout=args.timeout, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout: did not finish within --timeout {args.timeout:.0f} s"}
    if done.returncode != 0:  # the last line that is not a stack frame: an error's message
        lines = [line.strip() for line in done.stderr.splitlines()
                 if line.strip() and not line.strip().startswith(("File ", "#", "^", "Stack trace"))]
        how = (signal.Signals(-done.returncode).name if -done.returncode in signal.valid_signals()
               else f"exit code {done.returncode}")
        return {"error": f"crashed ({how}){': ' + lines[-1] if lines else ''}"}
    result = json.loads(Path(spec["result"]).read_text())
    if "error" in result:
        return result
    before = result["before"]
    for key, when in (("load", "after_load"), ("runs", "after_runs")):
        result[f"gain_{key}"] = {f: result[when][f] - before[f] for f in STATUS_FIELDS if f != "VmHWM"}
    result["peak_gain"] = result["after_runs"]["VmHWM"] - before["VmRSS"]
    return result


def median_result(results: list) -> dict:
    """Of one side's repeats, the one whose gain after the runs is the median (its readings stay together), with
    every repeat's gain; the first failure when one failed."""
    failed = [r for r in results if "error" in r]
    if failed:
        return dict(failed[0], failed_repeats=len(failed), repeats=len(results),
                    errors=[r["error"] for r in failed])
    ordered = sorted(results, key=lambda r: r["gain_runs"]["VmRSS"])
    return dict(ordered[(len(ordered) - 1) // 2], repeat_gains=[r["gain_runs"]["VmRSS"] for r in results])


def bench_model(name: str, args, entries: dict, tmp: Path) -> dict:
    found = resolve(name, args, entries)
    if found.get("status") == "skipped":
        return {"name": name, **found}
    inputs = found.pop("inputs")
    row = {"name": name, "status": "ok", **found, "weights_bytes": weight_bytes(Path(found["path"])),
           "onnx_bytes": Path(found["path"]).stat().st_size,
           "input_shapes_run": {k: list(v.shape) for k, v in inputs.items()}}
    input_file = tmp / f"{name}-inputs.npz"
    np.savez(input_file, *inputs.values())
    spec = {"model": found["path"], "inputs": str(input_file), "input_names": list(inputs), "threads": args.threads,
            "runs": args.runs}
    built = build(name, found, args, tmp)
    row["build"] = {k: v for k, v in built.items() if k != "lib"}
    specs = {"ort": spec}
    if built["status"] == "ok":
        row["artifact_bytes"] = Path(built["lib"]).stat().st_size
        specs["byoc"] = dict(spec, lib=built["lib"])
    measured: dict = {side: [] for side in specs}
    for _ in range(args.repeat):  # the sides in turn, each time in a fresh process
        for side, side_spec in specs.items():
            measured[side].append(run_side(side, side_spec, args, tmp))
    for side, results in measured.items():
        row[side] = median_result(results)
    if built["status"] != "ok":
        row["byoc"] = {"error": built["why"]}
    elif not args.keep:
        Path(built["lib"]).unlink(missing_ok=True)
    input_file.unlink(missing_ok=True)
    gains = {side: row[side].get("gain_runs", {}).get("VmRSS") for side in SIDES}
    if gains["ort"] and gains["byoc"] is not None and gains["ort"] > 0:
        row["byoc_vs_ort"] = gains["byoc"] / gains["ort"]
    for side in SIDES:
        if gains[side] is not None and row["weights_bytes"]:
            row[f"{side}_vs_weights"] = gains[side] / row["weights_bytes"]
    return row


# -- report ------------------------------------------------------------------------------------------
def _mib(value) -> str:
    return "-" if value is None else f"{value / MIB:.0f}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _why(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else "?"
    return (first if len(first) <= WHY_CHARS else first[:WHY_CHARS] + " ...").replace("|", "/")


def _gain(m: dict, key: str = "gain_runs") -> str:
    if "error" in m:
        return f"failed{' at ' + m['stage'] if 'stage' in m else ''}: {_why(m['error'])}"
    gains = m.get("repeat_gains", [])
    spread = f" ({_mib(min(gains))}-{_mib(max(gains))})" if key == "gain_runs" and gains and \
        max(gains) - min(gains) >= SPREAD_SHOWN else ""
    return _mib(m[key]["VmRSS"]) + spread


def table(rows: list) -> list[str]:
    columns = ["model", "weights MiB", "ort gain MiB", "byoc gain MiB", "byoc/ort", "ort peak MiB", "byoc peak MiB",
               "byoc anon / file MiB", "ort anon / file MiB", "ort at load", "byoc at load", "ort / weights",
               "byoc / weights", "byoc held / given", "process ort / byoc MiB", "artifact MiB"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        if row.get("status") == "skipped":
            lines.append(f"| {row['name']} | SKIP: {_why(row['why'])} |" + " |" * (len(columns) - 2))
            continue
        ort, byoc = row["ort"], row["byoc"]

        def split(m: dict) -> str:
            g = m.get("gain_runs")
            return f"{_mib(g['RssAnon'])} / {_mib(g['RssFile'])}" if g else "-"

        def at_load(m: dict) -> str:
            return _mib(m["gain_load"]["VmRSS"]) if "gain_load" in m else "-"

        lines.append(
            f"| {row['name']} | {_mib(row['weights_bytes'])} | {_gain(ort)} | {_gain(byoc)} | "
            f"{_ratio(row.get('byoc_vs_ort'))} | {_mib(ort.get('peak_gain'))} | {_mib(byoc.get('peak_gain'))} | "
            f"{split(byoc)} | {split(ort)} | {at_load(ort)} | {at_load(byoc)} | "
            f"{_ratio(row.get('ort_vs_weights'))} | {_ratio(row.get('byoc_vs_weights'))} | "
            f"{_ratio(_held(byoc))} | {_mib(_process(ort))} / {_mib(_process(byoc))} | "
            f"{_mib(row.get('artifact_bytes'))} |")
    return lines


def _held(m: dict):
    """The constants byoc's vendor runtimes held after the runs over those the model gave their partitions
    (``Artifact.memory()``: weights reordered, copied or transformed for the kernels), or None."""
    held = m.get("held") or {}
    return held["constant_bytes"] / held["model_constant_bytes"] if held.get("model_constant_bytes") else None


def _process(m: dict):
    """The whole process's resident set after the runs (imports included: byoc's imports TVM's compiler), or None."""
    return (m.get("after_runs") or {}).get("VmRSS")


def _geomean(values: list) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(rows: list, machine: str) -> list[str]:
    both = [r for r in rows if r.get("byoc_vs_ort")]
    measured = [r for r in rows if r.get("status") != "skipped"]
    lines = [f"{len(both)} of {len(rows)} models measured on both sides"
             f"{f' ({len(rows) - len(measured)} skipped)' if len(measured) < len(rows) else ''}."]
    if both:
        worst = max(both, key=lambda r: r["byoc_vs_ort"])
        best = min(both, key=lambda r: r["byoc_vs_ort"])
        lines.append(f"byoc / onnxruntime, resident memory gained from load to after the runs: geometric mean "
                     f"{_geomean([r['byoc_vs_ort'] for r in both]):.2f}x over the {len(both)}, worst "
                     f"{worst['byoc_vs_ort']:.2f}x ({worst['name']}), best {best['byoc_vs_ort']:.2f}x ({best['name']}).")
        for side, label in (("ort", "onnxruntime"), ("byoc", "byoc")):
            ratios = [r[f"{side}_vs_weights"] for r in both if r.get(f"{side}_vs_weights", 0) > 0]
            if ratios:
                lines.append(f"{label} gain / weights: geometric mean {_geomean(ratios):.2f}x, "
                             f"from {min(ratios):.2f}x to {max(ratios):.2f}x.")
    processes = [_process(r["byoc"]) / _process(r["ort"]) for r in both if _process(r["byoc"]) and _process(r["ort"])]
    if processes:
        lines.append(f"Whole processes after the runs, imports included (not the issue's measure: byoc imports TVM's "
                     f"compiler): byoc / onnxruntime {_geomean(processes):.2f}x (geometric mean).")
    held = [(_held(r["byoc"]), r["name"]) for r in measured if _held(r.get("byoc", {}))]
    if held:
        most = max(held)
        lines.append(f"byoc's runtimes hold their partitions' constants {_geomean([h for h, _ in held]):.2f}x over "
                     f"(geometric mean), at most {most[0]:.2f}x ({most[1]}).")
    lines.append(f"Machine: {machine}.")
    return lines


def report_lines(report: dict) -> list[str]:
    machine, settings = report["machine"], report["settings"]
    source = report.get("source", {})
    changed = source.get("library_changes")
    at = f" at {source['commit'][:10]}" if source.get("commit") else ""
    at += f" with uncommitted changes to {', '.join(changed)}" if changed else ""
    lines = [f"# Resident memory of a loaded model: byoc[{','.join(settings['vendors'])}] against onnxruntime "
             f"({machine['class']}, {machine['cpus']} cores)", "",
             f"onnxruntime {machine['onnxruntime']}, TVM {machine['tvm']}, byoc {machine['byoc']}{at}; "
             f"{settings['threads']} threads, {settings['runs']} runs; each side in its own fresh process, "
             f"{settings['repeat']} times, the median shown (the range beside it when the repeats differ). "
             "Gains are VmRSS after the runs minus VmRSS right before load (after the imports and the inputs); "
             "peak is VmHWM after the runs minus that; anon / file is the gain's RssAnon / RssFile; "
             "at load is the gain right after load.", ""]
    rows = list(report["models"].values())
    return lines + table(rows) + [""] + summary(rows, machine["class"])


# -- command line -------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated deployed catalog names or real-model suite names "
                                    f"(default: {','.join(DEFAULT_MODELS)})")
    p.add_argument("--list", action="store_true", help="list the models and their files, and exit")
    p.add_argument("--vendors", default="dnnl", help="comma-separated, in priority order (default dnnl)")
    p.add_argument("--runs", type=int, default=3, help="runs after load (default 3)")
    p.add_argument("--threads", type=int, default=2, help="threads of each side (default 2)")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per side, the median reported "
                                                         "(default 3)")
    p.add_argument("--keep", type=Path, help="keep the built .so files here and reuse them while newer than the "
                                            "ONNX file")
    p.add_argument("--models-dir", type=Path, default=None, help="the deployed catalog's folder (default "
                   "$BYOC_MODEL_CACHE/deployed, else ~/.cache/byoc-models/deployed)")
    p.add_argument("--cache", type=Path, default=None, help="the real models' cache (default $BYOC_MODEL_CACHE or "
                   "~/.cache/byoc-models)")
    p.add_argument("--timeout", type=float, default=1200, help="seconds per build and per measuring process")
    p.add_argument("--md", type=Path, help="also write the Markdown report here")
    p.add_argument("--json", type=Path, help="also write every figure here")
    args = p.parse_args(argv)
    args.models = args.models.split(",") if args.models else list(DEFAULT_MODELS)
    args.vendors = [v for v in args.vendors.split(",") if v]
    args.models_dir = (args.models_dir or catalog.default_out()).expanduser()
    args.cache = args.cache or default_cache()
    if args.keep:
        args.keep = args.keep.expanduser().resolve()
        args.keep.mkdir(parents=True, exist_ok=True)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--measure"]:
        return measure_main(argv[1])
    if argv[:1] == ["--worker"]:
        return bench.worker_main(argv[1], WORKERS)
    args = parse_args(argv)
    entries = {e["name"]: e for e in catalog.read_catalog(args.models_dir)}
    if args.list:
        for name in args.models:
            if name in MODELS and name not in entries:
                print(f"{name:28} real-model suite  {MODELS[name].wheel or 'onnx (installed)'}: "
                      f"{MODELS[name].description}")
            elif name in entries:
                there = "" if Path(entries[name]["path"]).exists() else " (missing)"
                print(f"{name:28} deployed catalog  {entries[name]['path']}{there}")
            else:
                print(f"{name:28} not made: benchmarks/deployed_models.py makes the deployed files")
        return 0
    import onnxruntime
    import tvm

    import byoc

    report = {"machine": {"class": timing.machine_class(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "tvm": tvm.__version__,
                          "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__},
              "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "source": deployed_bench.source_tree(), "models": {}}
    with tempfile.TemporaryDirectory(prefix="byoc-memory-") as tmp:
        for name in args.models:
            start = time.perf_counter()
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            row = bench_model(name, args, entries, Path(tmp))
            report["models"][name] = row
            if row.get("status") == "skipped":
                print(f"  SKIP {name}: {row['why']}", file=sys.stderr, flush=True)
            else:
                print(f"  ort {_gain(row['ort'])} MiB, byoc {_gain(row['byoc'])} MiB, byoc/ort "
                      f"{_ratio(row.get('byoc_vs_ort'))} ({time.perf_counter() - start:.0f} s)", file=sys.stderr,
                      flush=True)
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
    lines = report_lines(report)
    print("\n".join(lines))
    if args.md:
        args.md.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

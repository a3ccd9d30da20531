"""Deployed forms: byoc on models as people ship them (optimized, quantized, fp16), against onnxruntime.

Run from the repo root with byoc's own Python (no torch), after ``benchmarks/deployed_models.py`` has written the
files and their catalog (its docstring says how: it needs torch)::

    python benchmarks/deployed.py                              # every cataloged file, vendors dnnl
    python benchmarks/deployed.py bert_base_qdq gpt2_small_fp16 --runs 10 --json out.json
    python benchmarks/deployed.py --arch vit_small --no-latency
    python benchmarks/deployed.py --report out.json            # the table of a run before

For each file of ``<cache>/deployed/catalog.jsonl`` (``--models-dir``), at its one test shape:

* **build**: in a fresh process (``--worker``), ``byoc.compile(file, vendors=["dnnl"])`` with no
  ``input_shapes``: the symbolic dims stay symbolic, as the file has them. Recorded: builds, or the stage that
  failed (compile, run, export) and the error's class and first line (a class outside ``byoc.ByocError`` is
  flagged ``untyped``: a library bug); the partitions (per vendor); the op types left on the host; the compile
  time; the build's warnings (in the JSON).
* **error**: max |byoc - onnxruntime| over the outputs, onnxruntime running the same file with its default
  optimizations (what the user gets from it). For the quantized forms (``dynamic_int8``, ``qdq``, ``int4_*``) and
  ``fp16`` also the definition: onnxruntime with graph optimizations off (``ORT_DISABLE_ALL``: each op as ONNX
  and the contrib op's reference kernel define it), onnxruntime's own fused run's error against it, and byoc's.
  Issue 45 counts a quantized result correct when byoc's error against the definition is within onnxruntime's
  own fused run's (the ``within ort`` column; both rounded, the fused kernels requantize differently), give or
  take float32 rounding: ``FLOAT_FLOOR`` (1e-5) times the largest output magnitude. Where the float export the
  form was made from is cached (``<arch>_float.onnx``), both sides' error against its outputs too (``ort vs
  float``, ``byoc vs float``): what the deployed form costs in accuracy, which float rounding between units cannot
  hide the way it flips a code against the definition.
* **latency**: byoc's exported artifact and onnxruntime on the file (``intra_op_num_threads=2``; the artifact
  uses byoc's default, every core: 2 here), each in its own long-lived process, timed one process at a time
  round by round (``time_interleaved`` of benchmarks/timing_processes.py): the median over ``--runs`` rounds of
  ``--calls`` calls after ``--warmup``; the table gives byoc / onnxruntime.
* **size**: the exported artifact's bytes against the ONNX file's.

The table names the CPU (``machine_class``). ``--json FILE`` writes every figure, after every model (a run
stopped early keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import deployed_models as catalog  # noqa: E402 - the catalog, the inputs, onnxruntime's runs (torch not needed)
import run as bench  # noqa: E402 - run_worker
import timing_processes as timing  # noqa: E402 - time_interleaved, machine_class, SETTLE_MS

JUDGED = (*catalog.QUANTIZED, "fp16")  # forms judged against onnxruntime's own fused error
FLOAT_FLOOR = 1e-5  # x max|output|: what two float32 runs of one graph differ by (summation order), judged equal
WHY_CHARS = 160  # a failure's first line in the table (the JSON has 400 characters of it)


# -- the build worker (a fresh process per file) ------------------------------------------
def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _work_build(task: dict) -> dict:
    """``byoc.compile`` with no input shapes, one run on the saved inputs (outputs saved), export."""
    import byoc

    def failed(stage: str, err: BaseException, **done) -> dict:
        return {"stage": stage, "error": _first_line(err)[:400], "typed": isinstance(err, byoc.ByocError), **done}

    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            artifact = byoc.compile(task["model"], vendors=task["vendors"])
        except Exception as err:  # noqa: BLE001 - recorded, typed or not
            return failed("compile", err)
    plan = artifact.plan
    per_vendor: dict = {}
    for part in plan.partitions:
        per_vendor[part.vendor] = per_vendor.get(part.vendor, 0) + 1
    result = {"stage": "done", "compile_s": time.perf_counter() - start, "partitions": len(plan.partitions),
              "partitions_per_vendor": per_vendor, "offloaded_ops": plan.offloaded_ops,
              "host_ops": len(plan.host_ops),
              "host_op_types": sorted({op.node.op_type for op in plan.host_ops if op.node is not None}),
              "warnings": sorted({str(w.message).strip().splitlines()[0][:300] for w in caught})}
    with np.load(task["inputs"]) as saved:
        inputs = {name: saved[f"arr_{i}"] for i, name in enumerate(task["input_names"])}
    try:
        outputs = artifact.run(inputs)
    except Exception as err:  # noqa: BLE001
        return failed("run", err, **{k: v for k, v in result.items() if k != "stage"})
    np.savez(task["outputs"], *[np.asarray(o) for o in outputs])
    try:
        exported = artifact.export(task["export"], overwrite=True)
        result["artifact_bytes"] = Path(exported).stat().st_size
    except Exception as err:  # noqa: BLE001
        return failed("export", err, **{k: v for k, v in result.items() if k != "stage"})
    return result


WORKERS = {"build": _work_build}


def judge(row: dict) -> bool:
    """Issue 45's rule: byoc's error against the definition within onnxruntime's own fused run's, give or take
    float32 rounding (``FLOAT_FLOOR`` of the output's magnitude: a fused run that happens to round the same way
    as the definition does not make a float32 difference of 1e-7 an error)."""
    return bool(row["byoc_vs_definition"] <= row["ort_fused_vs_definition"] + FLOAT_FLOOR * row["ort_scale"])


def _float_model_outputs(path: Path, entry: dict, inputs: dict):
    """onnxruntime's outputs of the float export a deployed form was made from (its accuracy: what quantizing or
    halving the model cost), or None for the float form itself or when the float file is not there."""
    float_path = path.with_name(f"{entry['arch']}_float.onnx")
    if entry["form"] not in JUDGED or not float_path.exists():
        return None
    try:
        return catalog.ort_outputs(float_path, inputs)
    except Exception:  # noqa: BLE001 - a float model that takes other inputs has no comparison
        return None


# -- one file -------------------------------------------------------------------------------
def bench_file(entry: dict, args, tmp: Path) -> dict:
    """Build (own process), errors against onnxruntime and its definition, then time: one row."""
    name, path = entry["name"], Path(entry["path"])
    row = {"name": name, "arch": entry["arch"], "form": entry["form"], "path": str(path),
           "contrib_ops": entry.get("contrib_ops", {}), "test_dims": entry["test_dims"],
           "onnx_bytes": path.stat().st_size if path.exists() else None}
    if not path.exists():
        return dict(row, status="missing", why=f"{path} is not there: run benchmarks/deployed_models.py")
    inputs = catalog.feeds(entry["inputs"], entry["test_dims"])
    try:
        reference = catalog.ort_outputs(path, inputs)
        definition = catalog.ort_outputs(path, inputs, disable_all=True) if entry["form"] in JUDGED else None
    except Exception as err:  # noqa: BLE001 - a file onnxruntime cannot run has no reference
        return dict(row, status="reference failed", why=f"onnxruntime: {_first_line(err)[:300]}")
    row["ort_scale"] = max(float(np.abs(r).max(initial=0)) for r in reference)
    if definition is not None:
        row["ort_fused_vs_definition"] = catalog.max_abs_err(reference, definition)
    float_reference = _float_model_outputs(path, entry, inputs)
    if float_reference is not None:
        row["ort_vs_float"] = catalog.max_abs_err(reference, float_reference)
    input_file = tmp / f"{name}-inputs.npz"
    np.savez(input_file, *inputs.values())
    lib = tmp / f"{name}.so"
    task = {"kind": "build", "model": str(path), "vendors": args.vendors, "inputs": str(input_file),
            "input_names": list(inputs), "outputs": str(tmp / f"{name}-out.npz"), "export": str(lib)}
    result = bench.run_worker(task, args.timeout, tmp, script=Path(__file__))
    if result.pop("status") != "ok":  # the worker died (a crash) or timed out
        return dict(row, status="crashed", stage="worker", why=result["why"][:400], typed=False)
    stage = result.pop("stage")
    row.update(result)
    if stage != "done":
        row.update(status=f"{stage} failed", why=row.pop("error"))
        if stage != "export":
            return row
    else:
        row["status"] = "ok"
    with np.load(task["outputs"]) as saved:
        outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    if len(outputs) != len(reference):
        return dict(row, status="wrong outputs", why=f"{len(outputs)} outputs, onnxruntime has {len(reference)}")
    row["max_abs_err"] = catalog.max_abs_err(outputs, reference)
    if definition is not None:
        row["byoc_vs_definition"] = catalog.max_abs_err(outputs, definition)
        row["within_ort"] = judge(row)
    if float_reference is not None:
        row["byoc_vs_float"] = catalog.max_abs_err(outputs, float_reference)
    if row["status"] == "ok" and args.runs > 0:
        measured = timing.time_interleaved({"onnxruntime": ("onnxruntime", path), "byoc": ("byoc", lib)}, inputs,
                                           args, tmp, args.runs, args.warmup, calls=args.calls,
                                           settle_ms=args.settle_ms)
        for side, m in measured.items():
            if m["status"] == "ok":
                row[f"{side}_ms"] = m["median_s"] * 1e3
            else:
                row[f"{side}_latency"] = f"{m['status']}: {m['why']}"
        if "byoc_ms" in row and "onnxruntime_ms" in row:
            row["vs_onnxruntime"] = row["byoc_ms"] / row["onnxruntime_ms"]
    lib.unlink(missing_ok=True)  # the artifacts of 20 files would fill the temporary folder
    return row


# -- report -------------------------------------------------------------------------------------
def _num(value, fmt: str = ".2g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return format(value, fmt)


def _ops(counts: dict) -> str:
    return ", ".join(f"{op.split(':')[-1]} x{n}" for op, n in counts.items()) or "-"


def table(rows: list) -> list[str]:
    """The Markdown table: one line per file, failures included (their status says where and why)."""
    lines = ["| model | form | contrib ops in the file | byoc builds | partitions | host op types | "
             "max abs err vs ort | ort fused vs def | byoc vs def | within ort | ort vs float | byoc vs float | "
             "byoc ms | ort ms | byoc/ort | artifact / onnx |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        status = row.get("status", "?")
        if status == "ok":
            builds = "yes"
        else:
            why = row.get("why", "")
            untyped = " (untyped)" if row.get("typed") is False and status != "missing" else ""
            why = why if len(why) <= WHY_CHARS else why[:WHY_CHARS] + " ..."
            builds = f"{status}: {why}{untyped}".replace("|", "/")
        size = (f"{row['artifact_bytes'] / 1e6:.0f} / {row['onnx_bytes'] / 1e6:.0f} MB"
                if row.get("artifact_bytes") and row.get("onnx_bytes") else "-")
        within = {True: "yes", False: "**no**"}.get(judge(row) if "byoc_vs_definition" in row else None, "-")
        lines.append(
            f"| {row['arch']} | {row['form']} | {_ops(row.get('contrib_ops', {}))} | {builds} | "
            f"{row.get('partitions', '-')} | {', '.join(row.get('host_op_types', [])) or '-'} | "
            f"{_num(row.get('max_abs_err'))} | {_num(row.get('ort_fused_vs_definition'))} | "
            f"{_num(row.get('byoc_vs_definition'))} | {within} | {_num(row.get('ort_vs_float'))} | "
            f"{_num(row.get('byoc_vs_float'))} | {_num(row.get('byoc_ms'), '.1f')} | "
            f"{_num(row.get('onnxruntime_ms'), '.1f')} | {_num(row.get('vs_onnxruntime'), '.2f')} | {size} |")
    return lines


def summary(rows: list) -> list[str]:
    built = [r for r in rows if r.get("status") == "ok"]
    ratios = [r["vs_onnxruntime"] for r in built if r.get("vs_onnxruntime")]
    judged = [dict(r, within_ort=judge(r)) for r in built if "byoc_vs_definition" in r]
    lines = [f"{len(built)} of {len(rows)} files build, run and export with symbolic dims."]
    if ratios:
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(f"byoc / onnxruntime over the {len(ratios)} timed: geometric mean {geo:.2f}x, "
                     f"best {min(ratios):.2f}x, worst {max(ratios):.2f}x.")
    if judged:
        lines.append(f"Within onnxruntime's own fused error against the definition: "
                     f"{sum(r['within_ort'] for r in judged)} of {len(judged)} quantized / fp16 files that build.")
    untyped = [r for r in rows if r.get("typed") is False]
    if untyped:
        lines.append("Untyped failures (a class outside byoc.ByocError, or a crash): "
                     + "; ".join(f"{r['name']} ({r['status']}: {r.get('why', '')})" for r in untyped))
    return lines


def print_report(report: dict) -> None:
    machine = report["machine"]
    print(f"# Deployed forms through byoc[{','.join(report['settings']['vendors'])}] ({machine['class']}, "
          f"{machine['cpus']} cores)\n")
    source = report.get("source", {})
    changed = source.get("library_changes")
    at = f" at {source['commit'][:10]}" if source.get("commit") else ""
    at += f" with uncommitted changes to {', '.join(changed)}" if changed else ""
    load = "".join(f"; load average {' '.join(f'{x:.1f}' for x in report[key])} at the {when}"
                   for key, when in (("load_average_start", "start"), ("load_average_end", "end")) if key in report)
    print(f"onnxruntime {machine['onnxruntime']}, TVM {machine['tvm']}, byoc {machine['byoc']}{at}; "
          f"runs {report['settings']['runs']} x {report['settings']['calls']} calls after "
          f"{report['settings']['warmup']} warm-up rounds{load}.\n")
    rows = list(report["models"].values())
    for line in table(rows):
        print(line)
    print()
    for line in summary(rows):
        print(line)


def source_tree() -> dict:
    """The checkout measured: its commit, and the library's files changed and not committed (each build is a
    fresh process that imports byoc from the tree as it is then)."""
    import subprocess

    root = HERE.parent

    def git(*cmd):
        done = subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--", "byoc", "codegens", "annotations") or ""
    return {"commit": git("rev-parse", "HEAD"), "library_changes": [line[3:] for line in status.splitlines()]}


# -- command line -------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="files by catalog name (<arch>_<form>; default: all)")
    p.add_argument("--arch", action="append", default=[], help="only these architectures (repeatable)")
    p.add_argument("--form", action="append", default=[], help="only these forms (repeatable)")
    p.add_argument("--models-dir", type=Path, default=None, help="where deployed_models.py wrote the files "
                   "(default $BYOC_MODEL_CACHE/deployed, else ~/.cache/byoc-models/deployed)")
    p.add_argument("--vendors", default="dnnl", help="comma-separated, in priority order (default dnnl)")
    p.add_argument("--runs", type=int, default=10, help="timed rounds (default 10; 0: no timing)")
    p.add_argument("--no-latency", dest="runs", action="store_const", const=0, help="the same as --runs 0")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--calls", type=int, default=bench.CALLS_PER_REQUEST,
                   help=f"calls per timed request, each a sample (default {bench.CALLS_PER_REQUEST})")
    p.add_argument("--settle-ms", type=float, default=timing.SETTLE_MS)
    p.add_argument("--timeout", type=float, default=1200, help="seconds per build, and per timing process load")
    p.add_argument("--round-timeout", type=float, default=120, help="seconds per timed call")
    p.add_argument("--json", type=Path, help="also write every figure here")
    p.add_argument("--report", type=Path, metavar="JSON", help="only print the table of a --json file written before")
    args = p.parse_args(argv)
    args.vendors = [v for v in args.vendors.split(",") if v]
    args.models_dir = (args.models_dir or catalog.default_out()).expanduser()
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return bench.worker_main(argv[1], WORKERS)
    args = parse_args(argv)
    if args.report:
        print_report(json.loads(args.report.read_text()))
        return 0
    entries = catalog.read_catalog(args.models_dir)
    if not entries:
        sys.exit(f"no catalog in {args.models_dir}: run benchmarks/deployed_models.py first (its docstring says how)")
    known = {e["name"] for e in entries}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        sys.exit(f"not in the catalog: {', '.join(unknown)} (it has {', '.join(sorted(known))})")
    entries = [e for e in entries if (not args.names or e["name"] in args.names)
               and (not args.arch or e["arch"] in args.arch) and (not args.form or e["form"] in args.form)]
    import onnxruntime
    import tvm

    import byoc

    report = {"machine": {"class": timing.machine_class(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "tvm": tvm.__version__,
                          "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__},
              "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "source": source_tree(), "load_average_start": os.getloadavg(), "models": {}}
    with tempfile.TemporaryDirectory(prefix="byoc-deployed-") as tmp:
        for entry in entries:
            start = time.perf_counter()
            print(f"[{time.strftime('%H:%M:%S')}] {entry['name']}", file=sys.stderr, flush=True)
            row = bench_file(entry, args, Path(tmp))
            report["models"][entry["name"]] = row
            print(f"  {row['status']} {row.get('why', '')} ({time.perf_counter() - start:.0f} s)", file=sys.stderr,
                  flush=True)
            report["load_average_end"] = os.getloadavg()
            if args.json:
                args.json.write_text(json.dumps(report, indent=1))
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

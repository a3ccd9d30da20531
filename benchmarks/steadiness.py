"""Steadiness: how far byoc's median moves between fresh processes, against onnxruntime's in the same rounds.

Run from the repo root, after ``benchmarks/dynamic_models.py`` has exported the models::

    python benchmarks/steadiness.py                       # every cached model, vendors dnnl, 3 processes
    python benchmarks/steadiness.py bert_base swin_t --processes 5 --runs 20

Per model: the dynamic artifact is built once, in a fresh process (``dynamic.build``); then, ``--processes``
times, a fresh byoc process and a fresh onnxruntime process each load it and are timed in turns, round by
round (``timing_processes.time_interleaved``: one process works at a time, after a pause), at the model's first
test shape. A process's figure is its median; a side's spread is its slowest process's median over its fastest.
The goal of issue 33: byoc's spread no wider than onnxruntime's. The machine class heads the table;
``--json FILE`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dynamic  # noqa: E402 - next to this file
import dynamic_models as catalog  # noqa: E402
import timing_processes as timing  # noqa: E402


def measure(name: str, path: Path, args, tmp: Path) -> dict:
    """The model's per-process medians on each side, or ``{"why"}``."""
    lib = tmp / f"{name}.so"
    built = dynamic.build(path, args.vendors, None, lib, args.timeout)
    if "why" in built:
        return {"model": name, "why": f"build: {built['why']}"}
    inputs = dynamic.shape_inputs(path, name)[0]
    medians = {"byoc": [], "onnxruntime": []}
    for _ in range(args.processes):
        timed = timing.time_interleaved({"onnxruntime": ("onnxruntime", path), "byoc": ("byoc", lib)}, inputs, args,
                                        tmp, args.runs, args.warmup, calls=args.calls, settle_ms=args.settle_ms)
        failed = [f"{side}: {t['why']}" for side, t in timed.items() if t["status"] != "ok"]
        if failed:
            return {"model": name, "why": "; ".join(failed)}
        for side, t in timed.items():
            medians[side].append(t["median_s"] * 1e3)
    return {"model": name, "shape": dynamic.shape_label(catalog.MODELS[name].test_dims[0]), "medians_ms": medians}


def spread(values: list) -> float:
    return max(values) / min(values)


def print_table(rows: list) -> None:
    print(f"machine class: {timing.machine_class()}")
    print("| model | shape | byoc medians ms | byoc spread | onnxruntime medians ms | onnxruntime spread | "
          "spread ratio |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for row in rows:
        if "why" in row:
            print(f"| {row['model']} | - | {row['why']} | | | | |")
            continue
        ours, theirs = row["medians_ms"]["byoc"], row["medians_ms"]["onnxruntime"]
        ratios.append(spread(ours) / spread(theirs))
        print(f"| {row['model']} | {row['shape']} | {', '.join(f'{m:.2f}' for m in ours)} | {spread(ours):.2f} | "
              f"{', '.join(f'{m:.2f}' for m in theirs)} | {spread(theirs):.2f} | {ratios[-1]:.2f} |")
    if ratios:
        wider = sum(r > 1 for r in ratios)
        mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\n{len(ratios)} models: byoc's spread is wider than onnxruntime's on {wider}; "
              f"spread ratio geometric mean {mean:.2f} (goal: no wider, 1.00)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    dynamic.model_arguments(parser, runs=10)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per side (default 3)")
    args, folder, names = dynamic.parse_model_arguments(parser, argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="byoc-steadiness-") as tmp:
        for name in names:
            path = dynamic.model_file(name, folder)
            if path is None:
                print(f"SKIP {name}: not in {folder}; export it with benchmarks/dynamic_models.py", file=sys.stderr)
                continue
            rows.append(measure(name, path, args, Path(tmp)))
            print(f"{name}: {json.dumps(rows[-1])}", file=sys.stderr, flush=True)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"cpu": timing.machine_class(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

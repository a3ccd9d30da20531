"""Two checkouts of byoc on the real-model suite: are the outputs bit-identical, and is the speed the same?

For a change meant to be behaviour-neutral (a refactor, a move of modules): build every model with both
checkouts, compare their outputs byte for byte and their plans (partitions, vendors, op counts), then time
both artifacts, each in its own process with its own checkout, interleaved round by round, with onnxruntime
as the third process (the ratio each side would report). Run from the repo root::

    git worktree add --detach /tmp/base <commit>     # and build its native runtimes there:
    (cd /tmp/base && python setup.py build_ext --inplace)
    python benchmarks/compare_trees.py /tmp/base --models small --runs 20

``BASE`` and ``--head`` (default: this checkout) must each have their native runtimes built in place (an
editable install does that, as does ``setup.py build_ext --inplace``). Each build runs in a fresh process with
``PYTHONPATH`` set to its checkout, so each side imports its own ``byoc``; the models, their inputs and the
timing come from this checkout's ``benchmarks/`` (real_models_catalog, timing_processes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import timing_processes as timing  # noqa: E402 - time_interleaved, machine_class
from real_models_catalog import MODELS, SMALL_MODELS, make_inputs, model_path, static_shapes  # noqa: E402


def _build_worker(task_file: str) -> int:
    """In a process whose ``PYTHONPATH`` is one checkout: build, run once, save outputs and the plan, export."""
    import byoc

    task = json.loads(Path(task_file).read_text())
    if not Path(byoc.__file__).resolve().is_relative_to(Path(task["tree"]).resolve()):
        raise SystemExit(f"imported byoc from {byoc.__file__}, not from {task['tree']}")
    with np.load(task["inputs"]) as saved:
        inputs = {name: saved[f"arr_{i}"] for i, name in enumerate(task["input_names"])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(task["model"], vendors=task["vendors"], input_shapes=task["input_shapes"] or None)
    np.savez(task["outputs"], *[np.asarray(o) for o in artifact.run(inputs)])
    artifact.export(task["library"], overwrite=True)
    plan = [[p.name, p.vendor, len(p.ops)] for p in artifact.plan.partitions]
    Path(task["plan"]).write_text(json.dumps({"partitions": plan, "host_ops": len(artifact.plan.host_ops)}))
    return 0


def build(tree: Path, model: Path, vendors: list, shapes: dict, inputs: dict, tmp: Path, tag: str) -> dict:
    """Build ``model`` with the checkout ``tree`` in a fresh process: its outputs, plan and exported library."""
    files = {key: str(tmp / f"{tag}.{suffix}") for key, suffix in
             (("outputs", "npz"), ("library", "so"), ("plan", "json"), ("inputs", "inputs.npz"))}
    np.savez(files["inputs"], *inputs.values())
    task = tmp / f"{tag}.task.json"
    task.write_text(json.dumps({"tree": str(tree), "model": str(model), "vendors": vendors,
                                "input_shapes": shapes, "input_names": list(inputs), **files}))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, "--build-worker", str(task)], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {done.returncode}"}
    with np.load(files["outputs"]) as saved:
        outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    return {"outputs": outputs, "plan": json.loads(Path(files["plan"]).read_text()), "library": files["library"],
            "env": {"PYTHONPATH": str(tree)}}


def identical(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base", type=Path, help="the checkout to compare against (its runtimes built in place)")
    p.add_argument("--head", type=Path, default=HERE.parent, help="the checkout under test (default: this one)")
    p.add_argument("--models", default="small", help=f"comma-separated from {', '.join(MODELS)}, 'small' or 'all'")
    p.add_argument("--configs", nargs="+", default=["dnnl,c_source"], metavar="VENDORSET")
    p.add_argument("--runs", type=int, default=10, help="timed rounds (default 10; 0: outputs only)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600, help="seconds a timing process may take to load")
    p.add_argument("--round-timeout", type=float, default=300)
    p.add_argument("--json", type=Path, help="also write the rows here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    names = (list(SMALL_MODELS) if args.models == "small" else list(MODELS) if args.models == "all"
             else args.models.split(","))
    print(f"# {timing.machine_class()}; base {args.base}, head {args.head}", flush=True)
    rows, differ = [], 0
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for name in names:
            model = MODELS[name]
            path = model_path(model)
            import onnx

            shapes = static_shapes(model, onnx.load(str(path), load_external_data=False))
            inputs = make_inputs(model, path)
            for config in args.configs:
                vendors = config.split(",")
                tag = f"{name}-{config.replace(',', '_')}"
                sides = {side: build(tree, path, vendors, shapes, inputs, tmp, f"{tag}-{side}")
                         for side, tree in (("base", args.base), ("head", args.head))}
                row = {"model": name, "config": config}
                errors = {side: built["error"] for side, built in sides.items() if "error" in built}
                if errors:  # the same refusal on both sides is the same behaviour
                    same = len(errors) == 2 and errors["base"] == errors["head"]
                    row.update(status="error", errors=errors, same=same)
                else:
                    row["same"] = (identical(sides["base"]["outputs"], sides["head"]["outputs"])
                                   and sides["base"]["plan"] == sides["head"]["plan"])
                if args.runs and not errors:
                    configs = {side: ("byoc", built["library"], built["env"]) for side, built in sides.items()}
                    configs["onnxruntime"] = ("onnxruntime", str(path))
                    timed = timing.time_interleaved(configs, inputs, args, tmp, args.runs, args.warmup)
                    ms = {side: 1e3 * r["median_s"] for side, r in timed.items() if r["status"] == "ok"}
                    row.update({f"{side}_ms": value for side, value in ms.items()})
                    if "base" in ms and "head" in ms:
                        row["head_over_base"] = ms["head"] / ms["base"]
                differ += not row["same"]
                rows.append(row)
                print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)
    ratios = [r["head_over_base"] for r in rows if "head_over_base" in r]
    if ratios:
        geomean = float(np.exp(np.mean(np.log(ratios))))
        print(f"head / base latency: geomean {geomean:.3f}, median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} builds")
    print(f"outputs and plans: {len(rows) - differ} of {len(rows)} builds identical")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--build-worker":
        sys.exit(_build_worker(sys.argv[2]))
    sys.exit(main())

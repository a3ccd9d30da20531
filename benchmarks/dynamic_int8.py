"""A BERT-like encoder quantized by onnxruntime's quantize_dynamic, byoc[dnnl] against onnxruntime.

Run from the repo root::

    python benchmarks/dynamic_int8.py                       # 12 layers, hidden 768, 128 tokens
    python benchmarks/dynamic_int8.py --layers 6 --runs 20

The float model is built with onnx.helper (tests/dynamic_int8_models.py: Hugging Face's layout, separate Q, K
and V, erf GELU, symbolic batch and sequence) and quantized with ``quantize_dynamic`` (s8 weights, MatMul only),
the form of hubs' ``model_quantized.onnx``. byoc builds it with ``vendors=["dnnl"]`` and exports it; byoc and
onnxruntime (2 threads, all graph optimizations) then each run it in their own process, one at a time per round
(benchmarks/timing_processes.py). Printed: the machine class, the latency of each and their ratio, byoc's
partitions, the exported library's size against the ONNX file's, and the largest difference of the outputs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import timing_processes as timing  # noqa: E402 - next to this file
from dynamic_int8_models import encoder, quantize_dynamic  # noqa: E402 - the tests' model builders


def _definition(path: Path, inputs: dict) -> np.ndarray:
    """The model's output as ONNX defines each op: onnxruntime with graph optimizations off."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=20, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="calls per round")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for a process to load")
    parser.add_argument("--round-timeout", type=float, default=60, help="seconds per call")
    args = parser.parse_args()

    import byoc

    with tempfile.TemporaryDirectory(prefix="byoc-dynq-") as tmp_name:
        tmp = Path(tmp_name)
        path, lib = tmp / "model_quantized.onnx", tmp / "model_quantized.so"
        float_model = encoder(layers=args.layers, hidden=args.hidden, heads=args.heads, ffn=4 * args.hidden)
        onnx.save(quantize_dynamic(float_model), str(path))
        inputs = {"x": np.random.default_rng(1).standard_normal((1, args.tokens, args.hidden)).astype(np.float32)}
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            artifact = byoc.compile(str(path), vendors=["dnnl"])
        compile_s = time.perf_counter() - start
        artifact.export(lib, overwrite=True)
        partitions = len(artifact.plan.partitions)
        host = sum(1 for d in artifact.plan.decisions.values() if not d.rule)
        measured = timing.time_interleaved({"onnxruntime": ("onnxruntime", path), "byoc": ("byoc", lib)}, inputs,
                                          args, tmp, args.runs, args.warmup, calls=args.calls)
        print(f"machine class: {timing.machine_class()}")
        print(f"BERT-like encoder, {args.layers} layers, hidden {args.hidden}, {args.tokens} tokens, quantize_dynamic "
              "(s8 weights, per tensor)")
        print(f"byoc: {partitions} partition(s), {host} op(s) on the host, compiled in {compile_s:.1f} s")
        print(f"sizes: ONNX file {path.stat().st_size / 1e6:.1f} MB, exported library {lib.stat().st_size / 1e6:.1f} MB")
        if any(m["status"] != "ok" for m in measured.values()):
            print("; ".join(f"{k}: {m['why']}" for k, m in measured.items() if m["status"] != "ok"))
            return 1
        ort, ours = measured["onnxruntime"], measured["byoc"]
        definition = _definition(path, inputs)
        ours_error = float(np.max(np.abs(ours["outputs"][0] - definition)))
        ort_error = float(np.max(np.abs(ort["outputs"][0] - definition)))
        print(f"latency: byoc {ours['median_s'] * 1e3:.2f} ms, onnxruntime {ort['median_s'] * 1e3:.2f} ms, "
              f"ratio {ours['median_s'] / ort['median_s']:.2f}x (median of {ours['samples']} calls each)")
        print(f"largest difference from the ONNX definition (onnxruntime, optimizations off; outputs up to "
              f"{float(np.max(np.abs(definition))):.3g}): byoc {ours_error:.3g}, onnxruntime's optimized run "
              f"{ort_error:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

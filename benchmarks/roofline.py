"""How close onnxruntime already is to this machine's float32 multiply-add peak, per model.

Run from the repo root::

    python benchmarks/roofline.py                        # mobilenetv2, resnet50, bert
    python benchmarks/roofline.py resnet18 path/to/model.onnx --runs 50

A latency ratio goal against onnxruntime (byoc / onnxruntime <= 0.8, say) can
only be met if the model's multiply-adds fit in that time. This script says
whether they can on this machine:

* multiply-adds: every Conv, ConvTranspose, MatMul and Gemm with the shapes ONNX
  shape inference gives (the model needs static input shapes). Depthwise convs
  are counted apart: they are bound by memory, not by multiply-adds, and the
  floor leaves them out, so the floor is lower than anything can reach.
* peak: onnxruntime's float32 MatMul in this process, 2 intra-op threads, the
  best of ``--runs`` calls over a few shapes whose operands fit in cache (one
  of them BERT's [128, 768] x [768, 3072]): the multiply-add rate a tuned
  kernel reaches here (oneDNN's and MLAS's GEMMs are both at the FMA units'
  limit on AVX2 and AVX-512 machines; bigger operands measured 15% slower on
  an AVX-512 EPYC).
* floor: dense multiply-adds / peak, the time of a run that does nothing but
  multiply at the peak. "Winograd floor" counts every 3x3 stride-1 dense conv
  at a quarter of its multiply-adds (F(4x4, 3x3) needs 36 products for 16
  outputs where the direct conv needs 144), the most a fast convolution can
  take off.
* onnxruntime: the model's median latency over ``--runs`` calls, CPU provider,
  2 intra-op threads, in this process (nothing else loaded).
* best ratio: floor / onnxruntime's latency, the lowest byoc / onnxruntime
  ratio any implementation could reach without fewer multiply-adds or a
  lower precision.

Nothing is asserted: the script prints, and ``--json`` saves the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_models  # noqa: E402  (benchmarks/ is not a package)

PEAK_SHAPES = ((512, 512, 512), (128, 768, 3072), (3136, 64, 256))  # M, K, N
THREADS = 2


def _shapes(model: onnx.ModelProto) -> dict:
    """Static shape of every value (inputs, initializers, inferred intermediates)."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {}
    for info in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        dims = info.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = [d.dim_value for d in dims]
    for init in inferred.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def count_macs(model: onnx.ModelProto) -> dict:
    """Multiply-adds of the model's convolutions and matrix products, in three groups.

    Returns ``{"dense": n, "dense_3x3_s1": n, "depthwise": n, "unknown": [node names]}``:
    ``dense_3x3_s1`` is the part of ``dense`` in 3x3 stride-1 convolutions;
    ``unknown`` lists nodes whose shapes inference could not give.
    """
    shapes = _shapes(model)
    counts = {"dense": 0, "dense_3x3_s1": 0, "depthwise": 0, "unknown": []}
    for node in model.graph.node:
        if node.op_type not in ("Conv", "ConvTranspose", "MatMul", "Gemm"):
            continue
        known = [shapes.get(name) for name in (node.input[1], node.output[0])] + [shapes.get(node.input[0])]
        if any(s is None for s in known):
            counts["unknown"].append(node.name or node.output[0])
            continue
        weight, out, inp = known
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            group = attrs.get("group", 1)
            macs = int(np.prod(out)) * int(np.prod(weight[1:]))  # each output: C/group x kernel products
            if group > 1 and group == inp[1] and weight[1] == 1:
                counts["depthwise"] += macs
                continue
            counts["dense"] += macs
            if weight[2:] == [3, 3] and all(s == 1 for s in attrs.get("strides", [1, 1])):
                counts["dense_3x3_s1"] += macs
        elif node.op_type == "ConvTranspose":  # each input element meets C_out/group x kernel weights
            counts["dense"] += int(np.prod(inp)) * int(np.prod(weight[1:]))
        else:  # MatMul, Gemm: out = [..., M, N], the contracted length is the weight's rows (or columns, transB)
            k = weight[-1] if attrs.get("transB", 0) else weight[-2]
            counts["dense"] += int(np.prod(out)) * k
    return counts


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _timed_ms(session, feeds: dict, runs: int) -> list[float]:
    for _ in range(5):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def measure_peak(runs: int) -> float:
    """onnxruntime's float32 MatMul rate here, in multiply-adds per millisecond (best call over PEAK_SHAPES)."""
    return max(_matmul_rate(shape, runs) for shape in PEAK_SHAPES)


def _matmul_rate(shape: tuple, runs: int) -> float:
    m, k, n = shape
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "peak",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [m, n])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", benchmark_models.OPSET)])
    model.ir_version = benchmark_models.IR_VERSION
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    return m * k * n / min(_timed_ms(_session(model), feeds, runs))


def onnxruntime_ms(model: onnx.ModelProto, runs: int) -> float:
    """Median latency of ``model`` in onnxruntime here, on random inputs."""
    session = _session(model)
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in session.get_inputs():
        if "float" not in inp.type:
            raise SystemExit(f"{inp.name}: only float inputs are generated here, not {inp.type}")
        feeds[inp.name] = rng.random([d if isinstance(d, int) else 1 for d in inp.shape], dtype=np.float32)
    return statistics.median(_timed_ms(session, feeds, runs))


def model_row(name: str, peak_per_ms: float, runs: int, build: Path) -> dict:
    path = Path(name) if name.endswith(".onnx") else benchmark_models.model_path(name, build)
    model = onnx.load(str(path))
    macs = count_macs(model)
    floor = macs["dense"] / peak_per_ms
    winograd_floor = (macs["dense"] - 0.75 * macs["dense_3x3_s1"]) / peak_per_ms
    ort = onnxruntime_ms(model, runs)
    return {"model": path.stem, **macs, "floor_ms": floor, "winograd_floor_ms": winograd_floor,
            "onnxruntime_ms": ort, "best_ratio": floor / ort, "best_ratio_winograd": winograd_floor / ort}


def print_table(peak_per_ms: float, rows: list[dict]) -> None:
    print(f"float32 multiply-add peak here (onnxruntime MatMul, {THREADS} threads): {peak_per_ms / 1e6:.1f} G/s\n")
    print("| model | dense MACs | of which 3x3 s1 | depthwise MACs | floor | Winograd floor | onnxruntime "
          "| best ratio | with Winograd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['dense'] / 1e9:.2f} G | {r['dense_3x3_s1'] / 1e9:.2f} G "
              f"| {r['depthwise'] / 1e6:.0f} M | {r['floor_ms']:.2f} ms | {r['winograd_floor_ms']:.2f} ms "
              f"| {r['onnxruntime_ms']:.2f} ms | {r['best_ratio']:.2f}x | {r['best_ratio_winograd']:.2f}x |")
    for r in rows:
        if r["unknown"]:
            print(f"\n{r['model']}: not counted (shapes unknown): {', '.join(r['unknown'])}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["mobilenetv2", "resnet50", "bert"],
                        help="names from benchmarks/benchmark_models.py or .onnx paths (static input shapes)")
    parser.add_argument("--runs", type=int, default=30, help="timed calls per measurement (default 30)")
    parser.add_argument("--build", type=Path, default=benchmark_models.DEFAULT_BUILD, help="model cache (default benchmarks/build)")
    parser.add_argument("--json", type=Path, help="also save the table here")
    args = parser.parse_args(argv)
    peak = measure_peak(args.runs)
    rows = [model_row(name, peak, args.runs, args.build) for name in args.models]
    print_table(peak, rows)
    if args.json:
        args.json.write_text(json.dumps({"peak_macs_per_s": peak * 1e3, "models": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

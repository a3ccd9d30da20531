"""Build a model for tutorial 4's NPU, check it against onnxruntime, build it again from the compile cache,
and, with --s390x, run it on s390x under qemu.

    python run_npu.py [MODEL.onnx] [--sram-kib N] [--s390x]      (in tutorials/04_npu)

Without MODEL.onnx it uses byoc's example CNN, written to small_cnn.onnx unless that file already holds it.
Exits 1 when outputs differ from onnxruntime's.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

import byoc
from byoc.examples import write_example
from npu import VENDOR


def matches(artifact, model: Path, inputs: dict, run) -> bool:
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, inputs)
    return all(np.allclose(got, want, rtol=1e-4, atol=1e-5) for got, want in zip(run(inputs), expected))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--sram-kib", type=int, default=1024)
    parser.add_argument("--s390x", action="store_true", help="also run it on s390x under qemu")
    args = parser.parse_args()
    model = Path(args.model or "small_cnn.onnx")
    if args.model is None:
        write_example("small_cnn", model)  # unless the file is there already; never over another file
    options = {"npu": {"sram_kib": args.sram_kib}}
    rng = np.random.default_rng(0)
    codegen = VENDOR.codegen
    with tempfile.TemporaryDirectory() as cache:
        os.environ["BYOC_CODEGEN_CACHE"] = cache  # a cache of this run's own, so that both builds show
        artifact = byoc.compile(model, [VENDOR], vendor_options=options)
        inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype) for s in artifact.inputs}
        print(f"1. built for x86_64, npuc ran {codegen.compiler_runs} time(s):")
        for part in artifact.plan.partitions:
            split = f"  (split off: {part.split})" if part.split else ""
            print(f"   {part.name}: {', '.join(op.split('.')[-1] for op in part.ops)}{split}")
        for node in artifact.plan.host_nodes:
            print(f"   host: {node.node.name} ({node.reasons['npu']})")
        ok = matches(artifact, model, inputs, lambda x: artifact.run(x))
        print(f"2. {'match' if ok else 'MISMATCH'} with onnxruntime")
        runs = codegen.compiler_runs
        byoc.compile(model, [VENDOR], vendor_options=options)
        print(f"3. built again: npuc ran {codegen.compiler_runs - runs} time(s)")
    if args.s390x:
        zed = byoc.compile(model, [VENDOR], target="s390x", vendor_options=options)
        same = matches(zed, model, inputs, lambda x: zed.run_emulated(x))
        print(f"4. on s390x under qemu: {'match' if same else 'MISMATCH'} with onnxruntime")
        ok = ok and same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

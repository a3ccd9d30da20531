"""Deploy an ONNX model to s390x (IBM Z, big-endian) and check it against onnxruntime.

    python deploy_s390x.py [MODEL.onnx] [--out DIR]      (in tutorials/02_deploy_s390x)

Without MODEL.onnx it uses byoc's example CNN, written to small_cnn.onnx
unless that file already holds it (another file there is never replaced). The
steps are the ones you would run for a real machine: compile for s390x, export
a standalone C program (no TVM runtime), build it with the cross compiler, run
it (here under qemu-s390x; on Z, copy the folder and run ``./model``), and
compare its outputs with onnxruntime on the build host.

Needs gcc-s390x-linux-gnu, libc6-dev-s390x-cross and qemu-user; byoc names
every missing package when one is absent. Running it again replaces the
program folder it wrote (never another folder). Exits 1 when the outputs
differ, 2 with a one-line error on a problem byoc can name.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

import byoc
from byoc.examples import write_example
from byoc.deploy.standalone import read_tensors, write_tensors

EXAMPLE = "small_cnn.onnx"


def elf_kind(path: Path) -> str:
    """Byte order and machine of an ELF executable, read from its header."""
    head = path.read_bytes()[:20]
    order = "big" if head[5] == 2 else "little"
    machine = int.from_bytes(head[18:20], order)
    return f"ELF {order}-endian, machine {({22: 's390x', 21: 'ppc64', 62: 'x86_64'}).get(machine, machine)}"


def deploy(model: Path, out: Path) -> int:
    # 1. Partition for the c_source vendor and compile for s390x (z15).
    artifact = byoc.compile(model, vendors=["c_source"], target="s390x:z15")
    print(f"1. compiled {model} for {artifact.target.triple}: "
          + ", ".join(f"{p.name} ({len(p.ops)} ops)" for p in artifact.plan.partitions))

    # 2. A standalone C program: model.c, partitions_<vendor>.c, kernels.o, Makefile.
    #    Check the cross toolchain first: a TargetError names every package missing.
    artifact.target.compiler(), artifact.target.static_libc(), artifact.target.runner()
    artifact.export_standalone(out, overwrite=True)
    print(f"2. exported {out}/: {' '.join(sorted(p.name for p in out.iterdir()))}")

    # 3. Build it with the cross compiler the Makefile names.
    built = subprocess.run(["make", "-s", "-C", str(out)], capture_output=True, text=True)
    if built.returncode != 0:
        raise byoc.BuildError(f"make in {out} failed: {(built.stderr.strip().splitlines() or ['?'])[-1]}")
    print(f"3. built {out}/model: {elf_kind(out / 'model')}")

    # 4. Run it. Tensor files are little-endian on every target; the program converts.
    rng = np.random.default_rng(0)
    inputs = {spec.name: rng.standard_normal(spec.shape).astype(spec.dtype) for spec in artifact.inputs}
    write_tensors(out / "inputs.bin", list(inputs.values()))
    qemu = artifact.target.runner()  # ["qemu-s390x", "-cpu", ...]; empty on real hardware
    subprocess.run([*qemu, str(out / "model"), str(out / "inputs.bin"), str(out / "outputs.bin")], check=True)
    outputs = read_tensors(out / "outputs.bin")
    print(f"4. ran it under {Path(qemu[0]).name}: " + ", ".join(f"{o.shape}" for o in outputs))

    # 5. Compare with onnxruntime on the build host.
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, inputs)
    ok = all(np.allclose(got, want, rtol=1e-4, atol=1e-5) for got, want in zip(outputs, expected))
    worst = max(float(np.abs(got - want).max()) for got, want in zip(outputs, expected))
    print(f"5. {'match' if ok else 'MISMATCH'}: {len(outputs)} output(s) vs onnxruntime (rtol 1e-4, atol 1e-5)")
    if not ok:
        print(f"   largest difference {worst:.3g}", file=sys.stderr)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help=f"the ONNX model (default: byoc's example CNN in {EXAMPLE})")
    parser.add_argument("--out", default="small_cnn_s390x", help="new or empty folder for the program "
                        "(a folder this script wrote before is replaced)")
    args = parser.parse_args()
    try:
        if args.model is None:
            write_example("small_cnn", EXAMPLE)  # unless the file is there already; never over another file
        model = Path(args.model or EXAMPLE)
        if not model.is_file():
            raise byoc.ModelNotFoundError(f"model file not found: {str(model)!r}; check the path")
        return deploy(model, Path(args.out))
    except byoc.ByocError as err:
        print(f"deploy_s390x.py: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Cross targets: largest |error| vs onnxruntime and wall time of the standalone program.

Run from the repo root: `python benchmarks/cross_targets.py` (needs the cross toolchains
and qemu-user; `python -c "import byoc.deploy.toolchain as t; [t.install_missing(p) for p in (\"ppc64le\", \"s390x\")]"`
installs them). Times are the median of 5 runs of the program, including qemu start-up.
"""

import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

import byoc
from byoc.deploy import standalone

sys.path.insert(0, "tests")
from cross_models import inputs_for, mlp, small_cnn  # noqa: E402 - tests/cross_models.py

MODELS = {"cnn": (small_cnn, dict(vendors=["c_source"], keep_on_host=["Sigmoid", "Flatten"])),
          "cnn_host": (small_cnn, dict(vendors=[])),
          "mlp": (mlp, dict(vendors=["c_source"], keep_on_host=["Tanh"]))}
print("| target | model | max abs error | program time (median of 5) | runner |")
print("|---|---|---|---|---|")
for target in ["x86_64", "ppc64le", "s390x", "ppc64le:pwr10", "s390x:z15"]:
    for name, (make, opts) in MODELS.items():
        model = make()
        art = byoc.compile(model, target=target, **opts)
        x = inputs_for(model)
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
        with tempfile.TemporaryDirectory() as tmp:
            prog = standalone.export_standalone(art, tmp + "/p")
            exe = standalone.build_program(prog)
            arrays = art.check_inputs(x)
            times = []
            for _ in range(5):
                t = time.perf_counter()
                out = standalone.run_program(prog, arrays, exe)
                times.append(time.perf_counter() - t)
        err = max(float(np.abs(o - r).max()) for o, r in zip(out, ref))
        runner = " ".join(p.split("/")[-1] for p in art.target.runner()) or "native"
        print(f"| {target} | {name} | {err:.3g} | {statistics.median(times)*1e3:.0f} ms | {runner} |")

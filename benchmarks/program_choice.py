"""Which dnnl program each call ran (team or serial), and the latency, in fresh processes.

    python benchmarks/program_choice.py magika [--runs 20] [--processes 2]

Builds the model (a real-model suite name from ``benchmarks/real_models.py``,
or a ``benchmarks/run.py`` model name) with ``dnnl,c_source`` and exports it
once. Then, alternating, fresh processes load it with the runtime's program
choice on (the default) and off (``BYOC_DNNL_CONTENTION=off``), run
``--warmup`` calls, then ``--runs`` timed calls, and print the median and how
many partition runs went to the team and to the serial program
(``byoc.dnnl.run_counts()``). On an idle machine "on" should run no or almost
no serial runs, so both run the same primitives; under load it should run
mostly serial ones. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import under_load  # noqa: E402 - benchmarks/under_load.py: model names to paths and inputs

CHILD = r"""
import json, statistics, sys, time
import numpy as np, byoc, tvm_ffi
lib, inputs, warmup, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with np.load(inputs) as saved:
    feed = [saved[k] for k in saved.files]
artifact = byoc.load(lib)
for _ in range(warmup):
    artifact.run(feed)
counts = tvm_ffi.get_global_func("byoc.dnnl.run_counts")
before = list(counts())
times = []
for _ in range(runs):
    start = time.perf_counter()
    artifact.run(feed)
    times.append(time.perf_counter() - start)
print(json.dumps({"median_ms": statistics.median(times) * 1e3,
                  "team_serial": [a - b for a, b in zip(counts(), before)]}))
"""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="a real-model suite name or a benchmarks/run.py model name")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--processes", type=int, default=2, help="fresh processes per setting, alternating")
    p.add_argument("--cache", type=Path, default=None, help="model cache (as benchmarks/real_models.py)")
    args = p.parse_args(argv)
    args.cache = args.cache or under_load.rm.default_cache()
    import byoc

    path, inputs, shapes = under_load.model_source(args.model, args)
    with tempfile.TemporaryDirectory(prefix="byoc-choice-") as tmp:
        lib, saved = Path(tmp) / "model.so", Path(tmp) / "inputs.npz"
        byoc.compile(str(path), vendors=["dnnl", "c_source"], input_shapes=shapes).export(lib)
        np.savez(saved, **{f"input{k:04d}": v for k, v in enumerate(inputs.values())})  # loaded back in order
        for index in range(args.processes):
            for setting in ("on", "off"):
                env = {**os.environ, "BYOC_DNNL_CONTENTION": setting}
                proc = subprocess.run([sys.executable, "-c", CHILD, str(lib), str(saved), str(args.warmup),
                                       str(args.runs)], capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    print(f"{setting}: failed: {proc.stderr.strip().splitlines()[-1:]}")
                    return 1
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                team, serial = result["team_serial"]
                print(f"process {index + 1}, contention watch {setting:3}: median {result['median_ms']:.2f} ms; "
                      f"partition runs: {team} team, {serial} serial")
    return 0


if __name__ == "__main__":
    sys.exit(main())

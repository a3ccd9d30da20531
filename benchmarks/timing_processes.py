"""Timing processes: each configuration (onnxruntime, a plain TVM module, a byoc build) loaded once in its own
long-lived process, then timed one process at a time, round by round (``time_interleaved``).

Why and how (thread pools that fight for the cores in one process, the line protocol ``run N`` / ``save``, the
pause before each request, the calls per request) is told in benchmarks/run.py's docstring. Used by
benchmarks/run.py, real_models.py and under_load.py. This file is also the timing process's program:
``TimingProcess`` runs ``timing_processes.py --timer SPEC.json``.
"""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# Pause before each timed request: onnxruntime's intra-op threads keep spinning for a while after
# its call returns, and a configuration timed right after it shares the 2 cores with them
# (measured on byoc[dnnl] ResNet-50 int8: 31.8 ms timed alone in this harness, 58.6 ms right after
# onnxruntime's turn).
SETTLE_MS = 50


def cpu_model() -> str:
    """The CPU's vendor and model as the kernel names it ("AMD EPYC 7B13", "Intel(R) Xeon(R) ..."): two
    machines of one ISA class can rank kernels differently (caches, clocks), so every table names it."""
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return platform.processor() or "an unknown CPU"


def machine_class() -> str:
    """The x86-64 class speed figures are measured on: "AVX2", "AVX-512" or "AVX-512 VNNI", by cpuid, as the
    libraries timed read it, and the CPU (:func:`cpu_model`). Where the class is held below the CPU's own
    (``ONEDNN_MAX_CPU_ISA`` for oneDNN alone, ``.ci/as-avx2`` for every library), the figure says so: then it is
    the ISA that changed, not the caches or the clocks."""
    from byoc.deploy.targets import host_cpu_features

    flags = host_cpu_features()
    cpu = ("AVX-512 VNNI" if "avx512vnni" in flags else "AVX-512" if "avx512f" in flags
           else "AVX2" if "avx2" in flags else "no AVX2")
    on = f"on {cpu_model()}"
    held = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if held.startswith("AVX2") and cpu.startswith("AVX-512"):
        return f"AVX2 (ONEDNN_MAX_CPU_ISA={held} on an {cpu} CPU) {on}"
    listed = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    if cpu == "AVX2" and "avx512f" in listed:  # .ci/as-avx2: every library sees AVX2, on an AVX-512 CPU
        return f"AVX2 (AVX-512 hidden from cpuid by .ci/as-avx2 on an AVX-512 CPU) {on}"
    return f"{cpu} {on}"


# -- timing processes: one long-lived subprocess per configuration ---------------------
#: the model metadata key whose JSON gives a size to each symbolic input dim (``{"batch": 2}``), for a benchmark
#: model compiled with symbolic dims and timed at one shape (benchmarks/ops.py's int8 conv with a symbolic batch)
TEST_DIMS_KEY = "byoc.benchmark.test_dims"


def random_inputs(path: Path) -> dict:
    """Seeded random arrays for the ONNX model's inputs, by name, in graph order; a symbolic dim takes its size
    from the model's ``TEST_DIMS_KEY`` metadata, else 1."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(1)
    initializers = {i.name for i in model.graph.initializer}
    test_dims = json.loads(next((p.value for p in model.metadata_props if p.key == TEST_DIMS_KEY), "{}"))
    inputs = {}
    for vi in model.graph.input:
        if vi.name not in initializers:
            shape = [d.dim_value if d.HasField("dim_value") else int(test_dims.get(d.dim_param, 1))
                     for d in vi.type.tensor_type.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            inputs[vi.name] = rng.standard_normal(shape).astype(dtype)
    return inputs


def _ort_runner(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda inputs: session.run(None, inputs)


def _tvm_runner(lib_path: str):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.runtime.load_module(lib_path), tvm.cpu())

    def run(inputs):
        result = vm["main"](*[tvm.runtime.tensor(a) for a in inputs.values()])
        items = [result] if hasattr(result, "numpy") else list(result)
        return [item.numpy() for item in items]

    return run


def _byoc_runner(lib_path: str, threads=None):
    import byoc

    return byoc.load(lib_path, threads=threads).run


RUNNERS = {"onnxruntime": _ort_runner, "tvm": _tvm_runner, "byoc": _byoc_runner}


def _timer_main(spec_file: str) -> int:
    """Timing process: load once, then answer the commands below, one reply line each.

    The spec's ``inputs`` is one ``.npz`` file or a list of them: input sets K = 0, 1, ... (the shapes of
    benchmarks/dynamic.py), each holding ``input_names`` in order.

    * ``run N [K]``: N calls on set K (default 0); replies the N elapsed seconds.
    * ``cycle N``: N rounds of one call per set, in order (A, B, C, A, B, C ...); replies the elapsed
      seconds in call order.
    * ``save [K]``: the outputs of the last call on set K, into ``outputs`` (set K's own file when there
      are several sets: ``outputs`` with ``-K`` before its suffix); replies ``saved``.
    """
    spec = json.loads(Path(spec_file).read_text())
    # The protocol owns the original stdout; whatever a library prints goes to stderr instead.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    files = spec["inputs"] if isinstance(spec["inputs"], list) else [spec["inputs"]]
    sets = []
    for file in files:
        with np.load(file) as saved:
            sets.append({name: saved[f"arr_{i}"] for i, name in enumerate(spec["input_names"])})
    options = {"threads": spec["threads"]} if spec.get("threads") else {}  # byoc only (benchmarks/under_load.py)
    run = RUNNERS[spec["kind"]](spec["path"], **options)
    replies.write("ready\n")
    outputs = {}

    def timed(k: int) -> float:
        t = time.perf_counter()
        outputs[k] = run(sets[k])
        return time.perf_counter() - t

    for line in sys.stdin:
        command, *arg = line.split()
        if command == "run":
            k = int(arg[1]) if len(arg) > 1 else 0
            times = [timed(k) for _ in range(int(arg[0]))]
        elif command == "cycle":
            times = [timed(k) for _ in range(int(arg[0])) for k in range(len(sets))]
        elif command == "save":
            k = int(arg[0]) if arg else 0
            np.savez(outputs_file(spec, k, len(sets)), *[np.asarray(o) for o in outputs[k]])
            replies.write("saved\n")
            continue
        else:
            raise SystemExit(f"timing process: unknown command {line.strip()!r}")
        replies.write(" ".join(repr(t) for t in times) + "\n")
    return 0


def outputs_file(spec: dict, k: int, sets: int) -> str:
    """Where ``save K`` writes (see ``_timer_main``)."""
    if sets == 1:
        return spec["outputs"]
    path = Path(spec["outputs"])
    return str(path.with_name(f"{path.stem}-{k}{path.suffix}"))


class TimingProcess:
    """One configuration in its own process; ``why`` is set (and the process gone) once it failed."""

    def __init__(self, name: str, spec: dict, tmp: Path, env: dict | None = None):
        """``env``: variables set in the process on top of this one's environment."""
        self.name, self.spec = name, spec
        self.status, self.why = "ok", None
        slug = "".join(c if c.isalnum() else "-" for c in name) + f"-{time.monotonic_ns()}"
        spec_file = tmp / f"timer-{slug}.json"
        spec_file.write_text(json.dumps(spec))
        self._stderr = open(tmp / f"timer-{slug}.err", "w+")
        # Own session: a hung child and everything it started are killed together.
        self.proc = subprocess.Popen([sys.executable, __file__, "--timer", str(spec_file)], start_new_session=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env={**os.environ, **(env or {})})
        self._buffer = b""

    def request(self, command: str, timeout: float, expect: str | None = None):
        """Send one command and return the reply line, or None (and mark the process failed)."""
        if self.why:
            return None
        try:
            self.proc.stdin.write(command.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._fail("error", f"died before {command!r}: {self._last_error()}")
        return self.reply(command, timeout, expect)

    def reply(self, what: str, timeout: float, expect: str | None = None):
        """The next reply line within ``timeout`` seconds (``expect``: the only right answer), or None."""
        if self.why:
            return None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return self._fail("timeout", f"no reply to {what!r} within {timeout:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return self._fail("error", f"died during {what!r}: {self._last_error()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        line = line.decode()
        if expect is not None and line != expect:
            return self._fail("error", f"answered {line[:80]!r} to {what!r}")
        return line

    def _last_error(self) -> str:
        try:
            self.proc.wait(timeout=10)  # it closed its stdout: it is exiting
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().splitlines() if line.strip()]
        return lines[-1].strip() if lines else f"exit code {self.proc.returncode}"

    def _fail(self, status: str, why: str):
        self.status, self.why = status, why
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.close()
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # EOF ends the command loop
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self._stderr):
            if not stream.closed:
                stream.close()


def time_interleaved(configs: dict, inputs: dict, args, tmp: Path, rounds: int, warmup: int, calls: int = 1,
                     settle_ms: float = SETTLE_MS) -> dict:
    """Time each configuration in its own process, one at a time per round.

    ``configs`` maps a name to ``(kind, path)`` (kind: onnxruntime | tvm |
    byoc), or ``(kind, path, env)`` with variables set in that process alone
    (benchmarks/compare_trees.py: ``PYTHONPATH`` picks the checkout). Returns per name ``{"status": "ok", "median_s", "samples",
    "outputs"}`` or ``{"status": "timeout" | "error", "why"}``.
    """
    input_file = tmp / f"inputs-{time.monotonic_ns()}.npz"
    np.savez(input_file, *inputs.values())
    procs = {}
    for name, (kind, path, *env) in configs.items():  # all load at once; loading is not timed
        spec = {"kind": kind, "path": str(path), "inputs": str(input_file), "input_names": list(inputs),
                "outputs": str(tmp / f"outputs-{len(procs)}-{time.monotonic_ns()}.npz")}
        procs[name] = TimingProcess(name, spec, tmp, env[0] if env else None)
    for proc in procs.values():
        proc.reply("load", args.timeout, expect="ready")
    times = {name: [] for name in procs}
    for round_ in range(warmup + rounds):
        for name, proc in procs.items():
            time.sleep(settle_ms / 1e3)  # the previous process's idle threads stop spinning first
            line = proc.request(f"run {calls}", args.round_timeout * calls)
            if line is not None and round_ >= warmup:
                times[name].extend(float(t) for t in line.split())
    results = {}
    for name, proc in procs.items():
        if proc.request("save", args.round_timeout, expect="saved"):
            with np.load(proc.spec["outputs"]) as saved:
                outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
            results[name] = {"status": "ok", "median_s": statistics.median(times[name]),
                             "samples": len(times[name]), "outputs": outputs}
        else:
            results[name] = {"status": proc.status, "why": f"timing process: {proc.why}"}
        proc.close()
    return results


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--timer":
        sys.exit(f"usage: {sys.argv[0]} --timer SPEC.json (a timing process, started by TimingProcess)")
    sys.exit(_timer_main(sys.argv[2]))

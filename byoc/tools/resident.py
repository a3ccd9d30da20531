"""The resident memory an exported artifact costs a process: measured in a fresh one, as a user's would be.

:func:`measure_resident` starts ``python -m byoc.tools.resident`` on an exported library: the new process
imports byoc, reads its resident set, loads the library, runs it once on the given inputs, reads it again,
and reports what each vendor runtime says it holds then (:meth:`~byoc.pipeline.artifact.artifact.Artifact.memory`).
Counted is what the process gained (``VmRSS`` of ``/proc/self/status``, Linux), and its peak (``VmHWM``): the
library's code and weights, the runtimes' copies, workspaces and the run's outputs; not the interpreter and
the libraries imported before loading.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from byoc.errors import ByocError

#: What the figures count, for the report.
SOURCE = ("VmRSS a fresh process gains by byoc.load of the exported library, after importing byoc (Linux "
          "/proc/self/status)")


@dataclass(frozen=True)
class Resident:
    """Bytes a fresh process gained: by loading the library (``load_bytes``), by loading and one run
    (``run_bytes``), and at its peak (``peak_bytes``); ``runtimes``: partition -> [workspace, constants held,
    the model's constants, device bytes] as each vendor runtime reported them after the run."""

    load_bytes: int
    run_bytes: int
    peak_bytes: int
    runtimes: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"load_bytes": self.load_bytes, "run_bytes": self.run_bytes, "peak_bytes": self.peak_bytes,
                "runtimes": self.runtimes, "source": SOURCE}


def _status() -> dict:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def measure_resident(library: Path, inputs: Mapping[str, np.ndarray], threads: Optional[int] = None,
                     timeout: float = 900) -> Resident:
    """What loading ``library`` (an exported artifact for this machine) and running it once on ``inputs`` costs a
    fresh process (:class:`Resident`). Raises :class:`~byoc.errors.ByocError` with the process's last error line
    when it fails, and on a system without ``/proc/self/status``."""
    if not Path("/proc/self/status").exists():
        raise ByocError("measuring resident memory needs Linux's /proc/self/status")
    with tempfile.TemporaryDirectory(prefix="byoc-resident-") as folder:
        feed = Path(folder) / "inputs.npz"
        np.savez(feed, **{name: np.asarray(value) for name, value in inputs.items()})
        command = [sys.executable, "-m", "byoc.tools.resident", str(library), str(feed), str(threads or 0)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ByocError(f"measuring resident memory failed: {lines[-1] if lines else f'exit {done.returncode}'}")
    return Resident(**json.loads(done.stdout))


def _main(library: str, feed: str, threads: str) -> None:
    from byoc.pipeline.artifact import load

    with np.load(feed) as saved:
        inputs = {name: saved[name] for name in saved.files}
    with contextlib.suppress(OSError):  # the peak from here on (Linux 4.0 and later)
        Path("/proc/self/clear_refs").write_text("5")
    before = _status()["VmRSS"]
    artifact = load(library, threads=int(threads) or None)
    loaded = _status()["VmRSS"]
    artifact.run(inputs)
    after = _status()
    runtimes = {name: [m.workspace_bytes, m.constant_bytes, m.model_constant_bytes, m.device_bytes]
                for name, m in artifact.memory().items()}
    print(json.dumps({"load_bytes": loaded - before, "run_bytes": after["VmRSS"] - before,
                      "peak_bytes": after["VmHWM"] - before, "runtimes": runtimes}))


if __name__ == "__main__":
    _main(*sys.argv[1:4])

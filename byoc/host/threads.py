"""How many threads a compiled model uses: one number, from what the process may really use.

byoc runs a model on two kinds of threads: TVM's runtime pool (the host
kernels' parallel loops) and the vendor runtimes' (oneDNN's OpenMP team for
the dnnl vendor). Both are sized from one count, decided in this order:

1. ``threads=`` given to :func:`byoc.compile`, :func:`byoc.build` or
   :func:`byoc.load` (a whole number >= 1);
2. else the user's environment, for the pool it configures:
   ``TVM_NUM_THREADS`` (or ``OMP_NUM_THREADS``) for TVM's pool, which TVM
   reads itself, and ``OMP_NUM_THREADS`` for OpenMP, which libgomp reads;
   byoc then leaves that pool alone;
3. else :func:`available_cpus`: the CPUs this process may run on (its CPU
   affinity, e.g. from ``taskset`` or a container's cpuset), capped by the
   cgroup CPU quota (``docker --cpus``). Not the machine's core count, which
   the process may not be granted. TVM's pool keeps its own cap of one thread
   per physical core (half the logical CPUs on x86_64) below that.

How each side uses the count:

- TVM's pool is per calling thread (``thread_local`` in TVM); an artifact
  sizes the pool of each thread that runs it, before its first run there, with
  ``runtime.config_threadpool`` in the mode that lets workers run on any
  allowed CPU (not pinned one per core, which on a shared machine would keep a
  worker on a core another process holds).
- A vendor runtime that takes a count registers ``byoc.<name>.set_max_threads``;
  byoc calls it before the runtime creates modules (at build and load), on the
  thread that builds or loads. The dnnl runtime takes the count per calling
  thread and each module keeps the one it was created with, so two artifacts
  in one process keep their own counts; it gives each primitive one thread when
  its work is small and up to the count otherwise (see
  ``codegens/dnnl/runtime/common.h``).

Nothing is written to ``os.environ``.
"""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Optional

from byoc.errors import ByocError

#: the cgroup v2 file, and the v1 pair, that hold a CPU quota
_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
#: TVM's AffinityMode kSpecifyThreadShareAllCore: workers may run on any of the CPUs given
_SHARE_ALL_CORES = -3


def affinity() -> list[int]:
    """The CPUs this process may run on (its affinity mask), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def cgroup_cpus() -> Optional[float]:
    """The cgroup CPU quota in CPUs (quota / period), or None when there is none or it cannot be read."""
    try:
        quota, period = _CGROUP_V2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us, period_us = (int(path.read_text()) for path in _CGROUP_V1)
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def available_cpus() -> int:
    """How many CPUs this process may keep busy: its affinity, capped by the cgroup quota (rounded up), >= 1."""
    cpus = len(affinity())
    quota = cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


def check_threads(threads: Optional[int]) -> Optional[int]:
    """``threads`` validated: None (the default) or a whole number >= 1."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ByocError(f"threads={threads!r}: give a whole number of threads >= 1, or None for the default")
    return threads


def vendor_threads(threads: Optional[int]) -> int:
    """The count for vendor runtimes: ``threads``, else 0 (OpenMP's own) under OMP_NUM_THREADS, else the CPUs."""
    if threads is not None:
        return threads
    return 0 if os.environ.get("OMP_NUM_THREADS") else available_cpus()


def host_threads(threads: Optional[int], vendor_team: bool = False) -> Optional[int]:
    """The size of TVM's pool: ``threads``, else None (TVM's own) under TVM_NUM_THREADS/OMP_NUM_THREADS, else capped.

    ``vendor_team``: the artifact also runs a vendor runtime's own team (dnnl's OpenMP threads). ``threads`` is
    then capped as the default is, at one thread per physical core: each team's idle threads spin between its
    loops (TVM's workers yield for up to 300 000 rounds, libgomp's spin), so two full teams keep 2N - 1 threads
    runnable on N CPUs. A decoder's token with both teams at 2 threads on 2 CPUs took 0.56-1.29 ms, with the
    host's at 1 0.40-0.53 ms (qwen2 genai int4, AMD EPYC); BERT-base with its host glue, 222-231 ms either way.
    """
    if threads is not None:
        return min(threads, _tvm_default_pool()) if vendor_team else threads
    if os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        return None
    return min(_tvm_default_pool(), available_cpus())


def _tvm_default_pool() -> int:
    """The size TVM gives its pool by itself: the logical CPUs, halved on x86_64 (it assumes hyper-threading)."""
    logical = os.cpu_count() or 1
    return max(1, logical // 2) if platform.machine() in ("x86_64", "AMD64") else logical


def set_vendor_threads(threads: Optional[int]) -> int:
    """Hand the vendor count to every loaded runtime that takes one; returns the count."""
    import tvm_ffi

    count = vendor_threads(threads)
    for name in tvm_ffi.registry.list_global_func_names():
        if name.startswith("byoc.") and name.endswith(".set_max_threads"):
            tvm_ffi.get_global_func(name)(count)
    return count


def configure_host_pool(threads: Optional[int], vendor_team: bool = False) -> Optional[int]:
    """Size TVM's pool for the calling thread (before its first parallel loop); returns the size, or None.
    ``vendor_team``: as for :func:`host_threads`."""
    count = host_threads(threads, vendor_team)
    if count is None:
        return None
    import tvm_ffi

    # Configured whatever the size: it sets the calling thread's count, which TVM otherwise works out again at
    # every parallel loop from std::thread::hardware_concurrency(), a read of /sys/devices/system/cpu/online
    # (7.5 us in a container on AMD EPYC, where a decoder's token took 0.45 ms). TVM sets its count to the
    # number of CPUs listed and starts a worker for each but the caller: for one thread, one CPU is listed, so
    # no worker starts and parallel loops run on the caller. TVM also binds the caller to the CPUs listed: it
    # gets its own back.
    cpus = affinity()
    listed = cpus[:1] if count == 1 else cpus
    tvm_ffi.get_global_func("runtime.config_threadpool")(_SHARE_ALL_CORES, count, [str(cpu) for cpu in listed])
    if count == 1 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    return count

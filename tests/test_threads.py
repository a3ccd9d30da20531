"""Thread counts: from what the process may use, one ``threads=`` for host and vendors, no environment writes.

Behaviour only, never timings: which count reaches TVM's pool and the dnnl
runtime, how many threads do work during runs (CPU time per thread from
/proc), and what ``os.environ`` holds afterwards. Runs that load runtimes
happen in fresh subprocesses, so that each starts from the process defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from byoc.errors import ByocError
from byoc.host import threads

TWO_CPUS = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs in the affinity mask")

# A convolution big enough that the dnnl runtime runs it on a team (1.8 G multiply-adds per run).
BIG_CONV = """
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.standard_normal((64, 3, 3, 3)).astype(np.float32), "w1")
w2 = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05, "w2")
nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
         helper.make_node("Relu", ["a"], ["b"], name="relu"),
         helper.make_node("Conv", ["b", "w2"], ["y"], pads=[1, 1, 1, 1], name="conv2")]
graph = helper.make_graph(nodes, "big_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 224, 224])], [w1, w2])
MODEL = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
MODEL.ir_version = 8
X = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
"""

# Thirty mid-sized convolutions (7 M multiply-adds each): a team of two meets its second thread
# at thirty barriers per run.
CONV_CHAIN = """
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(0)
inits = [numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.06, f"w{i}") for i in range(30)]
nodes = [helper.make_node("Conv", ["x" if i == 0 else f"a{i - 1}", f"w{i}"], [f"a{i}" if i < 29 else "y"],
                          pads=[1, 1, 1, 1], name=f"conv{i}") for i in range(30)]
graph = helper.make_graph(nodes, "conv_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])], inits)
MODEL = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
MODEL.ir_version = 8
X = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
"""

# A decoder's token through int4 weights: ten MatMulNBits of one row, [512] -> [1408] -> [512] five times. The
# module is small (about 0.15 ms a run), but each GEMV streams its weight, and is worth a team on its own.
TOKEN_GEMVS = """
import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(0)
nodes, inits, x = [], [], "x"
for i in range(10):
    k, n = (512, 1408) if i % 2 == 0 else (1408, 512)
    inits += [numpy_helper.from_array(rng.integers(0, 256, (n, k // 32, 16), dtype=np.uint8), f"b{i}"),
              numpy_helper.from_array((rng.random(n * k // 32) * 0.01 + 0.01).astype(np.float32), f"s{i}")]
    nodes.append(helper.make_node("MatMulNBits", [x, f"b{i}", f"s{i}"], [f"m{i}"], domain="com.microsoft", K=k, N=n,
                                  bits=4, block_size=32, accuracy_level=4, name=f"gemv{i}"))
    x = f"m{i}"
graph = helper.make_graph(nodes, "token_gemvs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 512])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 1, 512])], inits)
MODEL = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
MODEL.ir_version = 8
X = rng.standard_normal((1, 1, 512)).astype(np.float32)
"""


def _run(code: str, unset: tuple = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in unset}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_available_cpus_follow_the_affinity_mask():
    first = min(os.sched_getaffinity(0))
    got = _run(f"""
        import json, os
        os.sched_setaffinity(0, {{{first}}})  # as `taskset -c {first}` would
        from byoc.host.threads import available_cpus
        print(json.dumps(available_cpus()))
    """)
    assert got == 1


@pytest.mark.parametrize("cpu_max, expected", [("150000 100000\n", 1.5), ("max 100000\n", None), ("junk", None)])
def test_cgroup_quota_is_read_from_cpu_max(tmp_path, monkeypatch, cpu_max, expected):
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    monkeypatch.setattr(threads, "_CGROUP_V2", path)
    monkeypatch.setattr(threads, "_CGROUP_V1", (tmp_path / "absent", tmp_path / "absent"))
    assert threads.cgroup_cpus() == expected
    if expected is not None:  # a quota of 1.5 CPUs lets 2 threads run, never more than the affinity allows
        assert threads.available_cpus() == min(2, len(threads.affinity()))


def test_cgroup_v1_quota(tmp_path, monkeypatch):
    quota, period = tmp_path / "quota", tmp_path / "period"
    quota.write_text("100000\n")
    period.write_text("100000\n")
    monkeypatch.setattr(threads, "_CGROUP_V2", tmp_path / "absent")
    monkeypatch.setattr(threads, "_CGROUP_V1", (quota, period))
    assert threads.cgroup_cpus() == 1.0 and threads.available_cpus() == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_threads_must_be_a_whole_number_of_at_least_one(bad):
    import byoc
    import byoc.examples

    with pytest.raises(ByocError, match="threads="):
        byoc.build(byoc.examples.small_cnn(), ["c_source"], threads=bad)


def test_the_user_environment_wins_over_the_default(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    assert threads.vendor_threads(None) == threads.available_cpus()
    assert threads.host_threads(None) is not None
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.vendor_threads(None) == 0  # 0: OpenMP's own default, which reads OMP_NUM_THREADS
    assert threads.host_threads(None) is None  # TVM reads it itself
    assert threads.vendor_threads(2) == 2 and threads.host_threads(2) == 2  # an explicit threads= wins
    # ... but for the host's pool beside a vendor's own team, which keeps TVM's cap of one per physical core
    assert threads.host_threads(64, vendor_team=True) == min(64, threads._tvm_default_pool())


@pytest.mark.parametrize("count", [1, 2])
def test_threads_reach_the_host_pool_and_the_dnnl_runtime(count):
    if count > len(os.sched_getaffinity(0)):
        pytest.skip("needs 2 CPUs in the affinity mask")
    got = _run(f"""
        import json, numpy as np, tvm_ffi, byoc, byoc.examples
        artifact = byoc.compile(byoc.examples.small_cnn(), vendors=["dnnl"], threads={count})
        dnnl = tvm_ffi.get_global_func("byoc.dnnl.max_threads")()
        artifact.run([np.zeros(artifact.inputs[0].shape, np.float32)])
        host = tvm_ffi.get_global_func("runtime.NumThreads")()
        print(json.dumps([dnnl, host]))
    """)
    assert got == [count, min(count, threads._tvm_default_pool())]  # the host's pool beside dnnl's team: capped


@TWO_CPUS
def test_threads_size_the_host_pool_whole_without_a_vendor_team():
    got = _run("""
        import json, numpy as np, tvm_ffi, byoc, byoc.examples
        artifact = byoc.compile(byoc.examples.small_cnn(), vendors=[], threads=2)
        artifact.run([np.zeros(artifact.inputs[0].shape, np.float32)])
        print(json.dumps(tvm_ffi.get_global_func("runtime.NumThreads")()))
    """)
    assert got == 2


def test_load_takes_threads_too(tmp_path):
    got = _run(f"""
        import json, numpy as np, tvm_ffi, byoc, byoc.examples
        byoc.compile(byoc.examples.small_cnn(), vendors=["dnnl"]).export({str(tmp_path / 'm.so')!r})
        artifact = byoc.load({str(tmp_path / 'm.so')!r}, threads=1)
        artifact.run([np.zeros(artifact.inputs[0].shape, np.float32)])
        print(json.dumps([tvm_ffi.get_global_func("byoc.dnnl.max_threads")(),
                          tvm_ffi.get_global_func("runtime.NumThreads")()]))
    """)
    assert got == [1, 1]


def test_each_artifact_keeps_its_own_thread_count_in_one_process(tmp_path):
    """threads= belongs to each artifact: two artifacts built at once on two Python threads with 1 and 2 threads,
    then two loaded one after the other with 2 and 1, each have dnnl modules made for their own count (the
    runtime takes the count per calling thread, and each module keeps the one it was created with)."""
    got = _run(f"""
        import json, threading, numpy as np, byoc, byoc.examples

        def dnnl_threads(module):
            own = [int(module["get_max_threads"]())] if module.kind == "byoc_dnnl" else []
            return own + [n for m in module.imports for n in dnnl_threads(m)]

        plan = byoc.partition(byoc.examples.small_cnn(), vendors=["dnnl"])
        start, built = threading.Barrier(2), {{}}
        def build(count):
            start.wait()
            built[count] = byoc.build(plan, threads=count)
        workers = [threading.Thread(target=build, args=(n,)) for n in (1, 2)]
        for w in workers: w.start()
        for w in workers: w.join()
        built[1].export({str(tmp_path / 'm.so')!r})
        loaded = {{n: byoc.load({str(tmp_path / 'm.so')!r}, threads=n) for n in (2, 1)}}
        x = np.zeros(built[1].inputs[0].shape, np.float32)
        for artifact in (*built.values(), *loaded.values()):
            artifact.run([x])
        print(json.dumps({{"built": {{n: dnnl_threads(a.executable.mod) for n, a in built.items()}},
                          "loaded": {{n: dnnl_threads(a._loaded_library()) for n, a in loaded.items()}}}}))
    """)
    assert got == {"built": {"1": [1], "2": [2]}, "loaded": {"2": [2], "1": [1]}}, got


def _working_threads(count: int, model: str = BIG_CONV, runs: int = 15) -> int:
    """How many threads of a fresh process gain CPU time while ``model`` (a big dnnl convolution) runs ``runs``
    times with ``threads=count``."""
    return _run(model + f"""
import json, os, byoc

def cpu_ticks():
    ticks = {{}}
    for tid in os.listdir("/proc/self/task"):
        fields = open(f"/proc/self/task/{{tid}}/stat").read().rsplit(")", 1)[1].split()
        ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks

artifact = byoc.compile(MODEL, vendors=["dnnl"], threads={count})
artifact.run([X])
before = cpu_ticks()
for _ in range({runs}):
    artifact.run([X])
after = cpu_ticks()
print(json.dumps(sum(1 for tid, t in after.items() if t - before.get(tid, 0) >= 5)))
""")


def _team_and_serial_runs(busy_core: bool, contention: str = "on", runs: int = 40, model: str = CONV_CHAIN,
                          bound: bool = True) -> list:
    """``byoc.dnnl.run_counts()`` over ``runs`` runs of ``model`` with ``threads=2`` (after one warm-up run).

    ``busy_core``: a busy-looping process (in a session of its own, as another
    program would be) is pinned to one of the CPUs, so a team of two waits for
    its second thread at every primitive while one thread runs undisturbed.
    ``bound``: False sets OMP_PROC_BIND=false, as a user who keeps OpenMP's
    threads unbound would.
    """
    return _run(model + f"""
import json, os, subprocess, sys
if not {bound}:
    os.environ["OMP_PROC_BIND"] = "false"
if {busy_core}:
    loop = "import os, time; os.sched_setaffinity(0, {{max(os.sched_getaffinity(0))}}); end = time.time() + 120\\n" \\
           "while time.time() < end: pass"
    busy = subprocess.Popen([sys.executable, "-c", loop], start_new_session=True)
    # The model runs at a lower priority than the loop, as a batch job beside a service would: the
    # scheduler then makes its team's second thread wait for the loop's core, and does not let it
    # preempt the loop on every wake-up (on an EEVDF kernel with equal priorities it often did, and
    # the team ran about as fast as idle).
    os.nice(10)
os.environ["BYOC_DNNL_CONTENTION"] = {contention!r}
import byoc, tvm_ffi

artifact = byoc.compile(MODEL, vendors=["dnnl"], threads=2)
artifact.run([X])
counts = tvm_ffi.get_global_func("byoc.dnnl.run_counts")
before = list(counts())
for _ in range({runs}):
    artifact.run([X])
after = list(counts())
if {busy_core}:
    busy.kill()
print(json.dumps([a - b for a, b in zip(after, before)]))
""")


@TWO_CPUS
def test_threads_1_runs_single_threaded_and_threads_2_does_not():
    assert _working_threads(1) == 1
    assert _working_threads(2) >= 2  # the same check sees a team when there is one


@TWO_CPUS
def test_a_small_module_of_token_gemvs_runs_them_on_the_team():
    # its total work is below what earns a team of oneDNN primitives, but each GEMV streams its weight
    # (Builder::StreamsWeights): 4000 runs of about 0.15 ms give each of two threads well over 5 ticks
    assert _working_threads(2, TOKEN_GEMVS, runs=4000) >= 2


def test_building_and_loading_dnnl_leave_the_environment_alone(tmp_path):
    got = _run(f"""
        import json, os, byoc, byoc.examples
        before = dict(os.environ)
        byoc.compile(byoc.examples.small_cnn(), vendors=["dnnl"]).export({str(tmp_path / 'm.so')!r})
        byoc.load({str(tmp_path / 'm.so')!r})
        print(json.dumps([k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)]))
    """, unset=("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"))  # so that byoc's own spin setting applies
    assert got == []


def _binding(user_setting: str | None) -> dict:
    """Which CPUs the threads of a fresh process may use after runs of BIG_CONV on a team of two, from the
    main thread and from another thread, with ``OMP_PROC_BIND=user_setting`` (None: byoc's default)."""
    return _run(BIG_CONV + f"""
import json, os, threading
if {user_setting is not None}:
    os.environ["OMP_PROC_BIND"] = {user_setting!r}
import byoc

def cpus_of_threads():
    lists = []
    for tid in os.listdir("/proc/self/task"):
        try:
            status = open(f"/proc/self/task/{{tid}}/status").read()
        except FileNotFoundError:  # a thread that ended since the listing (a finished caller's OpenMP team)
            continue
        lists.append(status.split("Cpus_allowed_list:")[1].split()[0])
    return lists

before = sorted(os.sched_getaffinity(0))
artifact = byoc.compile(MODEL, vendors=["dnnl"], threads=2)
artifact.run([X])
seen = {{}}
def other():
    mine = sorted(os.sched_getaffinity(0))
    artifact.run([X])
    seen["other"] = mine == sorted(os.sched_getaffinity(0))
worker = threading.Thread(target=other)
worker.start()
worker.join()
later = []
started_after = threading.Thread(target=lambda: later.append(sorted(os.sched_getaffinity(0))))
started_after.start()
started_after.join()
print(json.dumps({{"main": before == sorted(os.sched_getaffinity(0)), "other": seen["other"],
                  "started_after": later[0] == before,
                  "single_cpu_threads": sum(1 for cpus in cpus_of_threads() if cpus.isdigit())}}))
""", unset=("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"))


@TWO_CPUS
def test_the_team_is_bound_to_cpus_and_its_callers_keep_theirs():
    # libgomp binds the team's threads (byoc's default OMP_PROC_BIND=true), and also binds the thread that
    # loads it and any thread that leads a team: each gets its CPUs back, so threads the user starts later
    # are not confined to one CPU.
    got = _binding(None)
    assert got["main"] and got["other"] and got["started_after"], got
    assert got["single_cpu_threads"] >= 1, got


@TWO_CPUS
def test_a_users_openmp_binding_wins():
    got = _binding("false")
    assert got == {"main": True, "other": True, "started_after": True, "single_cpu_threads": 0}, got


def _schedule(team_wall_us: float, team_cpu_us: float, serial_us: float, calls: int) -> list:
    pytest.importorskip("byoc.codegens.dnnl")
    import byoc.examples
    import tvm_ffi

    byoc.compile(byoc.examples.small_cnn(), vendors=["dnnl"])  # loads the dnnl runtime
    return list(tvm_ffi.get_global_func("byoc.dnnl.program_schedule")(team_wall_us, team_cpu_us, serial_us, calls))


def test_the_chooser_sends_calls_to_the_serial_program_while_the_team_waits():
    """The chooser's schedule (1: a serial call), from fixed timings: a team run whose caller was on a CPU for
    under 80% of it is slow; two slow runs send one call to the serial program (to time it), then two team
    calls try the team again, and while it stays slower the serial program gets 8, 16, 32 ... calls."""
    slow = _schedule(team_wall_us=2000, team_cpu_us=900, serial_us=1000, calls=40)
    assert slow == [0, 0, 1, 0, 0] + [1] * 8 + [0, 0] + [1] * 16 + [0, 0] + [1] * 7
    # A team that spins at its barriers (its caller on a CPU all along) is never judged slow, whatever
    # its wall time, until a serial run has been timed.
    assert _schedule(team_wall_us=2000, team_cpu_us=1900, serial_us=1000, calls=40) == [0] * 40
    # A team faster than the serial run keeps every call after its trial.
    assert _schedule(team_wall_us=900, team_cpu_us=400, serial_us=1000, calls=12) == [0, 0, 1] + [0] * 9
    # Runs too short to have waited a time slice are never slow: after the first, their CPU time is not read.
    assert _schedule(team_wall_us=90, team_cpu_us=10, serial_us=1000, calls=12) == [0] * 12


@TWO_CPUS
def test_a_team_that_waits_for_its_core_gives_way_to_the_serial_program():
    # Beside a busy loop that holds one CPU, an unbound team of two (the user's OMP_PROC_BIND=false) waits at
    # its barriers for the loop's core, so the runtime sends calls to the program compiled for one thread (the
    # schedule is the test above). How long a team run waits is up to the kernel's scheduler: over six
    # processes on a 2-core AVX-512 VM, 13-33 of the 40 calls went serial (idle, at most 3 of 15: the next
    # test). Measured there with the switch off: 256 ms a run on the team, 2.3 ms serial. Bound to CPUs
    # (byoc's default), the team's thread gets its share of the loop's core at once: 1.3 ms, as idle.
    team, serial = _team_and_serial_runs(busy_core=True, bound=False)
    assert serial >= 4 and team + serial == 40, (team, serial)


def test_an_idle_team_keeps_its_calls_and_off_keeps_them_always():
    # On an idle machine the big convolutions' team is about twice as fast as one thread: its
    # caller is on a CPU all run long, and nothing sends calls to the serial program.
    team, serial = _team_and_serial_runs(busy_core=False, runs=15, model=BIG_CONV)
    assert serial <= 3 and team + serial == 15, (team, serial)  # a stray slow pair may cost a trial
    assert _team_and_serial_runs(busy_core=True, contention="off") == [40, 0]


@pytest.mark.parametrize("setting", ["BYOC_DNNL_CONTENTION", "BYOC_DNNL_WINOGRAD"])
def test_a_bad_dnnl_setting_is_named(monkeypatch, setting):
    pytest.importorskip("byoc.codegens.dnnl")
    import numpy as np

    import byoc
    import byoc.examples

    monkeypatch.setenv(setting, "maybe")
    with pytest.raises(ByocError, match=f"{setting}=maybe is neither on nor off"):
        byoc.compile(byoc.examples.small_cnn(), vendors=["dnnl"]).run([np.zeros((1, 3, 16, 16), np.float32)])


@TWO_CPUS
def test_threads_1_runs_host_loops_on_the_caller_and_leaves_its_cpus_alone():
    """threads=1 sets TVM's count for the calling thread: a parallel host loop runs on the caller, no worker is
    started, and no loop reads /sys/devices/system/cpu/online (TVM's count when none is set, asked at every
    parallel loop: a read syscall each, which /proc/self/io counts). The caller gets its CPUs back."""
    got = _run("""
        import json, os, threading
        import numpy as np, onnx
        from onnx import helper, TensorProto
        import byoc
        x = np.random.default_rng(0).standard_normal((1, 64, 224, 224)).astype(np.float32)
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
        artifact = byoc.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), vendors=[],
                                threads=1)
        def reads():
            with open("/proc/self/io") as io:
                return int(next(line for line in io if line.startswith("syscr:")).split()[1])
        cpus, threads = sorted(os.sched_getaffinity(0)), len(os.listdir("/proc/self/task"))
        y = artifact.run([x])[0]
        before = reads()
        for _ in range(100):
            artifact.run([x])
        print(json.dumps({"same": bool(np.array_equal(y, np.maximum(x, 0))), "reads": reads() - before,
                          "cpus_kept": sorted(os.sched_getaffinity(0)) == cpus,
                          "new_threads": len(os.listdir("/proc/self/task")) - threads}))
    """)
    assert got["reads"] < 20, got  # a read per run would be 100
    assert {k: got[k] for k in ("same", "cpus_kept", "new_threads")} == {"same": True, "cpus_kept": True,
                                                                        "new_threads": 0}

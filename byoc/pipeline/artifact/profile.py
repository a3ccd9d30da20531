"""Where a run's time goes: :meth:`byoc.Artifact.profile` and the :class:`Profile` it returns.

A profile runs the model ``runs`` times the ordinary way (the wall time a caller sees), then ``runs`` times
on a second Relax VM of the same library with TVM's instrument hook, which the VM calls before and after
every call instruction: each offloaded partition, each host function and each VM builtin gets its time per
run. Runtimes that time their own steps (dnnl: ``get_step_times``, one entry per oneDNN primitive or byoc
kernel, with the implementation oneDNN picked) are asked to during the hooked runs, and their steps are
nested under their partition. What no call holds (the VM's dispatch, the inputs' and outputs' copies and
the hook itself) is reported as ``outside_ms``, so the parts add up to the hooked runs' time.

The ordinary ``Artifact.run`` pays nothing: the hook is on a VM of its own, and step timing is one
process-wide flag the runtime reads once per call.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Union

#: version of :meth:`Profile.to_json`'s layout
PROFILE_SCHEMA = 1
BUILTIN = "vm.builtin."


@dataclass
class StepTime:
    """One step of a vendor runtime's partition: what ran it, and its time per run."""

    implementation: str
    ms: float


@dataclass
class CallTime:
    """A partition or a host function: its calls per run and its time per run (median, minimum over runs)."""

    name: str
    # "<vendor>" for a partition, "host" for a host function, "vm" for the VM's builtins, "dispatch" for the
    # choice of a static-shape partition's specialization by the call's sizes
    where: str
    calls: float
    median_ms: float
    min_ms: float
    share: float  # of the hooked runs' median time
    onnx_nodes: list = field(default_factory=list)
    steps: list = field(default_factory=list)


@dataclass
class Profile:
    """Where the time of ``runs`` runs of an artifact went. ``str()`` is a table, ``to_json()`` a dict of schema
    :data:`PROFILE_SCHEMA`, ``to_chrome_trace(path)`` writes the last hooked run in the Trace Event Format."""

    runs: int
    run_median_ms: float  # ordinary runs, as Artifact.run takes them
    run_min_ms: float
    hooked_median_ms: float  # the instrumented runs the parts below come from
    calls: list  # CallTime, partitions first, then by time
    outside_ms: float  # per hooked run, in no call: VM dispatch, input and output copies, the hook
    trace: list = field(default_factory=list, repr=False)  # the last hooked run: (name, where, start_s, end_s)

    @property
    def partitions(self) -> list:
        return [c for c in self.calls if c.where not in ("host", "vm", "dispatch")]

    def to_json(self) -> dict:
        return {"schema": PROFILE_SCHEMA, "runs": self.runs, "run_median_ms": self.run_median_ms,
                "run_min_ms": self.run_min_ms, "hooked_median_ms": self.hooked_median_ms,
                "outside_ms": self.outside_ms, "calls": [asdict(c) for c in self.calls]}

    def to_chrome_trace(self, path: Union[str, Path]) -> Path:
        """The last hooked run as Trace Event JSON (complete events, microseconds), which Perfetto and
        chrome://tracing open; a partition's event carries its vendor, ONNX nodes and its steps' times."""
        by_name = {c.name: c for c in self.calls}
        start = self.trace[0][2] if self.trace else 0.0
        events = [{"name": "run", "ph": "X", "pid": 1, "tid": 1, "ts": 0.0,
                   "dur": (self.trace[-1][3] - start) * 1e6 if self.trace else 0.0, "cat": "run"}]
        for name, where, t0, t1 in self.trace:
            call = by_name.get(name)
            args = {"where": where}
            if call is not None and call.onnx_nodes:
                args["onnx_nodes"] = call.onnx_nodes
            if call is not None and call.steps:
                args["steps_ms_per_run"] = [[s.implementation, round(s.ms, 4)] for s in call.steps]
            events.append({"name": name, "ph": "X", "pid": 1, "tid": 1, "ts": (t0 - start) * 1e6,
                           "dur": (t1 - t0) * 1e6, "cat": where, "args": args})
        path = Path(path)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
        return path

    def __str__(self) -> str:
        lines = [f"{self.runs} runs: {self.run_median_ms:.3f} ms median ({self.run_min_ms:.3f} min); "
                 f"instrumented {self.hooked_median_ms:.3f} ms, of which:",
                 f"{'call':<28} {'where':<12} {'calls':>6} {'median ms':>10} {'min ms':>9} {'share':>6}"]
        for c in self.calls:
            lines.append(f"{c.name[:28]:<28} {c.where:<12} {c.calls:>6.3g} {c.median_ms:>10.3f} {c.min_ms:>9.3f} "
                         f"{c.share:>6.1%}")
            for s in c.steps:
                lines.append(f"    {s.implementation[:50]:<50} {s.ms:>10.3f}")
        lines.append(f"{'outside any call':<28} {'vm':<12} {'':>6} {self.outside_ms:>10.3f} {'':>9} "
                     f"{self.outside_ms / self.hooked_median_ms if self.hooked_median_ms else 0:>6.1%}")
        return "\n".join(lines)


def profile_artifact(artifact, inputs, runs: int, warmup: int) -> Profile:
    """The work of :meth:`byoc.Artifact.profile` (see there)."""
    arrays = artifact.check_inputs(inputs)  # the typed errors of run()
    for _ in range(warmup):
        artifact.run(arrays)
    plain = []
    for _ in range(runs):
        t = time.perf_counter()
        artifact.run(arrays)
        plain.append(time.perf_counter() - t)

    library = artifact._loaded_library()  # noqa: SLF001 - the profile is the artifact's own measurement
    step_modules = runtime_modules(library, "get_step_times")
    before: dict = {}
    _set_step_timing(step_modules, True)
    try:
        calls = time_calls(artifact, arrays, runs,
                           on_first=lambda: before.update({name: _step_times(m) for name, m in step_modules.items()}))
    finally:
        _set_step_timing(step_modules, False)
    steps = {name: _step_delta(m, before[name], runs) for name, m in step_modules.items()}
    return _assemble(artifact, runs, plain, calls.hooked, calls.per_run, steps, calls.trace)


@dataclass
class HookedRuns:
    """What :func:`time_calls` saw: per call name, (calls, seconds) per run; each run's time; the last run's
    calls as (name, start, end); and each call's arguments at its first call, when asked to keep them."""

    per_run: dict
    hooked: list
    trace: list
    arguments: dict


def time_calls(artifact, arrays, runs: int, keep_arguments=(), on_first=None,
               budget_s: Optional[float] = None, stop=None) -> HookedRuns:
    """Run ``artifact`` on ``arrays`` once, then ``runs`` times timed, on a second VM with TVM's instrument
    hook: the VM calls it before and after every call instruction (partitions, host functions, builtins).

    ``keep_arguments`` maps call names to how many leading arguments to copy at the first run (a partition's
    inputs; its outputs follow them); an argument that is no tensor (a shape) keeps nothing for that call.
    ``on_first`` is called after the first run (which pays one-time costs: oneDNN's primitives, LLVM's JIT),
    before the timed ones. With ``budget_s``, the timed runs stop after 3 once they have taken that long (a
    slow model needs fewer runs to be steady); ``stop(per_run)``, asked after the first run and after each
    timed run, ends them when it answers True (a candidate that is clearly slower needs no exact time). Asked
    after the first run, it sees times that may hold one-time costs: a stop there must only ever keep the
    choice that needs no exact time.
    """
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(artifact._loaded_library(), tvm.cpu())  # noqa: SLF001 - as above
    per_run: dict = {}
    trace: list = []
    started: list = []
    kept: dict = {}
    keep = dict(keep_arguments)

    def hook(_func, name, before, _ret, *args):
        if before:
            name = str(name)
            if name in keep and name not in kept:
                tensors = args[:keep[name]]
                kept[name] = [t.numpy() for t in tensors] if all(hasattr(t, "numpy") for t in tensors) else None
            started.append([time.perf_counter(), 0.0])
        else:
            t1 = time.perf_counter()
            t0, inner = started.pop()
            if started:  # a call inside a function the VM calls (a static-shape partition's dispatcher)
                started[-1][1] += t1 - t0
            trace.append((str(name), t0, t1, t1 - t0 - inner))

    def timed_run() -> float:
        trace.clear()
        t = time.perf_counter()
        vm["main"](*artifact.tvm_inputs(arrays))
        return time.perf_counter() - t

    def record() -> None:
        totals: dict = {}
        for name, _, _, own in trace:  # each call's own time: a dispatcher's does not count the call it makes
            count, seconds = totals.get(name, (0, 0.0))
            totals[name] = (count + 1, seconds + own)
        for name, (count, seconds) in totals.items():
            per_run.setdefault(name, []).append((count, seconds))

    vm.set_instrument(hook)
    first = timed_run()  # this VM's first call
    arguments = {n: a for n, a in kept.items() if a is not None}
    if on_first is not None:
        on_first()
    keep.clear()
    if stop is not None:
        record()
        if stop(per_run):  # slower even counting one-time costs in: the first run is the answer
            return HookedRuns(per_run, [first], list(trace), arguments)
        per_run.clear()
    hooked: list = []
    for run in range(runs):
        if budget_s is not None and run >= 3 and sum(hooked) >= budget_s:
            break
        hooked.append(timed_run())
        record()
        if stop is not None and stop(per_run):
            break
    return HookedRuns(per_run, hooked, trace, arguments)


def seconds_per_run(samples: list, runs: int) -> list:
    """A call's seconds in each of ``runs`` runs, from its ``(calls, seconds)`` samples in
    :attr:`HookedRuns.per_run`: 0 for a run it was not called in."""
    return [seconds for _, seconds in samples] + [0.0] * (runs - len(samples))


def _assemble(artifact, runs, plain, hooked, per_run, steps, trace) -> Profile:
    vendors = dict(artifact.metadata.get("partitions", []))
    for name, specializations in artifact.metadata.get("specializations", {}).items():
        vendors.update({symbol: vendors.get(name, "host") for _, symbol, _ in specializations})
        vendors[name] = "dispatch"  # the dispatcher by shape; the specialization it calls is timed on its own
    nodes = artifact.metadata.get("partition_nodes", {})
    if artifact.plan is not None:
        nodes = {p.name: list(p.onnx_nodes) for p in artifact.plan.partitions}
    nodes = {**artifact.host_nodes(), **nodes}
    hooked_median = statistics.median(hooked) * 1e3

    def where(name: str) -> str:
        return vendors.get(name) or ("vm" if name.startswith(BUILTIN) else "host")

    calls = []
    for name, samples in per_run.items():
        times = seconds_per_run(samples, runs)
        median = statistics.median(times) * 1e3
        calls.append(CallTime(name, where(name), sum(c for c, _ in samples) / runs, median, min(times) * 1e3,
                              median / hooked_median if hooked_median else 0.0, nodes.get(name, []),
                              steps.get(name, [])))
    calls.sort(key=lambda c: (c.where in ("host", "vm", "dispatch"), -c.median_ms))
    outside = hooked_median - sum(c.median_ms for c in calls)
    last = [(name, where(name), t0, t1) for name, t0, t1, _ in trace]
    return Profile(runs, statistics.median(plain) * 1e3, min(plain) * 1e3, hooked_median, calls,
                   max(outside, 0.0), last)


# -- vendor runtimes that report on their own steps -------------------------------------------------------
def runtime_modules(library, function: str) -> dict:
    """Partition symbol -> its runtime module, for the modules of a loaded ``library`` (imports of imports
    included) that answer ``function`` (``get_implementations``, ``get_step_times``)."""
    found = {}

    def visit(module):
        for imported in module.imports:
            if imported.implements_function(function):
                found[str(imported.get_function("get_symbol")())] = imported
            visit(imported)

    visit(getattr(library, "mod", library))
    return found


def _set_step_timing(modules: dict, on: bool) -> None:
    """The dnnl runtime's switch is process-wide: runs of other artifacts in other threads meanwhile are timed
    too, which changes nothing but their own step counters."""
    if modules:
        import tvm_ffi

        switch = tvm_ffi.get_global_func("byoc.dnnl.set_step_timing", allow_missing=True)
        if switch is not None:
            switch(on)


def _step_times(module) -> list:
    return [(int(calls), int(ns)) for calls, ns in module.get_function("get_step_times")()]


def _step_delta(module, before: list, runs: int) -> list:
    after = _step_times(module)
    names = [str(s) for s in module.get_function("get_implementations")()]
    if len(before) != len(after):  # another shape's program: nothing comparable
        before = [(0, 0)] * len(after)
    return [StepTime(name, (ns1 - ns0) / runs / 1e6) for name, (_, ns0), (_, ns1) in zip(names, before, after)]

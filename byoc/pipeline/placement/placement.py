"""Placement by measured cost: ``byoc.compile(..., placement="measured")``.

The rules say what a vendor *can* take; whether it pays is measured here, as onnx-mlir's performance model
and TVM's Collage did by estimate and by search. Each partition of the rule-based plan is timed

* on its vendor: its calls in a run of the rule-based artifact on the sample inputs, or the vendor's cost
  hook (:meth:`byoc.vendor.Codegen.estimate_cost`) for hardware this machine does not have;
* on the host: first a lower bound, the time of the partition's heaviest distinct ops built for the host
  alone (:mod:`byoc.pipeline.placement.host_bound`: one small build for all partitions). When every partition's
  bound already shows its vendor faster by ``min_speedup``, that settles it; otherwise, in one host-only
  build of the whole model, run on the same inputs, the time of the host functions that compute the
  partition's ops (:meth:`byoc.Artifact.host_calls`; a fused function that also computes ops outside the
  partition counts by its share of bindings);
* on every other vendor of the build that takes all of its ops: the partition's ops alone (its function
  with the composites inlined) built for that vendor and run on the tensors that reached the partition.

A partition stays on its vendor only when every other place is slower by at least ``min_speedup`` (the
vendor must win by that factor, as onnx-mlir's ``minFactor``); otherwise it goes to the fastest other
place. Its ops are then demoted from the vendors that lost, with the times as the reason, and the model is
cut again (:func:`byoc.pipeline.partitioning.partitioner.cut`); the regions that cut makes are built as they come, not
measured again. Every decision is kept in the plan (:attr:`PartitionPlan.placement`) and in the artifact's
metadata, so a loaded artifact reports it. Builds: the rule-based one, the heaviest ops' (when every
partition has a convolution or matmul), the whole model's on the host (when their bounds do not settle it),
one per other vendor and partition, and the final one when a partition moved (when none did, the
rule-based build is relinked recording the decisions: :meth:`byoc.Artifact.relinked`); a place that is
clearly slower (by twice ``min_speedup``) is not timed past the run that shows it.

Sizes are those of the sample inputs: the user's, or seeded random ones of the declared shapes (a symbolic
dim then needs a size). Boundary tensors are real ones, captured from the rule-based run, so an index tensor
crossing a boundary stays in range.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import warnings
from collections import Counter
from typing import Callable, Mapping, Optional

from byoc.errors import ByocError, InputShapeError, TargetError
from byoc.pipeline.frontend.importer import unique_binding_names
from byoc.pipeline.frontend.onnx_model import ImportedModel, TensorSpec
from byoc.pipeline.partitioning.partitioner import Partition, PartitionPlan
from byoc.pipeline.partitioning.specializations import host_function
from byoc.pipeline.placement.host_bound import host_lower_bounds
from byoc.pipeline.artifact.placement_record import PlacedPartition, Placement, quote_times
from byoc.pipeline.artifact.profile import BUILTIN, seconds_per_run, time_calls
from byoc.pipeline.placement.samples import random_inputs
from byoc.vendor import cost_estimator
from byoc.vendor.graph import UnsupportedConstruct

#: ``placement=`` values: by the vendors' rules alone (the default), or by measured cost
PLACEMENTS = ("rules", "measured")
#: how much faster than every other place a vendor must be to keep a partition
DEFAULT_MIN_SPEEDUP = 1.1
HOST = "host"
#: seconds of timed runs after which a candidate's timing stops (after at least 3 runs)
_BUDGET_S = 0.5
#: a place slower than the vendor by this many times min_speedup is timed no further
_CLEAR_LOSS = 2.0

#: Build = build(plan or model, vendors or None, relinkable=False) -> Artifact, with the user's build options
#: applied (``relinkable``: for a plan, keep the build's parts for :meth:`byoc.Artifact.relinked`)
Build = Callable[..., object]

_log = logging.getLogger(__name__)


def check_placement(placement: str, min_speedup: float) -> None:
    if placement not in PLACEMENTS:
        raise ByocError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if not min_speedup >= 1.0:
        raise ByocError(f"min_speedup must be at least 1.0 (a vendor no faster than the host), got {min_speedup}")


def sample_inputs(artifact) -> dict:
    """Seeded inputs of ``artifact``'s declared shapes (:func:`byoc.pipeline.placement.samples.random_inputs`); a
    symbolic dim has no size to time at, so it is an error naming what to give instead."""
    for spec in artifact.inputs:
        symbolic = [str(d) for d in spec.shape if not isinstance(d, int)]
        if symbolic:
            raise InputShapeError(
                f"measured placement times the model at one size, and input {spec.name!r} has symbolic dims "
                f"{', '.join(symbolic)}: give sample inputs of the size it will run at (sample_inputs= / "
                f"--inputs), or fix the dims (dims= / --dim NAME=SIZE)", spec.name)
    return random_inputs(artifact.inputs)


def place_by_measurement(plan: PartitionPlan, build: Build, inputs=None, *, min_speedup: float = DEFAULT_MIN_SPEEDUP,
                         runs: int = 5):
    """The artifact of ``plan`` with each partition placed where it runs fastest (see the module docstring).

    ``build(plan_or_model, vendors)`` builds with the user's options; ``inputs`` are the sample inputs (None:
    :func:`sample_inputs`). Returns the artifact; ``artifact.plan.placement`` holds the decisions.
    """
    if not plan.target.is_host:
        raise TargetError(
            f"measured placement times every candidate on this machine, which cannot run {plan.target.name} "
            f"code: build for {plan.target.name} with placement='rules'")
    _log.info("measured placement: building and timing %d partition(s) as the rules place them",
              len(plan.partitions))
    rules_artifact = build(plan, None, relinkable=True)
    plan = rules_artifact.plan  # a vendor whose codegen failed has given its partitions back already
    if not plan.partitions:
        plan.placement = Placement([], 0, min_speedup)
        return rules_artifact
    arrays = rules_artifact.check_inputs(sample_inputs(rules_artifact) if inputs is None else inputs)
    inputs_of = {p.name: len(plan.mod[p.global_var].params) for p in plan.partitions}
    vendor_times, arguments = _call_times(rules_artifact, arrays, runs, inputs_of)
    # a static-shape partition is timed in the specialization its dispatcher called
    vendor_times = {p.name: _vendor_time(plan, p, sum(vendor_times.get(name, 0.0) for name in
                                                      [p.name, *(s.symbol for s in p.specializations)]))
                    for p in plan.partitions}

    def clearly_slower(host_ms: Mapping[str, float]) -> bool:
        return all(host_ms[p.name] > _CLEAR_LOSS * min_speedup * vendor_times[p.name][0].get(p.vendor, 0.0)
                   for p in plan.partitions)

    models: dict = {}

    def model_of(part: Partition) -> ImportedModel:  # the partition's ops alone: for the host bound and other vendors
        if part.name not in models:
            models[part.name] = _partition_model(plan, part, arguments[part.name])
        return models[part.name]

    host_bounds, builds = _settling_host_bounds(plan, vendor_times, arguments, model_of, build, runs, min_speedup)
    if host_bounds:
        host_times = {name: bound.ms for name, bound in host_bounds.items()}
    else:
        _log.info("measured placement: building and timing the model on the host")
        host_times = _host_times(build(plan.imported, []), arrays, runs, plan.partitions, clearly_slower)
        builds += 1
    decisions = []
    for part in plan.partitions:
        times, estimated = vendor_times[part.name]
        times[HOST] = host_times[part.name]
        bounds = {HOST: host_bounds[part.name].describe()} if host_bounds else {}
        builds += _time_other_vendors(plan, part, times, arguments.get(part.name), model_of, build, runs,
                                      min_speedup)
        place, reason = choose(times, part.vendor, min_speedup, estimated, bounds)
        _log.info("measured placement: %s %s", part.name, reason)
        decisions.append(PlacedPartition(part.name, part.vendor, list(part.onnx_nodes), times, estimated, place,
                                         reason, bounds))
    placement = Placement(decisions, builds, min_speedup)
    demoted = {(vendor.name, binding): f"{d.reason} (measured placement)"
               for d, part in zip(decisions, plan.partitions) if d.place != d.vendor
               for vendor in plan.vendors if vendor.name != d.place for binding in part.bindings}
    if demoted:
        final = plan.cut_again(demoted)
        final.placement = placement
    else:  # nothing moved: the same plan, and the same program recording the decisions (no build)
        final = dataclasses.replace(plan, placement=placement)
        relinked = rules_artifact.relinked(final, {**rules_artifact.metadata, "placement": placement.as_json()})
        if relinked is not None:
            return relinked
    return build(final, None)


def _settling_host_bounds(plan: PartitionPlan, vendor_times: Mapping, arguments: Mapping, model_of: Callable,
                          build: Build, runs: int, min_speedup: float) -> tuple[dict, int]:
    """``({partition: HostBound}, builds made)``: lower bounds on the host's time for every partition from its
    heaviest ops (:mod:`byoc.pipeline.placement.host_bound`; ``model_of(partition)``: its ops alone), when each one
    already shows the partition's vendor faster by ``min_speedup``; otherwise ``{}``, and the whole model is
    timed on the host instead."""
    if any(p.name not in arguments for p in plan.partitions):
        return {}, 0
    functions = {p.name: model_of(p).mod["main"] for p in plan.partitions}
    vendor_ms = {p.name: vendor_times[p.name][0][p.vendor] for p in plan.partitions}
    bounds = host_lower_bounds(functions, vendor_ms, build, runs,
                               lambda artifact, arrays, n: _call_times(artifact, arrays, n)[0])
    if not bounds:
        return {}, 0  # some partition could not be settled by a bound: nothing was built
    _log.info("measured placement: timed the heaviest ops of %d partition(s) on the host", len(bounds))
    settled = all(p.name in bounds and bounds[p.name].ms >= min_speedup * vendor_ms[p.name] for p in plan.partitions)
    return (bounds if settled else {}), 1


def _vendor_time(plan: PartitionPlan, part: Partition, measured_ms: float) -> tuple[dict, list]:
    """``({place: ms}, [estimated places])`` for the vendors' cost hooks that answer for ``part``, and the
    measured time on its own vendor where that vendor's hook does not. The partition is flattened for the
    hooks (its weights as arrays) only when a vendor has one."""
    times, estimated = {}, []
    hooks = [(vendor, cost_estimator(vendor.codegen))
             for vendor in sorted(plan.vendors, key=lambda v: v.name != part.vendor)]
    hooks = [(vendor, hook) for vendor, hook in hooks if hook is not None]
    graph = None
    if hooks:
        try:
            graph = plan.graph(part)
        except UnsupportedConstruct:  # its codegen built it, so this does not happen; no graph, no hook to ask
            hooks = []
    for vendor, hook in hooks:
        estimate = _estimate(vendor, hook, graph)
        if estimate is not None:
            times[vendor.name] = estimate
            estimated.append(vendor.name)
    times.setdefault(part.vendor, measured_ms)
    return times, estimated


def _host_times(artifact, arrays, runs: int, parts: list, stop) -> dict:
    """Partition name -> ms per run its ops take in ``artifact``, the whole model built for the host: each
    host function's time shared among the bindings its calls compute (:meth:`Artifact.host_calls`), summed
    over the partition's bindings. Host fusion may join an op of the partition with one outside it; the
    function's time is then split by binding. ``stop(host_ms)`` ends the timing early."""
    calls = artifact.host_calls()
    count = Counter(name for name, _ in calls)

    def per_partition(times: Mapping[str, float]) -> dict:
        share: dict = {}
        for name, bindings in calls:
            for binding in bindings:
                share[binding] = share.get(binding, 0.0) + times.get(name, 0.0) / count[name] / len(bindings)
        return {p.name: sum(share.get(b, 0.0) for b in p.bindings) for p in parts}

    times, _ = _call_times(artifact, arrays, runs, stop=lambda per_run: stop(per_partition(_medians(per_run))))
    return per_partition(times)


def _time_other_vendors(plan: PartitionPlan, part: Partition, times: dict, arguments: Optional[list],
                        model_of: Callable, build: Build, runs: int, min_speedup: float) -> int:
    """Time ``part``'s ops on each other vendor of the build that takes them all and has no estimate in
    ``times`` (``model_of(part)`` built alone, run on ``arguments``: the tensors that reached the partition);
    returns the builds made. A partition that takes a shape argument is not rebuilt."""
    others = [v for v in plan.vendors if v.name != part.vendor and v.name not in times]
    if not others or arguments is None:
        return 0
    model = model_of(part)
    bound = _CLEAR_LOSS * min_speedup * times[part.vendor]  # slower than this, it loses whatever its exact time
    for vendor in others:
        artifact = build(model, [vendor])
        if artifact.plan.host_ops or not artifact.plan.partitions:
            continue  # that vendor does not take all of the partition's ops
        ms, _ = _call_times(artifact, arguments, runs, stop=lambda per_run: _calls_ms(_medians(per_run)) > bound)
        times[vendor.name] = _calls_ms(ms)
    return len(others)


def choose(times: Mapping[str, float], vendor: str, min_speedup: float, estimated=(),
           bounds: Optional[Mapping[str, str]] = None) -> tuple[str, str]:
    """Where a partition of ``vendor`` goes given its ``times`` (place -> ms; those in ``bounds`` lower
    bounds, with what they count), and the reason quoting them."""
    quoted = quote_times(times, estimated, bounds, first=vendor)
    others = {place: ms for place, ms in times.items() if place != vendor}
    if not others:
        return vendor, f"kept on {vendor}: nowhere else to run it ({quoted})"
    best = min(others, key=others.get)
    if times[vendor] * min_speedup <= others[best]:
        return vendor, f"kept on {vendor}: {quoted}"
    verb = "kept on host" if best == HOST else f"placed on {best}"
    return best, f"{verb}: {quoted}"


def _estimate(vendor, hook, graph) -> Optional[float]:
    """The vendor's cost ``hook``'s ms per run for ``graph``, or None (no answer, or a hook that fails: a
    ``RuntimeWarning`` naming the vendor, and the partition is measured instead)."""
    try:
        value = hook(graph)
        return None if value is None else float(value)
    except Exception as err:  # noqa: BLE001 - a vendor's hook: measure instead
        warnings.warn(f"vendor {vendor.name!r}: estimate_cost failed on {graph.symbol} "
                      f"({type(err).__name__}: {err}); measuring it instead", RuntimeWarning, stacklevel=4)
        return None


def _medians(per_run: Mapping[str, list]) -> dict:
    """Call name -> median ms per run, from :class:`~byoc.pipeline.artifact.profile.HookedRuns`' ``per_run``."""
    runs = max((len(samples) for samples in per_run.values()), default=0)
    return {name: statistics.median(seconds_per_run(samples, runs)) * 1e3 for name, samples in per_run.items()}


def _call_times(artifact, arrays, runs: int, keep_arguments=(), stop=None) -> tuple[dict, dict]:
    """Call name -> median ms per run of ``artifact``'s hooked runs (a profile's clock), and the arguments
    kept (:func:`byoc.pipeline.artifact.profile.time_calls`, whose ``stop`` ends the runs early)."""
    timed = time_calls(artifact, arrays, runs, keep_arguments, budget_s=_BUDGET_S, stop=stop)
    return _medians(timed.per_run), timed.arguments


def _calls_ms(times: Mapping[str, float]) -> float:
    """Milliseconds per run in the partitions and host functions of ``times``: the clock of a vendor's
    partition time, which leaves the VM's builtins (allocations) out on both sides."""
    return sum(ms for name, ms in times.items() if not name.startswith(BUILTIN))


def _partition_model(plan: PartitionPlan, part: Partition, arguments: list) -> ImportedModel:
    """The partition's ops as a model of their own, at the sizes of ``arguments``: its function with the
    vendor's composites inlined (plain Relax ops again) and its symbolic dims bound."""
    import tvm
    from tvm import relax

    func = plan.mod[part.global_var]
    sizes = {}
    for param, array in zip(func.params, arguments):
        for dim, size in zip(param.ty.shape.values, array.shape):
            if isinstance(dim, tvm.tirx.Var):
                sizes[dim] = int(size)
    mod = tvm.IRModule({"main": host_function(func, "main")})
    if sizes:
        mod = relax.transform.BindSymbolicVars(sizes)(mod)
    mod["main"] = unique_binding_names(mod["main"])[0]  # each composite's result was named gv
    inputs = [TensorSpec(f"arg{i}", tuple(a.shape), str(a.dtype)) for i, a in enumerate(arguments)]
    return ImportedModel(mod, None, inputs, [])

"""Placement by measured cost: ``byoc.compile(..., placement="measured")``.

The rules say what a vendor *can* take; whether it pays is measured here, as onnx-mlir's performance model
and TVM's Collage did by estimate and by search. Each partition of the rule-based plan is timed

* on its vendor: its calls in a profile of the rule-based artifact on the sample inputs, or the vendor's cost
  hook (:meth:`byoc.vendor.Codegen.estimate_cost`) for hardware this machine does not have;
* on the host: the same ops (the partition's function with its composites inlined) built by the host
  compiler alone and run on the tensors that reached the partition in that run;
* on every other vendor of the build that takes all of its ops, built and run the same way.

A partition stays on its vendor only when every other place is slower by at least ``min_speedup`` (the
vendor must win by that factor, as onnx-mlir's ``minFactor``); otherwise it goes to the fastest other
place. Its ops are then demoted from the vendors that lost, with the times as the reason, and the model is
cut again (:func:`byoc.pipeline.partitioner.cut`); the regions that cut makes are built as they come, not
measured again. Every decision is kept in the plan (:attr:`PartitionPlan.placement`) and in the artifact's
metadata, so a loaded artifact reports it.

Sizes are those of the sample inputs: the user's, or seeded random ones of the declared shapes (a symbolic
dim then needs a size). Boundary tensors are real ones, captured from the rule-based run, so an index tensor
crossing a boundary stays in range.
"""

from __future__ import annotations

import statistics
import warnings
from typing import Callable, Mapping, Optional

from byoc.errors import ByocError, InputShapeError, TargetError
from byoc.pipeline.importer import unique_binding_names
from byoc.pipeline.onnx_model import ImportedModel, TensorSpec
from byoc.pipeline.partitioner import Partition, PartitionPlan, cut
from byoc.pipeline.placement_record import PlacedPartition, Placement
from byoc.pipeline.profile import BUILTIN, time_calls
from byoc.pipeline.samples import random_inputs
from byoc.vendor import as_codegen
from byoc.vendor.graph import UnsupportedConstruct, partition_graph

#: ``placement=`` values: by the vendors' rules alone (the default), or by measured cost
PLACEMENTS = ("rules", "measured")
#: how much faster than every other place a vendor must be to keep a partition
DEFAULT_MIN_SPEEDUP = 1.1
HOST = "host"
#: seconds of timed runs after which a candidate's timing stops (after at least 3 runs)
_BUDGET_S = 0.5
#: a candidate slower than the vendor by this many times min_speedup is timed no further
_CLEAR_LOSS = 2.0

#: Build = build(plan or model, vendors or None) -> Artifact, with the user's build options applied
Build = Callable[..., object]


def check_placement(placement: str, min_speedup: float) -> None:
    if placement not in PLACEMENTS:
        raise ByocError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if not min_speedup >= 1.0:
        raise ByocError(f"min_speedup must be at least 1.0 (a vendor no faster than the host), got {min_speedup}")


def sample_inputs(artifact) -> dict:
    """Seeded inputs of ``artifact``'s declared shapes (:func:`byoc.pipeline.samples.random_inputs`); a
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
    rules_artifact = build(plan, None)
    plan = rules_artifact.plan  # a vendor whose codegen failed has given its partitions back already
    if not plan.partitions:
        plan.placement = Placement([], 0, min_speedup)
        return rules_artifact
    arrays = rules_artifact.check_inputs(sample_inputs(rules_artifact) if inputs is None else inputs)
    inputs_of = {p.name: len(plan.mod[p.global_var].params) for p in plan.partitions}
    vendor_times, arguments = _call_times(rules_artifact, arrays, runs, inputs_of)
    decisions, builds = [], 0
    for part in plan.partitions:
        decision, made = _place(plan, part, vendor_times.get(part.name, 0.0), arguments.get(part.name), build,
                                runs, min_speedup)
        decisions.append(decision)
        builds += made
    placement = Placement(decisions, builds, min_speedup)
    demoted = {(vendor.name, binding): f"{d.reason} (measured placement)"
               for d, part in zip(decisions, plan.partitions) if d.place != d.vendor
               for vendor in plan.vendors if vendor.name != d.place for binding in part.bindings}
    final = cut(plan.imported, plan.vendors, plan.target, plan.min_ops, plan.keep_on_host, demoted)
    final.placement = placement
    # Built again even when nothing moved: the decisions go into the artifact's metadata, compiled in.
    return build(final, None)


def _place(plan: PartitionPlan, part: Partition, measured_ms: float, arguments: Optional[list], build: Build,
           runs: int, min_speedup: float) -> tuple[PlacedPartition, int]:
    """One partition's decision, and how many candidate builds it took."""
    times, estimated = {}, []
    vendors = {v.name: v for v in plan.vendors}
    graph = None
    try:
        graph = partition_graph(plan.mod[part.global_var], part.name)
    except UnsupportedConstruct:
        pass  # the codegen built it, so this does not happen; without a graph there is no hook to ask
    for name in [part.vendor] + [v for v in vendors if v != part.vendor]:
        estimate = _estimate(vendors[name], graph)
        if estimate is not None:
            times[name] = estimate
            estimated.append(name)
    times.setdefault(part.vendor, measured_ms)
    builds = 0
    if arguments is None:
        place, reason = part.vendor, f"kept on {part.vendor}: not measured (it takes a shape argument)"
        return PlacedPartition(part.name, part.vendor, list(part.onnx_nodes), times, estimated, place, reason), 0
    model = _partition_model(plan, part, arguments)
    for name in [HOST] + [v for v in vendors if v != part.vendor and v not in times]:
        artifact = build(model, [] if name == HOST else [vendors[name]])
        builds += 1
        if name != HOST and (artifact.plan.host_ops or not artifact.plan.partitions):
            continue  # that vendor does not take all of the partition's ops
        # A place this much slower than the vendor loses whatever its exact time: stop timing it there.
        times[name] = _run_ms(artifact, arguments, runs, _CLEAR_LOSS * min_speedup * times[part.vendor])
    place, reason = choose(times, part.vendor, min_speedup, estimated)
    return PlacedPartition(part.name, part.vendor, list(part.onnx_nodes), times, estimated, place, reason), builds


def choose(times: Mapping[str, float], vendor: str, min_speedup: float, estimated=()) -> tuple[str, str]:
    """Where a partition of ``vendor`` goes given its ``times`` (place -> ms), and the reason quoting them."""
    quoted = ", ".join(f"{place} {ms:.3g} ms{' (estimated)' if place in estimated else ''}"
                       for place, ms in sorted(times.items(), key=lambda item: (item[0] != vendor, item[1])))
    others = {place: ms for place, ms in times.items() if place != vendor}
    if not others:
        return vendor, f"kept on {vendor}: nowhere else to run it ({quoted})"
    best = min(others, key=others.get)
    if times[vendor] * min_speedup <= others[best]:
        return vendor, f"kept on {vendor}: {quoted}"
    verb = "kept on host" if best == HOST else f"placed on {best}"
    return best, f"{verb}: {quoted}"


def _estimate(vendor, graph) -> Optional[float]:
    """The vendor's cost hook's ms per run for ``graph``, or None (no hook, no answer, or a hook that fails:
    a ``RuntimeWarning`` naming the vendor, and the partition is measured instead)."""
    if graph is None:
        return None
    try:
        value = as_codegen(vendor.codegen).estimate_cost(graph)
        return None if value is None else float(value)
    except Exception as err:  # noqa: BLE001 - a vendor's hook: measure instead
        warnings.warn(f"vendor {vendor.name!r}: estimate_cost failed on {graph.symbol} "
                      f"({type(err).__name__}: {err}); measuring it instead", RuntimeWarning, stacklevel=4)
        return None


def _call_times(artifact, arrays, runs: int, keep_arguments=(), stop_above_ms: Optional[float] = None
                ) -> tuple[dict, dict]:
    """Call name -> median ms per run of ``artifact``'s hooked runs (a profile's clock), and the arguments
    kept (:func:`byoc.pipeline.profile.time_calls`; ``stop_above_ms`` stops a clear loser early)."""
    timed = time_calls(artifact, arrays, runs, keep_arguments, budget_s=_BUDGET_S,
                       stop_above_s=None if stop_above_ms is None else stop_above_ms / 1e3)
    done = len(timed.hooked)
    times = {name: statistics.median([s for _, s in samples] + [0.0] * (done - len(samples))) * 1e3
             for name, samples in timed.per_run.items()}
    return times, timed.arguments


def _run_ms(artifact, arrays, runs: int, stop_above_ms: float) -> float:
    """Milliseconds per run in ``artifact``'s partitions and host functions: the clock of the vendor's
    partition time, which leaves the VM's builtins (allocations) out on both sides."""
    times, _ = _call_times(artifact, arrays, runs, stop_above_ms=stop_above_ms)
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
    mod = tvm.IRModule({"main": func.without_attr("Codegen").with_attr("global_symbol", "main")})
    mod = relax.transform.InlinePrivateFunctions()(relax.transform.LambdaLift()(mod))
    if sizes:
        mod = relax.transform.BindSymbolicVars(sizes)(mod)
    mod["main"] = unique_binding_names(mod["main"])[0]  # each composite's result was named gv
    inputs = [TensorSpec(f"arg{i}", tuple(a.shape), str(a.dtype)) for i, a in enumerate(arguments)]
    return ImportedModel(mod, None, inputs, [])

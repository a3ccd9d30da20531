"""Vendors' partition checks: a vendor judges each whole partition it would get, after its rules took the ops.

A rule's check sees one match; a partition check (``Vendor(partition_check=...)``) sees the partition as its
codegen would get it (:meth:`PartitionPlan.graph <byoc.pipeline.partitioning.partitioner.PartitionPlan.graph>`:
the ops, the vendor's options and the model's dim bounds). It may accept it, refuse it whole with a reason,
leave some of its ops out (:class:`~byoc.vendor.rules.LeaveOut`), or split it into pieces
(:class:`~byoc.vendor.rules.Split`, :mod:`byoc.pipeline.partitioning.pieces`). Refused ops become demotions,
split-off ops a piece of their own; the model is cut again, and the new partitions are checked again. Each
round demotes ops the vendor had or cuts a partition into smaller pieces (a piece of one match cannot be split),
so the rounds end.

A check that raises, or returns something else, refuses its partition with that as the reason: a vendor's bug
costs its partition, never the build. A partition the plain view cannot show is not checked here: its codegen
refuses it at build, and that refusal is the partition's reason then.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from byoc.errors import UnsupportedConstruct
from byoc.pipeline.partitioning.specializations import (Specialization, partition_sizes, specialized_symbol,
                                                         symbolic_dims)
from byoc.vendor.rules import SUPPORTED, LeaveOut, Split


@dataclass(frozen=True)
class Fallback:
    """A partition its vendor gave back: its codegen failed on it, or its partition check refused (some of) its
    ops. ``ops`` counts the ops given back; they run on another vendor or the host, each with ``reason``."""

    vendor: str
    partition: str
    ops: int
    reason: str


@dataclass
class Verdicts:
    """What the partition checks of one plan decided beyond accepting."""

    #: ``(vendor, binding) -> reason`` for each op kept off its vendor
    demoted: dict = field(default_factory=dict)
    #: ``(vendor, binding) -> piece`` for each op split into a new piece
    pieces: dict = field(default_factory=dict)
    #: ``(vendor, binding) -> reason`` for the first op of each new piece
    split_at: dict = field(default_factory=dict)
    #: ``(vendor, partition, ops refused, reason)`` for each partition a check refused ops of
    fallbacks: list = field(default_factory=list)
    #: partition name -> its :class:`Specialization` list, for each static-shape partition with symbolic dims
    specializations: dict = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.demoted or self.pieces)


def partition_check_verdicts(plan: Any, pieces: Mapping[tuple[str, str], int]) -> Verdicts:
    """What the vendors' partition checks decide of ``plan`` (a
    :class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan` cut with ``pieces``); empty when every check
    accepts. A static-shape vendor's partition with symbolic dims is checked once per size the plan specializes
    it for (:attr:`Verdicts.specializations`)."""
    verdicts = Verdicts()
    next_piece = [max(pieces.values(), default=0) + 1]
    for part in plan.partitions:
        vendor = next(v for v in plan.vendors if v.name == part.vendor)
        groups = _bindings_per_group(plan.mod[part.global_var])
        dims = symbolic_dims(plan.mod[part.global_var]) if vendor.static_shapes else []
        if dims:
            result = _sized_verdict(plan, part, vendor, dims, groups, verdicts)
        elif vendor.partition_check is None:
            continue
        else:
            try:
                graph = plan.graph(part)
            except UnsupportedConstruct:
                continue
            result = _verdict(vendor.partition_check, graph, groups)
        _record(verdicts, part, result, groups, next_piece)
    return verdicts


def _record(verdicts: Verdicts, part, result, groups: list[list[str]], next_piece: list[int]) -> None:
    """Add one partition's verdict (:func:`_verdict`) to ``verdicts``; ``next_piece`` holds the next piece's
    number."""
    if isinstance(result, tuple):  # (group indices starting a piece, reason)
        starts, why = result
        piece = None
        for index, group in enumerate(groups):
            if index in starts:
                piece, next_piece[0] = next_piece[0], next_piece[0] + 1
                verdicts.split_at[(part.vendor, group[0])] = why
            if piece is not None:
                verdicts.pieces.update({(part.vendor, b): piece for b in group})
        return
    refused: dict[str, list[str]] = {}
    for binding, why in result.items():
        verdicts.demoted[(part.vendor, binding)] = (f"the {part.vendor} partition check refused partition "
                                                    f"{part.name} ({len(part.bindings)} ops): {why}")
        refused.setdefault(why, []).append(binding)
    verdicts.fallbacks += [Fallback(part.vendor, part.name, len(bindings), f"its partition check: {why}")
                           for why, bindings in refused.items()]


def _sized_verdict(plan: Any, part, vendor, dims: list[str], groups: list[list[str]], verdicts: Verdicts):
    """The verdict on a static-shape vendor's partition with symbolic ``dims``: its partition check's on each
    size the plan specializes it for.

    While the check accepts the partition whole at some size, each size it does not accept (a reason, a LeaveOut
    or a Split) is left out of the partition's specializations, with its reason (recorded in ``verdicts``): that
    size runs on the host, the others keep every op. When it accepts no size whole, the first size's LeaveOut or
    Split is the partition's verdict (the pieces are checked again at every size); a partition refused at every
    size, or with a dim the plan names no sizes for, is refused."""
    every = [b for group in groups for b in group]
    sized = partition_sizes(plan.specialize, dims)
    if not sized:
        unnamed = [d for d in dims if not any(d in profile for profile in plan.specialize)]
        return dict.fromkeys(every, f"dim {unnamed[0]!r} is symbolic and {vendor.name} runs static shapes only: "
                                    f"name the sizes to compile it for (specialize={{{unnamed[0]!r}: [...]}})")
    results = []
    for sizes in sized:
        try:
            graph = None if vendor.partition_check is None else plan.graph(part, sizes)
        except UnsupportedConstruct:  # its codegen refuses it at build, with that as the reason
            graph = None
        results.append({} if graph is None else _verdict(vendor.partition_check, graph, groups))
    if not any(result == {} for result in results):
        structural = [r for r in results if isinstance(r, tuple) or len(r) < len(every)]
        if structural:
            return structural[0]
        why = next(iter(results[0].values()))
        return dict.fromkeys(every, f"at every size it names ({Specialization(sized[0], '').describe()}: {why})")
    verdicts.specializations[part.name] = [
        Specialization(sizes, specialized_symbol(part.name, sizes),
                       result[1] if isinstance(result, tuple) else next(iter(result.values()), ""))
        for sizes, result in zip(sized, results)]
    return {}


def _verdict(check, graph, groups: list[list[str]]):
    """``binding -> why`` for the ops ``check`` refuses of ``graph``, or ``(indices of the groups that start a
    piece, why)`` for a split (``groups``: each composite's bindings, in the order of ``OpCall.group``)."""
    every = {b: None for group in groups for b in group}
    try:
        result = check(graph)
    except Exception as err:  # noqa: BLE001 - a vendor's bug costs its partition, not the build
        return dict.fromkeys(every, f"its partition check raised {type(err).__name__}: {err}")
    if result is SUPPORTED:
        return {}
    if isinstance(result, str) and result:
        return dict.fromkeys(every, result)
    group_of = {id(call): call.group for call in graph.ops}
    if isinstance(result, Split):
        starts = {group_of.get(id(call)) for call in result.calls}
        if None in starts:
            return dict.fromkeys(every, _FOREIGN.format(kind="Split"))
        starts.discard(0)  # the first op starts the partition anyway
        if not starts:
            return dict.fromkeys(every, f"its partition check split it at its first op alone ({result.reason})")
        return starts, result.reason
    leave_outs = [result] if isinstance(result, LeaveOut) else result
    if not isinstance(leave_outs, (list, tuple)) or not leave_outs or not all(
            isinstance(item, LeaveOut) for item in leave_outs):
        return dict.fromkeys(every, f"its partition check returned {reprlib.repr(result)}, not SUPPORTED, a reason, "
                                    "LeaveOut or Split")
    refused: dict[str, str] = {}
    for item in leave_outs:
        for call in item.calls:
            group = group_of.get(id(call))
            if group is None:
                return dict.fromkeys(every, _FOREIGN.format(kind="LeaveOut"))
            refused.update(dict.fromkeys(groups[group], item.reason))
    return refused


_FOREIGN = ("its partition check named an op call that is not one of the partition's ({kind} takes the graph's "
            "own OpCalls)")


def _bindings_per_group(func) -> list[list[str]]:
    """The original bindings of each composite a partition function calls, in call order: ``OpCall.group`` of
    :func:`byoc.vendor.graph.partition_graph` numbers the composites so."""
    from tvm import relax

    from byoc.pipeline.annotate.annotator import BINDINGS_ATTR

    local: dict = {}
    groups = []
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                local[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in local:
                groups.append(str(local[value.op].attrs[BINDINGS_ATTR]).split(","))
    return groups

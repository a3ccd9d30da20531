"""Vendors' partition checks: a vendor judges each whole partition it would get, after its rules took the ops.

A rule's check sees one match; a partition check (``Vendor(partition_check=...)``) sees the partition as its
codegen would get it (:meth:`PartitionPlan.graph <byoc.pipeline.partitioning.partitioner.PartitionPlan.graph>`:
the ops, the vendor's options and the model's dim bounds). It may accept it, refuse it whole with a reason, or
leave some of its ops out (:class:`~byoc.vendor.rules.LeaveOut`). Refused ops become demotions, the model is cut
again, and the new partitions are checked again; each round demotes ops the vendor had, so the rounds end.

A check that raises, or returns something else, refuses its partition with that as the reason: a vendor's bug
costs its partition, never the build. A partition the plain view cannot show is not checked here: its codegen
refuses it at build, and that refusal is the partition's reason then.
"""

from __future__ import annotations

from typing import Any

from byoc.errors import UnsupportedConstruct
from byoc.vendor.rules import SUPPORTED, LeaveOut


def partition_check_demotions(plan: Any) -> dict[tuple[str, str], str]:
    """``(vendor, binding) -> reason`` for every op a vendor's partition check keeps out of its partition in
    ``plan`` (a :class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan`); empty when every check accepts."""
    demoted: dict[tuple[str, str], str] = {}
    checks = {v.name: v.partition_check for v in plan.vendors if v.partition_check is not None}
    for part in plan.partitions:
        check = checks.get(part.vendor)
        if check is None:
            continue
        try:
            graph = plan.graph(part)
        except UnsupportedConstruct:
            continue
        for binding, why in _refused(check, graph, _bindings_per_group(plan.mod[part.global_var])).items():
            demoted[(part.vendor, binding)] = (f"the {part.vendor} partition check refused partition {part.name} "
                                               f"({len(part.bindings)} ops): {why}")
    return demoted


def _refused(check, graph, groups: list[list[str]]) -> dict[str, str]:
    """binding -> why, for the ops ``check`` refuses of ``graph`` (``groups``: each composite's bindings, in the
    order of ``OpCall.group``)."""
    every = {b: None for group in groups for b in group}
    try:
        result = check(graph)
    except Exception as err:  # noqa: BLE001 - a vendor's bug costs its partition, not the build
        return dict.fromkeys(every, f"its partition check raised {type(err).__name__}: {err}")
    if result is SUPPORTED:
        return {}
    if isinstance(result, str) and result:
        return dict.fromkeys(every, result)
    leave_outs = [result] if isinstance(result, LeaveOut) else result
    if not isinstance(leave_outs, (list, tuple)) or not leave_outs or not all(
            isinstance(item, LeaveOut) for item in leave_outs):
        return dict.fromkeys(every, f"its partition check returned {result!r}, not SUPPORTED, a reason or LeaveOut")
    by_identity = {id(call): call.group for call in graph.ops}
    refused: dict[str, str] = {}
    for item in leave_outs:
        for call in item.calls:
            group = by_identity.get(id(call))
            if group is None or not 0 <= group < len(groups):
                return dict.fromkeys(every, "its partition check left out an op call that is not one of the "
                                            "partition's (LeaveOut takes the graph's own OpCalls)")
            refused.update(dict.fromkeys(groups[group], item.reason))
    return refused


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

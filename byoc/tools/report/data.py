"""The report as data: :func:`build_report` turns a :class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan`
into a plain dict (the JSON format), keyed by ONNX node names and op types, never by Relax binding names, and
ordered by the model's own order so that output is stable from run to run."""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Optional

from byoc.pipeline.partitioning.partitioner import PartitionPlan
from byoc.tools.report.rows import reasons_text
from byoc.tools.report.schema import HOST, NO_OP, SCHEMA_VERSION


def node_targets(plan: PartitionPlan) -> dict[str, list[str]]:
    """ONNX node name -> where its ops went (partition names or ``"host"``), in op order."""
    part_of = {b: p.name for p in plan.partitions for b in p.bindings}
    targets: dict[str, list[str]] = defaultdict(list)
    for binding, decision in plan.decisions.items():
        if decision.node is not None:
            where = part_of.get(binding, HOST)
            if where not in targets[decision.node.name]:
                targets[decision.node.name].append(where)
    return dict(targets)


def _tensor(name: str, shape, dtype: str, nbytes: Optional[int]) -> dict:
    """A tensor as the JSON report has it: a symbolic dim is its text ("batch"), and its bytes null."""
    return {"name": name, "shape": [d if isinstance(d, str) else int(d) for d in shape], "dtype": str(dtype),
            "bytes": None if nbytes is None else int(nbytes)}


def _node_detail(decisions: list, where: list[str], prepared: Optional[str] = None) -> str:
    """Hover text for one ONNX node: where its ops went, by which rule, or why not.

    ``prepared`` is what model preparation made of the node, if it was not
    imported as itself.
    """
    if not where:
        if prepared:
            return f"before import: {prepared}"
        return "no op left to run after import (folded or removed)"
    lines = [f"before import: {prepared}"] if prepared else []
    for decision in decisions:
        if decision.on_host:
            lines.append(f"{decision.op} on host: {reasons_text(decision.reasons)}")
        else:
            declined = f" ({reasons_text(decision.reasons)})" if decision.reasons else ""
            lines.append(f"{decision.op} -> {decision.vendor} by {decision.rule}{declined}")
    return "\n".join(dict.fromkeys(lines))


def _host_groups(plan: PartitionPlan) -> list[dict]:
    """Host ops per ONNX node (a node once, with every reason its ops got), nodes alike grouped together."""
    groups: dict[tuple, dict] = {}
    for host in plan.host_nodes:
        op_type = host.node.op_type if host.node is not None else host.ops[0]
        key = (op_type, tuple(host.reasons.items()))
        group = groups.setdefault(key, {"op_type": op_type, "nodes": [], "ops": 0, "reasons": dict(host.reasons)})
        group["ops"] += len(host.ops)
        group["nodes"].append(host.node.name if host.node is not None else "(no ONNX node)")
    return list(groups.values())


_QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _unit_rules(plan: PartitionPlan) -> set[str]:
    from byoc.vendor.quantized import QuantizedUnitRule

    return {rule.name for vendor in plan.vendors for rule in vendor.rules if isinstance(rule, QuantizedUnitRule)}


def _nodes(plan: PartitionPlan) -> list[dict]:
    graph = plan.imported.model.graph
    unit_rules = _unit_rules(plan)
    initializers = {t.name for t in graph.initializer}
    targets = node_targets(plan)
    vendor_of = {p.name: p.vendor for p in plan.partitions}
    decisions_of: dict[str, list] = defaultdict(list)
    for decision in plan.decisions.values():
        if decision.node is not None:
            decisions_of[decision.node.name].append(decision)
    prepared = plan.imported.prepared
    nodes = []
    for node in graph.node:
        where = targets.get(node.name, [])
        placement = where[0] if where else NO_OP
        nodes.append({
            "name": node.name,
            "op_type": node.op_type,
            "placement": "+".join(where) if len(where) > 1 else placement,
            "vendor": vendor_of.get(placement),
            "inputs": [n for n in node.input if n and n not in initializers],
            "outputs": [n for n in node.output if n],
            "detail": _node_detail(decisions_of[node.name], where, prepared.get(node.name)),
        })
        if node.op_type not in _QDQ_OPS and any(d.rule in unit_rules for d in decisions_of[node.name]):
            nodes[-1]["quantized_unit"] = True  # only then, so float models' reports stay as they were
    return nodes


def _device(plan) -> dict:
    """The report's "device" entry: per vendor with a device memory, what its partitions move per call and keep
    there (:meth:`~byoc.pipeline.partitioning.partitioner.PartitionPlan.transfers`); none without such a vendor."""
    moved = plan.transfers()
    if not moved:
        return {}
    device: dict = {}
    for name, t in moved.items():
        entry = device.setdefault(t.vendor, {"memory": t.device, "partitions": []})
        entry["partitions"].append({"name": name, "to_device_bytes": t.to_device, "to_host_bytes": t.to_host,
                                    "kept_bytes": t.kept, "weights_bytes": t.weights,
                                    "reads_on_device": list(t.resident_inputs),
                                    "leaves_on_device": list(t.resident_outputs)})
    for entry in device.values():
        for key in ("to_device_bytes", "to_host_bytes", "kept_bytes", "weights_bytes"):
            values = [p[key] for p in entry["partitions"]]
            entry[key] = None if None in values else sum(values)
    return {"device": device}


def _loops(plan: PartitionPlan) -> list[dict]:
    """Each Loop the host runs (nested ones after the loop that holds them): its body's partitions, and the body's
    ONNX nodes with ops on the host."""
    loops = []
    for node, body in plan.loops.items():
        loops.append({"node": node, "partitions": [p.name for p in body.partitions],
                      "host_nodes": list(dict.fromkeys(d.node.name for d in body.host_ops if d.node is not None))})
        loops += _loops(body)
    return loops


def _specializations(part, plan) -> dict:
    """A static-shape partition's sizes as the report gives them, and what a call at another size does."""
    vendor = next(v for v in plan.vendors if v.name == part.vendor)
    return {"specializations": [{"sizes": dict(s.sizes), "symbol": s.symbol, **({"refused": s.refused} if s.refused
                                                                                 else {})}
                                for s in part.specializations],
            "other_sizes": vendor.other_sizes}


def build_report(
    plan: PartitionPlan,
    model_name: str,
    target: str = "x86_64",
    memory: Optional[Mapping] = None,
    verification: Optional[Mapping] = None,
    vendor_options: Optional[Mapping] = None,
    time: Optional[Mapping] = None,
) -> dict:
    """The report of ``plan`` as a JSON-ready dict (see :data:`REPORT_SCHEMA`).

    ``model_name`` is how the model is named in the report (a file name, not
    a path, so reports compare equal across machines); ``memory`` is
    :meth:`byoc.tools.memory.MemoryEstimate.as_dict` and ``verification`` what
    :mod:`byoc.tools.verify` found, when they were computed.
    ``vendor_options`` (vendor -> option -> :class:`~byoc.vendor.OptionSetting`,
    as :attr:`byoc.Artifact.vendor_option_settings` or
    :func:`byoc.pipeline.build.builder.vendor_option_settings` give them) adds the
    options that are not their defaults. ``time`` is a profile's
    :meth:`~byoc.pipeline.artifact.profile.Profile.to_json` (the CLI's ``--profile``).
    """
    vendors = [v.name for v in plan.vendors]
    offloaded = {v: 0 for v in vendors}
    per_vendor = {v: 0 for v in vendors}
    for decision in plan.decisions.values():
        if not decision.on_host:
            offloaded[decision.vendor] = offloaded.get(decision.vendor, 0) + 1
    for part in plan.partitions:
        per_vendor[part.vendor] = per_vendor.get(part.vendor, 0) + 1
    report = {
        "schema_version": SCHEMA_VERSION,
        "model": model_name,
        "vendors": vendors,
        "target": str(target),
        "policies": {"min_ops": plan.min_ops, "keep_on_host": list(plan.keep_on_host)},
        "summary": {
            "onnx_nodes": len(plan.imported.model.graph.node),
            "total_ops": len(plan.decisions),
            "offloaded_ops": offloaded,
            "host_ops": len(plan.host_ops),
            "partitions": per_vendor,
        },
        "partitions": [
            {
                "name": p.name,
                "vendor": p.vendor,
                "onnx_nodes": list(p.onnx_nodes),
                "ops": len(p.ops),
                "rules": list(p.rules),
                "inputs": [_tensor(t.source, t.shape, t.dtype, t.nbytes) for t in p.inputs],
                "outputs": [_tensor(t.source, t.shape, t.dtype, t.nbytes) for t in p.outputs],
                "constant_bytes": int(p.constant_bytes),
                "boundary_bytes": int(p.boundary_bytes),
                **({"split": p.split} if p.split else {}),
                **(_specializations(p, plan) if p.specializations else {}),
            }
            for p in plan.partitions
        ],
        **({"fallbacks": [{"vendor": f.vendor, "partition": f.partition, "ops": f.ops, "reason": f.reason}
                          for f in plan.fallbacks]} if plan.fallbacks else {}),
        **({"loops": _loops(plan)} if plan.loops else {}),
        **_device(plan),
        "host_ops": _host_groups(plan),
        "nodes": _nodes(plan),
        "inputs": [_tensor(s.name, s.shape, s.dtype, s.nbytes) for s in plan.imported.inputs],
        "outputs": [_tensor(s.name, s.shape, s.dtype, s.nbytes) for s in plan.imported.outputs],
    }
    if plan.imported.prepared:
        # Only when preparation changed the graph, so reports of models it leaves
        # alone stay as they were.
        order = [n.name for n in plan.imported.model.graph.node]
        report["prepared"] = {
            "simplifier": plan.imported.simplifier,
            "nodes": {n: plan.imported.prepared[n] for n in order if n in plan.imported.prepared},
        }
    chosen = {vendor: {name: options[name].as_json() for name in sorted(options) if not options[name].is_default}
              for vendor, options in (vendor_options or {}).items()}
    if any(chosen.values()):
        # Only then, so reports of builds with every default stay as they were.
        report["vendor_options"] = {vendor: options for vendor, options in chosen.items() if options}
    if memory is not None:
        report["memory"] = dict(memory)
    if verification is not None:
        report["verify"] = dict(verification)
    if time is not None:
        report["time"] = dict(time)
    if plan.placement is not None:
        report["placement"] = plan.placement.as_json()
    return report

"""The partition report: which ONNX node went where, and why, as data and as text/JSON/DOT/HTML.

:func:`build_report` turns a :class:`~byoc.pipeline.partitioner.PartitionPlan` into a
plain dict (the JSON format, schema :data:`REPORT_SCHEMA`, version
:data:`SCHEMA_VERSION`); :func:`render` draws that dict in one of
:data:`FORMATS`. Everything is keyed by ONNX node names and op types, never
by Relax binding names, and ordered by the model's own order so that output
is stable from run to run.
"""

from __future__ import annotations

import colorsys
import html
import json
from collections import defaultdict
from typing import TYPE_CHECKING, Mapping, Optional

from byoc.errors import ByocError
from byoc.pipeline.placement_record import quote_times
from byoc.vendor.options import format_value

if TYPE_CHECKING:  # only named in annotations: PartitionPlan.report() imports this module
    from byoc.pipeline.partitioner import PartitionPlan

SCHEMA_VERSION = 1
FORMATS = ("text", "json", "dot", "html")
HOST = "host"
NO_OP = "none"  # an ONNX node that left no op to run (folded or removed at import)

_PALETTE = ("#8ecae6", "#ffb703", "#90be6d", "#f28482", "#cdb4db", "#a3c4bc", "#f4a261", "#b5e48c")
_HOST_COLOUR = "#d9d9d9"
_NO_OP_COLOUR = "#ffffff"

_TENSOR = {
    "type": "object",
    "required": ["name", "shape", "dtype", "bytes"],
    "properties": {
        "name": {"type": "string"},
        "shape": {"type": "array", "items": {"type": "integer"}},
        "dtype": {"type": "string"},
        "bytes": {"type": "integer"},
    },
}
_REASONS = {"type": "object", "additionalProperties": {"type": "string"}}

REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "byoc partition report",
    "type": "object",
    "required": ["schema_version", "model", "vendors", "target", "policies", "summary",
                 "partitions", "host_ops", "nodes", "inputs", "outputs"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "model": {"type": "string"},
        "vendors": {"type": "array", "items": {"type": "string"}},
        "target": {"type": "string"},
        "policies": {
            "type": "object",
            "required": ["min_ops", "keep_on_host"],
            "properties": {"min_ops": {"type": "integer"},
                           "keep_on_host": {"type": "array", "items": {"type": "string"}}},
        },
        "summary": {
            "type": "object",
            "required": ["onnx_nodes", "total_ops", "offloaded_ops", "host_ops", "partitions"],
            "properties": {
                "onnx_nodes": {"type": "integer"},
                "total_ops": {"type": "integer"},
                "offloaded_ops": {"type": "object", "additionalProperties": {"type": "integer"}},
                "host_ops": {"type": "integer"},
                "partitions": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
        "partitions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "vendor", "onnx_nodes", "ops", "rules", "inputs", "outputs",
                             "constant_bytes", "boundary_bytes"],
                "properties": {
                    "name": {"type": "string"},
                    "vendor": {"type": "string"},
                    "onnx_nodes": {"type": "array", "items": {"type": "string"}},
                    "ops": {"type": "integer"},
                    "rules": {"type": "array", "items": {"type": "string"}},
                    "inputs": {"type": "array", "items": _TENSOR},
                    "outputs": {"type": "array", "items": _TENSOR},
                    "constant_bytes": {"type": "integer"},
                    "boundary_bytes": {"type": "integer"},
                },
            },
        },
        "host_ops": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["op_type", "nodes", "ops", "reasons"],
                "properties": {
                    "op_type": {"type": "string"},
                    "nodes": {"type": "array", "items": {"type": "string"}},
                    "ops": {"type": "integer"},
                    "reasons": _REASONS,
                },
            },
        },
        "nodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "op_type", "placement", "inputs", "outputs", "detail"],
                "properties": {
                    "name": {"type": "string"},
                    "op_type": {"type": "string"},
                    "placement": {"type": "string"},
                    "vendor": {"type": ["string", "null"]},
                    "inputs": {"type": "array", "items": {"type": "string"}},
                    "outputs": {"type": "array", "items": {"type": "string"}},
                    "detail": {"type": "string"},
                    # present (true) when the node is the core of a quantized node unit a vendor took as one op
                    "quantized_unit": {"const": True},
                },
            },
        },
        "inputs": {"type": "array", "items": _TENSOR},
        "outputs": {"type": "array", "items": _TENSOR},
        "prepared": {
            "type": "object",
            "required": ["simplifier", "nodes"],
            "properties": {
                "simplifier": {"type": "string"},
                "nodes": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "memory": {
            "type": "object",
            "required": ["planned_bytes", "lower_bound_bytes", "model_lower_bound_bytes", "planned_source",
                         "lower_bound_source", "model_lower_bound_source", "scope"],
            "properties": {
                # present after a build (--verify): what each partition's vendor runtime reports
                "runtimes": {"type": "array", "items": {
                    "type": "object",
                    "required": ["partition", "vendor", "workspace_bytes", "constant_bytes"]}},
                # an int, or a formula of the symbolic dims that have no upper bound ("768*batch*seq")
                "total_planned_bytes": {"type": ["integer", "string"]},
                "at_bounds": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
        "verify": {"type": "object", "required": ["status"]},
        # present after measured placement: each rule-based partition's ms per place, where it went and why
        "placement": {
            "type": "object",
            "required": ["decisions", "candidate_builds", "min_speedup"],
            "properties": {"decisions": {"type": "array", "items": {
                "type": "object",
                "required": ["partition", "vendor", "onnx_nodes", "times_ms", "estimated", "place", "reason"]}}},
        },
        # present when a vendor option is not its default (or an environment variable set it):
        # vendor -> option -> {value, default, source[, note]}
        "vendor_options": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": {
                "type": "object",
                "required": ["value", "default", "source"],
                "properties": {"source": {"enum": ["default", "vendor", "build", "environment"]},
                               "note": {"type": "string"}}}}},
    },
}


# -- building the report dict --------------------------------------------------------
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


def _reasons_text(reasons: Mapping[str, str]) -> str:
    return "; ".join(f"{vendor}: {reason}" for vendor, reason in reasons.items())


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
            lines.append(f"{decision.op} on host: {_reasons_text(decision.reasons)}")
        else:
            declined = f" ({_reasons_text(decision.reasons)})" if decision.reasons else ""
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
    :func:`byoc.pipeline.builder.vendor_option_settings` give them) adds the
    options that are not their defaults. ``time`` is a profile's
    :meth:`~byoc.pipeline.profile.Profile.to_json` (the CLI's ``--profile``).
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
            }
            for p in plan.partitions
        ],
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


# -- rendering ---------------------------------------------------------------------------
def render(report: Mapping, fmt: str) -> str:
    """``report`` drawn as ``fmt`` (one of :data:`FORMATS`); text ends with a newline."""
    renderers = {"text": render_text, "json": render_json, "dot": render_dot, "html": render_html}
    if fmt not in renderers:
        raise ByocError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderers[fmt](report)


def render_json(report: Mapping) -> str:
    """Stable JSON: keys in schema order, two-space indent."""
    return json.dumps(report, indent=2) + "\n"


def _shape(t: Mapping) -> str:
    """``1x3x224x224``; a shape with a symbolic dim is joined with ``×`` (``batch×seq*16``), where an ``x``
    would run into the dims' names."""
    dims = t["shape"]
    return ("x" if all(isinstance(d, int) for d in dims) else "×").join(str(d) for d in dims) or "scalar"


def _tensors(tensors, name_width: Optional[int] = None) -> str:
    return ", ".join(f"{_middle(t['name'], name_width)} {_shape(t)} {t['dtype']}" for t in tensors) or "-"


#: the width the text report's lines keep within (JSON and HTML keep every name whole)
TEXT_WIDTH = 120
_NAME_WIDTH = 48  # a tensor name in the text report's partition lines, shortened in the middle beyond it


def _middle(text: str, width: Optional[int]) -> str:
    """``text``, or its start and end around "…" when it is longer than ``width``."""
    if width is None or len(text) <= width:
        return text
    tail = (width - 1) // 2
    return f"{text[:width - 1 - tail]}…{text[len(text) - tail:]}"


def _wrap(line: str, width: int = TEXT_WIDTH, hang: int = 4) -> list[str]:
    """``line`` within ``width``, continued ``hang`` further in: broken after a comma in the line's second
    half, else at its last space. A word longer than a whole line is shortened in the middle."""
    if len(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    words = [_middle(w, width - indent - hang) for w in line[indent:].split(" ") if w]
    if not words:
        return [""]
    lines, current = [], [" " * indent + words[0]]
    for word in words[1:]:
        if len(" ".join(current + [word])) <= width:
            current.append(word)
            continue
        cut = next((i + 1 for i in range(len(current) - 1, 0, -1) if current[i].endswith(",")
                    and len(" ".join(current[:i + 1])) >= width // 2), len(current))
        lines.append(" ".join(current[:cut]))
        current = [" " * (indent + hang) + (current[cut:] + [word])[0]] + (current[cut:] + [word])[1:]
    return lines + [" ".join(current)]


def _table(header: list[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = []
    for row in [header] + rows:
        cells = [str(c).ljust(w) for c, w in zip(row, widths)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _counts(mapping: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in mapping.items())


def render_text(report: Mapping) -> str:
    """The human report: summary, partition table, host ops by reason, memory, verification."""
    s = report["summary"]
    pol = report["policies"]
    lines = [
        f"byoc partition report: {report['model']}",
        f"vendors: {', '.join(report['vendors']) or '-'}   target: {report['target']}   "
        f"min_ops: {pol['min_ops']}   keep_on_host: {', '.join(pol['keep_on_host']) or '-'}",
        *_vendor_options_text(report),
        "",
        "Summary",
        *_table(["", ""], [
            ["ONNX nodes", str(s["onnx_nodes"])],
            ["total ops", str(s["total_ops"])],
            ["offloaded ops", f"{sum(s['offloaded_ops'].values())}"
                              + (f"  ({_counts(s['offloaded_ops'])})" if s["offloaded_ops"] else "")],
            ["host ops", str(s["host_ops"])],
            ["partitions", f"{sum(s['partitions'].values())}"
                           + (f"  ({_counts(s['partitions'])})" if s["partitions"] else "")],
        ])[1:],
        "",
        "Partitions",
    ]
    parts = report["partitions"]
    if parts:
        lines += _partitions_text(parts, {n["name"] for n in report["nodes"] if n.get("quantized_unit")})
    else:
        lines.append("  none: every op runs on the host")
    lines += ["", "Host ops (grouped by reason)"]
    if report["host_ops"]:
        for group in report["host_ops"]:
            count = len(group["nodes"])
            lines.append(f"  {group['op_type']}: {count} node{'s' if count != 1 else ''} — "
                         f"{_reasons_text(group['reasons']) or 'no vendor asked'}")
            lines.append(f"      {', '.join(group['nodes'])}")
    else:
        lines.append("  none: every op is offloaded")
    lines += _prepared_text(report)
    # Lines that list the model's names wrap; the memory section's fixed explanations are as the docs show them.
    lines = [wrapped for line in lines for wrapped in _wrap(line)]
    memory = report.get("memory")
    if memory:
        rows, notes = _memory_rows(memory)
        lines += ["", "Memory (activations)",
                  *_table(["", "", ""], [[what, f"{n} bytes", how] for what, n, how in rows])[1:],
                  *(f"  {note}" for note in notes)]
    verify = report.get("verify")
    if verify:
        lines += ["", f"Verification: {verify['status']}"]
        lines += [wrapped for line in verify.get("lines", []) for wrapped in _wrap(f"  {line}")]
    if report.get("placement"):
        heading, header, rows = _placement_rows(report["placement"])
        lines += ["", heading, *_table(header, rows)]
    if report.get("time"):
        lines += ["", *_time_text(report["time"])]
    return "\n".join(lines) + "\n"


def _placement_rows(placement: Mapping) -> tuple[str, list[str], list[list[str]]]:
    """The Placement section: a heading, and per rule-based partition its time in each place and the
    decision (the text and HTML reports show the same rows)."""
    heading = (f"Placement (measured: a vendor keeps a partition when it is at least {placement['min_speedup']:g}x "
               f"faster than every other place; {placement['candidate_builds']} candidate build(s))")
    rows = []
    for d in placement["decisions"]:
        times = quote_times(d["times_ms"], d["estimated"], d.get("bounds"))
        rows.append([d["partition"], d["vendor"], times, d["place"]])
    return heading, ["partition", "rules gave it to", "ms per run, fastest first", "placed on"], rows


def _time_rows(time: Mapping) -> list[tuple[str, str, str, float, float, list]]:
    """(name, where, calls, ms per run, share, ONNX nodes) for each partition and host function, the VM's builtins
    as one row, and the time outside any call: the rows the text and HTML Time sections show."""
    rows = [(c["name"], c["where"], f"{c['calls']:g}", c["median_ms"], c["share"], c.get("onnx_nodes", []))
            for c in time["calls"] if c["where"] != "vm"]
    builtins = [c for c in time["calls"] if c["where"] == "vm"]
    if builtins:
        rows.append(("VM builtins", "vm", f"{sum(c['calls'] for c in builtins):g}",
                     sum(c["median_ms"] for c in builtins), sum(c["share"] for c in builtins), []))
    hooked = time["hooked_median_ms"]
    rows.append(("outside any call", "vm", "", time["outside_ms"], time["outside_ms"] / hooked if hooked else 0.0,
                 []))
    return rows


#: a host function's name in the text Time table (fusion names one after every op it holds): its ends
_CALL_WIDTH = 40


def _nodes_text(nodes: list, shown: int = 3) -> str:
    """The first ``shown`` of a call's ONNX nodes, and how many more."""
    return ", ".join(nodes[:shown]) + (f" (+{len(nodes) - shown})" if len(nodes) > shown else "")


def _time_steps(time: Mapping) -> list[tuple[str, list[tuple[str, float]]]]:
    """Per partition that has steps: (name, [(implementation, ms per run)]), summed by implementation, largest first."""
    found = []
    for c in time["calls"]:
        steps: dict = {}
        for step in c.get("steps", []):
            steps[step["implementation"]] = steps.get(step["implementation"], 0.0) + step["ms"]
        if steps:
            found.append((c["name"], sorted(steps.items(), key=lambda kv: -kv[1])))
    return found


def _time_heading(time: Mapping) -> str:
    return (f"Time ({time['runs']} runs: {time['run_median_ms']:.3f} ms median; the parts below from "
            f"instrumented runs of {time['hooked_median_ms']:.3f} ms)")


def _time_text(time: Mapping) -> list[str]:
    """The Time section: each partition and host function per run, a partition's steps summed by what ran them."""
    lines = [_time_heading(time)]
    lines += _table(["call", "where", "calls", "ms per run", "share", "ONNX nodes"],
                    [[_middle(name, _CALL_WIDTH), where, calls, f"{ms:.3f}", f"{share:.1%}", _nodes_text(nodes)]
                     for name, where, calls, ms, share, nodes in _time_rows(time)])
    for name, steps in _time_steps(time):
        lines += _wrap(f"  {name} steps: " + ", ".join(f"{impl} {ms:.3f} ms" for impl, ms in steps))
    return lines


def _time_html(report: Mapping) -> list[str]:
    """The Time section as bars, one per row of :func:`_time_rows`, as wide as its share of the run, in the
    colour of its placement in the graph."""
    esc = html.escape
    time = report["time"]
    colours = _colours(report)
    bars = []
    for name, where, calls, ms, share, nodes in _time_rows(time):
        colour = colours.get(name, colours[HOST] if where == "host" else "#bbb")
        bars.append(f'<div class="bar-row" data-name="{esc(name)}" data-ms="{ms:.6f}" '
                    f'title="{esc(", ".join(nodes))}">'
                    f'<span class="bar-label">{esc(name)} ({esc(where)})</span>'
                    f'<span class="bar-track"><span class="bar" style="width:{100 * share:.2f}%;'
                    f'background:{colour}"></span></span>'
                    f'<span class="bar-ms">{ms:.3f} ms · {share:.1%}</span></div>')
    steps = [_html_table([f"{name} step (what ran it)", "ms per run"], [[impl, f"{ms:.3f}"] for impl, ms in found])
             for name, found in _time_steps(time)]
    return [f"<h2>{esc(_time_heading(time))}</h2>", '<div class="time">', *bars, "</div>", *steps]


def _partitions_text(parts: list, units: set) -> list[str]:
    """The partition table, then each partition's nodes.

    A table too wide for :data:`TEXT_WIDTH` (torch's tensor names, as
    ``/layer1/layer1.0/conv1/Conv_output_0``, made it 250 characters) leaves
    the boundary tensors to a line each per partition, long names shortened
    in the middle.
    """
    header = ["name", "vendor", "nodes", "ops", "inputs", "outputs", "const bytes", "boundary bytes"]
    rows = [[p["name"], p["vendor"], str(len(p["onnx_nodes"])), str(p["ops"]), _tensors(p["inputs"]),
             _tensors(p["outputs"]), str(p["constant_bytes"]), str(p["boundary_bytes"])] for p in parts]
    lines = _table(header, rows)
    tensors = max(len(line) for line in lines) > TEXT_WIDTH
    if tensors:
        lines = _table([c for i, c in enumerate(header) if i not in (4, 5)],
                       [[c for i, c in enumerate(row) if i not in (4, 5)] for row in rows])
    lines.append("")
    for p in parts:
        if tensors:
            lines += [f"  {p['name']} inputs: {_tensors(p['inputs'], _NAME_WIDTH)}",
                      f"  {p['name']} outputs: {_tensors(p['outputs'], _NAME_WIDTH)}"]
        lines.append(f"  {p['name']} nodes: {', '.join(n + (' (QDQ int8)' if n in units else '') for n in p['onnx_nodes'])}")
    return lines


def _vendor_options_text(report: Mapping) -> list[str]:
    """``vendor options: dnnl.winograd=off (BYOC_DNNL_WINOGRAD=off from the environment)``, or nothing."""
    chosen = [f"{vendor}.{name}={format_value(record['value'])}" + (f" ({record['note']})" if record.get("note") else "")
              for vendor, options in report.get("vendor_options", {}).items() for name, record in options.items()]
    return [f"vendor options: {', '.join(chosen)}"] if chosen else []


def _memory_rows(memory: Mapping) -> tuple[list[tuple[str, int, str]], list[str]]:
    """The memory section as (what, bytes, how) rows, and the notes under it."""
    rows = [("host planned", memory["planned_bytes"], memory["planned_source"]),
            ("host lower bound", memory["lower_bound_bytes"], memory["lower_bound_source"]),
            ("model lower bound", memory["model_lower_bound_bytes"], memory["model_lower_bound_source"])]
    notes = [f"scope: {memory['scope']}"]
    if memory.get("at_bounds"):
        notes.append("symbolic dims at their upper bound: "
                     + ", ".join(f"{name}={size}" for name, size in memory["at_bounds"].items()))
    if any(isinstance(row[1], str) for row in rows):
        notes.append("a formula reads the sizes of the dims without an upper bound (bound one with --dim NAME=..MAX)")
    runtimes = memory.get("runtimes")
    if runtimes is None:
        notes.append("vendor runtimes: not built here (--verify builds the model and adds what each reports)")
        return rows, notes
    for r in runtimes:
        rows.append((f"{r['partition']} ({r['vendor']})", r["workspace_bytes"],
                     f"workspace per call, as its runtime reports it; constants {r['constant_bytes']} bytes"))
    if memory.get("at_bounds") is not None or any(isinstance(row[1], str) for row in rows):
        notes.append("a vendor partition with symbolic dims makes its workspace per shape, at the shape's first "
                     "call: it is not listed")
    rows.append(("planned in all", memory["total_planned_bytes"], "host planned + every vendor runtime's workspace"))
    return rows, notes


def _prepared_groups(report: Mapping) -> list[tuple[str, list[str]]]:
    """(what became of them, node names) in model order, from ``report["prepared"]``."""
    groups: dict[str, list[str]] = {}
    for name, fate in report.get("prepared", {}).get("nodes", {}).items():
        groups.setdefault(fate, []).append(name)
    return list(groups.items())


def _prepared_text(report: Mapping) -> list[str]:
    prepared = report.get("prepared")
    if not prepared:
        return []
    count = len(prepared["nodes"])
    by = f" by {prepared['simplifier']}" if prepared["simplifier"] else ""
    lines = ["", f"Model preparation{by}: {count} ONNX node{'s' if count != 1 else ''} "
             f"not imported as {'themselves' if count != 1 else 'itself'}"]
    for fate, names in _prepared_groups(report):
        lines.append(f"  {fate}: {', '.join(names)}")
    return lines


def _partition_colour(index: int) -> str:
    """A colour per partition: the palette first, then hues spaced by the golden angle (never the same twice)."""
    if index < len(_PALETTE):
        return _PALETTE[index]
    red, green, blue = colorsys.hls_to_rgb((index * 0.381966) % 1.0, 0.75, 0.6)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


def _colours(report: Mapping) -> dict[str, str]:
    """Fill colour per placement: each partition its own, then the host and 'none'."""
    colours = {p["name"]: _partition_colour(i) for i, p in enumerate(report["partitions"])}
    colours[HOST] = _HOST_COLOUR
    colours[NO_OP] = _NO_OP_COLOUR
    return colours


def _node_colour(node: Mapping, colours: Mapping[str, str]) -> str:
    first = node["placement"].split("+")[0]  # a node split across partitions takes its first one's
    return colours.get(first, colours[HOST] if first == HOST else colours[NO_OP])


def _legend(report: Mapping) -> list[tuple[str, str]]:
    """(label, colour) for every placement, as the HTML legend shows them."""
    colours = _colours(report)
    rows = [(f"{p['name']} ({p['vendor']})", colours[p["name"]]) for p in report["partitions"]]
    rows.append(("host: ops no vendor took (hover a node for why)", colours[HOST]))
    rows.append(("none: nothing left to run after import (folded or removed)", colours[NO_OP]))
    return rows


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _constant_nodes(report: Mapping) -> dict[str, list[str]]:
    """Consumer node -> the constant nodes folded into its box in the drawing: nodes that read no graph input,
    directly or through other such nodes (a torch export's row of ``Constant`` nodes), with the constants
    they read in turn, so they do not crowd the graph. A constant that is a graph output stays drawn."""
    outputs = {t["name"] for t in report["outputs"]}
    producer: dict[str, str] = {}  # constant tensor -> its node
    ancestors: dict[str, list[str]] = {}  # constant node -> itself and the constant nodes it reads
    for node in report["nodes"]:  # topological order: a constant's producers come first
        if all(name in producer for name in node["inputs"]) and not outputs & set(node["outputs"]):
            ancestors[node["name"]] = [a for name in node["inputs"] for a in ancestors[producer[name]]] \
                + [node["name"]]
            producer.update({name: node["name"] for name in node["outputs"]})
    folded: dict[str, list[str]] = {}
    for node in report["nodes"]:
        if node["name"] not in ancestors:
            found = [a for name in node["inputs"] if name in producer for a in ancestors[producer[name]]]
            if found:
                folded[node["name"]] = list(dict.fromkeys(found))
    return folded


def _hover_text(node: Mapping, folded: Mapping[str, list[str]]) -> str:
    """A drawn node's tooltip: where it went and why, and the constant nodes folded into its box."""
    text = f"{node['name']} ({node['op_type']}): {node['placement']}\n{node['detail']}"
    if node["name"] in folded:
        text += f"\nconstants folded in: {', '.join(folded[node['name']])}"
    return text


def _drawn_nodes(report: Mapping) -> list[Mapping]:
    """The nodes the graph draws: all but the constants :func:`_constant_nodes` folds into their consumers."""
    folded = {name for names in _constant_nodes(report).values() for name in names}
    return [node for node in report["nodes"] if node["name"] not in folded]


def _edges(report: Mapping) -> list[tuple[str, str, str]]:
    """(from id, to id, tensor) for every data edge the graph draws, inputs and outputs included."""
    producer = {t["name"]: f"in:{t['name']}" for t in report["inputs"]}
    nodes = _drawn_nodes(report)
    for node in nodes:
        for name in node["outputs"]:
            producer[name] = f"n:{node['name']}"
    edges = []
    for node in nodes:
        for name in dict.fromkeys(node["inputs"]):
            if name in producer:
                edges.append((producer[name], f"n:{node['name']}", name))
    for t in report["outputs"]:
        if t["name"] in producer:
            edges.append((producer[t["name"]], f"out:{t['name']}", t["name"]))
    return edges


def render_dot(report: Mapping) -> str:
    """Graphviz DOT: one cluster per partition, nodes filled by vendor, tooltips with the reason."""
    colours = _colours(report)
    lines = [
        "digraph byoc {",
        f"  label={_dot_str('byoc partitions: ' + report['model'])};",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    for t in report["inputs"]:
        lines.append(f"  {_dot_str('in:' + t['name'])} [shape=ellipse, fillcolor=\"#ffffff\", "
                     f"label={_dot_str(t['name'] + chr(10) + _shape(t) + ' ' + t['dtype'])}];")
    by_placement: dict[str, list[Mapping]] = defaultdict(list)
    for node in _drawn_nodes(report):
        by_placement[node["placement"]].append(node)
    folded = _constant_nodes(report)

    def node_line(node, indent):
        label = f"{node['name']}\n{node['op_type']}"
        tooltip = _hover_text(node, folded)
        return (f"{indent}{_dot_str('n:' + node['name'])} [label={_dot_str(label)}, "
                f"fillcolor=\"{_node_colour(node, colours)}\", tooltip={_dot_str(tooltip)}];")

    for part in report["partitions"]:
        lines.append(f"  subgraph {_dot_str('cluster_' + part['name'])} {{")
        lines.append(f"    label={_dot_str(part['name'] + ' (' + part['vendor'] + ')')}; style=dashed;")
        lines += [node_line(n, "    ") for n in by_placement.get(part["name"], [])]
        lines.append("  }")
    parts = {p["name"] for p in report["partitions"]}
    lines += [node_line(n, "  ") for n in _drawn_nodes(report) if n["placement"] not in parts]
    for t in report["outputs"]:
        lines.append(f"  {_dot_str('out:' + t['name'])} [shape=ellipse, fillcolor=\"#ffffff\", "
                     f"label={_dot_str(t['name'] + chr(10) + _shape(t) + ' ' + t['dtype'])}];")
    for src, dst, tensor in _edges(report):
        lines.append(f"  {_dot_str(src)} -> {_dot_str(dst)} [tooltip={_dot_str(tensor)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- HTML: a self-contained page with an inline SVG drawn here ---------------------------------
_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 160, 40, 24, 44, 20


_PAGE_WIDTH = 1200  # the width the layout aims to fill; the SVG then scales to the page


def _layout(report: Mapping) -> tuple[dict[str, tuple[float, float]], int, int]:
    """Layered layout: depth = longest path from an input; order in a layer by parents' mean x.

    A deep, narrow graph (a CNN is mostly a chain) would be a thin column down
    the page, so its layers wrap into side-by-side columns, left to right,
    until they fill about :data:`_PAGE_WIDTH`.
    """
    edges = _edges(report)
    parents: dict[str, list[str]] = defaultdict(list)
    for src, dst, _ in edges:
        parents[dst].append(src)
    ids = ([f"in:{t['name']}" for t in report["inputs"]] + [f"n:{n['name']}" for n in _drawn_nodes(report)]
           + [f"out:{t['name']}" for t in report["outputs"]])
    depth: dict[str, int] = {}
    for ident in ids:  # ONNX nodes are topologically sorted, so one pass suffices
        depth[ident] = 1 + max((depth.get(p, 0) for p in parents[ident]), default=-1)
    layers: dict[int, list[str]] = defaultdict(list)
    for ident in ids:
        layers[depth[ident]].append(ident)
    if not layers:
        return {}, 100, 100
    breadth = max(len(m) for m in layers.values())
    column_width = breadth * (_BOX_W + _GAP_X) + _GAP_X
    columns = max(1, min(_PAGE_WIDTH // column_width, len(layers)))
    rows = -(-len(layers) // columns)  # layers per column, rounded up
    position: dict[str, tuple[float, float]] = {}
    for level in sorted(layers):
        members = layers[level]
        order = {ident: i for i, ident in enumerate(members)}
        members.sort(key=lambda i: (sum(position[p][0] for p in parents[i]) / len(parents[i])
                                    if parents[i] else -1.0, order[i]))
        column, row = divmod(level, rows)
        for index, ident in enumerate(members):
            position[ident] = (_MARGIN + column * column_width + index * (_BOX_W + _GAP_X),
                               _MARGIN + row * (_BOX_H + _GAP_Y))
    width = _MARGIN * 2 + columns * column_width
    height = _MARGIN * 2 + rows * (_BOX_H + _GAP_Y)
    return position, width, height


def _svg(report: Mapping) -> str:
    colours = _colours(report)
    position, width, height = _layout(report)
    esc = html.escape
    # Scales to the page width; never drawn larger than its own size (small graphs stay readable).
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="100%" viewBox="0 0 {width} {height}" '
           f'style="max-width:{width}px" preserveAspectRatio="xMinYMin meet" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">']
    for src, dst, tensor in _edges(report):
        (x1, y1), (x2, y2) = position[src], position[dst]
        x1, y1, x2 = x1 + _BOX_W / 2, y1 + _BOX_H, x2 + _BOX_W / 2
        mid = (y1 + y2) / 2
        out.append(f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} '
                   f'{x2:.0f},{y2:.0f}" fill="none" stroke="#888"><title>{esc(tensor)}</title></path>')
    for prefix, tensors in (("in:", report["inputs"]), ("out:", report["outputs"])):
        for t in tensors:
            x, y = position[prefix + t["name"]]
            out.append(f'<g class="tensor" data-name="{esc(t["name"])}"><title>{esc(t["name"])} '
                       f'{esc(_shape(t))} {esc(t["dtype"])}</title>'
                       f'<ellipse cx="{x + _BOX_W / 2:.0f}" cy="{y + _BOX_H / 2:.0f}" rx="{_BOX_W / 2:.0f}" '
                       f'ry="{_BOX_H / 2:.0f}" fill="#fff" stroke="#555"/>'
                       f'<text x="{x + _BOX_W / 2:.0f}" y="{y + _BOX_H / 2 + 4:.0f}" text-anchor="middle">'
                       f'{esc(t["name"])}</text></g>')
    folded = _constant_nodes(report)
    for node in _drawn_nodes(report):
        x, y = position[f"n:{node['name']}"]
        title = _hover_text(node, folded)
        dashed = ' stroke-dasharray="4 3"' if node["placement"] == NO_OP else ""
        out.append(
            f'<g class="node" data-name="{esc(node["name"])}" data-placement="{esc(node["placement"])}">'
            f'<title>{esc(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" '
            f'fill="{_node_colour(node, colours)}" stroke="#333"{dashed}/>'
            f'<text x="{x + _BOX_W / 2}" y="{y + 16}" text-anchor="middle" font-weight="bold">'
            f'{esc(node["name"][:24])}</text>'
            f'<text x="{x + _BOX_W / 2}" y="{y + 31}" text-anchor="middle">'
            f'{esc(node["op_type"])} · {esc(node["placement"][:16])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(report: Mapping) -> str:
    """A self-contained page (no network): legend, graph as inline SVG, and the report's tables."""
    esc = html.escape
    legend = "".join(
        f'<span class="key"><span class="swatch" style="background:{colour}"></span>{esc(label)}</span>'
        for label, colour in _legend(report)
    )
    s = report["summary"]
    summary = _html_table(["what", "count"], [
        ["ONNX nodes", s["onnx_nodes"]], ["total ops", s["total_ops"]],
        ["offloaded ops", _counts(s["offloaded_ops"]) or "0"], ["host ops", s["host_ops"]],
        ["partitions", _counts(s["partitions"]) or "0"],
    ])
    partitions = _html_table(
        ["name", "vendor", "ONNX nodes", "ops", "inputs", "outputs", "const bytes", "boundary bytes"],
        [[p["name"], p["vendor"], ", ".join(p["onnx_nodes"]), p["ops"], _tensors(p["inputs"]),
          _tensors(p["outputs"]), p["constant_bytes"], p["boundary_bytes"]] for p in report["partitions"]],
    )
    host = _html_table(
        ["op type", "nodes", "reasons"],
        [[g["op_type"], ", ".join(g["nodes"]), _reasons_text(g["reasons"])] for g in report["host_ops"]],
    )
    sections = [
        f"<h1>byoc partitions: {esc(report['model'])}</h1>",
        f"<p>vendors: {esc(', '.join(report['vendors']) or '-')} · target: {esc(report['target'])} · "
        f"hover a node for where it went and why.</p>",
        f'<div class="legend">{legend}</div>',
        f'<div class="graph">{_svg(report)}</div>',
        "<h2>Summary</h2>", summary, "<h2>Partitions</h2>", partitions,
        "<h2>Host ops (grouped by reason)</h2>", host,
    ]
    if report.get("prepared"):
        sections += ["<h2>Model preparation</h2>", _html_table(
            ["what became of them", "ONNX nodes"],
            [[fate, ", ".join(names)] for fate, names in _prepared_groups(report)])]
    memory = report.get("memory")
    if memory:
        rows, notes = _memory_rows(memory)
        sections += ["<h2>Memory (activations)</h2>", _html_table(["", "bytes", "how"], [list(r) for r in rows]),
                     *(f"<p>{esc(note)}</p>" for note in notes)]
    verify = report.get("verify")
    if verify:
        sections += [f"<h2>Verification: {esc(verify['status'])}</h2>",
                     "<pre>" + esc("\n".join(verify.get("lines", []))) + "</pre>"]
    if report.get("placement"):
        heading, header, rows = _placement_rows(report["placement"])
        sections += [f"<h2>{esc(heading)}</h2>", _html_table(header, rows)]
    if report.get("time"):
        sections += _time_html(report)
    style = (
        "body{font-family:Helvetica,Arial,sans-serif;margin:16px;color:#222}"
        "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
        "text-align:left;font-size:13px}.graph{overflow:auto;border:1px solid #eee}"
        ".legend{margin:8px 0}.key{margin-right:14px}.swatch{display:inline-block;width:12px;height:12px;"
        "border:1px solid #333;margin-right:4px;vertical-align:middle}"
        ".bar-row{display:flex;align-items:center;margin:2px 0;font-size:13px}.bar-label{width:260px;"
        "overflow:hidden;text-overflow:ellipsis;white-space:nowrap}.bar-track{width:480px;height:14px;"
        "background:#f4f4f4;margin:0 8px}.bar{display:block;height:14px}"
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>byoc partitions: {esc(report['model'])}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        + "\n".join(sections) + "\n</body>\n</html>\n"
    )

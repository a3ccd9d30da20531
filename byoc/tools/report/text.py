"""The text report, as ``python -m byoc.partition`` prints it: lines within :data:`TEXT_WIDTH` columns."""

from __future__ import annotations

from typing import Mapping

from byoc.tools.report.rows import (counts_text, memory_rows, middle_cut, placement_rows, prepared_groups, reasons_text,
                                    tensors_text, time_heading, time_rows, time_steps)
from byoc.vendor.options import format_value

#: the width the text report's lines keep within (JSON and HTML keep every name whole)
TEXT_WIDTH = 120


_NAME_WIDTH = 48  # a tensor name in the text report's partition lines, shortened in the middle beyond it


def _wrap(line: str, width: int = TEXT_WIDTH, hang: int = 4) -> list[str]:
    """``line`` within ``width``, continued ``hang`` further in: broken after a comma in the line's second
    half, else at its last space. A word longer than a whole line is shortened in the middle."""
    if len(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    words = [middle_cut(w, width - indent - hang) for w in line[indent:].split(" ") if w]
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
                              + (f"  ({counts_text(s['offloaded_ops'])})" if s["offloaded_ops"] else "")],
            ["host ops", str(s["host_ops"])],
            ["partitions", f"{sum(s['partitions'].values())}"
                           + (f"  ({counts_text(s['partitions'])})" if s["partitions"] else "")],
        ])[1:],
        "",
        "Partitions",
    ]
    parts = report["partitions"]
    if parts:
        lines += _partitions_text(parts, {n["name"] for n in report["nodes"] if n.get("quantized_unit")})
    else:
        lines.append("  none: every op runs on the host")
    specialized = [p for p in parts if p.get("specializations")]
    if specialized:
        lines += ["", "Specializations (static-shape partitions, compiled once per size)"]
        lines += [line for p in specialized for line in _specializations_text(p)]
    for vendor, device in report.get("device", {}).items():
        lines += ["", f"Device memory ({vendor}: {device['memory']})"]
        lines += [line for text in _device_text(device) for line in _wrap(text, hang=4)]
    if report.get("loops"):
        lines += ["", "Loops the host runs (each body partitioned on its own)"]
        lines += [f"  {loop['node']}: body partitions {', '.join(loop['partitions']) or 'none'}; body nodes with "
                  f"host ops {', '.join(loop['host_nodes']) or 'none'}" for loop in report["loops"]]
    if report.get("fallbacks"):
        lines += ["", "Fallbacks (partitions their vendors gave back)"]
        lines += [f"  {f['partition']} ({f['ops']} op{'s' if f['ops'] != 1 else ''}) back from {f['vendor']}: "
                  f"{f['reason']}" for f in report["fallbacks"]]
    lines += ["", "Host ops (grouped by reason)"]
    if report["host_ops"]:
        for group in report["host_ops"]:
            count = len(group["nodes"])
            lines.append(f"  {group['op_type']}: {count} node{'s' if count != 1 else ''} — "
                         f"{reasons_text(group['reasons']) or 'no vendor asked'}")
            lines.append(f"      {', '.join(group['nodes'])}")
    else:
        lines.append("  none: every op is offloaded")
    lines += _prepared_text(report)
    # Lines that list the model's names wrap; the memory section's fixed explanations are as the docs show them.
    lines = [wrapped for line in lines for wrapped in _wrap(line)]
    memory = report.get("memory")
    if memory:
        rows, notes = memory_rows(memory)
        lines += ["", "Memory (activations)",
                  *_table(["", "", ""], [[what, f"{n} bytes", how] for what, n, how in rows])[1:],
                  *(f"  {note}" for note in notes)]
    verify = report.get("verify")
    if verify:
        lines += ["", f"Verification: {verify['status']}"]
        lines += [wrapped for line in verify.get("lines", []) for wrapped in _wrap(f"  {line}")]
    if report.get("placement"):
        heading, header, rows = placement_rows(report["placement"])
        lines += ["", heading, *_table(header, rows)]
    if report.get("time"):
        lines += ["", *_time_text(report["time"])]
    return "\n".join(lines) + "\n"


#: a host function's name in the text Time table (fusion names one after every op it holds): its ends
_CALL_WIDTH = 40


def _nodes_text(nodes: list, shown: int = 3) -> str:
    """The first ``shown`` of a call's ONNX nodes, and how many more."""
    return ", ".join(nodes[:shown]) + (f" (+{len(nodes) - shown})" if len(nodes) > shown else "")


def _time_text(time: Mapping) -> list[str]:
    """The Time section: each partition and host function per run, a partition's steps summed by what ran them."""
    lines = [time_heading(time)]
    lines += _table(["call", "where", "calls", "ms per run", "share", "ONNX nodes"],
                    [[middle_cut(name, _CALL_WIDTH), where, calls, f"{ms:.3f}", f"{share:.1%}", _nodes_text(nodes)]
                     for name, where, calls, ms, share, nodes in time_rows(time)])
    for name, steps in time_steps(time):
        lines += _wrap(f"  {name} steps: " + ", ".join(f"{impl} {ms:.3f} ms" for impl, ms in steps))
    return lines


def _partitions_text(parts: list, units: set) -> list[str]:
    """The partition table, then each partition's nodes.

    A table too wide for :data:`TEXT_WIDTH` (torch's tensor names, as
    ``/layer1/layer1.0/conv1/Conv_output_0``, made it 250 characters) leaves
    the boundary tensors to a line each per partition, long names shortened
    in the middle.
    """
    header = ["name", "vendor", "nodes", "ops", "inputs", "outputs", "const bytes", "boundary bytes"]
    rows = [[p["name"], p["vendor"], str(len(p["onnx_nodes"])), str(p["ops"]), tensors_text(p["inputs"]),
             tensors_text(p["outputs"]), str(p["constant_bytes"]), str(p["boundary_bytes"])] for p in parts]
    lines = _table(header, rows)
    tensors = max(len(line) for line in lines) > TEXT_WIDTH
    if tensors:
        lines = _table([c for i, c in enumerate(header) if i not in (4, 5)],
                       [[c for i, c in enumerate(row) if i not in (4, 5)] for row in rows])
    lines.append("")
    for p in parts:
        if tensors:
            lines += [f"  {p['name']} inputs: {tensors_text(p['inputs'], _NAME_WIDTH)}",
                      f"  {p['name']} outputs: {tensors_text(p['outputs'], _NAME_WIDTH)}"]
        lines.append(f"  {p['name']} nodes: {', '.join(n + (' (QDQ int8)' if n in units else '') for n in p['onnx_nodes'])}")
        if p.get("split"):
            lines.append(f"  {p['name']} split off by its vendor's partition check: {p['split']}")
    return lines


def _device_text(device: Mapping) -> list[str]:
    """A device's lines: its totals per run, then what each partition copies and keeps there."""
    def size(value) -> str:
        return "? bytes (a dim is symbolic)" if value is None else f"{value} bytes"

    lines = [f"  per run: {size(device['to_device_bytes'])} to the device, {size(device['to_host_bytes'])} to the "
             f"host, {size(device['kept_bytes'])} of copies saved by values kept there; weights "
             f"{device['weights_bytes']} bytes, copied there once"]
    for p in device["partitions"]:
        kept = [f"reads {', '.join(p['reads_on_device'])} there"] if p["reads_on_device"] else []
        kept += [f"leaves {', '.join(p['leaves_on_device'])} there"] if p["leaves_on_device"] else []
        lines.append(f"  {p['name']}: {size(p['to_device_bytes'])} in, {size(p['to_host_bytes'])} out"
                     + (f"; {'; '.join(kept)}" if kept else ""))
    return lines


def _specializations_text(part: Mapping) -> list[str]:
    """A static-shape partition's sizes: the compiled ones, the refused ones with why, and any other size."""
    def sizes(entry) -> str:
        return ", ".join(f"{name}={size}" for name, size in entry["sizes"].items())

    compiled = [f"{sizes(s)} ({s['symbol']})" for s in part["specializations"] if "refused" not in s]
    lines = [f"  {part['name']} ({part['vendor']}): {'; '.join(compiled)}"]
    lines += [f"    {sizes(s)}: on the host, its partition check refused it: {s['refused']}"
              for s in part["specializations"] if "refused" in s]
    other = "on the host" if part["other_sizes"] == "host" else "refused by the artifact (InputShapeError)"
    lines.append(f"    any other size: {other}")
    return [wrapped for line in lines for wrapped in _wrap(line, hang=6)]


def _vendor_options_text(report: Mapping) -> list[str]:
    """``vendor options: dnnl.winograd=off (BYOC_DNNL_WINOGRAD=off from the environment)``, or nothing."""
    chosen = [f"{vendor}.{name}={format_value(record['value'])}" + (f" ({record['note']})" if record.get("note") else "")
              for vendor, options in report.get("vendor_options", {}).items() for name, record in options.items()]
    return [f"vendor options: {', '.join(chosen)}"] if chosen else []


def _prepared_text(report: Mapping) -> list[str]:
    prepared = report.get("prepared")
    if not prepared:
        return []
    count = len(prepared["nodes"])
    by = f" by {prepared['simplifier']}" if prepared["simplifier"] else ""
    lines = ["", f"Model preparation{by}: {count} ONNX node{'s' if count != 1 else ''} "
             f"not imported as {'themselves' if count != 1 else 'itself'}"]
    for fate, names in prepared_groups(report):
        lines.append(f"  {fate}: {', '.join(names)}")
    return lines

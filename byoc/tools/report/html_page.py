"""The report as one self-contained HTML page, with an inline SVG of the graph drawn here (no Graphviz needed)."""

from __future__ import annotations

import html
from collections import defaultdict
from typing import Mapping

from byoc.tools.report.graph_style import (constant_nodes, drawn_nodes, graph_edges, hover_text, legend_entries,
                                           node_colour, partition_colours)
from byoc.tools.report.rows import (counts_text, memory_rows, placement_rows, prepared_groups, reasons_text, shape_text,
                                    tensors_text, time_heading, time_rows, time_steps)
from byoc.tools.report.schema import HOST, NO_OP

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 160, 40, 24, 44, 20


_PAGE_WIDTH = 1200  # the width the layout aims to fill; the SVG then scales to the page


def _time_html(report: Mapping) -> list[str]:
    """The Time section as bars, one per row of :func:`time_rows`, as wide as its share of the run, in the
    colour of its placement in the graph."""
    esc = html.escape
    time = report["time"]
    colours = partition_colours(report)
    bars = []
    for name, where, calls, ms, share, nodes in time_rows(time):
        colour = colours.get(name, colours[HOST] if where == "host" else "#bbb")
        bars.append(f'<div class="bar-row" data-name="{esc(name)}" data-ms="{ms:.6f}" '
                    f'title="{esc(", ".join(nodes))}">'
                    f'<span class="bar-label">{esc(name)} ({esc(where)})</span>'
                    f'<span class="bar-track"><span class="bar" style="width:{100 * share:.2f}%;'
                    f'background:{colour}"></span></span>'
                    f'<span class="bar-ms">{ms:.3f} ms · {share:.1%}</span></div>')
    steps = [_html_table([f"{name} step (what ran it)", "ms per run"], [[impl, f"{ms:.3f}"] for impl, ms in found])
             for name, found in time_steps(time)]
    return [f"<h2>{esc(time_heading(time))}</h2>", '<div class="time">', *bars, "</div>", *steps]


def _layout(report: Mapping) -> tuple[dict[str, tuple[float, float]], int, int]:
    """Layered layout: depth = longest path from an input; order in a layer by parents' mean x.

    A deep, narrow graph (a CNN is mostly a chain) would be a thin column down
    the page, so its layers wrap into side-by-side columns, left to right,
    until they fill about :data:`_PAGE_WIDTH`.
    """
    edges = graph_edges(report)
    parents: dict[str, list[str]] = defaultdict(list)
    for src, dst, _ in edges:
        parents[dst].append(src)
    ids = ([f"in:{t['name']}" for t in report["inputs"]] + [f"n:{n['name']}" for n in drawn_nodes(report)]
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
    colours = partition_colours(report)
    position, width, height = _layout(report)
    esc = html.escape
    # Scales to the page width; never drawn larger than its own size (small graphs stay readable).
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="graph" width="100%" viewBox="0 0 {width} {height}" '
           f'style="max-width:{width}px" preserveAspectRatio="xMinYMin meet" '
           f'font-family="Helvetica, Arial, sans-serif" font-size="11">']
    for src, dst, tensor in graph_edges(report):
        (x1, y1), (x2, y2) = position[src], position[dst]
        x1, y1, x2 = x1 + _BOX_W / 2, y1 + _BOX_H, x2 + _BOX_W / 2
        mid = (y1 + y2) / 2
        out.append(f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} '
                   f'{x2:.0f},{y2:.0f}" fill="none" stroke="#888"><title>{esc(tensor)}</title></path>')
    for prefix, tensors in (("in:", report["inputs"]), ("out:", report["outputs"])):
        for t in tensors:
            x, y = position[prefix + t["name"]]
            out.append(f'<g class="tensor" data-name="{esc(t["name"])}"><title>{esc(t["name"])} '
                       f'{esc(shape_text(t))} {esc(t["dtype"])}</title>'
                       f'<ellipse cx="{x + _BOX_W / 2:.0f}" cy="{y + _BOX_H / 2:.0f}" rx="{_BOX_W / 2:.0f}" '
                       f'ry="{_BOX_H / 2:.0f}" fill="#fff" stroke="#555"/>'
                       f'<text x="{x + _BOX_W / 2:.0f}" y="{y + _BOX_H / 2 + 4:.0f}" text-anchor="middle">'
                       f'{esc(t["name"])}</text></g>')
    folded = constant_nodes(report)
    for node in drawn_nodes(report):
        x, y = position[f"n:{node['name']}"]
        title = hover_text(node, folded)
        dashed = ' stroke-dasharray="4 3"' if node["placement"] == NO_OP else ""
        out.append(
            f'<g class="node" data-name="{esc(node["name"])}" data-placement="{esc(node["placement"])}">'
            f'<title>{esc(title)}</title>'
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" '
            f'fill="{node_colour(node, colours)}" stroke="#333"{dashed}/>'
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
        for label, colour in legend_entries(report)
    )
    s = report["summary"]
    summary = _html_table(["what", "count"], [
        ["ONNX nodes", s["onnx_nodes"]], ["total ops", s["total_ops"]],
        ["offloaded ops", counts_text(s["offloaded_ops"]) or "0"], ["host ops", s["host_ops"]],
        ["partitions", counts_text(s["partitions"]) or "0"],
    ])
    partitions = _html_table(
        ["name", "vendor", "ONNX nodes", "ops", "inputs", "outputs", "const bytes", "boundary bytes"],
        [[p["name"], p["vendor"], ", ".join(p["onnx_nodes"]), p["ops"], tensors_text(p["inputs"]),
          tensors_text(p["outputs"]), p["constant_bytes"], p["boundary_bytes"]] for p in report["partitions"]],
    )
    host = _html_table(
        ["op type", "nodes", "reasons"],
        [[g["op_type"], ", ".join(g["nodes"]), reasons_text(g["reasons"])] for g in report["host_ops"]],
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
            [[fate, ", ".join(names)] for fate, names in prepared_groups(report)])]
    memory = report.get("memory")
    if memory:
        rows, notes = memory_rows(memory)
        sections += ["<h2>Memory (activations)</h2>", _html_table(["", "bytes", "how"], [list(r) for r in rows]),
                     *(f"<p>{esc(note)}</p>" for note in notes)]
    verify = report.get("verify")
    if verify:
        sections += [f"<h2>Verification: {esc(verify['status'])}</h2>",
                     "<pre>" + esc("\n".join(verify.get("lines", []))) + "</pre>"]
    if report.get("placement"):
        heading, header, rows = placement_rows(report["placement"])
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

"""The report as a Graphviz DOT graph: one box per ONNX node, coloured by where it runs."""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

from byoc.tools.report.graph_style import (constant_nodes, dot_string, drawn_nodes, graph_edges, hover_text,
                                           node_colour, partition_colours)
from byoc.tools.report.rows import shape_text


def render_dot(report: Mapping) -> str:
    """Graphviz DOT: one cluster per partition, nodes filled by vendor, tooltips with the reason."""
    colours = partition_colours(report)
    lines = [
        "digraph byoc {",
        f"  label={dot_string('byoc partitions: ' + report['model'])};",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    for t in report["inputs"]:
        lines.append(f"  {dot_string('in:' + t['name'])} [shape=ellipse, fillcolor=\"#ffffff\", "
                     f"label={dot_string(t['name'] + chr(10) + shape_text(t) + ' ' + t['dtype'])}];")
    by_placement: dict[str, list[Mapping]] = defaultdict(list)
    for node in drawn_nodes(report):
        by_placement[node["placement"]].append(node)
    folded = constant_nodes(report)

    def node_line(node, indent):
        label = f"{node['name']}\n{node['op_type']}"
        tooltip = hover_text(node, folded)
        return (f"{indent}{dot_string('n:' + node['name'])} [label={dot_string(label)}, "
                f"fillcolor=\"{node_colour(node, colours)}\", tooltip={dot_string(tooltip)}];")

    for part in report["partitions"]:
        lines.append(f"  subgraph {dot_string('cluster_' + part['name'])} {{")
        lines.append(f"    label={dot_string(part['name'] + ' (' + part['vendor'] + ')')}; style=dashed;")
        lines += [node_line(n, "    ") for n in by_placement.get(part["name"], [])]
        lines.append("  }")
    parts = {p["name"] for p in report["partitions"]}
    lines += [node_line(n, "  ") for n in drawn_nodes(report) if n["placement"] not in parts]
    for t in report["outputs"]:
        lines.append(f"  {dot_string('out:' + t['name'])} [shape=ellipse, fillcolor=\"#ffffff\", "
                     f"label={dot_string(t['name'] + chr(10) + shape_text(t) + ' ' + t['dtype'])}];")
    for src, dst, tensor in graph_edges(report):
        lines.append(f"  {dot_string(src)} -> {dot_string(dst)} [tooltip={dot_string(tensor)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"

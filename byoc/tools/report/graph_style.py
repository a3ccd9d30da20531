"""The model's graph as the drawn formats show it (DOT and HTML): which nodes are drawn, their edges, colours by
partition and the legend."""

from __future__ import annotations

import colorsys
from typing import Mapping

from byoc.tools.report.schema import HOST, NO_OP

_PALETTE = ("#8ecae6", "#ffb703", "#90be6d", "#f28482", "#cdb4db", "#a3c4bc", "#f4a261", "#b5e48c")


_HOST_COLOUR = "#d9d9d9"


_NO_OP_COLOUR = "#ffffff"


def _partition_colour(index: int) -> str:
    """A colour per partition: the palette first, then hues spaced by the golden angle (never the same twice)."""
    if index < len(_PALETTE):
        return _PALETTE[index]
    red, green, blue = colorsys.hls_to_rgb((index * 0.381966) % 1.0, 0.75, 0.6)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


def partition_colours(report: Mapping) -> dict[str, str]:
    """Fill colour per placement: each partition its own, then the host and 'none'."""
    colours = {p["name"]: _partition_colour(i) for i, p in enumerate(report["partitions"])}
    colours[HOST] = _HOST_COLOUR
    colours[NO_OP] = _NO_OP_COLOUR
    return colours


def node_colour(node: Mapping, colours: Mapping[str, str]) -> str:
    first = node["placement"].split("+")[0]  # a node split across partitions takes its first one's
    return colours.get(first, colours[HOST] if first == HOST else colours[NO_OP])


def legend_entries(report: Mapping) -> list[tuple[str, str]]:
    """(label, colour) for every placement, as the HTML legend shows them."""
    colours = partition_colours(report)
    rows = [(f"{p['name']} ({p['vendor']})", colours[p["name"]]) for p in report["partitions"]]
    rows.append(("host: ops no vendor took (hover a node for why)", colours[HOST]))
    rows.append(("none: nothing left to run after import (folded or removed)", colours[NO_OP]))
    return rows


def dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def constant_nodes(report: Mapping) -> dict[str, list[str]]:
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


def hover_text(node: Mapping, folded: Mapping[str, list[str]]) -> str:
    """A drawn node's tooltip: where it went and why, and the constant nodes folded into its box."""
    text = f"{node['name']} ({node['op_type']}): {node['placement']}\n{node['detail']}"
    if node["name"] in folded:
        text += f"\nconstants folded in: {', '.join(folded[node['name']])}"
    return text


def drawn_nodes(report: Mapping) -> list[Mapping]:
    """The nodes the graph draws: all but the constants :func:`constant_nodes` folds into their consumers."""
    folded = {name for names in constant_nodes(report).values() for name in names}
    return [node for node in report["nodes"] if node["name"] not in folded]


def graph_edges(report: Mapping) -> list[tuple[str, str, str]]:
    """(from id, to id, tensor) for every data edge the graph draws, inputs and outputs included."""
    producer = {t["name"]: f"in:{t['name']}" for t in report["inputs"]}
    nodes = drawn_nodes(report)
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

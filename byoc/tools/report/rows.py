"""The report's figures as rows and short strings (shapes, tensor lists, counts, the placement, time, memory and
preparation tables), shared by the text and HTML renderers."""

from __future__ import annotations

from typing import Mapping, Optional

from byoc.pipeline.artifact.placement_record import quote_times


def shape_text(t: Mapping) -> str:
    """``1x3x224x224``; a shape with a symbolic dim is joined with ``×`` (``batch×seq*16``), where an ``x``
    would run into the dims' names."""
    dims = t["shape"]
    return ("x" if all(isinstance(d, int) for d in dims) else "×").join(str(d) for d in dims) or "scalar"


def middle_cut(text: str, width: Optional[int]) -> str:
    """``text``, or its start and end around "…" when it is longer than ``width``."""
    if width is None or len(text) <= width:
        return text
    tail = (width - 1) // 2
    return f"{text[:width - 1 - tail]}…{text[len(text) - tail:]}"


def tensors_text(tensors, name_width: Optional[int] = None) -> str:
    return ", ".join(f"{middle_cut(t['name'], name_width)} {shape_text(t)} {t['dtype']}" for t in tensors) or "-"


def counts_text(mapping: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in mapping.items())


def reasons_text(reasons: Mapping[str, str]) -> str:
    return "; ".join(f"{vendor}: {reason}" for vendor, reason in reasons.items())


def placement_rows(placement: Mapping) -> tuple[str, list[str], list[list[str]]]:
    """The Placement section: a heading, and per rule-based partition its time in each place and the
    decision (the text and HTML reports show the same rows)."""
    heading = (f"Placement (measured: a vendor keeps a partition when it is at least {placement['min_speedup']:g}x "
               f"faster than every other place; {placement['candidate_builds']} candidate build(s))")
    rows = []
    for d in placement["decisions"]:
        times = quote_times(d["times_ms"], d["estimated"], d.get("bounds"))
        rows.append([d["partition"], d["vendor"], times, d["place"]])
    return heading, ["partition", "rules gave it to", "ms per run, fastest first", "placed on"], rows


def time_rows(time: Mapping) -> list[tuple[str, str, str, float, float, list]]:
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


def time_steps(time: Mapping) -> list[tuple[str, list[tuple[str, float]]]]:
    """Per partition that has steps: (name, [(implementation, ms per run)]), summed by implementation, largest first."""
    found = []
    for c in time["calls"]:
        steps: dict = {}
        for step in c.get("steps", []):
            steps[step["implementation"]] = steps.get(step["implementation"], 0.0) + step["ms"]
        if steps:
            found.append((c["name"], sorted(steps.items(), key=lambda kv: -kv[1])))
    return found


def time_heading(time: Mapping) -> str:
    return (f"Time ({time['runs']} runs: {time['run_median_ms']:.3f} ms median; the parts below from "
            f"instrumented runs of {time['hooked_median_ms']:.3f} ms)")


def memory_rows(memory: Mapping) -> tuple[list[tuple[str, int, str]], list[str]]:
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
        model = r.get("model_constant_bytes")
        of_model = f" for the model's {model}" if model is not None else ""
        on_device = (f"; on its device: {r['device_bytes']} bytes (weights and workspace)"
                     if r.get("device_bytes") is not None else "")
        rows.append((f"{r['partition']} ({r['vendor']})", r["workspace_bytes"],
                     f"workspace per call, as its runtime reports it; constants {r['constant_bytes']} bytes held"
                     f"{of_model}{on_device}"))
    if memory.get("at_bounds") is not None or any(isinstance(row[1], str) for row in rows):
        notes.append("a vendor partition with symbolic dims makes its workspace per shape, at the shape's first "
                     "call: it is not listed")
    rows.append(("planned in all", memory["total_planned_bytes"], "host planned + every vendor runtime's workspace"))
    resident = memory.get("resident")
    if resident is not None:
        rows += [("resident: load", resident["load_bytes"], resident["source"]),
                 ("resident: load and a run", resident["run_bytes"], "the same, after one run"),
                 ("resident: peak", resident["peak_bytes"], "the largest resident set meanwhile (VmHWM)")]
        notes.append("vendor runtimes that report live (json_runtime, dnnl): as the fresh process that loaded the "
                     "exported library reported them")
    else:
        notes.append("resident memory: not measured (--memory loads the exported model in a fresh process)")
    return rows, notes


def prepared_groups(report: Mapping) -> list[tuple[str, list[str]]]:
    """(what became of them, node names) in model order, from ``report["prepared"]``."""
    groups: dict[str, list[str]] = {}
    for name, fate in report.get("prepared", {}).get("nodes", {}).items():
        groups.setdefault(fate, []).append(name)
    return list(groups.items())

"""The partition report: which ONNX node went where, and why, as data and as text, JSON, DOT or HTML.

:func:`report` is the one call: ``byoc.report(plan)`` gives the text ``python -m byoc.partition`` prints,
``byoc.report(plan, format="html")`` a page. It is a function of the plan, not a method of it, so the pipeline
never imports its readers. Apart, :func:`build_report` gives the data (the JSON format, schema
:data:`REPORT_SCHEMA`, version :data:`SCHEMA_VERSION`) with what a build or a run adds (memory, verification,
time), and :func:`render` draws such data in one of :data:`FORMATS`: one module per format
(:mod:`~byoc.tools.report.text`, :mod:`~byoc.tools.report.dot`, :mod:`~byoc.tools.report.html_page`; JSON is
the data itself).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

from byoc.errors import ByocError
from byoc.pipeline.partitioning.partitioner import PartitionPlan
from byoc.tools.report.data import build_report, node_targets
from byoc.tools.report.dot import render_dot
from byoc.tools.report.html_page import render_html
from byoc.tools.report.schema import FORMATS, HOST, NO_OP, REPORT_SCHEMA, SCHEMA_VERSION
from byoc.tools.report.text import render_text

__all__ = ["FORMATS", "HOST", "NO_OP", "REPORT_SCHEMA", "SCHEMA_VERSION", "build_report", "node_targets", "render",
           "render_dot", "render_html", "render_json", "render_text", "report"]


def report(plan: PartitionPlan, format: str = "text", model_name: Optional[str] = None) -> str:  # noqa: A002
    """The partition report of ``plan``, as ``python -m byoc.partition`` prints it (without memory, time or
    verification, which need a build: the CLI's ``--memory``, ``--profile`` and ``--verify``).

    ``format`` (the CLI's name) is one of :data:`FORMATS`: ``"text"``, ``"json"``, ``"dot"``, ``"html"``;
    ``model_name`` defaults to the ONNX graph's name.
    """
    name = model_name or plan.imported.model.graph.name or "model"
    return render(build_report(plan, name, plan.target.name), format)


def render(report: Mapping, fmt: str) -> str:
    """``report`` drawn as ``fmt`` (one of :data:`FORMATS`); text ends with a newline."""
    renderers = {"text": render_text, "json": render_json, "dot": render_dot, "html": render_html}
    if fmt not in renderers:
        raise ByocError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return renderers[fmt](report)


def render_json(report: Mapping) -> str:
    """Stable JSON: keys in schema order, two-space indent."""
    return json.dumps(report, indent=2) + "\n"

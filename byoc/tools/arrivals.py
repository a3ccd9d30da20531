"""How each ONNX op arrives in Relax: the op calls a vendor's rules see, generated from the importer.

``python -m byoc.tools.arrivals [--update FILE] [--ops Sum HardSwish ...]`` imports every single-node model of
ONNX's backend node tests (the ``onnx`` wheel's, one per attribute set and input form) the way
:func:`byoc.import_model` imports a user's model, preparation included, and lists the Relax op calls each
becomes, grouped per ONNX op. A vendor reads it to write rules for what arrives, not for the ONNX op: ``Sum``
of three inputs arrives as two ``relax.add``, ``HardSwish`` as four ops, a ``Conv`` with a bias as
``relax.nn.conv2d`` and ``relax.add``.

docs/onnx_ops_in_relax.md holds the output between ``<!-- arrivals:begin -->`` and ``<!-- arrivals:end -->``;
a test keeps a sample of its rows equal to what the importer does now. Regenerate it with
``python -m byoc.tools.arrivals --update docs/onnx_ops_in_relax.md`` (a few minutes).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

BEGIN, END = "<!-- arrivals:begin -->", "<!-- arrivals:end -->"
#: How many distinct forms a row lists; the rest are counted.
SHOWN_FORMS = 3


@dataclass
class Arrival:
    """What one ONNX op's node tests became: ``forms`` counts each sequence of Relax op calls (empty: folded
    into constants at import), ``refused`` each error class of the cases the importer refused."""

    op: str
    forms: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)

    @property
    def cases(self) -> int:
        return sum(self.forms.values()) + sum(self.refused.values())

    def row(self) -> str:
        """The table row: the op, its case count, its forms most common first."""
        ranked = sorted(self.forms.items(), key=lambda item: (-item[1], item[0]))
        shown = [f"{_form_text(form)} ({count})" for form, count in ranked[:SHOWN_FORMS]]
        if len(ranked) > SHOWN_FORMS:
            shown.append(f"{len(ranked) - SHOWN_FORMS} other forms ({sum(c for _, c in ranked[SHOWN_FORMS:])})")
        if self.refused:
            shown.append("refused: " + ", ".join(f"{why} ({count})" for why, count in sorted(self.refused.items())))
        return f"| {self.op} | {self.cases} | {'; '.join(shown) or '-'} |"


def _form_text(form: tuple) -> str:
    """A sequence of op calls, repeats of one op joined: ``relax.add ×2``; ``folded`` for none."""
    if not form:
        return "folded into a constant"
    parts: list[list] = []
    for op in form:
        if parts and parts[-1][0] == op:
            parts[-1][1] += 1
        else:
            parts.append([op, 1])
    return ", ".join(f"`{op}`" + (f" ×{n}" if n > 1 else "") for op, n in parts)


def node_cases(ops: Optional[Iterable[str]] = None) -> list[tuple[str, bytes]]:
    """``(op type, model bytes)`` for each single-node case of ONNX's backend node tests (``_expanded`` cases,
    which spell a function out in other ops, are left out), optionally of ``ops`` only."""
    from onnx.backend.test.case.node import collect_testcases

    wanted = set(ops) if ops is not None else None
    with warnings.catch_warnings():  # some case generators divide by zero on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    found = []
    for case in sorted(cases, key=lambda c: c.name):
        nodes = case.model.graph.node
        if "_expanded" in case.name or len(nodes) != 1 or (wanted is not None and nodes[0].op_type not in wanted):
            continue
        found.append((nodes[0].op_type, case.model.SerializeToString()))
    return found


def arrival_of(model_bytes: bytes) -> tuple[Optional[tuple], str]:
    """``(the op calls main makes, "")`` for a model the importer takes, else ``(None, the error's class)``."""
    from byoc.errors import ByocError
    from byoc.pipeline.annotate.annotator import op_calls
    from byoc.pipeline.frontend import import_model

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = import_model(model_bytes)
    except ByocError as err:
        return None, type(err).__name__
    except Exception as err:  # noqa: BLE001 - a table of what happens, whatever happens
        return None, f"{type(err).__name__} (untyped)"
    calls = [op.split("(")[0] for _, op in op_calls(imported.mod["main"])]
    return tuple(calls), ""


def arrivals(ops: Optional[Iterable[str]] = None) -> list[Arrival]:
    """Every ONNX op's :class:`Arrival`, by op name."""
    table: dict[str, Arrival] = {}
    for op, model_bytes in node_cases(ops):
        form, refused = arrival_of(model_bytes)
        entry = table.setdefault(op, Arrival(op))
        if form is None:
            entry.refused[refused] += 1
        else:
            entry.forms[form] += 1
    return [table[name] for name in sorted(table)]


def render(rows: Sequence[Arrival]) -> str:
    """The markdown table."""
    lines = ["| ONNX op | node tests | arrives in Relax as (cases) |", "|---|---|---|"]
    return "\n".join(lines + [row.row() for row in rows])


def update(path: Path, text: str) -> None:
    """Write ``text`` between the markers of ``path``."""
    document = path.read_text()
    if BEGIN not in document or END not in document:
        raise SystemExit(f"{path} has no {BEGIN} ... {END} markers")
    head, rest = document.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m byoc.tools.arrivals", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs="+", metavar="OP", help="only these ONNX ops")
    parser.add_argument("--update", type=Path, metavar="FILE", help="write the table between FILE's markers")
    args = parser.parse_args(argv)
    text = render(arrivals(args.ops))
    if args.update:
        update(args.update, text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

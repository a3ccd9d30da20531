"""The supported-op table of each vendor, generated from its registered rules.

``python -m byoc.optable [--vendor NAME ...] [--update FILE]`` prints, per vendor,
every rule with the Relax op or pattern it takes and the constraints its check
enforces; with ``--update`` it writes them into FILE instead.
Nothing is written by hand: the ops come from the rules and the patterns they
build, the constraints from the checks, read in this order:

1. a ``doc`` attribute on the check function;
2. the check combinators of :mod:`byoc.vendor.checks` (``all_of``, ``dtypes``,
   ``static_shapes``, ``known_ranks``, ``attr_equals``), read from their closures;
3. the first line of the check's docstring;
4. the check's function name.

docs/ops.md holds the output for the bundled vendors between
``<!-- optable:begin -->`` and ``<!-- optable:end -->``; a test keeps the two
equal. Regenerate it with
``python -m byoc.optable --vendor c_source json_runtime dnnl --update docs/ops.md``.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path
from typing import Iterable, Sequence

from byoc.vendor.registry import get_vendor, list_vendors
from byoc.vendor import OpRule, Vendor, always


def describe_pattern(pattern) -> str:
    """A DFPattern as nested calls: ``relax.nn.relu(relax.add(relax.nn.conv2d(*, *), const))``."""
    from tvm import ir
    from tvm.relax import dpl

    if isinstance(pattern, dpl.CallPattern):
        op = pattern.op
        name = op.expr.name if isinstance(op, dpl.ExprPattern) and isinstance(op.expr, ir.Op) else describe_pattern(op)
        return f"{name}({', '.join(describe_pattern(arg) for arg in pattern.args)})"
    if isinstance(pattern, dpl.ConstantPattern):
        return "const"
    if isinstance(pattern, dpl.WildcardPattern):
        return "*"
    if isinstance(pattern, dpl.OrPattern):
        return f"{describe_pattern(pattern.left)} | {describe_pattern(pattern.right)}"
    if isinstance(pattern, dpl.TupleGetItemPattern):
        return f"{describe_pattern(pattern.tuple)}[{pattern.index}]"
    return type(pattern).__name__


def _closure(fn) -> dict:
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


def _factory(fn) -> str:
    """``dtypes`` for a check built by ``byoc.vendor.checks.dtypes``, else ''."""
    parts = getattr(fn, "__qualname__", "").split(".<locals>.")
    return parts[0] if getattr(fn, "__module__", None) == "byoc.vendor.checks" and len(parts) == 2 else ""


def constraints(check) -> list[str]:
    """What ``check`` requires, as short phrases in the order it tests them."""
    if check is always:
        return []
    doc = getattr(check, "doc", None)
    if isinstance(doc, str) and doc.strip():
        return [doc.strip()]
    factory = _factory(check)
    if factory:
        env = _closure(check)
        if factory == "all_of":
            phrases: list[str] = []
            for item in env["checks"]:
                phrases += [p for p in constraints(item) if p not in phrases]
            return phrases
        if factory == "dtypes":
            return ["/".join(env["allowed"]) + " only"]
        if factory == "static_shapes":
            return [f"static shapes of rank <= {env['max_rank']}"]
        if factory == "known_ranks":
            return [f"rank <= {env['max_rank']} (dims may be symbolic)"]
        if factory == "attr_equals":
            return [f"{env['what'] or env['name']} in {', '.join(map(str, env['allowed']))}"]
    text = inspect.getdoc(check)
    if text:
        return [text.splitlines()[0].rstrip(".")]
    return [getattr(check, "__name__", type(check).__name__).strip("_").replace("_", " ")]


def rule_rows(vendor: Vendor) -> list[tuple[str, str, str]]:
    """(rule, Relax op or pattern, constraints) for each of ``vendor``'s rules, in priority order."""
    rows = []
    for rule in vendor.rules:
        if isinstance(rule, OpRule):
            what = rule.op
        elif callable(getattr(rule, "describe", None)):  # a rule that says what it takes in one line
            what = rule.describe()
        else:
            what = describe_pattern(rule.dataflow_pattern()[0])
        rows.append((rule.name, what, "; ".join(dict.fromkeys(constraints(rule.check))) or "-"))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(vendors: Iterable[str] | None = None) -> str:
    """The table as Markdown, one section per vendor (all registered vendors by default).

    A vendor whose rules equal an earlier one's (up to the rule-name prefix)
    gets one line pointing to it instead of a second identical table.
    """
    names = list(vendors) if vendors is not None else list_vendors()
    seen: dict[tuple, str] = {}
    out: list[str] = []
    for name in names:
        vendor = get_vendor(name)
        rows = rule_rows(vendor)
        key = tuple((rule.split(".", 1)[1], what, cons) for rule, what, cons in rows)
        out.append(f"#### `{vendor.name}`" + (f" — {vendor.description}" if vendor.description else ""))
        out.append("")
        if key in seen:
            out.append(f"Same rules, ops and constraints as `{seen[key]}` (rule names `{vendor.name}.*`).")
        else:
            seen[key] = vendor.name
            out += ["| rule | Relax op or pattern | constraints |", "|---|---|---|"]
            out += [f"| `{rule}` | `{_cell(what)}` | {_cell(cons)} |" for rule, what, cons in rows]
        out.append("")
    return "\n".join(out)


BEGIN = "<!-- optable:begin -->\n"
END = "<!-- optable:end -->"
_SECTION = re.compile(re.escape(BEGIN) + r"(.*?)" + re.escape(END), re.S)


def embedded(text: str) -> str | None:
    """The table embedded in ``text`` between BEGIN and END, or None when it has no such section."""
    found = _SECTION.search(text)
    return found.group(1) if found else None


def update(path: Path, table: str) -> bool:
    """Replace the section of ``path`` between BEGIN and END with ``table``; True when it changed."""
    text = path.read_text()
    if embedded(text) is None:
        raise ValueError(f"{path} has no {BEGIN.strip()} ... {END} section")
    new = _SECTION.sub(lambda _: BEGIN + table + END, text, count=1)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m byoc.optable", description=__doc__.splitlines()[0])
    parser.add_argument("--vendor", nargs="+", metavar="NAME", help="vendors to list (default: all registered)")
    parser.add_argument(
        "--update", metavar="FILE", type=Path,
        help=f"write the table into FILE between '{BEGIN.strip()}' and '{END}' (docs/ops.md) instead of printing it",
    )
    args = parser.parse_args(argv)
    from byoc.errors import ByocError

    try:
        table = markdown(args.vendor)
    except ByocError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.update is None:
        sys.stdout.write(table)
        return 0
    try:
        changed = update(args.update, table)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.update}: {'updated' if changed else 'already up to date'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The symbolic dims of a model: how a user fixes or bounds them, and the check of each call against them.

A model's input dims are sizes or names (``batch_size``, ``sequence_length``,
as the exporters write them); one name is one dim wherever it appears. A dim
the model leaves unnamed is named ``<input>_dim<axis>``. ``dims=`` (the CLI's
``--dim``) says, per name::

    dims={"batch_size": 1}                  # fixed: compiled as a static size
    dims={"sequence_length": "..512"}       # at most 512 (at least 1)
    dims={"sequence_length": (16, 512)}     # from 16 to 512; "16..512" alike
    dims={"width": (1, None)}               # any size (the default)

A bound is a promise about every call: :meth:`Artifact.run` refuses a call
outside it, vendors may use it (:func:`byoc.vendor.checks.dim_bound`), and the
host plans its memory for the largest sizes.

A dim the model names by an expression of other dims (optimum writes a decoder's
``attention_mask`` as ``[batch_size, "past_sequence_length + sequence_length"]``)
is that expression (:func:`dim_expression`): each call is checked against it.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Mapping, Optional, Sequence, Union

from byoc.errors import DynamicShapeError, InputShapeError
from byoc.pipeline.frontend.onnx_model import DimRange, TensorSpec

DimSetting = Union[int, str, Sequence[Optional[int]]]

_RANGE = re.compile(r"^\s*(\d*)\s*\.\.\s*(\d*)\s*$")


def parse_dim_setting(name: str, setting: DimSetting) -> Union[int, DimRange]:
    """One entry of ``dims=``: an int (the dim is fixed) or a :class:`DimRange`."""
    def bad(why: str) -> DynamicShapeError:
        return DynamicShapeError(f"dims[{name!r}] = {setting!r}: {why}; give a size (8), a range (\"1..512\", "
                                 "(1, 512)) or an upper bound (\"..512\")")

    if isinstance(setting, bool):
        raise bad("not a size")
    if isinstance(setting, int):
        if setting < 1:
            raise bad("a fixed size is at least 1")
        return setting
    if isinstance(setting, str):
        if setting.strip().isdigit():
            return parse_dim_setting(name, int(setting))
        found = _RANGE.match(setting)
        if not found or not (found.group(1) or found.group(2)):
            raise bad("not a size or a range")
        low, high = (int(g) if g else None for g in found.groups())
    elif isinstance(setting, (tuple, list)) and len(setting) == 2:
        low, high = setting
        if any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in (low, high)):
            raise bad("a range holds ints or None")
    else:
        raise bad("not a size or a range")
    low = 1 if low is None else low
    if low < 0 or (high is not None and high < max(low, 1)):
        raise bad("the range is empty or negative")
    return DimRange(name, low, high)


def split_dim_settings(dims: Optional[Mapping[str, DimSetting]]) -> tuple[dict[str, int], dict[str, DimRange]]:
    """``dims=`` as (fixed sizes, ranges), each checked."""
    fixed: dict[str, int] = {}
    ranges: dict[str, DimRange] = {}
    for name, setting in (dims or {}).items():
        value = parse_dim_setting(str(name), setting)
        if isinstance(value, int):
            fixed[str(name)] = value
        else:
            ranges[str(name)] = value
    return fixed, ranges


def bind_dims(specs: Sequence[TensorSpec], shapes: Sequence[tuple], ranges: Mapping[str, DimRange]) -> dict[str, int]:
    """The size of each symbolic dim in one call, or an :class:`InputShapeError` naming the input and the dim.

    ``shapes`` are the call's input shapes in the order of ``specs``. Every
    static dim must match, every symbolic one must have one size across the
    inputs and lie in its range.
    """
    bound: dict[str, tuple[int, str]] = {}  # dim -> (size, the input that set it)
    expressions: list[tuple] = []
    for spec, shape in zip(specs, shapes):
        if len(shape) != len(spec.shape):
            raise InputShapeError(
                f"input {spec.name!r} has rank {len(shape)} (shape {tuple(shape)}), expected rank {len(spec.shape)}: "
                f"{spec.describe()}", spec.name)
        for axis, (want, got) in enumerate(zip(spec.shape, shape)):
            if isinstance(want, int):
                if want != got:
                    raise InputShapeError(
                        f"input {spec.name!r} has shape {tuple(shape)}, expected {spec.describe()}: dim {axis} is "
                        f"{got}, the model fixes it at {want}", spec.name, str(axis))
                continue
            seen = bound.get(want)
            if seen is not None and seen[0] != got:
                raise InputShapeError(
                    f"input {spec.name!r} has {want!r} = {got} (dim {axis} of shape {tuple(shape)}), but input "
                    f"{seen[1]!r} has {want!r} = {seen[0]}: one dim has one size in a call", spec.name, want)
            if not want.isidentifier():  # an expression of other dims: checked once they are all bound
                expressions.append((spec, axis, want, int(got), tuple(shape)))
                continue
            bound.setdefault(want, (int(got), spec.name))
            rng = ranges.get(want, DimRange(want))
            if not rng.holds(int(got)):
                raise InputShapeError(
                    f"input {spec.name!r} has {want!r} = {got} (dim {axis} of shape {tuple(shape)}), outside its "
                    f"range {rng.describe()}; the artifact was compiled for that range: compile again with a wider "
                    f"one (dims={{{want!r}: ...}})", spec.name, want)
    sizes = {name: size for name, (size, _) in bound.items()}
    for spec, axis, want, got, shape in expressions:
        expected = evaluate_dim(want, sizes)
        if got != expected:
            names = dim_expression(want)[1]  # type: ignore[index]  # bind_dims kept only expressions
            reads = ", ".join(f"{n} = {bound[n][0]} (from {bound[n][1]!r})" for n in names)
            raise InputShapeError(
                f"input {spec.name!r} has {got} at dim {axis} (shape {shape}), which the model names {want!r} = "
                f"{expected} with {reads}: one of these inputs has the wrong length", spec.name, want)
    return sizes


def sizes_problem(sizes: Mapping[str, object], dims: Sequence[str]) -> Optional[str]:
    """What is wrong with ``sizes`` as one size per symbolic dim of ``dims``: ``"missing seq"``,
    ``"unknown width"``, or None when it names each dim once."""
    missing = [d for d in dims if d not in sizes]
    if missing:
        return f"missing {', '.join(missing)}"
    unknown = [d for d in sizes if d not in dims]
    return f"unknown {', '.join(unknown)}" if unknown else None


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def dim_expression(text: str) -> Optional[tuple[str, list[str]]]:
    """A dim name that is integer arithmetic (``+ - * //``) on other dims' names and ints, as its normal
    spelling and the names it reads; None for anything else (a plain name included)."""
    if text.isidentifier():
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names += [node.id] if node.id not in names else []
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _ARITHMETIC:
                return None
        elif not (isinstance(node, ast.Constant) and type(node.value) is int) \
                and not isinstance(node, (ast.operator, ast.expr_context)):
            return None
    return (ast.unparse(tree), names) if names else None


def evaluate_dim(text: str, sizes: Mapping[str, int]) -> int:
    """The size of the dim expression ``text`` (:func:`dim_expression`) at ``sizes``."""
    def value(node) -> int:
        if isinstance(node, ast.BinOp):
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        return int(sizes[node.id]) if isinstance(node, ast.Name) else int(node.value)

    return value(ast.parse(text, mode="eval").body)

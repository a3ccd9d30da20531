"""Small helpers over TVM 0.27's Relax object model, kept in one place.

TVM 0.27 renamed much of Relax (``ty`` for struct info, ``GenericConst`` for
constants, prim values as plain ``IntImm``/``FloatImm``); code elsewhere asks
these helpers instead of spelling the class names.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

#: One dim of a shape as byoc passes it between stages: a size, or the text of a
#: symbolic dim (``"batch"``, ``"sequence_length*2"``) as :func:`dim_text` writes it.
Dim = Union[int, str]


def is_tensor_const(expr) -> bool:
    """A Relax tensor constant (a weight)."""
    from tvm.ir.expr import GenericConst

    return isinstance(expr, GenericConst)


def const_array(expr) -> np.ndarray:
    """The numpy value of a tensor constant."""
    return expr.value.numpy()


def is_prim_value(expr) -> bool:
    """A scalar prim value argument (IntImm/FloatImm), as clip's bounds."""
    from tvm.ir.prim.expr import FloatImm, IntImm

    return isinstance(expr, (IntImm, FloatImm))


def const_nbytes(expr) -> int:
    """Bytes of a tensor constant, read from its shape and dtype (no copy to numpy)."""
    value = expr.value
    count = 1
    for extent in value.shape:
        count *= int(extent)
    return count * np.dtype(str(value.dtype)).itemsize


def shape_values(shape) -> Optional[list]:
    """The dims of a Relax shape as TIR expressions: a ``ShapeExpr``'s values, or those a shape variable's type
    spells (a composite's shape parameter, as in ``R.broadcast_to(x, param_0)``); None where they are unknown."""
    if shape is None:
        return None
    values = getattr(shape, "values", None)
    if values is None:
        values = getattr(getattr(shape, "ty", None), "values", None)
    return None if values is None else list(values)


def static_dims(shape) -> Optional[tuple[int, ...]]:
    """The dims of a Relax shape (a ``ShapeExpr``, or a tensor type's ``shape``) as ints.

    None when the shape is unknown (``None``, a tensor of unknown rank) or any dim is symbolic.
    """
    values = shape_values(shape)
    if values is None:
        return None
    dims = []
    for d in values:
        value = getattr(d, "value", None)
        if not isinstance(value, int):
            return None
        dims.append(value)
    return tuple(dims)


# TIR's arithmetic on symbolic dims: the node class name -> the operator as :func:`dim_tree` writes it.
_DIM_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "FloorDiv": "//", "FloorMod": "%", "Min": "min", "Max": "max"}


def dim_tree(expr):
    """A dim as the JSON a graph runtime evaluates: an int, a dim's name, or ``[op, a, b]`` (op one of
    ``+ - * // % min max``), e.g. ``["*", "batch", 12]``. Raises ``ValueError`` for an expression that is
    not integer arithmetic of those operators on symbolic dims."""
    value = getattr(expr, "value", None)
    if isinstance(value, int):
        return value
    kind = type(expr).__name__
    if kind == "Var":
        return str(expr.name)
    if kind == "Cast":
        return dim_tree(expr.value)
    if kind not in _DIM_OPS:
        raise ValueError(f"dim {expr} is not integer arithmetic on symbolic dims")
    return [_DIM_OPS[kind], dim_tree(expr.a), dim_tree(expr.b)]


def tree_text(tree) -> Dim:
    """A :func:`dim_tree` as people read it: ``batch``, ``sequence_length*2``, ``(height+1)//2``,
    ``min(n, 512)``; an int stays an int."""
    if not isinstance(tree, list):
        return tree
    op, a, b = tree[0], tree_text(tree[1]), tree_text(tree[2])
    if op in ("min", "max"):
        return f"{op}({a}, {b})"

    def operand(x, right: bool) -> str:
        # parenthesize a sum inside a product, and any compound right operand of - // %
        text = str(x)
        compound = isinstance(x, str) and not text.isidentifier() and not text.startswith(("min(", "max("))
        if compound and (op != "+" and (right or "+" in text or "-" in text[1:]) or (op == "-" and right)):
            return f"({text})"
        return text

    return f"{operand(a, False)}{op}{operand(b, True)}"


def tree_names(tree) -> list[str]:
    """The symbolic dims a :func:`dim_tree` reads, by name, in order of first use."""
    if isinstance(tree, str):
        return [tree]
    if isinstance(tree, list):
        return list(dict.fromkeys(name for part in tree[1:] for name in tree_names(part)))
    return []


def dim_text(expr) -> Dim:
    """A dim of a Relax shape as an int, or the text of its expression over the symbolic dims
    (:func:`tree_text` of its :func:`dim_tree`): what reports print."""
    return tree_text(dim_tree(expr))


def shape_dims(shape) -> Optional[tuple[Dim, ...]]:
    """The dims of a Relax shape, each an int or its symbolic text (:func:`dim_text`); None for unknown rank."""
    values = shape_values(shape)
    return None if values is None else tuple(dim_text(d) for d in values)


def dim_names(shape) -> list[str]:
    """The symbolic dims a Relax shape depends on, by name, in order of first use (in any expression, also
    one :func:`dim_tree` cannot write)."""
    names: list[str] = []
    for d in shape_values(shape) or []:
        _collect_vars(d, names)
    return names


def _collect_vars(expr, names: list[str]) -> None:
    kind = type(expr).__name__
    if kind == "Var" and str(expr.name) not in names:
        names.append(str(expr.name))
    for part in ("a", "b", "value"):
        child = getattr(expr, part, None) if kind != "IntImm" else None
        if child is not None and not isinstance(child, (int, float)):
            _collect_vars(child, names)


def format_shape(dims, sep: str = "×") -> str:
    """A shape for people: ``1×sequence_length×384``; ``()`` for a scalar, ``?`` for an unknown rank."""
    if dims is None:
        return "?"
    return sep.join(str(d) for d in dims) if len(dims) else "()"

"""ONNX nodes imported as ops that vendors take, where TVM's converter writes a form none does.

* An ``Einsum`` that is a batched matmul (``bhid,bhjd->bhij``: letters shared by both operands and the output
  are batch axes, one letter shared by the operands alone is summed over, and each operand has one letter of
  its own) becomes ``permute_dims`` of each operand, ``matmul`` and ``permute_dims`` of the result. TVM's
  converter emits a ``call_tir`` of ``topi.einsum``, a loop nest no rule takes: MaxViT's 44 attention
  products stayed on the host and cut it into 45 partitions.
* An element-wise binary op that reads an ``Expand`` (``broadcast_to``) whose repeats its own broadcasting
  makes anyway reads the Expand's input instead. Swin V2's cosine attention divides q by its norm expanded to
  q's shape; a vendor that broadcasts by adding unit dims only (oneDNN) left those Expands on the host, 24
  partition cuts. The Expand is then read by nothing and removed with the other dead bindings.
* A ``Where`` whose condition is a constant, all true or all false, is the operand it selects, where that
  operand has the output's shape and type. ONNX's own Attention function (opset 23) zeroes the rows its mask
  hides entirely with such a Where: without a mask its condition is a constant false, and the Where, which no
  vendor takes, cut the attention in two.
* A ``Sum``, ``Mean``, ``Max`` or ``Min`` of several tensors is a chain of the binary op (``add``, ``maximum``,
  ``minimum``; a Mean's sum is then divided by the count). TVM's converter broadcasts every operand to the
  result's shape, stacks them and reduces the stack: three kinds of op for one, a copy of every operand, and a
  form no vendor with an element-wise add takes. ResNet-50's 16 residual Sums stayed on an NPU's host so.

Each returns None where its form does not apply, and TVM's converter runs as before.
"""

from __future__ import annotations

from typing import Optional

import tvm
from tvm import relax

#: ONNX ops that broadcast their operands numpy-style, element by element
BROADCASTING_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})
#: The variadic element-wise ONNX ops, with the binary Relax op a chain of which computes them
VARIADIC_AS_BINARY = {"Sum": relax.op.add, "Mean": relax.op.add, "Max": relax.op.maximum,
                      "Min": relax.op.minimum}


def einsum_as_matmul(inputs, attrs, bb) -> Optional[relax.Expr]:
    """An ``Einsum`` of two operands in a batched-matmul form as permute_dims + matmul (module docstring)."""
    equation = attrs.get("equation", b"")
    equation = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")
    if len(inputs) != 2 or "->" not in equation or "." in equation:
        return None
    terms, out = equation.split("->")
    operands = terms.split(",")
    if len(operands) != 2 or any(len(set(t)) != len(t) for t in (*operands, out)):
        return None
    a, b = operands
    batch = [c for c in out if c in a and c in b]
    summed = [c for c in a if c in b and c not in out]
    rows, cols = [c for c in a if c not in b], [c for c in b if c not in a]
    if len(summed) != 1 or len(rows) != 1 or len(cols) != 1 or set(out) != set(batch + rows + cols) \
            or set(a) != set(batch + rows + summed) or set(b) != set(batch + summed + cols):
        return None
    x, y = inputs
    if any(not isinstance(v.ty, relax.TensorType) or v.ty.ndim != len(t) for v, t in ((x, a), (y, b))):
        return None
    product = bb.normalize(relax.op.matmul(_permuted(x, a, batch + rows + summed, bb),
                                           _permuted(y, b, batch + summed + cols, bb)))
    return _permuted(product, "".join(batch + rows + cols), list(out), bb)


def where_of_a_constant_condition(inputs) -> Optional[relax.Expr]:
    """The operand a ``Where`` selects everywhere, when its condition is a constant all true or all false and
    that operand has the output's shape and dtype (module docstring); else None."""
    if len(inputs) != 3 or not isinstance(inputs[0], tvm.ir.expr.Constant):
        return None
    condition = inputs[0].value.numpy()
    if condition.size == 0 or not (condition.all() or not condition.any()):
        return None
    chosen = inputs[1] if condition.all() else inputs[2]
    shapes = [_shape(x) for x in inputs]
    if any(s is None for s in shapes) or not _same_dims(_broadcast(shapes), shapes[1 if condition.all() else 2]):
        return None
    dtypes = {getattr(x.ty, "dtype", None) for x in inputs[1:]}
    return chosen if len(dtypes) == 1 else None


def variadic_as_binary_chain(op_name: str, inputs, bb) -> Optional[relax.Expr]:
    """A ``Sum``/``Mean``/``Max``/``Min`` of two or more tensors, one computed at run time at least, as a chain of
    its binary op (module docstring); else None (shape arithmetic, one operand, all constants)."""
    binary = VARIADIC_AS_BINARY.get(op_name)
    if binary is None or len(inputs) < 2 or not all(
            isinstance(x, relax.Expr) and isinstance(getattr(x, "ty", None), relax.TensorType) for x in inputs):
        return None
    if all(isinstance(x, tvm.ir.expr.Constant) for x in inputs):
        return None
    result = inputs[0]
    for operand in inputs[1:]:
        result = bb.normalize(binary(result, operand))
    if op_name == "Mean":
        result = bb.normalize(relax.op.divide(result, relax.const(len(inputs), str(result.ty.dtype))))
    return result


def _permuted(x: relax.Expr, letters: str, order: list, bb) -> relax.Expr:
    axes = [letters.index(c) for c in order]
    if axes == sorted(axes):
        return x
    return bb.normalize(relax.op.permute_dims(x, axes))


def without_implied_broadcasts(op_name: str, inputs, bb) -> list:
    """Each operand of a broadcasting binary op that is a ``broadcast_to`` the op's own broadcasting implies is
    replaced by the broadcast's input, in place (module docstring); returns the operands replaced."""
    if op_name not in BROADCASTING_BINARY or len(inputs) < 2:
        return []
    shapes = [_shape(v) for v in inputs]
    if any(s is None for s in shapes):
        return []
    replaced = []
    result = _broadcast(shapes)
    for i, value in enumerate(inputs):
        source = _broadcast_source(value, bb)
        if source is None or _shape(source) is None:
            continue
        narrower = shapes[:i] + [_shape(source)] + shapes[i + 1:]
        if result is not None and _same_dims(_broadcast(narrower), result):
            replaced.append(value)
            inputs[i] = source
            shapes = narrower
    return replaced


def _broadcast_source(value, bb) -> Optional[relax.Expr]:
    """The input of the ``broadcast_to`` that ``value`` is (a converter's result not bound yet) or is bound to."""
    if isinstance(value, relax.Var):
        try:
            value = bb.lookup_binding(value)
        except Exception:  # noqa: BLE001 - not a var this builder bound
            return None
    if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.broadcast_to":
        return value.args[0]
    return None


def _shape(value) -> Optional[list]:
    ty = getattr(value, "ty", None)
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return list(ty.shape.values)


def _broadcast(shapes: list) -> Optional[list]:
    """numpy's broadcast of ``shapes`` (lists of PrimExprs), or None where it cannot be told statically."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        wide = [d for d in dims if not _is_one(d)]
        if any(not _same_dims([d], [wide[0]]) for d in wide[1:]):
            return None
        out.append(wide[0] if wide else dims[0])
    return out


def _is_one(dim) -> bool:
    from tvm import tirx

    return isinstance(dim, tirx.IntImm) and dim.value == 1


def _same_dims(a: Optional[list], b: Optional[list]) -> bool:
    import tvm

    if a is None or b is None or len(a) != len(b):
        return False
    analyzer = tvm.sym.Analyzer()
    return all(analyzer.can_prove_equal(x, y) for x, y in zip(a, b))

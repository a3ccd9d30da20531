"""ONNX's Det, which TVM's importer lacks: the determinant of each ``[M, M]`` matrix in the input's last two axes,
for ``M`` known when the model is compiled and at most :data:`MAX_ORDER` (a Leibniz sum: a rotation's or an
affine transform's 2x2 to 4x4, what models take determinants of). Larger or symbolic orders are refused by name.
"""

from __future__ import annotations

import itertools

from tvm import relax, te, tirx

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.run_time_values import static_shape

#: the largest order whose Leibniz sum (M! products of M factors) byoc writes out
MAX_ORDER = 5


def determinant(node_name: str, inputs, bb: relax.BlockBuilder) -> relax.Expr:
    """Det of ``inputs[0]`` (module docstring)."""
    x = inputs[0]
    shape = static_shape(x)
    order = shape[-1] if shape is not None and len(shape) >= 2 else None
    if order is None or not isinstance(order, tirx.IntImm) or shape[-2] != order or int(order) > MAX_ORDER \
            or "float" not in str(x.ty.dtype):
        raise UnsupportedAttributeError(
            f"Det node {node_name!r}: the determinant of {shape if shape is None else [str(d) for d in shape]} "
            f"({x.ty.dtype}) is not supported; byoc computes Det of float square matrices of an order known when "
            f"the model is compiled, up to {MAX_ORDER}x{MAX_ORDER}")
    return bb.emit_te(_determinant, x, int(order), primfunc_name_hint="det")


def _sign(permutation: tuple) -> int:
    """+1 for an even permutation, -1 for an odd one (by its inversions)."""
    inversions = sum(1 for i, j in itertools.combinations(range(len(permutation)), 2) if permutation[i] > permutation[j])
    return -1 if inversions % 2 else 1


def _determinant(x: te.Tensor, order: int) -> te.Tensor:
    terms = [(_sign(p), p) for p in itertools.permutations(range(order))]  # order! of them

    def element(*batch):
        total = tirx.const(0, x.dtype)
        for sign, permutation in terms:
            product = x[(*batch, 0, permutation[0])]
            for row in range(1, order):
                product = product * x[(*batch, row, permutation[row])]
            total = total + product if sign > 0 else total - product
        return total

    return te.compute(x.shape[:-2], element, name="det")

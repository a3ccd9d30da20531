"""ONNX's MaxPool with its second output, ``Indices``, which TVM's converter does not make ("Missing outputs during
conversion"): the values are TVM's max pool (a vendor may take it), the indices one TVM compute beside it.

Each index is where the window's maximum sits in the flattened input, ``(n * C + c) * H * W + h * W + w``
(``storage_order`` 1: ``... + h + w * H``, the spatial axes column-major), the first of equal maxima in the
window's row-major order, as onnx.reference's loop keeps it (a later one must be greater); padding never wins.
"""

from __future__ import annotations

import math
from typing import Optional

from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import static_shape


def max_pool_indices(x, values, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """``(values, indices)`` for a MaxPool of ``x`` whose values TVM's converter gave as ``values`` (module
    docstring), or None where ``x``'s or the values' shape is unknown, or the pads are implicit (``auto_pad``,
    which byoc's preparation makes explicit where the sizes are known)."""
    shape, out = static_shape(x), static_shape(values)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if shape is None or out is None or len(shape) < 3 or (auto_pad.decode() if isinstance(auto_pad, bytes)
                                                          else str(auto_pad)) != "NOTSET":
        return None
    spatial = len(shape) - 2
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * spatial))
    dilations = list(attrs.get("dilations", [1] * spatial))
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    order = int(attrs.get("storage_order", 0))
    if len(kernel) != spatial or len(strides) != spatial or len(dilations) != spatial or len(pads) != 2 * spatial:
        return None
    indices = bb.emit_te(_indices, x, out, kernel, strides, dilations, pads[:spatial], order == 1,
                         primfunc_name_hint="max_pool_indices")
    return relax.Tuple([values, indices])


def _indices(x: te.Tensor, out: list, kernel: list, strides: list, dilations: list, before: list,
             column_major: bool) -> te.Tensor:
    spatial = len(kernel)
    extents = list(x.shape[2:])
    offsets = [te.reduce_axis((0, k), name=f"k{d}") for d, k in enumerate(kernel)]
    dtype = x.dtype

    def combine(lhs, rhs):  # the greater value wins; of equal ones the one met first
        greater = rhs[1] > lhs[1]
        return tirx.Select(greater, rhs[0], lhs[0]), tirx.Select(greater, rhs[1], lhs[1])

    def identity(index_type, value_type):
        return tirx.const(-1, index_type), te.min_value(value_type)

    argmax = te.comm_reducer(combine, identity, name="argmax")

    def element(n, c, *o):
        positions = [o[d] * strides[d] - before[d] + offsets[d] * dilations[d] for d in range(spatial)]
        inside = tirx.all(*[tirx.all(p >= 0, p < extents[d]) for d, p in enumerate(positions)])
        flat = (n * x.shape[1] + c) * math.prod(extents)
        axes = range(spatial - 1, -1, -1) if column_major else range(spatial)
        step = tirx.IntImm("int64", 1)
        for d in reversed(list(axes)):
            flat = flat + positions[d] * step
            step = step * extents[d]
        value = tirx.if_then_else(inside, x[(n, c, *positions)], te.min_value(dtype))
        index = tirx.Select(inside, flat, tirx.IntImm("int64", -1))
        return argmax((index, value), axis=offsets)

    return te.compute(out, element, name="max_pool_indices")[0]

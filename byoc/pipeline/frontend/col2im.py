"""ONNX's Col2Im (opset 18), which TVM's importer lacks: the blocks of ``input [N, C * prod(block_shape), L]`` (one
column per block position, as an unfold makes them) summed back into an image ``[N, C, *image_shape]``, overlaps
adding up.

``image_shape`` and ``block_shape`` may be constants or computed at run time (ONNX's node tests feed them as
inputs): each dim then is a variable bound when the model runs (``run_time_values.run_time_dims``), and the run
checks that the input's channels are C times the block's size and its columns the number of block positions
that the image, pads, dilations and strides give (``run_time_values.bound``: a mismatch fails the run with an
``InputShapeError``). One TVM compute gives each output element the sum, over the block's offsets, of the
column entries that land on it: offset k lands position p where ``p + pad - k * dilation`` is a whole number of
strides inside the positions.
"""

from __future__ import annotations

import math
from typing import Optional

from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import bound, computed, run_time_dims, static_shape
from byoc.vendor.values import const_array, is_tensor_const


def col2im(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """Col2Im (module docstring), or None where the input's rank or the number of spatial dims is not known."""
    x, image, block = inputs
    shape, image_shape = static_shape(x), static_shape(image)
    if shape is None or len(shape) != 3 or image_shape is None or len(image_shape) != 1:
        return None
    rank = int(image_shape[0])
    image_dims, block_dims = _dims(image, rank, "image", bb), _dims(block, rank, "block", bb)
    if image_dims is None or block_dims is None:
        return None
    dilations = list(attrs.get("dilations", [1] * rank))
    strides = list(attrs.get("strides", [1] * rank))
    pads = list(attrs.get("pads", [0] * 2 * rank))
    if len(dilations) != rank or len(strides) != rank or len(pads) != 2 * rank:
        return None
    positions = [(image_dims[d] + pads[d] + pads[rank + d] - dilations[d] * (block_dims[d] - 1) - 1) // strides[d] + 1
                 for d in range(rank)]
    block_size = math.prod(block_dims)
    channels = tirx.floordiv(shape[1], block_size)
    # the input's channels are C blocks, its columns the block positions (a mismatch fails the run)
    bound(relax.op.shape_to_tensor(relax.ShapeExpr([shape[1], shape[2]])),
           [channels * block_size, math.prod(positions)], bb)
    return bb.emit_te(_col2im, x, channels, image_dims, block_dims, positions, dilations, strides, pads[:rank],
                      primfunc_name_hint="col2im")


def _dims(value, rank: int, name: str, bb) -> Optional[list]:
    """The ``rank`` values of the int64 input ``value``: numbers where it is a constant, else variables bound when
    the model runs (None: neither)."""
    if is_tensor_const(value):
        return [tirx.IntImm("int64", int(v)) for v in const_array(value).reshape(-1)]
    if not computed(value):
        return None
    return run_time_dims(bb.normalize(relax.op.astype(value, "int64")), rank, name, bb)


def _col2im(x: te.Tensor, channels, image: list, block: list, positions: list, dilations: list, strides: list,
            pads: list) -> te.Tensor:
    rank = len(image)
    offsets = [te.reduce_axis((0, block[d]), name=f"k{d}") for d in range(rank)]

    def element(n, c, *p):
        valid, column, channel = tirx.const(True, "bool"), tirx.IntImm("int64", 0), c
        for d in range(rank):
            q = p[d] + pads[d] - offsets[d] * dilations[d]  # where offset k of a block lands p, in strides
            valid = tirx.all(valid, q >= 0, tirx.floormod(q, strides[d]) == 0,
                             tirx.floordiv(q, strides[d]) < positions[d])
            column = column * positions[d] + tirx.floordiv(q, strides[d])
            channel = channel * block[d] + offsets[d]
        read = tirx.if_then_else(valid, x[n, channel, column], tirx.const(0, x.dtype))
        return te.sum(read, axis=offsets)

    return te.compute([x.shape[0], channels, *image], element, name="col2im")

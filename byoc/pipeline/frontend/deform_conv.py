"""ONNX's DeformConv (opset 19; deformable convolutions of detection models), which TVM's importer lacks: a 2-D
convolution whose every kernel tap samples the input at its place moved by a learnt offset, bilinearly (zero
outside the input, as GridSample with ``align_corners=1`` samples), times an optional mask, as onnx.reference
computes it.

``offset`` is ``[N, offset_group * 2 * kH * kW, oH, oW]`` (per offset group and tap, the row then the column
shift), ``mask`` ``[N, offset_group * kH * kW, oH, oW]``; the output's spatial dims are the offset's. Groups,
offset groups, strides, dilations, pads and a bias are taken; one TVM compute sums each output over its group's
input channels and the kernel's taps. Other ranks than 2-D, or a kernel not known when the model is compiled, are
refused by name.
"""

from __future__ import annotations

from tvm import relax, te, tirx

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.run_time_values import static_shape


def deform_conv(node_name: str, inputs, attrs, bb: relax.BlockBuilder) -> relax.Expr:
    """DeformConv(X, W, offset[, B[, mask]]) (module docstring)."""
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    x_shape, w_shape, offset_shape = static_shape(x), static_shape(w), static_shape(offset)
    if x_shape is None or w_shape is None or offset_shape is None or len(x_shape) != 4 or len(w_shape) != 4 \
            or not all(isinstance(d, tirx.IntImm) for d in w_shape) or not isinstance(x_shape[1], tirx.IntImm):
        raise UnsupportedAttributeError(
            f"DeformConv node {node_name!r}: an input of shape {x_shape} with weights of shape {w_shape} is not "
            f"supported; byoc computes 2-D DeformConv with weights and input channels known when the model is "
            f"compiled")
    kernel = [int(d) for d in w_shape[2:]]
    return bb.emit_te(_deform_conv, x, w, offset, bias, mask, kernel, int(attrs.get("group", 1)),
                      int(attrs.get("offset_group", 1)), list(attrs.get("strides", [1, 1])),
                      list(attrs.get("dilations", [1, 1])), list(attrs.get("pads", [0, 0, 0, 0])),
                      primfunc_name_hint="deform_conv")


def _deform_conv(x: te.Tensor, w: te.Tensor, offset: te.Tensor, bias, mask, kernel: list, group: int,
                 offset_group: int, strides: list, dilations: list, pads: list) -> te.Tensor:
    batch, channels, height, width = x.shape
    out_channels, per_group = int(w.shape[0]), int(w.shape[1])
    outputs_per_group = out_channels // group
    per_offset_group = int(channels) // offset_group
    dtype = x.dtype
    c = te.reduce_axis((0, per_group), name="c")
    i = te.reduce_axis((0, kernel[0]), name="i")
    j = te.reduce_axis((0, kernel[1]), name="j")

    def sample(n, channel, row, column):  # bilinear, zero outside the input
        top, left = tirx.floor(row), tirx.floor(column)
        down, right = row - top, column - left
        top, left = tirx.Cast("int64", top), tirx.Cast("int64", left)
        total = tirx.const(0, dtype)
        for dr, wr in ((0, 1 - down), (1, down)):
            for dc, wc in ((0, 1 - right), (1, right)):
                r, q = top + dr, left + dc
                inside = tirx.all(r >= 0, r < height, q >= 0, q < width)
                total = total + wr * wc * tirx.if_then_else(inside, x[n, channel, r, q], tirx.const(0, dtype))
        return total

    def element(n, o, y, z):
        channel = (o // outputs_per_group) * per_group + c
        g = channel // per_offset_group
        tap = (g * kernel[0] + i) * kernel[1] + j
        row = tirx.Cast(dtype, y * strides[0] - pads[0] + i * dilations[0]) + offset[n, 2 * tap, y, z]
        column = tirx.Cast(dtype, z * strides[1] - pads[1] + j * dilations[1]) + offset[n, 2 * tap + 1, y, z]
        term = w[o, c, i, j] * sample(n, channel, row, column)
        if mask is not None:
            term = term * mask[n, tap, y, z]
        return te.sum(term, axis=[c, i, j])

    sums = te.compute([batch, out_channels, offset.shape[2], offset.shape[3]], element, name="deform_conv_sums")
    if bias is None:
        return sums
    return te.compute(sums.shape, lambda n, o, y, z: sums[n, o, y, z] + bias[o], name="deform_conv")

"""ONNX's AffineGrid (opset 20) with its output size given at run time, which TVM's converter refuses ("Dynamic size
of type Var"): ONNX's node tests feed the size as an input, and a spatial transformer computes it from its input's
shape.

The grid's spatial dims are variables bound when the model runs (``run_time_values.bound``; the size's batch is
checked against theta's). One TVM compute makes each point: the normalized coordinates of its position (-1 to 1
across each axis, through the pixels' centres, or their corners with ``align_corners``) times theta, as
``onnx.reference`` does: ``grid[n, h, w] = theta[n] @ (x_w, y_h, 1)`` in 2-D, ``(x_w, y_h, z_d, 1)`` in 3-D. An
axis of one point through the corners has it at -1, as onnx.reference does (onnxruntime 1.32 puts it at +1; the
spec's formula divides by zero there).
"""

from __future__ import annotations

from typing import Optional

from tvm import relax, te, tirx

from byoc.pipeline.frontend.run_time_values import bound, computed, static_shape


def affine_grid_of_run_time_size(inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """An AffineGrid whose ``size`` input is computed at run time (module docstring), or None: a constant size
    (TVM's converter), a theta of unknown shape."""
    if len(inputs) < 2 or not computed(inputs[1]):
        return None
    theta, size = inputs
    theta_shape, size_shape = static_shape(theta), static_shape(size)
    if theta_shape is None or size_shape is None or len(theta_shape) != 3 or len(size_shape) != 1 or \
            int(size_shape[0]) not in (4, 5):
        return None
    spatial_rank = int(size_shape[0]) - 2
    # the batch is theta's; the channels are read and dropped; each spatial dim a variable of its own
    spatial = [tirx.Var(name, "int64") for name in ("grid_depth", "grid_height", "grid_width")[-spatial_rank:]]
    bound(bb.normalize(relax.op.astype(size, "int64")),
           [theta_shape[0], tirx.Var("grid_channels", "int64"), *spatial], bb)
    return bb.emit_te(_grid, theta, spatial, bool(attrs.get("align_corners", 0)), primfunc_name_hint="affine_grid")


def _grid(theta: te.Tensor, spatial: list, align_corners: bool) -> te.Tensor:
    """``[N, *spatial, len(spatial)]``: each point's normalized coordinates (x first) times theta."""
    dtype = theta.dtype
    rank = len(spatial)

    def coordinate(index, extent):  # -1 to 1 across an axis of `extent` points
        i, n = index.astype(dtype), extent.astype(dtype)
        if align_corners:  # one point sits at -1, as onnx.reference's arange gives it
            return tirx.Select(extent > 1, tirx.const(-1, dtype) + 2 * i / (n - 1), tirx.const(-1, dtype))
        return tirx.const(-1, dtype) + (2 * i + 1) / n

    def point(batch, *where):
        positions, component = where[:rank], where[rank]
        # x along the last spatial axis, then y, then z
        coordinates = [coordinate(positions[rank - 1 - j], spatial[rank - 1 - j]) for j in range(rank)]
        total = theta[batch, component, rank]
        for j, c in enumerate(coordinates):
            total = total + theta[batch, component, j] * c
        return total

    return te.compute([theta.shape[0], *spatial, rank], point, name="affine_grid")

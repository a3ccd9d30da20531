"""ONNX's NonMaxSuppression with its limits (``max_output_boxes_per_class``, ``iou_threshold``,
``score_threshold``) computed at run time: ONNX's node tests feed each one as an input, and a detector may compute
them. TVM's converter reads the limits as constants only, taking a default (0 boxes: an empty result) for any that
is not one, and its legalization bounds the boxes per class by their count when the limit is not a constant.

TOPI's ``all_class_non_max_suppression`` takes each limit as a tensor, so the import calls it directly: the limits
as the model computes them (an absent one as ONNX's default), the boxes' rows then cut to the count selected, as
TVM's legalization of the Relax op does. ONNX keeps a box whose IoU equals the threshold, where TOPI suppresses it:
the threshold is the next float32 above the model's, made when the model runs (its bits plus one).
"""

from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx, topi

#: ONNX's defaults for absent limits: no boxes, IoU 0, no score threshold (relax.const is given each dtype: it
#: makes an int64 array int32)
_DEFAULTS = {2: np.array(0, np.int64), 3: np.array(0.0, np.float32), 4: np.array(np.finfo(np.float32).min, np.float32)}


def nms_of_run_time_limits(inputs, attrs, bb: relax.BlockBuilder) -> relax.Expr:
    """The selected ``[batch, class, box]`` rows of a NonMaxSuppression whose limits are given at run time."""
    boxes, scores = inputs[0], inputs[1]
    limits = []
    for index, dtype in ((2, "int64"), (3, "float32"), (4, "float32")):
        given = inputs[index] if len(inputs) > index else None
        value = relax.const(_DEFAULTS[index], dtype) if given is None else relax.op.astype(given, dtype)
        # TOPI reads the count as [1] (its 0-d form fails), the thresholds as 0-d
        limits.append(bb.normalize(relax.op.reshape(value, relax.ShapeExpr([1] if index == 2 else []))))
    count, iou, score = limits
    count = bb.normalize(relax.op.maximum(count, relax.const(np.array([0]), "int64")))  # a negative limit: none
    iou = bb.emit_te(_next_float_up, iou, primfunc_name_hint="next_float_up")
    if attrs.get("center_point_box", 0):  # [xc, yc, w, h] -> [y1, x1, y2, x2], as TVM's converter writes them
        xc, yc, w, h = (relax.TupleGetItem(bb.normalize(relax.op.split(boxes, 4, axis=2)), i) for i in range(4))
        half_w, half_h = w / relax.const(2.0, "float32"), h / relax.const(2.0, "float32")
        boxes = bb.normalize(relax.op.concat([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=2))
    selected = bb.emit_te(topi.vision.all_class_non_max_suppression, boxes, scores, count, iou, score, "onnx",
                          primfunc_name_hint="non_max_suppression")
    rows, total = relax.TupleGetItem(selected, 0), relax.TupleGetItem(selected, 1)
    end = bb.normalize(relax.op.concat([relax.op.astype(total, "int64"), relax.const(np.array([3]), "int64")], 0))
    return bb.normalize(relax.op.dynamic_strided_slice(rows, relax.const(np.array([0, 0]), "int64"), end,
                                                       relax.const(np.array([1, 1]), "int64")))


def _next_float_up(threshold: te.Tensor) -> te.Tensor:
    """The next float32 above the 0-d ``threshold`` (toward +inf: its bits plus one, or minus one below 0)."""
    def next_up():
        bits = tirx.reinterpret("int32", threshold[()])
        step = tirx.Select(threshold[()] >= tirx.const(0.0, "float32"), tirx.const(1, "int32"), tirx.const(-1, "int32"))
        return tirx.reinterpret("float32", bits + step)

    return te.compute((), next_up, name="next_float_up")

"""The dnnl vendor on data movement: concat, resize, strided slices, split, and the transposes, slices and
shuffles read as views of oneDNN's (blocked) layouts rather than copied; Pad and a repeating Expand stay on
the host. Each against onnxruntime through ``byoc.compile(..., strict=True)`` with the op checked to have
gone to dnnl, and every combination the runtime does not take checked to stay on the host with its reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dnnl_op_helpers import GEMV_RUNS, _compile, _conv, _f, _onednn_exec, _reason, _rules
from models import const, model, single_op, tensor


# -- concat -----------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [1, 2, 3, -1])
def test_concat_of_conv_outputs_in_blocked_layouts(axis):
    """Convs leave their outputs in oneDNN's blocked layouts; 5 and 16 channels block differently."""
    c1, i1 = _conv("x", "a", 3, 16, "c1", seed=1)
    c2, i2 = _conv("x", "b", 3, 16 if axis != 1 else 5, "c2", seed=2)
    c3, i3 = _conv("cat", "y", 16 + (5 if axis == 1 else 16), 8, "c3", seed=3)
    out = {1: [1, 21, 6, 7], 2: [1, 16, 12, 7], 3: [1, 16, 6, 14], -1: [1, 16, 6, 14]}[axis]
    nodes = [c1, c2, helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=axis)]
    if axis == 1:
        nodes.append(c3)
        outputs = [tensor("y", [1, 8, 6, 7])]
    else:
        outputs = [tensor("cat", out)]
    m = model(nodes, [tensor("x", [1, 3, 6, 7])], outputs, i1 + i2 + (i3 if axis == 1 else []))
    assert "dnnl.concat" in _rules(_compile(m))


def test_concat_of_inputs_a_constant_and_one_tensor_twice():
    nodes = [helper.make_node("Concat", ["x", "k", "x", "z"], ["y"], name="cat", axis=0)]
    m = model(nodes, [tensor("x", [2, 3, 5]), tensor("z", [1, 3, 5])], [tensor("y", [6, 3, 5])],
              [const("k", _f(1, 3, 5, seed=9))])
    assert _rules(_compile(m)) == {"dnnl.concat"}


# -- resize -----------------------------------------------------------------------------
def _resize(shape, mode, ctm, nearest_mode="round_prefer_floor", scales=None, sizes=None):
    out = sizes or [int(d * s) for d, s in zip(shape, scales)]
    inputs = ["x", "", "scales"] if scales else ["x", "", "", "sizes"]
    inits = ([const("scales", np.array(scales, np.float32))] if scales
             else [const("sizes", np.array(sizes, np.int64))])
    node = helper.make_node("Resize", inputs, ["y"], name="resize", mode=mode, coordinate_transformation_mode=ctm,
                            nearest_mode=nearest_mode)
    return model([node], [tensor("x", shape)], [tensor("y", out)], inits)


ACCEPTED_RESIZES = [
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),
    ("nearest", "asymmetric", "floor", [1, 1, 3, 2], None),
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 2, 2], None),
    ("nearest", "half_pixel", "round_prefer_ceil", [1, 1, 3, 3], None),
    ("nearest", "half_pixel", "round_prefer_ceil", [1, 1, 4, 1], None),
    ("nearest", "pytorch_half_pixel", "round_prefer_floor", [1, 1, 2, 2], None),
    ("linear", "half_pixel", "round_prefer_floor", [1, 1, 2, 2], None),
    ("linear", "half_pixel", "round_prefer_floor", None, [1, 2, 7, 4]),   # 5x7 -> 7x4: up and down, uneven
    ("linear", "half_pixel", "round_prefer_floor", None, [1, 2, 2, 3]),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", None, [1, 2, 11, 9]),
]


@pytest.mark.parametrize("mode,ctm,nearest_mode,scales,sizes", ACCEPTED_RESIZES)
def test_resize_modes_oneDNN_matches(mode, ctm, nearest_mode, scales, sizes):
    m = _resize([1, 2, 5, 7], mode, ctm, nearest_mode, scales, sizes)
    assert _rules(_compile(m)) == {"dnnl.resize2d"}


def test_nearest_upsample_of_a_conv_output_in_a_blocked_layout():
    """The YOLO / PP-OCR neck: conv, nearest 2x, concat with the skip."""
    c1, i1 = _conv("x", "c", 8, 16, "c1")
    nodes = [c1, helper.make_node("Resize", ["c", "", "scales"], ["u"], name="up", mode="nearest",
                                  coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Concat", ["u", "skip"], ["y"], name="cat", axis=1)]
    m = model(nodes, [tensor("x", [1, 8, 5, 6]), tensor("skip", [1, 8, 10, 12])], [tensor("y", [1, 24, 10, 12])],
              i1 + [const("scales", np.array([1, 1, 2, 2], np.float32))])
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.resize2d", "dnnl.concat"}


REJECTED_RESIZES = [
    ("cubic", "half_pixel", "round_prefer_floor", [1, 1, 2, 2], None, "cubic resize"),
    ("linear", "asymmetric", "round_prefer_floor", [1, 1, 2, 2], None, "coordinate_transformation_mode=asymmetric"),
    ("linear", "align_corners", "round_prefer_floor", [1, 1, 2, 2], None,
     "coordinate_transformation_mode=align_corners"),
    ("linear", "pytorch_half_pixel", "round_prefer_floor", None, [1, 2, 1, 4], "pytorch_half_pixel only when"),
    ("nearest", "asymmetric", "floor", None, [1, 2, 7, 14], "not an integer upscale"),
    # a downscale of whole sizes (5 x 0.6, 7 x 2/7): other scales are refused at import (prepare/standard_ops.py)
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 0.6, 2 / 7], None, "not an integer upscale"),
    ("nearest", "asymmetric", "round_prefer_floor", [1, 1, 2, 2], None, "nearest_mode=round_prefer_floor"),
    ("nearest", "align_corners", "floor", [1, 1, 2, 2], None, "coordinate_transformation_mode=align_corners"),
    ("nearest", "half_pixel", "floor", [1, 1, 4, 1], None, "nearest_mode=floor"),
    ("nearest", "half_pixel", "ceil", [1, 1, 2, 2], None, "nearest_mode=ceil"),
    ("nearest", "tf_half_pixel_for_nn", "floor", [1, 1, 2, 2], None, "tf_half_pixel_for_nn"),
]


@pytest.mark.parametrize("mode,ctm,nearest_mode,scales,sizes,reason", REJECTED_RESIZES)
def test_resize_modes_oneDNN_does_not_match_stay_on_host(mode, ctm, nearest_mode, scales, sizes, reason):
    m = _resize([1, 2, 5, 7], mode, ctm, nearest_mode, scales, sizes)
    assert reason in _reason(m, "relax.image.resize2d")


# -- strided slice --------------------------------------------------------------------------
def _slice(shape, out, starts, ends, axes=None, steps=None):
    names = ["x", "starts", "ends"] + (["axes"] if axes is not None else []) + (["steps"] if steps is not None else [])
    inits = [const("starts", np.array(starts, np.int64)), const("ends", np.array(ends, np.int64))]
    if axes is not None:
        inits.append(const("axes", np.array(axes, np.int64)))
    if steps is not None:
        if axes is None:
            raise ValueError("steps need axes")
        inits.append(const("steps", np.array(steps, np.int64)))
    return model([helper.make_node("Slice", names, ["y"], name="slice")], [tensor("x", shape)], [tensor("y", out)],
                 inits)


BIG = np.iinfo(np.int64).max


@pytest.mark.parametrize("starts,ends,axes,steps,out", [
    ([1, 2], [3, 5], [1, 2], None, [2, 2, 3, 7]),
    ([-3], [BIG], [-1], [1], [2, 4, 5, 3]),              # negative start, end past the edge, negative axis
    ([0, -4, 1], [1, -1, -2], None, None, [1, 3, 2, 7]),  # axes omitted: the leading ones
    ([2], [100], [0], [1], [0, 4, 5, 7]),                 # empty: stays on the host (checked below)
])
def test_strided_slice(starts, ends, axes, steps, out):
    m = _slice([2, 4, 5, 7], out, starts, ends, axes, steps)
    if 0 in out:
        assert "zero-sized" in _reason(m, "relax.strided_slice")
        return
    assert _rules(_compile(m)) == {"dnnl.strided_slice"}


def test_strided_slice_of_a_conv_output_in_a_blocked_layout():
    """The Focus / channel-split idiom: halves of a blocked conv output."""
    c1, i1 = _conv("x", "c", 3, 16, "c1")
    nodes = [c1, helper.make_node("Slice", ["c", "s0", "e0", "ax"], ["a"], name="lo"),
             helper.make_node("Slice", ["c", "s1", "e1", "ax"], ["b"], name="hi"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    inits = i1 + [const("s0", np.array([0], np.int64)), const("e0", np.array([5], np.int64)),
                  const("s1", np.array([11], np.int64)), const("e1", np.array([16], np.int64)),
                  const("ax", np.array([1], np.int64))]
    m = model(nodes, [tensor("x", [1, 3, 6, 5])], [tensor("y", [1, 5, 6, 5])], inits)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.strided_slice", "dnnl.add"}


@pytest.mark.parametrize("starts,ends,axes,steps,out", [
    ([0, 1], [BIG, BIG], [1, 3], [2, 2], [2, 2, 6, 3]),
    ([1], [-1], [1], [3], [2, 1, 6, 7]),             # one element: no step to view
    ([-6, 0], [7, 5], [-1, 0], [3, 1], [2, 4, 6, 2]),
])
def test_strided_slice_with_steps(starts, ends, axes, steps, out):
    m = _slice([2, 4, 6, 7], out, starts, ends, axes, steps)
    assert _rules(_compile(m)) == {"dnnl.strided_slice"}


@pytest.mark.parametrize("shape,out,starts,axes,steps", [
    ([2, 4, 5, 7], [2, 4, 3, 7], [0], [2], [2]),              # 0, 2, 4 of 5: 3 * 2 > 5
    ([1, 8, 7, 7], [1, 8, 4, 4], [0, 0], [2, 3], [2, 2]),     # LeViT's subsampling of a 7x7 grid: four pieces
    ([1, 8, 7, 7], [1, 8, 3, 3], [1, 1], [2, 3], [2, 2]),     # odd positions fit one view
    ([3, 10, 16], [3, 4, 8], [0, 1], [1, 2], [3, 2]),         # rows 0, 3, 6, 9 of 10, every second column
])
def test_strided_slice_whose_steps_span_past_the_axis(shape, out, starts, axes, steps):
    """n elements at step s of an axis shorter than n * s: oneDNN views at most n - 1 of them at once (its
    strides must not suggest an overlap), so the last element of each such axis is copied by a reorder of its
    own."""
    m = _slice(shape, out, starts, [BIG] * len(starts), axes, steps)
    assert _rules(_compile(m)) == {"dnnl.strided_slice"}


def test_space_to_depth_by_strided_slices_of_a_conv_output():
    """YOLOv5's Focus: x[..., ::2, ::2], x[..., 1::2, ::2], ... concatenated, then a conv."""
    c1, i1 = _conv("x", "c", 3, 8, "c1", seed=1)
    nodes, inits = [c1], list(i1)
    for k, (h, w) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)]):
        nodes.append(helper.make_node("Slice", ["c", f"s{k}", "e", "ax", "st"], [f"p{k}"], name=f"slice{k}"))
        inits.append(const(f"s{k}", np.array([h, w], np.int64)))
    inits += [const("e", np.array([BIG, BIG], np.int64)), const("ax", np.array([2, 3], np.int64)),
              const("st", np.array([2, 2], np.int64))]
    c2, i2 = _conv("cat", "y", 32, 4, "c2", seed=2)
    nodes += [helper.make_node("Concat", ["p0", "p1", "p2", "p3"], ["cat"], name="cat", axis=1), c2]
    m = model(nodes, [tensor("x", [1, 3, 8, 10])], [tensor("y", [1, 4, 4, 5])], inits + i2)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.strided_slice", "dnnl.concat"}


def test_strided_slice_with_a_negative_step_stays_on_host():
    m = _slice([2, 4, 5, 7], [2, 3, 5, 7], [3], [0], [1], [-1])
    assert "strides [-1]" in _reason(m, "relax.strided_slice")


# -- split -------------------------------------------------------------------------------------
@pytest.mark.parametrize("split,axis,outs", [
    (None, 1, [[1, 4, 5, 3], [1, 4, 5, 3]]),               # equal halves (the C2f block of YOLOv8)
    ([3, 5], 1, [[1, 3, 5, 3], [1, 5, 5, 3]]),
    ([1, 2, 2], -2, [[1, 8, 1, 3], [1, 8, 2, 3], [1, 8, 2, 3]]),
])
def test_split_results_each_a_sub_memory_copy(split, axis, outs):
    names = ["a", "b", "c"][:len(outs)]
    inits = [const("split", np.array(split, np.int64))] if split else []
    node = helper.make_node("Split", ["x"] + (["split"] if split else []), names, name="split", axis=axis)
    m = model([node], [tensor("x", [1, 8, 5, 3])], [tensor(n, s) for n, s in zip(names, outs)], inits)
    assert _rules(_compile(m)) == {"dnnl.split"}


def test_split_into_contiguous_parts_reads_them_in_place():
    """An unrolled LSTM cuts its input projection into one run of rows per step and gate (ddddocr's OCR model:
    256 of them): each part is those bytes of the matmul's output, not a copy. (Four rows are byoc's GEMV where it
    runs, which oneDNN's log does not show.)"""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="projection"),
             helper.make_node("Split", ["p"], ["p0", "p1", "p2", "p3"], name="steps", axis=0, num_outputs=4),
             helper.make_node("Mul", ["p0", "p1"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "p2"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "p3"], ["y"], name="sub")]
    m = model(nodes, [tensor("x", [4, 16])], [tensor("y", [1, 32])], [const("w", _f(16, 32, seed=4))], opset=18)
    _compile(m)
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert executed == ([] if GEMV_RUNS else ["matmul"]) + ["binary", "binary", "binary"], executed


def test_split_of_a_conv_output_feeding_a_conv_and_a_concat():
    """The YOLOv8 C2f block: conv, split in halves, a conv on one half, concat of all three."""
    c1, i1 = _conv("x", "c", 3, 16, "c1", seed=1)
    c2, i2 = _conv("b", "d", 8, 8, "c2", seed=2)
    nodes = [c1, helper.make_node("Split", ["c"], ["a", "b"], name="split", axis=1), c2,
             helper.make_node("Concat", ["a", "b", "d"], ["y"], name="cat", axis=1)]
    m = model(nodes, [tensor("x", [1, 3, 6, 5])], [tensor("y", [1, 24, 6, 5])], i1 + i2)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.split", "dnnl.concat"}


def test_split_of_a_blocked_conv_output_on_block_boundaries():
    """32 channels in halves of 16: each half is copied in the conv's blocked layout, for the next convs."""
    c1, i1 = _conv("x", "c", 3, 32, "c1", seed=1)
    c2, i2 = _conv("a", "d", 16, 8, "c2", seed=2)
    c3, i3 = _conv("b", "e", 16, 8, "c3", seed=3)
    nodes = [c1, helper.make_node("Split", ["c"], ["a", "b"], name="split", axis=1), c2, c3,
             helper.make_node("Concat", ["d", "e", "a"], ["y"], name="cat", axis=1)]
    m = model(nodes, [tensor("x", [1, 3, 7, 5])], [tensor("y", [1, 32, 7, 5])], i1 + i2 + i3)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.split", "dnnl.concat"}


# -- a channel shuffle between convs ----------------------------------------------------------------
def test_shufflenet_unit_with_random_weights():
    """A ShuffleNet v1 unit at its real sizes (grouped 1x1 convs, a channel shuffle, a depthwise conv, Sum with the
    input, and a strided unit that concatenates an average pool): oneDNN picks nhwc for some convs and nChw8c for
    others, and the sum and concat read that mix in one of the layouts. The light zoo's ShuffleNet has constant
    weights, whose outputs cannot show a wrong layout."""
    c, g = 136, 4
    w1 = const("w1", _f(c, c // g, 1, 1, seed=1, scale=0.2))
    dw = const("dw", _f(c, 1, 3, 3, seed=2, scale=0.3))
    w2 = const("w2", _f(c, c // g, 1, 1, seed=3, scale=0.2))
    w3 = const("w3", _f(c, c // g, 3, 3, seed=4, scale=0.1))
    shape5 = const("shape5", np.array([1, g, c // g, 28, 28], np.int64))
    shape4 = const("shape4", np.array([1, c, 28, 28], np.int64))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="gconv1", group=g),
        helper.make_node("Relu", ["a"], ["ar"], name="relu1"),
        helper.make_node("Reshape", ["ar", "shape5"], ["r5"], name="split_groups"),
        helper.make_node("Transpose", ["r5"], ["t5"], name="shuffle", perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t5", "shape4"], ["sh"], name="merge_groups"),
        helper.make_node("Conv", ["sh", "dw"], ["d"], name="dwconv", group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w2"], ["e"], name="gconv2", group=g),
        helper.make_node("Sum", ["e", "x"], ["s"], name="residual"),
        helper.make_node("Conv", ["s", "w3"], ["f"], name="strided", group=g, strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["s"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["f", "p"], ["y"], name="concat", axis=1),
    ]
    m = model(nodes, [tensor("x", [1, c, 28, 28])], [tensor("y", [1, 2 * c, 14, 14])],
              [w1, dw, w2, w3, shape5, shape4])
    _compile(m)
    # The shuffle is one reorder between 5-D views of the two convs' NHWC memory (three before: to plain,
    # the transpose, back to NHWC), and the depthwise conv reads its result as it is.
    executed = _onednn_exec(m)
    shuffle = next(k for k, line in enumerate(executed) if ",reorder," in line and "1x34x4x28x28" in line)
    assert ",convolution," in executed[shuffle - 1] and ",convolution," in executed[shuffle + 1], executed


# -- data movement that stays on the host -----------------------------------------------------------
def test_expand_that_repeats_values_more_than_the_limit_stays_on_host():
    m = single_op("Expand", {"x": [1, 3, 1]}, [2, 3, 65], initializers=[const("shape", np.array([2, 3, 65], np.int64))])
    assert "repeats values 65 times" in _reason(m, "relax.broadcast_to")


def test_expand_that_repeats_values_is_a_concat_of_copies():
    """Along each axis where the input has 1 (two here), one concat of that many copies; against onnxruntime."""
    m = single_op("Expand", {"x": [1, 3, 1]}, [2, 3, 4], initializers=[const("shape", np.array([2, 3, 4], np.int64))])
    _compile(m)
    assert [line.split(",")[3] for line in _onednn_exec(m)] == ["concat", "concat"]


def _pad(shape, out, pads, value=None, axes=None, mode="constant", opset=17):
    """A Pad node; its value input is left out when it is None and no axes follow it."""
    inits = [const("pads", np.array(pads, np.int64))]
    if value is not None or axes is not None:
        inits.append(const("value", np.array(value or 0, np.float32)))
    if axes is not None:
        inits.append(const("axes", np.array(axes, np.int64)))
    nodes = [helper.make_node("Pad", ["x"] + [i.name for i in inits], ["y"], mode=mode, name="pad")]
    return model(nodes, [tensor("x", shape)], [tensor("y", out)], inits, opset=opset)


@pytest.mark.parametrize("shape,out,pads,value,axes,opset", [
    ([1, 3, 4, 4], [1, 3, 7, 5], [0, 0, 1, 0, 0, 0, 2, 1], 1.5, None, 17),
    ([2, 7, 7, 96], [2, 8, 8, 96], [0, 0, 0, 0, 0, 1, 1, 0], None, None, 17),  # Swin-V2's window pad (NHWC)
    ([1, 3, 4, 4], [1, 3, 8, 5], [2, 0, 2, 1], -0.5, [2, 3], 18),            # opset 18's axes
    ([5, 6], [5, 9], [0, 3, 0, 0], None, None, 17),
])
def test_a_constant_pad_is_a_fill_and_one_copy(shape, out, pads, value, axes, opset):
    """TVM's converter emits ONNX Pad as call_tir(pad), which no rule takes (Swin-V2's window pads stayed on the
    host inside every stage); byoc imports a constant pad as relax.nn.pad, and dnnl fills the output and copies
    the input into its middle: one reorder in oneDNN's log. Against onnxruntime."""
    m = _pad(shape, out, pads, value, axes, opset=opset)
    assert _rules(_compile(m)) == {"dnnl.pad"}
    assert [line.split(",")[3] for line in _onednn_exec(m)] == ["reorder"]


def test_a_pad_between_convs_in_blocked_layouts():
    conv1, inits1 = _conv("x", "a", 3, 16, "c1", seed=5)
    conv2, inits2 = _conv("p", "y", 16, 8, "c2", pads=(0, 0, 0, 0), seed=6)
    nodes = [conv1, helper.make_node("Pad", ["a", "pads"], ["p"], name="pad"), conv2]
    m = model(nodes, [tensor("x", [1, 3, 9, 9])], [tensor("y", [1, 8, 8, 9])],
              inits1 + inits2 + [const("pads", np.array([0, 0, 1, 1, 0, 0, 0, 1], np.int64))])
    assert _rules(_compile(m)) >= {"dnnl.pad"}


@pytest.mark.parametrize("mode,pads,out,op", [
    ("reflect", [0, 0, 1, 1, 0, 0, 1, 1], [1, 3, 6, 6], "call_tir(mirror_pad)"),
    ("edge", [0, 0, 1, 1, 0, 0, 1, 1], [1, 3, 6, 6], "call_tir(replicate_pad)"),
    ("constant", [0, 0, -1, 0, 0, 0, 1, 1], [1, 3, 4, 5], "call_tir(pad)"),  # a negative width crops
])
def test_other_pads_stay_on_host_and_compute_what_onnx_says(mode, pads, out, op):
    _compile(_pad([1, 3, 4, 4], out, pads, mode=mode), host_ops=[op])


# -- layouts kept through data movement ---------------------------------------------------
def test_transposes_around_a_conv1d_are_views_of_its_nwc_layout():
    """A TensorFlow export's conv1d: [N, W, C] -> Transpose -> Conv -> Transpose -> [N, W', C'], as Magika has it.
    Seen through the permuted strides, the input is the conv's NWC source and its NWC output the result: no
    reorder runs at all."""
    w, b = _f(32, 16, 3, seed=2, scale=0.3), _f(32, seed=3)
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="to_ncw", perm=[0, 2, 1]),
             helper.make_node("Conv", ["xt", "w", "b"], ["c"], name="conv"),
             helper.make_node("Transpose", ["c"], ["ct"], name="to_nwc", perm=[0, 2, 1]),
             helper.make_node("Relu", ["ct"], ["y"], name="relu")]
    m = model(nodes, [tensor("x", [1, 64, 16])], [tensor("y", [1, 62, 32])], [const("w", w), const("b", b)])
    _compile(m)
    executed = _onednn_exec(m)
    assert not [x for x in executed if ",reorder," in x], executed


def test_a_slice_of_the_whole_tensor_is_that_tensor():
    """An exporter's no-op Slice (start 0, end past the axis) between a conv and its consumer copies nothing."""
    conv, inits = _conv("x", "a", 3, 16, "c1", seed=4)
    nodes = [conv, helper.make_node("Slice", ["a", "starts", "ends", "axes"], ["s"], name="whole"),
             helper.make_node("Relu", ["s"], ["y"])]
    bounds = [const("starts", np.array([0], np.int64)), const("ends", np.array([BIG], np.int64)),
              const("axes", np.array([3], np.int64))]
    m = model(nodes, [tensor("x", [1, 3, 12, 20])], [tensor("y", [1, 16, 12, 20])], inits + bounds)
    _compile(m)
    executed = _onednn_exec(m)  # the relu on the conv's blocked output, then one reorder into the caller's buffer
    assert [line.split(",")[3] for line in executed] == ["convolution", "eltwise", "reorder"], executed


@pytest.mark.parametrize("index", [0, 2, -1, [1, 2], [-2]])
def test_a_gather_at_constant_indices_of_one_slice_is_that_slice(index):
    """Swin's q, k, v = qkv[0], qkv[1], qkv[2] as the dynamo exporter writes it (a Gather of run-time data at a
    scalar constant): TVM's converter adds int64 index arithmetic on the data's shape, host ops that cut the
    encoder into a partition per block (swin_t_dynamo: 14 partitions, 2 now; its legacy export 13 -> 1)."""
    index = np.array(index, np.int64)
    data_shape = [3, 2, 5, 4]
    out = list(np.take(np.zeros(data_shape), index, axis=0).shape)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Gather", ["r", "i"], ["g"], name="gather", axis=0),
             helper.make_node("Sigmoid", ["g"], ["y"], name="sigmoid")]
    m = model(nodes, [tensor("x", data_shape)], [tensor("y", out)], [const("i", index)])
    artifact = _compile(m)
    assert len(artifact.plan.partitions) == 1 and {"gather"} <= set(artifact.plan.partitions[0].onnx_nodes)


def test_one_tokens_heads_permuted_then_multiplied_by_a_broadcast_table():
    """[1, 1, 2, 32] -> [1, 2, 1, 32] (a decoder step's heads, the sequence 1) times a [1, 1, 1, 32] rotary table:
    the permuted view's bytes are plain, and its dims of size 1 get plain strides (with the strides the permutation
    gave them, oneDNN's binary kernel computed garbage)."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="heads", perm=[0, 2, 1, 3]),
             helper.make_node("Mul", ["t", "cos"], ["y"], name="rotate")]
    m = model(nodes, [tensor("x", [1, 1, 2, 32]), tensor("cos", [1, 1, 1, 32])], [tensor("y", [1, 2, 1, 32])])
    _compile(m)

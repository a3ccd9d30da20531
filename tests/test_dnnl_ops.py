"""The dnnl vendor on the ops CNN, detection and OCR models add to the basics:
concat, split, resize, transposed conv, batch norm, LRN, hard-sigmoid /
hard-swish / swish (alone and as conv post-ops), strided slices, depthwise
convs, n-ary Sum / Mean, sqrt / exp / leaky relu / power; each against
onnxruntime through ``byoc.compile(..., strict=True)`` with the op checked to
have gone to dnnl, and every combination the runtime does not take checked to
stay on the host with its reason.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc

from models import const, model, onnxruntime_outputs, random_inputs, rng, single_op, tensor

RTOL, ATOL = 1e-4, 1e-4


def _f(*shape, seed=5, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _compile(m, host_ops=(), inputs=None, scale=1.0):
    """Compile for dnnl, check which ops stayed on the host, compare every output with onnxruntime."""
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert sorted(d.op for d in artifact.plan.host_ops) == sorted(host_ops), \
        [(d.op, d.reasons) for d in artifact.plan.host_ops]
    inputs = inputs or {k: v * np.float32(scale) for k, v in random_inputs(m).items()}
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return artifact


def _rules(artifact) -> set[str]:
    return {d.rule for d in artifact.plan.decisions.values() if d.rule}


def _reason(m, op):
    plan = byoc.partition(m, ["dnnl"])
    reasons = [d.reasons["dnnl"] for d in plan.host_ops if d.op == op]
    assert reasons, f"{op} went to dnnl: {plan.host_ops}"
    return reasons[0]


def _conv(x, out, cin, cout, prefix, k=3, group=1, pads=(1, 1, 1, 1), seed=1):
    """A Conv node with a bias, and its initializers."""
    w, b = _f(cout, cin // group, k, k, seed=seed, scale=0.3), _f(cout, seed=seed + 50)
    node = helper.make_node("Conv", [x, f"{prefix}_w", f"{prefix}_b"], [out], name=prefix, pads=list(pads), group=group)
    return node, [const(f"{prefix}_w", w), const(f"{prefix}_b", b)]


# -- activations ------------------------------------------------------------------------
def _activation_nodes(kind, x, out, p="act"):
    """ONNX nodes for an activation; HardSwish also spelled x * HardSigmoid(x), swish as x * Sigmoid(x)."""
    if kind == "hardsigmoid":
        return [helper.make_node("HardSigmoid", [x], [out], name=f"{p}_hs", alpha=0.2, beta=0.5)]
    if kind == "hardswish":
        return [helper.make_node("HardSwish", [x], [out], name=f"{p}_hsw")]
    if kind == "hardswish_hardsigmoid":
        return [helper.make_node("HardSigmoid", [x], [f"{p}_g"], name=f"{p}_hs", alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", [x, f"{p}_g"], [out], name=f"{p}_mul")]
    if kind == "swish":
        return [helper.make_node("Sigmoid", [x], [f"{p}_s"], name=f"{p}_sig"),
                helper.make_node("Mul", [x, f"{p}_s"], [out], name=f"{p}_mul")]
    if kind == "swish_reversed":
        return [helper.make_node("Sigmoid", [x], [f"{p}_s"], name=f"{p}_sig"),
                helper.make_node("Mul", [f"{p}_s", x], [out], name=f"{p}_mul")]
    raise ValueError(kind)


ACTIVATIONS = ["hardsigmoid", "hardswish", "hardswish_hardsigmoid", "swish", "swish_reversed"]


@pytest.mark.parametrize("kind", ACTIVATIONS)
def test_activation_alone_is_one_eltwise(kind):
    shape = [1, 3, 5, 7]
    m = model(_activation_nodes(kind, "x", "y"), [tensor("x", shape)], [tensor("y", shape)])
    artifact = _compile(m, scale=4.0)  # past the kinks at +-3 and +-2.5
    assert _rules(artifact) == {f"dnnl.{kind.replace('_reversed', '')}"}


@pytest.mark.parametrize("kind", ACTIVATIONS)
@pytest.mark.parametrize("group", [1, 6], ids=["dense", "depthwise"])
def test_conv_bias_activation_is_one_primitive(kind, group):
    conv, inits = _conv("x", "c", 6, 6, "conv", group=group)
    m = model([conv, *_activation_nodes(kind, "c", "y")], [tensor("x", [1, 6, 9, 11])], [tensor("y", [1, 6, 9, 11])],
              inits)
    artifact = _compile(m, scale=2.0)
    assert _rules(artifact) == {f"dnnl.conv2d_bias_{kind.replace('_reversed', '')}"}


def test_depthwise_conv_with_relu6_and_residual():
    conv, inits = _conv("x", "c", 8, 8, "dw", group=8)
    nodes = [conv, helper.make_node("Add", ["c", "x"], ["s"], name="res"),
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="relu6")]
    inits += [const("lo", np.array(0.0, np.float32)), const("hi", np.array(6.0, np.float32))]
    m = model(nodes, [tensor("x", [1, 8, 7, 7])], [tensor("y", [1, 8, 7, 7])], inits)
    assert _rules(_compile(m, scale=3.0)) == {"dnnl.conv2d_bias_add_clip"}


@pytest.mark.parametrize("cin,cout,k,strides,pads,dilations,group,bias,relu", [
    (3, 5, 3, [1], [1, 1], [1], 1, True, True),
    (4, 8, 5, [2], [2, 1], [1], 2, True, False),   # grouped, asymmetric padding, stride 2
    (6, 6, 3, [1], [0, 0], [2], 6, False, True),   # depthwise, dilated, no padding
    (1, 258, 256, [128], [0, 0], [1], 1, False, False),  # Silero's STFT: a 256-tap filter bank, stride 128
])
def test_conv1d(cin, cout, k, strides, pads, dilations, group, bias, relu):
    """Conv over (N, C, W) is oneDNN's 1-D convolution, with the conv2d post-ops."""
    width = 640 if k == 256 else 17
    out_w = (width + sum(pads) - dilations[0] * (k - 1) - 1) // strides[0] + 1
    names = ["x", "w", "b"] if bias else ["x", "w"]
    inits = [const("w", _f(cout, cin // group, k, seed=3, scale=0.3))] + ([const("b", _f(cout, seed=4))] if bias else [])
    nodes = [helper.make_node("Conv", names, ["c" if relu else "y"], name="conv", strides=strides, pads=pads,
                              dilations=dilations, group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    m = model(nodes, [tensor("x", [2, cin, width])], [tensor("y", [2, cout, out_w])], inits)
    assert _rules(_compile(m)) == {"dnnl.conv1d" + "_bias" * bias + "_relu" * relu}


@pytest.mark.parametrize("x_shape,kernel,pads,out", [
    ([1, 16, 40, 1], [5, 1], [0, 0, 0, 0], [1, 24, 36, 1]),  # Magika: a 5x1 conv over 512x1
    ([2, 16, 1, 33], [1, 3], [0, 1, 0, 1], [2, 24, 1, 33]),  # the other axis, padded along it
])
def test_conv2d_over_a_unit_axis_runs_as_conv1d_and_feeds_2d_ops(x_shape, kernel, pads, out):
    """The conv runs as oneDNN's 1-D convolution; its input and output stay 4-D for the ops around it."""
    w, b = _f(24, 16, *kernel, seed=2, scale=0.3), _f(24, seed=3)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_in"),
             helper.make_node("Conv", ["r", "w", "b"], ["c"], name="conv", pads=pads),
             helper.make_node("Relu", ["c"], ["y"], name="relu"),
             helper.make_node("MaxPool", ["y"], ["p"], name="pool", kernel_shape=[1, 1])]
    m = model(nodes, [tensor("x", x_shape)], [tensor("p", out)], [const("w", w), const("b", b)])
    assert "dnnl.conv2d_bias_relu" in _rules(_compile(m))


def test_conv1d_chain_with_a_residual_reads_blocked_layouts():
    conv1, inits1 = _conv1d("x", "c1", 16, 16, "c1")
    conv2, inits2 = _conv1d("c1", "c2", 16, 16, "c2")
    nodes = [conv1, conv2, helper.make_node("Add", ["c2", "x"], ["s"], name="res"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    m = model(nodes, [tensor("x", [1, 16, 31])], [tensor("y", [1, 16, 31])], inits1 + inits2)
    assert _rules(_compile(m)) == {"dnnl.conv1d_bias", "dnnl.conv1d_bias_add_relu"}


def test_conv1d_with_a_weight_that_is_not_constant_stays_on_host():
    m = single_op("Conv", {"x": [1, 2, 9], "w": [3, 2, 3]}, [1, 3, 7])
    assert _reason(m, "relax.nn.conv1d") == "the weight is not a constant (it is prepared once, at build or load time)"


def _conv1d(x, out, cin, cout, prefix, k=3, seed=1):
    """A 1-D Conv node with a bias and 'same' padding, and its initializers."""
    w, b = _f(cout, cin, k, seed=seed, scale=0.3), _f(cout, seed=seed + 50)
    node = helper.make_node("Conv", [x, f"{prefix}_w", f"{prefix}_b"], [out], name=prefix, pads=[k // 2, k // 2])
    return node, [const(f"{prefix}_w", w), const(f"{prefix}_b", b)]


def test_activation_whose_input_is_read_again_is_not_folded_into_the_conv():
    """The conv output also leaves the partition: hard-swish runs as its own primitive after it."""
    conv, inits = _conv("x", "c", 4, 4, "conv")
    m = model([conv, *_activation_nodes("hardswish", "c", "y")], [tensor("x", [1, 4, 6, 6])],
              [tensor("y", [1, 4, 6, 6]), tensor("c", [1, 4, 6, 6])], inits)
    assert "dnnl.hardswish" in _rules(_compile(m, scale=2.0))


def test_hard_swish_with_other_constants_is_not_taken_as_hard_swish():
    """x * clip(x + 3, 0, 6) / 5 is not hard-swish: its ops run one by one, still on dnnl."""
    nodes = [helper.make_node("Add", ["x", "three"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "lo", "hi"], ["c"], name="clip"),
             helper.make_node("Div", ["c", "five"], ["d"], name="div"),
             helper.make_node("Mul", ["x", "d"], ["y"], name="mul")]
    inits = [const("three", np.array(3.0, np.float32)), const("five", np.array(5.0, np.float32)),
             const("lo", np.array(0.0, np.float32)), const("hi", np.array(6.0, np.float32))]
    m = model(nodes, [tensor("x", [2, 5])], [tensor("y", [2, 5])], inits)
    artifact = _compile(m, scale=4.0)
    assert "dnnl.hardswish" not in _rules(artifact) and "dnnl.divide" in _rules(artifact)
    declined = {reason for d in artifact.plan.decisions.values() for rule, reason in d.rejections
                if rule == "dnnl.hardswish"}
    assert declined == {"hardswish: 5 where hard-swish has 6"}


def test_hard_swish_spelled_with_a_per_channel_constant_runs_as_broadcasting_ops():
    """x * clip(x + c, 0, 6) / 6 with c of shape (1, C, 1, 1) is no hard-swish: the rule says why, and
    its ops go to dnnl one by one, the add broadcasting c."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "lo", "hi"], ["k"], name="clip"),
             helper.make_node("Div", ["k", "six"], ["d"], name="div"),
             helper.make_node("Mul", ["x", "d"], ["y"], name="mul")]
    inits = [const("c", np.full((1, 3, 1, 1), 3.0, np.float32)), const("six", np.array(6.0, np.float32)),
             const("lo", np.array(0.0, np.float32)), const("hi", np.array(6.0, np.float32))]
    m = model(nodes, [tensor("x", [2, 3, 4, 5])], [tensor("y", [2, 3, 4, 5])], inits)
    artifact = _compile(m, scale=4.0)
    rules = _rules(artifact)
    assert "dnnl.hardswish" not in rules and {"dnnl.add", "dnnl.clip", "dnnl.divide", "dnnl.multiply"} <= rules
    declined = {reason for d in artifact.plan.decisions.values() for rule, reason in d.rejections
                if rule == "dnnl.hardswish"}
    assert declined == {"hardswish: three of shape (1, 3, 1, 1) is not a scalar constant"}


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
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 0.6, 0.6], None, "not an integer upscale"),
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


def test_strided_slice_whose_steps_span_past_the_axis_stays_on_host():
    """Three elements at step 2 of an axis of 5 (0, 2, 4): oneDNN's strided views need 3 * 2 <= 5."""
    m = _slice([2, 4, 5, 7], [2, 4, 3, 7], [0], [BIG], [2], [2])
    assert "3 elements at step 2 along an axis of 5" in _reason(m, "relax.strided_slice")


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


# -- transposed conv -------------------------------------------------------------------------
@pytest.mark.parametrize("strides,pads,output_padding,group,dilation,bias,act", [
    ([2, 2], [1, 1, 1, 1], [1, 1], 1, [1, 1], True, ""),
    ([2, 2], [0, 0, 0, 0], [0, 0], 1, [1, 1], True, "Relu"),   # PP-OCR det's 2x upsampling head
    ([3, 2], [1, 0, 2, 1], [2, 1], 2, [1, 1], False, ""),
    ([1, 1], [1, 1, 1, 1], [0, 0], 1, [2, 2], True, "Relu"),
    ([2, 2], [1, 1, 1, 1], [0, 0], 4, [1, 1], True, ""),
    ([3, 2], [0, 0, 0, 0], [2, 1], 1, [1, 1], False, ""),     # output_padding beyond the end padding
    ([2, 2], [0, 1, 0, 0], [1, 1], 2, [2, 1], True, "Relu"),
])
def test_conv_transpose(strides, pads, output_padding, group, dilation, bias, act):
    cin, cout, k = 4, 6 if group != 4 else 4, 3
    x = [1, cin, 5, 6]
    out = [1, cout] + [(x[2 + d] - 1) * strides[d] + dilation[d] * (k - 1) + 1 - pads[d] - pads[d + 2]
                       + output_padding[d] for d in range(2)]
    inits = [const("w", _f(cin, cout // group, k, k, seed=3, scale=0.3))]
    inits += [const("b", _f(cout, seed=4))] if bias else []
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["t" if act else "y"], name="deconv",
                            strides=strides, pads=pads, output_padding=output_padding, group=group, dilations=dilation)
    nodes = [node] + ([helper.make_node(act, ["t"], ["y"], name="act")] if act else [])
    m = model(nodes, [tensor("x", x)], [tensor("y", out)], inits)
    rule = "dnnl.conv2d_transpose" + ("_bias" if bias else "") + ("_relu" if act else "")
    assert _rules(_compile(m)) == {rule}


def test_conv_transpose_with_a_weight_that_is_not_constant_stays_on_host():
    m = single_op("ConvTranspose", {"x": [1, 2, 4, 4], "w": [2, 3, 3, 3]}, [1, 3, 9, 9], {"strides": [2, 2]})
    assert "weight is not a constant" in _reason(m, "relax.nn.conv2d_transpose")


# -- batch norm -----------------------------------------------------------------------------
def _bn_inits(c, seed=7):
    return [const("scale", 1 + 0.2 * _f(c, seed=seed)), const("bias", _f(c, seed=seed + 1)),
            const("mean", _f(c, seed=seed + 2)), const("var", np.abs(_f(c, seed=seed + 3)) + 0.5)]


@pytest.mark.parametrize("shape", [[2, 5, 3, 7], [3, 6], [1, 4, 9]])
def test_batch_norm_on_its_own(shape):
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn",
                            epsilon=1e-3)
    m = model([node], [tensor("x", shape)], [tensor("y", shape)], _bn_inits(shape[1]))
    assert _rules(_compile(m)) == {"dnnl.batch_norm"}


def test_batch_norm_after_a_concat_of_blocked_conv_outputs():
    c1, i1 = _conv("x", "a", 3, 8, "c1", seed=1)
    c2, i2 = _conv("x", "b", 3, 8, "c2", seed=2)
    nodes = [c1, c2, helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
             helper.make_node("BatchNormalization", ["cat", "scale", "bias", "mean", "var"], ["y"], name="bn")]
    m = model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", [1, 16, 6, 6])], i1 + i2 + _bn_inits(16))
    assert "dnnl.batch_norm" in _rules(_compile(m))


@pytest.mark.parametrize("rank,bias,group,after", [
    (4, True, 1, "hardswish"), (4, False, 1, "relu"), (4, True, 6, "relu"), (4, False, 6, "hardswish"),
    (4, True, 1, "add_relu"), (4, True, 1, ""), (3, True, 1, "relu"), (3, False, 6, "")])
def test_batch_norm_after_a_conv_is_folded_into_its_weights_and_bias(rank, bias, group, after):
    """Opset 13+ exports keep BatchNormalization after each Conv (RapidAI's MobileNetV3 orientation classifier):
    folded into the conv's weights and bias, the activation after it is a post-op, and one convolution runs."""
    shape = [1, 6, 9, 11][:rank]
    w = _f(6, 6 // group, *[3] * (rank - 2), seed=1, scale=0.3)
    inits = [const("w", w), *_bn_inits(6)] + ([const("b", _f(6, seed=9))] if bias else [])
    nodes = [helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], name="conv",
                              pads=[1] * (2 * (rank - 2)), group=group),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn",
                              epsilon=1e-3)]
    if after == "add_relu":
        nodes += [helper.make_node("Add", ["n", "x"], ["s"], name="res"),
                  helper.make_node("Relu", ["s"], ["y"], name="relu")]
    elif after == "relu":
        nodes.append(helper.make_node("Relu", ["n"], ["y"], name="relu"))
    elif after:
        nodes += _activation_nodes(after, "n", "y")
    else:
        nodes[-1].output[0] = "y"
    m = model(nodes, [tensor("x", shape)], [tensor("y", shape)], inits, opset=17)
    artifact = _compile(m, scale=2.0)
    conv = f"conv{rank - 2}d"
    # A pattern cannot end in the batch norm: taken alone, it is folded into the conv all the same.
    rules = {f"dnnl.{conv}{'_bias' * bias}_bn_{after}"} if after else {f"dnnl.{conv}{'_bias' * bias}", "dnnl.batch_norm"}
    assert _rules(artifact) == rules
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert executed.count("convolution") == 1 and set(executed) <= {"convolution", "reorder"}, executed


def test_batch_norm_after_a_conv_whose_output_is_read_again_runs_on_its_own():
    conv, inits = _conv("x", "c", 3, 8, "conv")
    nodes = [conv, helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn"),
             helper.make_node("Add", ["n", "c"], ["y"], name="add")]
    m = model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", [1, 8, 6, 6])], inits + _bn_inits(8), opset=17)
    _compile(m)
    assert "batch_normalization" in [line.split(",")[3] for line in _onednn_exec(m)]


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
    256 of them): each part is those bytes of the matmul's output, not a copy."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="projection"),
             helper.make_node("Split", ["p"], ["p0", "p1", "p2", "p3"], name="steps", axis=0, num_outputs=4),
             helper.make_node("Mul", ["p0", "p1"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "p2"], ["a"], name="add"),
             helper.make_node("Sub", ["a", "p3"], ["y"], name="sub")]
    m = model(nodes, [tensor("x", [4, 16])], [tensor("y", [1, 32])], [const("w", _f(16, 32, seed=4))], opset=18)
    _compile(m)
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert executed == ["matmul", "binary", "binary", "binary"], executed


def test_matmuls_of_one_row_by_constant_weights_run_as_one():
    """An unrolled LSTM's per-gate products H·R_gᵀ at batch 1 (ddddocr's OCR model: 248 of 1x512x512): one
    matmul by the weights side by side, each product a view of its columns, one of them a graph output."""
    nodes = [helper.make_node("MatMul", ["h", f"r{g}"], [f"g{g}"], name=f"hr{g}") for g in range(4)]
    nodes += [helper.make_node("Add", ["g0", "g1"], ["s"], name="add"),
              helper.make_node("Sigmoid", ["g2"], ["t"], name="sigmoid")]
    widths = [24, 24, 40, 8]
    inits = [const(f"r{g}", _f(16, n, seed=10 + g)) for g, n in enumerate(widths)]
    m = model(nodes, [tensor("h", [1, 16])], [tensor("s", [1, 24]), tensor("t", [1, 40]), tensor("g3", [1, 8])],
              inits)
    _compile(m)
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert executed.count("matmul") == 1, executed


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


# -- element-wise ops real models add -----------------------------------------------------------
@pytest.mark.parametrize("op,attrs,positive", [
    ("Sqrt", {}, True), ("Exp", {}, False), ("LeakyRelu", {"alpha": 0.1}, False),
])
def test_unary_eltwise(op, attrs, positive):
    m = single_op(op, {"x": [2, 3, 5]}, [2, 3, 5], attrs)
    inputs = random_inputs(m)
    if positive:
        inputs = {k: np.abs(v) + np.float32(0.1) for k, v in inputs.items()}
    assert len(_rules(_compile(m, inputs=inputs))) == 1


@pytest.mark.parametrize("numerator", [None, 2.5, -0.5])
def test_reciprocal_and_a_scalar_over_a_tensor(numerator):
    """Reciprocal(x) and c / x: oneDNN's eltwise_pow (c * x^-1), including on negative x."""
    if numerator is None:
        m = single_op("Reciprocal", {"x": [2, 3, 5]}, [2, 3, 5])
    else:
        m = model([helper.make_node("Div", ["c", "x"], ["y"], name="div")], [tensor("x", [2, 3, 5])],
                  [tensor("y", [2, 3, 5])], [const("c", np.array(numerator, np.float32))])
    x = _f(2, 3, 5, seed=11)
    x = np.where(np.abs(x) < 0.05, np.float32(0.5), x)  # away from the pole at 0
    artifact = _compile(m, inputs={"x": x})
    np.testing.assert_allclose(artifact.run({"x": x})[0], np.float32(numerator or 1.0) / x, rtol=1e-6)


@pytest.mark.parametrize("a,b", [([1, 1, 256], [1, 64, 1]), ([5, 1], [1, 7]), ([3, 1, 4], [3, 6, 1]), ([6, 1], [5])])
def test_outer_product_multiply_is_a_matmul(a, b):
    """Both operands broadcast ([.., M, 1] * [.., 1, N], e.g. Magika's layer norm): one matmul with K = 1."""
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    m = model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")], [tensor("a", a), tensor("b", b)],
              [tensor("y", out)])
    _compile(m)


def test_a_multiply_whose_operands_both_broadcast_otherwise_stays_on_host():
    m = model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")], [tensor("a", [2, 1, 3]), tensor("b", [1, 4, 1])],
              [tensor("y", [2, 4, 3])])
    assert _reason(m, "relax.multiply") == ("operands (2, 1, 3) and (1, 4, 1) both broadcast to (2, 4, 3) "
                                            "(oneDNN broadcasts the second operand only)")


@pytest.mark.parametrize("shape,axis", [([1, 16, 4, 35], 1), ([7, 5], 0), ([3, 9, 5], 1), ([2, 3, 5], -1)])
def test_softmax_over_any_axis(shape, axis):
    """Over another axis than the last (YOLOv8's box bins), oneDNN's jit softmax runs on a layout with that
    axis innermost."""
    m = single_op("Softmax", {"x": shape}, shape, {"axis": axis})
    assert _rules(_compile(m, scale=3.0)) == {"dnnl.softmax"}


def test_softmax_over_channels_feeding_a_conv():
    """YOLOv8's distribution focal loss head: softmax over 16 bins on axis 1, then a 1x1 conv over them."""
    conv, inits = _conv("p", "y", 16, 1, "dfl", k=1, pads=(0, 0, 0, 0))
    m = model([helper.make_node("Softmax", ["x"], ["p"], name="softmax", axis=1), conv],
              [tensor("x", [1, 16, 4, 35])], [tensor("y", [1, 1, 4, 35])], inits)
    _compile(m, scale=3.0)


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_power_with_a_scalar_exponent(exponent):
    """The decomposed layer norm of PP-OCR rec: (x - mean) ** 2, then sqrt."""
    m = single_op("Pow", {"x": [2, 7]}, [2, 7], initializers=[const("e", np.array(exponent, np.float32))])
    inputs = random_inputs(m)
    if exponent != int(exponent):
        inputs = {k: np.abs(v) + np.float32(0.1) for k, v in inputs.items()}
    assert _rules(_compile(m, inputs=inputs)) == {"dnnl.power"}


def test_power_with_a_tensor_exponent_stays_on_host():
    m = single_op("Pow", {"x": [2, 7], "e": [2, 7]}, [2, 7])
    assert "exponent of shape (2, 7) is not a scalar constant" in _reason(m, "relax.power")


# -- LRN ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size,alpha,beta,bias,shape", [
    (5, 1e-4, 0.75, 1.0, [1, 8, 5, 7]),    # AlexNet / GoogLeNet
    (3, 0.5, 0.6, 2.0, [2, 5, 3, 3]),      # a window wider than half the channels at the edges
    (1, 1.0, 1.0, 0.5, [1, 3, 4, 4]),
])
def test_lrn(size, alpha, beta, bias, shape):
    m = single_op("LRN", {"x": shape}, shape, {"size": size, "alpha": alpha, "beta": beta, "bias": bias})
    assert _rules(_compile(m, scale=2.0)) == {"dnnl.lrn"}


def test_lrn_after_a_conv_reads_the_blocked_layout():
    c1, i1 = _conv("x", "c", 3, 16, "c1")
    nodes = [c1, helper.make_node("LRN", ["c"], ["y"], name="lrn", size=5, alpha=1e-3, beta=0.75, bias=1.0)]
    m = model(nodes, [tensor("x", [1, 3, 7, 6])], [tensor("y", [1, 16, 7, 6])], i1)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.lrn"}


def test_lrn_of_a_3d_tensor_runs_as_its_ops():
    """TVM imports a rank-3 LRN with avg_pool2d, not the NCHW form oneDNN's LRN is matched on:
    its ops go to dnnl one by one (onnxruntime has no rank-3 LRN to compare with)."""
    m = single_op("LRN", {"x": [2, 6, 5]}, [2, 6, 5], {"size": 3})
    plan = byoc.partition(m, ["dnnl"])
    rules = {d.rule for d in plan.decisions.values() if d.rule}
    assert plan.host_ops == [] and "dnnl.lrn" not in rules and {"dnnl.avg_pool2d", "dnnl.power"} <= rules


# -- n-ary Sum / Mean, Expand ----------------------------------------------------------------------
@pytest.mark.parametrize("op,n", [("Sum", 2), ("Sum", 3), ("Mean", 3)])
def test_sum_and_mean_of_several_tensors(op, n):
    """TVM imports them as broadcast_to each, stack, sum / mean over the new axis (shufflenet's Sum)."""
    names = ["a", "b", "c"][:n]
    m = model([helper.make_node(op, names, ["y"], name="nary")], [tensor(x, [1, 4, 3, 5]) for x in names],
              [tensor("y", [1, 4, 3, 5])])
    rules = _rules(_compile(m))
    assert {"dnnl.broadcast_to", "dnnl.stack", f"dnnl.{op.lower()}"} == rules


def test_sum_of_conv_outputs_adds_them_in_their_blocked_layouts():
    """The stack is not materialized: one oneDNN sum reads the convs' outputs as they are."""
    c1, i1 = _conv("x", "a", 3, 16, "c1", seed=1)
    c2, i2 = _conv("x", "b", 3, 16, "c2", seed=2)
    nodes = [c1, c2, helper.make_node("Sum", ["a", "b", "x2"], ["y"], name="sum")]
    m = model(nodes, [tensor("x", [1, 3, 6, 7]), tensor("x2", [1, 16, 6, 7])], [tensor("y", [1, 16, 6, 7])], i1 + i2)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.broadcast_to", "dnnl.stack", "dnnl.sum"}


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


@pytest.mark.parametrize("op,n", [("Max", 1), ("Max", 2), ("Min", 3)])
def test_max_and_min_of_several_tensors_are_binary_ops_without_a_stack(op, n):
    """TVM's Max (Min) of n tensors is stack + max over the new axis: a chain of oneDNN binary max (min)."""
    names = [f"x{i}" for i in range(n)]
    m = model([helper.make_node(op, names, ["y"], name="m")], [tensor(x, [2, 5, 3]) for x in names],
              [tensor("y", [2, 5, 3])])
    assert f"dnnl.{op.lower()}" in _rules(_compile(m))


@pytest.mark.parametrize("op,shape,attrs", [
    ("ReduceMax", [2, 7, 5], {"axes": [1], "keepdims": 1}),
    ("ReduceMax", [3, 4, 6, 5], {"axes": [0, 2], "keepdims": 0}),
    ("ReduceMin", [2, 7, 5], {"axes": [-1], "keepdims": 0}),
    ("ReduceMin", [4, 9], {"keepdims": 1}),
    ("GlobalMaxPool", [2, 5, 9, 7], {}),
    ("GlobalMaxPool", [1, 6, 11], {}),
    ("GlobalAveragePool", [1, 6, 11], {}),
])
def test_max_and_min_reductions(op, shape, attrs):
    attrs = dict(attrs)
    axes = [a % len(shape) for a in attrs.pop("axes", range(len(shape)))]
    names, inits = ["x"], []
    if len(axes) < len(shape):  # an input from opset 18
        names, inits = ["x", "axes"], [const("axes", np.array(axes, np.int64))]
    keep = attrs.get("keepdims", 1)
    if op.startswith("Global"):
        out = shape[:2] + [1] * (len(shape) - 2)
    else:
        out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]
    m = model([helper.make_node(op, names, ["y"], name="r", **attrs)], [tensor("x", shape)], [tensor("y", out)], inits,
              opset=18)
    _compile(m)


def test_global_max_pool_of_a_blocked_conv_output():
    conv, inits = _conv("x", "c", 8, 16, "conv")
    m = model([conv, helper.make_node("GlobalMaxPool", ["c"], ["y"], name="gmp")], [tensor("x", [1, 8, 9, 9])],
              [tensor("y", [1, 16, 1, 1])], inits)
    assert {"dnnl.conv2d_bias", "dnnl.max"} == _rules(_compile(m))


def test_expand_that_repeats_values_stays_on_host():
    m = single_op("Expand", {"x": [1, 3, 1]}, [2, 3, 4], initializers=[const("shape", np.array([2, 3, 4], np.int64))])
    assert "repeats values" in _reason(m, "relax.broadcast_to")


def test_pad_stays_on_host_as_tvm_imports_it_as_a_tir_kernel():
    """TVM's importer emits ONNX Pad as call_tir(pad), no Relax op (relax.nn.pad) a rule could take."""
    nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode="constant", name="pad")]
    m = model(nodes, [tensor("x", [1, 3, 4, 4])], [tensor("y", [1, 3, 7, 5])],
              [const("pads", np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64)), const("value", np.array(1.5, np.float32))])
    assert _reason(m, "call_tir(pad)") == "no dnnl rule for call_tir(pad)"


# -- sums and means over axes oneDNN has only its reference reduction for -------------------------
@pytest.mark.parametrize("op,shape,axes,out", [
    ("ReduceSum", [1, 512, 256], [1], [1, 1, 256]),  # Magika's: 4 ms in oneDNN's reference kernel
    ("ReduceMean", [2, 6, 5, 7], [1, 2], [2, 1, 1, 7]),
    ("ReduceSum", [3, 4, 5], [0, 1], [1, 1, 5]),
    ("ReduceMean", [2, 1, 6, 5], [0, 2], [1, 1, 1, 5]),  # a size-1 axis between the reduced ones
    ("ReduceSum", [2, 6, 5, 7], [1, 3], [2, 1, 5, 1]),  # not one run of axes: the reduction primitive
    ("ReduceMean", [4, 9], [1], [4, 1]),  # innermost: oneDNN's jit reduction
])
def test_reductions_over_any_axes(op, shape, axes, out):
    """A sum (mean) over consecutive axes that are not innermost runs as a matmul with a row of ones."""
    m = model([helper.make_node(op, ["x", "axes"], ["y"], name="reduce")], [tensor("x", shape)], [tensor("y", out)],
              [const("axes", np.array(axes, np.int64))], opset=18)
    assert _rules(_compile(m)) == {f"dnnl.{op[6:].lower()}"}


# -- a scalar constant operand over a conv output in a blocked layout ------------------------------
@pytest.mark.parametrize("op,scalar_first", [
    ("Add", False), ("Add", True), ("Sub", False), ("Sub", True), ("Mul", False), ("Div", False), ("Div", True)])
def test_scalar_operand_of_a_blocked_conv_output(op, scalar_first):
    """x+c, c+x, x-c, c-x, x*c and x/c run as one eltwise_linear over the conv's blocked output (oneDNN's binary
    would broadcast the scalar with its reference kernel); c/x as one eltwise_pow (c * x^-1)."""
    conv, inits = _conv("x", "a", 3, 8, "c1", seed=3)
    operands = ["c", "a"] if scalar_first else ["a", "c"]
    # the conv's output is read twice, so the scalar op cannot be one of its post-ops
    nodes = [conv, helper.make_node(op, operands, ["b"], name="scalar_op"), helper.make_node("Mul", ["b", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    m = model(nodes, [tensor("x", [1, 3, 24, 96])], [tensor("y", [1, 8, 24, 96])],
              inits + [const("c", np.array(0.75, np.float32))])
    _compile(m, inputs={"x": _f(1, 3, 24, 96)}, scale=1.0)


@pytest.mark.parametrize("op,channels", [("Add", 8), ("Mul", 8), ("Add", 24), ("Mul", 20)])
def test_per_channel_constant_over_a_blocked_conv_output(op, channels):
    """x + c and x * c with c of shape (1, C, 1, 1) over a channel-blocked conv output: the constant is reordered
    into the same blocking (plain, oneDNN runs its reference kernel: DenseNet-121 538 of 620 ms), C not a multiple
    of the block included."""
    conv, inits = _conv("x", "a", 3, channels, "c1", seed=4)
    # the conv's output is read twice, so the op cannot be one of its post-ops
    nodes = [conv, helper.make_node(op, ["a", "c"], ["b"], name="channel_op"), helper.make_node("Mul", ["b", "a"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    c = np.random.default_rng(5).uniform(0.5, 1.5, (1, channels, 1, 1)).astype(np.float32)
    m = model(nodes, [tensor("x", [1, 3, 24, 40])], [tensor("y", [1, channels, 24, 40])], inits + [const("c", c)])
    _compile(m, inputs={"x": _f(1, 3, 24, 40)}, scale=1.0)


@pytest.mark.parametrize("x,n", [([2, 64], 256), ([1, 3, 64], 512), ([5, 32], 768)])
def test_matmul_with_weight_rows_of_a_multiple_of_1_kb(x, n):
    """Such weights are stored with padded rows (oneDNN's gemm thrashes the cache on them); bias and relu fused."""
    k = x[-1]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    m = model(nodes, [tensor("x", x)], [tensor("y", x[:-1] + [n])],
              [const("w", _f(k, n, seed=3, scale=0.2)), const("b", _f(n, seed=4))])
    assert any(rule.startswith("dnnl.matmul_bias") for rule in _rules(_compile(m)))


def test_weight_rows_of_a_multiple_of_1_kb_are_padded(tmp_path):
    """oneDNN's own log shows the stored weight's row stride: 256 + 16 floats. The padding is for the AVX2 gemm,
    which reads the weight as it is stored (with AVX-512 oneDNN packs it in blocks of its own), so oneDNN is held
    to AVX2 here, on any CPU that has it."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = model(nodes, [tensor("x", [2, 64])], [tensor("y", [2, 256])], [const("w", _f(64, 256, seed=3))])
    path = tmp_path / "mm.onnx"
    onnx.save(m, path)
    script = ("import numpy as np, byoc\n"
              f"a = byoc.compile({str(path)!r}, vendors=['dnnl'], strict=True)\n"
              "print('RUN', flush=True)\n"
              "a.run({'x': np.ones((2, 64), np.float32)})\n")
    log = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ONEDNN_VERBOSE": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert log.returncode == 0, log.stderr[-2000:]
    matmuls = [line for line in log.stdout.split("RUN\n", 1)[1].splitlines() if ",exec," in line and ",matmul," in line]
    assert len(matmuls) == 1 and "wei_f32::blocked:ab:272x1" in matmuls[0], matmuls


# -- layouts kept through data movement ---------------------------------------------------
def _onednn_exec(m, env=None) -> list[str]:
    """oneDNN's log of the primitives a second run of ``m`` (built for dnnl in a fresh process) executes."""
    script = ("import sys, numpy as np, onnx, byoc\n"
              "a = byoc.compile(onnx.load_from_string(sys.stdin.buffer.read()), vendors=['dnnl'], strict=True)\n"
              "x = [np.ones(i.shape, np.float32) for i in a.inputs]\n"
              "a.run(x)\n"  # the first run loads the module: weights are reordered then
              "print('RUN', flush=True)\n"
              "a.run(x)\n")
    log = subprocess.run([sys.executable, "-c", script], input=m.SerializeToString(), capture_output=True,
                         timeout=300, env={**os.environ, "ONEDNN_VERBOSE": "1", **(env or {})})
    assert log.returncode == 0, log.stderr[-2000:].decode()
    return [line for line in log.stdout.decode().split("RUN\n", 1)[1].splitlines() if ",exec," in line]


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


def _gelu_tanh_nodes(spelling, x, out):
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + c * x^3))) as exporters spell it; c = 0.044715 (or ``wrong``)."""
    c = 0.04 if spelling == "wrong" else 0.044715
    n = helper.make_node
    scalars = [const(name, np.array(v, np.float32)) for name, v in
               (("c", c), ("k", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5), ("three", 3.0))]
    if spelling in ("keras", "wrong"):  # tf2onnx: c * x, * x, * x, + x, * k, tanh, + 1, * 0.5, * x
        nodes = [n("Mul", ["c", x], ["g1"]), n("Mul", [x, "g1"], ["g2"]), n("Mul", [x, "g2"], ["g3"]),
                 n("Add", [x, "g3"], ["g4"]), n("Mul", ["g4", "k"], ["g5"]), n("Tanh", ["g5"], ["g6"]),
                 n("Add", ["g6", "one"], ["g7"]), n("Mul", ["g7", "half"], ["g8"]), n("Mul", [x, "g8"], [out])]
    else:  # torch: pow(x, 3), and x * 0.5 first
        nodes = [n("Mul", [x, "half"], ["h"]), n("Pow", [x, "three"], ["g1"]), n("Mul", ["g1", "c"], ["g2"]),
                 n("Add", [x, "g2"], ["g3"]), n("Mul", ["g3", "k"], ["g4"]), n("Tanh", ["g4"], ["g5"]),
                 n("Add", ["g5", "one"], ["g6"]), n("Mul", ["h", "g6"], [out])]
    return nodes, scalars


@pytest.mark.parametrize("spelling", ["keras", "torch", "wrong"])
def test_gelu_tanh_in_any_spelling_is_one_eltwise(spelling):
    """The tanh form of GELU runs as oneDNN's eltwise_gelu_tanh whatever order and grouping the exporter wrote
    (Magika: nine primitives each time); with another constant it is not GELU and runs op by op."""
    conv, inits = _conv("x", "a", 3, 8, "c1", seed=6)
    nodes, scalars = _gelu_tanh_nodes(spelling, "a", "y")
    m = model([conv, *nodes], [tensor("x", [1, 3, 10, 12])], [tensor("y", [1, 8, 10, 12])], inits + scalars)
    _compile(m)
    gelu = [x for x in _onednn_exec(m) if "eltwise_gelu_tanh" in x]
    assert len(gelu) == (0 if spelling == "wrong" else 1), gelu


def test_a_global_max_over_a_long_row_runs_a_jit_pooling():
    """ReduceMax over the last axis of [N, C, W]: oneDNN's pooling over plain NCW is its plain-C simple_nchw
    kernel (0.4 ms in Magika); the source is taken channels last, where the pooling jits."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["y"], name="gmax", axes=[2], keepdims=0)]
    m = model(nodes, [tensor("x", [1, 64, 508])], [tensor("y", [1, 64])])
    m.opset_import[0].version = 13
    _compile(m)
    pools = [x for x in _onednn_exec(m) if ",pooling," in x]
    assert len(pools) == 1 and "jit" in pools[0].split(",")[4], pools


# -- Winograd F(4x4, 3x3) ------------------------------------------------------------------
def _winograd_model(post, shape=(1, 48, 38, 41), k=48, pads=(1, 1, 1, 1)):
    """A 3x3 stride-1 conv with a bias big enough for Winograd (over 25 M multiply-adds, 16 tiles), then ``post``:
    its output sizes are not multiples of 4, so the last tiles are cropped."""
    n, c, h, w = shape
    conv = helper.make_node("Conv", ["x", "w", "b"], ["a"], name="conv", pads=list(pads))
    inits = [const("w", _f(k, c, 3, 3, seed=8, scale=0.15)), const("b", _f(k, seed=9))]
    oh, ow = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
    nodes = {"none": [helper.make_node("Identity", ["a"], ["y"])],
             "relu": [helper.make_node("Relu", ["a"], ["y"])],
             "residual_relu": [helper.make_node("Add", ["a", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
             "clip": [helper.make_node("Clip", ["a", "lo", "hi"], ["y"])],
             "hardswish": [helper.make_node("HardSwish", ["a"], ["y"])],
             "swish": _activation_nodes("swish", "a", "y"),
             "channel_mul": [helper.make_node("Mul", ["a", "scale"], ["y"])]}[post]
    inputs = [tensor("x", list(shape))]
    if post == "residual_relu":
        inputs.append(tensor("r", [n, k, oh, ow]))
    if post == "clip":
        inits += [const("lo", np.array(0.0, np.float32)), const("hi", np.array(6.0, np.float32))]
    if post == "channel_mul":
        inits.append(const("scale", np.random.default_rng(3).uniform(0.5, 1.5, (1, k, 1, 1)).astype(np.float32)))
    return model([conv, *nodes], inputs, [tensor("y", [n, k, oh, ow])], inits)


@pytest.mark.parametrize("post", ["none", "relu", "residual_relu", "clip", "hardswish", "swish", "channel_mul"])
def test_a_big_3x3_conv_runs_as_winograd_with_its_post_ops(post):
    m = _winograd_model(post)
    _compile(m)
    executed = _onednn_exec(m)
    assert not [x for x in executed if ",convolution," in x] and len([x for x in executed if ",matmul," in x]) == 1, \
        executed


@pytest.mark.parametrize("shape,pads", [((2, 64, 30, 27), (1, 1, 1, 1)), ((1, 64, 33, 35), (0, 0, 0, 0)),
                                        ((1, 64, 33, 35), (2, 0, 1, 2))])
def test_winograd_over_batches_and_any_padding(shape, pads):
    m = _winograd_model("relu", shape=shape, k=64, pads=pads)
    _compile(m)
    assert any(",matmul," in x for x in _onednn_exec(m))


def test_winograd_off_keeps_the_direct_conv():
    m = _winograd_model("relu")
    executed = _onednn_exec(m, env={"BYOC_DNNL_WINOGRAD": "off"})
    assert [x for x in executed if ",convolution," in x] and not [x for x in executed if ",matmul," in x], executed


def test_small_or_strided_3x3_convs_stay_direct():
    """Under 25 M multiply-adds (or 16 tiles), or with a stride, Winograd does not pay: oneDNN's conv runs."""
    small = _winograd_model("relu", shape=(1, 16, 20, 20), k=16)
    assert not [x for x in _onednn_exec(small) if ",matmul," in x]
    conv, inits = _conv("x", "y", 48, 48, "s", seed=2)
    conv.attribute.append(helper.make_attribute("strides", [2, 2]))
    strided = model([conv], [tensor("x", [1, 48, 40, 40])], [tensor("y", [1, 48, 20, 20])], inits)
    _compile(strided)
    assert not [x for x in _onednn_exec(strided) if ",matmul," in x]

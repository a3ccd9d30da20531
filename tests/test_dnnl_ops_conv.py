"""The dnnl vendor on the convolutions CNN, detection and OCR models add to the basics: hard-sigmoid /
hard-swish / swish alone and as conv post-ops, depthwise convs, 1-D convs, transposed convs, batch norm
(alone and folded into the conv before it) and Winograd F(4x4, 3x3); each against onnxruntime through
``byoc.compile(..., strict=True)`` with the op checked to have gone to dnnl, and every combination the
runtime does not take checked to stay on the host with its reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dnnl_op_helpers import ACTIVATIONS, _activation_nodes, _compile, _conv, _f, _onednn_exec, _reason, _rules
from models import const, model, single_op, tensor


# -- activations, alone and as conv post-ops; depthwise and 1-D convs ---------------------
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


@pytest.mark.parametrize("channels, blocks", [(16, (16, 8)), (24, (8,))])
def test_depthwise_convs_at_the_partition_edge_run_in_channel_blocks(channels, blocks):
    # The first conv reads the plain graph input, the second the first's blocked output; left to choose, oneDNN
    # ran them channels last (brdgmm_dw), whose output is slow to read back into NCHW. 24 channels take blocks of
    # 8 (16 would pad them); 16 take blocks of 16 where a generated kernel has them (AVX-512: jit_dw), else of 8
    # (AVX2, held there by ONEDNN_MAX_CPU_ISA or not: jit_dw has no blocks of 16).
    first, inits = _conv("x", "a", channels, channels, "dw1", group=channels)
    second, more = _conv("a", "y", channels, channels, "dw2", k=5, group=channels, pads=(2, 2, 2, 2), seed=2)
    m = model([first, second], [tensor("x", [1, channels, 20, 20])], [tensor("y", [1, channels, 20, 20])],
              inits + more)
    _compile(m)
    convs = [line.split(",") for line in _onednn_exec(m) if ",convolution," in line]
    assert len(convs) == 2
    for fields in convs:
        implementation, layouts = fields[4], fields[6]
        assert not implementation.startswith("ref"), fields
        assert any(f"src_f32::blocked:aBcd{b}b" in layouts and f"dst_f32::blocked:aBcd{b}b" in layouts
                   for b in blocks), fields


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


@pytest.mark.parametrize("channels,group", [(128, 32), (64, 32), (24, 6), (36, 9)])
def test_grouped_conv_of_few_channels_per_group_runs_a_generated_kernel(channels, group):
    """ResNeXt's groups of 4 channels (and of 2): oneDNN has only its im2col gemm for them, so neighbouring groups
    run as one with block-diagonal weights, on its generated direct conv. 9 groups of 4 cannot pair up: gemm.
    oneDNN is held to AVX2 for the implementation check, the class this was measured on (AVX-512's kernels take
    other channel counts)."""
    conv, inits = _conv("x", "y", channels, channels, "conv", group=group)
    m = model([conv], [tensor("x", [1, channels, 14, 14])], [tensor("y", [1, channels, 14, 14])], inits)
    _compile(m)
    convs = [line.split(",")[4] for line in _onednn_exec(m, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
             if ",convolution," in line]
    assert len(convs) == 1 and ("gemm" in convs[0]) == (group == 9), convs


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
    """Not folded into the conv (whose output the Add reads too): x * s + t per channel, a binary primitive
    with a binary post-op, rather than oneDNN's batch norm pass (an AVX2 kernel on AVX-512 machines)."""
    conv, inits = _conv("x", "c", 3, 8, "conv")
    nodes = [conv, helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], name="bn"),
             helper.make_node("Add", ["n", "c"], ["y"], name="add")]
    m = model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", [1, 8, 6, 6])], inits + _bn_inits(8), opset=17)
    _compile(m)
    executed = _onednn_exec(m)
    kinds = [line.split(",")[3] for line in executed]
    assert "batch_normalization" not in kinds and kinds.count("convolution") == 1, executed
    assert any(",binary," in line and "binary_add" in line for line in executed), executed


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

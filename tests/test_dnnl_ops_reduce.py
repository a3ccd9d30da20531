"""The dnnl vendor on reductions: n-ary Sum / Mean / Max / Min, ReduceMax / ReduceMin, global pools, sums and
means over any axes, and a global max over a long row; each against onnxruntime through
``byoc.compile(..., strict=True)`` with the op checked to have gone to dnnl.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dnnl_op_helpers import _compile, _conv, _onednn_exec, _reason, _rules
from models import const, model, tensor


# -- n-ary Sum / Mean / Max / Min, max and min reductions, global pools --------------------------
@pytest.mark.parametrize("op,n,rules", [("Sum", 1, {"dnnl.broadcast_to", "dnnl.stack", "dnnl.sum"}),
                                        ("Sum", 2, {"dnnl.add"}), ("Sum", 3, {"dnnl.add"}),
                                        ("Mean", 3, {"dnnl.add", "dnnl.divide"})])
def test_sum_and_mean_of_several_tensors(op, n, rules):
    """byoc imports them as a chain of adds (a Mean then divides); TVM's one-input form is broadcast_to, stack
    and sum over the new axis."""
    names = ["a", "b", "c"][:n]
    m = model([helper.make_node(op, names, ["y"], name="nary")], [tensor(x, [1, 4, 3, 5]) for x in names],
              [tensor("y", [1, 4, 3, 5])])
    assert _rules(_compile(m)) == rules


def test_sum_of_conv_outputs_adds_them_in_their_blocked_layouts():
    """Sum(a, b, x2) is two adds: the first is the second conv's residual post-op, the second one binary
    primitive; as many primitives as TVM's form (one oneDNN sum) ran."""
    c1, i1 = _conv("x", "a", 3, 16, "c1", seed=1)
    c2, i2 = _conv("x", "b", 3, 16, "c2", seed=2)
    nodes = [c1, c2, helper.make_node("Sum", ["a", "b", "x2"], ["y"], name="sum")]
    m = model(nodes, [tensor("x", [1, 3, 6, 7]), tensor("x2", [1, 16, 6, 7])], [tensor("y", [1, 16, 6, 7])], i1 + i2)
    assert _rules(_compile(m)) == {"dnnl.conv2d_bias", "dnnl.conv2d_bias_add", "dnnl.add"}
    executed = [line.split(",")[3] for line in _onednn_exec(m, env={"ONEDNN_MAX_CPU_ISA": "AVX2"})]  # layouts are per ISA
    assert executed.count("convolution") == 2 and executed.count("binary") == 1 and len(executed) == 5, executed


@pytest.mark.parametrize("op,n,rule", [("Max", 1, "dnnl.max"), ("Max", 2, "dnnl.maximum"),
                                       ("Min", 3, "dnnl.minimum")])
def test_max_and_min_of_several_tensors_are_binary_ops_without_a_stack(op, n, rule):
    """A Max (Min) of n tensors is a chain of binary maximum (minimum); of one, TVM's stack and max."""
    names = [f"x{i}" for i in range(n)]
    m = model([helper.make_node(op, names, ["y"], name="m")], [tensor(x, [2, 5, 3]) for x in names],
              [tensor("y", [2, 5, 3])])
    assert rule in _rules(_compile(m))


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


# -- a global max over a long row ------------------------------------------------------------------
def test_a_global_max_over_a_long_row_runs_a_jit_pooling():
    """ReduceMax over the last axis of [N, C, W]: oneDNN's pooling over plain NCW is its plain-C simple_nchw
    kernel (0.4 ms in Magika); the source is taken channels last, where the pooling jits."""
    nodes = [helper.make_node("ReduceMax", ["x"], ["y"], name="gmax", axes=[2], keepdims=0)]
    m = model(nodes, [tensor("x", [1, 64, 508])], [tensor("y", [1, 64])])
    m.opset_import[0].version = 13
    _compile(m)
    pools = [x for x in _onednn_exec(m) if ",pooling," in x]
    assert len(pools) == 1 and "jit" in pools[0].split(",")[4], pools


# -- average pooling with ceil_mode (ResNeSt's downsampling) -----------------------------------------
@pytest.mark.parametrize("size,kernel,stride,pads,include", [
    (9, 2, 2, [0, 0, 0, 0], 0),  # the last window ceil_mode adds is half outside: counted from what it covers
    (10, 3, 2, [1, 1, 1, 1], 0),
    (8, 3, 3, [0, 0, 0, 0], 0),
    (8, 2, 2, [0, 0, 0, 0], 1),  # ceil_mode changes nothing here: oneDNN's count of the padding is ONNX's
])
def test_average_pooling_with_ceil_mode(size, kernel, stride, pads, include):
    out = -(-(size + pads[0] + pads[2] - kernel) // stride) + 1
    if (out - 1) * stride >= size + pads[0]:
        out -= 1  # ONNX drops a last window that would start in the end padding
    pool = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=pads, ceil_mode=1, count_include_pad=include)
    m = model([pool], [tensor("x", [2, 8, size, size])], [tensor("y", [2, 8, out, out])])
    assert _rules(_compile(m)) == {"dnnl.avg_pool2d"}


def test_average_pooling_that_counts_padding_ceil_mode_extends_stays_on_the_host():
    pool = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
    m = model([pool], [tensor("x", [1, 4, 10, 10])], [tensor("y", [1, 4, 6, 6])])
    assert "ceil_mode extends" in _reason(m, "relax.nn.avg_pool2d")
    _compile(m, host_ops=["relax.nn.avg_pool2d"])

"""The dnnl vendor (oneDNN): fused patterns and model blocks against onnxruntime,
rejections with reasons, work done once at load (checked in oneDNN's own
verbose log), export / load in a fresh process, threads, corrupted blobs,
and a clear error when oneDNN is missing.

The single-op cases shared with the reference vendors run in test_c_source.py
(``any_vendor``).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import byoc
from byoc.errors import BuildError, CodegenError, TargetError

from models import const, model, onnxruntime_outputs, random_inputs, rng, single_op, tensor

RTOL, ATOL = 1e-4, 1e-4
TESTS = Path(__file__).resolve().parent


def _f(*shape, seed=5, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _compile(m, host_ops=(), vendors=("dnnl",)):
    """Compile for dnnl, check which ops stayed on the host, compare every output with onnxruntime."""
    artifact = byoc.compile(m, vendors=list(vendors), strict=True)
    assert sorted(d.op for d in artifact.plan.host_ops) == sorted(host_ops), \
        [(d.op, d.reasons) for d in artifact.plan.host_ops]
    inputs = random_inputs(m)
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return artifact


def _rules(artifact) -> set[str]:
    return {d.rule for d in artifact.plan.decisions.values() if d.rule}


# -- models -----------------------------------------------------------------------------
def residual_block(channels=16, size=10, act="Relu"):
    """conv+bias+relu, conv+bias, + identity, relu: the ResNet basic block; or Clip (MobileNet)."""
    w1, w2 = _f(channels, channels, 3, 3, seed=1, scale=0.2), _f(channels, channels, 3, 3, seed=2, scale=0.2)
    act_node = (helper.make_node("Relu", ["s"], ["y"], name="act") if act == "Relu"
                else helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="act"))
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"], name="residual"),
             act_node]
    inits = [const("w1", w1), const("b1", _f(channels, seed=3)), const("w2", w2), const("b2", _f(channels, seed=4)),
             const("lo", np.array(0.0, np.float32)), const("hi", np.array(6.0, np.float32))]
    shape = [1, channels, size, size]
    return model(nodes, [tensor("x", shape)], [tensor("y", shape)], inits, name="residual_block")


def gelu_nodes(x, out, prefix, constants=(math.sqrt(2.0), 1.0, 0.5)):
    """GELU as ONNX exports of torch spell it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    sqrt2, one, half = constants
    nodes = [helper.make_node("Div", [x, f"{prefix}_sqrt2"], [f"{prefix}_d"], name=f"{prefix}_div"),
             helper.make_node("Erf", [f"{prefix}_d"], [f"{prefix}_e"], name=f"{prefix}_erf"),
             helper.make_node("Add", [f"{prefix}_e", f"{prefix}_one"], [f"{prefix}_a"], name=f"{prefix}_add"),
             helper.make_node("Mul", [x, f"{prefix}_a"], [f"{prefix}_m"], name=f"{prefix}_mul"),
             helper.make_node("Mul", [f"{prefix}_m", f"{prefix}_half"], [out], name=f"{prefix}_half_mul")]
    inits = [const(f"{prefix}_sqrt2", np.array(sqrt2, np.float32)), const(f"{prefix}_one", np.array(one, np.float32)),
             const(f"{prefix}_half", np.array(half, np.float32))]
    return nodes, inits


def encoder_layer(seq=16, hidden=32, heads=4, ffn=64, gelu_constants=(math.sqrt(2.0), 1.0, 0.5)):
    """A BERT encoder layer as torch exports it: fused QKV, attention, residual + LayerNorm, GELU FFN."""
    d = hidden // heads
    nodes = [
        helper.make_node("MatMul", ["x", "wqkv"], ["qkv0"], name="qkv"),
        helper.make_node("Add", ["bqkv", "qkv0"], ["qkv1"], name="qkv_bias"),
        helper.make_node("Reshape", ["qkv1", "s5"], ["qkv2"], name="qkv_split_heads"),
        helper.make_node("Transpose", ["qkv2"], ["qkv3"], name="qkv_heads_first", perm=[2, 0, 3, 1, 4]),
        helper.make_node("Split", ["qkv3", "split3"], ["q0", "k0", "v0"], name="split", axis=0),
        helper.make_node("Squeeze", ["q0", "ax0"], ["q"], name="sq_q"),
        helper.make_node("Squeeze", ["k0", "ax0"], ["k"], name="sq_k"),
        helper.make_node("Squeeze", ["v0", "ax0"], ["v"], name="sq_v"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores0"], name="scores"),
        helper.make_node("Div", ["scores0", "scale"], ["scores"], name="scale"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx0"], name="context"),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], name="ctx_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "s3"], ["ctx"], name="merge_heads"),
        helper.make_node("MatMul", ["ctx", "wo"], ["o0"], name="out_proj"),
        helper.make_node("Add", ["bo", "o0"], ["o1"], name="out_bias"),
        helper.make_node("Add", ["x", "o1"], ["h0"], name="residual1"),
        helper.make_node("LayerNormalization", ["h0", "g1", "be1"], ["h"], name="ln1", axis=-1, epsilon=1e-12),
        helper.make_node("MatMul", ["h", "w1"], ["f0"], name="ffn1"),
        helper.make_node("Add", ["b1", "f0"], ["f1"], name="ffn1_bias"),
    ]
    gelu, gelu_inits = gelu_nodes("f1", "f2", "gelu", gelu_constants)
    nodes += gelu + [
        helper.make_node("MatMul", ["f2", "w2"], ["f3"], name="ffn2"),
        helper.make_node("Add", ["b2", "f3"], ["f4"], name="ffn2_bias"),
        helper.make_node("Add", ["h", "f4"], ["h2"], name="residual2"),
        helper.make_node("LayerNormalization", ["h2", "g2", "be2"], ["y"], name="ln2", axis=-1, epsilon=1e-12),
    ]
    inits = [
        const("wqkv", _f(hidden, 3 * hidden, seed=10, scale=0.2)), const("bqkv", _f(3 * hidden, seed=11)),
        const("s5", np.array([1, seq, 3, heads, d], np.int64)), const("split3", np.array([1, 1, 1], np.int64)),
        const("ax0", np.array([0], np.int64)), const("scale", np.array(math.sqrt(d), np.float32)),
        const("s3", np.array([1, seq, hidden], np.int64)),
        const("wo", _f(hidden, hidden, seed=12, scale=0.2)), const("bo", _f(hidden, seed=13)),
        const("g1", _f(hidden, seed=14)), const("be1", _f(hidden, seed=15)),
        const("w1", _f(hidden, ffn, seed=16, scale=0.2)), const("b1", _f(ffn, seed=17)),
        const("w2", _f(ffn, hidden, seed=18, scale=0.2)), const("b2", _f(hidden, seed=19)),
        const("g2", _f(hidden, seed=20)), const("be2", _f(hidden, seed=21)), *gelu_inits,
    ]
    shape = [1, seq, hidden]
    return model(nodes, [tensor("x", shape)], [tensor("y", shape)], inits, name="encoder_layer", opset=17)


ENCODER_HOST_OPS = []  # the QKV split too: each of its results is a sub-memory copy


# -- fused patterns and blocks ----------------------------------------------------------
@pytest.mark.parametrize("act,rule", [("Relu", "conv2d_bias_add_relu"), ("Clip", "conv2d_bias_add_clip")])
def test_residual_block_fuses_bias_residual_and_activation(act, rule):
    artifact = _compile(residual_block(act=act))
    assert _rules(artifact) == {"dnnl.conv2d_bias_relu", f"dnnl.{rule}"}
    assert len(artifact.plan.partitions) == 1


def test_encoder_layer_matches_onnxruntime():
    artifact = _compile(encoder_layer(), host_ops=ENCODER_HOST_OPS)
    assert {"dnnl.matmul_bias_gelu", "dnnl.matmul_scale", "dnnl.layer_norm", "dnnl.softmax",
            "dnnl.matmul_bias", "dnnl.matmul", "dnnl.reshape", "dnnl.transpose", "dnnl.squeeze"} <= _rules(artifact)
    assert len(artifact.plan.partitions) == 1


def test_gelu_alone_and_wrong_constants_stay_apart():
    nodes, inits = gelu_nodes("x", "y", "g")
    m = model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])], inits)
    assert _rules(_compile(m)) == {"dnnl.gelu"}
    # * 0.6 for * 0.5: not GELU, but x * (1 + erf(x / sqrt 2)), twice GELU, times 0.6
    nodes, inits = gelu_nodes("x", "y", "g", constants=(math.sqrt(2.0), 1.0, 0.6))
    m = model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])], inits)
    artifact = _compile(m)
    assert "dnnl.gelu" not in _rules(artifact) and "dnnl.gelu_doubled" in _rules(artifact)
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(artifact.run([x])[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    # sqrt 3 for sqrt 2: no form of GELU, so no gelu rule; its ops run one by one, the erf as dnnl.erf (before
    # that rule the erf stayed on the host: "where GELU has 1.41421: not the erf form of GELU")
    nodes, inits = gelu_nodes("x", "y", "g", constants=(math.sqrt(3.0), 1.0, 0.5))
    m = model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8])], inits)
    artifact = _compile(m)
    assert not {"dnnl.gelu", "dnnl.gelu_doubled"} & _rules(artifact) and "dnnl.erf" in _rules(artifact)
    assert not artifact.plan.host_ops
    np.testing.assert_allclose(artifact.run([x])[0], onnxruntime_outputs(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("a,b,out", [([3, 4], [4, 5], [3, 5]), ([2, 3, 4], [4, 5], [2, 3, 5]),
                                     ([2, 1, 3, 4], [3, 4, 5], [2, 3, 3, 5])])
def test_matmul_of_two_activations(a, b, out):
    artifact = _compile(single_op("MatMul", {"a": a, "b": b}, out))
    assert _rules(artifact) == {"dnnl.matmul"}


@pytest.mark.parametrize("relu", [False, True])
def test_gemm_bias_and_relu(relu):
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["g" if relu else "y"], name="gemm")]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"], name="relu"))
    m = model(nodes, [tensor("x", [3, 6])], [tensor("y", [3, 5])], [const("w", _f(6, 5)), const("c", _f(5))])
    assert _rules(_compile(m)) == {"dnnl.matmul_bias_relu" if relu else "dnnl.matmul_bias"}


@pytest.mark.parametrize("a,b,out", [([2, 3, 4], [3, 1], [2, 3, 4]), ([5], [5], [5]), ([3, 1], [2, 3, 4], [2, 3, 4])])
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_commutative_elementwise_broadcasts_either_side(op, a, b, out):
    _compile(single_op(op, {"a": a, "b": b}, out))


@pytest.mark.parametrize("op", ["Sub", "Div"])
def test_elementwise_broadcasting_second_operand(op):
    m = single_op(op, {"a": [2, 3, 4]}, [2, 3, 4], initializers=[const("b", np.abs(_f(3, 1)) + 0.5)])
    _compile(m)


def test_layer_norm():
    m = single_op("LayerNormalization", {"x": [2, 5, 16]}, [2, 5, 16], {"axis": -1, "epsilon": 1e-5},
                  initializers=[const("g", _f(16, seed=7)), const("b", _f(16, seed=8))])
    assert _rules(_compile(m)) == {"dnnl.layer_norm"}


def test_mean_without_keepdims_feeding_matmul():
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean", keepdims=0),
             helper.make_node("MatMul", ["m", "w"], ["y"], name="fc")]
    m = model(nodes, [tensor("x", [2, 8, 3, 3])], [tensor("y", [2, 4])],
              [const("axes", np.array([2, 3], np.int64)), const("w", _f(8, 4))], opset=18)
    assert _rules(_compile(m)) == {"dnnl.mean", "dnnl.matmul"}


def test_integral_clip_bounds_and_hard_sigmoid():
    """TVM keeps integral clip bounds as IntImm; the JSON carries them as int and they still work
    (here read by the runtime's hard-sigmoid matcher: clip(0.25 x + 0.5, 0, 1) is one eltwise op)."""
    artifact = _compile(single_op("HardSigmoid", {"x": [3, 8]}, [3, 8], {"alpha": 0.25, "beta": 0.5}))
    assert _rules(artifact) == {"dnnl.hardsigmoid"}


def test_mean_of_one_input_needs_no_reduction():
    """ONNX Mean of a single input reduces nothing; oneDNN has no such reduction, it is a view (a reshape)."""
    m = single_op("Mean", {"x": [2, 3]}, [2, 3])  # TVM: stack([broadcast_to(x)]) then mean over axis 0
    assert _rules(_compile(m)) == {"dnnl.broadcast_to", "dnnl.stack", "dnnl.mean"}


def test_conv_output_used_twice_is_not_fused():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Add", ["c", "r"], ["y"], name="add")]
    m = model(nodes, [tensor("x", [1, 3, 6, 6])], [tensor("y", [1, 8, 6, 6])], [const("w", _f(8, 3, 3, 3))])
    assert _rules(_compile(m)) == {"dnnl.conv2d", "dnnl.relu", "dnnl.add"}


@pytest.mark.parametrize("perm", [[0, 2, 3, 1], [3, 1, 0, 2]])
def test_transpose_of_a_blocked_conv_output_and_reshape_views(perm):
    """Reshapes are views; a transpose reads the (reordered) conv output through permuted strides."""
    shape = [1, 8, 4, 4]
    out = [shape[p] for p in perm]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c"], ["t"], name="t", perm=perm),
             helper.make_node("Reshape", ["t", "s"], ["r"], name="r"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    m = model(nodes, [tensor("x", [1, 3, 4, 4])], [tensor("y", [out[0] * out[1], out[2] * out[3]])],
              [const("w", _f(8, 3, 3, 3)), const("s", np.array([out[0] * out[1], -1], np.int64))])
    assert _rules(_compile(m)) == {"dnnl.conv2d", "dnnl.transpose", "dnnl.reshape", "dnnl.relu"}


def test_reshape_of_an_input_that_is_an_output():
    """A view of the caller's input leaves as an output: copied into the output buffer, input untouched."""
    m = single_op("Reshape", {"x": [2, 6]}, [3, 4], initializers=[const("s", np.array([3, 4], np.int64))])
    artifact = _compile(m)
    x = _f(2, 6)
    before = x.copy()
    np.testing.assert_array_equal(artifact.run([x])[0], before.reshape(3, 4))
    np.testing.assert_array_equal(x, before)


def test_partition_output_in_blocked_layout_and_several_outputs():
    """A conv result that leaves the partition and also feeds a pool inside it."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y1"], name="relu"),
             helper.make_node("MaxPool", ["y1"], ["y2"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, [tensor("x", [1, 16, 8, 8])], [tensor("y1", [1, 32, 8, 8]), tensor("y2", [1, 32, 4, 4])],
              [const("w", _f(32, 16, 3, 3, scale=0.2)), const("b", _f(32))])
    _compile(m)


def test_mixed_with_json_runtime_and_host():
    """dnnl first; what it refuses (a conv whose weight is an input) goes to the next vendor, json_runtime."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Conv", ["c", "w2"], ["t"], name="conv_of_input_weight"),
             helper.make_node("Tanh", ["t"], ["y"], name="tanh")]
    m = model(nodes, [tensor("x", [1, 3, 6, 6]), tensor("w2", [8, 4, 1, 1])], [tensor("y", [1, 8, 4, 4])],
              [const("w", _f(4, 3, 3, 3))])
    artifact = _compile(m, vendors=("dnnl", "json_runtime"))
    assert {p.vendor for p in artifact.plan.partitions} == {"dnnl", "json_runtime"}


def test_memory_lower_bound_follows_each_partition_output():
    """Two encoder layers, their QKV splits kept on the host: partition 1 returns (h1, qkv1);
    h1 is read again after qkv1 is dead.

    By hand (float32 bytes; qkv 1x32x96 = 12288, q/k/v and h 4096 each):
    P0 qkv0 12288 | split qkv0+3 = 24576 | P1 q,k,v + h1 + qkv1 = 28672 |
    split h1 + qkv1 + 3 = 28672 | P2 q,k,v + h1 + y = 20480. Peak 28672; counting
    the whole output tuple wherever h1 is read would keep qkv1 alive (32768).
    """
    from onnx import compose

    from byoc.tools.memory import estimate_memory

    first = encoder_layer(seq=32, hidden=32, heads=4, ffn=64)
    second = compose.add_prefix(encoder_layer(seq=32, hidden=32, heads=4, ffn=64), "l2_")
    plan = byoc.partition(compose.merge_models(first, second, io_map=[("y", "l2_x")]), ["dnnl"],
                          keep_on_host=["Split"])
    assert len(plan.partitions) == 3
    estimate = estimate_memory(plan)
    assert estimate.lower_bound_bytes == 28672
    assert estimate.planned_bytes >= estimate.lower_bound_bytes


# -- rejections with reasons --------------------------------------------------------------
def _reason(m, op):
    plan = byoc.partition(m, ["dnnl"])
    return next(d.reasons["dnnl"] for d in plan.host_ops if d.op == op)


def test_rejects_conv_weight_that_is_not_constant():
    m = single_op("Conv", {"x": [1, 3, 5, 5], "w": [2, 3, 3, 3]}, [1, 2, 3, 3])
    assert "weight is not a constant" in _reason(m, "relax.nn.conv2d")


def test_rejects_matmul_with_a_vector():
    m = single_op("MatMul", {"a": [4], "b": [4, 5]}, [5])
    assert "rank 1" in _reason(m, "relax.matmul")


def test_rejects_elementwise_broadcasting_both_sides():
    m = single_op("Add", {"a": [1, 4], "b": [3, 1]}, [3, 4])
    assert "broadcasts the second operand only" in _reason(m, "relax.add")


def test_rejects_avg_pool_ceil_mode_counting_padding_it_extends():
    m = single_op("AveragePool", {"x": [1, 2, 7, 7]}, [1, 2, 4, 4],
                  {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1})
    assert "ceil_mode=1" in _reason(m, "relax.nn.avg_pool2d")


def test_rejects_layer_norm_over_two_axes():
    m = single_op("LayerNormalization", {"x": [2, 4, 6]}, [2, 4, 6], {"axis": 1},
                  initializers=[const("g", _f(4, 6)), const("b", _f(4, 6))])
    assert "last axis" in _reason(m, "relax.nn.layer_norm")


def test_rejects_float64():
    from onnx import TensorProto

    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    m = model([node], [tensor("x", [2, 3], TensorProto.DOUBLE)], [tensor("y", [2, 3], TensorProto.DOUBLE)])
    assert "float64" in _reason(m, "relax.nn.relu")


# -- work done once, at load --------------------------------------------------------------
_VERBOSE_SCRIPT = """
import sys, numpy as np, onnx, byoc
m = onnx.load(sys.argv[1])
artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
x = np.random.default_rng(0).standard_normal((1, 16, 10, 10)).astype(np.float32)
artifact.run([x])
print("=== CALLS ===", flush=True)
for _ in range(3):
    artifact.run([x])
"""


def test_primitives_and_weight_reorders_happen_once_at_load(tmp_path):
    """oneDNN's verbose log: every primitive is created before the first call, never during calls;
    conv weights are used in a blocked layout (reordered once), and calls run no weight reorders."""
    import onnx

    path = tmp_path / "block.onnx"
    onnx.save(residual_block(), str(path))
    env = dict(os.environ, ONEDNN_VERBOSE="profile_create,profile_exec")
    done = subprocess.run([sys.executable, "-c", _VERBOSE_SCRIPT, str(path)], capture_output=True, text=True,
                          env=env, cwd=TESTS, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after = done.stdout.split("=== CALLS ===")
    created = [line for line in before.splitlines() if line.startswith("onednn_verbose") and ",create:" in line]
    assert any(",convolution," in line for line in created)
    calls = [line for line in after.splitlines() if line.startswith("onednn_verbose")]
    assert not [line for line in calls if ",create:" in line], "a primitive was created during a call"
    executed = [line for line in calls if ",exec," in line]
    convs = [line for line in executed if ",convolution," in line]
    assert len(convs) == 2 * 3  # two convs, three calls
    assert all("wei_f32::blocked:abcd" not in line for line in convs), "conv weights are still OIHW"
    # Per call: the input goes into the blocked layout and the output comes back; weights never.
    reorders = [line for line in executed if ",reorder," in line]
    assert len(reorders) == 2 * 3, reorders


def test_plain_output_is_written_in_place(tmp_path):
    """A matmul partition computes straight into the caller's output buffer: no reorder, no copy."""
    import onnx

    m = single_op("MatMul", {"a": [8, 16]}, [8, 4], initializers=[const("w", _f(16, 4))])
    path = tmp_path / "mm.onnx"
    onnx.save(m, str(path))
    script = textwrap.dedent("""
        import sys, numpy as np, onnx, byoc
        artifact = byoc.compile(onnx.load(sys.argv[1]), vendors=["dnnl"], strict=True)
        artifact.run([np.ones((8, 16), np.float32)])
        print("=== CALLS ===", flush=True)
        artifact.run([np.ones((8, 16), np.float32)])
    """)
    env = dict(os.environ, ONEDNN_VERBOSE="profile_exec")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, env=env,
                          cwd=TESTS, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    executed = [line for line in done.stdout.split("=== CALLS ===")[1].splitlines() if ",exec," in line]
    assert len(executed) == 1 and ",matmul," in executed[0], executed


# -- deployment ---------------------------------------------------------------------------
def test_export_and_load_in_a_fresh_process(tmp_path):
    m = encoder_layer()
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    path = artifact.export(tmp_path / "encoder.so")
    inputs = random_inputs(m)
    np.save(tmp_path / "x.npy", inputs["x"])
    np.save(tmp_path / "want.npy", onnxruntime_outputs(m, inputs)[0])
    script = textwrap.dedent(f"""
        import numpy as np, byoc
        artifact = byoc.load({str(path)!r})
        got = artifact.run([np.load({str(tmp_path / 'x.npy')!r})])[0]
        np.testing.assert_allclose(got, np.load({str(tmp_path / 'want.npy')!r}), rtol={RTOL}, atol={ATOL})
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_eight_threads_share_one_artifact():
    m = residual_block()
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    inputs = [random_inputs(m, seed=s) for s in range(16)]
    expected = [onnxruntime_outputs(m, i) for i in inputs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: [artifact.run(i) for _ in range(4)], inputs))
    for runs, want in zip(results, expected):
        for got in runs:
            np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)


def _dnnl_module():
    import tvm_ffi

    from byoc.codegens.dnnl import DNNL_RUNTIME
    from byoc.vendor.graph import partition_graph

    plan = byoc.partition(residual_block(), ["dnnl"])
    part = plan.partitions[0]
    graph = partition_graph(plan.mod[part.global_var], part.name)
    (module,) = byoc.get_vendor("dnnl").codegen.compile([graph], {})
    return module, tvm_ffi.get_global_func(f"byoc.{DNNL_RUNTIME.name}.save_to_bytes")(module)


def test_corrupted_and_truncated_blobs_raise_clear_errors():
    import tvm_ffi

    _, blob = _dnnl_module()
    load = tvm_ffi.get_global_func("ffi.Module.load_from_bytes.byoc_dnnl")
    load(blob)
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0xFF
    with pytest.raises(ValueError, match="byoc dnnl: corrupted module blob: checksum mismatch"):
        load(bytes(flipped))
    for cut in range(0, len(blob), max(1, len(blob) // 37)):
        with pytest.raises(ValueError, match="byoc dnnl"):
            load(blob[:cut])
    json_blob = bytes(blob).replace(b"BYOCDNNL", b"BYOCJSRT", 1)
    with pytest.raises(ValueError, match="not a dnnl module blob"):
        load(json_blob)


def _without_onednn(monkeypatch):
    from importlib import metadata

    from byoc.codegens import dnnl

    real = metadata.distribution

    def distribution(name):
        if name.startswith("onednn"):
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(dnnl.metadata, "distribution", distribution)


def test_missing_onednn_names_the_extra(monkeypatch):
    from byoc.codegens import dnnl

    _without_onednn(monkeypatch)
    with pytest.raises(BuildError, match=r'onednn-cpu-gomp is not installed; pip install "byoc-tvm\[dnnl\]"'):
        dnnl.onednn_library()


def test_building_without_onednn_is_a_clear_error_not_a_fallback(monkeypatch):
    """Asking for dnnl without oneDNN is a set-up problem: say what to install rather than build a slow artifact."""
    from byoc.codegens.dnnl import DNNL_RUNTIME, DnnlCodegen, onednn_library
    from byoc.codegens.json_runtime.runtime import RuntimeLibrary

    _without_onednn(monkeypatch)
    unloaded = RuntimeLibrary(DNNL_RUNTIME.name, DNNL_RUNTIME.package, dependencies=onednn_library)
    monkeypatch.setattr(byoc.get_vendor("dnnl").codegen, "library", unloaded)
    assert isinstance(byoc.get_vendor("dnnl").codegen, DnnlCodegen)
    with pytest.raises(BuildError, match=r'pip install "byoc-tvm\[dnnl\]"'):
        byoc.compile(residual_block(), vendors=["dnnl"])


def test_a_failing_dnnl_codegen_falls_back_to_the_host_or_raises_when_strict(monkeypatch):
    from byoc.codegens.dnnl import DnnlCodegen

    def broken(self, partitions, options):
        raise RuntimeError("oneDNN: could not create a primitive")

    monkeypatch.setattr(DnnlCodegen, "compile", broken)
    m = residual_block()
    with pytest.warns(RuntimeWarning, match="vendor 'dnnl' failed on dnnl_0, whose ops run on the host"):
        artifact = byoc.compile(m, vendors=["dnnl"])
    assert artifact.plan.partitions == []
    inputs = random_inputs(m)
    np.testing.assert_allclose(artifact.run(inputs)[0], onnxruntime_outputs(m, inputs)[0], rtol=RTOL, atol=ATOL)
    with pytest.raises(CodegenError, match="could not create a primitive"):
        byoc.compile(m, vendors=["dnnl"], strict=True)


def test_a_codegen_that_fails_on_one_partition_sends_back_that_one_alone(monkeypatch):
    """A codegen that refuses one partition (an NPU without ReLU) leaves its other partitions offloaded; the
    refused one's ops go back with the codegen's reason on each, the line the report gives them."""
    from byoc.codegens.dnnl import DnnlCodegen

    real = DnnlCodegen.compile

    def no_relu(self, partitions, options):
        if any(call.op == "relax.nn.relu" for graph in partitions for call in graph.ops):
            raise RuntimeError("the NPU has no ReLU")
        return real(self, partitions, options)

    monkeypatch.setattr(DnnlCodegen, "compile", no_relu)
    m = residual_block()
    plan = byoc.partition(m, ["dnnl"], keep_on_host=["relu1"])  # conv1 | relu1 on the host | conv2, add, relu
    assert len(plan.partitions) == 2
    with pytest.warns(RuntimeWarning, match=r"vendor .dnnl. failed on dnnl_1, .* \(its other partitions stay\)"):
        artifact = byoc.build(plan)
    assert [p.onnx_nodes for p in artifact.plan.partitions] == [["conv1"]]
    reasons = {d.node.name: d.reasons["dnnl"] for d in artifact.plan.host_ops}
    assert "the dnnl codegen failed on partition dnnl_1" in reasons["residual"] and "no ReLU" in reasons["residual"]
    assert "the dnnl codegen failed on partition dnnl_1" in byoc.report(artifact.plan)
    (fallback,) = artifact.plan.fallbacks  # a line of the report's own, not only a warning
    assert (fallback.vendor, fallback.partition, fallback.ops) == ("dnnl", "dnnl_1", 4)  # conv2, its bias, add, relu
    assert ("dnnl_1 (4 ops) back from dnnl: its codegen: the 'dnnl' codegen failed on dnnl_1: RuntimeError: the NPU "
            "has no ReLU") in byoc.report(artifact.plan)
    inputs = random_inputs(m)
    np.testing.assert_allclose(artifact.run(inputs)[0], onnxruntime_outputs(m, inputs)[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("target", ["s390x", "ppc64le:pwr9"])
def test_foreign_targets_keep_dnnl_ops_on_the_host_with_the_reason_or_refuse_when_strict(target):
    """The oneDNN wheel is x86_64 only: on another target dnnl takes nothing, and says why."""
    name = target.split(":")[0]
    plan = byoc.partition(residual_block(), ["dnnl"], target=target)
    assert plan.partitions == [] and plan.target.name == name
    assert {d.reasons["dnnl"] for d in plan.host_ops} == {f"dnnl runs on x86_64 only, not {name}"}
    assert f"dnnl runs on x86_64 only, not {name}" in byoc.report(plan)
    with pytest.raises(TargetError, match=rf"dnnl runs on x86_64 only, not {name}"):
        byoc.compile(residual_block(), vendors=["dnnl"], target=target, strict=True)
    # A plan made for x86_64 with dnnl partitions cannot be built for the foreign target.
    with pytest.raises(TargetError, match=r"vendor 'dnnl' runs on x86_64 only, not (s390x|ppc64le)"):
        byoc.build(byoc.partition(residual_block(), ["dnnl"]), target=target)
    # A lower-priority vendor that runs there takes the ops instead.
    plan = byoc.partition(residual_block(), ["dnnl", "c_source"], target=target)
    assert plan.partitions and {p.vendor for p in plan.partitions} == {"c_source"}

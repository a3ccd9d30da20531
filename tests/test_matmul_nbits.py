"""onnxruntime's com.microsoft MatMulNBits (weight-only int4/int8, what LLM exporters write): imported as the
dequantization of its packed weight in Relax ops, computed by the host and by the dnnl runtime's own kernels
on the packed weight, against onnxruntime running the same model.

Tolerance: both sides dequantize exactly ((code - zero_point) * scale, the same float32 values) and differ
only in the order of the float32 sums (the GEMV sums a block's code * x first, then scales it; oneDNN's sgemm
and MLAS block K their own ways): within a few ulps of the sum of |w * x| over K, below 1e-4 of the outputs
at these sizes (K <= 1024).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import byoc
from byoc.errors import UnsupportedAttributeError, UnsupportedOpsError

from matmul_nbits_models import nbits_model, run_onnxruntime

RTOL = 1e-4


def _close(got, want):
    got = np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(want).max())))


def _inputs(shape, k, seed=1):
    return {"A": np.random.default_rng(seed).standard_normal((*shape, k)).astype(np.float32)}


def _run(artifact, feeds):
    out = artifact.run(feeds)
    return np.asarray(out[0] if isinstance(out, (list, tuple)) else out)


CASES = [
    # k, n, bits, block, zero points, bias, rows
    (128, 64, 4, 32, "none", False, 1),
    (100, 48, 4, 32, "packed", True, 1),  # K not a multiple of the block
    (300, 50, 4, 16, "packed", False, 7),  # N not a multiple of a panel
    (256, 96, 4, 128, "float", True, 64),
    (200, 72, 4, 64, "none", True, 2),
    (128, 64, 8, 32, "none", False, 1),
    (272, 40, 8, 16, "packed", True, 7),
    (1024, 130, 8, 128, "packed", False, 64),
]


@pytest.mark.parametrize("k,n,bits,block,zp,bias,rows", CASES)
def test_dnnl_matches_onnxruntime(k, n, bits, block, zp, bias, rows):
    m, _ = nbits_model(k, n, bits, block, zp, bias, a_shape=(1, rows))
    feeds = _inputs((1, rows), k)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert not artifact.plan.host_ops, [(d.op, d.reasons) for d in artifact.plan.host_ops]
    kernels = {impl for impls in artifact.implementations().values() for impl in impls}
    assert kernels == {f"kernel byoc:matmul_nbits_{'gemv' if rows <= 3 else 'gemm'}"}
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))


@pytest.mark.parametrize("k,n,bits,block,zp,bias,rows", [CASES[1], CASES[3], CASES[6]])
def test_host_matches_onnxruntime(k, n, bits, block, zp, bias, rows):
    m, _ = nbits_model(k, n, bits, block, zp, bias, a_shape=(1, rows))
    feeds = _inputs((1, rows), k)
    artifact = byoc.compile(m, vendors=[])
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))


def test_bias_added_first():
    """Add(bias, MatMulNBits(...)), the bias first (MatMulNBitsQuantizer leaves a model's Add as it was: ViT's)."""
    m, _ = nbits_model(96, 40, 4, 32, "packed", False, a_shape=(1, 5))
    m.graph.node[0].output[0] = "mm"
    m.graph.initializer.append(numpy_helper.from_array(np.linspace(-1, 1, 40).astype(np.float32), "b"))
    m.graph.node.append(helper.make_node("Add", ["b", "mm"], ["Y"], name="bias_first"))
    feeds = _inputs((1, 5), 96)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert not artifact.plan.host_ops
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))


def test_8bit_float_zero_points_match_the_dequantized_model():
    """onnxruntime's CPU kernel refuses 8-bit weights with float zero points (the spec allows them): the
    reference is onnxruntime's float MatMul on the same weight, dequantized exactly."""
    m, fm = nbits_model(160, 48, 8, 32, "float", True, a_shape=(1, 5))
    feeds = _inputs((1, 5), 160)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert not artifact.plan.host_ops
    _close(_run(artifact, feeds), run_onnxruntime(fm, feeds))


def test_symbolic_batch_and_sequence():
    """Two layers on A [batch, seq, K]: one partition, GEMV or GEMM chosen per call's rows."""
    m, _ = nbits_model(96, 64, 4, 32, "packed", True, a_shape=("batch", "seq"), layers=2)
    artifact = byoc.compile(m, vendors=["dnnl"], dims={"batch": "1..4", "seq": "1..128"})
    assert not artifact.plan.host_ops
    assert len(artifact.plan.partitions) == 1
    for shape in [(1, 1), (2, 7), (1, 64)]:
        feeds = _inputs(shape, 96, seed=sum(shape))
        _close(_run(artifact, feeds), run_onnxruntime(m, feeds))


def test_packed_weight_survives_folding():
    """The import holds B as uint8, packed: constant folding does not widen it to float32."""
    m, _ = nbits_model(256, 128, 4, 32, "packed", False, a_shape=(1, 1))
    imported = byoc.import_model(m)
    from tvm import relax

    from byoc.vendor.values import const_array, is_tensor_const

    consts = []

    def visit(expr):
        if is_tensor_const(expr):
            value = const_array(expr)
            consts.append((str(value.dtype), value.shape))

    relax.analysis.post_order_visit(imported.mod["main"], visit)
    assert ("uint8", (128, 8, 16)) in consts
    assert all(int(np.prod(shape)) < 256 * 128 for dtype, shape in consts if dtype == "float32")


def test_artifact_keeps_four_bits_a_weight(tmp_path):
    k = n = 512
    m, fm = nbits_model(k, n, 4, 32, "packed", True, a_shape=(1, 1))
    quantized = byoc.compile(m, vendors=["dnnl"]).export(tmp_path / "int4.so")
    full = byoc.compile(fm, vendors=["dnnl"]).export(tmp_path / "float.so")
    int4_bytes, float_bytes = quantized.stat().st_size, full.stat().st_size
    assert int4_bytes < float_bytes / 4, (int4_bytes, float_bytes)
    loaded = byoc.load(quantized)
    feeds = _inputs((1, 1), k)
    _close(_run(loaded, feeds), run_onnxruntime(m, feeds))


def _with_node_changes(model, **changes):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = out.graph.node[0]
    for key, value in changes.items():
        for attr in node.attribute:
            if attr.name == key:
                node.attribute.remove(attr)
                break
        node.attribute.append(helper.make_attribute(key, value))
    return out


def test_g_idx_refused_by_name():
    m, _ = nbits_model(64, 32, 4, 32, "packed", False, a_shape=(1, 1), g_idx=True)
    with pytest.raises(UnsupportedAttributeError, match="g_idx") as err:
        byoc.partition(m, vendors=["dnnl"])
    assert err.value.attribute == "g_idx" and err.value.node == "nbits0"


def test_other_bits_refused_by_name():
    m, _ = nbits_model(64, 32, 4, 32, "none", False, a_shape=(1, 1))
    two_bits = _with_node_changes(m, bits=2)
    b = next(t for t in two_bits.graph.initializer if t.name == "l0_B")
    b.CopyFrom(numpy_helper.from_array(np.zeros((32, 2, 8), np.uint8), "l0_B"))
    with pytest.raises(UnsupportedAttributeError, match="bits=2") as err:
        byoc.partition(two_bits, vendors=["dnnl"])
    assert err.value.attribute == "bits"


def test_scales_computed_at_run_time_refused_by_name():
    m, _ = nbits_model(64, 32, 4, 32, "none", False, a_shape=(1, 1))
    graph = m.graph
    scales = next(t for t in graph.initializer if t.name == "l0_scales")
    graph.initializer.remove(scales)
    graph.input.append(helper.make_tensor_value_info("l0_scales", TensorProto.FLOAT, [64]))
    with pytest.raises(UnsupportedAttributeError, match="scales") as err:
        byoc.partition(m, vendors=["dnnl"])
    assert err.value.attribute == "scales"


def test_other_weight_only_contrib_ops_still_refused():
    """MatMulBnb4 (bitsandbytes' 4-bit weights, also onnxruntime's) is not MatMulNBits: refused by name."""
    node = helper.make_node("MatMulBnb4", ["x"], ["y"], name="g", domain="com.microsoft", K=4, N=4, block_size=16,
                            quant_type=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOpsError, match="MatMulBnb4"):
        byoc.partition(m, vendors=["dnnl"])


def test_the_rest_of_the_model_is_still_simplified():
    """onnxsim (through onnxruntime, which runs MatMulNBits) still folds the model's other constants: the
    contrib op byoc imports does not turn preparation off, as the ops it refuses do."""
    m, _ = nbits_model(64, 32, 4, 32, "packed", False, a_shape=(1, 2))
    graph = m.graph
    graph.initializer.extend([numpy_helper.from_array(np.ones(32, np.float32), "c1"),
                              numpy_helper.from_array(np.full(32, 2.0, np.float32), "c2")])
    graph.node[0].output[0] = "mm"
    graph.node.extend([helper.make_node("Add", ["c1", "c2"], ["c"], name="constant_add"),
                       helper.make_node("Add", ["mm", "c"], ["Y"], name="output_add")])
    imported = byoc.import_model(m)
    assert imported.simplifier.startswith("onnxsim")
    assert "constant_add" in imported.prepared
    artifact = byoc.compile(m, vendors=["dnnl"])
    feeds = _inputs((1, 2), 64)
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))

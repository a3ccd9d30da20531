"""onnxruntime's com.microsoft MatMulNBits (weight-only int4/int8, what LLM exporters write): imported as the
dequantization of its packed weight in Relax ops, computed by the host and by the dnnl runtime's own kernels
on the packed weight, against onnxruntime running the same model.

Tolerance: both sides dequantize exactly ((code - zero_point) * scale, the same float32 values) and differ
only in the order of the float32 sums (the GEMV sums a block's code * x first, then scales it; oneDNN's sgemm
and MLAS block K their own ways): within a few ulps of the sum of |w * x| over K, below 1e-4 of the outputs
at these sizes (K <= 1024).

accuracy_level 4 (onnxruntime quantizes A to int8 per block, MLAS's CompInt8): the runtime quantizes as MLAS does
(the same int8 values and scales, the same integer block sums), so the two differ again only in the order of
the float32 sums: within INT8_RTOL (1e-5) of the largest output; against the float computation they differ by
the activations' quantization (about 1e-3 to 1e-2 of the outputs), which the tests check they do.
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
INT8_RTOL = 1e-5


def _close(got, want):
    got = np.asarray(got)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(want).max())))


def _with_level(model, level):
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend([*kept, helper.make_attribute("accuracy_level", level)])
    return out


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


@pytest.mark.parametrize("k,n,bits,block,zp,bias,rows", [c for c in CASES if c[4] != "float"] + [
    (2048, 64, 4, 32, "packed", True, 1),  # a decoder's K
    (384, 40, 4, 64, "none", False, 3),  # the GEMV's most rows
    (200, 24, 8, 64, "packed", False, 1),  # K not a multiple of the block, 8-bit
    (512, 36, 4, 256, "packed", False, 1),  # a block the kernels know no constant for
    (96, 48, 4, 32, "packed", True, 1),  # an odd number of blocks of 32 (AVX-512 VNNI: the last one alone)
    (160, 40, 8, 32, "none", False, 5),  # 8-bit, odd blocks, a few rows (AVX-512 VNNI: integer dots too)
    (512, 72, 4, 32, "packed", True, 64),  # a prompt's rows (AVX-512 VNNI: integer dots per chunk of B^T)
])
def test_int8_activations_match_onnxruntime(k, n, bits, block, zp, bias, rows):
    """accuracy_level 4: A quantized to int8 per block, as onnxruntime does (GEMV, and any rows on AVX-512 VNNI:
    integer block sums; a GEMM elsewhere: the dequantized int8 values into the float GEMM)."""
    m = _with_level(nbits_model(k, n, bits, block, zp, bias, a_shape=(1, rows))[0], 4)
    feeds = _inputs((1, rows), k)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert not artifact.plan.host_ops
    got, want = _run(artifact, feeds), run_onnxruntime(m, feeds)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=INT8_RTOL * scale)
    float_result = run_onnxruntime(_with_level(m, 0), feeds)
    assert np.abs(got - float_result).max() > 10 * INT8_RTOL * scale  # the int8 path ran, not the float one


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_other_accuracy_levels_compute_in_float(level):
    m = _with_level(nbits_model(128, 64, 4, 32, "packed", True, a_shape=(1, 1))[0], level)
    feeds = _inputs((1, 1), 128)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))
    _close(_run(artifact, feeds), run_onnxruntime(_with_level(m, 0), feeds))


@pytest.mark.parametrize("rows", [1, 64])
def test_int8_activations_float_zero_points_stay_float(rows):
    """onnxruntime computes float zero points in float32 at accuracy_level 4 (CompInt8 takes uint8 ones): so does
    byoc."""
    m = _with_level(nbits_model(256, 48, 4, 64, "float", True, a_shape=(1, rows))[0], 4)
    feeds = _inputs((1, rows), 256)
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    _close(_run(artifact, feeds), run_onnxruntime(m, feeds))


def test_int8_activations_on_the_host_compute_in_float():
    """Without the dnnl vendor the level is read by no one: the host computes the float matmul."""
    m = _with_level(nbits_model(100, 48, 4, 32, "packed", True, a_shape=(1, 1))[0], 4)
    feeds = _inputs((1, 1), 100)
    _close(_run(byoc.compile(m, vendors=[]), feeds), run_onnxruntime(_with_level(m, 0), feeds))


def test_int8_activations_zero_and_tied_inputs():
    """A block of zeros (scale 0: q all 0) and values on a rounding tie (x * 127 / max|x| = k + 0.5) quantize as
    onnxruntime's do."""
    k = 128
    m = _with_level(nbits_model(k, 32, 4, 32, "packed", False, a_shape=(1, 1))[0], 4)
    x = np.zeros((1, 1, k), np.float32)
    x[0, 0, 32:64] = np.arange(32) - 16  # block 1: max 16, x * 127/16 never a tie; block 2: ties
    x[0, 0, 64:96] = (np.arange(32) % 8 + 0.5) * np.float32(127 / 127)
    x[0, 0, 64] = 127.0
    x[0, 0, 96:] = np.random.default_rng(3).standard_normal(32)
    feeds = {"A": x}
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    want = run_onnxruntime(m, feeds)
    np.testing.assert_allclose(_run(artifact, feeds), want, rtol=0, atol=INT8_RTOL * float(np.abs(want).max()))


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

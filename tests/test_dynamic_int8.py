"""Models quantized by onnxruntime's quantize_dynamic (hubs' ``model_quantized.onnx``) on dnnl.

Each ``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale) [-> Add bias]`` is one dnnl
unit (``byoc.dynamic_int8_matmul``): the activation quantized per call as ONNX defines it, one oneDNN u8 x s8
kernel. The reference is onnxruntime with graph optimizations off (each op as ONNX defines it); byoc's error
against it is compared with onnxruntime's own optimized run's (its fused DynamicQuantizeMatMul), plus a margin of
2 float32 ulps of the output's magnitude: the float ops between units (layer norm, softmax, GELU) are oneDNN's,
which round differently from onnxruntime's in the last bit. Symbolic batch and sequence, two sizes each.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import byoc
from dynamic_int8_models import depthwise_conv, encoder, mlp, quantize_dynamic, small_conv, two_branch_conv

MODELS = {"mlp": lambda: mlp(), "encoder": lambda: encoder(layers=2)}
SIZES = [(1, 5), (2, 13)]


def _ort(m, x, level):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _host_ops(plan) -> list:
    return [(name, d.reasons) for name, d in plan.decisions.items() if not d.rule]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_dynamic_int8_is_one_partition_and_matches_onnxruntime(name, per_channel):
    float_model = MODELS[name]()
    m = quantize_dynamic(float_model, per_channel=per_channel)
    assert len(byoc.partition(float_model, vendors=["dnnl"]).partitions) == 1
    artifact = byoc.compile(m, vendors=["dnnl"])
    assert len(artifact.plan.partitions) == 1
    assert _host_ops(artifact.plan) == []  # no int8 op (nor anything else) left on the host
    rules = {d.rule for d in artifact.plan.decisions.values()}
    assert "dnnl.dynamic_int8_matmul_bias" in rules
    hidden = 64
    for seed, (batch, sequence) in enumerate(SIZES):
        x = np.random.default_rng(seed).standard_normal((batch, sequence, hidden)).astype(np.float32)
        reference = _ort(m, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        optimized = _ort(m, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        ours = artifact.run([x])[0]
        assert ours.shape == reference.shape
        margin = 2 * np.finfo(np.float32).eps * float(np.abs(reference).max())
        assert np.abs(ours - reference).max() <= np.abs(optimized - reference).max() + margin, (batch, sequence)


def test_q_k_and_v_share_one_quantization():
    """Q, K and V read one activation: its DynamicQuantizeLinear is copied per MatMulInteger (units do not
    overlap), and the runtime quantizes it once."""
    m = quantize_dynamic(encoder(layers=1))
    assert sum(n.op_type == "DynamicQuantizeLinear" for n in m.graph.node) == 4  # x (Q, K, V), context, FFN in, out
    artifact = byoc.compile(m, vendors=["dnnl"], input_shapes={"x": [1, 8, 64]})
    steps = [s for found in artifact.implementations().values() for s in found]
    assert sum(s == "kernel byoc:dynamic_quantize" for s in steps) == 4
    assert sum(d.rule == "dnnl.dynamic_int8_matmul_bias" and d.op == "relax.matmul"
               for d in artifact.plan.decisions.values()) == 6


def test_uint8_weights_stay_on_the_host_with_the_reason():
    m = quantize_dynamic(mlp(), weight_type="QUInt8")
    artifact = byoc.compile(m, vendors=["dnnl"])
    reasons = " ".join(str(d.rejections) + str(d.reasons) for d in artifact.plan.decisions.values() if not d.rule)
    assert "uint8 weights of a dynamic int8 matmul" in reasons
    x = np.random.default_rng(0).standard_normal((1, 5, 64)).astype(np.float32)
    reference = _ort(m, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    np.testing.assert_allclose(artifact.run([x])[0], reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [small_conv, two_branch_conv, depthwise_conv], ids=["conv", "two_branches", "depthwise"])
def test_conv_integer_is_one_partition_and_matches_onnxruntime(make):
    """quantize_dynamic of a Conv: DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul -> Add(bias), one dnnl unit
    (an int8 convolution with VNNI; without it a float32 convolution of the integers). Two branches reading one
    activation (a residual block's shortcut) share its DynamicQuantizeLinear, copied per ConvInteger; the 3x3 conv
    over 64 channels sums 576 products, past float32's exact integers at full-range weights. A depthwise conv (groups
    = channels, ConvNeXt's) is one unit too."""
    float_model = make()
    m = quantize_dynamic(float_model, op_types=("Conv",))
    assert "ConvInteger" in {n.op_type for n in m.graph.node}
    artifact = byoc.compile(m, vendors=["dnnl"])
    assert len(byoc.partition(float_model, vendors=["dnnl"]).partitions) == 1
    assert len(artifact.plan.partitions) == 1 and _host_ops(artifact.plan) == []
    assert "dnnl.dynamic_int8_conv2d_bias" in {d.rule for d in artifact.plan.decisions.values()}
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim[1:]]
    for seed, batch in enumerate((1, 3)):
        x = np.random.default_rng(seed).standard_normal((batch, *shape)).astype(np.float32)
        reference = _ort(m, x, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        optimized = _ort(m, x, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        margin = 2 * np.finfo(np.float32).eps * float(np.abs(reference).max())
        assert np.abs(artifact.run([x])[0] - reference).max() <= np.abs(optimized - reference).max() + margin

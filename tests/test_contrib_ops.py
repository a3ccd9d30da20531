"""onnxruntime's com.microsoft ops (byoc.pipeline.frontend.prepare.contrib_ops): each one compiled with dnnl and
compared against onnxruntime's own kernel for it, at several shapes and attribute settings, and what is not
supported refused by name.

The models are single contrib nodes built with onnx.helper, plus a BERT layer run through onnxruntime's
transformer optimizer (what deployments of BERT-family models run), which writes several of them at once.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import byoc
from byoc.errors import UnsupportedAttributeError, UnsupportedOpsError

from models import const, rng, tensor

MS = "com.microsoft"


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(list(nodes), "contrib", list(inputs), list(outputs), list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                          ir_version=8)
    onnx.checker.check_model(m)
    return m


def _ort(m, feeds):
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _f(*shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _matches(m, feeds, rtol=1e-4, atol=1e-4, vendors=("dnnl",), host_ops=0, **compile_args):
    """Compile ``m``, run it on ``feeds`` and compare with onnxruntime; returns the artifact. ``host_ops``: how many
    ops may stay on the host (0: the vendors take the whole contrib op)."""
    artifact = byoc.compile(m, vendors=list(vendors), **compile_args)
    got = artifact.run(feeds)
    want = _ort(m, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    if host_ops is not None:
        kept = [d for d in artifact.plan.host_ops if d.op not in _GLUE]
        assert len(kept) <= host_ops, [(d.op, d.reasons) for d in kept]
    return artifact


#: ops that are no computation a vendor would take (shape reads of symbolic dims)
_GLUE = {"relax.shape_of", "relax.tensor_to_shape", "relax.shape_to_tensor"}


# -- normalization ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [17, 13])
@pytest.mark.parametrize("beta,bias,sum_read", [(True, True, False), (False, False, True), (True, False, True)])
def test_skip_layer_normalization(opset, beta, bias, sum_read):
    hidden = 32
    inputs = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    outputs = ["y", "", "", "s"] if sum_read else ["y"]
    node = helper.make_node("SkipLayerNormalization", inputs, outputs, name="sln", domain=MS, epsilon=1e-5)
    inits = [const("gamma", _f(hidden, seed=1)), const("beta", _f(hidden, seed=2)), const("bias", _f(hidden, seed=3))]
    outs = [tensor("y", [2, 5, hidden])] + ([tensor("s", [2, 5, hidden])] if sum_read else [])
    m = _model([node], [tensor("x", [2, 5, hidden]), tensor("skip", [2, 5, hidden])], outs, inits, opset=opset)
    _matches(m, {"x": _f(2, 5, hidden, seed=4), "skip": _f(2, 5, hidden, seed=5)})


def test_skip_simplified_and_simplified_layer_normalization():
    """RMS norms: SkipSimplified (com.microsoft) feeding Simplified, which onnxruntime writes in ONNX's domain."""
    hidden = 48
    nodes = [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "g1", "bias"], ["h", "", "", "s"],
                              name="ssln", domain=MS, epsilon=1e-6),
             helper.make_node("SimplifiedLayerNormalization", ["s", "g2"], ["y"], name="rms", axis=-1, epsilon=1e-5)]
    inits = [const("g1", _f(hidden, seed=1)), const("g2", _f(hidden, seed=2)), const("bias", _f(hidden, seed=3))]
    graph = helper.make_graph(nodes, "rms", [tensor("x", ["batch", "seq", hidden]), tensor("skip", ["batch", "seq", hidden])],
                              [tensor("h", ["batch", "seq", hidden]), tensor("y", ["batch", "seq", hidden])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)], ir_version=8)
    artifact = byoc.compile(m, vendors=["dnnl"])
    for batch, seq in ((1, 3), (2, 7)):
        feeds = {"x": _f(batch, seq, hidden, seed=batch), "skip": _f(batch, seq, hidden, seed=9)}
        for g, w in zip(artifact.run(feeds), _ort(m, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_layer_normalization_in_onnxs_domain_before_opset_17():
    """onnxruntime's optimizer writes LayerNormalization at opset 13, where ONNX has none (onnx.checker refuses it)."""
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-12)
    graph = helper.make_graph([node], "ln", [tensor("x", [3, 16])], [tensor("y", [3, 16])],
                              [const("g", _f(16, seed=1)), const("b", _f(16, seed=2))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    _matches(m, {"x": _f(3, 16, seed=3)})


@pytest.mark.parametrize("segment,mask,position_ids", [(True, True, False), (False, False, False), (True, True, True)])
def test_embed_layer_normalization(segment, mask, position_ids):
    vocab, positions, hidden, batch, seq = 50, 16, 24, 2, 7
    inputs = ["ids", "segment_ids" if segment else "", "word", "position", "segment_emb" if segment else "",
              "gamma", "beta", "mask" if mask else "", "position_ids" if position_ids else ""]
    node = helper.make_node("EmbedLayerNormalization", inputs, ["y", "mask_index"], name="emb", domain=MS,
                            epsilon=1e-12)
    inits = [const("word", _f(vocab, hidden, seed=1)), const("position", _f(positions, hidden, seed=2)),
             const("segment_emb", _f(2, hidden, seed=3)), const("gamma", _f(hidden, seed=4)),
             const("beta", _f(hidden, seed=5))]
    graph_inputs = [tensor("ids", ["batch", "seq"], TensorProto.INT32)]
    feeds = {"ids": rng(6).integers(0, vocab, (batch, seq)).astype(np.int32)}
    if segment:
        graph_inputs.append(tensor("segment_ids", ["batch", "seq"], TensorProto.INT32))
        feeds["segment_ids"] = rng(7).integers(0, 2, (batch, seq)).astype(np.int32)
    if mask:
        graph_inputs.append(tensor("mask", ["batch", "seq"], TensorProto.INT32))
        feeds["mask"] = (np.arange(seq)[None, :] < np.array([[5], [7]])).astype(np.int32)
    if position_ids:
        graph_inputs.append(tensor("position_ids", ["batch", "seq"], TensorProto.INT32))
        feeds["position_ids"] = rng(8).integers(0, positions, (batch, seq)).astype(np.int32)
    m = _model([node], [*graph_inputs],
               [tensor("y", ["batch", "seq", hidden]), tensor("mask_index", ["batch"], TensorProto.INT32)], inits)
    _matches(m, feeds, host_ops=None)


# -- activations -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,bias,attrs", [("Gelu", False, {}), ("BiasGelu", True, {}), ("FastGelu", True, {}),
                                           ("FastGelu", False, {}), ("QuickGelu", False, {"alpha": 1.5}),
                                           ("QuickGelu", False, {})])
@pytest.mark.parametrize("opset", [17, 20])
def test_gelu_family(op, bias, attrs, opset):
    inputs = ["x"] + (["bias"] if bias else [])
    node = helper.make_node(op, inputs, ["y"], name=op.lower(), domain=MS, **attrs)
    m = _model([node], [tensor("x", [4, 3, 40])], [tensor("y", [4, 3, 40])], [const("bias", _f(40, seed=1))],
               opset=opset)
    _matches(m, {"x": _f(4, 3, 40, seed=2, scale=2.0)}, rtol=1e-4, atol=2e-4)


def test_bias_add_and_bias_split_gelu():
    """onnxruntime has no CPU kernel for either (CUDA only): the reference is their definition in numpy."""
    erf = np.vectorize(math.erf)
    nodes = [helper.make_node("BiasAdd", ["x", "bias", "skip"], ["h"], name="bias_add", domain=MS),
             helper.make_node("BiasSplitGelu", ["h", "bias2"], ["y"], name="bsg", domain=MS)]
    bias, bias2 = _f(32, seed=1), _f(32, seed=2)
    m = _model(nodes, [tensor("x", [2, 6, 32]), tensor("skip", [2, 6, 32])], [tensor("y", [2, 6, 16])],
               [const("bias", bias), const("bias2", bias2)])
    x, skip = _f(2, 6, 32, seed=3), _f(2, 6, 32, seed=4)
    h = (x + bias + skip).astype(np.float64) + bias2
    left, right = h[..., :16], h[..., 16:]
    want = left * right * 0.5 * (1 + erf(right / np.sqrt(2)))
    got = byoc.compile(m, vendors=["dnnl"]).run({"x": x, "skip": skip})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- fused conv, gemm and matmul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("activation,params,with_z", [("Relu", [], False), ("Relu", [], True),
                                                      ("LeakyRelu", [0.2], False), ("Clip", [0.0, 6.0], False),
                                                      ("HardSigmoid", [0.25, 0.5], False), ("Sigmoid", [], True),
                                                      ("", [], False)])
def test_fused_conv(activation, params, with_z):
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    if activation:
        attrs.update(activation=activation, activation_params=params) if params else attrs.update(activation=activation)
    node = helper.make_node("FusedConv", ["x", "w", "b"] + (["z"] if with_z else []), ["y"], name="fused_conv",
                            domain=MS, **attrs)
    inputs = [tensor("x", [1, 4, 10, 10])] + ([tensor("z", [1, 8, 10, 10])] if with_z else [])
    m = _model([node], inputs, [tensor("y", [1, 8, 10, 10])],
               [const("w", _f(8, 4, 3, 3, seed=1, scale=0.3)), const("b", _f(8, seed=2))])
    feeds = {"x": _f(1, 4, 10, 10, seed=3)}
    if with_z:
        feeds["z"] = _f(1, 8, 10, 10, seed=4)
    _matches(m, feeds)


def test_fused_gemm_with_an_activation():
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], name="fused_gemm", domain=MS, transB=1,
                            activation="LeakyRelu", activation_alpha=0.1)
    m = _model([node], [tensor("a", [5, 12])], [tensor("y", [5, 7])],
               [const("b", _f(7, 12, seed=1)), const("c", _f(7, seed=2))])
    _matches(m, {"a": _f(5, 12, seed=3)})


@pytest.mark.parametrize("trans_a,trans_b,alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, 0.125)])
def test_fused_matmul(trans_a, trans_b, alpha):
    a_shape = [3, 16, 8] if trans_a else [3, 8, 16]
    b_shape = [3, 12, 16] if trans_b else [3, 16, 12]
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], name="fused_matmul", domain=MS, transA=trans_a,
                            transB=trans_b, alpha=alpha)
    m = _model([node], [tensor("a", a_shape), tensor("b", b_shape)], [tensor("y", [3, 8, 12])])
    _matches(m, {"a": _f(*a_shape, seed=1), "b": _f(*b_shape, seed=2)})


# -- dynamic int8 (the float form onnxruntime's optimizer fuses quantize_dynamic's chain into) ---------------
@pytest.mark.parametrize("bias,zero_point", [(True, False), (False, True)])
def test_dynamic_quantize_matmul(bias, zero_point):
    k, n = 24, 10
    weight = rng(1).integers(-100, 100, (k, n)).astype(np.int8)
    inputs = ["a", "w", "w_scale", "w_zp" if zero_point else "", "bias" if bias else ""]
    node = helper.make_node("DynamicQuantizeMatMul", inputs, ["y"], name="dqmm", domain=MS)
    m = _model([node], [tensor("a", ["batch", 6, k])], [tensor("y", ["batch", 6, n])],
               [const("w", weight), const("w_scale", np.array([0.02], np.float32)),
                const("w_zp", np.zeros([1], np.int8)), const("bias", _f(n, seed=2))])
    feeds = {"a": _f(2, 6, k, seed=3)}
    # Both quantize the activation to uint8 as DynamicQuantizeLinear defines and multiply exactly in int32: what
    # differs is float rounding of the scale product, a few float32 ulps of the result.
    _matches(m, feeds, rtol=1e-5, atol=1e-5, host_ops=None)


def test_matmul_integer_to_float():
    k, n = 16, 9
    node = helper.make_node("MatMulIntegerToFloat", ["a", "w", "a_scale", "w_scale", "a_zp", "w_zp", "bias"], ["y"],
                            name="mmitf", domain=MS)
    m = _model([node], [tensor("a", [4, k], TensorProto.UINT8)], [tensor("y", [4, n])],
               [const("w", rng(1).integers(-60, 60, (k, n)).astype(np.int8)),
                const("a_scale", np.array(0.05, np.float32)), const("w_scale", np.full([n], 0.01, np.float32)),
                const("a_zp", np.array(128, np.uint8)), const("w_zp", np.zeros([n], np.int8)),
                const("bias", _f(n, seed=2))])
    _matches(m, {"a": rng(3).integers(0, 255, (4, k)).astype(np.uint8)}, rtol=1e-5, atol=1e-5, host_ops=None)


# -- attention ---------------------------------------------------------------------------------------------------
def _attention_model(batch, seq, hidden, heads, mask_rank, attrs=None, attention_bias=False, sizes=None):
    sizes = sizes or [hidden] * 3
    inputs = ["x", "w", "b", "mask" if mask_rank else "", "", "attention_bias" if attention_bias else ""]
    node = helper.make_node("Attention", inputs, ["y"], name="attention", domain=MS, num_heads=heads, **(attrs or {}))
    graph_inputs = [tensor("x", [batch, seq, hidden])]
    if mask_rank == 1:
        graph_inputs.append(tensor("mask", [batch], TensorProto.INT32))
    elif mask_rank == 2:
        graph_inputs.append(tensor("mask", [batch, seq], TensorProto.INT32))
    elif mask_rank == 3:
        graph_inputs.append(tensor("mask", [batch, seq, seq], TensorProto.INT32))
    if attention_bias:
        graph_inputs.append(tensor("attention_bias", [1, heads, seq, seq]))
    inits = [const("w", _f(hidden, sum(sizes), seed=1, scale=0.3)), const("b", _f(sum(sizes), seed=2, scale=0.1))]
    return _model([node], graph_inputs, [tensor("y", [batch, seq, sizes[2]])], inits)


def _attention_feeds(m, batch, seq, heads):
    feeds = {"x": _f(batch, seq, m.graph.initializer[0].dims[0], seed=5)}
    names = {i.name: i for i in m.graph.input}
    if "mask" in names:
        rank = len(names["mask"].type.tensor_type.shape.dim)
        ends = np.array([seq - 2, seq] * batch)[:batch]
        if rank == 1:
            feeds["mask"] = ends.astype(np.int32)
        else:
            keep = (np.arange(seq)[None, :] < ends[:, None]).astype(np.int32)
            feeds["mask"] = keep if rank == 2 else np.repeat(keep[:, None, :], seq, axis=1)
    if "attention_bias" in names:
        feeds["attention_bias"] = _f(1, heads, seq, seq, seed=6)
    return feeds


@pytest.mark.parametrize("mask_rank,attrs,attention_bias", [
    (0, {}, False), (2, {}, False), (1, {}, False), (3, {}, False), (2, {"unidirectional": 1}, False),
    (0, {"scale": 0.3}, True), (2, {"mask_filter_value": -1e4}, False)])
def test_attention(mask_rank, attrs, attention_bias):
    batch, seq, hidden, heads = 2, 9, 32, 4
    m = _attention_model(batch, seq, hidden, heads, mask_rank, attrs, attention_bias)
    _matches(m, _attention_feeds(m, batch, seq, heads), rtol=1e-4, atol=1e-4, host_ops=None)


def test_attention_with_qkv_hidden_sizes():
    m = _attention_model(1, 6, 24, 2, 2, {"qkv_hidden_sizes": [24, 24, 16]}, sizes=[24, 24, 16])
    _matches(m, _attention_feeds(m, 1, 6, 2), host_ops=None)


def test_attention_with_symbolic_batch_and_sequence_runs_at_several_shapes():
    hidden, heads = 32, 4
    node = helper.make_node("Attention", ["x", "w", "b", "mask"], ["y"], name="attention", domain=MS, num_heads=heads)
    m = _model([node], [tensor("x", ["batch", "seq", hidden]), tensor("mask", ["batch", "seq"], TensorProto.INT32)],
               [tensor("y", ["batch", "seq", hidden])],
               [const("w", _f(hidden, 3 * hidden, seed=1, scale=0.3)), const("b", _f(3 * hidden, seed=2))])
    artifact = byoc.compile(m, vendors=["dnnl"])
    for batch, seq in ((1, 5), (3, 12)):
        feeds = {"x": _f(batch, seq, hidden, seed=seq),
                 "mask": (np.arange(seq)[None, :] < np.arange(seq - batch + 1, seq + 1)[:, None]).astype(np.int32)}
        np.testing.assert_allclose(artifact.run(feeds)[0], _ort(m, feeds)[0], rtol=1e-4, atol=1e-4)


def test_multi_head_attention_cross_attention_with_bias_and_padding_mask():
    batch, seq, kv_seq, hidden, heads = 2, 5, 8, 32, 4
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "bias", "key_padding_mask"], ["y"], name="mha",
                            domain=MS, num_heads=heads)
    m = _model([node], [tensor("q", [batch, seq, hidden]), tensor("k", [batch, kv_seq, hidden]),
                        tensor("v", [batch, kv_seq, hidden]),
                        tensor("key_padding_mask", [batch, kv_seq], TensorProto.INT32)],
               [tensor("y", [batch, seq, hidden])], [const("bias", _f(3 * hidden, seed=1))])
    feeds = {"q": _f(batch, seq, hidden, seed=2), "k": _f(batch, kv_seq, hidden, seed=3),
             "v": _f(batch, kv_seq, hidden, seed=4),
             "key_padding_mask": (np.arange(kv_seq)[None, :] < np.array([[6], [8]])).astype(np.int32)}
    _matches(m, feeds, host_ops=None)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsh", "bnsh"])
def test_rotary_embedding(interleaved, layout):
    batch, seq, heads, head_size, max_pos = 2, 6, 3, 16, 32
    angles = np.arange(max_pos)[:, None] / (10000 ** (np.arange(head_size // 2)[None, :] * 2 / head_size))
    inits = [const("cos", np.cos(angles).astype(np.float32)), const("sin", np.sin(angles).astype(np.float32))]
    shape = [batch, seq, heads * head_size] if layout == "bsh" else [batch, heads, seq, head_size]
    attrs = {"interleaved": interleaved, **({"num_heads": heads} if layout == "bsh" else {})}
    node = helper.make_node("RotaryEmbedding", ["x", "position_ids", "cos", "sin"], ["y"], name="rotary", domain=MS,
                            **attrs)
    m = _model([node], [tensor("x", shape), tensor("position_ids", [batch, seq], TensorProto.INT64)],
               [tensor("y", shape)], inits)
    feeds = {"x": _f(*shape, seed=1), "position_ids": rng(2).integers(0, max_pos, (batch, seq)).astype(np.int64)}
    _matches(m, feeds, rtol=1e-5, atol=1e-5, host_ops=None)


def _gqa_model(batch, seq, past, heads, kv_heads, head_size, packed=False, rotary=False, **attrs):
    """A GroupQueryAttention node as onnxruntime-genai's builder writes it, with a cache of ``past`` positions."""
    inputs = ["q", "" if packed else "k", "" if packed else "v", "past_key" if past else "",
              "past_value" if past else "", "seqlens_k", "total_len", "cos" if rotary else "", "sin" if rotary else ""]
    node = helper.make_node("GroupQueryAttention", inputs, ["y", "present_key", "present_value"], name="gqa",
                            domain=MS, num_heads=heads, kv_num_heads=kv_heads, do_rotary=int(rotary), **attrs)
    q_width = (heads + 2 * kv_heads) * head_size if packed else heads * head_size
    graph_inputs = [tensor("q", [batch, seq, q_width])]
    if not packed:
        graph_inputs += [tensor("k", [batch, seq, kv_heads * head_size]), tensor("v", [batch, seq, kv_heads * head_size])]
    if past:
        graph_inputs += [tensor("past_key", [batch, kv_heads, past, head_size]),
                         tensor("past_value", [batch, kv_heads, past, head_size])]
    graph_inputs += [tensor("seqlens_k", [batch], TensorProto.INT32), tensor("total_len", [], TensorProto.INT32)]
    angles = np.arange(64)[:, None] / (10000 ** (np.arange(head_size // 2)[None, :] * 2 / head_size))
    inits = [const("cos", np.cos(angles).astype(np.float32)), const("sin", np.sin(angles).astype(np.float32))] \
        if rotary else []
    present = [batch, kv_heads, past + seq, head_size]
    m = _model([node], graph_inputs, [tensor("y", [batch, seq, heads * head_size]), tensor("present_key", present),
                                      tensor("present_value", present)], inits)
    feeds = {i.name: _f(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=k)
             for k, i in enumerate(m.graph.input) if i.type.tensor_type.elem_type == TensorProto.FLOAT}
    feeds["seqlens_k"] = np.full([batch], past + seq - 1, np.int32)
    feeds["total_len"] = np.array(past + seq, np.int32)
    return m, feeds


@pytest.mark.parametrize("seq,past,attrs", [
    (7, 0, {}), (1, 6, {}), (3, 5, {"local_window_size": 4}), (5, 0, {"softcap": 2.0}), (1, 9, {"scale": 0.2})])
def test_group_query_attention(seq, past, attrs):
    batch = 1 if seq > 1 and past else 2  # onnxruntime takes several rows of a prompt with a past in one batch only
    m, feeds = _gqa_model(batch, seq, past, heads=4, kv_heads=2, head_size=8, **attrs)
    _matches(m, feeds, rtol=1e-4, atol=1e-4, host_ops=None)


@pytest.mark.parametrize("interleaved,packed", [(0, False), (1, False), (0, True)])
def test_group_query_attention_with_rotary_embeddings_inside(interleaved, packed):
    m, feeds = _gqa_model(1, 4, 3, heads=4, kv_heads=1, head_size=16, packed=packed, rotary=True,
                          rotary_interleaved=interleaved)
    _matches(m, feeds, rtol=1e-4, atol=1e-4, host_ops=None)


def test_group_query_attention_compiles_once_for_a_prompt_and_the_tokens_after_it():
    """Symbolic sequence and past: one artifact runs the prompt, then one token at a time with a growing cache."""
    m, _ = _gqa_model(1, 4, 3, heads=4, kv_heads=2, head_size=16, rotary=True)
    for vi in [*m.graph.input, *m.graph.output]:
        dims = vi.type.tensor_type.shape.dim
        axis = {"q": 1, "k": 1, "v": 1, "y": 1, "past_key": 2, "past_value": 2, "present_key": 2,
                "present_value": 2}.get(vi.name)
        if axis is not None:
            dims[axis].dim_param = "past" if vi.name.startswith("past") else \
                "total" if vi.name.startswith("present") else "seq"
    artifact = byoc.compile(m, vendors=["dnnl"])
    assert len(artifact.plan.partitions) == 1
    r = rng(3)
    for seq, past in ((5, 1), (1, 6), (1, 7)):
        feeds = {"q": r.standard_normal((1, seq, 64)).astype(np.float32),
                 "k": r.standard_normal((1, seq, 32)).astype(np.float32),
                 "v": r.standard_normal((1, seq, 32)).astype(np.float32),
                 "past_key": r.standard_normal((1, 2, past, 16)).astype(np.float32),
                 "past_value": r.standard_normal((1, 2, past, 16)).astype(np.float32),
                 "seqlens_k": np.array([past + seq - 1], np.int32), "total_len": np.array(past + seq, np.int32)}
        for got, want in zip(artifact.run(feeds), _ort(m, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_group_query_attention_with_smooth_softmax_is_refused_by_name():
    m, _ = _gqa_model(1, 2, 0, heads=2, kv_heads=1, head_size=8, smooth_softmax=1)
    with pytest.raises(UnsupportedAttributeError, match=r"GroupQueryAttention node 'gqa': smooth_softmax=1 is not "
                                                        r"supported; byoc computes GroupQueryAttention with "
                                                        r"smooth_softmax=0 only"):
        byoc.import_model(m)


# -- a BERT layer after onnxruntime's transformer optimizer ----------------------------------------------------
def test_a_bert_layer_optimized_by_onnxruntime_is_one_dnnl_partition():
    # optimize_model itself imports torch (for its version); its BERT fusions are this class, which does not.
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.onnx_model_bert import BertOnnxModel
    from test_dnnl import encoder_layer

    bert = BertOnnxModel(encoder_layer(seq=16, hidden=64, heads=4, ffn=128), 4, 64)
    bert.optimize(FusionOptions("bert"))
    optimized = bert.model
    optimized.opset_import.append(helper.make_opsetid(MS, 1))  # optimize_model adds it when it saves
    contrib = {n.op_type for n in optimized.graph.node if n.domain == MS}
    assert {"SkipLayerNormalization", "BiasGelu"} <= contrib, contrib
    x = _f(1, 16, 64, seed=1)
    artifact = _matches(optimized, {"x": x}, rtol=1e-4, atol=2e-4, host_ops=0)
    assert len(artifact.plan.partitions) == 1


# -- what is refused, by name ----------------------------------------------------------------------------------
def test_an_attention_with_a_past_is_refused_by_name():
    node = helper.make_node("Attention", ["x", "w", "b", "", "past"], ["y", "present"], name="attention_with_cache",
                            domain=MS, num_heads=2, unidirectional=1)
    m = _model([node], [tensor("x", [1, 1, 8]), tensor("past", [2, 1, 2, 3, 4])],
               [tensor("y", [1, 1, 8]), tensor("present", [2, 1, 2, 4, 4])],
               [const("w", _f(8, 24, seed=1)), const("b", _f(24, seed=2))])
    with pytest.raises(UnsupportedAttributeError, match=r"Attention node 'attention_with_cache': input 'past'"):
        byoc.import_model(m)


@pytest.mark.parametrize("node,match", [
    (helper.make_node("FusedMatMul", ["a", "b"], ["y"], name="fm", domain=MS, transBatchA=1),
     r"FusedMatMul node 'fm': transBatchA=1 is not supported"),
    (helper.make_node("FusedConv", ["a", "b"], ["y"], name="fc", domain=MS, activation="Elu"),
     r"FusedConv node 'fc': activation='Elu' is not supported"),
])
def test_an_unsupported_attribute_is_refused_by_name(node, match):
    m = _model([node], [tensor("a", [1, 2, 4, 4]), tensor("b", [3, 2, 1, 1])], [tensor("y", [1, 3, 4, 4])])
    with pytest.raises(UnsupportedAttributeError, match=match):
        byoc.import_model(m)


def test_a_contrib_op_byoc_does_not_rewrite_names_the_tool_and_what_to_do():
    node = helper.make_node("DecoderMaskedMultiHeadAttention", ["q", "k", "v"], ["y"], name="dmmha", domain=MS,
                            num_heads=2)
    m = _model([node], [tensor("q", [1, 1, 8]), tensor("k", [1, 1, 8]), tensor("v", [1, 1, 8])],
               [tensor("y", [1, 1, 8])])
    with pytest.raises(UnsupportedOpsError, match=r"dmmha \(DecoderMaskedMultiHeadAttention in domain com.microsoft\).*"
                                                  r"outside those byoc rewrites.*before the tool that wrote them"):
        byoc.import_model(m)


@pytest.mark.parametrize("seq,cached", [(1, 4), (3, 0)])
def test_group_query_attention_on_a_shared_buffer_longer_than_its_tokens(seq, cached):
    """onnxruntime-genai passes one cache buffer of the model's maximum length as every call's past: the keys
    cached are the first ``seqlens_k + 1 - seq``, and the new ones go right after them, not after the buffer."""
    m, feeds = _gqa_model(1, seq, 9, heads=4, kv_heads=2, head_size=8)
    feeds["seqlens_k"] = np.array([cached + seq - 1], np.int32)
    feeds["total_len"] = np.array(cached + seq, np.int32)
    got = byoc.compile(m, vendors=["dnnl"]).run(feeds)
    want = _ort(m, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)
    for g, w in zip(got[1:], want[1:]):  # onnxruntime leaves the slots after the tokens unspecified
        np.testing.assert_allclose(g[:, :, :cached + seq], w[:, :, :cached + seq], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits,zero_points", [(4, False), (4, True), (8, False), (8, True)])
def test_gather_block_quantized(bits, zero_points):
    """onnxruntime-genai's int4 embedding (GatherBlockQuantized): rows gathered, then dequantized per block."""
    r = rng(5)
    rows, width, block = 10, 64, 32
    per_byte = 8 // bits
    inits = [const("data", r.integers(0, 256, (rows, width // per_byte)).astype(np.uint8)),
             const("scales", r.random((rows, width // block)).astype(np.float32))]
    inputs = ["data", "ids", "scales"]
    if zero_points:
        inits.append(const("zeros", r.integers(0, 256, (rows, -(-width // block // per_byte))).astype(np.uint8)))
        inputs.append("zeros")
    node = helper.make_node("GatherBlockQuantized", inputs, ["y"], domain=MS, bits=bits, block_size=block,
                            gather_axis=0, quantize_axis=1)
    m = _model([node], [tensor("ids", ["batch", "sequence"], TensorProto.INT64)],
               [tensor("y", ["batch", "sequence", width])], inits, opset=21)
    _matches(m, {"ids": np.array([[3, 0, 9], [1, 1, 2]], np.int64)}, rtol=0, atol=0, host_ops=None)

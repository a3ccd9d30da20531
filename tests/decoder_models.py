"""Small random-weight decoder LLMs in the two forms real exporters write, built with onnx.helper (no torch,
transformers or optimum), for tests/test_decoders.py.

- ``hf_llama()`` (``byoc.examples``' ``small_decoder``, built there) and ``hf_gpt2()``: optimum's ``text-generation-with-past`` export (transformers' decoders through
  torch.onnx), node for node in kind: the causal/padding mask glue (Range, LessOrEqual, And, a Flatten+Gather of
  the attention mask, the Expand whose shape went through ConstantOfShape/Equal/Where), the -inf Where before the
  Softmax and the IsNaN+Where after it, the Shape/Gather/Unsqueeze/Concat shape arithmetic of every Reshape, the
  cache Concat along -2. Llama: rotary from MatMul(inv_freq, positions) then Cos/Sin, rotate_half by Slice/Neg/
  Concat, GQA's repeat-kv Unsqueeze/Expand/Reshape, RMSNorm as Pow/ReduceMean/Add/Sqrt/Div/Mul, SwiGLU. GPT-2:
  learned positions, LayerNormalization, Conv1D as Reshape/Gemm/Reshape, Split of the fused QKV, tanh GELU.
  The reference exports are ``benchmarks/generate_models.py``'s (``~/.cache/byoc-models/generate/*_hf``).
- ``genai_llama(bits)``: onnxruntime-genai's builder: the attn_mask_reformat subgraph (seqlens_k and
  total_sequence_length from the attention mask), com.microsoft GroupQueryAttention on the packed QKV with
  do_rotary and cos/sin caches, SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization, and for
  ``bits=4`` MatMulNBits (block 32, symmetric, no zero points, no accuracy_level) quantized here from the float
  weights.

Each builder runs a greedy generation on onnxruntime and asserts that its tokens vary and that the top-2 logit
gap stays above ``MIN_GAP`` at every step, so a comparison at 1e-3 also pins the tokens.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from byoc import examples
from byoc.examples import (FFN, HEAD_DIM, HEADS, HF_PAST, HF_TOTAL, HIDDEN, INT64_MAX, KV_HEADS, LAYERS, OPSET_HF,
                           VOCAB, _cache, _Graph, _hf_mask, _hf_scores, _weights, inv_freq, tensor)

MAX_POSITIONS = 128
PROMPT = [3, 17, 101, 42, 77]
STEPS = 7  # decode steps after the prefill: 8 generated tokens
MIN_GAP = 1e-3
OPSET_GENAI = 22


def hf_llama(seed: int = 0, check: bool = True) -> onnx.ModelProto:
    """``byoc.examples.hf_llama``, its margin checked on onnxruntime unless ``check`` is False."""
    model = examples.hf_llama(seed)
    if check:
        check_margin(model)
    return model


def _conv1d(g: _Graph, x: str, weight: str, bias: str, n: int, s: str) -> str:
    """transformers' Conv1D as traced: Reshape to [-1, K], Gemm, Reshape back to [B, S, N]."""
    batch, seq = g.dim(x, 0, s), g.dim(x, 1, s)
    last = g.op("Squeeze", [g.op("Slice", [g.op("Shape", [x], s), g.const([-1], s), g.const([INT64_MAX], s),
                                           g.const([0], s)], s), g.const([0], s)], s)
    flat = g.op("Reshape", [x, g.op("Concat", [g.const([-1], s), g.unsqueeze(last, 0, s)], s, axis=0)], s)
    y = g.op("Gemm", [flat, weight, bias], s, alpha=1.0, beta=1.0)
    shape = g.op("Concat", [g.unsqueeze(batch, 0, s), g.unsqueeze(seq, 0, s), g.const([n], s)], s, axis=0)
    return g.op("Reshape", [y, shape], s)


def hf_gpt2(seed: int = 0, check: bool = True) -> onnx.ModelProto:
    """optimum's export of a GPT2LMHeadModel with past: MHA (4 heads), learned positions, LayerNorm, Gemm."""
    w, norm, bias = _weights(seed)
    g = _Graph()
    t = "/transformer"
    seq0 = g.dim("input_ids", 1, t)
    ids = g.op("Reshape", ["input_ids", g.op("Concat", [g.const([-1], t), g.unsqueeze(seq0, 0, t)], t, axis=0)], t)
    batch = g.dim(ids, 0, t)
    wte = g.op("Gather", [g.init("transformer.wte.weight", w(VOCAB, HIDDEN, scale=np.sqrt(VOCAB))), ids], f"{t}/wte")
    wpe = g.init("transformer.wpe.weight", w(MAX_POSITIONS, HIDDEN, scale=0.5 * np.sqrt(MAX_POSITIONS)))
    positions = g.op("Cast", [g.op("Gather", [wpe, "position_ids"], f"{t}/wpe")], t, to=TensorProto.FLOAT)
    hidden = g.op("Add", [wte, positions], t)
    mask_2d = g.op("Reshape", ["attention_mask", g.op("Concat", [g.unsqueeze(batch, 0, t), g.const([-1], t)], t,
                                                      axis=0)], t)
    _, mask = _hf_mask(g, wte, "past_key_values.0.key", mask_2d, t)
    width = g.op("Squeeze", [g.op("Slice", [g.op("Shape", [hidden], t), g.const([-1], t), g.const([INT64_MAX], t),
                                            g.const([0], t)], t), g.const([0], t)], t)
    for i in range(LAYERS):
        p, s = f"transformer.h.{i}", f"{t}/h.{i}"
        h = g.op("LayerNormalization", [hidden, g.init(f"{p}.ln_1.weight", norm(HIDDEN)),
                                        g.init(f"{p}.ln_1.bias", bias(HIDDEN))], f"{s}/ln_1", axis=-1, epsilon=1e-5)
        a = f"{s}/attn"
        qkv = _conv1d(g, h, g.init(f"{p}.attn.c_attn.weight", w(HIDDEN, 3 * HIDDEN)),
                      g.init(f"{p}.attn.c_attn.bias", bias(3 * HIDDEN)), 3 * HIDDEN, f"{a}/c_attn")
        q, k, v = g.op("Split", [qkv, g.const([HIDDEN] * 3, a)], a, outputs=3, axis=2)
        kb, ks = g.dim(k, 0, a), g.dim(k, 1, a)

        def heads(x, b, n, a=a):
            shape = g.op("Concat", [g.unsqueeze(b, 0, a), g.unsqueeze(n, 0, a), g.const([-1], a),
                                    g.const([HEAD_DIM], a)], a, axis=0)
            return g.op("Transpose", [g.op("Reshape", [x, shape], a)], a, perm=[0, 2, 1, 3])

        k, v = heads(k, kb, ks), heads(v, kb, ks)
        q = heads(q, g.dim(q, 0, a), g.dim(q, 1, a))
        g.op("Concat", [f"past_key_values.{i}.key", k], a, outputs=[f"present.{i}.key"], axis=-2)
        g.op("Concat", [f"past_key_values.{i}.value", v], a, outputs=[f"present.{i}.value"], axis=-2)
        key_len = g.dim(f"present.{i}.key", 2, a)
        depth = g.op("Cast", [g.op("Slice", [g.op("Shape", [q], a), g.const([-1], a), g.const([INT64_MAX], a)], a)],
                     a, to=TensorProto.FLOAT)
        scale = g.op("Cast", [g.op("Div", [g.const([1.0], a), g.op("Sqrt", [depth], a)], a)], a, to=TensorProto.FLOAT)
        key_t = g.op("Transpose", [f"present.{i}.key"], a, perm=[0, 1, 3, 2])
        attn = _hf_scores(g, a, q, key_t, f"present.{i}.value", mask, key_len, g.op("Sqrt", [scale], a))
        attn = g.op("Reshape", [attn, g.op("Concat", [g.unsqueeze(g.dim(attn, 0, a), 0, a),
                                                      g.unsqueeze(g.dim(attn, 1, a), 0, a), g.const([-1], a)],
                                           a, axis=0)], a)
        attn = _conv1d(g, attn, g.init(f"{p}.attn.c_proj.weight", w(HIDDEN, HIDDEN)),
                       g.init(f"{p}.attn.c_proj.bias", bias(HIDDEN)), HIDDEN, f"{a}/c_proj")
        hidden = g.op("Add", [attn, hidden], s)
        h = g.op("LayerNormalization", [hidden, g.init(f"{p}.ln_2.weight", norm(HIDDEN)),
                                        g.init(f"{p}.ln_2.bias", bias(HIDDEN))], f"{s}/ln_2", axis=-1, epsilon=1e-5)
        m = f"{s}/mlp"
        x = _conv1d(g, h, g.init(f"{p}.mlp.c_fc.weight", w(HIDDEN, FFN)), g.init(f"{p}.mlp.c_fc.bias", bias(FFN)),
                    FFN, f"{m}/c_fc")
        act = f"{m}/act"
        inner = g.op("Add", [x, g.op("Mul", [g.op("Pow", [x, g.const(3.0, act)], act), g.const(0.044715, act)], act)],
                     act)
        tanh = g.op("Tanh", [g.op("Mul", [inner, g.const(float(np.sqrt(2 / np.pi)), act)], act)], act)
        x = g.op("Mul", [g.op("Mul", [x, g.const(0.5, act)], act), g.op("Add", [tanh, g.const(1.0, act)], act)], act)
        x = _conv1d(g, x, g.init(f"{p}.mlp.c_proj.weight", w(FFN, HIDDEN)),
                    g.init(f"{p}.mlp.c_proj.bias", bias(HIDDEN)), HIDDEN, f"{m}/c_proj")
        hidden = g.op("Add", [hidden, x], s)
    h = g.op("LayerNormalization", [hidden, g.init("transformer.ln_f.weight", norm(HIDDEN)),
                                    g.init("transformer.ln_f.bias", bias(HIDDEN))], f"{t}/ln_f", axis=-1, epsilon=1e-5)
    h = g.op("Reshape", [h, g.op("Concat", [g.const([-1], t), g.unsqueeze(seq0, 0, t), g.unsqueeze(width, 0, t)], t,
                                 axis=0)], t)
    g.op("MatMul", [h, g.init("lm_head", w(HIDDEN, VOCAB, scale=4.0))], "/lm_head", outputs=["logits"])

    past = ["batch_size", HEADS, HF_PAST, HEAD_DIM]
    present = ["batch_size", HEADS, HF_TOTAL, HEAD_DIM]
    inputs = [tensor("input_ids", ["batch_size", "sequence_length"], TensorProto.INT64)]
    inputs += _cache(past, "past_key_values", by_layer=True)
    inputs += [tensor("attention_mask", ["batch_size", HF_TOTAL], TensorProto.INT64),
               tensor("position_ids", ["batch_size", "sequence_length"], TensorProto.INT64)]
    outputs = [tensor("logits", ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=True)
    model = g.model("main_graph", inputs, outputs, OPSET_HF, "pytorch")
    if check:
        check_margin(model)
    return model


# -- onnxruntime-genai's builder ----------------------------------------------------------------------------
def quantize_symmetric(weight: np.ndarray, bits: int = 4, block: int = 32):
    """MatMulNBits' ``(B, scales, dequantized weight)`` of a float ``[K, N]`` weight: per block of ``block`` rows
    of a column, scale = max|w| / (2^(bits-1) - 1), code = clip(round(w / scale), -2^(bits-1), 2^(bits-1) - 1)
    + 2^(bits-1) (the default zero point, so none is given). B is ``[N, blocks, block * bits / 8]`` uint8, low
    bits first; scales ``[N, blocks]``."""
    k, n = weight.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), np.float32)
    padded[:k] = weight
    grouped = padded.T.reshape(n, blocks, block)
    top = (1 << (bits - 1)) - 1
    scales = (np.abs(grouped).max(axis=-1) / top).astype(np.float32)
    scales[scales == 0] = 1.0
    codes = np.clip(np.rint(grouped / scales[..., None]), -top - 1, top).astype(np.int32) + (1 << (bits - 1))
    dequantized = ((codes - (1 << (bits - 1))) * scales[..., None]).astype(np.float32).reshape(n, -1)[:, :k].T
    per = 8 // bits
    codes = codes.astype(np.uint8).reshape(n, blocks, block // per, per)
    packed = np.zeros(codes.shape[:-1], np.uint8)
    for i in range(per):
        packed |= (codes[..., i] << (bits * i)).astype(np.uint8)
    return packed, scales, np.ascontiguousarray(dequantized)


def genai_llama(bits: Optional[int] = None, seed: int = 0, check: bool = True,
                dequantized: bool = False) -> onnx.ModelProto:
    """onnxruntime-genai's Llama (GQA 4/2 heads): float32 MatMuls, or MatMulNBits (``bits=4``, block 32).

    With ``dequantized``, the ``bits`` model's float reference: MatMuls of the dequantized weights."""
    w, norm, _ = _weights(seed)
    g = _Graph()
    eps = 1e-6
    one = g.op("Constant", [], "/model/constant_nodes", outputs=["/model/constants/INT64/[1]"],
               value=numpy_helper.from_array(np.array([1], np.int64)))
    s = "/model/attn_mask_reformat/attn_mask_subgraph"
    seqlens = g.op("Sub", [g.op("ReduceSum", ["attention_mask", one], s, keepdims=0), one], s)
    seqlens = g.op("Cast", [seqlens], f"{s}/Sub", to=TensorProto.INT32)
    axis1 = g.op("Constant", [], "/model/constant_nodes", outputs=["/model/constants/INT64/1"],
                 value=numpy_helper.from_array(np.array(1, np.int64)))
    total = g.op("Gather", [g.op("Shape", ["attention_mask"], s), axis1], s, axis=0)
    total = g.op("Cast", [total], f"{s}/Gather", to=TensorProto.INT32)

    # the weights drawn in the same order as hf_llama's, so both forms of one seed are the same model
    embed = g.init("model.embed_tokens.weight", w(VOCAB, HIDDEN, scale=np.sqrt(VOCAB)))
    angles = np.arange(MAX_POSITIONS, dtype=np.float32)[:, None] * inv_freq()[None, :]
    cos_cache, sin_cache = g.init("cos_cache", np.cos(angles)), g.init("sin_cache", np.sin(angles))

    def matmul(x, name, weight, scope, out=None):
        outputs = [out] if out else 1
        if bits is None:
            return g.op("MatMul", [x, g.init(f"{name}.MatMul.weight", weight)], scope, outputs=outputs)
        packed, scales, exact = quantize_symmetric(weight, bits, 32)
        if dequantized:
            return g.op("MatMul", [x, g.init(f"{name}.MatMul.weight", exact)], scope, outputs=outputs)
        return g.op("MatMulNBits", [x, g.init(f"{name}.MatMul.weight_Q{bits}", packed),
                                    g.init(f"{name}.MatMul.weight_scales", scales)],
                    scope, outputs=outputs, domain="com.microsoft", K=weight.shape[0], N=weight.shape[1], bits=bits,
                    block_size=32)

    hidden = g.op("Gather", [embed, "input_ids"], "/model/embed_tokens")
    h = g.op("SimplifiedLayerNormalization", [hidden, g.init("model.layers.0.input_layernorm.weight", norm(HIDDEN))],
             "/model/layers.0/input_layernorm", epsilon=eps, axis=-1, stash_type=1)
    residual, down = hidden, ""
    for i in range(LAYERS):
        p, s = f"model.layers.{i}", f"/model/layers.{i}"
        if i > 0:  # the last layer's MLP output joins the residual in this layer's input norm
            h, residual = g.op("SkipSimplifiedLayerNormalization",
                               [residual, down, g.init(f"{p}.input_layernorm.weight", norm(HIDDEN))],
                               f"{s}/input_layernorm", outputs=4, domain="com.microsoft", epsilon=eps)[::3]
        wq, wk, wv = w(HIDDEN, HEADS * HEAD_DIM), w(HIDDEN, KV_HEADS * HEAD_DIM), w(HIDDEN, KV_HEADS * HEAD_DIM)
        qkv = matmul(h, f"{p}.attn.qkv_proj", np.concatenate([wq, wk, wv], axis=1), f"{s}/attn/qkv_proj")
        attn = g.op("GroupQueryAttention",
                    [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total,
                     cos_cache, sin_cache, "", "", ""], f"{s}/attn",
                    outputs=[f"{s}/attn/GroupQueryAttention/output_0", f"present.{i}.key", f"present.{i}.value"],
                    domain="com.microsoft", num_heads=HEADS, kv_num_heads=KV_HEADS, scale=float(HEAD_DIM ** -0.5),
                    local_window_size=-1, softcap=0.0, do_rotary=1, rotary_interleaved=0)[0]
        attn = matmul(attn, f"{p}.attn.o_proj", w(HEADS * HEAD_DIM, HIDDEN), f"{s}/attn/o_proj")
        post = g.init(f"{p}.post_attention_layernorm.weight", norm(HIDDEN))
        h, residual = g.op("SkipSimplifiedLayerNormalization", [residual, attn, post], f"{s}/post_attention_layernorm",
                           outputs=4, domain="com.microsoft", epsilon=eps)[::3]
        m = f"{s}/mlp"
        w_gate, w_up, w_down = w(HIDDEN, FFN), w(HIDDEN, FFN), w(FFN, HIDDEN)
        gate = matmul(h, f"{p}.mlp.gate_proj", w_gate, f"{m}/gate_proj")
        up = matmul(h, f"{p}.mlp.up_proj", w_up, f"{m}/up_proj")
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{m}/act_fn")], f"{m}/act_fn")
        down = matmul(g.op("Mul", [act, up], m), f"{p}.mlp.down_proj", w_down, f"{m}/down_proj")
    final = g.init(f"model.layers.{LAYERS}.final_norm_layernorm.weight", norm(HIDDEN))
    h = g.op("SkipSimplifiedLayerNormalization", [residual, down, final],
             f"/model/layers.{LAYERS}/final_norm_layernorm", domain="com.microsoft", epsilon=eps)
    matmul(h, "lm_head", w(HIDDEN, VOCAB, scale=4.0), "/lm_head", out="logits")

    past = ["batch_size", KV_HEADS, "past_sequence_length", "kv_cache_dim"]
    present = ["batch_size", KV_HEADS, "total_sequence_length", "kv_cache_dim"]
    inputs = [tensor("input_ids", ["batch_size", "sequence_length"], TensorProto.INT64),
              tensor("attention_mask", ["batch_size", "total_sequence_length"], TensorProto.INT64)]
    inputs += _cache(past, "past_key_values", by_layer=False)
    outputs = [tensor("logits", ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=False)
    model = g.model("main_graph", inputs, outputs, OPSET_GENAI, "onnxruntime-genai", contrib=True)
    if check:
        check_margin(model)
    return model


# -- running them -------------------------------------------------------------------------------------------
def past_names(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """``(past input, present output)`` pairs of ``model``."""
    return [(vi.name, vi.name.replace("past_key_values", "present")) for vi in model.graph.input
            if vi.name.startswith("past_key_values.")]


def cache_shape(model: onnx.ModelProto) -> tuple[int, int]:
    """``(kv heads, head dim)`` of the cache inputs (the genai form names the head dim ``kv_cache_dim``)."""
    kv = next(vi for vi in model.graph.input if vi.name.startswith("past_key_values."))
    heads = kv.type.tensor_type.shape.dim[1].dim_value
    return heads, HEAD_DIM


def feeds_for(model: onnx.ModelProto, ids: np.ndarray, past: dict, past_length: int,
              mask: Optional[np.ndarray] = None) -> dict:
    """One call's inputs: ``ids`` [batch, seq], ``past`` by input name; the mask all ones unless given;
    position_ids (where the model takes them) counting from ``past_length``."""
    names = {vi.name for vi in model.graph.input}
    batch, length = ids.shape
    feeds = {"input_ids": ids.astype(np.int64),
             "attention_mask": np.ones((batch, past_length + length), np.int64) if mask is None else mask}
    if "position_ids" in names:
        feeds["position_ids"] = np.broadcast_to(np.arange(past_length, past_length + length, dtype=np.int64),
                                                (batch, length)).copy()
    feeds.update(past)
    return feeds


def greedy(model: onnx.ModelProto, run: Callable[[dict], dict], prompt=PROMPT, steps: int = STEPS):
    """Greedy generation through ``run(feeds) -> {output name: array}`` (benchmarks/generate_models.py's loop):
    a prefill of ``prompt`` with empty past arrays ``(1, kv_heads, 0, head_dim)``, then ``steps`` one-token steps
    feeding the presents back as the past. Returns the ``steps + 1`` tokens and each call's last-position logits."""
    heads, head_dim = cache_shape(model)
    pairs = past_names(model)
    past = {name: np.zeros((1, heads, 0, head_dim), np.float32) for name, _ in pairs}
    ids = np.asarray([prompt], np.int64)
    past_length, tokens, logits = 0, [], []
    for _ in range(steps + 1):
        outputs = run(feeds_for(model, ids, past, past_length))
        last = np.asarray(outputs["logits"])[0, -1].astype(np.float32)
        tokens.append(int(np.argmax(last)))
        logits.append(last)
        past = {name: np.asarray(outputs[present]) for name, present in pairs}
        past_length += ids.shape[1]
        ids = np.asarray([[tokens[-1]]], np.int64)
    return tokens, logits


def ort_runner(model) -> Callable[[dict], dict]:
    """``run(feeds) -> {output name: array}`` on a one-thread onnxruntime CPU session of ``model`` (proto or path)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds)))


def top2_gap(logits: np.ndarray) -> float:
    top = np.sort(np.asarray(logits, np.float32))[-2:]
    return float(top[1] - top[0])


def check_margin(model: onnx.ModelProto) -> None:
    """onnxruntime's greedy tokens vary and no step's top-2 logit gap is below MIN_GAP (another runtime within
    1e-3 of its logits then picks the same tokens)."""
    tokens, logits = greedy(model, ort_runner(model))
    gap = min(top2_gap(step) for step in logits)
    assert len(set(tokens)) > 2, f"{model.producer_name} form: greedy tokens barely vary: {tokens}"
    assert gap > MIN_GAP, f"{model.producer_name} form: the smallest top-2 logit gap of the generation is {gap:.2e}"

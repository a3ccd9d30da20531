"""Small random-weight decoder LLMs in the two forms real exporters write, built with onnx.helper (no torch,
transformers or optimum), for tests/test_decoders.py.

- ``hf_llama()`` and ``hf_gpt2()``: optimum's ``text-generation-with-past`` export (transformers' decoders through
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
from onnx import TensorProto, helper, numpy_helper

LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, FFN = 2, 64, 4, 2, 16, 128, 128
MAX_POSITIONS = 128
PROMPT = [3, 17, 101, 42, 77]
STEPS = 7  # decode steps after the prefill: 8 generated tokens
MIN_GAP = 1e-3
INT64_MAX = np.iinfo(np.int64).max
OPSET_HF, OPSET_GENAI = 18, 22

HF_PAST = "past_sequence_length"
HF_TOTAL = "past_sequence_length + sequence_length"


class _Graph:
    """Nodes named as torch.onnx names them (``/scope/Op_k``, outputs ``.._output_0``), constants as Constant nodes."""

    def __init__(self):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.counts: dict[str, int] = {}

    def _name(self, scope: str, op: str) -> str:
        key = f"{scope}/{op}"
        k = self.counts.get(key, 0)
        self.counts[key] = k + 1
        return key if k == 0 else f"{key}_{k}"

    def op(self, op: str, inputs: list, scope: str = "/model", outputs: int | list = 1, domain: str = "", **attrs):
        name = self._name(scope, op)
        outs = [f"{name}_output_{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def const(self, value, scope: str = "/model", dtype=None) -> str:
        array = np.asarray(value, dtype=dtype if dtype is not None else
                           (np.int64 if np.asarray(value).dtype.kind in "iu" else np.float32))
        return self.op("Constant", [], scope, value=numpy_helper.from_array(array))

    def init(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    # the shape arithmetic torch.onnx writes
    def dim(self, x: str, axis: int, scope: str = "/model") -> str:
        return self.op("Gather", [self.op("Shape", [x], scope), self.const(axis, scope)], scope, axis=0)

    def unsqueeze(self, x: str, axis: int, scope: str = "/model") -> str:
        return self.op("Unsqueeze", [x, self.const([axis], scope)], scope)

    def expand_shape(self, parts: list, scope: str) -> str:
        """Concat of the parts, Reshape [-1], and the ConstantOfShape/Equal/Where that turns each -1 into 1."""
        shape = self.op("Reshape", [self.op("Concat", parts, scope, axis=0), self.const([-1], scope)], scope)
        ones = self.op("ConstantOfShape", [self.op("Shape", [shape], scope)], scope,
                       value=numpy_helper.from_array(np.array([1], np.int64)))
        minus = self.op("Mul", [ones, self.const(-1, scope)], scope)
        return self.op("Where", [self.op("Equal", [shape, minus], scope), ones, shape], scope)


def _tensor(name: str, elem: int, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _cache(dims: list, prefix: str, by_layer: bool) -> list:
    """The cache inputs or outputs: optimum orders them by layer (key, value of layer 0, ...), genai keys first."""
    order = [(i, kv) for i in range(LAYERS) for kv in ("key", "value")] if by_layer else \
        [(i, kv) for kv in ("key", "value") for i in range(LAYERS)]
    return [_tensor(f"{prefix}.{i}.{kv}", TensorProto.FLOAT, dims) for i, kv in order]


def _model(g: _Graph, name: str, inputs: list, outputs: list, opset: int, producer: str, contrib: bool = False):
    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if contrib else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name=producer)
    model.ir_version = 8 if not contrib else 10
    if not contrib:  # the checker knows no SimplifiedLayerNormalization (onnxruntime's, in the default domain)
        onnx.checker.check_model(model)
    return model


def _weights(seed: int):
    rng = np.random.default_rng(seed)

    def w(*shape, scale=1.0):
        fan_in = shape[0] if len(shape) > 1 else 1
        return (rng.standard_normal(shape) * scale / np.sqrt(fan_in)).astype(np.float32)

    def norm(n):  # random, not the 1 an exporter could drop unseen
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    return w, norm, bias


def inv_freq(head_dim: int = HEAD_DIM, theta: float = 10000.0) -> np.ndarray:
    return (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)).astype(np.float32)


# -- optimum's export ---------------------------------------------------------------------------------------
def _hf_mask(g: _Graph, embeds: str, past_key: str, mask_2d: str, s: str = "/model") -> tuple[str, str]:
    """transformers' sdpa mask as traced: ``(cache_position, Expand output [batch, 1, seq, total] bool)``."""
    past = g.dim(past_key, 2, s)
    end = g.op("Add", [past, g.dim(embeds, 1, s)], s)
    cache_position = g.op("Range", [g.op("Cast", [past], s, to=TensorProto.INT64),
                                    g.op("Cast", [end], s, to=TensorProto.INT64), g.const(1, s)], s)
    mask_bool = g.op("Cast", [mask_2d], s, to=TensorProto.BOOL)
    seq = g.dim(cache_position, 0, s)
    total = g.op("Add", [past, seq], s)
    batch = g.dim(embeds, 0, s)
    q_idx = g.unsqueeze(g.unsqueeze(g.unsqueeze(cache_position, 0, s), 1, s), 3, s)  # [1, 1, S, 1]
    batch_range = g.op("Range", [g.const(0, s), g.op("Cast", [batch], s, to=TensorProto.INT64), g.const(1, s)], s)
    b_idx = g.unsqueeze(g.unsqueeze(g.unsqueeze(batch_range, 1, s), 2, s), 3, s)  # [B, 1, 1, 1]
    kv_range = g.op("Range", [g.const(0, s), g.op("Cast", [total], s, to=TensorProto.INT64), g.const(1, s)], s)
    kv_idx = g.unsqueeze(g.unsqueeze(g.unsqueeze(kv_range, 0, s), 1, s), 2, s)  # [1, 1, 1, T]
    true = g.op("ConstantOfShape", [g.const(np.zeros((0,), np.int64), s)], s,
                value=numpy_helper.from_array(np.array([True])))
    causal = g.op("And", [true, g.op("Cast", [g.op("LessOrEqual", [kv_idx, q_idx], s)], s, to=TensorProto.BOOL)], s)
    width = g.dim(mask_bool, 1, s)
    flat = g.op("Flatten", [mask_bool], s, axis=2)  # [B * T, 1]
    index = g.op("Add", [kv_idx, g.op("Mul", [b_idx, width], s)], s)  # [B, 1, 1, T]
    picked = g.op("Reshape", [g.op("Gather", [flat, index], s, axis=0), g.const([-1], s)], s)
    padding = g.op("Reshape", [picked, g.op("Concat", [g.op("Shape", [index], s)], s, axis=0)], s)
    both = g.op("And", [causal, g.op("Cast", [padding], s, to=TensorProto.BOOL)], s)
    shape = g.expand_shape([g.unsqueeze(batch, 0, s), g.const([-1], s), g.unsqueeze(seq, 0, s),
                            g.unsqueeze(total, 0, s)], s)
    return cache_position, g.op("Expand", [both, shape], s)


def _hf_scores(g: _Graph, s: str, q: str, key_t: str, value: str, mask: str, key_len: str, scale: str) -> str:
    """Scaled scores with the sliced mask as a 0/-inf Where, Softmax, the IsNaN guard, times the values."""
    sliced = g.op("Slice", [mask, g.const([0], s), g.unsqueeze(key_len, 0, s), g.const([3], s), g.const([1], s)], s)
    scores = g.op("MatMul", [g.op("Mul", [q, scale], s), g.op("Mul", [key_t, scale], s)], s)
    bias = g.op("Where", [sliced, g.const([0.0], s), g.const([-np.inf], s)], s)
    probs = g.op("Softmax", [g.op("Add", [scores, bias], s)], s, axis=-1)
    probs = g.op("Where", [g.op("IsNaN", [probs], s), g.const([0.0], s), probs], s)
    return g.op("Transpose", [g.op("MatMul", [probs, value], s)], s, perm=[0, 2, 1, 3])


def _rms_norm(g: _Graph, x: str, weight: str, s: str, eps: float = 1e-6) -> tuple[str, str]:
    """``(the normalized x, the x cast to float)``: LlamaRMSNorm as traced (the residual reads the Cast)."""
    x = g.op("Cast", [x], s, to=TensorProto.FLOAT)
    mean = g.op("ReduceMean", [g.op("Pow", [x, g.const(2.0, s)], s), g.const([-1], s)], s, keepdims=1)
    inv = g.op("Div", [g.const(1.0, s), g.op("Sqrt", [g.op("Add", [mean, g.const(eps, s)], s)], s)], s)
    y = g.op("Cast", [g.op("Mul", [x, inv], s)], s, to=TensorProto.FLOAT)
    return g.op("Mul", [weight, y], s), x


def _rotate(g: _Graph, x: str, cos: str, sin: str, s: str) -> str:
    """x * cos + rotate_half(x) * sin, rotate_half as Slice/Neg/Concat at half of Shape(x)[3]."""
    x_cos = g.op("Mul", [x, cos], s)
    half = g.op("Div", [g.dim(x, 3, s), g.const(2, s)], s)
    half = g.unsqueeze(g.op("Cast", [g.op("Cast", [half], s, to=TensorProto.INT64)], s, to=TensorProto.INT64), 0, s)
    x1 = g.op("Slice", [x, g.const([0], s), half, g.const([3], s), g.const([1], s)], s)
    x2 = g.op("Slice", [x, half, g.const([INT64_MAX], s), g.const([3], s), g.const([1], s)], s)
    rotated = g.op("Concat", [g.op("Neg", [x2], s), x1], s, axis=-1)
    return g.op("Add", [x_cos, g.op("Mul", [rotated, sin], s)], s)


def _repeat_kv(g: _Graph, x: str, n_rep: int, s: str) -> str:
    """[B, kv, T, D] -> [B, kv * n_rep, T, D] as Unsqueeze, Expand to [B, kv, n_rep, T, D], Reshape."""
    b, h, t, d = (g.dim(x, i, s) for i in range(4))
    shape = g.expand_shape([g.unsqueeze(b, 0, s), g.unsqueeze(h, 0, s), g.const([n_rep], s), g.unsqueeze(t, 0, s),
                            g.unsqueeze(d, 0, s)], s)
    expanded = g.op("Expand", [g.unsqueeze(x, 2, s), shape], s)
    heads = g.op("Mul", [h, g.const(n_rep, s)], s)
    target = g.op("Concat", [g.unsqueeze(b, 0, s), g.unsqueeze(heads, 0, s), g.unsqueeze(t, 0, s),
                             g.unsqueeze(d, 0, s)], s, axis=0)
    return g.op("Reshape", [expanded, target], s)


def hf_llama(seed: int = 0, check: bool = True) -> onnx.ModelProto:
    """optimum's export of a LlamaForCausalLM with past: GQA (4 heads, 2 kv heads), rotary, RMSNorm, SwiGLU."""
    w, norm, _ = _weights(seed)
    g = _Graph()
    n_rep = HEADS // KV_HEADS
    embed = g.init("model.embed_tokens.weight", w(VOCAB, HIDDEN, scale=np.sqrt(VOCAB)))
    embeds = g.op("Gather", [embed, "input_ids"], "/model/embed_tokens")
    _, mask = _hf_mask(g, embeds, "past_key_values.0.key", "attention_mask")

    r = "/model/rotary_emb"
    shape = g.expand_shape([g.unsqueeze(g.dim("position_ids", 0, r), 0, r), g.const([-1], r), g.const([1], r)], r)
    freqs = g.op("Cast", [g.op("Expand", [g.const(inv_freq()[None, :, None], r), shape], r)], r, to=TensorProto.FLOAT)
    positions = g.op("Cast", [g.unsqueeze("position_ids", 1, r)], r, to=TensorProto.FLOAT)
    freqs = g.op("Cast", [freqs], r, to=TensorProto.FLOAT)
    positions = g.op("Cast", [positions], r, to=TensorProto.FLOAT)
    angles = g.op("Transpose", [g.op("MatMul", [freqs, positions], r)], r, perm=[0, 2, 1])
    angles = g.op("Concat", [angles, angles], r, axis=-1)
    cos = g.op("Cast", [g.op("Mul", [g.op("Cos", [angles], r), g.const(1.0, r)], r)], r, to=TensorProto.FLOAT)
    sin = g.op("Cast", [g.op("Mul", [g.op("Sin", [angles], r), g.const(1.0, r)], r)], r, to=TensorProto.FLOAT)

    hidden = embeds
    scale = g.const(float(HEAD_DIM ** -0.25), "/model")
    for i in range(LAYERS):
        p, s = f"model.layers.{i}", f"/model/layers.{i}"
        h, residual = _rms_norm(g, hidden, g.init(f"{p}.input_layernorm.weight", norm(HIDDEN)), f"{s}/input_layernorm")
        a = f"{s}/self_attn"
        batch, seq = g.dim(h, 0, a), g.dim(h, 1, a)

        def heads(x, a=a, batch=batch, seq=seq):
            shape = g.op("Concat", [g.unsqueeze(batch, 0, a), g.unsqueeze(seq, 0, a), g.const([-1], a),
                                    g.const([HEAD_DIM], a)], a, axis=0)
            return g.op("Transpose", [g.op("Reshape", [x, shape], a)], a, perm=[0, 2, 1, 3])

        q = g.op("MatMul", [h, g.init(f"{p}.q_proj", w(HIDDEN, HEADS * HEAD_DIM))], f"{a}/q_proj")
        k = g.op("MatMul", [h, g.init(f"{p}.k_proj", w(HIDDEN, KV_HEADS * HEAD_DIM))], f"{a}/k_proj")
        v = g.op("MatMul", [h, g.init(f"{p}.v_proj", w(HIDDEN, KV_HEADS * HEAD_DIM))], f"{a}/v_proj")
        q, k, v = heads(q), heads(k), heads(v)
        cos_u, sin_u = g.unsqueeze(cos, 1, a), g.unsqueeze(sin, 1, a)
        q, k = _rotate(g, q, cos_u, sin_u, a), _rotate(g, k, cos_u, sin_u, a)
        g.op("Concat", [f"past_key_values.{i}.key", k], a, outputs=[f"present.{i}.key"], axis=-2)
        g.op("Concat", [f"past_key_values.{i}.value", v], a, outputs=[f"present.{i}.value"], axis=-2)
        key = _repeat_kv(g, f"present.{i}.key", n_rep, a)
        value = _repeat_kv(g, f"present.{i}.value", n_rep, a)
        key_t = g.op("Transpose", [key], a, perm=[0, 1, 3, 2])
        attn = _hf_scores(g, a, q, key_t, value, mask, g.dim(key, 2, a), scale)
        attn = g.op("Reshape", [attn, g.op("Concat", [g.unsqueeze(batch, 0, a), g.unsqueeze(seq, 0, a),
                                                      g.const([-1], a)], a, axis=0)], a)
        attn = g.op("MatMul", [attn, g.init(f"{p}.o_proj", w(HEADS * HEAD_DIM, HIDDEN))], f"{a}/o_proj")
        hidden = g.op("Add", [residual, attn], s)
        h, residual = _rms_norm(g, hidden, g.init(f"{p}.post_attention_layernorm.weight", norm(HIDDEN)),
                                f"{s}/post_attention_layernorm")
        m = f"{s}/mlp"
        gate = g.op("MatMul", [h, g.init(f"{p}.gate_proj", w(HIDDEN, FFN))], f"{m}/gate_proj")
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{m}/act_fn")], f"{m}/act_fn")
        up = g.op("MatMul", [h, g.init(f"{p}.up_proj", w(HIDDEN, FFN))], f"{m}/up_proj")
        down = g.op("MatMul", [g.op("Mul", [act, up], m), g.init(f"{p}.down_proj", w(FFN, HIDDEN))], f"{m}/down_proj")
        hidden = g.op("Add", [residual, down], s)
    h, _ = _rms_norm(g, hidden, g.init("model.norm.weight", norm(HIDDEN)), "/model/norm")
    g.op("MatMul", [h, g.init("lm_head", w(HIDDEN, VOCAB, scale=4.0))], "/lm_head", outputs=["logits"])

    past = ["batch_size", KV_HEADS, HF_PAST, HEAD_DIM]
    present = ["batch_size", KV_HEADS, HF_TOTAL, HEAD_DIM]
    inputs = [_tensor("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              _tensor("attention_mask", TensorProto.INT64, ["batch_size", HF_TOTAL]),
              _tensor("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    inputs += _cache(past, "past_key_values", by_layer=True)
    outputs = [_tensor("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=True)
    model = _model(g, "main_graph", inputs, outputs, OPSET_HF, "pytorch")
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
    inputs = [_tensor("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    inputs += _cache(past, "past_key_values", by_layer=True)
    inputs += [_tensor("attention_mask", TensorProto.INT64, ["batch_size", HF_TOTAL]),
               _tensor("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = [_tensor("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=True)
    model = _model(g, "main_graph", inputs, outputs, OPSET_HF, "pytorch")
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
    inputs = [_tensor("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              _tensor("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    inputs += _cache(past, "past_key_values", by_layer=False)
    outputs = [_tensor("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=False)
    model = _model(g, "main_graph", inputs, outputs, OPSET_GENAI, "onnxruntime-genai", contrib=True)
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

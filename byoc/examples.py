"""Example models, built with onnx.helper so nothing is downloaded.

``python -m byoc.examples OUT.onnx [--model small_cnn|small_mlp|small_decoder]`` writes one;
the README's first command partitions and verifies it. ``small_decoder`` is a tiny random-weight Llama with
a KV cache, in the form Hugging Face's exporter (optimum, ``text-generation-with-past``) writes: tutorial 3
generates text with it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.errors import ByocError

IR_VERSION = 8  # readable by onnxruntime (IR <= 13) and every recent tool
OPSET = 17


def tensor(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, list(shape))


def const(name: str, array: np.ndarray):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, initializers=(), opset: int = OPSET, name: str = "g", producer: str = "",
          contrib: bool = False) -> onnx.ModelProto:
    """A checked model; with ``contrib``, one that also imports onnxruntime's com.microsoft ops (IR 10), which
    the checker does not know, so it is not checked."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if contrib else [])
    extra = {"producer_name": producer} if producer else {}
    m = helper.make_model(graph, opset_imports=opsets, ir_version=10 if contrib else IR_VERSION, **extra)
    if not contrib:
        onnx.checker.check_model(m)
    return m


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def small_cnn(seed: int = 1) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> MaxPool -> Conv(+bias, relu) -> GlobalAveragePool -> Flatten -> Gemm."""
    r = _rng(seed)

    def f(*s: int) -> np.ndarray:
        return r.standard_normal(s).astype(np.float32) * 0.5

    inits = [
        const("w1", f(8, 3, 3, 3)), const("b1", f(8)),
        const("bn_scale", 1 + 0.1 * f(8)), const("bn_bias", f(8)), const("bn_mean", f(8)),
        const("bn_var", np.abs(f(8)) + 0.5),
        const("w2", f(16, 8, 3, 3)), const("b2", f(16)),
        const("fc_w", f(10, 16)), const("fc_b", f(10)),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"], name="bn1"),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    return model(nodes, [tensor("input", [1, 3, 16, 16])], [tensor("logits", [1, 10])], inits, name="small_cnn")


def small_mlp(seed: int = 2) -> onnx.ModelProto:
    """MatMul+Add -> Relu -> Gemm -> Sigmoid -> Gemm -> Softmax, two inputs added first."""
    r = _rng(seed)

    def f(*s: int) -> np.ndarray:
        return r.standard_normal(s).astype(np.float32) * 0.3

    inits = [const("w1", f(32, 64)), const("b1", f(64)), const("w2", f(64, 32)), const("b2", f(32)),
             const("w3", f(32, 5)), const("b3", f(5))]
    nodes = [
        helper.make_node("Add", ["x", "bias_in"], ["xa"], name="add_in"),
        helper.make_node("MatMul", ["xa", "w1"], ["h1"], name="mm1"),
        helper.make_node("Add", ["h1", "b1"], ["h1b"], name="mm1_bias"),
        helper.make_node("Relu", ["h1b"], ["a1"], name="act1"),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], name="fc2"),
        helper.make_node("Sigmoid", ["h2"], ["a2"], name="act2"),
        helper.make_node("Gemm", ["a2", "w3", "b3"], ["h3"], name="fc3"),
        helper.make_node("Softmax", ["h3"], ["probs"], name="softmax", axis=-1),
    ]
    return model(nodes, [tensor("x", [4, 32]), tensor("bias_in", [32])], [tensor("probs", [4, 5])], inits,
                 name="small_mlp")


# -- small_decoder: a Llama in optimum's export form --------------------------------------------------------
# The dims of the small decoders (tests/decoder_models.py builds its other forms from the same pieces).
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, FFN = 2, 64, 4, 2, 16, 128, 128
INT64_MAX = np.iinfo(np.int64).max
OPSET_HF = 18
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
        """Append an ``op`` node in ``scope``; its output name, or names when ``outputs`` > 1 or a list."""
        name = self._name(scope, op)
        outs = [f"{name}_output_{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain or None, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def const(self, value, scope: str = "/model", dtype=None) -> str:
        """A Constant node of ``value`` (int64 for integers, else float32, unless ``dtype``)."""
        array = np.asarray(value, dtype=dtype if dtype is not None else
                           (np.int64 if np.asarray(value).dtype.kind in "iu" else np.float32))
        return self.op("Constant", [], scope, value=numpy_helper.from_array(array))

    def init(self, name: str, array: np.ndarray) -> str:
        """An initializer ``name``; returns the name."""
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    # the shape arithmetic torch.onnx writes
    def dim(self, x: str, axis: int, scope: str = "/model") -> str:
        """``Shape(x)[axis]`` as a scalar."""
        return self.op("Gather", [self.op("Shape", [x], scope), self.const(axis, scope)], scope, axis=0)

    def unsqueeze(self, x: str, axis: int, scope: str = "/model") -> str:
        """``x`` with a new axis at ``axis``."""
        return self.op("Unsqueeze", [x, self.const([axis], scope)], scope)

    def expand_shape(self, parts: list, scope: str) -> str:
        """Concat of the parts, Reshape [-1], and the ConstantOfShape/Equal/Where that turns each -1 into 1."""
        shape = self.op("Reshape", [self.op("Concat", parts, scope, axis=0), self.const([-1], scope)], scope)
        ones = self.op("ConstantOfShape", [self.op("Shape", [shape], scope)], scope,
                       value=numpy_helper.from_array(np.array([1], np.int64)))
        minus = self.op("Mul", [ones, self.const(-1, scope)], scope)
        return self.op("Where", [self.op("Equal", [shape, minus], scope), ones, shape], scope)

    def model(self, name: str, inputs: list, outputs: list, opset: int, producer: str,
              contrib: bool = False) -> onnx.ModelProto:
        """The graph as a model (see :func:`model`)."""
        return model(self.nodes, inputs, outputs, self.initializers, opset, name, producer, contrib)


def _cache(dims: list, prefix: str, by_layer: bool) -> list:
    """The cache inputs or outputs: optimum orders them by layer (key, value of layer 0, ...), genai keys first."""
    order = [(i, kv) for i in range(LAYERS) for kv in ("key", "value")] if by_layer else \
        [(i, kv) for kv in ("key", "value") for i in range(LAYERS)]
    return [tensor(f"{prefix}.{i}.{kv}", dims) for i, kv in order]



def _weights(seed: int):
    """``(w, norm, bias)``: makers of seeded random weights (scaled by fan-in), norm weights near 1, biases."""
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
    """The rotary embedding's inverse frequencies."""
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


def hf_llama(seed: int = 0) -> onnx.ModelProto:
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
    inputs = [tensor("input_ids", ["batch_size", "sequence_length"], TensorProto.INT64),
              tensor("attention_mask", ["batch_size", HF_TOTAL], TensorProto.INT64),
              tensor("position_ids", ["batch_size", "sequence_length"], TensorProto.INT64)]
    inputs += _cache(past, "past_key_values", by_layer=True)
    outputs = [tensor("logits", ["batch_size", "sequence_length", VOCAB])]
    outputs += _cache(present, "present", by_layer=True)
    return g.model("main_graph", inputs, outputs, OPSET_HF, "pytorch")


EXAMPLES = {"small_cnn": small_cnn, "small_mlp": small_mlp, "small_decoder": hf_llama}


def write_example(name: str, path: Union[str, os.PathLike]) -> bool:
    """Write the example model ``name`` to ``path``; False if ``path`` already holds exactly that model.

    Any other file at ``path`` is kept and is a :class:`~byoc.errors.ByocError`:
    running a set-up twice is fine, replacing a file of the user's is not.
    """
    out = Path(path)
    data = EXAMPLES[name]().SerializeToString()
    if out.exists():
        if out.is_file() and out.read_bytes() == data:
            return False
        raise ByocError(f"{out} already exists and is not the {name} example; choose another path")
    out.write_bytes(data)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m byoc.examples", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="where to write the .onnx file (another file there is never overwritten)")
    parser.add_argument("--model", choices=sorted(EXAMPLES), default="small_cnn")
    args = parser.parse_args(argv)
    try:
        written = write_example(args.model, args.out)
    except ByocError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.model} to {args.out}" if written else f"{args.out} already holds {args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

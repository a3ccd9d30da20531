"""Symbolic shape arithmetic builds (issue 49, item 3): the relative-position, rotary and mask forms exporters write
over a symbolic sequence length, each compiled once with no input shapes and run at three lengths against
onnxruntime, on the host alone and with every vendor.

The models are written with onnx.helper in the spelling torch.onnx's exporters use (``Shape -> Gather`` for a
dim, ``Range`` over it, int64 arithmetic on the positions, Constant nodes for the constants).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import byoc
from byoc.errors import InputShapeError
from byoc.examples import _Graph, tensor

D, H, HD = 16, 2, 8  # width of x, heads, rotary head size
NEG = float(np.finfo(np.float32).min)
INT64_MAX = np.iinfo(np.int64).max
#: (seq, past) of the three calls each artifact makes; past is 0 once (an empty cache)
LENGTHS = [(5, 3), (16, 0), (33, 9)]


def _scores(g: _Graph, q: str, k: str) -> str:
    """``q [b, s, D] x k [b, t, D]^T`` as ``[b, 1, s, t]``."""
    return g.unsqueeze(g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 2, 1])]), 1)


def _int64(g: _Graph, dim: str) -> str:
    return g.op("Cast", [dim], to=TensorProto.INT64)


# -- relative-position buckets (T5) -----------------------------------------------------------------------------

def t5_buckets(bidirectional: bool, past: bool) -> onnx.ModelProto:
    """T5's ``_relative_position_bucket`` as the legacy exporter writes it: positions from ``Range`` over the
    length (from ``past`` to ``past + seq`` for the queries of a decoder with a cache), their difference, the
    exact buckets below ``max_exact`` (``Abs``/``Less``/``Where``; ``Neg(Min(rel, 0))`` one-sided), the log buckets
    above (``Cast`` to float, ``Div``, ``Log``, ``Mul``, ``Cast`` to int64, ``Min`` with a ``ConstantOfShape`` of
    their shape), a ``Gather`` into the bias table and the bias added to attention scores."""
    g = _Graph()
    table = g.init("relative_attention_bias", np.random.default_rng(0).standard_normal((32, H)).astype(np.float32))
    seq = g.dim("x", 1)
    if past:
        start, keys = g.dim("past", 1), g.op("Concat", ["past", "x"], axis=1)
        total = g.op("Add", [start, seq])
        query_pos = g.op("Range", [start, total, g.const(1)])
        key_pos = g.op("Range", [g.const(0), total, g.const(1)])
    else:
        keys = "x"
        query_pos = g.op("Range", [g.const(0), _int64(g, seq), g.const(1)])
        key_pos = g.op("Range", [g.const(0), _int64(g, g.dim("x", 1)), g.const(1)])
    rel = g.op("Sub", [g.unsqueeze(key_pos, 0), g.unsqueeze(query_pos, 1)])
    buckets = 32
    if bidirectional:
        buckets //= 2
        side = g.op("Mul", [_int64(g, g.op("Greater", [rel, g.const(0)])), g.const(buckets)])
        n = g.op("Abs", [rel])
    else:
        zeros = g.op("ConstantOfShape", [g.op("Shape", [rel])], value=numpy_helper.from_array(np.array([0], np.int64)))
        n = g.op("Neg", [g.op("Min", [rel, zeros])])
    exact = buckets // 2
    small = g.op("Less", [n, g.const(exact)])
    ratio = g.op("Div", [g.op("Cast", [n], to=TensorProto.FLOAT), g.const(float(exact))])
    scaled = g.op("Mul", [g.op("Div", [g.op("Log", [ratio]), g.const(math.log(128 / exact))]),
                          g.const(float(buckets - exact))])
    large = g.op("Add", [_int64(g, scaled), g.const(exact)])
    last = g.op("ConstantOfShape", [g.op("Shape", [large])],
                value=numpy_helper.from_array(np.array([buckets - 1], np.int64)))
    bucket = g.op("Where", [small, n, g.op("Min", [large, last])])
    if bidirectional:
        bucket = g.op("Add", [side, bucket])
    bias = g.op("Transpose", [g.op("Gather", [table, bucket])], perm=[2, 0, 1])  # [H, s, t]
    scores = g.op("Add", [_scores(g, "x", keys), g.unsqueeze(bias, 0)])
    g.op("Softmax", [scores], axis=-1, outputs=["y"])
    inputs = [tensor("x", ["batch", "seq", D])] + ([tensor("past", ["batch", "past_len", D])] if past else [])
    return g.model("t5_buckets", inputs, [tensor("y", ["batch", H, "seq", "total"])], 17, "pytorch")


# -- rotary embeddings ------------------------------------------------------------------------------------------

def _rotate_half(g: _Graph, x: str) -> str:
    first = g.op("Slice", [x, g.const([0]), g.const([HD // 2]), g.const([-1])])
    second = g.op("Slice", [x, g.const([HD // 2]), g.const([INT64_MAX]), g.const([-1])])
    return g.op("Concat", [g.op("Neg", [second]), first], axis=-1)


def rotary(form: str) -> onnx.ModelProto:
    """``q [b, s, H*HD]`` as heads ``[b, H, s, HD]``, rotated: ``q * cos + rotate_half(q) * sin``. The tables:
    ``inv_freq`` (Llama: ``MatMul`` of the inverse frequencies and the positions ``Range(past, past + seq)``,
    then ``Cos``/``Sin``), ``cache_slice`` (GPT-NeoX: cos/sin caches sliced to the length), ``cache_gather``
    (caches gathered at ``position_ids``), ``cache_past`` (caches sliced to ``past + seq``, then gathered)."""
    g = _Graph()
    inv = 1.0 / (10000 ** (np.arange(0, HD, 2, dtype=np.float32) / HD))
    angles = np.concatenate([np.outer(np.arange(64, dtype=np.float32), inv)] * 2, axis=-1)
    batch, seq = g.dim("q", 0), g.dim("q", 1)
    heads = g.op("Concat", [g.unsqueeze(batch, 0), g.unsqueeze(seq, 0), g.const([H]), g.const([HD])], axis=0)
    q = g.op("Transpose", [g.op("Reshape", ["q", heads])], perm=[0, 2, 1, 3])
    inputs = [tensor("q", ["batch", "seq", H * HD])]
    if form == "inv_freq":
        start = g.dim("past", 2)
        positions = g.unsqueeze(g.unsqueeze(g.op("Range", [start, g.op("Add", [start, seq]), g.const(1)]), 0), 1)
        freqs = g.op("MatMul", [g.init("inv_freq", inv.reshape(1, HD // 2, 1)),
                                g.op("Cast", [positions], to=TensorProto.FLOAT)])          # [1, HD/2, s]
        freqs = g.op("Transpose", [freqs], perm=[0, 2, 1])
        emb = g.op("Concat", [freqs, freqs], axis=-1)
        cos, sin = g.unsqueeze(g.op("Cos", [emb]), 1), g.unsqueeze(g.op("Sin", [emb]), 1)
        inputs.append(tensor("past", ["batch", H, "past_len", HD]))
    else:
        cos_table = g.init("cos_cached", np.cos(angles).astype(np.float32))
        sin_table = g.init("sin_cached", np.sin(angles).astype(np.float32))
        if form == "cache_slice":
            end = g.unsqueeze(seq, 0)
            cos = g.op("Slice", [cos_table, g.const([0]), end, g.const([0])])
            sin = g.op("Slice", [sin_table, g.const([0]), end, g.const([0])])
        else:
            inputs.append(tensor("position_ids", ["batch", "seq"], TensorProto.INT64))
            if form == "cache_past":
                end = g.unsqueeze(g.op("Add", [g.dim("past", 2), seq]), 0)
                cos_table = g.op("Slice", [cos_table, g.const([0]), end, g.const([0])])
                sin_table = g.op("Slice", [sin_table, g.const([0]), end, g.const([0])])
                inputs.append(tensor("past", ["batch", H, "past_len", HD]))
            cos = g.unsqueeze(g.op("Gather", [cos_table, "position_ids"]), 1)
            sin = g.unsqueeze(g.op("Gather", [sin_table, "position_ids"]), 1)
    g.op("Add", [g.op("Mul", [q, cos]), g.op("Mul", [_rotate_half(g, q), sin])], outputs=["y"])
    return g.model(f"rotary_{form}", inputs, [tensor("y", ["batch", H, "seq", HD])], 17, "pytorch")


# -- masks ------------------------------------------------------------------------------------------------------

def mask(form: str, mask_dim: str = "seq") -> onnx.ModelProto:
    """Attention scores over ``x [b, s, D]`` masked by ``attention_mask [b, mask_dim]`` (int64), as exporters
    write it: ``extended`` (BERT: ``(1 - mask) * min``), ``trilu`` (a causal ``Trilu`` of ones, ``Cast`` to bool,
    ``And`` with the padding, ``Where``), ``range_less`` (causal ``Range[None, :] <= Range[:, None]``, ``Where``
    to an additive mask, ``Where(IsNaN)``), ``bool_buffer`` (GPT-2: a ``[1, 1, 64, 64]`` bool buffer sliced to
    ``(t - s, t)``), ``expand`` (the legacy exporter's ``Expand`` of the mask to ``(b, -1, s, t)``, the -1 made 1
    by ``Where(Equal(shape, -1), 1, shape)``). A ``mask_dim`` other than ``seq`` is a dim of its own, as a
    ``dynamic_axes`` list makes it: equal to ``seq`` in every call, which only the run can tell."""
    g = _Graph()
    seq = g.dim("x", 1)
    scores = _scores(g, "x", "x")                                                   # [b, 1, s, s]
    pad = g.unsqueeze(g.unsqueeze("attention_mask", 1), 2)                          # [b, 1, 1, m]
    additive = g.op("Mul", [g.op("Sub", [g.const(1.0), g.op("Cast", [pad], to=TensorProto.FLOAT)]), g.const(NEG)])
    if form == "extended":
        masked = g.op("Add", [scores, additive])
    elif form == "trilu":
        square = g.op("Concat", [g.unsqueeze(seq, 0), g.unsqueeze(seq, 0)], axis=0)
        ones = g.op("ConstantOfShape", [square], value=numpy_helper.from_array(np.array([1.0], np.float32)))
        causal = g.op("Cast", [g.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
        keep = g.op("And", [causal, g.op("Cast", [pad], to=TensorProto.BOOL)])
        masked = g.op("Where", [keep, scores, g.const(NEG)])
    elif form == "range_less":
        positions = g.op("Range", [g.const(0), seq, g.const(1)])
        causal = g.op("LessOrEqual", [g.unsqueeze(positions, 0), g.unsqueeze(positions, 1)])
        keep = g.op("And", [causal, g.op("Cast", [pad], to=TensorProto.BOOL)])
        masked = g.op("Add", [scores, g.op("Where", [keep, g.const(0.0), g.const(NEG)])])
        masked = g.op("Where", [g.op("IsNaN", [masked]), g.const(0.0), masked])
    elif form == "bool_buffer":
        buffer = g.init("causal_buffer", np.tril(np.ones((1, 1, 64, 64), bool)))
        rows = g.op("Slice", [buffer, g.unsqueeze(g.op("Sub", [seq, seq]), 0), g.unsqueeze(seq, 0), g.const([2])])
        causal = g.op("Slice", [rows, g.const([0]), g.unsqueeze(seq, 0), g.const([3])])
        masked = g.op("Add", [g.op("Where", [causal, scores, g.const(NEG)]), additive])
    else:  # expand
        target = g.expand_shape([g.unsqueeze(g.dim("x", 0), 0), g.const([-1]), g.unsqueeze(seq, 0),
                                 g.unsqueeze(g.dim("attention_mask", 1), 0)], "/model")
        keep = g.op("Expand", [g.op("Cast", [pad], to=TensorProto.BOOL), target])
        masked = g.op("Where", [keep, scores, g.const(NEG)])
    g.op("Softmax", [masked], axis=-1, outputs=["y"])
    inputs = [tensor("x", ["batch", "seq", D]), tensor("attention_mask", ["batch", mask_dim], TensorProto.INT64)]
    return g.model(f"mask_{form}", inputs, [tensor("y", ["batch", 1, "seq", "seq"])], 17, "pytorch")


def disentangled(layers: int = 2) -> onnx.ModelProto:
    """DeBERTa-v2's disentangled attention as the legacy exporter writes it, ``layers`` times: queries scaled by
    ``Sqrt(Cast(head size, float) * 3)`` (a dim cast to float), position keys ``Tile``d to the queries' batch by a
    count computed from their shape (a dim defined by a cast the host's Tile reads only through its dims, in every
    layer under one name), multiplied by the queries (batch dims ``b * h`` and the Tile's, which no analysis
    relates), and the content-to-position scores gathered by relative position (``GatherElements``)."""
    g = _Graph()
    rng = np.random.default_rng(1)
    positions = g.init("rel_embeddings", rng.standard_normal((1, 8, D)).astype(np.float32))
    x = "x"
    for layer in range(layers):
        scope = f"/layer.{layer}"
        head = g.dim(x, 2, scope)
        scale = g.op("Sqrt", [g.op("Mul", [g.op("Cast", [head], scope, to=TensorProto.FLOAT), g.const(3.0, scope)],
                                   scope)], scope)
        q = g.op("Div", [x, scale], scope)                                               # [b, s, D]
        repeats = g.op("Concat", [g.unsqueeze(g.op("Div", [g.dim(q, 0, scope), g.dim(positions, 0, scope)], scope),
                                              0, scope), g.const([1, 1], scope)], scope, axis=0)
        keys = g.op("Tile", [positions, repeats], scope)                                 # [b, 8, D]
        c2p = g.op("MatMul", [q, g.op("Transpose", [keys], scope, perm=[0, 2, 1])], scope)  # [b, s, 8]
        seq = g.dim(x, 1, scope)
        rel = g.op("Sub", [g.unsqueeze(g.op("Range", [g.const(0, scope), seq, g.const(1, scope)], scope), 0, scope),
                           g.unsqueeze(g.op("Range", [g.const(0, scope), seq, g.const(1, scope)], scope), 1, scope)],
                   scope)
        index = g.op("Clip", [g.op("Add", [rel, g.const(4, scope)], scope), g.const(0, scope), g.const(7, scope)],
                     scope)                                                              # [s, s] in 0..7
        shape = g.op("Concat", [g.unsqueeze(g.dim(q, 0, scope), 0, scope), g.unsqueeze(seq, 0, scope),
                                g.unsqueeze(seq, 0, scope)], scope, axis=0)
        gathered = g.op("GatherElements", [c2p, g.op("Expand", [g.unsqueeze(index, 0, scope), shape], scope)],
                        scope, axis=-1)                                                  # [b, s, s]
        x = g.op("MatMul", [g.op("Softmax", [gathered], scope, axis=-1), q], scope)
    g.op("Identity", [x], outputs=["y"])
    return g.model("disentangled", [tensor("x", ["batch", "seq", D])], [tensor("y", ["batch", "seq", D])], 17,
                   "pytorch")


FORMS = {
    "deberta_disentangled": disentangled,
    "t5_buckets_bidirectional": lambda: t5_buckets(bidirectional=True, past=False),
    "t5_buckets_bidirectional_past": lambda: t5_buckets(bidirectional=True, past=True),
    "t5_buckets_causal_past": lambda: t5_buckets(bidirectional=False, past=True),
    **{f"rotary_{form}": (lambda form=form: rotary(form))
       for form in ("inv_freq", "cache_slice", "cache_gather", "cache_past")},
    **{f"mask_{form}": (lambda form=form: mask(form))
       for form in ("extended", "trilu", "range_less", "bool_buffer", "expand")},
    # the mask's length a dim of its own (dynamic_axes given as lists): broadcast against the sequence's
    **{f"mask_{form}_own_dim": (lambda form=form: mask(form, "mask_seq"))
       for form in ("extended", "trilu", "range_less", "expand")},
}


def _feeds(model: onnx.ModelProto, seq: int, past: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sizes = {"batch": 2, "seq": seq, "mask_seq": seq, "past_len": past}
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value or sizes[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        if vi.name == "attention_mask":
            feeds[vi.name] = np.ones(shape, np.int64)
            feeds[vi.name][-1, seq // 2:] = 0  # the second row padded
        elif vi.name == "position_ids":
            feeds[vi.name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (shape[0], 1))
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("vendors", ["all", "host"])
@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_builds_once_and_matches_onnxruntime_at_three_lengths(form, vendors):
    model = FORMS[form]()
    artifact = byoc.compile(model, vendors=byoc.list_vendors() if vendors == "all" else [])
    declared = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input}
    assert {s.name: list(s.shape) for s in artifact.inputs} == declared  # compiled with no input shapes
    session = ort.InferenceSession(model.SerializeToString())
    for k, (seq, past) in enumerate(LENGTHS):
        feeds = _feeds(model, seq, past, seed=k)
        got, = artifact.run(feeds)
        want, = session.run(None, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_shape_whose_minus_one_the_exporter_makes_one_is_computed():
    """``Where(Equal(shape, -1), 1, shape)`` over a symbolic shape: TVM compared ``T.int64(-1)`` with the
    constant's -1 by structure, never equal, and the shape kept its -1."""
    g = _Graph()
    target = g.expand_shape([g.unsqueeze(g.dim("x", 0), 0), g.const([-1]), g.unsqueeze(g.dim("x", 1), 0)], "/m")
    g.op("Identity", [target], outputs=["y"])
    model = g.model("expand_shape", [tensor("x", ["batch", "seq"])], [tensor("y", [3], TensorProto.INT64)], 17,
                    "pytorch")
    artifact = byoc.compile(model, vendors=[])
    for batch, seq in [(2, 5), (1, 9)]:
        got, = artifact.run({"x": np.zeros((batch, seq), np.float32)})
        np.testing.assert_array_equal(got, [batch, 1, seq])


def test_operands_of_two_dims_build_and_a_call_where_they_differ_is_refused():
    """``Add(x[a], z[b])``: TVM can tell ``a`` and ``b`` neither equal nor 1, gave the sum no shape, and the host
    build failed. The import casts ``z`` to ``a`` (checked per call): equal lengths run, others are refused (TVM's
    kernels index both operands alike, so a run-time 1 cannot broadcast)."""
    g = _Graph()
    g.op("Add", ["x", "z"], outputs=["y"])
    model = g.model("two_dims", [tensor("x", ["a"]), tensor("z", ["b"])], [tensor("y", ["a"])], 17, "pytorch")
    artifact = byoc.compile(model, vendors=[])
    got, = artifact.run({"x": np.arange(4, dtype=np.float32), "z": np.ones(4, np.float32)})
    np.testing.assert_array_equal(got, np.arange(4) + 1)
    with pytest.raises((InputShapeError, ValueError), match=r"shape|match"):
        artifact.run({"x": np.arange(4, dtype=np.float32), "z": np.ones(3, np.float32)})

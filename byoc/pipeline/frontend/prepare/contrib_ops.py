"""onnxruntime's ``com.microsoft`` ops, written as the standard ONNX ops that compute the same.

onnxruntime's transformer optimizer (``onnxruntime.transformers.optimizer.optimize_model``), its
quantization tools and other deployment tools write fused ops of onnxruntime's own domain:
``Attention``, ``SkipLayerNormalization``, ``BiasGelu``, ``FusedConv`` and more. TVM's importer takes
none of them, so each is replaced here, before folding, by the standard nodes exporters write for the
same computation (an attention as MatMul, Softmax and MatMul; a skip layer norm as an Add and a
LayerNormalization), which the vendors' rules already take: an attention becomes dnnl's attention, a
fused conv its conv with a post-op. One function per op, in :data:`CONTRIB_OPS`.

Semantics follow onnxruntime's ContribOperators documentation and its CPU kernels, which the tests
compare against (``tests/test_contrib_ops.py``). What an op may carry that is not written here (a
decoder's past key and values, an attribute value another kernel path serves) is refused by name:
:class:`~byoc.errors.UnsupportedAttributeError` with the attribute, its value and what to do, never
computed another way.

Two ops onnxruntime registers in ONNX's own domain, ``SimplifiedLayerNormalization`` and
``LayerNormalization`` before opset 17 (which ONNX does not define there), are read as
``com.microsoft`` ops by :func:`~byoc.pipeline.frontend.check.read_as_the_writers_meant`, and
rewritten here.
"""

from __future__ import annotations

import math

from onnx import TensorProto

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.prepare.node_rewrite import MS_DOMAIN, NodeRewrite, Rewrites, rewrite_nodes

__all__ = ["CONTRIB_OPS", "ORT_DEFAULT_DOMAIN_OPS", "rewrite_contrib_ops"]

#: onnxruntime's defaults (contrib_defs.cc: kDefaultSkipLayerNormEpsilon, kDefaultEmbedLayerNormEpsilon)
_ORT_LAYER_NORM_EPSILON = 1e-12
#: what onnxruntime adds to a masked attention score by default (the ``mask_filter_value`` attribute)
_MASK_FILTER_VALUE = -10000.0


def _refuse(u: NodeRewrite, what: str, advice: str) -> UnsupportedAttributeError:
    return UnsupportedAttributeError(f"{u.where()}: {what} is not supported; {advice}")


def _refuse_attr(u: NodeRewrite, name: str, supported: str) -> UnsupportedAttributeError:
    return _refuse(u, f"{name}={u.attr(name)!r}", f"byoc computes {u.node.op_type} with {supported} only")


def _refuse_read_outputs(u: NodeRewrite, indexes: tuple[int, ...], names: tuple[str, ...]) -> None:
    for index, name in zip(indexes, names):
        if u.read(index):
            raise _refuse(u, f"its output {index} ({name}) being read",
                          "byoc computes its main output only; export without the consumer of that output")


def _constant(u: NodeRewrite, index: int, what: str):
    value = u.constants.get(u.input(index))
    if value is None:
        raise _refuse(u, f"a {what} ({u.input(index)!r}) that is not a constant",
                      "give it as an initializer (byoc splits and reorders it when the model is compiled)")
    return value


# -- normalization -------------------------------------------------------------------------------

def _skip_sum(u: NodeRewrite, bias_index: int) -> str:
    """``input + skip (+ bias)``, written to the node's sum output (3) when that is read."""
    total = u.add("Add", [u.input(0), u.input(1)], "skip_add")
    if u.input(bias_index):
        total = u.add("Add", [total, u.input(bias_index)], "bias_add")
    if u.read(3):
        total = u.add("Identity", [total], "sum", output=u.output(3))
    return total


def _skip_layer_norm(u: NodeRewrite) -> None:
    """SkipLayerNormalization(input, skip, gamma, beta?, bias?) = LayerNorm(input + skip + bias)."""
    _refuse_read_outputs(u, (1, 2), ("mean", "inv_std_var"))
    total = _skip_sum(u, 4)
    u.layer_norm(total, u.input(2), u.input(3), u.attr("epsilon", _ORT_LAYER_NORM_EPSILON), "layer_norm",
                 output=u.output(0))


def _skip_simplified_layer_norm(u: NodeRewrite) -> None:
    """SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) = RMSNorm(input + skip + bias)."""
    _refuse_read_outputs(u, (1, 2), ("mean", "inv_std_var"))
    total = _skip_sum(u, 3)
    u.rms_norm(total, u.input(2), u.attr("epsilon", _ORT_LAYER_NORM_EPSILON), "rms_norm", output=u.output(0))


def _last_axis(u: NodeRewrite) -> None:
    axis, rank = u.attr("axis", -1), u.rank(u.input(0))
    if axis != -1 and not (rank is not None and axis == rank - 1):
        raise _refuse_attr(u, "axis", "the last axis (-1)")


def _simplified_layer_norm(u: NodeRewrite) -> None:
    """SimplifiedLayerNormalization(X, scale) = X / sqrt(mean(X^2) + epsilon) * scale, over the last axis."""
    _last_axis(u)
    _refuse_read_outputs(u, (1,), ("inv_std_var",))
    u.rms_norm(u.input(0), u.input(1), u.attr("epsilon", 1e-5), "rms_norm", output=u.output(0))


def _layer_norm(u: NodeRewrite) -> None:
    """LayerNormalization as onnxruntime defines it in ONNX's domain before opset 17 (ONNX's own from 17 on)."""
    _last_axis(u)
    _refuse_read_outputs(u, (1, 2), ("mean", "inv_std_dev"))
    u.layer_norm(u.input(0), u.input(1), u.input(2), u.attr("epsilon", 1e-5), "layer_norm", output=u.output(0))


def _embed_layer_norm(u: NodeRewrite) -> None:
    """EmbedLayerNormalization: LayerNorm(word[ids] + position[position_ids] + segment[segment_ids]), and the
    attention's mask index, the count of ones in each row of ``mask`` (0 without a mask), as onnxruntime's CPU
    kernel computes it."""
    ids, segment_ids, word, position, segment = (u.input(i) for i in range(5))
    gamma, beta, mask, position_ids = (u.input(i) for i in range(5, 9))
    total = u.add("Gather", [word, ids], "word")
    if not position_ids:  # 0 .. sequence - 1 for every row
        length = u.add("Gather", [u.add("Shape", [ids], "ids_shape"), u.ints("seq_axis", [1])], "seq_length")
        count = u.squeeze(length, [0], "seq_count")
        position_ids = u.unsqueeze(u.add("Range", [u.const("zero", _int64(0)), count, u.const("one", _int64(1))],
                                         "positions"), [0], "position_ids")
    total = u.add("Add", [total, u.add("Gather", [position, position_ids], "position")], "word_position")
    if segment_ids and segment:
        total = u.add("Add", [total, u.add("Gather", [segment, segment_ids], "segment")], "with_segment")
    if u.read(2):
        total = u.add("Identity", [total], "embedding_sum", output=u.output(2))
    u.layer_norm(total, gamma, beta, u.attr("epsilon", _ORT_LAYER_NORM_EPSILON), "layer_norm", output=u.output(0))
    if u.read(1):
        if mask and u.attr("mask_index_type", 1) == 1:
            ones = u.cast(u.add("Equal", [mask, u.const("mask_one", _typed_one(u, mask))], "mask_is_one"),
                          TensorProto.INT32, "ones")
            u.reduce("ReduceSum", ones, [1], "mask_index", keepdims=0, output=u.output(1))
        else:  # zeros of the ids' type, one per row
            first = u.add("Gather", [ids, u.const("first_column", _int64(0))], "first_ids", axis=1)
            u.add("Mul", [first, u.const("zero_int", _int32(0))], "no_mask", output=u.output(1))
        u.shapes[u.output(1)] = [None]


def _typed_one(u: NodeRewrite, mask: str):
    """1 of the mask's dtype (int32 by the schema; a constant mask tells its own)."""
    import numpy as np

    value = u.constants.get(mask)
    return np.array(1, value.dtype if value is not None else np.int32)


def _int64(value: int):
    import numpy as np

    return np.array(value, np.int64)


def _int32(value: int):
    import numpy as np

    return np.array(value, np.int32)


# -- activations -----------------------------------------------------------------------------------

def _with_bias(u: NodeRewrite) -> str:
    return u.add("Add", [u.input(0), u.input(1)], "bias_add") if u.input(1) else u.input(0)


def _gelu(u: NodeRewrite) -> None:
    u.gelu(u.input(0), "gelu", output=u.output(0))


def _bias_gelu(u: NodeRewrite) -> None:
    u.gelu(_with_bias(u), "gelu", output=u.output(0))


def _fast_gelu(u: NodeRewrite) -> None:
    """FastGelu(X, bias?): the tanh approximation of GELU."""
    u.gelu(_with_bias(u), "gelu", approximate="tanh", output=u.output(0))


def _quick_gelu(u: NodeRewrite) -> None:
    """QuickGelu(X) = X * sigmoid(alpha * X), alpha 1.702 by default."""
    x = u.input(0)
    scaled = u.add("Mul", [x, u.scalar("alpha", u.attr("alpha", 1.702))], "scaled")
    u.add("Mul", [x, u.add("Sigmoid", [scaled], "sigmoid")], "quick_gelu", output=u.output(0))


def _bias_add(u: NodeRewrite) -> None:
    """BiasAdd(X, bias, skip) = X + bias + skip."""
    u.add("Add", [u.add("Add", [u.input(0), u.input(1)], "bias_add"), u.input(2)], "skip_add", output=u.output(0))


def _bias_split_gelu(u: NodeRewrite) -> None:
    """BiasSplitGelu(X, bias): (X + bias) split in halves along the last axis, left * Gelu(right)."""
    bias = _constant(u, 1, "bias")
    half = bias.shape[-1] // 2
    left, right = u.split(u.add("Add", [u.input(0), u.input(1)], "bias_add"), [half, half], -1, "halves")
    u.add("Mul", [left, u.gelu(right, "gelu")], "product", output=u.output(0))


_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")


def _activation(u: NodeRewrite, x: str, kind: str, params: list, output: str) -> str:
    """onnxruntime's fused activation ``kind`` with its ``activation_params`` applied to ``x``."""
    if kind not in _ACTIVATIONS:
        raise _refuse(u, f"activation={kind!r}", f"byoc takes the activations {', '.join(_ACTIVATIONS)}")
    if kind == "LeakyRelu":
        return u.add(kind, [x], "activation", output=output, alpha=float(params[0]) if params else 0.01)
    if kind == "HardSigmoid":
        alpha, beta = (list(params) + [0.2, 0.5][len(params):])[:2]
        return u.add(kind, [x], "activation", output=output, alpha=float(alpha), beta=float(beta))
    if kind == "Clip":
        low, high = (list(params) + [-math.inf, math.inf][len(params):])[:2]
        if u.opset >= 11:
            return u.add(kind, [x, u.scalar("clip_min", low), u.scalar("clip_max", high)], "activation",
                         output=output)
        return u.add(kind, [x], "activation", output=output, min=float(low), max=float(high))
    return u.add(kind, [x], "activation", output=output)


def _fused_conv(u: NodeRewrite) -> None:
    """FusedConv(X, W, B?, Z?) = activation(Conv(X, W, B) + Z)."""
    kind = u.attr("activation", b"")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    params = list(u.attr("activation_params", []) or [])
    inputs = [u.input(0), u.input(1)] + ([u.input(2)] if u.input(2) else [])
    y = u.add("Conv", inputs, "conv", **u.plain_attrs(drop=("activation", "activation_params")))
    if u.input(3):
        y = u.add("Add", [y, u.input(3)], "sum")
    if kind:
        _activation(u, y, kind, params, u.output(0))
    else:
        u.add("Identity", [y], "identity", output=u.output(0))


def _fused_gemm(u: NodeRewrite) -> None:
    """FusedGemm: Gemm then onnxruntime's activation (activation_alpha/beta as its parameters)."""
    kind = u.attr("activation", b"")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    params = [p for p in (u.attr("activation_alpha"), u.attr("activation_beta")) if p is not None]
    if kind in ("Clip", "HardSigmoid") and len(params) < 2:
        params = params[:1]
    gemm_attrs = u.plain_attrs(drop=("activation", "activation_alpha", "activation_beta", "activation_gamma"))
    inputs = [x for x in u.node.input]
    y = u.add("Gemm", inputs, "gemm", **gemm_attrs)
    if kind:
        _activation(u, y, kind, params, u.output(0))
    else:
        u.add("Identity", [y], "identity", output=u.output(0))


# -- matrix products -------------------------------------------------------------------------------

def _fused_matmul(u: NodeRewrite) -> None:
    """FusedMatMul(A, B) = alpha * op(A) @ op(B), op transposing the last two axes when transA/transB say."""
    for name in ("transBatchA", "transBatchB"):
        if u.attr(name, 0):
            raise _refuse_attr(u, name, f"{name}=0")

    def operand(index: int, transposed: bool, name: str) -> str:
        x = u.input(index)
        if not transposed:
            return x
        rank = u.rank(x)
        if rank is None:
            raise _refuse(u, f"trans{name}=1 on an input of unknown rank ({x!r})",
                          "give the model's inputs their ranks (onnx shape inference could not tell)")
        perm = list(range(rank - 2)) + [rank - 1, rank - 2]
        return u.add("Transpose", [x], f"transpose_{name.lower()}", perm=perm)

    a = operand(0, bool(u.attr("transA", 0)), "A")
    b = operand(1, bool(u.attr("transB", 0)), "B")
    alpha = float(u.attr("alpha", 1.0))
    if alpha == 1.0:
        u.add("MatMul", [a, b], "matmul", output=u.output(0))
    else:
        u.add("Mul", [u.add("MatMul", [a, b], "matmul"), u.scalar("alpha", alpha)], "scaled", output=u.output(0))


def _integer_product_to_float(u: NodeRewrite, a: str, a_zp: str, scale: str, b_index: int, b_zp_index: int,
                              bias_index: int) -> None:
    """``Cast(MatMulInteger(a, B, a_zp, b_zp)) * scale (+ bias)``, the form onnxruntime's quantize_dynamic writes."""
    inputs = [a, u.input(b_index), a_zp]
    if u.input(b_zp_index):
        inputs.append(u.input(b_zp_index))
    product = u.float_of(u.add("MatMulInteger", inputs, "matmul_integer"), "to_float")
    if u.input(bias_index):
        scaled = u.add("Mul", [product, scale], "scaled")
        u.add("Add", [scaled, u.input(bias_index)], "bias_add", output=u.output(0))
    else:
        u.add("Mul", [product, scale], "scaled", output=u.output(0))


def _dynamic_quantize_matmul(u: NodeRewrite) -> None:
    """DynamicQuantizeMatMul(A, B, b_scale, b_zero_point?, bias?): A quantized per call to uint8 as
    DynamicQuantizeLinear defines it, then the integer product, scaled back to float."""
    a, a_scale, a_zp = u.add_multi("DynamicQuantizeLinear", [u.input(0)], "quantize_a", 3)
    scale = u.add("Mul", [a_scale, u.input(2)], "scale")
    _integer_product_to_float(u, a, a_zp, scale, 1, 3, 4)


def _matmul_integer_to_float(u: NodeRewrite) -> None:
    """MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?)."""
    scale = u.add("Mul", [u.input(2), u.input(3)], "scale")
    _integer_product_to_float(u, u.input(0), u.input(4), scale, 1, 5, 6)


# -- attention -------------------------------------------------------------------------------------

def _heads(u: NodeRewrite, x: str, num_heads: int, head_size: int, name: str, key: bool = False) -> str:
    """``[B, S, N*H]`` -> ``[B, N, S, H]`` (or ``[B, N, H, S]`` for a key, ready for q @ k)."""
    split = u.add("Reshape", [x, u.ints(f"{name}_heads_shape", [0, 0, num_heads, head_size])], f"{name}_heads")
    return u.add("Transpose", [split], f"{name}_transposed", perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def _sequence_positions(u: NodeRewrite, x: str, axis: int, name: str) -> str:
    """``0 .. x.shape[axis] - 1`` as int64."""
    length = u.add("Gather", [u.add("Shape", [x], f"{name}_shape"), u.const(f"{name}_axis", _int64(axis))],
                   f"{name}_length")
    return u.add("Range", [u.const(f"{name}_zero", _int64(0)), length, u.const(f"{name}_one", _int64(1))], name)


def _keep_as_bias(u: NodeRewrite, keep: str, filter_value: float, name: str) -> str:
    """A boolean 'attend' tensor as the additive bias onnxruntime uses: 0 where kept, the filter value elsewhere."""
    dropped = u.add("Sub", [u.scalar(f"{name}_one", 1.0), u.float_of(keep, f"{name}_float")], f"{name}_dropped")
    return u.add("Mul", [dropped, u.scalar(f"{name}_filter", filter_value)], f"{name}_bias")


def _mask_bias(u: NodeRewrite, mask: str, key: str, filter_value: float, name: str) -> str:
    """The additive bias of an attention's mask, broadcastable to ``[B, N, S, T]``, as onnxruntime's CPU kernels
    read it: a 2-D ``[B, T]`` or 3-D ``[B, S, T]`` mask attends where it is above 0; a 1-D ``[B]`` mask index
    holds each row's end position (keys at or after it are masked). ``key`` is ``[B, T, ...]``."""
    rank = u.rank(mask)
    if rank in (2, 3):
        keep = u.add("Greater", [u.float_of(mask, f"{name}_as_float"), u.scalar(f"{name}_zero", 0.0)],
                     f"{name}_keep")
        bias = _keep_as_bias(u, keep, filter_value, name)
        return u.unsqueeze(bias, [1, 2] if rank == 2 else [1], f"{name}_heads")
    if rank == 1:
        positions = u.unsqueeze(_sequence_positions(u, key, 1, f"{name}_positions"), [0], f"{name}_row")
        ends = u.unsqueeze(u.cast(mask, TensorProto.INT64, f"{name}_ends"), [1], f"{name}_column")
        bias = _keep_as_bias(u, u.add("Less", [positions, ends], f"{name}_keep"), filter_value, name)
        return u.unsqueeze(bias, [1, 2], f"{name}_heads")
    raise _refuse(u, f"a mask {mask!r} of rank {rank if rank is not None else 'unknown'}",
                  "byoc takes a 1-D mask index [batch] of end positions, or a 2-D [batch, total sequence] or 3-D "
                  "[batch, sequence, total sequence] mask of 0 and 1")


def _causal_bias(u: NodeRewrite, scores: str, filter_value: float) -> str:
    """The filter value above the diagonal of each ``[S, T]`` score matrix (no past: S = T)."""
    rows = u.unsqueeze(_sequence_positions(u, scores, 2, "causal_rows"), [1], "causal_row_column")
    columns = u.unsqueeze(_sequence_positions(u, scores, 3, "causal_columns"), [0], "causal_column_row")
    keep = u.add("LessOrEqual", [columns, rows], "causal_keep")
    return _keep_as_bias(u, keep, filter_value, "causal")


def _attend(u: NodeRewrite, q: str, k: str, v: str, num_heads: int, head_size: int, value_head_size: int,
            mask: str, attention_bias: str, causal: bool, key_source: str) -> None:
    """softmax(scale * q @ k^T + masks) @ v for ``[B, S, N*H]`` q, k and v, into the node's output 0."""
    scale = u.attr("scale", 0.0) or 1.0 / math.sqrt(head_size)
    filter_value = float(u.attr("mask_filter_value", _MASK_FILTER_VALUE))
    qh = _heads(u, q, num_heads, head_size, "q")
    kh = _heads(u, k, num_heads, head_size, "k", key=True)
    vh = _heads(u, v, num_heads, value_head_size, "v")
    scores = u.add("Mul", [u.add("MatMul", [qh, kh], "qk"), u.scalar("scale", scale)], "scores")
    if mask:
        scores = u.add("Add", [scores, _mask_bias(u, mask, key_source, filter_value, "mask")], "masked")
    if causal:
        scores = u.add("Add", [scores, _causal_bias(u, scores, filter_value)], "causal_masked")
    if attention_bias:
        scores = u.add("Add", [scores, attention_bias], "biased")
    probabilities = u.add("Softmax", [scores], "softmax", axis=-1)
    context = u.add("Transpose", [u.add("MatMul", [probabilities, vh], "context")], "context_transposed",
                    perm=[0, 2, 1, 3])
    u.add("Reshape", [context, u.ints("merged_shape", [0, 0, -1])], "merged", output=u.output(0))


def _refuse_cache(u: NodeRewrite, inputs: tuple[tuple[int, str], ...], outputs: tuple[tuple[int, str], ...]) -> None:
    for index, name in inputs:
        if u.input(index):
            raise _refuse(u, f"input {name!r} (a decoder's key/value cache)",
                          "byoc compiles these attentions without a cache: export the model without past key/values")
    for index, name in outputs:
        if u.read(index):
            raise _refuse(u, f"output {name!r} (a decoder's key/value cache) being read",
                          "byoc compiles these attentions without a cache: export the model without present outputs")


def _attention(u: NodeRewrite) -> None:
    """Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?): one input
    projected to q, k and v by one packed weight (split here into three, as three Linear layers export)."""
    _refuse_cache(u, ((4, "past"), (6, "past_sequence_length")), ((1, "present"),))
    for name in ("do_rotary", "past_present_share_buffer"):
        if u.attr(name, 0):
            raise _refuse_attr(u, name, f"{name}=0")
    num_heads = int(u.attr("num_heads"))
    weight = _constant(u, 1, "weight")
    sizes = list(u.attr("qkv_hidden_sizes", []) or []) or [weight.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != weight.shape[1] or any(s % num_heads for s in sizes) or sizes[0] != sizes[1]:
        raise _refuse(u, f"qkv_hidden_sizes={sizes} for a weight of {weight.shape[1]} columns and {num_heads} heads",
                      "the three sizes must add up to the weight's columns, each a multiple of num_heads, q's and k's "
                      "equal")
    bias = u.constants.get(u.input(2)) if u.input(2) else None
    if u.input(2) and bias is None:
        raise _refuse(u, f"a bias ({u.input(2)!r}) that is not a constant", "give it as an initializer")
    projected, start = [], 0
    for name, size in zip("qkv", sizes):
        y = u.add("MatMul", [u.input(0), u.const(f"w_{name}", weight[:, start:start + size].copy())], f"{name}_matmul")
        if bias is not None:
            y = u.add("Add", [y, u.const(f"b_{name}", bias[start:start + size].copy())], f"{name}_bias")
        projected.append(y)
        start += size
    q, k, v = projected
    _attend(u, q, k, v, num_heads, sizes[0] // num_heads, sizes[2] // num_heads, u.input(3), u.input(5),
            bool(u.attr("unidirectional", 0)), u.input(0))


def _multi_head_attention(u: NodeRewrite) -> None:
    """MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?, ...) for separate 3-D
    ``[B, S, D]`` query, key and value (the packed forms and a past are refused by name)."""
    _refuse_cache(u, ((6, "past_key"), (7, "past_value"), (8, "past_sequence_length"), (9, "cache_indirection")),
                  ((1, "present_key"), (2, "present_value"), (3, "qk")))
    query, key, value = u.input(0), u.input(1), u.input(2)
    if not key or not value:
        raise _refuse(u, "packed query, key and value (no key or value input)",
                      "give query, key and value as three [batch, sequence, hidden] inputs")
    for name in (query, key, value):
        if u.rank(name) not in (3, None):
            raise _refuse(u, f"input {name!r} of rank {u.rank(name)}",
                          "byoc takes 3-D [batch, sequence, hidden] query, key and value")
    num_heads = int(u.attr("num_heads"))
    q_size, v_size = u.last_dim(query), u.last_dim(value)
    if u.input(3):  # [q, k, v] biases, q's and k's of one size
        total = _constant(u, 3, "bias").shape[0]
        q_size = q_size or ((total - v_size) // 2 if v_size else total // 3)
        v_size = total - 2 * q_size
        sizes = [q_size, q_size, v_size]
        bias, start, biased = u.constants[u.input(3)], 0, []
        for name, x, size in zip("qkv", (query, key, value), sizes):
            biased.append(u.add("Add", [x, u.const(f"b_{name}", bias[start:start + size].copy())], f"{name}_bias"))
            start += size
        query, key, value = biased
    if not q_size:
        raise _refuse(u, f"a query {query!r} whose hidden size is not known before the import",
                      "give the query a static last dim (its hidden size)")
    v_size = v_size or q_size
    _attend(u, query, key, value, num_heads, q_size // num_heads, v_size // num_heads, u.input(4), u.input(5),
            bool(u.attr("unidirectional", 0)), key)


def _rotary_embedding(u: NodeRewrite) -> None:
    """RotaryEmbedding(input, position_ids, cos_cache, sin_cache): each head's vector rotated pairwise by the
    angles the caches hold for its position; the pairs are the two halves of the vector, or neighbours when
    ``interleaved``. ``input`` is ``[B, S, N*H]`` (num_heads given) or ``[B, N, S, H]``."""
    if u.attr("is_packed_batching", 0):
        raise _refuse_attr(u, "is_packed_batching", "is_packed_batching=0")
    cos_cache = _constant(u, 2, "cos cache")
    half = cos_cache.shape[-1]
    rotary_dim = int(u.attr("rotary_embedding_dim", 0) or 0)
    if rotary_dim and rotary_dim != 2 * half:
        raise _refuse(u, f"rotary_embedding_dim={rotary_dim} with a cache of {half} angles",
                      "byoc rotates whole heads (rotary_embedding_dim 0, or twice the cache's width)")
    x, positions = u.input(0), u.input(1)
    rank = u.rank(x)
    num_heads = int(u.attr("num_heads", 0) or 0)
    if rank == 3:
        if not num_heads:
            hidden = u.last_dim(x)
            if hidden is None or hidden % (2 * half):
                raise _refuse(u, "a 3-D input without num_heads", "give num_heads")
            num_heads = hidden // (2 * half)
        heads = u.add("Transpose", [u.add("Reshape", [x, u.ints("split_shape", [0, 0, num_heads, 2 * half])],
                                          "split_heads")], "heads", perm=[0, 2, 1, 3])
    elif rank == 4:
        heads = x
    else:
        raise _refuse(u, f"an input of rank {rank if rank is not None else 'unknown'}",
                      "byoc takes [batch, sequence, hidden] or [batch, heads, sequence, head size]")
    if u.rank(positions) == 1:  # one offset: positions offset .. offset + S - 1
        offsets = _sequence_positions(u, heads, 2, "positions")
        positions = u.unsqueeze(u.add("Add", [offsets, u.cast(positions, TensorProto.INT64, "offset")], "shifted"),
                                [0], "position_row")
    cos = u.unsqueeze(u.add("Gather", [u.input(2), positions], "cos"), [1], "cos_heads")  # [B, 1, S, half]
    sin = u.unsqueeze(u.add("Gather", [u.input(3), positions], "sin"), [1], "sin_heads")
    if u.attr("interleaved", 0):
        pairs = u.add("Reshape", [heads, u.ints("pairs_shape", [0, 0, 0, half, 2])], "pairs")
        first, second = u.split(pairs, [1, 1], -1, "pair_halves")
        first, second = u.squeeze(first, [-1], "first"), u.squeeze(second, [-1], "second")
    else:
        first, second = u.split(heads, [half, half], -1, "halves")
    rotated_first = u.add("Sub", [u.add("Mul", [first, cos], "first_cos"), u.add("Mul", [second, sin], "second_sin")],
                          "rotated_first")
    rotated_second = u.add("Add", [u.add("Mul", [second, cos], "second_cos"), u.add("Mul", [first, sin], "first_sin")],
                           "rotated_second")
    if u.attr("interleaved", 0):
        stacked = u.add("Concat", [u.unsqueeze(rotated_first, [-1], "first_pair"),
                                   u.unsqueeze(rotated_second, [-1], "second_pair")], "stacked", axis=-1)
        rotated = u.add("Reshape", [stacked, u.ints("rotated_shape", [0, 0, 0, 2 * half])], "rotated")
    else:
        rotated = u.add("Concat", [rotated_first, rotated_second], "rotated", axis=-1)
    if rank == 3:
        merged = u.add("Transpose", [rotated], "merged_heads", perm=[0, 2, 1, 3])
        u.add("Reshape", [merged, u.ints("merged_shape", [0, 0, -1])], "merged", output=u.output(0))
    else:
        u.add("Identity", [rotated], "identity", output=u.output(0))


#: (domain, op type) -> its rewrite into standard ONNX ops
CONTRIB_OPS: Rewrites = {
    (MS_DOMAIN, "Attention"): _attention,
    (MS_DOMAIN, "MultiHeadAttention"): _multi_head_attention,
    (MS_DOMAIN, "RotaryEmbedding"): _rotary_embedding,
    (MS_DOMAIN, "SkipLayerNormalization"): _skip_layer_norm,
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): _skip_simplified_layer_norm,
    (MS_DOMAIN, "SimplifiedLayerNormalization"): _simplified_layer_norm,
    (MS_DOMAIN, "LayerNormalization"): _layer_norm,
    (MS_DOMAIN, "EmbedLayerNormalization"): _embed_layer_norm,
    (MS_DOMAIN, "Gelu"): _gelu,
    (MS_DOMAIN, "BiasGelu"): _bias_gelu,
    (MS_DOMAIN, "FastGelu"): _fast_gelu,
    (MS_DOMAIN, "QuickGelu"): _quick_gelu,
    (MS_DOMAIN, "BiasAdd"): _bias_add,
    (MS_DOMAIN, "BiasSplitGelu"): _bias_split_gelu,
    (MS_DOMAIN, "FusedConv"): _fused_conv,
    (MS_DOMAIN, "FusedGemm"): _fused_gemm,
    (MS_DOMAIN, "FusedMatMul"): _fused_matmul,
    (MS_DOMAIN, "DynamicQuantizeMatMul"): _dynamic_quantize_matmul,
    (MS_DOMAIN, "MatMulIntegerToFloat"): _matmul_integer_to_float,
}

#: ops onnxruntime registers in ONNX's own domain where ONNX has none: (op type, the first opset at which ONNX
#: defines an op of that name, or None for never). read_as_the_writers_meant reads them as com.microsoft ops.
ORT_DEFAULT_DOMAIN_OPS = {"SimplifiedLayerNormalization": None, "LayerNormalization": 17}


def rewrite_contrib_ops(model):
    """A new model with every ``com.microsoft`` op of :data:`CONTRIB_OPS` in its main graph replaced by standard
    ONNX ops; and a map from each new node's name to the node it replaces (see
    :func:`~byoc.pipeline.frontend.prepare.node_rewrite.rewrite_nodes`)."""
    return rewrite_nodes(model, CONTRIB_OPS)

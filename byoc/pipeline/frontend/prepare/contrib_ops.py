"""onnxruntime's ``com.microsoft`` ops, written as the standard ONNX ops that compute the same.

onnxruntime's transformer optimizer (``onnxruntime.transformers.optimizer.optimize_model``), its
quantization tools and other deployment tools write fused ops of onnxruntime's own domain:
``Attention``, ``SkipLayerNormalization``, ``BiasGelu``, ``FusedConv`` and more. TVM's importer takes
none of them, so each is replaced here, before folding, by the standard nodes exporters write for the
same computation (an attention as MatMul, Softmax and MatMul; a skip layer norm as an Add and a
LayerNormalization), which the vendors' rules already take: an attention becomes dnnl's attention, a
fused conv its conv with a post-op. One function per op, in :data:`CONTRIB_OPS`; the attention ops are in
:mod:`~byoc.pipeline.frontend.prepare.contrib_attention`.

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

import numpy as np
from onnx import TensorProto

from byoc.pipeline.frontend.prepare.contrib_attention import (
    attention,
    group_query_attention,
    multi_head_attention,
    rotary_embedding,
)
from byoc.pipeline.frontend.prepare.node_rewrite import MS_DOMAIN, NodeRewrite, Rewrites, rewrite_nodes

__all__ = ["CONTRIB_OPS", "ORT_DEFAULT_DOMAIN_OPS", "rewrite_contrib_ops"]

#: onnxruntime's defaults (contrib_defs.cc: kDefaultSkipLayerNormEpsilon, kDefaultEmbedLayerNormEpsilon)
_ORT_LAYER_NORM_EPSILON = 1e-12


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
    u.refuse_read_outputs({1: "mean", 2: "inv_std_var"})
    total = _skip_sum(u, 4)
    u.layer_norm(total, u.input(2), u.input(3), u.attr("epsilon", _ORT_LAYER_NORM_EPSILON), "layer_norm",
                 output=u.output(0))


def _skip_simplified_layer_norm(u: NodeRewrite) -> None:
    """SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) = RMSNorm(input + skip + bias)."""
    u.refuse_read_outputs({1: "mean", 2: "inv_std_var"})
    total = _skip_sum(u, 3)
    u.rms_norm(total, u.input(2), u.attr("epsilon", _ORT_LAYER_NORM_EPSILON), "rms_norm", output=u.output(0))


def _last_axis(u: NodeRewrite) -> None:
    axis, rank = u.attr("axis", -1), u.rank(u.input(0))
    if axis != -1 and not (rank is not None and axis == rank - 1):
        raise u.refuse_attr("axis", "the last axis (-1)")


def _simplified_layer_norm(u: NodeRewrite) -> None:
    """SimplifiedLayerNormalization(X, scale) = X / sqrt(mean(X^2) + epsilon) * scale, over the last axis."""
    _last_axis(u)
    u.refuse_read_outputs({1: "inv_std_var"})
    u.rms_norm(u.input(0), u.input(1), u.attr("epsilon", 1e-5), "rms_norm", output=u.output(0))


def _layer_norm(u: NodeRewrite) -> None:
    """LayerNormalization as onnxruntime defines it in ONNX's domain before opset 17 (ONNX's own from 17 on)."""
    _last_axis(u)
    u.refuse_read_outputs({1: "mean", 2: "inv_std_dev"})
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
        position_ids = u.unsqueeze(u.add("Range", [u.int_scalar("zero", 0), count, u.int_scalar("one", 1)],
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
            first = u.add("Gather", [ids, u.int_scalar("first_column", 0)], "first_ids", axis=1)
            u.add("Mul", [first, u.int_scalar("zero_int", 0, np.int32)], "no_mask", output=u.output(1))
        u.shapes[u.output(1)] = [None]


def _typed_one(u: NodeRewrite, mask: str):
    """1 of the mask's dtype (int32 by the schema; a constant mask tells its own)."""
    value = u.constants.get(mask)
    return np.array(1, value.dtype if value is not None else np.int32)


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
    bias = u.constant_input(1, "bias")
    half = bias.shape[-1] // 2
    left, right = u.split(u.add("Add", [u.input(0), u.input(1)], "bias_add"), [half, half], -1, "halves")
    u.add("Mul", [left, u.gelu(right, "gelu")], "product", output=u.output(0))


_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "Clip", "HardSigmoid")


def _activation(u: NodeRewrite, x: str, kind: str, params: list, output: str) -> str:
    """onnxruntime's fused activation ``kind`` with its ``activation_params`` applied to ``x``."""
    if kind not in _ACTIVATIONS:
        raise u.refuse(f"activation={kind!r}", f"byoc takes the activations {', '.join(_ACTIVATIONS)}")
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
            raise u.refuse_attr(name, f"{name}=0")

    def operand(index: int, transposed: bool, name: str) -> str:
        x = u.input(index)
        if not transposed:
            return x
        rank = u.rank(x)
        if rank is None:
            raise u.refuse(f"trans{name}=1 on an input of unknown rank ({x!r})",
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


def _nibbles(u: NodeRewrite, packed: str, name: str) -> str:
    """Bytes of two 4-bit codes each (low bits first) as int32 codes, the last axis twice as long."""
    wide = u.cast(packed, TensorProto.INT32, f"{name}_wide")
    high = u.add("Div", [wide, u.int_scalar(f"{name}_sixteen", 16, np.int32)], f"{name}_high")
    low = u.add("Sub", [wide, u.add("Mul", [high, u.int_scalar(f"{name}_sixteen_again", 16, np.int32)],
                                    f"{name}_high_bits")], f"{name}_low")
    pairs = u.add("Concat", [u.unsqueeze(low, [-1], f"{name}_low_last"), u.unsqueeze(high, [-1], f"{name}_high_last")],
                  f"{name}_pairs", axis=-1)
    shape = u.add("Concat", [u.add("Slice", [u.add("Shape", [pairs], f"{name}_pair_dims"), u.ints(f"{name}_start", [0]),
                                             u.ints(f"{name}_end", [-2])], f"{name}_outer"),
                             u.ints(f"{name}_rest", [-1])], f"{name}_shape", axis=0)
    return u.add("Reshape", [pairs, shape], f"{name}_codes")


def _gather_block_quantized(u: NodeRewrite) -> None:
    """GatherBlockQuantized(data, indices, scales, zero_points?) (onnxruntime-genai's int4 embedding, which
    reads the int4 LM head's weight when the two are tied): the rows of ``data`` that ``indices`` picks,
    dequantized per block of ``block_size`` along the last axis, ``(code - zero) * scale``. The rows are
    gathered while packed, so only they are widened. 4-bit codes come two to a byte, low bits first; without
    zero points, unsigned codes are centred on ``2^(bits - 1)``, as onnxruntime's kernel has it."""
    bits, block = int(u.attr("bits", 4)), int(u.attr("block_size", 128))
    if int(u.attr("gather_axis", 0)) != 0:
        raise u.refuse_attr("gather_axis", "gather_axis=0")
    if int(u.attr("quantize_axis", 1)) not in (1, -1):
        raise u.refuse_attr("quantize_axis", "quantize_axis=1 (the last axis of a 2-D table)")
    if bits not in (4, 8):
        raise u.refuse_attr("bits", "bits=4 or 8")
    if u.rank(u.input(0)) not in (None, 2):
        raise u.refuse(f"a {u.rank(u.input(0))}-D table", "byoc gathers rows of a 2-D table")
    blocks = u.last_dim(u.input(2))
    if not blocks:
        raise u.refuse("scales whose block count is not known before the import", "give the scales a static shape")
    rows = u.add("Gather", [u.input(0), u.input(1)], "rows", axis=0)
    codes = _nibbles(u, rows, "codes") if bits == 4 else u.cast(rows, TensorProto.INT32, "codes")
    index_dims = u.add("Shape", [u.input(1)], "index_dims")
    blocked = u.add("Reshape", [codes, u.add("Concat", [index_dims, u.ints("block_dims", [blocks, block])],
                                             "blocked_shape", axis=0)], "blocked")  # [..., blocks, block]
    if u.input(3):
        zero_rows = u.add("Gather", [u.input(3), u.input(1)], "zero_rows", axis=0)
        zeros = _nibbles(u, zero_rows, "zeros") if bits == 4 else u.cast(zero_rows, TensorProto.INT32, "zeros")
        zeros = u.add("Slice", [zeros, u.ints("zero_start", [0]), u.ints("zero_end", [blocks]),
                                u.ints("zero_axis", [-1])], "zero_blocks")  # 4-bit zero points pad to a byte
        centred = u.add("Sub", [blocked, u.unsqueeze(zeros, [-1], "zero_last")], "centred")
    else:
        centred = u.add("Sub", [blocked, u.int_scalar("zero", 1 << (bits - 1), np.int32)], "centred")
    scales = u.unsqueeze(u.add("Gather", [u.input(2), u.input(1)], "scale_rows", axis=0), [-1], "scale_last")
    values = u.add("Mul", [u.float_of(centred, "centred_float"), scales], "dequantized")
    u.add("Reshape", [values, u.add("Concat", [index_dims, u.ints("row_width", [-1])], "row_shape", axis=0)],
          "rows_out", output=u.output(0))


#: (domain, op type) -> its rewrite into standard ONNX ops
CONTRIB_OPS: Rewrites = {
    (MS_DOMAIN, "Attention"): attention,
    (MS_DOMAIN, "MultiHeadAttention"): multi_head_attention,
    (MS_DOMAIN, "GroupQueryAttention"): group_query_attention,
    (MS_DOMAIN, "RotaryEmbedding"): rotary_embedding,
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
    (MS_DOMAIN, "GatherBlockQuantized"): _gather_block_quantized,
}

#: ops onnxruntime registers in ONNX's own domain where ONNX has none: (op type, the first opset at which ONNX
#: defines an op of that name, or None for never). read_as_the_writers_meant reads them as com.microsoft ops.
ORT_DEFAULT_DOMAIN_OPS = {"SimplifiedLayerNormalization": None, "LayerNormalization": 17}


def rewrite_contrib_ops(model):
    """A new model with every ``com.microsoft`` op of :data:`CONTRIB_OPS` in its main graph replaced by standard
    ONNX ops; and a map from each new node's name to the node it replaces (see
    :func:`~byoc.pipeline.frontend.prepare.node_rewrite.rewrite_nodes`)."""
    return rewrite_nodes(model, CONTRIB_OPS)

"""onnxruntime's attention ops (``com.microsoft`` Attention, MultiHeadAttention, GroupQueryAttention and
RotaryEmbedding) as the standard ops exporters write for an attention: MatMul, Softmax and MatMul on
``[batch, heads, sequence, head size]`` tensors, masks as additive biases, rotary embeddings as Gathers of the
cos/sin caches and element-wise products. The table is :data:`~byoc.pipeline.frontend.prepare.contrib_ops.CONTRIB_OPS`;
masks follow onnxruntime's CPU kernels, which ``tests/test_contrib_ops.py`` compares against.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from byoc.pipeline.frontend.prepare.node_rewrite import NodeRewrite

__all__ = ["attention", "cache_head_dims", "group_query_attention", "multi_head_attention", "rotary_embedding"]

#: what onnxruntime adds to a masked attention score by default (the ``mask_filter_value`` attribute)
_MASK_FILTER_VALUE = -10000.0


def _heads(u: NodeRewrite, x: str, num_heads: int, head_size: int, name: str, key: bool = False) -> str:
    """``[B, S, N*H]`` -> ``[B, N, S, H]`` (or ``[B, N, H, S]`` for a key, ready for q @ k)."""
    split = u.add("Reshape", [x, u.ints(f"{name}_heads_shape", [0, 0, num_heads, head_size])], f"{name}_heads")
    return u.add("Transpose", [split], f"{name}_transposed", perm=[0, 2, 3, 1] if key else [0, 2, 1, 3])


def _merge_heads(u: NodeRewrite, x: str, output: str) -> str:
    """``[B, N, S, H]`` -> ``[B, S, N*H]``, written to ``output``."""
    transposed = u.add("Transpose", [x], "merge_transposed", perm=[0, 2, 1, 3])
    return u.add("Reshape", [transposed, u.ints("merged_shape", [0, 0, -1])], "merged", output=output)


def _sequence_positions(u: NodeRewrite, x: str, axis: int, name: str) -> str:
    """``0 .. x.shape[axis] - 1`` as int64."""
    length = u.add("Gather", [u.add("Shape", [x], f"{name}_shape"), u.int_scalar(f"{name}_axis", axis)],
                   f"{name}_length")
    return u.add("Range", [u.int_scalar(f"{name}_zero", 0), length, u.int_scalar(f"{name}_one", 1)], name)


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
    raise u.refuse(f"a mask {mask!r} of rank {rank if rank is not None else 'unknown'}",
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
    _merge_heads(u, u.add("MatMul", [probabilities, vh], "context"), u.output(0))


def _refuse_cache(u: NodeRewrite, inputs: tuple[tuple[int, str], ...], outputs: tuple[tuple[int, str], ...]) -> None:
    for index, name in inputs:
        if u.input(index):
            raise u.refuse(f"input {name!r} (a decoder's key/value cache)",
                           "byoc compiles these attentions without a cache: export the model without past key/values")
    for index, name in outputs:
        if u.read(index):
            raise u.refuse(f"output {name!r} (a decoder's key/value cache) being read",
                           "byoc compiles these attentions without a cache: export the model without present outputs")


def attention(u: NodeRewrite) -> None:
    """Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?): one input
    projected to q, k and v by one packed weight (split here into three, as three Linear layers export)."""
    _refuse_cache(u, ((4, "past"), (6, "past_sequence_length")), ((1, "present"),))
    for name in ("do_rotary", "past_present_share_buffer"):
        if u.attr(name, 0):
            raise u.refuse_attr(name, f"{name}=0")
    num_heads = int(u.attr("num_heads"))
    weight = u.constant_input(1, "weight")
    sizes = list(u.attr("qkv_hidden_sizes", []) or []) or [weight.shape[1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != weight.shape[1] or any(s % num_heads for s in sizes) or sizes[0] != sizes[1]:
        raise u.refuse(f"qkv_hidden_sizes={sizes} for a weight of {weight.shape[1]} columns and {num_heads} heads",
                      "the three sizes must add up to the weight's columns, each a multiple of num_heads, q's and k's "
                      "equal")
    bias = u.constants.get(u.input(2)) if u.input(2) else None
    if u.input(2) and bias is None:
        raise u.refuse(f"a bias ({u.input(2)!r}) that is not a constant", "give it as an initializer")
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


def multi_head_attention(u: NodeRewrite) -> None:
    """MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?, ...) for separate 3-D
    ``[B, S, D]`` query, key and value (the packed forms and a past are refused by name)."""
    _refuse_cache(u, ((6, "past_key"), (7, "past_value"), (8, "past_sequence_length"), (9, "cache_indirection")),
                  ((1, "present_key"), (2, "present_value"), (3, "qk")))
    query, key, value = u.input(0), u.input(1), u.input(2)
    if not key or not value:
        raise u.refuse("packed query, key and value (no key or value input)",
                      "give query, key and value as three [batch, sequence, hidden] inputs")
    for name in (query, key, value):
        if u.rank(name) not in (3, None):
            raise u.refuse(f"input {name!r} of rank {u.rank(name)}",
                          "byoc takes 3-D [batch, sequence, hidden] query, key and value")
    num_heads = int(u.attr("num_heads"))
    q_size, v_size = u.last_dim(query), u.last_dim(value)
    if u.input(3):  # [q, k, v] biases, q's and k's of one size
        total = u.constant_input(3, "bias").shape[0]
        q_size = q_size or ((total - v_size) // 2 if v_size else total // 3)
        v_size = total - 2 * q_size
        sizes = [q_size, q_size, v_size]
        bias, start, biased = u.constants[u.input(3)], 0, []
        for name, x, size in zip("qkv", (query, key, value), sizes):
            biased.append(u.add("Add", [x, u.const(f"b_{name}", bias[start:start + size].copy())], f"{name}_bias"))
            start += size
        query, key, value = biased
    if not q_size:
        raise u.refuse(f"a query {query!r} whose hidden size is not known before the import",
                      "give the query a static last dim (its hidden size)")
    v_size = v_size or q_size
    _attend(u, query, key, value, num_heads, q_size // num_heads, v_size // num_heads, u.input(4), u.input(5),
            bool(u.attr("unidirectional", 0)), key)


def _rotate(u: NodeRewrite, heads: str, positions: str, cos_cache: str, sin_cache: str, half: int,
            interleaved: bool, name: str) -> str:
    """``[B, N, S, 2*half]`` heads rotated pairwise by the angles of the caches' rows ``positions`` (``[B, S]``,
    or ``[1, S]`` for every row); the pairs are the two halves of each vector, or neighbours when interleaved.

    Halves are written as transformers' exports write them, ``x * cos + rotate_half(x) * sin`` with each angle
    repeated over both halves, which a vendor may take as one rotary embedding (dnnl: ``codegens/dnnl/rotary.py``).
    """
    cos = u.unsqueeze(u.add("Gather", [cos_cache, positions], f"{name}_cos"), [1], f"{name}_cos_heads")
    sin = u.unsqueeze(u.add("Gather", [sin_cache, positions], f"{name}_sin"), [1], f"{name}_sin_heads")
    if not interleaved:
        last = u.ints(f"{name}_last", [-1])
        high = u.add("Slice", [heads, u.ints(f"{name}_half", [half]), u.ints(f"{name}_end", [2 * half]), last],
                     f"{name}_high")
        low = u.add("Slice", [heads, u.ints(f"{name}_zero", [0]), u.ints(f"{name}_low_end", [half]), last],
                    f"{name}_low")
        turned = u.add("Concat", [u.add("Neg", [high], f"{name}_neg"), low], f"{name}_rotate_half", axis=-1)
        cos = u.add("Concat", [cos, cos], f"{name}_cos_both", axis=-1)
        sin = u.add("Concat", [sin, sin], f"{name}_sin_both", axis=-1)
        return u.add("Add", [u.add("Mul", [heads, cos], f"{name}_x_cos"),
                             u.add("Mul", [turned, sin], f"{name}_turned_sin")], f"{name}_rotated")
    pairs = u.add("Reshape", [heads, u.ints(f"{name}_pairs_shape", [0, 0, 0, half, 2])], f"{name}_pairs")
    first, second = u.split(pairs, [1, 1], -1, f"{name}_pair_halves")
    first, second = u.squeeze(first, [-1], f"{name}_first"), u.squeeze(second, [-1], f"{name}_second")
    rotated_first = u.add("Sub", [u.add("Mul", [first, cos], f"{name}_first_cos"),
                                  u.add("Mul", [second, sin], f"{name}_second_sin")], f"{name}_rotated_first")
    rotated_second = u.add("Add", [u.add("Mul", [second, cos], f"{name}_second_cos"),
                                   u.add("Mul", [first, sin], f"{name}_first_sin")], f"{name}_rotated_second")
    stacked = u.add("Concat", [u.unsqueeze(rotated_first, [-1], f"{name}_first_pair"),
                               u.unsqueeze(rotated_second, [-1], f"{name}_second_pair")], f"{name}_stacked", axis=-1)
    return u.add("Reshape", [stacked, u.ints(f"{name}_rotated_shape", [0, 0, 0, 2 * half])], f"{name}_rotated")


def rotary_embedding(u: NodeRewrite) -> None:
    """RotaryEmbedding(input, position_ids, cos_cache, sin_cache): each head's vector rotated pairwise by the
    angles the caches hold for its position (:func:`_rotate`). ``input`` is ``[B, S, N*H]`` (num_heads given, or
    read from the hidden size) or ``[B, N, S, H]``; ``position_ids`` is ``[B, S]``, or one offset for
    positions offset .. offset + S - 1."""
    if u.attr("is_packed_batching", 0):
        raise u.refuse_attr("is_packed_batching", "is_packed_batching=0")
    half = u.constant_input(2, "cos cache").shape[-1]
    rotary_dim = int(u.attr("rotary_embedding_dim", 0) or 0)
    if rotary_dim and rotary_dim != 2 * half:
        raise u.refuse(f"rotary_embedding_dim={rotary_dim} with a cache of {half} angles",
                       "byoc rotates whole heads (rotary_embedding_dim 0, or twice the cache's width)")
    x, positions = u.input(0), u.input(1)
    rank = u.rank(x)
    if rank == 3:
        hidden = u.last_dim(x)
        num_heads = int(u.attr("num_heads", 0) or 0) or (hidden // (2 * half) if hidden else 0)
        if not num_heads:
            raise u.refuse("a 3-D input of unknown hidden size without num_heads", "give num_heads")
        heads = _heads(u, x, num_heads, 2 * half, "x")
    elif rank == 4:
        heads = x
    else:
        raise u.refuse(f"an input of rank {rank if rank is not None else 'unknown'}",
                       "byoc takes [batch, sequence, hidden] or [batch, heads, sequence, head size]")
    if u.rank(positions) == 1:
        offsets = _sequence_positions(u, heads, 2, "positions")
        positions = u.unsqueeze(u.add("Add", [offsets, u.cast(positions, TensorProto.INT64, "offset")], "shifted"),
                                [0], "position_row")
    rotated = _rotate(u, heads, positions, u.input(2), u.input(3), half, bool(u.attr("interleaved", 0)), "rope")
    if rank == 3:
        _merge_heads(u, rotated, u.output(0))
    else:
        u.add("Identity", [rotated], "identity", output=u.output(0))


def group_query_attention(u: NodeRewrite) -> None:
    """GroupQueryAttention (onnxruntime-genai's decoders): ``query [B, S, N*H]`` and ``key``/``value``
    ``[B, S, kvN*H]`` (or one packed query), the cache ``past_key``/``past_value`` ``[B, kvN, P, H]`` that the new
    keys and values are appended to (``present_key``/``present_value``, ``[B, kvN, P+S, H]``), ``seqlens_k``
    ``[B]`` (each row's total length - 1, so its past is ``seqlens_k + 1 - S``), rotary embeddings of q and k
    inside (``do_rotary``), a causal mask, optionally a local window, a soft cap of the scores and an attention
    bias. Each kv head serves ``N / kvN`` query heads: q is viewed as ``[B, kvN, (N/kvN)*S, H]``, so k and v are
    never repeated. Rows of a batch are taken to be padded on the right (each row's keys start at 0), as for
    one sequence."""
    for name in ("smooth_softmax", "qk_output"):
        if u.attr(name, 0):
            raise u.refuse_attr(name, f"{name}=0")
    if u.input(11):
        raise u.refuse("a head_sink input", "byoc computes GroupQueryAttention without sinks")
    num_heads, kv_heads = int(u.attr("num_heads")), int(u.attr("kv_num_heads"))
    if num_heads % kv_heads:
        raise u.refuse(f"num_heads={num_heads} with kv_num_heads={kv_heads}", "num_heads must be a multiple")
    query, key, value = u.input(0), u.input(1), u.input(2)
    hidden = u.last_dim(query)
    if key:
        head_size = hidden // num_heads if hidden else None
    else:  # packed [B, S, (N + 2 kvN) * H]
        head_size = hidden // (num_heads + 2 * kv_heads) if hidden else None
    if u.input(7) and not head_size:
        head_size = 2 * u.constant_input(7, "cos cache").shape[-1]
    if not head_size:
        raise u.refuse(f"a query {query!r} whose hidden size is not known before the import",
                       "give the query a static last dim")
    if not key:
        query, key, value = u.split(query, [num_heads * head_size, kv_heads * head_size, kv_heads * head_size], -1,
                                    "packed")
    q = _heads(u, query, num_heads, head_size, "q")  # [B, N, S, H]
    k = _heads(u, key, kv_heads, head_size, "k")  # [B, kvN, S, H]
    v = _heads(u, value, kv_heads, head_size, "v")
    sequence = u.squeeze(u.add("Gather", [u.add("Shape", [query], "q_shape"), u.ints("seq_axis", [1])], "q_seq"), [0],
                         "q_seq_scalar")
    past_lengths = u.add("Sub", [u.add("Add", [u.cast(u.input(5), TensorProto.INT64, "seqlens"),
                                               u.int_scalar("one", 1)], "totals"), sequence], "past_lengths")  # [B]
    positions = u.add("Add", [u.unsqueeze(past_lengths, [1], "past_column"),
                              u.unsqueeze(_sequence_positions(u, query, 1, "steps"), [0], "step_row")],
                      "positions")  # [B, S]: each query's position
    if u.attr("do_rotary", 0):
        half = u.constant_input(7, "cos cache").shape[-1]
        if 2 * half != head_size:
            raise u.refuse(f"a rotary cache of {half} angles for heads of {head_size}",
                           "byoc rotates whole heads (the cache's width half the head size)")
        rotary_positions = u.input(9) or positions
        interleaved = bool(u.attr("rotary_interleaved", 0))
        q = _rotate(u, q, rotary_positions, u.input(7), u.input(8), half, interleaved, "q_rope")
        k = _rotate(u, k, rotary_positions, u.input(7), u.input(8), half, interleaved, "k_rope")
    # The present outputs hold the past with the new keys and values right after the cached ones, as onnxruntime
    # puts them (they differ where the past is longer than its tokens): Concat(past, new) with the new entries
    # written again at each row's positions (a ScatterElements of index [B, kvN, S, H], the size of the new keys).
    # The slots after the tokens are the past's and the new keys' copies there, where onnxruntime leaves them
    # unspecified. The attention reads the present: slot j holds position j, so the causal mask alone leaves out
    # the slots past each row's tokens. (Reading the Concat instead, the earlier form, needed a mask of which slots
    # were cached or new, and kept the Concat's copy beside the present's: two copies of the cache a call, which
    # dnnl's ScatterElements now writes in place into one. A GatherElements of the Concat in a computed order,
    # the form before that, computed an int64 index the size of the whole cache every call.)
    if u.input(3):
        slots_of_new = u.unsqueeze(positions, [1, 3], "new_slots")  # [B, 1, S, 1]

        def present_of(index: int, new: str, name: str) -> str:
            joined = u.add("Concat", [u.input(index), new], f"joined_{name}", axis=2)
            slots = u.add("Expand", [slots_of_new, u.add("Shape", [new], f"new_{name}_dims")], f"{name}_slots")
            return u.add("ScatterElements", [joined, slots, new], f"present_{name}", axis=2)

        k, v = present_of(3, k, "key"), present_of(4, v, "value")
    for index, present, name in ((1, k, "key"), (2, v, "value")):
        if u.read(index):
            u.add("Identity", [present], f"present_{name}_out", output=u.output(index))
    grouped_q = u.add("Reshape", [q, u.ints("grouped_shape", [0, kv_heads, -1, head_size])], "grouped_q")
    scores = u.add("MatMul", [grouped_q, u.add("Transpose", [k], "k_transposed", perm=[0, 1, 3, 2])], "qk")
    scores = u.add("Mul", [scores, u.scalar("scale", u.attr("scale", 0.0) or 1.0 / math.sqrt(head_size))], "scaled")
    softcap = float(u.attr("softcap", 0.0) or 0.0)
    if softcap:
        capped = u.add("Tanh", [u.add("Mul", [scores, u.scalar("inverse_cap", 1.0 / softcap)], "uncapped")], "tanh")
        scores = u.add("Mul", [capped, u.scalar("softcap", softcap)], "capped")
    # [B, N, S, T], spelled from the dims (with a -1, TVM cannot simplify S*T/T to S when T is past + S)
    scores_shape = u.add("Concat", [u.dims_of(q, 0, 3, "q_dims"), u.dims_of(k, 2, 3, "total_dims")], "scores_shape",
                         axis=0)
    scores = u.add("Reshape", [scores, scores_shape], "head_scores")
    columns = u.unsqueeze(_sequence_positions(u, k, 2, "key_slots"), [0, 1], "key_row")  # [1, 1, T]
    rows = u.unsqueeze(positions, [2], "query_column")  # [B, S, 1]
    keep = u.add("LessOrEqual", [columns, rows], "causal_keep")
    window = int(u.attr("local_window_size", -1))
    if window > 0:
        inside = u.add("Greater", [columns, u.add("Sub", [rows, u.int_scalar("window", window)], "window_start")],
                       "in_window")
        keep = u.add("And", [keep, inside], "window_keep")
    lowest = float(np.finfo(np.float32).min)  # onnxruntime leaves masked keys out of the softmax: exp() is 0
    scores = u.add("Add", [scores, u.unsqueeze(_keep_as_bias(u, keep, lowest, "causal"), [1], "causal_heads")],
                   "masked")
    if u.input(10):
        scores = u.add("Add", [scores, u.input(10)], "biased")
    probabilities = u.add("Softmax", [scores], "softmax", axis=-1)
    grouped_shape = u.add("Concat", [u.dims_of(grouped_q, 0, 3, "grouped_dims"), u.dims_of(k, 2, 3, "key_dims")],
                          "grouped_p_shape", axis=0)
    grouped_p = u.add("Reshape", [probabilities, grouped_shape], "grouped_p")
    context = u.add("Reshape", [u.add("MatMul", [grouped_p, v], "context"),
                                u.ints("context_shape", [0, num_heads, -1, head_size])], "head_context")
    _merge_heads(u, context, u.output(0))


def cache_head_dims(model: onnx.ModelProto) -> dict[str, int]:
    """The symbolic dims of a model's inputs that its GroupQueryAttention nodes fix: the head size of a past cache
    (onnxruntime-genai's builder names it ``kv_cache_dim``; the op computes it as the rotary cache's width times 2).
    Left symbolic, the head size of the keys appended to the cache is unknown, and every shape after it."""
    inputs = {vi.name: vi for vi in model.graph.input}
    initializers = {t.name: t for t in model.graph.initializer}
    fixed: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type != "GroupQueryAttention" or len(node.input) < 8 or node.input[7] not in initializers:
            continue
        head_size = 2 * int(initializers[node.input[7]].dims[-1])
        for name in node.input[3:5]:
            dims = inputs[name].type.tensor_type.shape.dim if name in inputs else []
            if len(dims) == 4 and dims[3].dim_param:
                fixed[dims[3].dim_param] = head_size
    return fixed

"""A decoder's attention over its cache, a few query rows per head, is one byoc kernel on dnnl
(codegens/dnnl/runtime/decode_attention.cc): softmax(Q K^T [element-wise ops]) V, against onnxruntime.

Each form here is one exporters or byoc's GroupQueryAttention rewrite write; each is compared with onnxruntime, and
the steps the dnnl runtime ran say whether the kernel took it (``kernel byoc:decode_attention``) or oneDNN's
primitives did (more rows than a token's, or a step on the scores the kernel does not compute)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from dnnl_op_helpers import _compile, _f
from models import const, model, tensor
from test_contrib_ops import _gqa_model, _matches

KERNEL = "kernel byoc:decode_attention"


def _attention(batch, heads, rows, keys, depth, width, scores=("scale", "mask"), k_transposed=False, guard=False,
               kv_repeat=1, scaled_k=False):
    """softmax(Q K^T then `scores`) V over Q [B, N, S, H], K [B, N, T, H] (or K^T [B, N, H, T] given as it is),
    V [B, N, T, Hv]: "scale" a Mul by a scalar, "divide" a Div by one, "mask" an Add of a [B, 1, S, T] input,
    "penalty" a Sub of a [1, N, 1, T] constant, "weights" a Mul by a [T] constant, "tanh" a soft cap; `guard`
    a NaN guard after the softmax (Where(IsNaN(p), 0, p), as transformers writes it). With `kv_repeat` > 1, K and
    V are given for N / kv_repeat kv heads and repeated per query head as transformers' repeat_kv does (Unsqueeze,
    Expand, Reshape); `scaled_k` scales Q and K^T by a scalar each, as transformers' sdpa export does."""
    kv_heads = heads // kv_repeat
    nodes = []
    k, v = "k", "v"
    if kv_repeat > 1:
        for name, last in (("k", depth), ("v", width)):
            nodes += [helper.make_node("Unsqueeze", [name, "axis2"], [f"{name}5"]),
                      helper.make_node("Expand", [f"{name}5", f"{name}_copies"], [f"{name}x"]),
                      helper.make_node("Reshape", [f"{name}x", f"{name}_heads"], [f"{name}r"])]
        k, v = "kr", "vr"
    if not k_transposed:
        nodes.append(helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]))
        k = "kt"
    q = "q"
    if scaled_k:
        nodes += [helper.make_node("Mul", ["q", "root"], ["qs"]), helper.make_node("Mul", [k, "root"], ["ks"])]
        q, k = "qs", "ks"
    nodes.append(helper.make_node("MatMul", [q, k], ["s0"]))
    inits = [const("scale", np.array(0.125, np.float32)), const("zero", np.array(0.0, np.float32)),
             const("penalty", _f(1, heads, 1, keys, seed=11, scale=0.5)), const("weights", 1 + _f(keys, seed=12, scale=0.1))]
    ops = {"scale": ("Mul", "scale"), "divide": ("Div", "scale"), "mask": ("Add", "mask"),
           "penalty": ("Sub", "penalty"), "weights": ("Mul", "weights")}
    last = "s0"
    for n, step in enumerate(scores):
        if step == "tanh":
            nodes.append(helper.make_node("Tanh", [last], [f"s{n + 1}"]))
        else:
            op, operand = ops[step]
            nodes.append(helper.make_node(op, [last, operand], [f"s{n + 1}"]))
        last = f"s{n + 1}"
    nodes.append(helper.make_node("Softmax", [last], ["p"], axis=-1))
    if guard:
        nodes += [helper.make_node("IsNaN", ["p"], ["nan"]), helper.make_node("Where", ["nan", "zero", "p"], ["pg"])]
    nodes.append(helper.make_node("MatMul", ["pg" if guard else "p", v], ["y"]))
    inputs = [tensor("q", [batch, heads, rows, depth]),
              tensor("k", [batch, kv_heads, depth, keys] if k_transposed else [batch, kv_heads, keys, depth]),
              tensor("v", [batch, kv_heads, keys, width])]
    inits += [const("root", np.array(depth ** -0.25, np.float32)), const("axis2", np.array([2], np.int64))]
    for name, last in (("k", depth), ("v", width)):
        inits += [const(f"{name}_copies", np.array([batch, kv_heads, kv_repeat, keys, last], np.int64)),
                  const(f"{name}_heads", np.array([batch, heads, keys, last], np.int64))]
    if "mask" in scores:
        inputs.append(tensor("mask", [batch, 1, rows, keys]))
    return model(nodes, inputs, [tensor("y", [batch, heads, rows, width])], inits)


def _feeds(m, masked_keys=0):
    """Random Q, K, V; a mask of 0 that leaves the last `masked_keys` keys out with the lowest float, as
    onnxruntime's GroupQueryAttention and byoc's rewrite of it do."""
    feeds = {i.name: _f(*[d.dim_value for d in i.type.tensor_type.shape.dim], seed=k)
             for k, i in enumerate(m.graph.input)}
    if "mask" in feeds:
        feeds["mask"] = np.zeros_like(feeds["mask"])
        if masked_keys:
            feeds["mask"][..., -masked_keys:] = np.finfo(np.float32).min
    return feeds


def _steps(artifact) -> list[str]:
    (steps,) = artifact.implementations().values()
    return steps


@pytest.mark.parametrize("batch,heads,rows,keys,depth,width", [
    (1, 8, 1, 129, 64, 64),  # a Qwen2-style token against a bucket of 128 cached keys
    (2, 4, 3, 7, 8, 16),     # three speculated tokens, a value width of its own
    (1, 2, 16, 33, 64, 32),  # the most rows the kernel takes
    (1, 1, 1, 2, 8, 8),      # the first token after a one-token prompt: two keys
    (1, 3, 2, 19, 12, 20),   # widths that are no multiple of the vectors
])
def test_a_tokens_scaled_and_masked_attention_is_one_kernel(batch, heads, rows, keys, depth, width):
    m = _attention(batch, heads, rows, keys, depth, width)
    artifact = _compile(m, inputs=_feeds(m, masked_keys=keys // 3))
    steps = _steps(artifact)
    assert KERNEL in steps and not [s for s in steps if s.startswith(("softmax", "matmul"))], steps


@pytest.mark.parametrize("scores,k_transposed,guard", [
    (("divide", "penalty", "weights"), True, False),  # K^T given plain: its rows, not K's, are contiguous
    (("scale", "mask"), False, True),                   # transformers' NaN guard after the softmax
    ((), False, False),                                 # no step between the matmul and the softmax
])
def test_each_step_on_the_scores_the_kernel_takes_matches_onnxruntime(scores, k_transposed, guard):
    m = _attention(2, 4, 1, 21, 16, 16, scores=scores, k_transposed=k_transposed, guard=guard)
    artifact = _compile(m, inputs=_feeds(m, masked_keys=5))
    assert KERNEL in _steps(artifact), _steps(artifact)


@pytest.mark.parametrize("rows,scores", [(17, ("scale", "mask")), (1, ("scale", "tanh"))])
def test_a_prompts_rows_or_a_soft_cap_stay_with_onednn(rows, scores):
    """More rows than the kernel takes (a prompt), or a step on the scores it does not compute (a soft cap's
    tanh): oneDNN's matmuls and softmax, as before, with onnxruntime's outputs."""
    m = _attention(1, 2, rows, 24, 16, 16, scores=scores)
    artifact = _compile(m, inputs=_feeds(m, masked_keys=3))
    steps = _steps(artifact)
    assert KERNEL not in steps and any(s.startswith("softmax") for s in steps), steps


@pytest.mark.parametrize("seq,past", [(1, 6), (1, 40), (2, 9)])
def test_group_query_attention_on_a_token_is_one_kernel(seq, past):
    """onnxruntime-genai's GroupQueryAttention on a token (byoc's rewrite: the query heads of each kv head grouped
    as rows, the cache and the new keys joined, the mask from seqlens_k): one kernel step, onnxruntime's outputs
    and present cache."""
    m, feeds = _gqa_model(1, seq, past, heads=8, kv_heads=2, head_size=16)
    artifact = _matches(m, feeds, host_ops=None)
    steps = [s for each in artifact.implementations().values() for s in each]
    assert KERNEL in steps and not [s for s in steps if s.startswith("softmax")], steps


@pytest.mark.parametrize("kv_repeat,scaled_k", [(4, True), (2, False), (1, True)])
def test_the_kernel_reads_the_cache_through_transformers_repeat_and_scale(kv_repeat, scaled_k):
    """transformers' decoders (sdpa export): K and V of each kv head repeated per query head, and Q and K^T each
    scaled by the fourth root of the head size. The kernel reads K and V of the kv heads themselves, through the
    transpose, the scale (one step on the scores) and the repetition: no copy of the cache, no scaled K^T, only the
    query's own scale besides the kernel."""
    m = _attention(2, 8, 1, 37, 16, 16, kv_repeat=kv_repeat, scaled_k=scaled_k)
    artifact = _compile(m, inputs=_feeds(m, masked_keys=4))
    steps = _steps(artifact)
    assert steps.count(KERNEL) == 1 and len(steps) == 1 + scaled_k, steps

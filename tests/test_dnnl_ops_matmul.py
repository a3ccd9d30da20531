"""The dnnl vendor on matmuls with constant weights: rows of a multiple of 1 KB stored padded, and one-row
products by several weights run as one matmul; each against onnxruntime through
``byoc.compile(..., strict=True)``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from dnnl_op_helpers import GEMV_RUNS, _compile, _f, _onednn_exec, _rules
from models import const, model, tensor


@pytest.mark.parametrize("x,n", [([2, 64], 256), ([1, 3, 64], 512), ([5, 32], 768)])
def test_matmul_with_weight_rows_of_a_multiple_of_1_kb(x, n):
    """Such weights are stored with padded rows (oneDNN's gemm thrashes the cache on them); bias and relu fused."""
    k = x[-1]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    m = model(nodes, [tensor("x", x)], [tensor("y", x[:-1] + [n])],
              [const("w", _f(k, n, seed=3, scale=0.2)), const("b", _f(n, seed=4))])
    assert any(rule.startswith("dnnl.matmul_bias") for rule in _rules(_compile(m)))


def test_weight_rows_of_a_multiple_of_1_kb_are_padded(tmp_path):
    """oneDNN's own log shows the stored weight's row stride: 256 + 16 floats. The padding is for the AVX2 gemm,
    which reads the weight as it is stored (with AVX-512 oneDNN packs it in blocks of its own), so oneDNN is held
    to AVX2 here, on any CPU that has it."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    m = model(nodes, [tensor("x", [2, 64])], [tensor("y", [2, 256])], [const("w", _f(64, 256, seed=3))])
    path = tmp_path / "mm.onnx"
    onnx.save(m, path)
    script = ("import numpy as np, byoc\n"
              f"a = byoc.compile({str(path)!r}, vendors=['dnnl'], strict=True)\n"
              "print('RUN', flush=True)\n"
              "a.run({'x': np.ones((2, 64), np.float32)})\n")
    log = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "ONEDNN_VERBOSE": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert log.returncode == 0, log.stderr[-2000:]
    matmuls = [line for line in log.stdout.split("RUN\n", 1)[1].splitlines() if ",exec," in line and ",matmul," in line]
    assert len(matmuls) == 1 and "wei_f32::blocked:ab:272x1" in matmuls[0], matmuls


def test_matmuls_of_one_row_by_constant_weights_run_as_one():
    """An unrolled LSTM's per-gate products H·R_gᵀ at batch 1 (ddddocr's OCR model: 248 of 1x512x512): one
    matmul by the weights side by side (byoc's GEMV where it runs), each product a view of its columns, one of
    them a graph output."""
    nodes = [helper.make_node("MatMul", ["h", f"r{g}"], [f"g{g}"], name=f"hr{g}") for g in range(4)]
    nodes += [helper.make_node("Add", ["g0", "g1"], ["s"], name="add"),
              helper.make_node("Sigmoid", ["g2"], ["t"], name="sigmoid")]
    widths = [24, 24, 40, 8]
    inits = [const(f"r{g}", _f(16, n, seed=10 + g)) for g, n in enumerate(widths)]
    m = model(nodes, [tensor("h", [1, 16])], [tensor("s", [1, 24]), tensor("t", [1, 40]), tensor("g3", [1, 8])],
              inits)
    (steps,) = _compile(m).implementations().values()
    executed = [line.split(",")[3] for line in _onednn_exec(m)]
    assert (steps.count("kernel byoc:gemv"), executed.count("matmul")) == ((1, 0) if GEMV_RUNS else (0, 1)), executed


@pytest.mark.parametrize("rows", [[1, 7, 7], [2, 9]])
def test_a_linear_on_rank_3_and_4_activations_is_one_2d_matmul_over_the_rows(rows):
    """x [.., K] times a constant [K, N], plus a bias, then GELU, as torch's dynamo exporter writes a Linear on
    NHWC activations (ConvNeXt) and any exporter does with a symbolic batch: one 2-D matmul over the rows, whose
    weight oneDNN can pack. As a broadcast 4-D matmul it kept the weight plain (ConvNeXt-T: 51.7 -> 30.5 ms)."""
    k, n = 32, 48
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"), helper.make_node("Add", ["m", "b"], ["h"], name="bias"),
             helper.make_node("Gelu", ["h"], ["y"], name="gelu")]
    m = model(nodes, [tensor("x", [*rows, k])], [tensor("y", [*rows, n])],
              [const("w", _f(k, n, seed=2, scale=0.3)), const("b", _f(n, seed=3))], opset=20)
    _compile(m)
    (matmul,) = [line for line in _onednn_exec(m) if ",matmul," in line]
    count = int(np.prod(rows))
    assert f",{count}x{k}:{k}x{n}," in matmul and "bia_f32" in matmul, matmul  # one 2-D matmul, the bias in it


@pytest.mark.parametrize("isa", [None, "AVX2"])
def test_the_mask_adds_after_a_matmul_are_its_post_ops(isa):
    """Scores = Q K^T / scale + mask + position bias (a [1, 1, 1, T] padding mask, and T5's [1, H, T, T] relative
    position bias), then softmax: each add a node of its own after the matmul's. oneDNN runs no binary primitive:
    the adds are the matmul's post-ops. Against onnxruntime; held to AVX2 and at the machine's own ISA."""
    heads, tokens, dim = 2, 24, 4  # more query rows than byoc's decode attention takes (16)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Div", ["s", "scale"], ["d"], name="scale"),
             helper.make_node("Add", ["d", "mask"], ["dm"], name="mask"),
             helper.make_node("Add", ["dm", "bias"], ["db"], name="position_bias"),
             helper.make_node("Softmax", ["db"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="context")]
    m = model(nodes, [tensor("q", [1, heads, tokens, dim]), tensor("kt", [1, heads, dim, tokens]),
                      tensor("v", [1, heads, tokens, dim]), tensor("mask", [1, 1, 1, tokens]),
                      tensor("bias", [1, heads, tokens, tokens])], [tensor("y", [1, heads, tokens, dim])],
              [const("scale", np.array(2.0, np.float32))])
    _compile(m)
    executed = _onednn_exec(m, env={"ONEDNN_MAX_CPU_ISA": isa} if isa else None)
    assert [line.split(",")[3] for line in executed] == ["matmul", "softmax", "matmul"], "\n".join(executed)
    assert executed[0].count("binary_add") == 2, executed[0]


def test_a_residual_add_after_a_linear_over_a_symbolic_batch_is_a_post_op_of_its_rows():
    """x [n, T, D] times a constant [D, D], plus a bias, plus x (a residual, a node of its own): one 2-D matmul over
    the rows (its weight packed), the bias in it and the residual read as rows by a post-op. Against onnxruntime."""
    tokens, dim = 8, 16
    nodes = [helper.make_node("MatMul", ["x", "w"], ["l"], name="linear"),
             helper.make_node("Add", ["l", "b"], ["lb"], name="bias"),
             helper.make_node("Add", ["lb", "x"], ["y"], name="residual")]
    m = model(nodes, [tensor("x", ["n", tokens, dim])], [tensor("y", ["n", tokens, dim])],
              [const("w", _f(dim, dim, seed=4)), const("b", _f(dim, seed=5))])
    x = {"x": _f(3, tokens, dim, seed=6)}
    _compile(m, inputs=x)
    executed = _onednn_exec(m, shapes=[[3, tokens, dim]])
    assert [line.split(",")[3] for line in executed] == ["matmul"], "\n".join(executed)
    assert f",{3 * tokens}x{dim}:{dim}x{dim}," in executed[0] and "bia_f32" in executed[0], executed[0]
    assert "binary_add" in executed[0], executed[0]


def _split_heads_attention(heads, tokens, dim, masked=False):
    """Attention as exporters write it: Q, K, V [1, T, H*d] split into heads by Reshape + Transpose, K transposed
    once more, softmax(Q K^T [/ scale + mask [1, 1, T, T]]) V, and the heads put back by a Transpose and a
    Reshape into the output [1, T, H*d]."""
    split = [helper.make_node("Reshape", [n, "heads_shape"], [f"{n}4"]) for n in "qkv"]
    split += [helper.make_node("Transpose", [f"{n}4"], [f"{n}h"], perm=[0, 2, 1, 3]) for n in "qkv"]
    scores = [helper.make_node("Div", ["scores", "scale"], ["scaled"]),
              helper.make_node("Add", ["scaled", "mask"], ["masked"])] if masked else []
    nodes = split + [helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
                     helper.make_node("MatMul", ["qh", "kt"], ["scores"]), *scores,
                     helper.make_node("Softmax", ["masked" if masked else "scores"], ["p"], axis=-1),
                     helper.make_node("MatMul", ["p", "vh"], ["o"]),
                     helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                     helper.make_node("Reshape", ["ot", "rows_shape"], ["y"])]
    inputs = [tensor(n, [1, tokens, heads * dim]) for n in "qkv"] + ([tensor("mask", [1, 1, tokens, tokens])] * masked)
    inits = [const("heads_shape", np.array([1, tokens, heads, dim], np.int64)),
             const("rows_shape", np.array([1, tokens, heads * dim], np.int64))]
    return model(nodes, inputs, [tensor("y", [1, tokens, heads * dim])],
                 inits + [const("scale", np.array(4.0, np.float32))] * masked)


def test_attention_whose_scores_outgrow_the_caches_runs_a_block_of_query_rows_at_a_time():
    """softmax(Q K^T / s + mask) V over 2304 tokens, 4 heads split off the rows and put back by transposes: 85 MB
    of scores, more than 16 L2 caches hold on any x86-64 CPU of today. Each block of query rows is a matmul (the
    scale and the mask's rows its post-ops), a softmax and a matmul into those rows of the output, so oneDNN runs
    many softmaxes of a few rows, not one of all. Against onnxruntime."""
    heads, tokens, dim = 4, 2304, 16
    m = _split_heads_attention(heads, tokens, dim, masked=True)
    inputs = {n: _f(1, tokens, heads * dim, seed=i) for i, n in enumerate("qkv")}
    inputs["mask"] = np.where(_f(1, 1, tokens, tokens, seed=7) > 1.0, np.float32(-1e4), np.float32(0))
    _compile(m, inputs=inputs)
    softmaxes = [line for line in _onednn_exec(m) if ",softmax," in line]
    assert len(softmaxes) > 1 and f"1x{heads}x{tokens}x{tokens}" not in softmaxes[0], softmaxes[:2]


@pytest.mark.parametrize("isa", [None, "AVX2"])
def test_transposed_operands_of_a_matmul_are_read_through_their_strides(isa):
    """Attention as exporters write it: heads split off rows by Reshape + Transpose, K transposed once more, and
    the product's heads put back by a Transpose that a Reshape makes the output. The matmuls read Q and V through
    their transposed strides and write their product through strides that make the transpose after it plain,
    which is then the output itself; K^T, whose rows would be read across (a slower kernel: 14.2 against 10.2 ms
    for Whisper's 1500 frames), is one copy from K's input, through both transposes. Held to AVX2 and at the
    machine's own ISA."""
    heads, tokens, dim = 4, 24, 8
    m = _split_heads_attention(heads, tokens, dim)
    _compile(m)  # the output against onnxruntime
    executed = _onednn_exec(m, env={"ONEDNN_MAX_CPU_ISA": isa} if isa else None)
    kinds = [line.split(",")[3] for line in executed]
    assert kinds == ["reorder", "matmul", "softmax", "matmul"], "\n".join(executed)
    assert f"1x{heads}x{dim}x{tokens}" in executed[0]  # the copy is K^T's
    assert not [line for line in executed if ",ref:" in line], executed


# -- a few rows by a constant weight: byoc's GEMV (AVX-512) ----------------------------------------


def _ffn_model(x, n, residual):
    """A decoder's feed-forward on `x` rows: SiLU(x Wg + bg) * (x Wu), then x Wd (+ x, a residual)."""
    k = x[-1]
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["g0"], name="gate"), helper.make_node("Add", ["g0", "bg"], ["g"]),
             helper.make_node("Sigmoid", ["g"], ["sg"]), helper.make_node("Mul", ["g", "sg"], ["silu"]),
             helper.make_node("MatMul", ["x", "wu"], ["u"], name="up"), helper.make_node("Mul", ["silu", "u"], ["h"]),
             helper.make_node("MatMul", ["h", "wd"], ["d"], name="down")]
    if residual:
        nodes.append(helper.make_node("Add", ["d", "x"], ["y"]))
    out = "y" if residual else "d"
    return model(nodes, [tensor("x", x)], [tensor(out, x[:-1] + [k])],
                 [const("wg", _f(k, n, seed=3, scale=0.2)), const("bg", _f(n, seed=4)),
                  const("wu", _f(k, n, seed=5, scale=0.2)), const("wd", _f(n, k, seed=6, scale=0.1))])


@pytest.mark.parametrize("x,n,residual", [([1, 64], 48, True), ([1, 1, 129], 96, False), ([3, 80], 64, True),
                                          ([4, 1, 33], 112, True), ([2, 2, 48], 272, False)])
def test_a_few_rows_by_constant_weights_are_a_gemv(x, n, residual):
    """A decoder's token: each matmul by a constant weight, at most 4 rows, is byoc's GEMV on the weight in the
    layout oneDNN chose (odd depths, several column blocks, one partial block), with the bias in it and the SiLU,
    product and residual after it; onnxruntime's outputs."""
    artifact = _compile(_ffn_model(x, n, residual))
    (steps,) = artifact.implementations().values()
    # the down projection's width is the depth: a GEMV where it is a multiple of 16
    gemvs = 2 + (x[-1] % 16 == 0) if GEMV_RUNS else 0
    assert steps.count("kernel byoc:gemv") == gemvs, steps
    assert sum("matmul" in step for step in steps) == 3 - gemvs, steps


@pytest.mark.parametrize("x,n,residual", [([5, 64], 48, True), ([8, 1, 80], 64, False), ([7, 48], 32, True)])
def test_a_short_prompt_by_constant_weights_is_the_gemv_in_groups_of_four_rows(x, n, residual):
    """Up to 8 rows (a short prompt): the GEMV, a pass per group of 4 rows (a partial last group too); onnxruntime's
    outputs."""
    artifact = _compile(_ffn_model(x, n, residual))
    (steps,) = artifact.implementations().values()
    gemvs = 2 + (x[-1] % 16 == 0) if GEMV_RUNS else 0
    assert steps.count("kernel byoc:gemv") == gemvs, steps


@pytest.mark.parametrize("x,n", [([9, 64], 64), ([2, 64], 40)])
def test_more_rows_or_columns_off_the_vector_width_stay_onednn_matmuls(x, n):
    """Nine rows (a prompt), or a width not a multiple of 16: oneDNN's matmul, as before."""
    artifact = _compile(_ffn_model(x, n, residual=True))
    (steps,) = artifact.implementations().values()
    # the down projection's width is the depth, 64: a GEMV at two rows
    assert steps.count("kernel byoc:gemv") == (1 if GEMV_RUNS and x[0] <= 8 else 0), steps

"""Fold what is computable at compile time with a simplifier (onnxsim, onnxslim when it cannot), and accept
its result only when it checks, keeps the user's input and output names and changes nothing it should not.

Only folding, no-op removal and the fusion of opset<=12 BatchNormalization into its Conv: the onnx-optimizer
passes that merge the user's compute nodes are skipped (docs/design.md, "Model preparation").
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import warnings
from importlib import metadata

import onnx
from onnx import shape_inference

from byoc.errors import first_line
from byoc.pipeline.frontend.onnx_model import default_opset

#: The distribution that folds the model (see docs/design.md for the measurement).
SIMPLIFIER = "onnxsim"

# BatchNormalization is fused into its Conv only in models of opset 12 and
# older: the ONNX model zoo (opset 9), Paddle2ONNX (opset 11, PP-OCR) and
# other inference exporters of that age put a BN after every Conv, where on a
# vendor without a batch_norm rule it only splits partitions (PP-OCR's
# classifier: 36 partitions). From opset 13 on the BN stays the user's node,
# placed by the vendors' rules as it always was: byoc's own test models (opset
# 13 and 17) and the reports and keep_on_host policies written for them rely
# on that. Fusing it everywhere is a decision for the project, not for this
# stage (docs/design.md, "Model preparation").
_FUSE_BN_BELOW_OPSET = 13


# onnx-optimizer passes that merge several of the user's compute nodes into one
# (MatMul+Add -> Gemm, Pad+Conv, Q/K/V projections, duplicate subexpressions).
# They are not needed to import a model, and each one would hide a user's node
# from the reports; byoc only folds what is computable at compile time,
# removes no-ops, and fuses opset<=12 BatchNormalization into its Conv. Passes
# not listed that merge nodes (onnxsim 0.8's fuse_matmul_add_bias_into_gemm_batched
# for a MatMul on rank-3 activations, fuse_gelu) are reported as merges (_merges).
_SKIPPED_PASSES = [
    # onnxsim 0.8's transformer fusions write onnxruntime's com.microsoft ops (Attention, GroupQueryAttention,
    # RotaryEmbedding, SimplifiedLayerNormalization), which byoc would then refuse or rewrite back: an attention
    # that contrib_ops had just written out in standard ops came back as one com.microsoft Attention.
    "fuse_attention",
    "fuse_gqa",
    "fuse_rms_norm",
    "fuse_rope",
    "eliminate_common_subexpression",
    "eliminate_consecutive_idempotent_ops",
    "fuse_add_bias_into_conv",
    "fuse_consecutive_concats",
    "fuse_consecutive_log_softmax",
    "fuse_consecutive_reduce_unsqueeze",
    "fuse_consecutive_squeezes",
    "fuse_consecutive_transposes",
    "fuse_matmul_add_bias_into_gemm",
    "fuse_pad_into_conv",
    "fuse_pad_into_pool",
    "fuse_qkv",
    "fuse_transpose_into_gemm",
]

# onnxsim 0.8's batched MatMul+Add -> Gemm writes, for a symbolic batch, a Shape -> Slice -> Concat -> Reshape
# chain around each Gemm: shape arithmetic that the static form folds away and a symbolic one keeps on the host.
_SKIPPED_WHEN_SYMBOLIC = ["fuse_matmul_add_bias_into_gemm_batched"]


def _has_symbolic_inputs(model: onnx.ModelProto) -> bool:
    initializers = {t.name for t in model.graph.initializer}
    return any(not d.HasField("dim_value") for vi in model.graph.input if vi.name not in initializers
               for d in vi.type.tensor_type.shape.dim)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _loosened(model: onnx.ModelProto, output_shapes: bool = True) -> onnx.ModelProto:
    """A copy without the shape facts folding can contradict or wrongly trust.

    Exporters write output dims like -1 for "dynamic" and stale value_info;
    once shapes are folded, strict shape inference would reject them (PP-OCR's
    classifier declares its output [-1, 2]). Dropping them changes nothing the
    model computes; shape inference writes the real ones back.

    Some declare a wrong rank too: ddddocr's OCR model says [1, seqlen] for an
    output of [seqlen, 1, 8210]. onnxsim ignores it and strict inference then
    refuses its result, but onnxslim writes it into the last Reshape, which
    changes what the model computes: it gets ``output_shapes=False``, which
    drops every output's shape (onnxsim cannot run without one).
    """
    out = _copy(model)
    for vi in out.graph.output:
        if not vi.type.HasField("tensor_type"):
            continue
        if not output_shapes:
            vi.type.tensor_type.ClearField("shape")
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value <= 0:
                dim.ClearField("dim_value")
    del out.graph.value_info[:]
    return out


def candidates(model: onnx.ModelProto):
    """``(simplified model, tool)`` to try in order, last ``(None, "")``: the model as given.

    onnxsim first (with its optimizer passes, then folding alone), then
    onnxslim, which folds graphs onnxsim leaves or breaks on (silero VAD's
    shape-dependent ``If`` branches around an LSTM; measured in
    docs/design.md). Each is run only when the one before did not serve, and
    every result is checked the same way before it is offered. Falling back to
    the model as given after a simplifier failed is warned about.
    """
    from byoc.pipeline.frontend.matmul_nbits import IMPORTED_CONTRIB_OPS

    if any(n.domain not in ("", "ai.onnx") and (n.domain, n.op_type) not in IMPORTED_CONTRIB_OPS
           for n in model.graph.node):
        # Custom-domain ops cannot be evaluated by the simplifiers, and TVM's importer
        # rejects them anyway (frontend._check_supported_ops names them). onnxruntime's
        # MatMulNBits, which byoc imports, onnxruntime (onnxsim's evaluator) runs.
        yield None, ""
        return
    problems = []
    for tool, run in (("onnxsim", _run_onnxsim), ("onnxslim", _run_onnxslim)):
        tool = f"{tool} {_version(tool)}"
        try:
            # The simplifiers print progress and warn on their own, from Python and from C++
            # (onnxsim's "WARNING: failed to run ... op" and the tracebacks of its onnxruntime
            # runs); a library must not: what they print is dropped, their errors are kept.
            with _output_silenced(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                simplified = run(model)
        except Exception as err:  # noqa: BLE001 - the simplifiers raise every kind of error
            problems.append(f"{tool}: {first_line(err)}")
            continue
        checked, problem = _accepted(model, simplified)
        if problem:
            problems.append(f"{tool}: {problem}")
        else:
            yield (checked, tool) if _changed(model, checked) else (None, "")
    if problems:
        _fallback("; ".join(problems))
    yield None, ""


#: held while a stage swaps process-wide state to keep a tool quiet (sys.stdout and stderr, their file
#: descriptors, the warning filters): two threads preparing or importing at once would restore each other's
#: swaps (a thread's StringIO left as sys.stdout), so such stages take turns.
QUIET_LOCK = threading.RLock()


@contextlib.contextmanager
def _output_silenced():
    """Send what this process writes to stdout and stderr, Python and native code alike, to nowhere.

    The file descriptors are process-wide, so output of other threads in the
    meantime is dropped too; the simplifiers take well under a minute.
    """
    with QUIET_LOCK:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        try:
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                os.dup2(null.fileno(), 1)
                os.dup2(null.fileno(), 2)
                yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _run_onnxsim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxsim

    # The optimizer passes meet more unusual graphs than constant folding does,
    # so a failure is retried with folding alone.
    try:
        return _onnxsim_pass(onnxsim, model, optimize=True)
    except Exception:  # noqa: BLE001 - retried once, without the optimizer
        return _onnxsim_pass(onnxsim, model, optimize=False)


def _onnxsim_pass(onnxsim, model: onnx.ModelProto, optimize: bool) -> onnx.ModelProto:
    simplified, _ = onnxsim.simplify(
        _loosened(model),
        check_n=0,  # byoc.tools.verify compares the build with onnxruntime on the user's model
        perform_optimization=optimize,
        skip_fuse_bn=default_opset(model) >= _FUSE_BN_BELOW_OPSET,
        skipped_optimizers=list(_SKIPPED_PASSES) + (_SKIPPED_WHEN_SYMBOLIC if _has_symbolic_inputs(model) else []),
        include_subgraph=True,
        certify=False,
    )
    return simplified


def _run_onnxslim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxslim
    from onnxslim.core.pattern.registry import DEFAULT_FUSION_PATTERNS

    # Folding and no-op removal only: its fusion patterns merge the user's nodes (as the skipped onnxsim passes).
    fusions = [name for name in DEFAULT_FUSION_PATTERNS if name.startswith("Fusion")]
    return onnxslim.slim(_loosened(model, output_shapes=False), skip_fusion_patterns=fusions)


def _accepted(model: onnx.ModelProto, simplified: onnx.ModelProto) -> tuple[onnx.ModelProto | None, str]:
    """``simplified`` shape-inferred, or None and why it cannot replace ``model``."""
    problem = _refuse(model, simplified)
    if problem:
        return None, problem
    try:
        return shape_inference.infer_shapes(simplified, strict_mode=True), ""
    except Exception as err:  # noqa: BLE001 - onnx raises several private error types here
        # A model that only passes non-strict inference (frontend._check accepts it
        # with a warning) may stay so; one that passed strict must still pass.
        if _strict_ok(model):
            return None, f"shape inference failed on its result: {first_line(err)}"
        try:
            return shape_inference.infer_shapes(simplified), ""
        except Exception as again:  # noqa: BLE001 - as above
            return None, f"shape inference failed on its result: {first_line(again)}"


def _strict_ok(model: onnx.ModelProto) -> bool:
    try:
        shape_inference.infer_shapes(model, strict_mode=True)
    except Exception:  # noqa: BLE001 - onnx raises several private error types here
        return False
    return True


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _fallback(why: str) -> None:
    warnings.warn(f"model preparation failed ({why}); the model is imported as given, without folding",
                  stacklevel=4)


def _signature(graph: onnx.GraphProto) -> tuple[list, list]:
    initializers = {t.name for t in graph.initializer}
    inputs = [(vi.name, vi.type.SerializeToString()) for vi in graph.input if vi.name not in initializers]
    outputs = [vi.name for vi in graph.output]
    return inputs, outputs


def _refuse(model: onnx.ModelProto, simplified: onnx.ModelProto) -> str:
    """Why ``simplified`` cannot replace ``model`` ("" when it can)."""
    (ins, outs), (new_ins, new_outs) = _signature(model.graph), _signature(simplified.graph)
    if [n for n, _ in new_ins] != [n for n, _ in ins] or new_outs != outs:
        return "it changed the model's input or output names"
    if new_ins != ins:
        return "it changed an input's type or shape"
    try:
        onnx.checker.check_model(simplified)
    except (onnx.checker.ValidationError, ValueError) as err:
        return f"its result fails onnx.checker: {first_line(err)}"
    return ""


def _changed(model: onnx.ModelProto, simplified: onnx.ModelProto) -> bool:
    def key(graph):
        return [(n.op_type, tuple(n.input), tuple(n.output)) for n in graph.node]
    return key(model.graph) != key(simplified.graph) or len(model.graph.initializer) != len(
        simplified.graph.initializer)

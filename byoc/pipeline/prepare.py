"""Prepare a checked ONNX model for TVM's importer, and remember what became of each node.

Real models carry what TVM's importer cannot take or takes badly: shape
computations (Shape -> Gather -> Concat) feeding Reshape, opset<=12
BatchNormalization after a Conv, ``If`` on a constant, Identity and Dropout,
weights made by ConstantOfShape. With the static input shapes applied, all of
that is computable at compile time. :func:`prepare` checks quantization
parameters and rewrites QOperator nodes as QDQ units
(:mod:`byoc.pipeline.quantized`), folds the rest with onnx-simplifier
(``onnxsim``, chosen by measurement: docs/design.md, "Model preparation"),
then unrolls recurrent ops (:mod:`byoc.pipeline.recurrent`).

Preparation never changes what the model computes and never loses the
user's names: if the simplifier fails, or its result fails the checker or
renames an input or output, :func:`prepare` warns and keeps the model as it
was. Reports must keep naming the user's nodes, so the result carries
``origin`` (prepared node -> user node) and ``fate`` (user node -> what became
of it when it is not imported as itself).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from importlib import metadata

import onnx
from onnx import numpy_helper, shape_inference

from byoc.errors import ModelLoadError, first_line
from byoc.pipeline.onnx_model import name_nodes

__all__ = ["Prepared", "prepare", "SIMPLIFIER"]

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

_IDENTITIES = {"Identity", "Dropout"}
# Ops a Conv absorbs when the simplifier fuses them into it.
_FUSABLE = {"BatchNormalization"}

# onnx-optimizer passes that merge several of the user's compute nodes into one
# (MatMul+Add -> Gemm, Pad+Conv, Q/K/V projections, duplicate subexpressions).
# They are not needed to import a model, and each one would hide a user's node
# from the reports; byoc only folds what is computable at compile time,
# removes no-ops, and fuses opset<=12 BatchNormalization into its Conv. Passes
# not listed that merge nodes (onnxsim 0.8's fuse_matmul_add_bias_into_gemm_batched
# for a MatMul on rank-3 activations, fuse_gelu) are reported as merges (_merges).
_SKIPPED_PASSES = [
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


@dataclass
class Prepared:
    """The result of :func:`prepare`.

    ``model`` is the graph to import (a new ModelProto; the one passed in is
    not modified). ``origin`` maps every node name of ``model`` to the user's
    node it comes from. ``fate`` maps user node names to what became of them,
    for every user node not imported as itself (folded, fused, removed,
    decomposed). ``simplifier`` names the tool and version that ran, or is
    empty when the model was kept as given.
    """

    model: onnx.ModelProto
    origin: dict[str, str] = field(default_factory=dict)
    fate: dict[str, str] = field(default_factory=dict)
    simplifier: str = ""


def prepare(model: onnx.ModelProto) -> Prepared:
    """Rewrite QOperator nodes as QDQ, fold what is computable at compile time and unroll recurrent ops.

    ``model`` is byoc's checked, shape-inferred copy with static input shapes.
    Returns a :class:`Prepared` whose ``model`` computes the same outputs
    under the same input and output names.
    """
    from byoc.host.compiler import quiet_in_range_take
    from byoc.pipeline.qdq_form import (dequantized_constants_outside_units, held_integer_constants, restore_held,
                                        unshared_dequantize, untransposed_gemm_weights)
    from byoc.pipeline.quantized import check_quantization, rewrite_qoperators
    from byoc.pipeline.strided_views import as_strided_reshapes

    quiet_in_range_take()  # the import's FoldConstant legalizes takes too
    check_quantization(model)
    user = model
    source, quantized_from = rewrite_qoperators(user)
    # Integer weights stay integer through folding: a vendor takes DQ(w) -> Conv as an int8 conv.
    foldable, held = held_integer_constants(source)
    foldable, strided = as_strided_reshapes(_dropouts_as_identity(foldable))
    failure = None
    for simplified, tool in _candidates(foldable):
        if simplified is None:
            prepared = source  # read-only from here on; no copy of a model's weights for nothing
            origin = {n.name: n.name for n in source.graph.node}
        else:
            prepared = simplified
            restore_held(prepared, held)
            name_nodes(prepared.graph, unnamed="{op_type}_prepared_{index}")  # a simplifier may add unnamed ones
            origin = _origin(source.graph, prepared.graph)
        try:
            prepared, origin, decomposed = _unroll_recurrent(prepared, origin)
        except ModelLoadError as err:
            # A recurrent op whose shapes one tool's folding left unknown (in an If branch)
            # may unroll after another's: the next candidate gets its turn.
            failure = failure or err
            continue
        prepared, copies = unshared_dequantize(prepared)
        prepared = dequantized_constants_outside_units(untransposed_gemm_weights(prepared))
        origin.update({copy: origin.get(original, original) for copy, original in copies.items()})
        present = {n.name for n in prepared.graph.node}
        origin = {name: user for name, user in origin.items() if name in present}  # a folded DQ is gone
        fate = _fates(source.graph, prepared.graph, origin)
        fate.update(strided)
        if quantized_from:
            origin, fate, rewritten = _through_rewrite(prepared, origin, fate, quantized_from)
            decomposed.update(rewritten)
        for name, count in decomposed.items():
            fate[name] = f"decomposed into {count} op{'s' if count != 1 else ''}"
        return Prepared(prepared, origin, fate, tool)
    raise failure


def _dropouts_as_identity(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each inference-mode Dropout of its main graph an Identity (of the same name), for the simplifier.

    At inference a Dropout passes its input through (ONNX: unless a
    ``training_mode`` input says otherwise), whatever its ratio; but the
    simplifiers remove only a Dropout of ratio 0, which changes nothing in
    training either. One left in the graph splits partitions (TVM imports it as
    ``relax.nn.dropout``). Kept: a Dropout whose mask is read, or whose
    ``training_mode`` is not a constant false. ``model`` itself when nothing
    changes (no copy).
    """
    graph = model.graph
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    constants = {t.name: t for t in graph.initializer}

    def at_inference(node: onnx.NodeProto) -> bool:
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or not node.input or not node.input[0]:
            return False
        if len(node.output) > 1 and node.output[1] in read:
            return False
        mode = node.input[2] if len(node.input) > 2 else ""
        return not mode or (mode in constants and not numpy_helper.to_array(constants[mode]).any())

    if not any(at_inference(n) for n in graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if at_inference(node):
            output = node.output[0]
            node.op_type, node.domain = "Identity", ""
            del node.input[1:], node.output[:], node.attribute[:]
            node.output.append(output)
    return out


def _through_rewrite(prepared: onnx.ModelProto, origin: dict[str, str], fate: dict[str, str],
                     made_from: dict[str, str]):
    """origin and fate in the user's names, for a model whose QOperator nodes were rewritten first.

    ``made_from`` maps each node of the rewrite to the QOperator node it came
    from; returns the origin and fate translated, and the number of imported
    ops per QOperator node (its "decomposed into" count).
    """
    origin = {name: made_from.get(source, source) for name, source in origin.items()}
    fate = {name: why for name, why in fate.items() if name not in made_from}
    counts: dict[str, int] = {}
    imported = {n.name for n in prepared.graph.node}
    rewritten = set(made_from.values())
    for name, source in origin.items():
        if name in imported and source in rewritten:
            counts[source] = counts.get(source, 0) + 1
    return origin, fate, counts


def _unroll_recurrent(model: onnx.ModelProto, origin: dict[str, str]):
    """LSTM/GRU/RNN unrolled into plain ops (TVM's importer has none of them).

    Runs after folding because the unrolling needs static shapes. Returns the
    model, the updated origin and, per user node, how many ops it became.
    """
    from byoc.pipeline.recurrent import RECURRENT_OPS, decompose_recurrent, graphs

    if not any(n.op_type in RECURRENT_OPS for sub in graphs(model.graph) for n in sub.node):
        return model, origin, {}
    unrolled, made_from = decompose_recurrent(model)
    if not made_from:
        return model, origin, {}
    names = {n.name for n in unrolled.graph.node}
    counts: dict[str, int] = {}
    for new_name, recurrent_name in made_from.items():
        user_name = origin.get(recurrent_name, recurrent_name)
        if new_name in names:  # nodes of If/Loop bodies are not the main graph's
            origin[new_name] = user_name
            counts[user_name] = counts.get(user_name, 0) + 1
    origin = {name: user for name, user in origin.items() if name in names}
    for node in unrolled.graph.node:
        origin.setdefault(node.name, node.name)
    return unrolled, origin, counts


# -- simplifying -------------------------------------------------------------------------
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


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _candidates(model: onnx.ModelProto):
    """``(simplified model, tool)`` to try in order, last ``(None, "")``: the model as given.

    onnxsim first (with its optimizer passes, then folding alone), then
    onnxslim, which folds graphs onnxsim leaves or breaks on (silero VAD's
    shape-dependent ``If`` branches around an LSTM; measured in
    docs/design.md). Each is run only when the one before did not serve, and
    every result is checked the same way before it is offered. Falling back to
    the model as given after a simplifier failed is warned about.
    """
    if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        # Custom-domain ops cannot be evaluated by the simplifiers, and TVM's importer
        # rejects them anyway (frontend._check_supported_ops names them).
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
        skip_fuse_bn=_opset(model) >= _FUSE_BN_BELOW_OPSET,
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


# -- names -------------------------------------------------------------------------------
def _origin(user: onnx.GraphProto, prepared: onnx.GraphProto) -> dict[str, str]:
    """Prepared node name -> the user node it comes from.

    By name first (the simplifier keeps the names of the nodes it keeps:
    measured), then by the weights it reads (a rewrite that merged user nodes,
    MatMul + Add -> Gemm, hands the new node their weights under their names;
    the node comes from the merged node of its own op type, else from the
    first one), then by output tensor name (a rewrite that renamed the node
    still writes the tensor the user's node wrote: the node that tensor's
    writer was merged into, or a user node of the same op type up the
    producer chain, as a Conv that absorbed a BatchNormalization writes the
    BN's output), then by the data input it reads (two Reshapes merged into
    one read the first one's input). A node with none of these belongs to the
    node that consumes its result, like a helper of TVM's importer.
    """
    users = {n.name: n for n in user.node}
    producer = {out: n for n in user.node for out in n.output if out}
    merged = _merged_readers(user, prepared)
    origin: dict[str, str] = {}
    merged_into: dict[str, str] = {}
    for node in prepared.node:
        same = users.get(node.name)
        if same is not None and same.op_type == node.op_type:
            origin[node.name] = node.name
        elif node.name in merged:
            group = merged[node.name]
            origin[node.name] = next((n for n in group if users[n].op_type == node.op_type), group[0])
            for name in group:
                merged_into.setdefault(name, origin[node.name])
    gone = {n.name for n in user.node} - set(origin)
    readers: dict[tuple[str, int], list[onnx.NodeProto]] = {}
    for node in user.node:
        for slot, name in enumerate(node.input):
            readers.setdefault((name, slot), []).append(node)
    for node in prepared.node:
        if node.name in origin:
            continue
        source = next((producer[out] for out in node.output if out in producer), None)
        if source is not None:
            origin[node.name] = merged_into.get(source.name) or _same_kind_upstream(source, node.op_type, producer)
            continue
        same_job = next((r.name for slot, name in enumerate(node.input) for r in readers.get((name, slot), ())
                         if r.op_type == node.op_type and r.name in gone), None)
        if same_job is not None:
            origin[node.name] = same_job
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in prepared.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in reversed(prepared.node):
        if node.name not in origin:
            origin[node.name] = _by_position(node, consumers, users, producer, origin) or node.name
    return origin


def _static_tensors(graph: onnx.GraphProto) -> set[str]:
    """The tensors of ``graph`` computable at compile time with static shapes: weights, constants, shapes."""
    static = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type in ("Shape", "Size") or all(name in static for name in node.input if name):
            static.update(out for out in node.output if out)
    return static


def _merged_readers(user: onnx.GraphProto, prepared: onnx.GraphProto) -> dict[str, list[str]]:
    """Prepared node name -> the user nodes merged into it, for the nodes a rewrite made of several.

    Such a node reads the merged nodes' weights under their names (a Gemm
    made of a MatMul and its bias Add reads the MatMul's weight and the Add's
    bias). The merged nodes are the user nodes gone from ``prepared`` that
    read one of them, in input order; nodes that only read what is
    computable at compile time are folded, not merged.
    """
    kept = {n.name for n in prepared.node}
    static = _static_tensors(user)
    weights = {t.name for t in user.initializer} | {
        out for n in user.node if n.op_type == "Constant" for out in n.output}
    readers: dict[str, list[str]] = {}
    for node in user.node:
        if node.name in kept or all(name in static for name in node.input if name):
            continue
        for name in node.input:
            if name in weights:
                readers.setdefault(name, []).append(node.name)
    user_names = {n.name for n in user.node}
    merged: dict[str, list[str]] = {}
    for node in prepared.node:
        group = [reader for name in node.input for reader in readers.get(name, ())]
        if node.name not in user_names and group:
            merged[node.name] = list(dict.fromkeys(group))
    return merged


def _by_position(node, consumers, users, producer, origin) -> str | None:
    """The user node whose tensor ``node``'s result replaced, or its consumer's origin.

    A reader that is still the user's node reads ``node``'s result in the
    input slot where it read the user's tensor; that tensor's producer is the
    user node this one stands for (a branch of an ``If`` on a constant,
    inlined under a new name, stands for the ``If``).
    """
    fallback = None
    for out in node.output:
        for reader in consumers.get(out, ()):
            user_reader = users.get(reader.name)
            if user_reader is not None and user_reader.op_type == reader.op_type:
                for slot, name in enumerate(reader.input):
                    if name == out and slot < len(user_reader.input):
                        source = producer.get(user_reader.input[slot])
                        if source is not None:
                            return source.name
            fallback = fallback or origin.get(reader.name)
    return fallback


def _same_kind_upstream(node: onnx.NodeProto, op_type: str, producer) -> str:
    """``node``'s name, or the nearest producer up its first inputs with ``op_type``."""
    seen, current = 0, node
    while current is not None and seen < 8:
        if current.op_type == op_type:
            return current.name
        current = producer.get(current.input[0]) if current.input else None
        seen += 1
    return node.name


def _fates(user: onnx.GraphProto, prepared: onnx.GraphProto, origin: dict[str, str]) -> dict[str, str]:
    """User node -> what became of it, for the user nodes no prepared node comes from."""
    kept = set(origin.values())
    op_of = {n.name: n.op_type for n in user.node}
    constants = {t.name for t in prepared.initializer}
    constants |= {out for n in prepared.node if n.op_type == "Constant" for out in n.output}
    made_by = {out: n for n in prepared.node for out in n.output if out}
    graph_outputs = {o.name for o in user.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in user.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    producer = {out: n for n in user.node for out in n.output if out}

    by_name = {n.name: n for n in prepared.node}

    def read_as_constant(reader: onnx.NodeProto, tensor: str) -> bool:
        """Whether ``reader`` (a user node) now reads a constant where it read ``tensor``.

        The simplifier names the constants it makes itself, so the tensor is
        found by its position among the prepared node's inputs.
        """
        if folded.get(reader.name, False):
            return True
        now = by_name.get(reader.name)
        if now is None or now.op_type != reader.op_type:
            return False
        slots = [i for i, name in enumerate(reader.input) if name == tensor]
        return all(i < len(now.input) and now.input[i] in constants for i in slots)

    # A node is folded when each of its results became a constant, or vanished
    # and everything that used it now reads a constant or was folded too
    # (reverse order: consumers first).
    folded: dict[str, bool] = {}
    for node in reversed(user.node):
        if node.name in kept:
            continue
        outs = [o for o in node.output if o]
        folded[node.name] = bool(outs) and all(
            o in constants or (o not in made_by and o not in graph_outputs and all(
                read_as_constant(c, o) for c in consumers.get(o, ())))
            for o in outs)

    merges = _merges(user, prepared, origin)
    static = _static_tensors(user)

    def passes_through(node: onnx.NodeProto) -> bool:
        """Whether whatever read ``node``'s result now reads its one data input: it was a no-op.

        A graph output keeps its name, so there the node that wrote the data
        input, unchanged, now writes the output.
        """
        data = [name for name in node.input if name and name not in static]
        if len(data) != 1:
            return False
        # The data's writer must be unchanged: a Conv that absorbed a BatchNormalization
        # writes the tensor the BN read too, with other weights.
        writer = producer.get(data[0])
        writer_now = by_name.get(writer.name) if writer is not None else None
        if writer is not None and (writer_now is None or (writer_now.op_type, list(writer_now.input)) != (
                writer.op_type, list(writer.input))):
            return False

        def same_data(name: str) -> bool:
            return name == data[0] or (writer_now is not None and made_by.get(name) is writer_now)

        for out in (o for o in node.output if o):
            if out in graph_outputs and not same_data(out):
                return False
            for reader in consumers.get(out, ()):
                now = by_name.get(reader.name)
                if now is None or now.op_type != reader.op_type:
                    return False
                if not all(i < len(now.input) and same_data(now.input[i])
                           for i, name in enumerate(reader.input) if name == out):
                    return False
        return True

    fate: dict[str, str] = {}
    for node in user.node:
        if node.name in kept:
            if node.name in merges:  # the node the made one is reported as
                fate[node.name] = merges[node.name]
            continue
        outs = [o for o in node.output if o]
        used = any(consumers.get(o) or o in graph_outputs for o in outs)
        if not used:
            fate[node.name] = "removed: its result is not used"
        elif folded[node.name]:
            fate[node.name] = "folded into a constant"
        elif node.op_type in _IDENTITIES:
            fate[node.name] = f"removed: {node.op_type} passes its input through at inference"
        elif passes_through(node):
            fate[node.name] = "removed: a no-op for these shapes"
        elif node.name in merges:
            fate[node.name] = merges[node.name]
        else:
            # A rewrite that took the node over writes its tensor; a BatchNormalization
            # fused into its Conv leaves the Conv writing the Conv's own tensor.
            into = next((origin[made_by[o].name] for o in outs if o in made_by), None)
            if into is None and node.op_type in _FUSABLE:
                data = next((producer[i] for i in node.input if i in producer), None)
                into = data.name if data is not None and data.name in kept else None
            if into is not None and into != node.name:
                fate[node.name] = f"fused into {op_of.get(into, 'the node')} `{into}`"
            elif node.op_type in ("Constant", "ConstantOfShape"):
                fate[node.name] = "folded into a constant"
            else:
                fate[node.name] = "removed by the simplifier's rewrites"
    # User nodes that live on only as other ops (an If on a constant as its branch).
    became: dict[str, list[str]] = {}
    for node in prepared.node:
        became.setdefault(origin.get(node.name, node.name), []).append(node.op_type)
    for node in user.node:
        ops = became.get(node.name)
        if ops and node.op_type not in ops and node.name not in merges:
            listing = ", ".join(dict.fromkeys(ops))
            if node.op_type == "If":
                fate[node.name] = f"If on a constant condition: replaced by the branch it takes ({listing})"
            else:
                fate[node.name] = f"rewritten as {listing}"
    return fate


def _merges(user: onnx.GraphProto, prepared: onnx.GraphProto, origin: dict[str, str]) -> dict[str, str]:
    """User node -> "merged into a Gemm with Add `add`", for the user nodes a rewrite merged into one node.

    A node made by the simplifier (a name no user node has) stands for the
    user node ``origin`` gives and for the nodes whose weights it reads
    (:func:`_merged_readers`); with them go the nodes between them that are
    gone too, joined by tensors the prepared graph no longer has (the Div,
    Erf, Add and Mul of a Gelu). Nodes whose weights a made node reads are
    named first, so the Reshapes put around a Gemm are not taken for it.
    """
    op_of = {n.name: n.op_type for n in user.node}
    order = {n.name: i for i, n in enumerate(user.node)}
    present = {name for n in prepared.node for name in (*n.input, *n.output)}
    gone_nodes = {n.name for n in user.node} - set(origin.values())
    static = _static_tensors(user)
    writer = {out: n.name for n in user.node for out in n.output if out}
    readers: dict[str, list[str]] = {}
    for node in user.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.name)
    by_name = {n.name: n for n in user.node}
    between = {name for name in writer if name not in present and name not in static}

    def joined(start: list[str]) -> list[str]:
        seen, todo = list(dict.fromkeys(start)), list(start)
        while todo:
            node = by_name[todo.pop()]
            if node.op_type in _IDENTITIES:
                continue
            near = [writer[i] for i in node.input if i in between]
            near += [r for o in node.output if o in between for r in readers.get(o, ())]
            for name in near:
                if name in gone_nodes and name not in seen and by_name[name].op_type not in _IDENTITIES:
                    seen.append(name)
                    todo.append(name)
        return seen

    merged = _merged_readers(user, prepared)
    made = [n for n in prepared.node if n.name not in op_of]
    prepared_names = {n.name for n in prepared.node}
    merges: dict[str, str] = {}
    for node in sorted(made, key=lambda n: n.name not in merged):
        start = [origin.get(node.name, node.name)] + merged.get(node.name, [])
        if not all(name in op_of for name in start):
            continue
        together = joined(start) if start[0] not in prepared_names else []
        together = together[:1] + sorted(together[1:], key=order.get)
        if len(together) < 2:
            continue
        for name in together:  # the node it is reported as first, so the others share one text
            others = [f"{op_of[o]} `{o}`" for o in together if o != name]
            if len(others) > 2:
                others = [others[0], f"{len(others) - 1} other nodes"]
            merges.setdefault(name, f"merged into a {node.op_type} with {' and '.join(others)}")
    return merges

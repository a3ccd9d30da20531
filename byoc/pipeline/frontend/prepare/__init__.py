"""Prepare a checked ONNX model for TVM's importer, and remember what became of each node.

Real models carry what TVM's importer cannot take or takes badly: shape
computations (Shape -> Gather -> Concat) feeding Reshape, opset<=12
BatchNormalization after a Conv, ``If`` on a constant, Identity and Dropout,
weights made by ConstantOfShape. With the static input shapes applied, all of
that is computable at compile time. :func:`prepare` checks quantization
parameters, rewrites a float16/bfloat16 model to compute in float32
(:mod:`byoc.pipeline.frontend.prepare.half_precision`: no vendor takes half
precision, and the CPUs byoc targets have no arithmetic for it), rewrites QOperator nodes as QDQ units
(:mod:`byoc.pipeline.frontend.prepare.qoperators`) and onnxruntime's ``com.microsoft`` ops as the standard ops
that compute the same (:mod:`byoc.pipeline.frontend.prepare.contrib_ops`; both through
:mod:`~byoc.pipeline.frontend.prepare.node_rewrite`), writes ``auto_pad`` out as ``pads`` where it is known
(:mod:`~byoc.pipeline.frontend.prepare.explicit_pads`), folds the rest with onnx-simplifier
(``onnxsim``, chosen by measurement: docs/design.md, "Model preparation";
:mod:`~byoc.pipeline.frontend.prepare.simplify`),
then unrolls recurrent ops (:mod:`byoc.pipeline.frontend.prepare.recurrent`).

Preparation never changes what the model computes and never loses the
user's names: if the simplifier fails, or its result fails the checker or
renames an input or output, :func:`prepare` warns and keeps the model as it
was. Reports must keep naming the user's nodes, so the result carries
``origin`` (prepared node -> user node) and ``fate`` (user node -> what became
of it when it is not imported as itself), worked out by
:mod:`~byoc.pipeline.frontend.prepare.provenance`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import onnx
from onnx import numpy_helper

from byoc.errors import ModelLoadError
from byoc.pipeline.frontend.onnx_model import CONSTANT_VALUE_FORMS, constant_node_value, name_nodes
from byoc.pipeline.frontend.prepare.provenance import fates, origin_map
from byoc.pipeline.frontend.prepare.simplify import SIMPLIFIER, candidates

__all__ = ["Prepared", "prepare", "SIMPLIFIER"]


@dataclass
class Prepared:
    """The result of :func:`prepare`.

    ``model`` is the graph to import (a new ModelProto; the one passed in is
    not modified). ``origin`` maps every node name of ``model`` to the user's
    node it comes from. ``fate`` maps user node names to what became of them,
    for every user node not imported as itself (folded, fused, removed,
    decomposed). ``simplifier`` names the tool and version that ran, or is
    empty when the model was kept as given. ``unfolded`` is what to import
    when ``model`` does not: the model as given, with the one rewrite it
    cannot do without (a float16/bfloat16 model computed in float32;
    ``fate`` then says what became of the Casts that rewrite removed), or
    None when that is the model as given.
    """

    model: onnx.ModelProto
    origin: dict[str, str] = field(default_factory=dict)
    fate: dict[str, str] = field(default_factory=dict)
    simplifier: str = ""
    unfolded: Optional["Prepared"] = None


def prepare(model: onnx.ModelProto) -> Prepared:
    """Compute half precision in float32, rewrite QOperator nodes as QDQ, fold what is computable at compile time
    and unroll recurrent ops.

    ``model`` is byoc's checked, shape-inferred copy with static input shapes.
    Returns a :class:`Prepared` whose ``model`` computes the same outputs
    under the same input and output names.
    """
    from byoc.pipeline.frontend.prepare.qdq_form import (
        dequantized_constants_outside_units,
        gathered_before_dequantize,
        held_integer_constants,
        restore_held,
        unshared_dequantize,
        unshared_dynamic_quantize,
        untransposed_gemm_weights,
    )
    from byoc.pipeline.frontend.prepare.half_precision import compute_in_float32
    from byoc.pipeline.frontend.prepare.contrib_ops import CONTRIB_OPS
    from byoc.pipeline.frontend.prepare.control_flow import unroll_control_flow
    from byoc.pipeline.frontend.prepare.explicit_pads import explicit_pads
    from byoc.pipeline.frontend.prepare.function_ops import expand_function_ops
    from byoc.pipeline.frontend.prepare.node_rewrite import rewrite_nodes
    from byoc.pipeline.frontend.prepare.qoperators import QOPERATOR_OPS, check_quantization
    from byoc.pipeline.frontend.prepare.standard_ops import standard_rewrites
    from byoc.pipeline.frontend.prepare.strided_views import as_strided_reshapes

    check_quantization(model)
    user = model
    # Half precision first: every later step (and the simplifier's folding) sees a float32 graph. The Casts it
    # adds at the edges are named by it and stand for no user node; the Casts it removes get their fate here.
    widened, widened_fate = compute_in_float32(user)
    added = {n.name for n in widened.graph.node} - {n.name for n in user.graph.node}
    # QOperator nodes and onnxruntime's contrib ops become the standard ops that compute the same.
    source, quantized_from = rewrite_nodes(widened, {**QOPERATOR_OPS, **CONTRIB_OPS,
                                                     **standard_rewrites(widened.graph)})
    # Keras exports' "same" padding as pads where it is known: TVM's importer works it out with int() on sizes.
    source = explicit_pads(source)
    # Loops and Scans whose trip counts are constants already unroll before folding, which then folds their
    # iteration numbers; the rest get their turn after it (_unrolled).
    source, unrolled_from = unroll_control_flow(source)
    # ONNX ops TVM lacks that ONNX defines by a function (SoftmaxCrossEntropyLoss, opset 23's Attention): inlined.
    source, expanded_from = expand_function_ops(source)
    source = _constants_as_tensors(source)
    for made in (unrolled_from, expanded_from):
        quantized_from.update({name: quantized_from.get(node, node) for name, node in made.items()})
    source, gathered_from = gathered_before_dequantize(source)
    quantized_from.update({name: quantized_from.get(node, node) for name, node in gathered_from.items()})
    # Integer weights stay integer through folding: a vendor takes DQ(w) -> Conv as an int8 conv.
    foldable, held = held_integer_constants(source)
    foldable, strided = as_strided_reshapes(_dropouts_as_identity(foldable))
    failure = None
    for simplified, tool in candidates(foldable):
        if simplified is None:
            prepared = source  # read-only from here on; no copy of a model's weights for nothing
            origin = {n.name: n.name for n in source.graph.node}
        else:
            prepared = simplified
            restore_held(prepared, held)
            name_nodes(prepared.graph, unnamed="{op_type}_prepared_{index}")  # a simplifier may add unnamed ones
            origin = origin_map(source.graph, prepared.graph)
        try:
            prepared, origin, decomposed = _unrolled(prepared, origin, _recurrent_unrolled)
            prepared, origin, looped = _unrolled(prepared, origin, _control_flow_unrolled)
            decomposed.update(looped)
        except ModelLoadError as err:
            # A recurrent op whose shapes one tool's folding left unknown (in an If branch)
            # may unroll after another's: the next candidate gets its turn.
            failure = failure or err
            continue
        prepared, copies = unshared_dequantize(prepared)
        prepared, dynamic_copies = unshared_dynamic_quantize(prepared)
        copies.update(dynamic_copies)
        prepared = dequantized_constants_outside_units(untransposed_gemm_weights(prepared))
        origin.update({copy: origin.get(original, original) for copy, original in copies.items()})
        present = {n.name for n in prepared.graph.node}
        origin = {name: user for name, user in origin.items() if name in present}  # a folded DQ is gone
        fate = fates(source.graph, prepared.graph, origin)
        fate.update(strided)
        if quantized_from:
            origin, fate, rewritten = _through_rewrite(prepared, origin, fate, quantized_from)
            decomposed.update(rewritten)
        for name, count in decomposed.items():
            fate[name] = f"decomposed into {count} op{'s' if count != 1 else ''}"
        fate = {name: why for name, why in fate.items() if name not in added}
        fate.update(widened_fate)
        unfolded = None if widened is user else Prepared(widened, {n.name: n.name for n in widened.graph.node},
                                                         widened_fate)
        return Prepared(prepared, origin, fate, tool, unfolded)
    raise failure


def _constants_as_tensors(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each Constant of its main graph given as ``value_float(s)`` or ``value_int(s)`` (ONNX's
    functions write them so) given as its ``value`` tensor, the one form TVM's importer reads. ``model`` itself
    when there is none (no copy)."""
    def other_form(node: onnx.NodeProto) -> bool:
        return (node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and any(a.name in CONSTANT_VALUE_FORMS for a in node.attribute))

    def as_tensor(node: onnx.NodeProto) -> None:
        value = constant_node_value(node)
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(value)))

    return _nodes_changed(model, other_form, as_tensor)


def _nodes_changed(model: onnx.ModelProto, applies, change) -> onnx.ModelProto:
    """A copy of ``model`` with ``change(node)`` done, in place, on each node of its main graph ``applies`` to;
    ``model`` itself when it applies to none (no copy of a model's weights for nothing)."""
    if not any(applies(n) for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if applies(node):
            change(node)
    return out


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

    def as_identity(node: onnx.NodeProto) -> None:
        output = node.output[0]
        node.op_type, node.domain = "Identity", ""
        del node.input[1:], node.output[:], node.attribute[:]
        node.output.append(output)

    return _nodes_changed(model, at_inference, as_identity)


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


def _recurrent_unrolled(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """LSTM/GRU/RNN unrolled into plain ops (TVM's importer has none of them), and where each new node comes from."""
    from byoc.pipeline.frontend.onnx_model import all_graphs
    from byoc.pipeline.frontend.prepare.recurrent import decompose_recurrent, is_recurrent

    if not any(is_recurrent(n) for sub in all_graphs(model.graph) for n in sub.node):
        return model, {}
    return decompose_recurrent(model)


def _control_flow_unrolled(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Loop and Scan unrolled where folding made their trip counts constants; the others refused by name."""
    from byoc.pipeline.frontend.prepare.control_flow import unroll_control_flow

    return unroll_control_flow(model, required=True)


def _unrolled(model: onnx.ModelProto, origin: dict[str, str], unroll):
    """``model`` with the ops ``unroll`` takes unrolled (recurrent layers, loops: TVM's importer has none of them).

    Runs after folding because the unrolling needs static shapes and constant
    trip counts. Returns the model, the updated origin and, per user node, how
    many ops it became.
    """
    unrolled, made_from = unroll(model)
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

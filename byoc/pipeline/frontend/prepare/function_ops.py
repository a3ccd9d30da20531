"""ONNX ops TVM's importer lacks, replaced by the function ONNX defines them by.

Many ONNX ops are defined in the standard itself as a function of other ops:
SoftmaxCrossEntropyLoss as LogSoftmax and NegativeLogLikelihoodLoss, opset
23's Attention as MatMul, Softmax and MatMul, RotaryEmbedding, CenterCropPad,
Celu, Swish and the newer LinearAttention and CausalConvWithState. The
function is the op's definition (onnxruntime's kernels are tested against
it), so a node inlined as its function computes what the op does, and its
ops are ones the vendors' rules already know: an opset-23 attention becomes
the matmuls and softmax a dnnl partition takes.

A node is expanded when it is in ONNX's own domain, its schema at the model's
opset has a function (a plain one, or one ONNX builds for the node's
attributes and input types), and TVM's importer has no converter for it or
reads it as another op (TVM's ``Attention`` is onnxruntime's
``com.microsoft`` one), or converts only to its first output where a later
one is read (a LayerNormalization's mean). Ops TVM converts itself stay: its
converters keep the fused forms vendors take (a LayerNormalization whose
mean nobody reads stays one op). Expansion
repeats until no such node is left, as a function may use another
(SoftmaxCrossEntropyLoss uses NegativeLogLikelihoodLoss).

The inlined nodes are named ``<node>/<op type>_<i>``; :func:`expand_function_ops` says which node each came
from, for the reports.
"""

from __future__ import annotations

from typing import Optional

import onnx
from onnx import defs, helper

from byoc.pipeline.frontend.onnx_model import default_opset

__all__ = ["expand_function_ops"]

#: Standard ops whose names TVM's importer gives to another op's converter (onnxruntime's contrib op).
READ_AS_ANOTHER_OP = frozenset({"Attention"})
#: Ops TVM converts to their first output only: expanded where a later output (LayerNorm's mean) is read.
FIRST_OUTPUT_ONLY = frozenset({"LayerNormalization"})


def _normalizes_every_axis(node: onnx.NodeProto, types: dict) -> bool:
    """An RMSNormalization over every axis (axis 0): TVM's rms_norm needs an axis it does not normalize."""
    rank = _rank(types.get(node.input[0]))
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), -1)
    return rank is not None and axis % rank == 0


#: Ops TVM converts, but not in the forms these say: expanded there.
TVM_FAILS_ON = {"RMSNormalization": _normalizes_every_axis}

_DOMAIN = "byoc.function_ops"  # the model-local functions this module inlines again at once
_ROUNDS = 4  # a function using an op that is itself a function, and so on


def expand_function_ops(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` with every node of its main graph that TVM cannot import, and ONNX defines by a function,
    replaced by that function's nodes; and each new node's name -> the node it replaces.

    ``model`` itself when there is no such node (no copy).
    """
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    converted = set(_get_convert_map()) - READ_AS_ANOTHER_OP - FIRST_OUTPUT_ONLY
    made_from: dict[str, str] = {}
    for _ in range(_ROUNDS):
        expanded = _expanded_once(model, converted)
        if expanded is None:
            break
        model, new = expanded
        made_from = {name: made_from.get(source, source) for name, source in made_from.items()}
        made_from.update({name: made_from.get(source, source) for name, source in new.items()})
    return model, made_from


def _function_of(node: onnx.NodeProto, opset: int, types: dict) -> Optional[onnx.FunctionProto]:
    """The function ONNX defines ``node``'s op by at ``opset``, for its attributes and input types; or None."""
    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    if schema.has_context_dependent_function:
        if any(name and name not in types for name in node.input):
            return None  # ONNX builds such a function from the input types: unknown, it cannot
        inputs = [(types[name] if name else onnx.TypeProto()).SerializeToString() for name in node.input]
        body = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), inputs)
    elif schema.has_function:
        body = schema.get_function_with_opset_version(opset)
    else:
        return None
    if not body:
        return None
    function = onnx.FunctionProto()
    function.ParseFromString(body)
    return function if function.node else None


def _expanded_once(model: onnx.ModelProto, converted: set) -> Optional[tuple[onnx.ModelProto, dict[str, str]]]:
    """One round: the nodes expandable now replaced, or None when there are none."""
    import onnx.inliner

    opset = default_opset(model)
    graph = model.graph
    read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}

    types: dict = {}

    def typed() -> dict:  # shape inference runs only for a model with a candidate
        if not types:
            types.update(_types(model))
        return types

    def expandable(node: onnx.NodeProto) -> bool:
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in TVM_FAILS_ON:
            return TVM_FAILS_ON[node.op_type](node, typed())
        if node.op_type in converted:
            return False
        return node.op_type not in FIRST_OUTPUT_ONLY or any(name in read for name in node.output[1:])

    functions: dict[int, onnx.FunctionProto] = {}
    for index, node in enumerate(graph.node):
        if expandable(node):
            function = _function_of(node, opset, typed())
            if function is not None:
                functions[index] = function
    if not functions:
        return None
    calls = onnx.ModelProto()
    calls.CopyFrom(model)
    for index, function in functions.items():
        node = calls.graph.node[index]
        function.domain, function.name = _DOMAIN, f"{node.op_type}_{index}"
        node.domain, node.op_type = function.domain, function.name
        calls.functions.append(function)
    calls.opset_import.append(helper.make_opsetid(_DOMAIN, 1))
    inlined = onnx.inliner.inline_local_functions(calls)
    # The inliner puts each call's nodes where the call was, in the function's order, and names none of them.
    expected = len(graph.node) + sum(len(f.node) - 1 for f in functions.values())
    if len(inlined.graph.node) != expected:
        return None
    made_from: dict[str, str] = {}
    position = 0
    for index, node in enumerate(graph.node):
        if index not in functions:
            position += 1
            continue
        for k, new in enumerate(inlined.graph.node[position:position + len(functions[index].node)]):
            new.name = f"{node.name}/{new.op_type}_{k}"
            made_from[new.name] = node.name
        position += len(functions[index].node)
    del inlined.opset_import[:]
    inlined.opset_import.extend(o for o in model.opset_import)
    return inlined, made_from


def _rank(ty: Optional[onnx.TypeProto]) -> Optional[int]:
    if ty is None or not ty.HasField("tensor_type") or not ty.tensor_type.HasField("shape"):
        return None
    return len(ty.tensor_type.shape.dim)


def _types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Value name -> its type, where the model (or shape inference on it) says it."""
    inferred = model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - a model inference cannot type keeps the types it declares
        pass
    graph = inferred.graph
    types = {vi.name: vi.type for vi in [*graph.input, *graph.value_info, *graph.output]}
    for tensor in graph.initializer:
        types.setdefault(tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    return types

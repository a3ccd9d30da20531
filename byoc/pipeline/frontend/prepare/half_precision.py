"""A model that computes in float16 or bfloat16 is computed in float32, as onnxruntime's CPU provider does.

No vendor of byoc's takes a half-precision tensor (their rules say "dtype float16 not supported (float32
only)"), and the CPUs byoc targets have no half-precision arithmetic short of AVX-512 FP16 or AMX, so a
model converted with ``onnxconverter_common.float16.convert_float_to_float16`` ran whole on the host. On a
CPU, onnxruntime runs each float16 node that has no float16 kernel in float32, with Casts around it
(``InsertCastTransformer``), and removes the Cast pairs that leave nothing to convert. This module does the
same to the whole graph before TVM imports it (:func:`compute_in_float32`):

- float16/bfloat16 weights (initializers, sparse ones, Constant nodes, ConstantOfShape's value, every tensor
  attribute) become float32, exactly (every half value is a float32 value);
- every attribute that names a half dtype (Cast's ``to``, RandomNormal's and EyeLike's ``dtype``, ...)
  names float32, and every half type of the graph (value_info, the bodies of If/Loop/Scan) is float32;
- a Cast that then converts float32 to float32, one that onnxconverter_common put at the model's edges
  (``keep_io_types=True``) or around an op it keeps in float32, is removed: its readers read its input;
- the interface keeps the user's dtypes and names: a half graph input gets a Cast to float32 right after it
  (a Cast of the user's that reads it to float is used as that Cast), a half graph output a Cast back to
  its dtype right before it (a Cast of the user's that writes the output stays that Cast).

What changes numerically: intermediate results are not rounded to half precision between ops. That is
what onnxruntime's CPU provider does inside each op it runs in float32 too; between ops it rounds, so
byoc's outputs are at least as close to the float32 model's as onnxruntime's, and differ from
onnxruntime's by a few half-precision ulps (tests/test_float16.py measures it).

What is refused, by name (:class:`~byoc.errors.HalfPrecisionError`): a BitCast from or to a half type (its
result is the bits, which float32 does not keep), and a graph input or output that is a sequence, map or
optional of half tensors (no Cast converts one at the edge).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from byoc.errors import HalfPrecisionError
from byoc.pipeline.frontend.onnx_model import all_graphs

__all__ = ["HALF_TYPES", "compute_in_float32", "has_half_precision"]

#: The half-precision element types and their names.
HALF_TYPES = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}

#: Integer attributes of ONNX's own ops that hold an element type (TensorProto.DataType).
_DTYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype", "output_datatype", "softmax_precision", "stash_type"})

_ONNX_DOMAINS = ("", "ai.onnx")


def has_half_precision(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds a float16 or bfloat16 tensor, type or dtype attribute anywhere."""
    graph = model.graph
    if any(_half_in_type(vi.type) for vi in (*graph.input, *graph.output)):
        return True
    return any(True for _ in _half_places(graph))


def compute_in_float32(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` computing in float32 where it computed in float16/bfloat16, under the same input and output
    names and dtypes; and what became of the user nodes it removed (node name -> fate).

    ``model`` itself when it has nothing in half precision (no copy); otherwise a new ModelProto, the one
    passed in unchanged. Raises :class:`~byoc.errors.HalfPrecisionError` naming what it cannot rewrite.
    """
    if not has_half_precision(model):
        return model, {}
    _refuse(model.graph)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    declared = {vi.name: vi.type.tensor_type.elem_type for vi in (*graph.input, *graph.output)}
    before = _elem_types(graph)  # the user's types, to know which Casts existed for half precision
    names = _Names(graph)
    kept_casts = _outputs_in_half(graph, declared, names, before)
    _widen_graph(graph, keep=kept_casts, interface=set(declared))
    moved = _inputs_to_float32(graph, declared, names)
    fate = _drop_casts(graph, before, kept_casts | moved)
    users = {n.name for n in model.graph.node}
    return out, {name: why for name, why in fate.items() if name in users}


# -- what is refused ------------------------------------------------------------------------------------------
def _refuse(graph: onnx.GraphProto) -> None:
    inputs = {vi.name for vi in graph.input}
    for vi in (*graph.input, *graph.output):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type" and _half_in_type(vi.type):
            side = "input" if vi.name in inputs else "output"
            raise HalfPrecisionError(
                f"graph {side} {vi.name!r} is a {kind.replace('_type', '')} of half-precision tensors; byoc "
                "computes float16/bfloat16 models in float32 and converts tensor inputs and outputs with a Cast, "
                "which takes no sequence, map or optional: make it a tensor, or convert the model to float32 "
                "(onnxconverter_common.float16 models keep float32 I/O with keep_io_types=True)",
                attribute=vi.name)
    for sub in all_graphs(graph):
        types = _elem_types(sub)
        for node in sub.node:
            if node.op_type != "BitCast" or node.domain not in _ONNX_DOMAINS:
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            half = [HALF_TYPES[t] for t in (types.get(node.input[0]) if node.input else None, to) if t in HALF_TYPES]
            if half:
                raise HalfPrecisionError(
                    f"node {node.name!r} (BitCast) reinterprets the bits of a {half[0]} tensor; byoc computes "
                    "float16/bfloat16 models in float32, whose bits differ: compute that part outside the model, "
                    "or replace the BitCast with a Cast", node=node.name, attribute="to")


# -- the rewrite ----------------------------------------------------------------------------------------------
class _Names:
    """Fresh tensor and node names, none of which the model uses yet (in any subgraph)."""

    def __init__(self, graph: onnx.GraphProto):
        self.used = set()
        for sub in all_graphs(graph):
            self.used |= {vi.name for vi in (*sub.input, *sub.output, *sub.value_info)}
            self.used |= {t.name for t in sub.initializer}
            for node in sub.node:
                self.used |= {node.name, *node.input, *node.output}

    def fresh(self, base: str) -> str:
        name, k = base, 2
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _outputs_in_half(graph: onnx.GraphProto, declared: dict[str, int], names: _Names,
                     before: dict[str, int]) -> set[str]:
    """Make every half graph output the result of a Cast to its dtype; the names of those Casts.

    A Cast of the user's to that dtype stays that Cast (the rewrite leaves its ``to`` alone); the graph's
    other readers of the output read a float32 copy. Any other writer (or a weight returned as an output)
    writes a float32 tensor of a new name, and a new Cast (named after the output) writes the output from it.
    """
    producer = {out: node for node in graph.node for out in node.output if out}
    inputs = {vi.name for vi in graph.input}
    weights = {t.name: t for t in graph.initializer}
    kept: set[str] = set()
    for vi in graph.output:
        dtype = declared[vi.name]
        if dtype not in HALF_TYPES or vi.name in inputs or (vi.name not in producer and vi.name not in weights):
            continue
        writer = producer.get(vi.name)
        if writer is not None and _is_onnx(writer, "Cast") and _attribute(writer, "to") == dtype:
            kept.add(writer.name)
            readers = [n for sub in all_graphs(graph) for n in sub.node if vi.name in n.input]
            if readers:  # the graph computes on with the float32 value it rounds
                widened = names.fresh(f"{vi.name}_float32")
                cast = helper.make_node("Cast", [writer.input[0]], [widened], name=names.fresh(widened),
                                        to=TensorProto.FLOAT)
                _insert_after(graph, vi.name, cast)
                _rename_reads(graph, vi.name, widened)
                _add_value_info(graph, widened, vi)
            continue
        widened = names.fresh(f"{vi.name}_float32")
        before[widened] = dtype  # what the user's graph computed it in
        _rename_everywhere(graph, vi.name, widened)
        cast = helper.make_node("Cast", [widened], [vi.name], name=names.fresh(f"{vi.name}_to_{HALF_TYPES[dtype]}"),
                                to=dtype)
        if writer is None:  # a weight returned as an output: the weight widened, cast back first
            weights[vi.name].name = widened
            graph.node.insert(0, cast)
        else:
            _insert_after(graph, widened, cast)
        kept.add(cast.name)
        _add_value_info(graph, widened, vi)
    return kept


def _inputs_to_float32(graph: onnx.GraphProto, declared: dict[str, int], names: _Names) -> set[str]:
    """Read every half graph input through a Cast to float32, first in the graph; the names of those Casts.

    A Cast of the user's that reads the input to float32 is that Cast (moved first: it reads an input only);
    otherwise a new one, named after the input. Casts to other types read the input itself.
    """
    initializers = {t.name for t in graph.initializer}
    casts: list[onnx.NodeProto] = []
    for vi in graph.input:
        if declared[vi.name] not in HALF_TYPES or vi.name in initializers:
            continue
        readers = [n for sub in all_graphs(graph) for n in sub.node if vi.name in n.input]
        computing = [n for n in readers if not _is_onnx(n, "Cast")]
        if not computing:
            continue
        user_cast = next((n for n in readers if n in graph.node and _is_onnx(n, "Cast")
                          and _attribute(n, "to") == TensorProto.FLOAT), None)
        if user_cast is not None:
            widened = user_cast.output[0]
            cast = onnx.NodeProto()
            cast.CopyFrom(user_cast)
            del graph.node[next(i for i, n in enumerate(graph.node) if n.name == cast.name)]
        else:
            widened = names.fresh(f"{vi.name}_float32")
            cast = helper.make_node("Cast", [vi.name], [widened], name=names.fresh(f"{vi.name}_to_float32"),
                                    to=TensorProto.FLOAT)
            _add_value_info(graph, widened, vi)
        for node in computing:
            _rename_in_node(node, vi.name, widened)
        casts.append(cast)
    for cast in reversed(casts):
        graph.node.insert(0, cast)
    return {c.name for c in casts}


def _widen_graph(graph: onnx.GraphProto, keep: set[str], interface: set[str]) -> None:
    """Every half weight, type and dtype attribute of ``graph`` and its subgraphs in float32, except the
    graph's own inputs and outputs (``interface``) and the Casts in ``keep`` (which write a half output)."""
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type in HALF_TYPES:
            graph.initializer[index].CopyFrom(_as_float32(tensor))
    for sparse in graph.sparse_initializer:
        if sparse.values.data_type in HALF_TYPES:
            sparse.values.CopyFrom(_as_float32(sparse.values))
    for vi in graph.value_info:
        if vi.name not in interface:
            _widen_type(vi.type)
    constants = {t.name for t in graph.initializer}
    for vi in graph.input:  # an initializer listed as an input (IR < 4) is a weight, not the interface
        if vi.name in constants:
            _widen_type(vi.type)
    for node in graph.node:
        _widen_node(node, keep)


def _widen_node(node: onnx.NodeProto, keep: set[str]) -> None:
    for attr in node.attribute:
        if attr.type == AttributeProto.TENSOR and attr.t.data_type in HALF_TYPES:
            attr.t.CopyFrom(_as_float32(attr.t))
        elif attr.type == AttributeProto.TENSORS:
            for tensor in attr.tensors:
                if tensor.data_type in HALF_TYPES:
                    tensor.CopyFrom(_as_float32(tensor))
        elif attr.type == AttributeProto.SPARSE_TENSOR and attr.sparse_tensor.values.data_type in HALF_TYPES:
            attr.sparse_tensor.values.CopyFrom(_as_float32(attr.sparse_tensor.values))
        elif (attr.type == AttributeProto.INT and attr.name in _DTYPE_ATTRIBUTES and attr.i in HALF_TYPES
              and node.domain in _ONNX_DOMAINS and node.name not in keep):
            attr.i = TensorProto.FLOAT
        elif attr.type == AttributeProto.GRAPH:
            _widen_subgraph(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            for sub in attr.graphs:
                _widen_subgraph(sub)


def _widen_subgraph(graph: onnx.GraphProto) -> None:
    """A body's own inputs and outputs are the graph's intermediates: all float32."""
    for vi in (*graph.input, *graph.output):
        _widen_type(vi.type)
    _widen_graph(graph, keep=set(), interface=set())


def _drop_casts(graph: onnx.GraphProto, before: dict[str, int], kept: set[str]) -> dict[str, str]:
    """Remove the Casts of the main graph that now convert float32 to float32 and existed for half precision
    (the user's input, output or result was half); their readers read the input. Returns their fates (the
    Casts this rewrite made and dropped again included)."""
    outputs = {vi.name for vi in graph.output}
    fixed = outputs | {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    written = {out for node in graph.node for out in node.output if out}
    now = _elem_types(graph)
    fate: dict[str, str] = {}
    for name in [n.name for n in graph.node if _is_onnx(n, "Cast") and n.name not in kept]:
        index = next(i for i, n in enumerate(graph.node) if n.name == name)
        node = graph.node[index]
        if len(node.input) != 1 or len(node.output) != 1:
            continue
        source, result = node.input[0], node.output[0]
        half = [HALF_TYPES[t] for t in (before.get(source), before.get(result), _attribute(node, "to"))
                if t in HALF_TYPES]
        if not half or now.get(source) != TensorProto.FLOAT or _attribute(node, "to") != TensorProto.FLOAT:
            continue
        if result in outputs:
            if source in fixed or source not in written:
                continue  # an input or weight returned as an output: the Cast stays, a float32 copy
            del graph.node[index]
            _remove_value_info(graph, source)
            _rename_everywhere(graph, source, result)
            if before.get(source) in HALF_TYPES:  # a Cast after this one reads it as the user's half tensor
                before[result] = before[source]
        else:
            del graph.node[index]
            _remove_value_info(graph, result)
            _rename_reads(graph, result, source)
        fate[name] = f"removed: {half[0]} computed as float32"
    return fate


# -- helpers --------------------------------------------------------------------------------------------------
def _is_onnx(node: onnx.NodeProto, op_type: str) -> bool:
    return node.op_type == op_type and node.domain in _ONNX_DOMAINS


def _attribute(node: onnx.NodeProto, name: str):
    attr = next((a for a in node.attribute if a.name == name), None)
    return None if attr is None else helper.get_attribute_value(attr)


def _elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor name -> element type, for the tensors of ``graph`` whose type is known."""
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in (*graph.input, *graph.output, *graph.value_info) if vi.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in graph.initializer})
    for node in graph.node:
        if _is_onnx(node, "Constant") and node.output:
            value = next((a for a in node.attribute if a.name in ("value", "sparse_value")), None)
            if value is not None:
                types[node.output[0]] = value.t.data_type if value.type == AttributeProto.TENSOR \
                    else value.sparse_tensor.values.data_type
        elif _is_onnx(node, "Cast") and node.output:
            types.setdefault(node.output[0], _attribute(node, "to"))
    return types


def _half_in_type(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return type_proto.tensor_type.elem_type in HALF_TYPES
    if kind == "sparse_tensor_type":
        return type_proto.sparse_tensor_type.elem_type in HALF_TYPES
    if kind == "sequence_type":
        return _half_in_type(type_proto.sequence_type.elem_type)
    if kind == "optional_type":
        return _half_in_type(type_proto.optional_type.elem_type)
    if kind == "map_type":
        return _half_in_type(type_proto.map_type.value_type)
    return False


def _widen_type(type_proto: onnx.TypeProto) -> None:
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" and type_proto.tensor_type.elem_type in HALF_TYPES:
        type_proto.tensor_type.elem_type = TensorProto.FLOAT
    elif kind == "sparse_tensor_type" and type_proto.sparse_tensor_type.elem_type in HALF_TYPES:
        type_proto.sparse_tensor_type.elem_type = TensorProto.FLOAT
    elif kind == "sequence_type":
        _widen_type(type_proto.sequence_type.elem_type)
    elif kind == "optional_type":
        _widen_type(type_proto.optional_type.elem_type)
    elif kind == "map_type":
        _widen_type(type_proto.map_type.value_type)


def _half_places(graph: onnx.GraphProto) -> Iterator[str]:
    """The names of what is half in ``graph`` and its subgraphs (not its own inputs and outputs)."""
    for sub in all_graphs(graph):
        for tensor in sub.initializer:
            if tensor.data_type in HALF_TYPES:
                yield tensor.name
        for sparse in sub.sparse_initializer:
            if sparse.values.data_type in HALF_TYPES:
                yield sparse.values.name
        for vi in sub.value_info if sub is graph else (*sub.input, *sub.output, *sub.value_info):
            if _half_in_type(vi.type):
                yield vi.name
        for node in sub.node:
            for attr in node.attribute:
                if (attr.type == AttributeProto.TENSOR and attr.t.data_type in HALF_TYPES) or (
                        attr.type == AttributeProto.TENSORS and any(t.data_type in HALF_TYPES for t in attr.tensors)
                ) or (attr.type == AttributeProto.SPARSE_TENSOR
                      and attr.sparse_tensor.values.data_type in HALF_TYPES) or (
                        attr.type == AttributeProto.INT and attr.name in _DTYPE_ATTRIBUTES and attr.i in HALF_TYPES
                        and node.domain in _ONNX_DOMAINS):
                    yield node.name


def _as_float32(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """``tensor``'s values as a float32 tensor of the same name (exact: every half value is a float32 value)."""
    # The memory of a model of large half weights doubles here; storing them narrow is left to the memory work.
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def _rename_in_node(node: onnx.NodeProto, old: str, new: str) -> None:
    """``node`` and the subgraphs it holds read ``new`` where they read ``old``."""
    for i, name in enumerate(node.input):
        if name == old:
            node.input[i] = new
    for attr in node.attribute:
        subs = [attr.g] if attr.type == AttributeProto.GRAPH else attr.graphs if attr.type == AttributeProto.GRAPHS \
            else []
        for sub in subs:
            for inner in sub.node:
                _rename_in_node(inner, old, new)
            for vi in sub.output:  # a body may return an outer value as it is
                if vi.name == old:
                    vi.name = new


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every node of ``graph`` (subgraphs included) reads ``new`` where it read ``old``."""
    for node in graph.node:
        _rename_in_node(node, old, new)


def _rename_everywhere(graph: onnx.GraphProto, old: str, new: str) -> None:
    """The tensor ``old`` is called ``new``: its writer writes it, its readers read it, its value_info names it."""
    for node in graph.node:
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new
    _rename_reads(graph, old, new)
    for vi in graph.value_info:
        if vi.name == old:
            vi.name = new


def _insert_after(graph: onnx.GraphProto, tensor: str, new: onnx.NodeProto) -> None:
    """Put ``new`` right after the node that writes ``tensor``."""
    index = next(i for i, n in enumerate(graph.node) if tensor in n.output)
    graph.node.insert(index + 1, new)


def _add_value_info(graph: onnx.GraphProto, name: str, like: onnx.ValueInfoProto) -> None:
    """A float32 value_info for ``name`` with the shape of ``like``."""
    vi = graph.value_info.add()
    vi.CopyFrom(like)
    vi.name = name
    vi.doc_string = ""
    vi.type.tensor_type.elem_type = TensorProto.FLOAT


def _remove_value_info(graph: onnx.GraphProto, name: str) -> None:
    for index in reversed(range(len(graph.value_info))):
        if graph.value_info[index].name == name:
            del graph.value_info[index]

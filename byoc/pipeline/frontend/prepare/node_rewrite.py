"""Replace nodes TVM's importer cannot take by standard ONNX nodes that compute the same, one table entry per op.

A table maps ``(domain, op type)`` to a function that is handed a :class:`NodeRewrite` for one node and
writes the replacement with it: ``QLinearConv`` becomes a QDQ unit
(:mod:`~byoc.pipeline.frontend.prepare.qoperators`), onnxruntime's ``SkipLayerNormalization`` an Add and a
LayerNormalization (:mod:`~byoc.pipeline.frontend.prepare.contrib_ops`). :func:`rewrite_nodes` applies a
table to a model's main graph. The replacement's nodes are named after the node they replace
(``<node>/<suffix>``), its last node writes the replaced node's output names, and the returned map
records where each new node came from, for the reports (:mod:`~byoc.pipeline.frontend.prepare`).

The helpers that spell one operation differently across ONNX opsets (``ReduceMean``'s axes, ``Split``,
``Unsqueeze``, ``LayerNormalization`` before opset 17, ``Gelu`` before 20) write the form of the
model's own opset: a rewrite never changes the opset a model is read at.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.onnx_model import default_opset, subgraphs

__all__ = ["MS_DOMAIN", "NodeRewrite", "Rewrites", "node_key", "rewrite_nodes"]

MS_DOMAIN = "com.microsoft"


class NodeRewrite:
    """Builds the standard nodes that replace one node; names derive from the node's."""

    def __init__(self, node: onnx.NodeProto, constants: dict[str, np.ndarray], opset: int,
                 shapes: Optional[dict[str, list]] = None, readers: Optional[dict[str, list]] = None,
                 types: Optional[dict[str, np.dtype]] = None):
        self.node, self.constants, self.opset = node, constants, opset
        #: tensor name -> its dims (an int, or None where symbolic), where the model says them (inputs, inferred
        #: value_info) or a rewrite made the tensor; shared by the rewrites of one model
        self.shapes = shapes if shapes is not None else {}
        #: tensor name -> its element type, where the model says it
        self._types = types if types is not None else {}
        #: tensor name -> the nodes that read it; a graph output is read by ``None``
        self._readers = readers if readers is not None else {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        #: outputs the replacement writes in another type than the node did (their value_info is dropped)
        self.retyped: set[str] = set()
        self._names: set[str] = set()

    # -- reading the node ------------------------------------------------------------------------
    def input(self, index: int) -> str:
        """The node's input ``index``, or '' when it is absent."""
        return self.node.input[index] if index < len(self.node.input) else ""

    def output(self, index: int) -> str:
        """The node's output ``index``, or '' when it is absent (an output nobody reads may be left out)."""
        return self.node.output[index] if index < len(self.node.output) else ""

    def read(self, index: int) -> str:
        """The node's output ``index`` when a node or the graph's outputs read it, else ''."""
        name = self.output(index)
        return name if self._readers.get(name) else ""

    def read_only_as_float(self, index: int) -> bool:
        """Whether output ``index`` is read, and only by Casts to float32 (no graph output reads it)."""
        found = self._readers.get(self.output(index), [])
        return bool(found) and all(
            r is not None and r.op_type == "Cast" and [(a.name, helper.get_attribute_value(a)) for a in r.attribute]
            == [("to", TensorProto.FLOAT)] for r in found)

    def dtype(self, name: str) -> Optional[np.dtype]:
        """The element type of tensor ``name``, where the model or a constant says it."""
        if name in self.constants:
            return self.constants[name].dtype
        return self._types.get(name)

    def rank(self, name: str) -> Optional[int]:
        """The rank of tensor ``name`` when it is known before the import, else None."""
        if name in self.constants:
            return self.constants[name].ndim
        shape = self.shapes.get(name)
        return None if shape is None else len(shape)

    def last_dim(self, name: str) -> Optional[int]:
        """The static size of the last axis of tensor ``name``, None when unknown or symbolic."""
        if name in self.constants:
            return int(self.constants[name].shape[-1]) if self.constants[name].ndim else None
        shape = self.shapes.get(name)
        return shape[-1] if shape else None

    def attr(self, name: str, default=None):
        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def plain_attrs(self, drop: tuple = ()) -> dict:
        return {a.name: helper.get_attribute_value(a) for a in self.node.attribute if a.name not in drop}

    def where(self) -> str:
        """How errors name the node: ``SkipLayerNormalization node 'ln_3'``."""
        return f"{self.node.op_type} node {self.node.name!r}"

    # -- refusing what a rewrite does not compute ------------------------------------------------
    def refuse(self, what: str, advice: str) -> UnsupportedAttributeError:
        """The error to raise for what the rewrite does not compute: the node, what, and what to do."""
        return UnsupportedAttributeError(f"{self.where()}: {what} is not supported; {advice}")

    def refuse_attr(self, name: str, supported: str) -> UnsupportedAttributeError:
        """The error for attribute ``name``'s value: ``supported`` says which values are computed."""
        return self.refuse(f"{name}={self.attr(name)!r}", f"byoc computes {self.node.op_type} with {supported} only")

    def refuse_read_outputs(self, outputs: dict[int, str]) -> None:
        """Raise when one of ``outputs`` (index -> its name in the op's schema) is read."""
        for index, name in outputs.items():
            if self.read(index):
                raise self.refuse(f"its output {index} ({name}) being read",
                                  "byoc computes its main output only; export without the consumer of that output")

    def constant_input(self, index: int, what: str) -> np.ndarray:
        """The value of input ``index``, which must be a constant (a weight the rewrite splits or reads)."""
        value = self.constants.get(self.input(index))
        if value is None:
            raise self.refuse(f"a {what} ({self.input(index)!r}) that is not a constant",
                              "give it as an initializer (byoc splits and reorders it when the model is compiled)")
        return value

    # -- writing nodes ---------------------------------------------------------------------------
    def _name(self, suffix: str) -> str:
        name, k = f"{self.node.name}/{suffix}", 1
        while name in self._names:
            k += 1
            name = f"{self.node.name}/{suffix}_{k}"
        self._names.add(name)
        return name

    def add(self, op_type: str, inputs: Sequence[str], suffix: str, output: Optional[str] = None, **attrs) -> str:
        """One node of ``op_type``; its single output is ``output`` or a new name. Returns the output."""
        name = self._name(suffix)
        out = output or name
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def add_multi(self, op_type: str, inputs: Sequence[str], suffix: str, count: int, **attrs) -> list[str]:
        """One node of ``op_type`` with ``count`` outputs (Split, DynamicQuantizeLinear)."""
        name = self._name(suffix)
        outs = [f"{name}:{k}" for k in range(count)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs

    def const(self, suffix: str, value: np.ndarray) -> str:
        name = self._name(suffix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def ints(self, suffix: str, values: Sequence[int]) -> str:
        return self.const(suffix, np.array(list(values), np.int64))

    def scalar(self, suffix: str, value: float) -> str:
        return self.const(suffix, np.array(value, np.float32))

    def int_scalar(self, suffix: str, value: int, dtype=np.int64) -> str:
        return self.const(suffix, np.array(value, dtype))

    # -- operations whose spelling depends on the opset --------------------------------------------
    def unsqueeze(self, x: str, axes: Sequence[int], suffix: str) -> str:
        if self.opset >= 13:
            return self.add("Unsqueeze", [x, self.ints(f"{suffix}_axes", axes)], suffix)
        return self.add("Unsqueeze", [x], suffix, axes=list(axes))

    def reduce(self, op_type: str, x: str, axes: Sequence[int], suffix: str, keepdims: int = 1,
               output: Optional[str] = None) -> str:
        """ReduceMean/ReduceSum/... over ``axes``: axes as an input from the opset that made them one
        (13 for ReduceSum, 18 for the others), an attribute before."""
        as_input = self.opset >= (13 if op_type == "ReduceSum" else 18)
        if as_input:
            return self.add(op_type, [x, self.ints(f"{suffix}_axes", axes)], suffix, output=output, keepdims=keepdims)
        return self.add(op_type, [x], suffix, output=output, axes=list(axes), keepdims=keepdims)

    def squeeze(self, x: str, axes: Sequence[int], suffix: str) -> str:
        if self.opset >= 13:
            return self.add("Squeeze", [x, self.ints(f"{suffix}_axes", axes)], suffix)
        return self.add("Squeeze", [x], suffix, axes=list(axes))

    def split(self, x: str, sizes: Sequence[int], axis: int, suffix: str) -> list[str]:
        if self.opset >= 13:
            return self.add_multi("Split", [x, self.ints(f"{suffix}_sizes", sizes)], suffix, len(sizes), axis=axis)
        return self.add_multi("Split", [x], suffix, len(sizes), axis=axis, split=list(sizes))

    def dims_of(self, x: str, start: int, end: int, suffix: str) -> str:
        """``x.shape[start:end]`` as an int64 tensor (Shape, Slice), for a Reshape whose target holds symbolic
        dims the importer cannot work out from a -1 (a product of sums: ``S * (P + S) / (P + S)``)."""
        return self.add("Slice", [self.add("Shape", [x], f"{suffix}_shape"), self.ints(f"{suffix}_start", [start]),
                                  self.ints(f"{suffix}_end", [end])], suffix)

    def layer_norm(self, x: str, gamma: str, beta: str, epsilon: float, suffix: str,
                   output: Optional[str] = None) -> str:
        """LayerNormalization over the last axis; spelled out in arithmetic before opset 17, which lacks it."""
        if self.opset >= 17:
            inputs = [x, gamma] + ([beta] if beta else [])
            return self.add("LayerNormalization", inputs, suffix, output=output, axis=-1, epsilon=float(epsilon))
        mean = self.reduce("ReduceMean", x, [-1], f"{suffix}_mean")
        centred = self.add("Sub", [x, mean], f"{suffix}_centred")
        variance = self.reduce("ReduceMean", self.add("Mul", [centred, centred], f"{suffix}_square"), [-1],
                               f"{suffix}_variance")
        std = self.add("Sqrt", [self.add("Add", [variance, self.scalar(f"{suffix}_eps", epsilon)],
                                         f"{suffix}_var_eps")], f"{suffix}_std")
        normed = self.add("Div", [centred, std], f"{suffix}_normed")
        if not beta:
            return self.add("Mul", [normed, gamma], f"{suffix}_scaled", output=output)
        return self.add("Add", [self.add("Mul", [normed, gamma], f"{suffix}_scaled"), beta], suffix, output=output)

    def rms_norm(self, x: str, gamma: str, epsilon: float, suffix: str, output: Optional[str] = None) -> str:
        """``x / sqrt(mean(x^2) + epsilon) * gamma`` over the last axis (onnxruntime's simplified layer norm)."""
        square = self.add("Mul", [x, x], f"{suffix}_square")
        mean = self.reduce("ReduceMean", square, [-1], f"{suffix}_mean")
        std = self.add("Sqrt", [self.add("Add", [mean, self.scalar(f"{suffix}_eps", epsilon)], f"{suffix}_eps_add")],
                       f"{suffix}_std")
        return self.add("Mul", [self.add("Div", [x, std], f"{suffix}_normed"), gamma], suffix, output=output)

    def gelu(self, x: str, suffix: str, approximate: str = "none", output: Optional[str] = None) -> str:
        """GELU (erf, or the tanh approximation): the Gelu op from opset 20, else the arithmetic exporters write
        (``x * 0.5 * (1 + erf(x / sqrt 2))``), which vendors take as one gelu."""
        if self.opset >= 20:
            return self.add("Gelu", [x], suffix, output=output, approximate=approximate)
        if approximate == "tanh":
            cube = self.add("Mul", [self.add("Mul", [x, x], f"{suffix}_x2"), x], f"{suffix}_x3")
            inner = self.add("Add", [x, self.add("Mul", [cube, self.scalar(f"{suffix}_c", 0.044715)], f"{suffix}_cx3")],
                             f"{suffix}_inner")
            scaled = self.add("Mul", [inner, self.scalar(f"{suffix}_k", math.sqrt(2 / math.pi))], f"{suffix}_scaled")
            core = self.add("Tanh", [scaled], f"{suffix}_tanh")
        else:
            core = self.add("Erf", [self.add("Div", [x, self.scalar(f"{suffix}_sqrt2", math.sqrt(2))],
                                             f"{suffix}_div")], f"{suffix}_erf")
        one_plus = self.add("Add", [core, self.scalar(f"{suffix}_one", 1.0)], f"{suffix}_add")
        x_one_plus = self.add("Mul", [x, one_plus], f"{suffix}_mul")  # torch's order: (x * (1 + erf)) * 0.5
        return self.add("Mul", [x_one_plus, self.scalar(f"{suffix}_half", 0.5)], suffix, output=output)

    def cast(self, x: str, to: int, suffix: str, output: Optional[str] = None) -> str:
        return self.add("Cast", [x], suffix, output=output, to=to)

    def float_of(self, x: str, suffix: str) -> str:
        return self.cast(x, TensorProto.FLOAT, suffix)


#: (domain, op type) -> the function that writes one node's replacement; one that returns False leaves the node
#: as it is (a form TVM's importer converts right)
Rewrites = dict[tuple[str, str], Callable[[NodeRewrite], Optional[bool]]]


def node_key(node: onnx.NodeProto) -> tuple[str, str]:
    """A node's (domain, op type), with ONNX's own domain as ''."""
    return ("" if node.domain in ("", "ai.onnx") else node.domain, node.op_type)


def rewrite_nodes(model: onnx.ModelProto, table: Rewrites) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A new model with every main-graph node that ``table`` names replaced by what its entry writes.

    Returns the model and a map from each new node's name to the node it
    replaces. Output tensors keep their names. A model with no such node is
    returned as given, with ``{}``.
    """
    graph = model.graph
    if not any(node_key(n) in table for n in graph.node):
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    constants = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    for node in out.graph.node:  # a Constant node's value is as constant as an initializer
        if node.op_type == "Constant" and node.output and node.domain in ("", "ai.onnx"):
            value = next((a for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                         None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value.t)
    opset = default_opset(out)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in (*graph.input, *graph.value_info, *graph.output) if vi.type.tensor_type.HasField("shape")}
    types = {vi.name: np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
             for vi in (*graph.input, *graph.value_info, *graph.output)
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
    readers = _readers(out.graph)
    nodes, made_from, initializers, retyped = [], {}, [], set()
    for node in out.graph.node:
        rewrite = table.get(node_key(node))
        if rewrite is None:
            nodes.append(node)
            continue
        unit = NodeRewrite(node, constants, opset, shapes, readers, types)
        if rewrite(unit) is False:
            nodes.append(node)
            continue
        nodes.extend(unit.nodes)
        initializers.extend(unit.initializers)
        retyped |= unit.retyped
        made_from.update({n.name: node.name for n in unit.nodes})
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(initializers)
    if retyped:
        kept = [vi for vi in out.graph.value_info if vi.name not in retyped]
        del out.graph.value_info[:]
        out.graph.value_info.extend(kept)
    _drop_unused_domains(out)
    return out, made_from


def _readers(graph: onnx.GraphProto) -> dict[str, list]:
    """Tensor name -> the nodes of ``graph`` that read it (a node holding a subgraph that reads it among them), and
    ``None`` for a graph output."""
    readers: dict[str, list] = {o.name: [None] for o in graph.output}

    def read_in(sub: onnx.GraphProto) -> set[str]:
        return {x for n in sub.node for x in n.input if x} | {x for n in sub.node for g in subgraphs(n) for x in read_in(g)}

    for node in graph.node:
        for name in {x for x in node.input if x} | {x for g in subgraphs(node) for x in read_in(g)}:
            readers.setdefault(name, []).append(node)
    return readers


def _drop_unused_domains(model: onnx.ModelProto) -> None:
    """Drop the opset imports of non-ONNX domains no node uses any more (onnx.checker keeps them harmless,
    but TVM's importer and the reports read them)."""
    def domains(graph: onnx.GraphProto) -> set[str]:
        return {n.domain for n in graph.node} | {d for n in graph.node for sub in subgraphs(n) for d in domains(sub)}

    used = domains(model.graph)
    kept = [o for o in model.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
    if len(kept) != len(model.opset_import):
        del model.opset_import[:]
        model.opset_import.extend(kept)

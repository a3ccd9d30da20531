"""C for quantized node units (``qnn.*`` op calls) and the lone QuantizeLinear / DequantizeLinear.

conv1d, conv2d and matmul run on integers, as ONNX's QLinearConv and QLinearMatMul
define them: inputs minus their zero points, int32 accumulation, then
requantization ``round(acc * x_scale * w_scale / y_scale + bias term)``
rounded half to even, plus the output zero point, saturated to the output
range (narrowed by a folded relu or clip).

Every other unit computes what its QDQ form says, literally: each input
dequantized to float, the float op (the float emitter of that op), and the
result quantized. That is the ONNX definition of the unit, so it needs no
integer kernel of its own.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from byoc.errors import UnsupportedOp
from byoc.vendor.graph import OpCall, Tensor, qdq_params
from byoc.vendor.quantized import QParams

from .body import OpEmitter, Body

_CODES = {"uint8": "BYOC_U8", "int8": "BYOC_I8", "int32": "BYOC_I32"}

#: The lone Q/DQ ops this module emits, besides ``qnn.*`` calls.
QDQ_OPS = ("relax.quantize", "relax.dequantize")
#: Ops that run on 8-bit integers exactly through their float emitter (see _integer_as_float).
INTEGER_AS_FLOAT = ("relax.nn.max_pool2d", "relax.permute_dims", "relax.concat")


def _code(tensor: Tensor) -> str:
    if tensor.dtype not in _CODES:
        raise UnsupportedOp(f"a {tensor.dtype} quantized tensor (int8, uint8 and int32 only)")
    return _CODES[tensor.dtype]


def _layout(body: Body, params: QParams, shape) -> tuple[str, str]:
    """(axis_len, inner) of ``params`` over a tensor of ``shape``, as C (a symbolic dim is read per call):
    (1, 1) per tensor."""
    if not params.per_channel:
        return "1", "1"
    return body.dim(shape[params.axis]), body.size(shape[params.axis + 1:])


def _params(body: Body, params: QParams) -> tuple[str, str]:
    """C arrays of the scales (float) and zero points (int32)."""
    return (body.unit.array("float", params.scale),
            body.unit.array("int32_t", params.zero_point.astype(np.int64)))


def _dequantize(body: Body, x: Tensor, params: QParams, y: Tensor) -> None:
    scale, zp = _params(body, params)
    axis_len, inner = _layout(body, params, x.shape)
    body.emit(f"byoc_k_dequantize({body.ref(x)}, {_code(x)}, {body.size(x.shape)}, {scale}, {zp}, {axis_len}, {inner}, "
              f"{body.ref(y)});")


def _quantize(body: Body, x: Tensor, params: QParams, y: Tensor, lo: int, hi: int) -> None:
    scale, zp = _params(body, params)
    axis_len, inner = _layout(body, params, y.shape)
    body.emit(f"byoc_k_quantize({body.ref(x)}, {body.size(x.shape)}, {scale}, {zp}, {axis_len}, {inner}, {_code(y)}, "
              f"{lo}, {hi}, {body.ref(y)});")


def _lone(body: Body, call: OpCall) -> None:
    params = qdq_params(call)
    if call.op == "relax.dequantize":
        _dequantize(body, call.inputs[0], params, call.output)
    else:
        info = np.iinfo(call.output.dtype)
        _quantize(body, call.inputs[0], params, call.output, int(info.min), int(info.max))


def _widened(body: Body, x: Tensor, params: QParams) -> Tensor:
    """``x - zero_point`` as an int32 scratch tensor."""
    out = body.scratch("int32", x.shape)
    zp = body.unit.array("int32_t", params.zero_point.astype(np.int64))
    axis_len, inner = _layout(body, params, x.shape)
    body.emit(f"byoc_k_widen({body.ref(x)}, {_code(x)}, {body.size(x.shape)}, {zp}, {axis_len}, {inner}, {body.ref(out)});")
    return out


def _requantize(body: Body, call: OpCall, acc: Tensor, channel_axis: int) -> None:
    """Write ``call``'s output from the int32 ``acc``, per output channel along ``channel_axis``."""
    unit = call.quant
    x, w, out = unit.inputs[0], unit.inputs[1], unit.output
    channels, inner = call.output.shape[channel_axis], body.size(call.output.shape[channel_axis + 1:])
    if not isinstance(channels, (int, np.integer)):
        # a symbolic channel dim (a matmul of two activations: attention's scores over the sequence): no constant
        # has that many values, so the weight's scale and the bias are one value for every channel
        channels, inner = 1, "1"
    y_scale = np.float64(out.scale)
    mult = np.broadcast_to(np.float64(x.scale) * w.scale.astype(np.float64) / y_scale, (channels,))
    offset = np.zeros(channels)
    if len(call.inputs) == 3:
        bias = unit.inputs[2]
        values = np.broadcast_to(call.inputs[2].data.reshape(-1).astype(np.float64), (channels,))
        offset = (values - bias.zero_point.astype(np.float64)) * bias.scale.astype(np.float64) / y_scale
    lo, hi = unit.output_range
    body.emit(f"byoc_k_requantize({body.ref(acc)}, {body.size(acc.shape)}, {body.unit.array('double', mult)}, "
              f"{body.unit.array('double', np.broadcast_to(offset, (channels,)))}, {channels}, {inner}, "
              f"{int(out.zero_point)}, {_code(call.output)}, {lo}, {hi}, {body.ref(call.output)});")


def _conv(body: Body, call: OpCall) -> None:
    """An int8 conv2d, or a conv1d as a conv2d over a 1-high image (the kernel's shapes are NCHW/OIHW)."""
    x, w = (_widened(body, t, p) for t, p in zip(call.inputs[:2], call.quant.inputs[:2]))
    acc = body.scratch("int32", call.output.shape)
    a = call.attrs
    if call.op == "qnn.conv1d":  # H = 1: no stride, padding or dilation along it
        (n, c, wd), (o, _, kw), (_, _, ow) = (map(body.dim, t.shape) for t in (x, w, acc))
        h = kh = oh = "1"
        strides, padding, dilation = (1, a["strides"][0]), (0, a["padding"][0]), (1, a["dilation"][0])
    else:
        (n, c, h, wd), (o, _, kh, kw), (_, _, oh, ow) = (map(body.dim, t.shape) for t in (x, w, acc))
        strides, padding, dilation = a["strides"], a["padding"][:2], a["dilation"]
    # The kernel reads the top/left padding; the output size implies the bottom/right one.
    body.emit(
        f"byoc_k_conv2d_i32({body.ref(x)}, {body.ref(w)}, NULL, {body.ref(acc)}, {n}, {c}, {h}, {wd}, "
        f"{o}, {kh}, {kw}, {oh}, {ow}, {strides[0]}, {strides[1]}, {padding[0]}, {padding[1]}, "
        f"{dilation[0]}, {dilation[1]}, {a['groups']}, 0);"
    )
    _requantize(body, call, acc, 1)


def _matmul(body: Body, call: OpCall) -> None:
    a, b = (_widened(body, t, p) for t, p in zip(call.inputs[:2], call.quant.inputs[:2]))
    acc = body.scratch("int32", call.output.shape)
    args = []
    for t in (a, b, acc):
        args += [body.ref(t), body.shape(t.shape), str(len(t.shape))]
    body.emit(f"byoc_k_matmul_i32({', '.join(args)});")
    _requantize(body, call, acc, len(call.output.shape) - 1)


def _via_float(body: Body, call: OpCall, emitters: Mapping[str, OpEmitter], op: str, inputs, output: QParams,
               output_range: tuple[int, int]) -> None:
    """Dequantize the inputs (``inputs``: their QParams), run ``op``'s float emitter, quantize the result."""
    if op not in emitters:
        raise UnsupportedOp(f"no C emitter for the float op of {call.op} (rule {call.rule})")
    floats = []
    for tensor, params in zip(call.inputs, inputs):
        real = body.scratch("float32", tensor.shape)
        _dequantize(body, tensor, params, real)
        floats.append(real)
    result = body.scratch("float32", call.output.shape)
    emitters[op](body, OpCall(op, floats, result, call.attrs, call.rule, call.group))
    _quantize(body, result, output, call.output, *output_range)


def _through_float(body: Body, call: OpCall, emitters: Mapping[str, OpEmitter]) -> None:
    """A unit as its QDQ definition: dequantize the inputs, the float op's emitter, quantize the result."""
    unit = call.quant
    _via_float(body, call, emitters, unit.float_ops[0], unit.inputs, unit.output, unit.output_range)


def _integer_as_float(body: Body, call: OpCall, emitters: Mapping[str, OpEmitter]) -> None:
    """A data-movement op (max pooling, transpose, concat) on 8-bit integers, through its float emitter.

    Every 8-bit integer is a float exactly, and these ops only pick or move
    values, so the result is exact.
    """
    identity = QParams.identity(call.output.dtype)
    info = np.iinfo(call.output.dtype)
    _via_float(body, call, emitters, call.op, [identity] * len(call.inputs), identity, (int(info.min), int(info.max)))


def emit_quantized(body: Body, call: OpCall, emitters: Mapping[str, OpEmitter]) -> None:
    """Emit a ``qnn.*`` call, a lone quantize/dequantize, or a data-movement op on integers."""
    if call.quant is None and call.op not in QDQ_OPS:
        _integer_as_float(body, call, emitters)
    elif call.op in QDQ_OPS:
        _lone(body, call)
    elif call.op in ("qnn.conv1d", "qnn.conv2d"):
        _conv(body, call)
    elif call.op == "qnn.matmul":
        _matmul(body, call)
    else:
        _through_float(body, call, emitters)

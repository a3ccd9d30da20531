"""Quantized units (``qnn.*`` op calls) rewritten into what the oneDNN runtime executes.

- ``qnn.conv1d``, ``qnn.conv2d`` and ``qnn.matmul`` with u8 activations and weights within
  +-64 stay one op: an int8 oneDNN convolution or matmul (u8 activations, s8
  weights) with the scales and zero points as attributes. The weight travels
  at 8 bits, as a dynamic int8 op's (``dynamic.packed_bytes``: its bytes in a
  float32 constant a quarter as long, ``w_shape`` its shape), and is reordered
  once at load; the int32 bias is sent in real units, ``(b - zero_point) *
  scale``, which is what oneDNN adds before the output scale. A folded relu or
  clip becomes a clip post-op in real units.
- With larger weights, or s8 activations, the int8 kernels are exact only on
  CPUs with VNNI (see ``_SAFE_WEIGHT``: without it they saturate, or round),
  and onnxruntime's quantizer writes full-range weights unless told
  ``reduce_range``. Such a unit is sent both ways, each op marked
  ``only_if_cpu`` (``vnni`` / ``no_vnni``): the int8 op, and its definition in
  float32. The runtime that loads the artifact keeps the one its CPU runs
  exactly; the two share the packed weight: the float definition reads it
  through ``byoc.dequantize_constant``, which the runtime computes at load
  (``(q - zero_point) * scale`` in float64, rounded once to float32: the
  constant this module computed before). A ResNet-50 quantized by
  onnxruntime's defaults ran 6x slower than onnxruntime's int8 run in float32
  (76 ms against 12.5 ms on a 2-core AVX-512 VNNI machine).
- Grouped convs (not depthwise) and convs of one input channel run as their
  definition in float32 (``_faster_in_float``: oneDNN's int8 kernels take 4
  input channels at a time; on AVX2 they fall back to the reference kernel
  for other groups, or run slower than float32). Their 8-bit weights travel packed
  too and are dequantized at load, as are a deconvolution unit's.
- So an artifact holds each 8-bit weight once, at 8 bits: a QDQ ResNet-18's
  library 46.8 MB with the weights as float32, now the ONNX file's size.
- An add of two 8-bit activations of one shape (a residual connection) is one
  int8 binary: scaled inputs summed in f32, then requantized by a linear
  post-op.
- Every other unit becomes its QDQ definition: each input dequantized (a
  oneDNN reorder with scale and zero point), the float op the runtime
  already runs, a clip for a narrowed output range, and a quantizing reorder.
- A lone quantize or dequantize keeps its op, with scale and zero point as
  attributes instead of constant inputs; one of a constant is computed here.
- Max pooling and reshape run on the 8-bit tensors themselves when the unit
  keeps one quantization in and out (onnxruntime's quantizer makes them so);
  another data-movement op on 8-bit integers (transpose, concat: what a
  QOperator model leaves between its integer ops) runs on their float
  values, exactly.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from byoc.vendor.graph import OpCall, PartitionGraph, Tensor, qdq_params
from byoc.vendor.quantized import QParams

from .dynamic import packed_bytes

_INTEGER_CORES = ("qnn.conv1d", "qnn.conv2d", "qnn.matmul")
# oneDNN's int8 kernels on x86 CPUs without VNNI (AVX2, AVX-512 before VNNI) add pairs of u8 x s8
# products in int16 (vpmaddubsw), which saturates: 2 * 255 * 127 > 32767. With weights within
# +-64 (onnxruntime's reduce_range) no pair can; a unit with larger weights runs as its definition,
# in float32 (measured on PP-OCR cls quantized per tensor: int8 kernels 0.185 of the output's range
# away from the definition, like onnxruntime's own int8 kernels; float32 0).
_SAFE_WEIGHT = 64
# s8 activations take the same float path: without VNNI, oneDNN shifts an s8 source to u8 and halves the weights
# against saturation, rounding them (measured: a conv with onnxruntime's QInt8 activations 3-6 quanta away from the
# definition on 283 of 512 outputs; float32 0). u8 activations, onnxruntime's default for CPUs, keep the int8 kernels.
# With VNNI (vpdpbusd sums u8 x s8 products in int32) neither happens: those units go both ways (_on_cpus).
_VNNI, _NO_VNNI = "vnni", "no_vnni"
#: Ops the runtime runs on 8-bit tensors as they are: they pick or move values, so with the same
#: quantization in and out, DQ -> op -> Q is the op itself.
_ON_INTEGERS = ("relax.nn.max_pool2d", "relax.reshape")
#: The runtime op that computes an 8-bit constant's DequantizeLinear at load, from its packed bytes.
DEQUANTIZE_CONSTANT = "byoc.dequantize_constant"


def _keeps_quantization(call: OpCall) -> bool:
    """The unit's input and output have one quantization and the full range (DQ -> op -> Q is the op)."""
    unit = call.quant
    (x,), y = unit.inputs, unit.output
    info = np.iinfo(call.output.dtype)
    return (x.dtype == y.dtype and not x.per_channel and not y.per_channel and float(x.scale) == float(y.scale)
            and int(x.zero_point) == int(y.zero_point) and unit.output_range == (info.min, info.max))


def _qattrs(params: QParams) -> dict:
    return {"scale": [float(s) for s in np.atleast_1d(params.scale)],
            "zero_point": [int(z) for z in np.atleast_1d(params.zero_point)],
            "axis": int(params.axis) if params.per_channel else 0}


def _faster_in_float(call: OpCall) -> bool:
    """A conv whose input channels per group oneDNN's int8 kernels handle badly: they take 4 at a time.

    - A grouped conv, not depthwise: on AVX2 the int8 kernels run others with the reference kernel (ShuffleNet
      int8's grouped 1x1 convs of 34 channels per group: 10 ms each, 100x the float32 definition); where they do
      run, float32 measured faster (ShuffleNet int8's primitives 10.8 ms, 6.7 ms with every grouped conv in float32).
    - One input channel, not grouped (Silero VAD's 256-tap filter bank over the raw signal): 3 of 4 products
      are padding; the int8 kernel took 0.12 ms, the float32 definition 0.056 ms, on an AVX-512 VNNI machine.
    """
    if call.op == "qnn.matmul":
        return False
    per_group = call.inputs[1].shape[1]
    if int(call.attrs.get("groups", 1)) == 1:
        return per_group == 1
    return per_group != 1


def _on_cpus(feature: str, ops: list[OpCall]) -> list[OpCall]:
    """``ops`` marked to run only where the runtime's CPU has ``feature`` (the runtime leaves the others out)."""
    return [replace(op, attrs=dict(op.attrs, only_if_cpu=feature)) for op in ops]


class _Lowering:
    def __init__(self, graph: PartitionGraph):
        self.next_id = graph.unused_id()
        self.packed: dict[int, Tensor] = {}  # an 8-bit constant's id -> its packed bytes (one per constant)

    def tensor(self, shape, dtype: str = "float32", kind: str = "op", data=None) -> Tensor:
        self.next_id += 1
        return Tensor(self.next_id, tuple(shape), dtype, kind, data)

    def lone(self, call: OpCall) -> list[OpCall]:
        return [OpCall(call.op, [call.inputs[0]], call.output, _qattrs(qdq_params(call)), call.rule, call.group)]

    def float_core(self, call: OpCall, weight: Tensor | None = None, bias: Tensor | None = None) -> list[OpCall]:
        """A conv or matmul unit as its definition: DQ(x), the float op on the dequantized weight (and bias),
        a clip for a narrowed range, Q. The runtime fuses the bias and the clip into the float primitive.
        ``weight`` and ``bias``: their dequantized constants, when already made."""
        unit = call.quant
        x = self.tensor(call.inputs[0].shape)
        ops = [OpCall("relax.dequantize", [call.inputs[0]], x, _qattrs(unit.inputs[0]), call.rule, call.group)]
        if weight is None:
            weight_ops, weight = self.dequantized_at_load(call, call.inputs[1], unit.inputs[1])
            ops = weight_ops + ops
        result = self.tensor(call.output.shape)
        ops.append(OpCall(unit.float_ops[0], [x, weight], result, dict(call.attrs), call.rule, call.group))
        if len(call.inputs) == 3:
            bias = bias or self.dequantized_constant(call.inputs[2], unit.inputs[2])
            if call.op != "qnn.matmul":  # a conv's: per output channel of NCW / NCHW
                shape = (1, bias.shape[0]) + (1,) * (len(call.output.shape) - 2)
                bias = self.tensor(shape, kind="const", data=bias.data.reshape(shape))
            biased = self.tensor(call.output.shape)
            ops.append(OpCall("relax.add", [result, bias], biased, {}, call.rule, call.group))
            result = biased
        return ops + self.requantized(call, result, unit.output, unit.output_range)

    def requantized(self, call: OpCall, result: Tensor, output: QParams, output_range: tuple[int, int]) -> list:
        """[clip to ``output_range`` in real units], quantize ``result`` into ``call``'s output."""
        ops = []
        info = np.iinfo(call.output.dtype)
        lo, hi = output_range
        if (lo, hi) != (info.min, info.max):
            scale, zp = float(output.scale), int(output.zero_point)
            clipped = self.tensor(call.output.shape)
            ops.append(OpCall("relax.clip", [result], clipped, {"min": (lo - zp) * scale, "max": (hi - zp) * scale},
                              call.rule, call.group))
            result = clipped
        ops.append(OpCall("relax.quantize", [result], call.output, _qattrs(output), call.rule, call.group))
        return ops

    def integer_core(self, call: OpCall) -> list[OpCall]:
        unit = call.quant
        if _faster_in_float(call):
            return self.float_core(call)
        bias = self.dequantized_constant(call.inputs[2], unit.inputs[2]) if len(call.inputs) == 3 else None
        weight_bound = np.abs(call.inputs[1].data.astype(np.int32)).max(initial=0)
        integer = self.integer_op(call, self.packed_constant(call.inputs[1]), bias)
        if call.inputs[0].dtype == "uint8" and weight_bound <= _SAFE_WEIGHT:  # exact on every CPU
            return [integer]
        weight_ops, weight = self.dequantized_at_load(call, call.inputs[1], unit.inputs[1])
        return _on_cpus(_VNNI, [integer]) + _on_cpus(_NO_VNNI, weight_ops + self.float_core(call, weight, bias))

    @staticmethod
    def integer_op(call: OpCall, weight: Tensor, bias: Tensor | None) -> OpCall:
        """The unit as one int8 op: ``weight`` the s8 weight's packed bytes (its shape is ``w_shape``), the bias in
        real units (oneDNN adds the bias after the input scales)."""
        unit = call.quant
        x, w, out = unit.inputs[0], unit.inputs[1], unit.output
        lo, hi = unit.output_range
        attrs = dict(call.attrs, x_scale=float(x.scale), x_zero_point=int(x.zero_point),
                     w_scale=[float(s) for s in np.atleast_1d(w.scale)], y_scale=float(out.scale),
                     y_zero_point=int(out.zero_point), out_min=int(lo), out_max=int(hi),
                     w_shape=[int(d) for d in call.inputs[1].shape])
        inputs = [call.inputs[0], weight] + ([bias] if bias is not None else [])
        return OpCall(call.op, inputs, call.output, attrs, call.rule, call.group)

    def packed_constant(self, tensor: Tensor) -> Tensor:
        """The 8-bit constant ``tensor`` at 8 bits: its bytes as a float32 constant a quarter as long
        (``dynamic.packed_bytes``), made once per constant (a unit's int8 op and its float definition share it)."""
        if tensor.id not in self.packed:
            data = packed_bytes(np.asarray(tensor.data).view(np.int8) if tensor.dtype == "uint8" else tensor.data)
            self.packed[tensor.id] = self.tensor(data.shape, kind="const", data=data)
        return self.packed[tensor.id]

    def dequantized_at_load(self, call: OpCall, tensor: Tensor, params: QParams) -> tuple[list[OpCall], Tensor]:
        """DQ(``tensor``) as the runtime computes it at load from the packed 8-bit constant, the way
        :meth:`dequantized_constant` does here (``byoc.dequantize_constant``: ``shape``, ``dtype`` and the
        quantization); a constant of another width is computed now."""
        if tensor.dtype not in ("int8", "uint8"):
            return [], self.dequantized_constant(tensor, params)
        real = self.tensor(tensor.shape)
        attrs = dict(_qattrs(params), shape=[int(d) for d in tensor.shape], dtype=tensor.dtype)
        return [OpCall(DEQUANTIZE_CONSTANT, [self.packed_constant(tensor)], real, attrs, call.rule, call.group)], real

    def dequantized_constant(self, tensor: Tensor, params: QParams) -> Tensor:
        """A float32 constant holding DQ(``tensor``), computed now (the runtime takes float32 constants only).

        In float64, rounded once: the same float32 as ONNX's float32 product for 8-bit values, and exact
        for an int32 bias beyond float32's 24 bits."""
        scale, zero_point = params.scale.astype(np.float64), params.zero_point.astype(np.float64)
        if params.per_channel:
            shape = [1] * tensor.data.ndim
            shape[params.axis] = -1
            scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
        real = (tensor.data.astype(np.float64) - zero_point) * scale
        return self.tensor(tensor.shape, kind="const", data=real.astype(np.float32))

    def integer_add(self, call: OpCall) -> list[OpCall]:
        """An add of two 8-bit activations of the output's shape: one int8 binary in the runtime."""
        unit = call.quant
        (a, b), y = unit.inputs, unit.output
        lo, hi = unit.output_range
        attrs = {"a_scale": float(a.scale), "a_zero_point": int(a.zero_point), "b_scale": float(b.scale),
                 "b_zero_point": int(b.zero_point), "y_scale": float(y.scale), "y_zero_point": int(y.zero_point),
                 "out_min": int(lo), "out_max": int(hi)}
        return [OpCall("qnn.add", list(call.inputs), call.output, attrs, call.rule, call.group)]

    def through_float(self, call: OpCall) -> list[OpCall]:
        unit = call.quant
        if unit.float_ops[0] in _ON_INTEGERS and _keeps_quantization(call):
            return [OpCall(unit.float_ops[0], call.inputs, call.output, dict(call.attrs), call.rule, call.group)]
        if call.op == "qnn.add" and all(t.kind != "const" and t.shape == call.output.shape for t in call.inputs) \
                and not any(p.per_channel for p in unit.inputs):
            return self.integer_add(call)
        return self.via_float(call, unit.float_ops[0], unit.inputs, unit.output, unit.output_range)

    def via_float(self, call: OpCall, op: str, inputs, output: QParams, output_range: tuple[int, int]) -> list:
        """Each input dequantized (``inputs``: their QParams; a constant's computed now), the float ``op``, and
        the result requantized into ``call``'s output."""
        ops, reals = [], []
        for tensor, params in zip(call.inputs, inputs):
            if tensor.kind == "const":
                reals.append(self.dequantized_constant(tensor, params))
                continue
            real = self.tensor(tensor.shape)
            ops.append(OpCall("relax.dequantize", [tensor], real, _qattrs(params), call.rule, call.group))
            reals.append(real)
        result = self.tensor(call.output.shape)
        ops.append(OpCall(op, reals, result, dict(call.attrs), call.rule, call.group))
        return ops + self.requantized(call, result, output, output_range)

    def integer_as_float(self, call: OpCall) -> list[OpCall]:
        """A data-movement op on 8-bit integers (a QOperator model's MaxPool, Flatten): through float, exactly."""
        if call.op in _ON_INTEGERS:
            return [call]
        identity = QParams.identity(call.output.dtype)
        info = np.iinfo(call.output.dtype)
        return self.via_float(call, call.op, [identity] * len(call.inputs), identity, (int(info.min), int(info.max)))


def lowered_for_dnnl(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with its quantized ops as the oneDNN runtime takes them (see the module docstring)."""
    if not any(c.quant is not None or c.op in ("relax.quantize", "relax.dequantize") or c.output.dtype != "float32"
               for c in graph.ops):
        return graph
    lowering = _Lowering(graph)
    ops, computed = [], {}  # computed: DQ of a constant, by the id of the tensor it stands for
    for call in graph.ops:
        if any(t.id in computed for t in call.inputs):  # a new call: the caller's graph is left as it was
            call = replace(call, inputs=[computed.get(t.id, t) for t in call.inputs])
        if call.op == "relax.dequantize" and call.inputs[0].kind == "const":
            computed[call.output.id] = lowering.dequantized_constant(call.inputs[0], qdq_params(call))
        elif call.op in ("relax.quantize", "relax.dequantize"):
            ops += lowering.lone(call)
        elif call.op == "byoc.byte_table":  # an element-wise unit already computed (tables.py)
            ops.append(call)
        elif call.quant is None and call.output.dtype != "float32":
            ops += lowering.integer_as_float(call)
        elif call.quant is None:
            ops.append(call)
        elif call.op in _INTEGER_CORES:
            ops += lowering.integer_core(call)
        elif call.op == "qnn.conv2d_transpose":  # as its definition, on the float32 deconvolution (no int8 one yet)
            ops += lowering.float_core(call)
        else:
            ops += lowering.through_float(call)
    for output in graph.outputs:
        if output.id in computed:  # a partition output that is DQ of a constant: a copy of the computed one
            ops.append(OpCall("relax.reshape", [computed[output.id]], output, {}, "", -1))
    return replace(graph, ops=ops)  # the same graph otherwise: its symbolic dims, its shape arguments

"""Quantized node units: ``DQ(x), DQ(w), DQ(b) -> Conv -> Q(y)`` offered to a vendor as one int8 op.

A QDQ model (what ``onnxruntime.quantization`` writes) computes each int8 op
as float ops between DequantizeLinear and QuantizeLinear. byoc keeps the
integer weights (see :mod:`byoc.pipeline.frontend.prepare.qdq_form`), so after import a unit
reads, in Relax::

    quantize(relu(add(conv2d(dequantize(x), dequantize(w)), reshape(dequantize(b)))))

For the rules, :func:`qdq_rules` builds one :class:`~byoc.vendor.PatternRule`
per unit kind (conv1d, conv2d, matmul, add, multiply, pooling, mean, concat,
reshape, transpose, sigmoid, softmax, relu, clip) plus op rules for the
lone QuantizeLinear and DequantizeLinear at the model's edges, and
:func:`qdq_supported` is the check every vendor needs first: 8-bit
integers, per-tensor activations, per-channel scales only along a weight's
output channels.

For the codegen, :func:`byoc.vendor.graph.partition_graph` folds each unit
into one :class:`~byoc.vendor.graph.OpCall` named ``qnn.<op>``
(``qnn.conv2d``), whose inputs are the integer tensors and whose ``quant``
(:class:`QuantizedUnit`) holds the scales and zero points as numpy values,
the quantization axes and the output range a folded relu or clip leaves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from byoc.vendor.checks import CONVS
from byoc.vendor.ops import QParams, QuantizedUnit
from byoc.vendor.rules import SUPPORTED, CheckResult, Match, OpRule, PatternRule

__all__ = ["INT8_ACTIVATIONS_LEVEL", "INT8_ACTIVATIONS_OUT_DTYPE", "OPTIONAL_UNIT_OPS", "QParams", "QuantizedUnit",
           "QuantizedUnitRule", "TABLE_BINARY", "TABLE_UNARY", "UNIT_OPS", "int8_activations", "qdq_rules",
           "qdq_supported", "qdq_table_rule", "qdq_table_supported", "quantized_range", "unit_table"]

# -- weight-only int4/int8 matmuls (onnxruntime's MatMulNBits), as the importer spells them ----------------
#: MatMulNBits' accuracy_level for int8 activations (onnxruntime's CompInt8; 0 unset, 1-3 float ones).
INT8_ACTIVATIONS_LEVEL = 4
#: The matmul's out_dtype that carries accuracy_level 4 through the import (otherwise None: the inputs' dtype).
INT8_ACTIVATIONS_OUT_DTYPE = "float32"


def int8_activations(matmul_attrs: dict) -> bool:
    """Whether the matmul of an imported MatMulNBits (its attributes as :class:`byoc.vendor.ops.OpCall` holds
    them) came from ``accuracy_level`` 4: int8 activations."""
    return str(matmul_attrs.get("out_dtype") or "") == INT8_ACTIVATIONS_OUT_DTYPE


#: Quantized unit kinds: the float op at the unit's core (Relax name).
UNIT_OPS = (
    "relax.nn.conv1d", "relax.nn.conv2d", "relax.matmul", "relax.add", "relax.multiply", "relax.nn.max_pool2d",
    "relax.nn.avg_pool2d", "relax.mean", "relax.concat", "relax.reshape", "relax.permute_dims", "relax.sigmoid",
    "relax.nn.softmax", "relax.nn.relu", "relax.clip",
)
_ACTIVATIONS = ("relax.nn.relu", "relax.clip")
#: Unit kinds a vendor takes only when it names them (``qdq_rules(..., ops=...)``).
OPTIONAL_UNIT_OPS = ("relax.nn.conv2d_transpose",)
#: Unit kinds with a constant weight (and an optional bias), and the weight's output-channel axis (-1: the last).
WEIGHT_AXIS = {**dict.fromkeys(CONVS, 0), "relax.nn.conv2d_transpose": 1, "relax.matmul": -1}
WEIGHTED = tuple(WEIGHT_AXIS)
_INT8 = ("int8", "uint8")
_CONCAT_INPUTS = range(2, 9)


def qparams(scale: np.ndarray, zero_point: np.ndarray, axis: int, ndim: int, dtype: str) -> QParams:
    """:class:`QParams` from a Q/DQ op's constants and axis attribute (normalized to 0..ndim-1)."""
    scale = np.asarray(scale, dtype=np.float32)
    zero_point = np.asarray(zero_point)
    if scale.size == 1:
        return QParams(scale.reshape(()), zero_point.reshape(()).astype(dtype), None, dtype)
    # A per-axis scale may come with one zero point (the default 0): it holds for every channel.
    zero_point = np.broadcast_to(zero_point.reshape(-1), (scale.size,)).astype(dtype)
    return QParams(scale.reshape(-1), zero_point, axis % ndim if ndim else 0, dtype)


def quantized_range(params: QParams, low: float = -np.inf, high: float = np.inf) -> tuple[int, int]:
    """The integer range of ``quantize(clip(x, low, high))`` for a per-tensor ``params``."""
    info = np.iinfo(params.dtype)
    lo, hi = int(info.min), int(info.max)
    scale, zp = float(params.scale), int(params.zero_point)
    if np.isfinite(low):
        lo = max(lo, int(np.rint(np.float32(low) / np.float32(scale))) + zp)
    if np.isfinite(high):
        hi = min(hi, int(np.rint(np.float32(high) / np.float32(scale))) + zp)
    return lo, hi


# -- patterns -----------------------------------------------------------------------------------

def _dequantized(x=None):
    from tvm.relax.dpl import is_const, is_op, wildcard

    return is_op("relax.dequantize")(x if x is not None else wildcard(), is_const(), is_const())


def _unit_pattern(op: str):
    """``quantize([relu|clip](core))`` around one unit kind; annotations: ``core``."""
    import tvm
    from tvm.relax.dpl import is_const, is_op, is_tuple, wildcard

    if op in WEIGHT_AXIS and op != "relax.matmul":  # a conv or deconv: constant weight, bias through a reshape
        core = is_op(op)(_dequantized(), _dequantized(is_const()))
        bias = _dequantized(is_const())
        body = core | is_op("relax.add")(core, bias | is_op("relax.reshape")(bias, wildcard()))
    elif op == "relax.matmul":  # a Gemm's bias may be left in float32 (onnxruntime's quantizer does for some)
        core = is_op(op)(_dequantized(), _dequantized())
        body = core | is_op("relax.add")(core, _dequantized(is_const()) | is_const())
    elif op == "relax.concat":
        tuples = [is_tuple([_dequantized() for _ in range(n)]) for n in _CONCAT_INPUTS]
        either = tuples[0]
        for t in tuples[1:]:
            either = either | t
        core = body = is_op(op)(either)
    elif op in ("relax.add", "relax.multiply"):
        core = body = is_op(op)(_dequantized(), _dequantized())
    else:  # one tensor operand; the other arguments are attributes (a shape, clip's bounds)
        arity = tvm.ir.Op.get(op).num_inputs
        core = body = is_op(op)(_dequantized(), *[wildcard() for _ in range(arity - 1)])
    if op not in _ACTIVATIONS:
        body = body | is_op("relax.nn.relu")(body) | is_op("relax.clip")(body, wildcard(), wildcard())
    return is_op("relax.quantize")(body, is_const(), is_const()), {"core": core}


@dataclass(frozen=True)
class QuantizedUnitRule(PatternRule):
    """A :class:`PatternRule` that takes a QDQ node unit; reports name the nodes it takes "(QDQ int8)".

    ``unit`` is the float op at the unit's core (``"relax.nn.conv2d"``).
    """

    unit: str = ""

    def describe(self) -> str:
        """The unit in one line, for the op table (the pattern itself spells out every alternative)."""
        operands = {**dict.fromkeys((*CONVS, *OPTIONAL_UNIT_OPS), "DQ(*), DQ(const) [+ DQ(const bias)]"),
                    "relax.matmul": "DQ(*), DQ(*) [+ DQ(const bias) | float32 const bias]",
                    "relax.concat": "DQ(*), ..."}.get(self.unit, "DQ(*)")
        tail = "" if self.unit in _ACTIVATIONS else " [-> relu | clip]"
        return f"QDQ unit: {operands} -> {self.unit}{tail} -> Q"


def qdq_rules(check, *positional, ops: tuple[str, ...] = UNIT_OPS) -> tuple:
    """Rules that take the QDQ units of ``ops`` and the lone Q/DQ ops, all under ``check``.

    List them before a vendor's float rules: a unit is larger than the float
    op at its core. Rule names are ``q<op>`` (``qconv2d``), ``quantize`` and
    ``dequantize``, which the :class:`~byoc.vendor.Vendor` prefixes with its
    name (``acme.qconv2d``). ``ops`` may also come second, positionally. The
    older form ``qdq_rules("acme", check, ops)`` still works: it writes the
    prefix itself.
    """
    prefix = ""
    if isinstance(check, str):  # qdq_rules(vendor, check, ops)
        if not positional:
            raise TypeError("qdq_rules(vendor, check, ops=...) needs a check after the vendor's name")
        prefix, check, positional = f"{check}.", positional[0], positional[1:]
    if len(positional) > 1:
        raise TypeError(f"qdq_rules takes a check and its ops, got {len(positional)} more arguments")
    if positional:
        ops = positional[0]
    rules: list[PatternRule | OpRule] = []
    for op in ops:
        if op not in UNIT_OPS + OPTIONAL_UNIT_OPS:
            raise ValueError(f"{op!r} is not a quantized unit kind; known: {', '.join(UNIT_OPS + OPTIONAL_UNIT_OPS)}")
        short = op.rsplit(".", 1)[1]
        rules.append(QuantizedUnitRule(f"{prefix}q{short}", (lambda op=op: _unit_pattern(op)), check, unit=op))
    rules.append(OpRule(f"{prefix}quantize", "relax.quantize", check))
    rules.append(OpRule(f"{prefix}dequantize", "relax.dequantize", check))
    return tuple(rules)


# -- the check ------------------------------------------------------------------------------------

def qdq_supported(match: Match) -> CheckResult:
    """8-bit QDQ with constant parameters; per-channel only along a weight's output channels.

    A constant may be int32: a conv's or matmul's bias (onnxruntime's
    quantizer writes it so, with the scale ``x_scale * w_scale``), or the
    input of a lone DequantizeLinear.
    """
    core = match.call("core")
    core_op = core.op if core is not None else None
    weighted = core_op in WEIGHTED
    for call in match.ops_of("relax.quantize", "relax.dequantize"):
        quantized = call.output if call.op == "relax.quantize" else call.inputs[0]
        dtype = quantized.dtype
        constant = call.op == "relax.dequantize" and quantized.kind == "const"
        if dtype not in _INT8 and not (dtype == "int32" and constant and (weighted or core_op is None)):
            return f"{dtype} QDQ (int8 and uint8 only)"
        for param in call.inputs[1:3]:
            if param.kind != "const":
                return "a scale or zero point that is not a constant"
        scale = call.inputs[1].data
        if scale is None or scale.size == 1 or core_op is None:
            continue  # per tensor, or a lone Q/DQ, which computes any axis
        ndim = len(quantized.shape)
        axis = int(call.attrs["axis"]) % ndim
        if constant and weighted and (dtype == "int32" or axis == WEIGHT_AXIS[core_op] % ndim):
            continue
        what = "the weight" if constant else ("the output" if call.op == "relax.quantize" else "the input")
        return f"per-channel scale on axis {axis} of {what}"
    return SUPPORTED


# -- element-wise units as byte tables ---------------------------------------------------------------

#: One-tensor element-wise float ops a table unit chains (clip with its bounds as attributes).
TABLE_UNARY = ("relax.erf", "relax.tanh", "relax.sigmoid", "relax.exp", "relax.log", "relax.sqrt", "relax.negative",
               "relax.abs", "relax.nn.relu", "relax.clip", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu")
#: Binary element-wise float ops a table unit chains, with a scalar constant on either side.
TABLE_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.power")
#: The longest chain of element-wise ops one table unit takes.
MAX_TABLE_CHAIN = 6


def _table_pattern():
    """``quantize(f_n(...f_1(dequantize(x))))`` for 1 <= n <= MAX_TABLE_CHAIN element-wise steps, each a
    :data:`TABLE_UNARY` op or a :data:`TABLE_BINARY` op with a constant operand; annotations: ``source``
    (the dequantize)."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    source = _dequantized()
    x = source
    chains = []
    for _ in range(MAX_TABLE_CHAIN):
        step = is_op("relax.clip")(x, wildcard(), wildcard())
        for op in TABLE_UNARY:
            if op != "relax.clip":
                step = step | is_op(op)(x)
        for op in TABLE_BINARY:
            step = step | is_op(op)(x, is_const()) | is_op(op)(is_const(), x)
        x = step
        chains.append(x)
    body = chains[0]
    for chain in chains[1:]:
        body = body | chain
    return is_op("relax.quantize")(body, is_const(), is_const()), {"source": source}


@dataclass(frozen=True)
class QuantizedTableRule(PatternRule):
    """A :class:`PatternRule` that takes an element-wise QDQ unit computed as a 256-entry byte table."""

    unit: str = "table"

    def describe(self) -> str:
        """The unit in one line, for the op table."""
        return ("QDQ unit: DQ(*) -> 1-6 element-wise ops (" + ", ".join(o.rsplit(".", 1)[1] for o in TABLE_UNARY)
                + "; " + ", ".join(o.rsplit(".", 1)[1] for o in TABLE_BINARY)
                + " with a scalar constant) -> Q, as a byte table")


def qdq_table_rule(check, name: str = "qtable") -> QuantizedTableRule:
    """The rule that takes ``DQ(x) -> element-wise ops -> Q`` with 8-bit ``x`` and output as one unit whose
    output is a function of x's 256 codes (:func:`unit_table`), under ``check`` and
    :func:`qdq_table_supported`. List it after :func:`qdq_rules` (a lone relu or sigmoid unit is theirs) and
    before the vendor's float rules. Its codegen computes the table with :func:`unit_table`."""
    from byoc.vendor.checks import all_of

    return QuantizedTableRule(name, _table_pattern, all_of(qdq_table_supported, check))


def qdq_table_supported(match: Match) -> CheckResult:
    """8-bit QDQ, per tensor in and out, with constant parameters; scalar float32 constants in the chain."""
    for call in match.ops_of("relax.quantize", "relax.dequantize"):
        quantized = call.output if call.op == "relax.quantize" else call.inputs[0]
        if quantized.dtype not in _INT8:
            return f"{quantized.dtype} QDQ (int8 and uint8 only)"
        for param in call.inputs[1:3]:
            if param.kind != "const" or param.data is None:
                return "a scale or zero point that is not a constant"
            if param.data.size != 1:
                return "a per-channel quantization (a byte table is per tensor)"
    for call in match.ops_of(*TABLE_BINARY):
        for t in call.inputs:
            if t.kind == "const" and (t.data is None or t.data.size != 1 or t.dtype != "float32"):
                return f"a {call.op.rsplit('.', 1)[1]} by a constant that is not one float32 value"
    for call in match.ops:
        if call.op not in ("relax.quantize", "relax.dequantize") and call.output.dtype != "float32":
            return f"{call.output.dtype} {call.op} (float32 only)"
    return SUPPORTED


def _erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.array([math.erf(float(v)) for v in np.asarray(x, np.float64).reshape(-1)]).reshape(np.shape(x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


#: Each table op in float64, its result rounded to float32 (the ops' ONNX definitions).
_UNARY_F64: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relax.erf": _erf, "relax.tanh": np.tanh, "relax.sigmoid": _sigmoid, "relax.exp": np.exp, "relax.log": np.log,
    "relax.sqrt": np.sqrt, "relax.negative": np.negative, "relax.abs": np.abs,
    "relax.nn.relu": lambda x: np.maximum(x, 0.0),
    "relax.nn.gelu": lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),
    "relax.nn.gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3))),
    "relax.nn.silu": lambda x: x * _sigmoid(x),
}
_BINARY_F32: dict[str, Callable[[Any, Any], np.ndarray]] = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
               "relax.divide": np.divide, "relax.power": np.power}


def unit_table(source: QParams, steps, output: QParams) -> np.ndarray:
    """The 256 output bytes of ``quantize(steps(dequantize(b)))`` for the bytes ``b`` 0..255 (an int8 byte ``b``
    is the code ``int8(b)``; an int8 output code is stored as its byte), as ONNX defines each op.

    ``steps`` are :class:`~byoc.vendor.ops.OpCall` objects of :data:`TABLE_UNARY` and :data:`TABLE_BINARY` in
    order, each reading the one before (a binary's other operand a scalar constant). DequantizeLinear is
    ``(code - zero point) * scale`` in float32; each op's result is float32 (a transcendental computed in
    float64 and rounded once; a binary op in float32, as ONNX runtimes compute it); QuantizeLinear divides
    by the scale in float32, rounds half to even, adds the zero point and saturates. A NaN quantizes to the
    zero point.
    """
    codes = np.arange(256, dtype=np.uint8).view(source.dtype).astype(np.int32)
    scale = np.float32(source.scale)
    x = ((codes - int(source.zero_point)).astype(np.float32) * scale).astype(np.float32)
    with np.errstate(all="ignore"):
        for call in steps:
            if call.op in _BINARY_F32:
                first = call.inputs[0].kind != "const"  # the chain's tensor comes first: x op c
                const = call.inputs[1] if first else call.inputs[0]
                c = np.float32(np.asarray(const.data, np.float32).reshape(()))
                x = _BINARY_F32[call.op](x, c) if first else _BINARY_F32[call.op](c, x)
            elif call.op == "relax.clip":
                x = np.clip(x, np.float32(call.attrs["min"]), np.float32(call.attrs["max"]))
            elif call.op in _UNARY_F64:
                x = _UNARY_F64[call.op](x.astype(np.float64))
            else:
                raise ValueError(f"{call.op} is not an element-wise op of a byte table")
            x = np.asarray(x).astype(np.float32)
        info = np.iinfo(output.dtype)
        q = np.rint(x / np.float32(output.scale)).astype(np.float64) + int(output.zero_point)
    q = np.where(np.isnan(q), int(output.zero_point), np.clip(q, info.min, info.max))
    return q.astype(output.dtype).view(np.uint8)

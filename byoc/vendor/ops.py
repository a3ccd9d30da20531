"""The plain view of op calls that a vendor's checks and its codegen share: :class:`OpCall` and :class:`Tensor`.

An op call is its Relax op's name, its tensor operands and result (:class:`Tensor`: shape, dtype, kind,
a constant's numpy value) and its attributes as Python values, non-tensor arguments included (clip's
``min``/``max``, reshape's ``shape``). A codegen reads a partition's op calls from
:func:`byoc.vendor.graph.partition_graph`; a rule's check reads the op calls of its match from the
:class:`~byoc.vendor.rules.Match` (``match.ops``, ``match.op``, ``match.tensor(name)``,
``match.call(name)``), written the same way (:class:`MatchView`) the first time the check asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator, Optional

import numpy as np

from byoc.vendor.values import Dim, const_array, dim_names, dim_text, is_prim_value, is_tensor_const, shape_dims

__all__ = ["MatchView", "OpCall", "QParams", "QuantizedUnit", "Tensor", "attrs_dict"]


@dataclass
class Tensor:
    """A value an op reads or writes: an input, a constant, or an op result.

    ``shape`` holds an int per static dim and the text of each symbolic one (``"batch"``,
    ``"sequence_length*2"``). ``kind`` is ``"input"``, ``"const"`` (``data`` then holds its value as a
    numpy array) or ``"op"``. In a check's view (:class:`MatchView`) ``shape`` is None for a tensor of
    unknown rank, and an operand that another op of the match computes is an ``"input"`` as well.
    """

    id: int
    shape: tuple[Dim, ...]
    dtype: str
    kind: str  # "input" | "const" | "op"
    data: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return int(np.prod(np.asarray(self.shape, dtype=np.int64)))

    @property
    def dim_names(self) -> list[str]:
        """The symbolic dims the shape depends on, by name, in order of first use (``[]`` when static)."""
        names: list[str] = []
        for d in self.shape or ():
            if isinstance(d, str):
                names += [n for n in _NAME.findall(d) if n not in names]
        return names


_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b(?!\s*\()")  # a dim's name; min( and max( are operators


# -- the quantization of a qnn.* call (byoc.vendor.quantized) ---------------------------------------

@dataclass(frozen=True)
class QParams:
    """How one integer tensor maps to real values: ``real = (q - zero_point) * scale``.

    ``scale`` (float32) and ``zero_point`` (the tensor's dtype) are 0-d for a
    per-tensor quantization, else 1-d along ``axis`` of the tensor.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: Optional[int]
    dtype: str

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    @classmethod
    def identity(cls, dtype: str) -> "QParams":
        """Scale 1, zero point 0: an 8-bit tensor's values as they are."""
        return cls(np.ones((), np.float32), np.zeros((), dtype), None, dtype)


@dataclass(frozen=True)
class QuantizedUnit:
    """The quantization of a ``qnn.*`` op call.

    ``inputs`` holds one :class:`QParams` per input of the op call (a conv's
    or matmul's bias included: int32, or a float32 one with scale 1 and zero
    point 0); ``output`` the result's; ``output_range`` the integer range the
    result is clamped to, narrower than its dtype's when the unit ends in a
    relu or clip; ``float_ops`` the Relax ops the unit stands for, in order (``("relax.nn.conv2d", "relax.add", "relax.nn.relu")``).
    """

    inputs: tuple
    output: QParams
    output_range: tuple[int, int]
    float_ops: tuple[str, ...]



@dataclass
class OpCall:
    """One op call: ``op`` is the Relax op name (``"relax.nn.conv2d"``).

    ``attrs`` holds the op's attributes plus its non-tensor arguments under
    their argument names (``min``/``max`` of clip, ``shape`` of reshape;
    ``arg<index>`` where the op names none, as strided_slice's axes, begin,
    end and strides). ``rule`` is the vendor rule that took this op and
    ``group`` numbers the composite (pattern match) it belongs to. An op with
    several results is one call per result for ``relax.split``
    (``attrs["result_index"]`` says which), else one call for its first result.

    A quantized node unit is one call named ``qnn.<op>`` (``qnn.conv2d``):
    its inputs are the integer tensors (a conv's or matmul's bias last:
    int32, or a matmul's float32 with scale 1), ``attrs`` are the float op's,
    and ``quant`` holds the scales and zero points (see
    :mod:`byoc.vendor.quantized`). A check sees a unit's ops one by one.
    """

    op: str
    inputs: list[Tensor]
    output: Tensor
    attrs: dict[str, Any]
    rule: str
    group: int
    quant: Optional[QuantizedUnit] = None


def python_value(value):
    """TVM attribute values (IntImm, FloatImm, arrays, strings) as Python values; a symbolic dim as its text."""
    import tvm

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(getattr(value, "value", None), (int, float)):
        return value.value
    if tvm.ir.is_prim_expr(value):
        try:
            return dim_text(value)
        except ValueError:
            return str(value)
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return tuple(python_value(v) for v in value)
    return str(value)


def attrs_dict(attrs) -> dict[str, Any]:
    """An op's attribute node as a dict of Python values."""
    if attrs is None:
        return {}
    out = {}
    for key in dir(attrs):
        if key.startswith("_") or key in ("id_",):
            continue
        value = getattr(attrs, key)
        if callable(value):
            continue
        out[key] = python_value(value)
    return out


# -- a check's view of its match --------------------------------------------------------------------

#: Multi-result ops whose results are independent: each is an OpCall of its own (``attrs["result_index"]``).
PER_RESULT = {"relax.split"}


class _ExprTensor(Tensor):
    """A :class:`Tensor` read off a Relax value: its shape and data are read when first asked for (a check
    that reads only dtypes costs no shape, and a weight is copied to numpy only when a check reads it)."""

    def __init__(self, number: int, ty, kind: str, expr):
        self.id, self.dtype, self.kind = number, str(ty.dtype), kind
        self._ty, self._expr = ty, expr

    @cached_property
    def shape(self):
        return shape_dims(self._ty.shape)  # raises ValueError for a dim that is not integer arithmetic

    @cached_property
    def data(self):
        return const_array(self._expr) if self.kind == "const" else None

    @property
    def dim_names(self) -> list[str]:
        return dim_names(self._ty.shape)


class _ExprCall(OpCall):
    """An :class:`OpCall` read off a Relax call; its attributes are read when first asked for."""

    def __init__(self, call, inputs: list[Tensor], output: Optional[Tensor], rule: str, extra: dict):
        self.op, self.inputs, self.rule, self.group, self.quant = call.op.name, inputs, rule, 0, None
        self.output = output  # type: ignore[assignment]  # None only for an op whose result is no tensor
        self._call, self._extra = call, extra

    @cached_property
    def attrs(self):
        from tvm import relax

        attrs = attrs_dict(self._call.attrs)
        names = [a.name for a in self._call.op.arguments]
        for index, arg in enumerate(self._call.args):
            key = names[index] if index < len(names) else f"arg{index}"
            if is_prim_value(arg):
                attrs[key] = python_value(arg)
            elif isinstance(arg, relax.ShapeExpr):
                attrs[key] = python_value(arg.values)
            elif isinstance(arg, relax.Tuple) and all(is_prim_value(f) for f in arg.fields):
                attrs[key] = python_value(arg.fields)
            elif not _tensor_fields(arg):
                # a shape or values known only at run time: its dims where its type has them, else None
                values = getattr(getattr(arg, "ty", None), "values", None)
                attrs[key] = python_value(values) if values is not None else None
        attrs.update(self._extra)
        return attrs


def _tensor_type(expr):
    from tvm import relax

    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def _tensor_fields(expr) -> list:
    """The tensors ``expr`` is or holds (a tuple's, flattened), in order."""
    from tvm import relax

    if isinstance(expr, relax.Tuple):
        return [t for item in expr.fields for t in _tensor_fields(item)]
    return [expr] if _tensor_type(expr) is not None else []


class MatchView:
    """The op calls of a match as :class:`OpCall` objects, in the order of ``calls`` (what ``Match.ops`` holds).

    ``calls`` are the matched Relax calls. Each tensor of the match is one
    :class:`Tensor` (a value read twice is the same object); a call's result
    is of kind ``"op"``, a constant ``"const"``, any other operand ``"input"``.
    """

    def __init__(self, calls, rule: str):
        self._tensors: dict[Any, Tensor] = {}
        self._ops_of: dict[Any, list[OpCall]] = {}
        self.ops: list[OpCall] = []
        for call in calls:
            inputs = [self.tensor(t) for arg in call.args for t in _tensor_fields(arg)]
            ops: list[OpCall] = [_ExprCall(call, inputs, self._result(call, index, ty), rule, extra)
                   for index, ty, extra in self._results(call)]
            self._ops_of[call] = ops
            self.ops.extend(ops)

    def _results(self, call) -> Iterator[tuple[int, Any, dict]]:
        from tvm import relax

        ty = getattr(call, "ty", None)
        if not isinstance(ty, relax.TupleType):
            yield 0, ty if isinstance(ty, relax.TensorType) else None, {}
            return
        fields = [(i, f) for i, f in enumerate(ty.fields) if isinstance(f, relax.TensorType)]
        if call.op.name in PER_RESULT and fields:
            for index, field_ty in fields:
                yield index, field_ty, {"result_index": index}
        else:
            yield 0, fields[0][1] if fields and fields[0][0] == 0 else None, {}

    def _result(self, call, index: int, ty) -> Optional[Tensor]:
        if ty is None:
            return None
        key = call if index == 0 else (call, index)
        if key not in self._tensors:
            self._tensors[key] = _ExprTensor(len(self._tensors), ty, "op", call)
        return self._tensors[key]

    def tensor(self, expr) -> Tensor:
        """The :class:`Tensor` of a tensor-typed Relax expression of the match (a call: its first result)."""
        if expr in self._ops_of:
            return self._ops_of[expr][0].output
        if expr not in self._tensors:
            ty = _tensor_type(expr)
            if ty is None:
                raise TypeError(f"{type(expr).__name__} is not a tensor")
            kind = "const" if is_tensor_const(expr) else "input"
            self._tensors[expr] = _ExprTensor(len(self._tensors), ty, kind, expr)
        return self._tensors[expr]

    def call(self, expr) -> Optional[OpCall]:
        """The :class:`OpCall` of a matched Relax call (a split: its first result's), or None."""
        ops = self._ops_of.get(expr)
        return ops[0] if ops else None

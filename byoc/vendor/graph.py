"""A plain-Python view of one partition, for codegens.

TVM hands a codegen a Relax function whose body calls composite functions,
which in turn call ops. Codegens want something flatter: a list of op calls
in execution order, each with its input and output tensors, its attributes
as Python values, and the rule that took it. :func:`partition_graph` builds
that view; both reference codegens (C source and JSON runtime) use it.
Its :class:`OpCall` and :class:`Tensor` (:mod:`byoc.vendor.ops`) are what
a rule's check reads of its match, too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from byoc.errors import UnsupportedConstruct
from byoc.vendor.quantized import WEIGHTED, QParams, QuantizedUnit, qparams, quantized_range
from byoc.vendor.ops import PER_RESULT as _PER_RESULT
from byoc.vendor.ops import OpCall, Tensor, attrs_dict
from byoc.vendor.ops import python_value as _python_value
from byoc.vendor.values import Dim, const_array, dim_text, dim_tree, is_prim_value, shape_values, is_tensor_const, tree_names


@dataclass
class PartitionGraph:
    """A partition as a flat graph: ``symbol`` is the function to export.

    ``dims`` maps the text of each symbolic dim in a tensor's shape to its
    JSON form (:func:`byoc.vendor.values.dim_tree`); empty when every shape is
    static. A codegen that compiles only static shapes refuses a graph with
    ``dims`` or ``shape_arguments`` (:class:`~byoc.errors.UnsupportedConstruct`).
    """

    symbol: str
    inputs: list[Tensor]
    outputs: list[Tensor]
    ops: list[OpCall]
    function: Any = field(repr=False, default=None)
    dims: dict[str, Any] = field(default_factory=dict)
    #: (position among the call's arguments, its dims) for each shape TVM passes next to the tensors: it gives
    #: the sizes of dims that are no whole dim of any input (``seq`` of a ``(batch, seq*16)``). A dim is a
    #: symbolic dim's name, or an int where it gives none: a static size, or 0 for an expression of dims
    #: sized elsewhere.
    shape_arguments: list[tuple[int, tuple[Dim, ...]]] = field(default_factory=list)
    #: The vendor's options as this build resolved them: what ``compile`` gets as ``options`` too, and all that
    #: a hook without that argument (``standalone_source``, a partition check) sees of them.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Each symbolic dim of the model, by name, with its ``(min, max)`` (max None when unbounded): the sizes a
    #: static-shape codegen may specialize for.
    dim_bounds: Mapping[str, tuple] = field(default_factory=dict)
    #: The sizes this graph is specialized for, by symbolic dim (a static-shape vendor's partition, compiled once
    #: per size a build names); empty for a graph of the partition as the model has it.
    sizes: Mapping[str, int] = field(default_factory=dict)
    #: For a codegen with a device memory (:mod:`byoc.vendor.device`): input position -> the slot (a device buffer
    #: shared by the vendor's partitions, named) it is already in, put there by an earlier partition of the vendor:
    #: it is not copied in, and its host argument is not read.
    resident_inputs: Mapping[int, str] = field(default_factory=dict)
    #: Output position -> the slot to leave it in on the device, for later partitions of the vendor.
    resident_outputs: Mapping[int, str] = field(default_factory=dict)
    #: The resident outputs nothing on the host reads: not copied out, their host argument is not written.
    device_only_outputs: frozenset = frozenset()

    @property
    def constants(self) -> list[Tensor]:
        seen: dict[int, Tensor] = {}
        for call in self.ops:
            for t in call.inputs:
                if t.kind == "const":
                    seen.setdefault(t.id, t)
        return list(seen.values())

    def unused_id(self) -> int:
        """The first tensor id above every id the graph uses: where a codegen's rewrite numbers new tensors."""
        return 1 + max([t.id for t in self.inputs] + [c.output.id for c in self.ops]
                       + [t.id for c in self.ops for t in c.inputs])


@dataclass
class _Unavailable:
    """A result of a multi-result op beyond the first, which no OpCall computes."""

    op: str
    index: int


class _Builder:
    def __init__(self):
        self.next_id = 0
        self.const_ids: dict[Any, Tensor] = {}
        self.dims: dict[str, Any] = {}

    def shape(self, ty) -> tuple[Dim, ...]:
        values = shape_values(ty.shape)
        if values is None:
            raise UnsupportedConstruct("a tensor whose dims are unknown before the run")
        return self.dims_of(values)

    def dims_of(self, values) -> tuple[Dim, ...]:
        dims = []
        for d in values:
            try:
                text = dim_text(d)
            except ValueError:
                raise UnsupportedConstruct(f"a dim that is not integer arithmetic on symbolic dims: {d}") from None
            if isinstance(text, str):
                self.dims[text] = dim_tree(d)
            dims.append(text)
        return tuple(dims)

    def tensor(self, ty, kind, data=None) -> Tensor:
        t = Tensor(self.next_id, self.shape(ty), str(ty.dtype), kind, data)
        self.next_id += 1
        return t

    def constant(self, const) -> Tensor:
        if const not in self.const_ids:
            self.const_ids[const] = self.tensor(const.ty, "const", const_array(const))
        return self.const_ids[const]


def partition_graph(func, symbol: str, options: Optional[Mapping[str, Any]] = None,
                    dim_bounds: Optional[Mapping[str, tuple]] = None,
                    sizes: Optional[Mapping[str, int]] = None) -> PartitionGraph:
    """Flatten a merged partition function (as given to ``relax.ext.*``); ``options``, ``dim_bounds`` and
    ``sizes`` are carried as they are."""
    from tvm import ir, relax

    builder = _Builder()
    env: dict[Any, Any] = {}
    inputs = []
    shape_arguments = []
    for position, param in enumerate(func.params):
        if isinstance(param.ty, relax.ShapeType):
            # TVM passes a shape next to the tensors when a symbolic dim is no whole dim of any of them
            # (softmax over (batch, seq*16) needs seq): the runtime reads the dims' sizes from it.
            if not param.ty.values:
                raise UnsupportedConstruct(f"a shape argument {param.ty} of unknown values")
            shape_arguments.append((position, builder.dims_of(param.ty.values)))
            env[param] = shape_arguments[-1][1]  # read by no op: composites take it only to define the dims
            continue
        t = builder.tensor(param.ty, "input")
        env[param] = t
        inputs.append(t)
    ops: list[OpCall] = []
    group = 0

    def value_of(expr, local_env):
        if is_tensor_const(expr):
            return builder.constant(expr)
        if isinstance(expr, relax.Var):
            if expr not in local_env:
                raise UnsupportedConstruct(f"an unbound variable {expr.name}")
            return local_env[expr]
        if isinstance(expr, relax.Tuple):
            return [value_of(f, local_env) for f in expr.fields]
        if isinstance(expr, relax.TupleGetItem):
            value = value_of(expr.tuple_value, local_env)[expr.index]
            if isinstance(value, _Unavailable):
                raise UnsupportedConstruct(f"result {value.index} of {value.op} (only the first result is computed)")
            return value
        if isinstance(expr, relax.ShapeExpr):  # a shape given to a composite: a tuple of dims, as a shape argument
            return builder.dims_of(expr.values)
        raise UnsupportedConstruct(f"an expression of type {type(expr).__name__}")

    def run_body(seq, local_env, rule):
        for block in seq.blocks:
            for binding in block.bindings:
                value = binding.value
                if isinstance(value, relax.Function):
                    local_env[binding.var] = value
                elif isinstance(value, relax.Call) and isinstance(value.op, ir.Op):
                    local_env[binding.var] = emit_op(value, binding.var, local_env, rule)
                elif isinstance(value, relax.Call) and value.op in local_env:
                    local_env[binding.var] = call_composite(local_env[value.op], value.args, local_env)
                else:
                    local_env[binding.var] = value_of(value, local_env)
        return value_of(seq.body, local_env)

    def emit_op(call, var, local_env, rule):
        tensors, attrs = [], attrs_dict(call.attrs)
        names = [a.name for a in call.op.arguments]
        for index, arg in enumerate(call.args):
            key = names[index] if index < len(names) else f"arg{index}"
            if is_prim_value(arg) or isinstance(arg, relax.ShapeExpr):
                attrs[key] = _python_value(arg.values if isinstance(arg, relax.ShapeExpr) else arg)
            elif isinstance(arg, relax.Tuple) and arg.fields and all(is_prim_value(f) for f in arg.fields):
                attrs[key] = _python_value(arg.fields)  # strided_slice's axes, begin, end, strides
            else:
                value = value_of(arg, local_env)
                if isinstance(value, tuple):  # a shape the composite was given (a reshape's target)
                    attrs[key] = value
                else:
                    tensors.extend(value if isinstance(value, list) else [value])
        if isinstance(var.ty, relax.TupleType) and call.op.name in _PER_RESULT:
            fields = list(var.ty.fields)
            if not all(isinstance(f, relax.TensorType) for f in fields):
                raise UnsupportedConstruct(f"{call.op.name} with results that are not tensors")
            results = []
            for index, ty in enumerate(fields):
                results.append(builder.tensor(ty, "op"))
                ops.append(OpCall(call.op.name, tensors, results[-1], {**attrs, "result_index": index}, rule, group))
            return results
        if isinstance(var.ty, relax.TupleType):
            # An op call has one output: only the first result is computed (batch_norm's
            # normalized tensor; its other results are the moving statistics it was given).
            fields = list(var.ty.fields)
            if not fields or not isinstance(fields[0], relax.TensorType):
                raise UnsupportedConstruct(f"{call.op.name} with several results")
            out = builder.tensor(fields[0], "op")
            ops.append(OpCall(call.op.name, tensors, out, attrs, rule, group))
            rest = [_Unavailable(call.op.name, i) for i in range(1, len(fields))]
            if call.op.name == "relax.nn.batch_norm" and not attrs.get("training"):
                rest = tensors[3:5]  # in inference it returns the moving mean and variance it was given
            return [out] + rest
        out = builder.tensor(var.ty, "op")
        ops.append(OpCall(call.op.name, tensors, out, attrs, rule, group))
        return out

    def call_composite(composite, args, local_env):
        nonlocal group
        local = {p: value_of(a, local_env) for p, a in zip(composite.params, args)}
        result = run_body(composite.body, local, str(composite.attrs["Composite"]))
        group += 1
        return result

    result = run_body(func.body, env, rule="")
    outputs = result if isinstance(result, list) else [result]
    for item in outputs:
        if isinstance(item, _Unavailable):
            raise UnsupportedConstruct(f"result {item.index} of {item.op} (only the first result is computed)")
    whole = [d for t in inputs for d in t.shape] + [d for _, ds in shape_arguments for d in ds]
    bound = {d for d in whole if isinstance(d, str) and d.isidentifier()}  # the dims a call's arguments size
    shape_arguments = [(position, _given_dims(dims, bound, builder.dims)) for position, dims in shape_arguments]
    return PartitionGraph(symbol, inputs, outputs, _with_units_folded(ops), func, builder.dims, shape_arguments,
                          dict(options or {}), dict(dim_bounds or {}), dict(sizes or {}))


def _given_dims(dims: tuple, bound: set[str], trees: dict[str, Any]) -> tuple:
    """A shape argument's dims as the runtime reads them: a name it gives, or 0 for an entry that gives none
    (a size, or an expression of the dims in ``bound``, which the inputs or shape arguments size)."""
    given = []
    for d in dims:
        if isinstance(d, str) and not d.isidentifier():
            if not set(tree_names(trees[d])) <= bound:
                raise UnsupportedConstruct(f"a shape argument ({', '.join(map(str, dims))}) whose dim {d} no "
                                           "call's inputs size")
            d = 0
        given.append(d)
    return tuple(given)


# -- quantized node units -------------------------------------------------------------------------

def _with_units_folded(ops: list[OpCall]) -> list[OpCall]:
    """``ops`` with each quantized node unit (a composite ending in quantize) as one ``qnn.*`` call."""
    groups: dict[int, list[OpCall]] = {}
    for call in ops:
        if call.rule:
            groups.setdefault(call.group, []).append(call)
    units = {}
    for group, calls in groups.items():
        unit = _unit_call(calls) if len(calls) > 1 else None
        if unit is not None:
            units[group] = unit
    if not units:
        return ops
    out = []
    for call in ops:
        unit = units.get(call.group) if call.rule else None
        if unit is None:
            out.append(call)
        elif call is groups[call.group][-1]:
            out.append(unit)
    return out


def qdq_params(call: OpCall) -> QParams:
    """The quantization a ``relax.quantize`` or ``relax.dequantize`` call applies: of its integer tensor
    (the quantize's output, the dequantize's input), from its constant scale and zero point."""
    integer = call.output if call.op == "relax.quantize" else call.inputs[0]
    scale, zero_point = call.inputs[1].data, call.inputs[2].data
    if scale is None or zero_point is None:
        raise UnsupportedConstruct(f"{call.op} with a scale or zero point that is not a constant")
    return qparams(scale, zero_point, call.attrs.get("axis", 1), len(integer.shape),
                   integer.dtype)


def _unit_call(calls: list[OpCall]) -> Optional[OpCall]:
    """The ``qnn.*`` call ``calls`` (one composite) stand for, or None when they are no unit."""
    quantize = calls[-1]
    if quantize.op != "relax.quantize" or any(t.kind != "const" for t in quantize.inputs[1:]):
        return None
    producer = {c.output.id: c for c in calls}

    def made_by(tensor: Tensor, *ops: str) -> Optional[OpCall]:
        call = producer.get(tensor.id)
        return call if call is not None and call.op in ops else None

    used = [quantize]
    core = producer.get(quantize.inputs[0].id)
    low, high = -np.inf, np.inf
    if core is not None and core.op in ("relax.nn.relu", "relax.clip") \
            and made_by(core.inputs[0], "relax.dequantize") is None:
        low, high = (0.0, np.inf) if core.op == "relax.nn.relu" else (core.attrs["min"], core.attrs["max"])
        used.append(core)
        core = producer.get(core.inputs[0].id)
    bias = bias_params = None
    if core is not None and core.op == "relax.add" and made_by(core.inputs[0], *WEIGHTED):
        used.append(core)
        reshape = made_by(core.inputs[1], "relax.reshape")
        source = reshape.inputs[0] if reshape else core.inputs[1]
        dequantize = made_by(source, "relax.dequantize")
        if dequantize is not None and dequantize.inputs[0].kind == "const":
            bias, bias_params = dequantize.inputs[0], qdq_params(dequantize)
            used.append(dequantize)
        elif source.kind == "const" and source.dtype == "float32" and reshape is None \
                and source.shape[-1:] == core.output.shape[-1:] and source.size == source.shape[-1]:
            bias, bias_params = source, QParams.identity("float32")  # one value per output column
        else:
            return None
        used += [reshape] if reshape else []
        core = producer[core.inputs[0].id]
    if core is None:
        return None
    found = [made_by(t, "relax.dequantize") for t in core.inputs]
    dequantized = [d for d in found if d is not None]
    if not found or len(dequantized) != len(found) or any(t.kind != "const" for d in dequantized for t in d.inputs[1:]):
        return None
    used += [core, *dequantized]
    if len({id(c) for c in used}) != len(calls):
        return None  # more in the composite than a unit holds
    output = qdq_params(quantize)
    if output.per_channel:
        return None
    params = [qdq_params(d) for d in dequantized] + ([bias_params] if bias else [])
    inputs = [d.inputs[0] for d in dequantized] + ([bias] if bias else [])
    float_ops = tuple(c.op for c in reversed(used) if c.op not in ("relax.dequantize", "relax.quantize",
                                                                   "relax.reshape") or c is core)
    unit = QuantizedUnit(tuple(params), output, quantized_range(output, low, high), float_ops)
    return OpCall("qnn." + core.op.rsplit(".", 1)[1], inputs, quantize.output, dict(core.attrs), quantize.rule,
                  quantize.group, unit)

"""Sequences whose length only the run tells: a model's sequence inputs and outputs, a SplitToSequence by a
split given at run time, a sequence a Loop the host runs builds, and an Optional that an If leaves empty or not.

TVM's importer holds a sequence as a Relax tuple, so its length and each position must be known when the model is
compiled. Where they are, that stays: every element is a tensor the vendors can take. Where they are not, the
sequence is a Relax value of ``R.Object`` type, at run time the array of tensors a tuple is too (an empty
Optional: ``None``), and the ops on it are the host's functions of :mod:`byoc.host.sequences`, called by name.
An element taken out of it (SequenceAt) or a tensor made of it (ConcatFromSequence) is a tensor again, its dims
new symbolic ones that the run binds, so the ops that read it are partitioned as any others.

:func:`convert` is the importer's entry: it returns None where TVM's own converter applies.
"""

from __future__ import annotations

import re
from typing import Optional

import onnx

from byoc.errors import UnsupportedAttributeError, UnsupportedTypeError
from byoc.vendor.values import const_array, is_tensor_const

__all__ = ["HOST_FUNCTION_PREFIX", "SEQUENCE_OPS", "convert", "element_type", "held_tensor_type", "is_run_time_sequence",
           "run_time_value_type", "tuple_elements"]

#: the ops :func:`convert` may take
SEQUENCE_OPS = frozenset({"SequenceAt", "SequenceLength", "SequenceInsert", "SequenceErase", "ConcatFromSequence",
                          "SplitToSequence", "Optional", "OptionalHasElement", "OptionalGetElement"})


def is_run_time_sequence(value) -> bool:
    """Whether ``value`` (an importer's value) is a sequence or optional of run-time length (``R.Object``)."""
    from tvm import relax

    return isinstance(value, relax.Expr) and isinstance(getattr(value, "ty", None), relax.ObjectType)


def run_time_value_type(type_proto: onnx.TypeProto) -> bool:
    """Whether a graph input or output of this ONNX type is held as ``R.Object``: a sequence, or an optional
    of a sequence (an optional tensor is the tensor: TVM passes it through)."""
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        return type_proto.optional_type.elem_type.WhichOneof("value") == "sequence_type"
    return kind == "sequence_type"


def held_tensor_type(type_proto: onnx.TypeProto) -> Optional[onnx.TypeProto.Tensor]:
    """The tensor type an ONNX type is or holds (through optionals and sequences); None where it holds none."""
    while type_proto.WhichOneof("value") in ("sequence_type", "optional_type"):
        type_proto = getattr(type_proto, type_proto.WhichOneof("value")).elem_type
    return type_proto.tensor_type if type_proto.WhichOneof("value") == "tensor_type" else None


def element_type(type_proto: onnx.TypeProto) -> tuple[int, str]:
    """(rank, dtype) of the tensors a sequence (or optional sequence, or tensor) type holds; rank -1 unknown."""
    tensor = held_tensor_type(type_proto)
    if tensor is None or not tensor.elem_type:
        return -1, ""
    dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    return (len(tensor.shape.dim) if tensor.HasField("shape") else -1), dtype


def convert(op: str, name: str, inputs: list, attrs: dict, elements: dict, bb, scope: str = ""):
    """The Relax value of node ``name`` (``op``), or None where TVM's converter applies (every sequence a tuple,
    every position a constant). ``scope``: the host loop whose body this is (names the functions it adds apart).

    ``elements`` maps each run-time sequence made so far to the (rank, dtype) of its tensors (rank -1: unknown);
    the sequences this makes are added to it.
    """
    from tvm import relax

    seq = inputs[0] if inputs else None
    run_time = is_run_time_sequence(seq)
    constant = [x is None or is_tensor_const(x) for x in inputs[1:]]
    held = elements.get(seq, (-1, "")) if run_time else tuple_elements(seq)

    def sequence(value, rank: int, dtype: str):
        elements[value] = (rank, dtype)
        return value

    def call(function: str, *args, ty):
        callee = _host_function(bb, function, args, ty, scope)
        return bb.emit(relax.Call(callee, [a for a in args if not _is_prim(a)]))

    def prim(value: int):
        return relax.prim_value(int(value))

    if op == "SequenceLength" and run_time:
        return call("byoc.sequence.length", seq, ty=relax.TensorType((), "int64"))
    if op == "SequenceAt" and (run_time or not all(constant)):
        return _with_new_dims(call("byoc.sequence.at", seq, inputs[1], ty=_tensor_type(name, op, *held)), name, bb)
    if op == "SequenceInsert" and (run_time or not all(constant)):
        args = [seq, inputs[1]] + ([inputs[2]] if len(inputs) > 2 and inputs[2] is not None else [])
        return sequence(call("byoc.sequence.insert", *args, ty=relax.ObjectType()), inputs[1].ty.ndim,
                        str(inputs[1].ty.dtype))
    if op == "SequenceErase" and (run_time or not all(constant)):
        args = [seq] + ([inputs[1]] if len(inputs) > 1 and inputs[1] is not None else [])
        return sequence(call("byoc.sequence.erase", *args, ty=relax.ObjectType()), *held)
    if op == "ConcatFromSequence" and run_time:
        rank, dtype = held
        new_axis = int(attrs.get("new_axis", 0))
        rank = rank + new_axis if rank >= 0 else rank
        axis = int(attrs.get("axis", 0))
        return _with_new_dims(call("byoc.sequence.concat", seq, prim(axis), prim(new_axis),
                                   ty=_tensor_type(name, op, rank, dtype)), name, bb)
    if op == "SplitToSequence" and _split_at_run_time(seq, inputs[1] if len(inputs) > 1 else None, attrs):
        axis = int(attrs.get("axis", 0))
        split = [inputs[1]] if len(inputs) > 1 and inputs[1] is not None else []
        keepdims = int(attrs.get("keepdims", 1))
        rank = seq.ty.ndim - (0 if split or keepdims or seq.ty.ndim < 0 else 1)
        return sequence(call("byoc.sequence.split", seq, prim(axis), prim(keepdims), *split, ty=relax.ObjectType()),
                        rank, str(seq.ty.dtype))
    if op == "Optional" and not [x for x in inputs if x is not None]:
        # Empty: the null object, which an If's other branch may give a sequence in place of
        return bb.normalize(relax.op.null_value())
    if op == "OptionalHasElement" and inputs and inputs[0] is not None:
        if _is_null(seq):
            return relax.const(False, "bool")
        if run_time:
            return call("byoc.optional.has_element", seq, ty=relax.TensorType((), "bool"))
    if op == "OptionalGetElement" and _is_null(seq):
        raise UnsupportedAttributeError(f"OptionalGetElement node {name!r} reads an Optional that is always empty "
                                        "(ONNX makes that an error); read it only where it holds a value", node=name)
    if op == "OptionalGetElement" and run_time:
        return sequence(call("byoc.optional.get_element", seq, ty=relax.ObjectType()), *held)
    return None


#: what the functions that call the host's sequence functions are named after (``sequence_at0``, ...), by which
#: :func:`byoc.pipeline.annotate.annotator.op_calls` tells them from a Loop the host runs
HOST_FUNCTION_PREFIX = "sequence_"


def _host_function(bb, function: str, args: tuple, ty, scope: str):
    """The GlobalVar of a function calling the host's ``function`` on ``args`` (its Relax values as parameters,
    its integers written in), returning ``ty``. main calls it, never the host's function itself: TVM's
    MergeCompositeFunctions, which partitioning runs, fails on a direct call of an external function."""
    from tvm import relax
    from tvm.relax.utils import copy_with_new_vars

    params = [relax.Var(f"arg{k}", arg.ty) for k, arg in enumerate(args) if not _is_prim(arg)]
    given = iter(params)
    body = relax.call_pure_packed(function, *[arg if _is_prim(arg) else next(given) for arg in args], ty_args=ty)
    stem = HOST_FUNCTION_PREFIX + (f"{scope}_" if scope else "") + function.rsplit(".", 1)[-1]
    taken = {gv.name_hint for gv in bb.get().functions}
    name = next(f"{stem}{k}" for k in range(len(taken) + 1) if f"{stem}{k}" not in taken)
    return bb.add_func(copy_with_new_vars(relax.Function(params, body, ty)), name)


def _is_prim(value) -> bool:
    from tvm import ir

    return isinstance(getattr(value, "ty", None), ir.PrimType)


def _is_null(value) -> bool:
    from tvm import relax

    return isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.null_value"


def _split_at_run_time(data, split, attrs: dict) -> bool:
    """Whether SplitToSequence's pieces are known only at run time: its split is no constant, or a chunk size
    (given, or 1 by default) splits a symbolic dim."""
    from tvm import tirx

    if split is not None and not is_tensor_const(split):
        return True
    if split is not None and const_array(split).ndim == 1:
        return False  # the sizes are the pieces
    shape = getattr(data.ty, "shape", None)
    if shape is None:
        return True
    return not isinstance(shape[int(attrs.get("axis", 0))], (int, tirx.IntImm))


def tuple_elements(value) -> tuple[int, str]:
    """(rank, dtype) of the tensors of a sequence held as a tuple, where they all agree ((-1, "") if not)."""
    fields = getattr(getattr(value, "ty", None), "fields", None) or []
    tensors = [f for f in fields if hasattr(f, "ndim")]
    kinds = {(f.ndim, str(f.dtype)) for f in tensors}
    return kinds.pop() if len(kinds) == 1 and len(tensors) == len(fields) else (-1, "")


def _tensor_type(name: str, op: str, rank: int, dtype: str):
    from tvm import relax

    if not dtype:
        raise UnsupportedTypeError(
            f"node {name!r} ({op}) takes a tensor out of a sequence whose tensors' type the import cannot tell "
            "(a sequence an If or a Loop makes, of tensors of several types); give the model's value a tensor "
            "type", [(name, "sequence")])
    return relax.TensorType(ndim=rank, dtype=dtype)


def _with_new_dims(value, name: str, bb):
    """``value`` with a new symbolic dim per axis (``<node>_dim<k>``), bound when the model runs."""
    from tvm import relax, tirx

    rank = value.ty.ndim
    if rank < 0:
        return value
    stem = re.sub(r"\W", "_", name) or "element"
    dims = [tirx.Var(f"{stem}_dim{k}", "int64") for k in range(rank)]
    return bb.match_cast(value, relax.TensorType(dims, value.ty.dtype))

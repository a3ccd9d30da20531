"""Loops the host runs: a Loop whose iterations are known only when the model runs (dynamo's ``while_loop``, a
count computed from a symbolic dim, a Scan over a symbolic length), which
:mod:`~byoc.pipeline.frontend.prepare.control_flow` cannot unroll.

The import makes two things of such a node (:func:`convert_loop`):

* **a placeholder** in the graph being imported: a call of a function named by the loop's symbol (``loop0``,
  ...), which only declares its type until the build defines it. It takes the trip count and condition as
  scalars, the carried values, then the outer tensors the body reads; it gives the loop's outputs. A carried value
  keeps its initial value's type: the body is checked to keep it (:func:`check_body`). Each scan output is
  ``(iterations, *element)``, its element's dims static or the body's inputs';
* **the body as an ONNX model of its own** (:class:`~byoc.pipeline.frontend.onnx_model.LoopSpec`): inputs
  ``iteration, condition, carried..., captured...`` (the outer tensors it reads that are not constants; constants
  become its initializers), outputs the body's. Its nodes are named ``<loop node>/<body node>``, so that reports
  name them apart from the main graph's.

``relax_import`` imports each body as a model (nested loops included), and partitioning cuts it for the vendors
as it cuts the main graph; :mod:`byoc.pipeline.partitioning.host_loops` then defines the placeholder as a
recursive function that runs the body's partitions. The loop control (count, condition, stacking the scan
outputs) runs on the host, as onnxruntime runs it on its CPU provider.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend import run_time_sequences
from byoc.pipeline.frontend.onnx_model import LoopSpec, all_graphs, subgraphs
from byoc.vendor.values import const_array, dim_text, is_tensor_const

__all__ = ["PLACEHOLDER", "check_body", "convert_loop", "element_type", "loop_reads"]

#: what a loop's function calls until the build defines it: no such function exists, so a module that kept one
#: fails to run rather than run something else
PLACEHOLDER = "byoc.host_loop_placeholder"


def convert_loop(bb, name: str, symbol: str, inputs: list, attrs: dict, outer: dict, opset: int,
                 sequences: Optional[dict] = None):
    """The placeholder of Loop node ``name`` and its :class:`LoopSpec`: ``(expr, spec)``.

    ``inputs`` are the node's Relax inputs (None for an absent one), ``attrs`` its attributes (``body`` the
    graph), ``outer`` the importer's values by ONNX name (what the body may read from the enclosing graph).
    A carried or captured sequence (a tuple, or one of run-time length: ``sequences`` maps those to the rank and
    dtype of their tensors) is one of run-time length in the loop (:mod:`run_time_sequences`): a loop that appends
    to a sequence changes its length. The loop's carried sequences are added to ``sequences``.
    Raises :class:`~byoc.errors.UnsupportedAttributeError` naming the node for a form the host loop cannot run.
    """
    from tvm import relax, tirx

    def refuse(why: str, advice: str):
        return UnsupportedAttributeError(f"Loop node {name!r}: {why}; {advice}", node=name)

    body: onnx.GraphProto = attrs["body"]
    trip, cond, carried = _at(inputs, 0), _at(inputs, 1), list(inputs[2:])
    if trip is None and cond is None:
        raise refuse("a loop with neither a trip count nor a condition runs without bound",
                     "give it a trip count (ONNX Loop's input M)")
    sequences = {} if sequences is None else sequences
    for k, value in enumerate(carried):
        if not _is_tensor(value) and not _is_sequence(value):
            raise refuse(f"its carried value {k} is neither a tensor nor a sequence of tensors",
                         "carry tensors or sequences")
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    if len(body.input) != 2 + n_carried or n_scan < 0:
        raise refuse(f"its body has {len(body.input)} inputs and {len(body.output)} outputs for {n_carried} "
                     "carried values", "write the body as ONNX's Loop defines it")
    constants: list[onnx.TensorProto] = []
    captured: list[tuple[str, object]] = []
    for outer_name in loop_reads(body):
        value = outer.get(outer_name)
        if value is not None and is_tensor_const(value):
            constants.append(numpy_helper.from_array(const_array(value), outer_name))
        elif _is_tensor(value) or _is_sequence(value):
            captured.append((outer_name, value))
        else:
            raise refuse(f"its body reads {outer_name!r}, which is neither a tensor nor a sequence of the enclosing "
                         "graph", "pass it to the loop as a tensor")
    typed = [helper.make_tensor_value_info(body.input[0].name, onnx.TensorProto.INT64, []),
             helper.make_tensor_value_info(body.input[1].name, onnx.TensorProto.BOOL, [])]
    typed += [_value_info(vi.name, value, sequences, vi.type) for vi, value in zip(body.input[2:], carried)]
    typed += [_value_info(outer_name, value, sequences) for outer_name, value in captured]
    model = _body_model(name, body, typed, constants, opset)
    inferred = onnx.shape_inference.infer_shapes(model).graph.output
    elements, scan_types = [], []
    for vi in list(inferred)[1 + n_carried:]:
        tensor = vi.type.tensor_type
        if not tensor.HasField("shape"):
            raise refuse(f"its scan output {vi.name!r} has no known rank",
                         "declare the rank of the body's scan outputs")
        elements.append(tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim))
        scan_types.append(str(helper.tensor_dtype_to_np_dtype(tensor.elem_type)))

    args = []
    if trip is not None:
        args.append(_scalar(bb, trip, "int64"))
    args.append(_scalar(bb, cond, "bool") if cond is not None else relax.const(True))
    args += carried + [value for _, value in captured]
    types = [_carried_type(value) for value in carried] + [relax.TensorType(dtype=dtype, ndim=len(element) + 1)
                                                           for dtype, element in zip(scan_types, elements)]
    call = bb.emit(relax.Call(_placeholder(bb, symbol, args, types), args), symbol)
    iterations = tirx.Var(f"{symbol}_iterations", "int64")
    outputs = [bb.emit(relax.TupleGetItem(call, k)) for k in range(n_carried)]
    for value, typed_input, output in zip(carried, typed[2:], outputs):
        if _is_sequence(value):
            sequences[output] = run_time_sequences.element_type(typed_input.type)
    # an element dim the import cannot tell (one of the body's symbolic dims) is a new variable the run binds
    outputs += [bb.match_cast(relax.TupleGetItem(call, n_carried + j), relax.TensorType(
        [iterations, *[tirx.Var(f"{symbol}_scan{j}_dim{k}", "int64") if d is None else d
                       for k, d in enumerate(element)]], dtype))
                for j, (dtype, element) in enumerate(zip(scan_types, elements))]
    spec = LoopSpec(name, symbol, model, n_carried, n_scan, trip is not None, tuple(zip(scan_types, elements)))
    if len(outputs) == 1:
        return outputs[0], spec
    return relax.Tuple(outputs), spec


def _placeholder(bb, symbol: str, args: list, types: list):
    """The GlobalVar of a function ``symbol`` taking ``args``' types and giving ``types``, which stands for the loop
    until the build defines it (``host_loops.run_host_loops``); a call of it is an op no vendor takes."""
    from tvm import relax
    from tvm.relax.utils import copy_with_new_vars

    params = [relax.Var(f"arg{k}", _carried_type(arg)) for k, arg in enumerate(args)]
    result = relax.op.call_pure_packed(PLACEHOLDER, *params, ty_args=[relax.TupleType(types)])
    return bb.add_func(copy_with_new_vars(relax.Function(params, result, relax.TupleType(types))), symbol)


def check_body(spec: LoopSpec, main) -> None:
    """Refuse, naming the Loop node, a body whose imported function ``main`` does not keep a carried value's dtype,
    rank and static dims from one iteration to the next, or gives a scan output of another element than ONNX's
    shape inference promised, or one whose dims are neither static nor dims of the body's inputs (the loop must
    type what it stacks). Where its types say less (a dim computed in the body), the loop casts its outputs to
    the carried types, a cast each run checks (:mod:`byoc.pipeline.partitioning.host_loops`)."""
    from tvm import relax

    def refuse(why: str):
        return UnsupportedAttributeError(
            f"Loop node {spec.node!r}: {why}; the host loop runs a body whose carried values keep their shapes "
            "and whose scan outputs' shapes follow from its inputs' (declare the body's carried inputs and outputs "
            "with the same shapes)", node=spec.node)

    ret = main.ret_ty if hasattr(main, "ret_ty") else main.body.ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(fields) != 1 + spec.carried + spec.scans:
        raise refuse(f"its body imports with {len(fields)} outputs, not {1 + spec.carried + spec.scans}")
    params = list(main.params)
    for k, (given, returned) in enumerate(zip((p.ty for p in params[2:2 + spec.carried]), fields[1:])):
        if isinstance(given, relax.ObjectType):  # a sequence: it leaves the body a sequence
            if not isinstance(returned, (relax.ObjectType, relax.TupleType)):
                raise refuse(f"carried value {k} enters the body as a sequence and leaves it as {_type_text(returned)}")
            continue
        if not _may_equal(given, returned, list(given.shape.values)):
            raise refuse(f"carried value {k} enters the body as {_type_text(given)} and leaves it as "
                         f"{_type_text(returned)}")
    defined = {v for p in params for v in relax.analysis.definable_tir_vars_in_type(p.ty)}
    for j, ((dtype, dims), returned) in enumerate(zip(spec.elements, fields[1 + spec.carried:])):
        promised = f"{dtype}[{', '.join('?' if d is None else str(d) for d in dims)}]"
        if str(returned.dtype) != dtype or returned.ndim != len(dims) or not _may_equal(returned, returned, dims):
            raise refuse(f"scan output {j} is {_type_text(returned)}, not {promised} as ONNX's shape inference says")
        if None in dims and (returned.shape is None
                             or not set(relax.analysis.tir_vars_in_type(returned)) <= defined):
            raise refuse(f"scan output {j} is {_type_text(returned)}: a dim computed in the body")


def element_type(spec: LoopSpec, body, j: int):
    """The type of scan output ``j``'s element in the body function ``body``: static where ONNX's shape inference
    says so, else as the body returns it, in its inputs' dims (:func:`check_body`)."""
    from tvm import relax

    dtype, dims = spec.elements[j]
    if None not in dims:
        return relax.TensorType(list(dims), dtype)
    ret = body.ret_ty if hasattr(body, "ret_ty") else body.body.ty
    return list(ret.fields)[1 + spec.carried + j]


def _may_equal(given, returned, dims: list) -> bool:
    """Whether tensor type ``returned`` may be ``given``'s, whose dims are ``dims`` (ints, None or Relax dims):
    dtype, rank, and each dim both know statically."""
    if str(given.dtype) != str(returned.dtype) or len(dims) != returned.ndim:
        return False
    if returned.shape is None:
        return True
    return all(not (isinstance(a, int) and isinstance(b, int)) or a == b
               for a, b in zip((d if d is None or isinstance(d, int) else dim_text(d) for d in dims),
                               (dim_text(d) for d in returned.shape.values)))


def _type_text(ty) -> str:
    shape = getattr(ty, "shape", None)
    dims = "?" if shape is None else ", ".join(str(dim_text(d)) for d in shape.values)
    return f"{getattr(ty, 'dtype', '?')}[{dims}]"


def _at(values: list, index: int):
    return values[index] if index < len(values) else None


def _is_sequence(value) -> bool:
    """A sequence of tensors: a tuple (its length known), or one of run-time length."""
    from tvm import relax

    return run_time_sequences.is_run_time_sequence(value) or (
        isinstance(value, relax.Expr) and isinstance(getattr(value, "ty", None), relax.TupleType))


def _carried_type(value):
    """The type a loop's function takes ``value`` as: a sequence's is of run-time length."""
    from tvm import relax

    return relax.ObjectType() if _is_sequence(value) else value.ty


def _is_tensor(value) -> bool:
    from tvm import relax

    return isinstance(value, relax.Expr) and isinstance(getattr(value, "ty", None), relax.TensorType) \
        and value.ty.shape is not None


def _scalar(bb, value, dtype: str):
    """``value`` (a trip count or condition, ``[]`` or ``[1]``) as a scalar tensor of ``dtype``."""
    from tvm import relax

    if str(value.ty.dtype) != dtype:
        value = bb.normalize(relax.op.astype(value, dtype))
    if value.ty.ndim != 0:
        value = relax.op.reshape(value, ())
    return bb.normalize(value)


def _value_info(name: str, value, sequences: dict, declared: Optional[onnx.TypeProto] = None) -> onnx.ValueInfoProto:
    """An ONNX type for the Relax tensor ``value``: static dims as ints, symbolic ones by their names. For a
    sequence, the ``declared`` sequence type where the body declares one, else of tensors of the rank and dtype
    ``sequences`` knows (of a tuple: its tensors')."""
    if _is_sequence(value):
        if declared is not None and run_time_sequences.run_time_value_type(declared):
            return helper.make_value_info(name, declared)
        rank, dtype = sequences.get(value) or run_time_sequences.tuple_elements(value)
        if not dtype:
            raise UnsupportedAttributeError(f"the loop's sequence {name!r} holds tensors whose type the import "
                                            "cannot tell; declare the body's sequence input with its tensor type")
        elem = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                             None if rank < 0 else [None] * rank)
        return helper.make_value_info(name, helper.make_sequence_type_proto(elem))
    dims = [dim_text(d) for d in value.ty.shape.values]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(str(value.ty.dtype)))
    return helper.make_tensor_value_info(name, elem, [d if isinstance(d, int) else str(d) for d in dims])


def loop_reads(body: onnx.GraphProto) -> list[str]:
    """The names ``body`` (and the graphs inside it) reads but does not define, in order of first use."""
    defined = {vi.name for vi in body.input} | {t.name for t in body.initializer}
    names: list[str] = []

    def walk(graph: onnx.GraphProto, local: set) -> None:
        local = local | {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
        for node in graph.node:
            for value in node.input:
                if value and value not in local and value not in names:
                    names.append(value)
            for sub in subgraphs(node):
                walk(sub, local)
            local |= set(node.output)
        for vi in graph.output:
            if vi.name not in local and vi.name not in names:
                names.append(vi.name)

    walk(body, defined)
    return names


def _body_model(name: str, body: onnx.GraphProto, inputs: list, constants: list, opset: int) -> onnx.ModelProto:
    """``body`` as a model of its own, with ``inputs`` typed, the ``constants`` it reads as initializers, and its
    nodes named ``<name>/<node>``."""
    graph = onnx.GraphProto()
    graph.CopyFrom(body)
    graph.name = name
    del graph.input[:]
    graph.input.extend(inputs)
    graph.initializer.extend(constants)
    for index, node in enumerate(graph.node):
        node.name = f"{name}/{node.name or f'{node.op_type}_{index}'}"
    domains = sorted({n.domain for sub in all_graphs(graph) for n in sub.node} - {"", "ai.onnx"})
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                              + [helper.make_opsetid(domain, 1) for domain in domains])
    model.ir_version = 8
    return model

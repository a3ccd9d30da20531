"""The input shapes a model is compiled for: ``input_shapes=`` applied, every symbolic dim named and
``dims=`` applied, and the model's inputs as :class:`TensorSpec` with the range of each symbolic dim."""

from __future__ import annotations

import re
import warnings
from typing import Mapping, Optional, Sequence

import onnx

from byoc.errors import DynamicShapeError
from byoc.pipeline.frontend.onnx_model import DimRange, TensorSpec
from byoc.pipeline.frontend.run_time_sequences import held_tensor_type, run_time_value_type


def graph_inputs(graph: onnx.GraphProto):
    initializers = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in initializers]


def apply_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence]) -> list[str]:
    """Set the shapes given; returns one line per fixed dim of the model that a shape overrides.

    A dim given as a string stays symbolic under that name (it names a dim
    the model leaves unnamed, or ties dims of two inputs together). Giving a
    symbolic dim a size is what ``input_shapes`` is for; changing a dim the
    model fixed is allowed (some models work at any size) but warned about,
    and the lines explain a shape-inference failure that follows.
    """
    inputs = {vi.name: vi for vi in graph_inputs(model.graph)}
    unknown = sorted(set(input_shapes) - set(inputs))
    if unknown:
        raise DynamicShapeError(
            f"input_shapes names {unknown}, which are not model inputs; inputs are {sorted(inputs)}"
        )
    overrides = []
    for name, shape in input_shapes.items():
        dims = tensor_type_of(inputs[name]).shape
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims.dim]
        if declared and len(declared) != len(shape):
            raise DynamicShapeError(f"input_shapes[{name!r}] = {list(shape)} has rank {len(shape)}, but the model's "
                                    f"input {name!r} is {declared} (rank {len(declared)})")
        changed = [i for i, (old, new) in enumerate(zip(declared, shape)) if isinstance(old, int) and old > 0
                   and not isinstance(new, str) and old != int(new)]
        if changed:
            overrides.append(f"input {name!r} is fixed at {declared} in the model and input_shapes makes it "
                             f"{list(shape)} (dim {', '.join(map(str, changed))})")
        dims.ClearField("dim")
        for extent in shape:
            if isinstance(extent, str) and extent.isidentifier():
                dims.dim.add().dim_param = extent
                continue
            # A model may declare an empty (zero) extent itself, but from a user a 0 or -1
            # is almost always a "dynamic" placeholder from another tool, not an empty tensor.
            if isinstance(extent, str) or int(extent) <= 0:
                raise DynamicShapeError(
                    f"input_shapes[{name!r}] has an extent that is not a size or a dim's name: {shape}; give the "
                    "positive size to compile for, or a name to keep the dim symbolic (0 and -1 do not mean dynamic)"
                )
            dims.dim.add().dim_value = int(extent)
    for line in overrides:
        warnings.warn(f"{line}; the model may hard-code that size elsewhere", RuntimeWarning, stacklevel=3)
    return overrides


def tensor_type_of(vi: onnx.ValueInfoProto):
    """The tensor type of a graph input, also when it is an optional holding a tensor, and the type of the
    tensors of a sequence input (or optional sequence)."""
    # TVM's importer passes an optional tensor through as the tensor itself.
    held = held_tensor_type(vi.type)
    return held if held is not None else onnx.TypeProto.Tensor()


def declared_dims(vi: onnx.ValueInfoProto) -> Optional[list]:
    """An input's (or output's, or a sequence's tensors') dims as the model declares them (a size, a name, or "?"), None for an unknown rank."""
    ttype = tensor_type_of(vi)
    if not ttype.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim]


def name_dims(model: onnx.ModelProto, fixed: Mapping[str, int], ranges: Mapping) -> None:
    """Give every symbolic input dim a name and apply the fixed sizes of ``dims=``, in place.

    An unnamed dim becomes ``<input>_dim<axis>``, and so does one whose name is
    an expression, unless it is arithmetic on the names of other inputs' dims
    (:func:`~byoc.pipeline.frontend.dims.dim_expression`), which it stays (with
    the sizes of ``fixed`` put in). A name in ``fixed`` becomes its size. Names
    in ``dims=`` that no input has are refused.
    """
    from byoc.pipeline.frontend.dims import dim_expression, evaluate_dim

    seen: set[str] = set()
    plain = {d.dim_param for vi in graph_inputs(model.graph) if tensor_type_of(vi).HasField("shape")
             for d in tensor_type_of(vi).shape.dim if d.dim_param.isidentifier()}
    for vi in graph_inputs(model.graph):
        ttype = tensor_type_of(vi)
        if not ttype.HasField("shape"):
            continue
        for axis, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                continue
            name = dim.dim_param
            expression = dim_expression(name)
            if expression and set(expression[1]) <= plain:
                text, names = expression
                if all(n in fixed for n in names):
                    dim.Clear()
                    dim.dim_value = evaluate_dim(text, fixed)
                else:
                    for n in names:
                        text = re.sub(rf"\b{n}\b", str(fixed[n]), text) if n in fixed else text
                    dim.Clear()
                    dim.dim_param = text
                continue
            if not name.isidentifier():
                name = re.sub(r"\W", "_", f"{vi.name}_dim{axis}")
                name = name if name[0].isalpha() or name[0] == "_" else f"d_{name}"
            seen.add(name)
            if name in fixed:
                dim.Clear()
                dim.dim_value = fixed[name]
            else:
                dim.Clear()
                dim.dim_param = name
    unknown = sorted((set(fixed) | set(ranges)) - seen)
    if unknown:
        raise DynamicShapeError(
            f"dims names {unknown}, which no input of the model has; its symbolic dims are "
            f"{sorted(seen) or 'none (every input is static)'}"
        )


#: The inputs of ops that append to them along an axis, by (domain, op type): input index -> that axis (None:
#: a Concat's own; True: every input, any axis, as Shape reads only the dims). An input read only so may be empty
#: along the axis: a decoder's cache before the first token. (onnxruntime's GroupQueryAttention and
#: MultiHeadAttention take ``past_key``/``past_value`` ``[B, N, P, H]``.)
_APPENDED_TO = {("", "Concat"): None, ("", "Shape"): True, ("com.microsoft", "GroupQueryAttention"): {3: 2, 4: 2},
                ("com.microsoft", "MultiHeadAttention"): {6: 2, 7: 2}}


def _appends_along(node: onnx.NodeProto, index: int, axis: int, rank: int) -> bool:
    appended = _APPENDED_TO.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type), False)
    if appended is None:
        concat_axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        return concat_axis is not None and concat_axis % rank == axis and len([x for x in node.input if x]) > 1
    return appended is True or (bool(appended) and appended.get(index) == axis)


def dims_that_may_be_empty(model: onnx.ModelProto) -> set[str]:
    """The symbolic input dims whose size may be 0 by default: those every input naming them is appended to
    along, and read no other way (a cache's ``past_sequence_length``). Every other dim starts at 1."""
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, index))
    outputs = {vi.name for vi in model.graph.output}
    verdict: dict[str, bool] = {}
    for vi in graph_inputs(model.graph):
        declared = declared_dims(vi) or []
        for axis, d in enumerate(declared):
            if isinstance(d, str) and d.isidentifier():
                reads = readers.get(vi.name, [])
                verdict[d] = verdict.get(d, True) and bool(reads) and vi.name not in outputs and all(
                    _appends_along(node, index, axis, len(declared)) for node, index in reads)
    return {d for d, empty in verdict.items() if empty}


def model_inputs(model: onnx.ModelProto, ranges: Mapping[str, DimRange]) -> tuple[list[TensorSpec], dict]:
    """The model's inputs, each dim a size or a symbolic dim's name, and the range of each symbolic dim.

    A dim ``ranges`` does not give ranges from 1 up, or from 0 where the model appends to every input that
    names it (:func:`dims_that_may_be_empty`). Only an input of unknown rank has no shape byoc can compile for.
    """
    specs, unknown_rank, dims = [], {}, {}
    may_be_empty = dims_that_may_be_empty(model)
    for vi in graph_inputs(model.graph):
        declared = declared_dims(vi)
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(tensor_type_of(vi).elem_type))
        if run_time_value_type(vi.type):  # a sequence's tensors: each its own shape, which a run does not bind
            specs.append(TensorSpec(vi.name, tuple(declared or ()), dtype, sequence=True))
            continue
        if declared is None:
            unknown_rank[vi.name] = None
            continue
        for d in declared:
            if isinstance(d, str) and d.isidentifier():  # not an expression of dims (name_dims)
                dims.setdefault(d, ranges.get(d, DimRange(d, 0 if d in may_be_empty else 1)))
        specs.append(TensorSpec(vi.name, tuple(declared), dtype))
    if unknown_rank:
        raise DynamicShapeError(_dynamic_shapes_message(unknown_rank))
    return specs, dims


def _dynamic_shapes_message(dynamic: Mapping[str, list | None]) -> str:
    """What to give for the inputs ``dynamic`` (name -> declared dims, None for an unknown rank), as the model
    declares them: its static dims as numbers, each other one as ``<its name>`` (``<dim I>`` when it has none)."""
    def size(index: int, dim) -> str:
        if isinstance(dim, int) and dim >= 0:
            return str(dim)
        return f"<{dim}>" if isinstance(dim, str) and dim != "?" else f"<dim {index}>"

    listed, examples = [], {}
    for name, dims in dynamic.items():
        listed.append(f"{name}{dims}" if dims is not None else f"{name} (unknown rank)")
        examples[name] = ["<dim 0>", "<dim 1>", "..."] if dims is None else [size(i, d) for i, d in enumerate(dims)]
    api = ", ".join(f"{name!r}: ({', '.join(dims)}{',' if len(dims) == 1 else ''})" for name, dims in examples.items())
    cli = " ".join(f"--input-shape {name}={','.join(dims)}" for name, dims in examples.items())
    return (f"inputs without a known rank: {', '.join(listed)}; give their shapes, "
            f"input_shapes={{{api}}} (CLI: {cli}), with a number or a dim's name for each <...>")

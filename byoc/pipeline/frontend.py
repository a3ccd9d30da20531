"""Load an ONNX model, check it, and import it into Relax.

The import keeps what TVM's importer drops: a map from every Relax binding in
``main`` to the ONNX node (name and op_type) that produced it, so that every
report can use the user's own node names.

Entry points: :func:`load_model` (bytes/path/ModelProto -> checked ModelProto)
and :func:`import_model` (-> :class:`ImportedModel`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper, shape_inference

from byoc.errors import (
    DynamicShapeError,
    ExternalDataError,
    InvalidModelError,
    ModelLoadError,
    ModelNotFoundError,
    NotOnnxError,
    TruncatedModelError,
    UnsupportedOpsError,
    first_line,
)
# The model's types are imported from here too (``byoc.pipeline.frontend.ImportedModel``).
from byoc.pipeline.onnx_model import DimRange, ImportedModel, OnnxNode, TensorSpec, name_nodes, subgraphs  # noqa: F401
from byoc.pipeline.dims import DimSetting, split_dim_settings
from byoc.pipeline.prepare import QUIET_LOCK, prepare

ModelSource = Union[str, os.PathLike, bytes, onnx.ModelProto]

#: progress of the long stages, for an application that wants it (the library never configures logging)
_log = logging.getLogger(__name__)


# -- loading ------------------------------------------------------------------------
def load_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """Read ``source`` into a new ModelProto with external data resolved.

    ``source`` is a path, the serialized bytes, or a ``ModelProto`` (copied,
    never modified). ``base_dir`` is where external data files live; it
    defaults to the model file's folder. Raises a :class:`ModelLoadError`
    subclass that says what is wrong and what to do.
    """
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        origin = "the given ModelProto"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), "the given bytes")
        origin = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise ModelNotFoundError(f"{str(path)!r} is a folder, not a model file; give the path of the .onnx file")
        if not path.is_file():
            raise ModelNotFoundError(
                f"model file not found: {str(path)!r}; check the path (it must be an .onnx file)"
            )
        origin = str(path)
        model = _parse(path.read_bytes(), origin)
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise TypeError(
            f"expected a path, bytes or onnx.ModelProto, got {type(source).__name__}"
        )
    _resolve_external_data(model, base_dir, origin)
    return model


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    if not data:
        raise NotOnnxError(f"{origin} is empty (0 bytes); expected an ONNX model file")
    if data.startswith(b"\x7fELF"):
        from byoc.pipeline.artifact import METADATA_FUNCTION

        if METADATA_FUNCTION.encode() in data:
            raise NotOnnxError(
                f"{origin} is a byoc artifact (a shared library that Artifact.export wrote), not an ONNX model: "
                "load it with byoc.load(path) in Python to run it; it is not partitioned or compiled again "
                "(give the .onnx model it was built from for that)"
            )
        raise NotOnnxError(f"{origin} is an ELF file (a shared library or program), not an ONNX model; "
                           "expected a model saved with onnx.save")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as err:
        if _looks_like_onnx(data):
            raise TruncatedModelError(
                f"{origin} starts like an ONNX model but cannot be parsed ({err}); "
                "the file is truncated or corrupt: copy or export it again"
            ) from None
        raise NotOnnxError(
            f"{origin} is not an ONNX protobuf ({err}); expected a model saved with onnx.save"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise NotOnnxError(
            f"{origin} is not an ONNX model (no ir_version or graph); "
            "expected a model saved with onnx.save"
        )
    if not model.graph.output:
        raise TruncatedModelError(
            f"{origin} has a graph with no outputs; the file is probably truncated: "
            "copy or export it again"
        )
    return model


def _looks_like_onnx(data: bytes) -> bool:
    """ModelProto serializes ir_version (field 1, varint) first: tag 0x08."""
    return len(data) >= 2 and data[0] == 0x08 and 1 <= data[1] <= 64


def _external_tensors(model: onnx.ModelProto):
    for tensor in external_data_helper._get_all_tensors(model):  # noqa: SLF001 - public in practice
        if external_data_helper.uses_external_data(tensor):
            yield tensor


def _resolve_external_data(model: onnx.ModelProto, base_dir, origin: str) -> None:
    tensors = list(_external_tensors(model))
    if not tensors:
        return
    if base_dir is None:
        raise ExternalDataError(
            f"{origin} stores weights in external data files; pass base_dir= "
            "(the folder that holds them) or load the model from its path"
        )
    root = Path(base_dir).resolve()
    for tensor in tensors:
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        target = (root / location).resolve()
        if Path(location).is_absolute() or not target.is_relative_to(root):
            raise ExternalDataError(
                f"tensor {tensor.name!r} points to external data {location!r} outside the "
                f"model folder {str(root)!r}; refused for safety: move the data file next "
                "to the model and re-save it with a relative location"
            )
        if not target.is_file():
            raise ExternalDataError(
                f"external data file {location!r} for tensor {tensor.name!r} is missing "
                f"(looked in {str(root)!r}); copy it next to the model"
            )
    try:
        external_data_helper.load_external_data_for_model(model, str(root))
    except (OSError, ValueError) as err:
        raise ExternalDataError(f"cannot read external data: {err}") from None


# -- checking -----------------------------------------------------------------------
def _read_as_the_writers_meant(model: onnx.ModelProto) -> None:
    """Undo two habits of model writers that onnx.checker and strict shape inference reject, in place.

    - A dim of -1 means "unknown" to exporters and to onnxruntime's quantizer
      (PP-OCR's batch dim, then every value_info it writes), while ONNX reads
      it as a size that contradicts every inferred one. It becomes unknown.
    - A model of IR version 3 must list its initializers as graph inputs; tools
      that add initializers (onnxruntime's quantizer adds scales and zero
      points to the light zoo's opset-9 models) do not, and onnxruntime runs
      the result. Its IR version becomes 4, which reads the same graph
      without that rule.
    """
    graph = model.graph
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.ClearField("dim_value")
    if model.ir_version < 4 and not {t.name for t in graph.initializer} <= {vi.name for vi in graph.input}:
        model.ir_version = 4


def _outer_names(node: onnx.NodeProto) -> set[str]:
    """Names the subgraphs of ``node`` read, at any depth."""
    return {x for sub in subgraphs(node) for inner in sub.node for x in (*inner.input, *_outer_names(inner)) if x}


def _sort_nodes(graph: onnx.GraphProto) -> None:
    """Put the nodes in a topological order (stable), or name the nodes of a cycle.

    onnx.checker only says "not topologically sorted"; exporters sometimes
    write unsorted graphs that are fine, while a real cycle can never run.
    """
    nodes = list(graph.node)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    # A value a subgraph reads from the outer graph must be computed before the node that holds it.
    parents = [sorted({producer[x] for x in (*node.input, *_outer_names(node)) if x in producer and producer[x] != i})
               for i, node in enumerate(nodes)]
    self_loops = [nodes[i].name for i, node in enumerate(nodes) if any(producer.get(x) == i for x in node.input)]
    if self_loops:
        raise InvalidModelError(
            f"the graph has a cycle: node {self_loops[0]!r} consumes its own output; an ONNX graph "
            "must be acyclic: fix the exporter"
        )
    children: dict[int, list[int]] = {}
    for i, ps in enumerate(parents):
        for p in ps:
            children.setdefault(p, []).append(i)
    waiting = [len(ps) for ps in parents]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    while ready:
        i = min(ready)  # stable: keep the file's order where it already works
        ready.remove(i)
        order.append(i)
        for c in children.get(i, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    if len(order) < len(nodes):
        stuck = [i for i in range(len(nodes)) if waiting[i] > 0]
        cycle, seen, i = [], set(), stuck[0]
        while i not in seen:  # every stuck node has a stuck parent: walk up until a repeat
            seen.add(i)
            cycle.append(i)
            i = next(p for p in parents[i] if waiting[p] > 0)
        loop = cycle[cycle.index(i):][::-1]
        path = " -> ".join(repr(nodes[k].name) for k in loop + loop[:1])
        raise InvalidModelError(
            f"the graph has a cycle: {path}; an ONNX graph must be acyclic: fix the exporter"
        )
    if order != list(range(len(nodes))):
        graph.ClearField("node")
        graph.node.extend(nodes[i] for i in order)


#: Largest tensor byoc accepts: element counts and byte sizes must fit in int32
#: (C kernels and many runtimes index with 32-bit sizes; such a tensor is a
#: corrupt or hostile model far more often than a real one).
MAX_TENSOR_BYTES = 2**31 - 1


def _check_tensor_sizes(graph: onnx.GraphProto) -> None:
    """Refuse any input, output, intermediate or weight of 2 GiB or more elements or bytes."""
    def dims_of(vi):
        return [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")]

    typed = [(vi.name, dims_of(vi), vi.type.tensor_type.elem_type)
             for vi in list(graph.input) + list(graph.value_info) + list(graph.output)]
    typed += [(t.name, list(t.dims), t.data_type) for t in graph.initializer]
    for name, dims, elem_type in typed:
        count = int(np.prod(dims, dtype=object)) if dims else 1
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 1
        if count > MAX_TENSOR_BYTES or count * itemsize > MAX_TENSOR_BYTES:
            raise InvalidModelError(
                f"tensor {name!r} has shape {dims} ({count * itemsize / 2**30:.1f} GiB); byoc refuses "
                f"tensors of 2 GiB or more: check the model's shapes (or input_shapes=)"
            )


def _graph_inputs(graph: onnx.GraphProto):
    initializers = {t.name for t in graph.initializer}
    return [vi for vi in graph.input if vi.name not in initializers]


def _apply_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence]) -> list[str]:
    """Set the shapes given; returns one line per fixed dim of the model that a shape overrides.

    A dim given as a string stays symbolic under that name (it names a dim
    the model leaves unnamed, or ties dims of two inputs together). Giving a
    symbolic dim a size is what ``input_shapes`` is for; changing a dim the
    model fixed is allowed (some models work at any size) but warned about,
    and the lines explain a shape-inference failure that follows.
    """
    inputs = {vi.name: vi for vi in _graph_inputs(model.graph)}
    unknown = sorted(set(input_shapes) - set(inputs))
    if unknown:
        raise DynamicShapeError(
            f"input_shapes names {unknown}, which are not model inputs; inputs are {sorted(inputs)}"
        )
    overrides = []
    for name, shape in input_shapes.items():
        dims = _tensor_type(inputs[name]).shape
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


def _tensor_type(vi: onnx.ValueInfoProto):
    """The tensor type of a graph input, also when it is an optional holding a tensor."""
    if vi.type.HasField("optional_type") and vi.type.optional_type.elem_type.HasField("tensor_type"):
        # TVM's importer passes an optional tensor through as the tensor itself.
        return vi.type.optional_type.elem_type.tensor_type
    return vi.type.tensor_type


def _declared_dims(vi: onnx.ValueInfoProto) -> Optional[list]:
    """An input's dims as the model declares them (a size, a name, or "?"), None for an unknown rank."""
    ttype = _tensor_type(vi)
    if not ttype.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in ttype.shape.dim]


def _name_dims(model: onnx.ModelProto, fixed: Mapping[str, int], ranges: Mapping) -> None:
    """Give every symbolic input dim a name and apply the fixed sizes of ``dims=``, in place.

    An unnamed dim (or one whose name is an expression, which byoc does not
    solve) becomes ``<input>_dim<axis>``; a name in ``fixed`` becomes its
    size. Names in ``dims=`` that no input has are refused.
    """
    seen: set[str] = set()
    for vi in _graph_inputs(model.graph):
        ttype = _tensor_type(vi)
        if not ttype.HasField("shape"):
            continue
        for axis, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value >= 0:
                continue
            name = dim.dim_param
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


def _model_inputs(model: onnx.ModelProto, ranges: Mapping[str, DimRange]) -> tuple[list[TensorSpec], dict]:
    """The model's inputs, each dim a size or a symbolic dim's name, and the range of each symbolic dim.

    Only an input of unknown rank has no shape byoc can compile for.
    """
    specs, unknown_rank, dims = [], {}, {}
    for vi in _graph_inputs(model.graph):
        declared = _declared_dims(vi)
        if declared is None:
            unknown_rank[vi.name] = None
            continue
        for d in declared:
            if isinstance(d, str):
                dims.setdefault(d, ranges.get(d, DimRange(d)))
        dtype = str(onnx.helper.tensor_dtype_to_np_dtype(_tensor_type(vi).elem_type))
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


def _check(model: onnx.ModelProto, overrides: Sequence[str] = ()) -> onnx.ModelProto:
    """Run onnx.checker and shape inference; ``overrides`` (from input_shapes) explain a failure."""
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = first_line(err)
        raise InvalidModelError(f"onnx.checker rejected the model: {first}") from None
    try:
        return shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as err:  # onnx raises several private error types here
        strict_error = first_line(err)
    if strict_error.count("Inference error(s)") < 2:
        # An error on a node of the user's graph (declared and inferred shapes differ, an
        # attribute no shape fits): the model is wrong, and TVM would build nonsense from it.
        if overrides:
            raise InvalidModelError(
                f"the model does not work at the shape given: {'; '.join(overrides)}, and the model hard-codes "
                f"the original size (ONNX shape inference: {strict_error}); use the model's own size, or "
                "re-export it with that dim dynamic")
        raise InvalidModelError(f"ONNX shape inference failed: {strict_error}")
    # A nested error comes from inside an op's function body, which ONNX expands to infer
    # shapes and sometimes cannot (MeanVarianceNormalization from opset 13 on: a Constant
    # of its body has no value in that context), while TVM imports the op itself fine.
    # That is ONNX's limitation, not the model's: keep what non-strict inference finds.
    warnings.warn(
        f"ONNX shape inference failed in strict mode inside an op's function body ({strict_error}); "
        "continuing with the shapes non-strict inference finds. If the import fails later, this "
        "is the likely cause.",
        RuntimeWarning,
        stacklevel=3,
    )
    try:
        return shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as err:  # noqa: BLE001 - as above
        first = first_line(err)
        raise InvalidModelError(f"ONNX shape inference failed: {first}") from None


#: (domain prefix, what to do) for the op domains exporters write that are not ONNX's, first match wins
_DOMAIN_ADVICE = (
    # onnxruntime's dynamic quantizer and transformer optimizer write these (ddddocr's old OCR model:
    # DynamicQuantizeLSTM); the float model quantized to QDQ is what byoc runs as int8.
    ("com.microsoft", "com.microsoft ops are onnxruntime's own, not ONNX: compile the float model, or quantize it "
                      "with onnxruntime.quantization.quantize_static (QDQ format), whose int8 units byoc runs, "
                      "instead of quantize_dynamic or onnxruntime's transformer optimizer"),
    ("org.pytorch.aten", "ATen ops are torch's fallback for what its exporter could not write in ONNX: export "
                         "without operator_export_type=ONNX_ATEN_FALLBACK, at a newer opset, or with dynamo=True"),
    ("pkg.onnxscript", "these are functions of torch's dynamo exporter that the file calls but does not define: "
                       "export with torch.onnx.export(..., dynamo=True, optimize=True), which inlines them"),
    ("ai.onnx.ml", "ai.onnx.ml ops are classical machine learning (scikit-learn, trees), which byoc does not "
                   "compile: run that part of the pipeline apart, and compile the neural network alone"),
)


def _inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the calls of the functions it defines itself (``model.functions``: torch's exporters write
    modules as functions when not asked to inline them) replaced by their bodies, as onnxruntime runs them; the
    nodes keep the functions' node names, made unique. The model as given when it defines none."""
    if not model.functions:
        return model
    import onnx.inliner

    return onnx.inliner.inline_local_functions(model)


def _check_supported_ops(graph: onnx.GraphProto, origin: Mapping[str, str] | None = None) -> None:
    """Refuse ops TVM's importer lacks; ``origin`` names prepared nodes by the user's nodes."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    origin = origin or {}
    known = set(_get_convert_map()) | {"If", "Constant"}
    missing = [
        (origin.get(n.name, n.name), n.op_type, n.domain)
        for n in graph.node
        if n.domain not in ("", "ai.onnx") or n.op_type not in known
    ]
    if missing:
        listing = ", ".join(
            f"{name} ({op}{' in domain ' + dom if dom else ''})" for name, op, dom in missing
        )
        kinds = sorted({op for _, op, _ in missing})
        domains = {dom for _, _, dom in missing}
        advice = next((text for prefix, text in _DOMAIN_ADVICE if any(d.startswith(prefix) for d in domains if d)),
                      "replace them in the exporter, or decompose them with onnx tools before compiling")
        raise UnsupportedOpsError(
            f"{len(missing)} node(s) use ops that cannot be imported: {listing}. "
            f"Unsupported op types: {', '.join(kinds)}; {advice}",
            missing,
        )


# -- importing ------------------------------------------------------------------------
def import_model(
    source: ModelSource,
    input_shapes: Mapping[str, Sequence[Union[int, str]]] | None = None,
    base_dir: str | os.PathLike | None = None,
    dims: Mapping[str, DimSetting] | None = None,
) -> ImportedModel:
    """Load, check and import ``source`` into Relax with weights as constants.

    Symbolic input dims stay symbolic (one TIR variable per name, shared by
    every input that names it). ``input_shapes`` sets whole input shapes
    (``{"x": (1, 3, 224, 224)}``; a string keeps that dim symbolic under the
    name); ``dims`` fixes or bounds dims by name (:mod:`byoc.pipeline.dims`).
    """
    if isinstance(source, ImportedModel):
        return source
    fixed, ranges = split_dim_settings(dims)
    model = _inline_local_functions(load_model(source, base_dir))
    name_nodes(model.graph)
    _sort_nodes(model.graph)
    _read_as_the_writers_meant(model)
    overrides = _apply_input_shapes(model, input_shapes) if input_shapes else []
    _name_dims(model, fixed, ranges)
    model = _check(model, overrides)
    inputs, dim_ranges = _model_inputs(model, ranges)
    _check_tensor_sizes(model.graph)
    _log.info("preparing %s: %d ONNX nodes", model.graph.name or "the model", len(model.graph.node))
    # Folding and unrolling run before the op check: a recurrent op is
    # supported once it is unrolled, and a folded op no longer needs TVM.
    prep = prepare(model)
    try:
        _check_supported_ops(prep.model.graph, prep.origin)
        _log.info("importing %d prepared nodes into Relax", len(prep.model.graph.node))
        mod, node_of, tensor_of, absorbed = _to_relax(prep.model, inputs, prep.origin,
                                                      _op_types(model, prep.origin), dim_ranges)
    except ModelLoadError as err:
        if not prep.simplifier:
            raise
        # Preparation must never be the reason a model fails: try the model as given.
        try:
            _check_supported_ops(model.graph)
            mod, node_of, tensor_of, absorbed = _to_relax(model, inputs, dim_ranges=dim_ranges)
        except ModelLoadError:
            raise err from None
        warnings.warn(f"the model prepared by {prep.simplifier} does not import ({err}); "
                      "imported the model as given, without folding", stacklevel=2)
        return ImportedModel(mod, model, inputs, _output_specs(model, mod), node_of, prepared=absorbed,
                             prepared_model=model, tensor_of=tensor_of, dims=dim_ranges)
    return ImportedModel(mod, model, inputs, _output_specs(model, mod), node_of,
                         prepared={**prep.fate, **absorbed}, prepared_model=prep.model, simplifier=prep.simplifier,
                         tensor_of=tensor_of, dims=dim_ranges)


def _op_types(model: onnx.ModelProto, origin: Mapping[str, str]) -> dict[str, str]:
    """Prepared node name -> the op type of the user node it comes from."""
    op_of = {n.name: n.op_type for n in model.graph.node}
    return {name: op_of[user] for name, user in origin.items() if user in op_of}


def _output_specs(model: onnx.ModelProto, mod) -> list[TensorSpec]:
    from tvm import relax

    from byoc.vendor.values import dim_text

    ret = mod["main"].ret_ty if hasattr(mod["main"], "ret_ty") else mod["main"].body.ty
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    specs = []
    for vi, ty in zip(model.graph.output, fields):
        if isinstance(ty, relax.ShapeType):  # an output that is a Shape op's result: its ints, one per dim
            specs.append(TensorSpec(vi.name, (ty.ndim,), "int64"))
            continue
        shape = ()
        if ty.shape is not None:
            # An extent Relax keeps symbolic (an empty input dimension, see _importer) is
            # static for ONNX's shape inference: take it from there.
            onnx_dims = [d.dim_value if d.HasField("dim_value") else None
                         for d in vi.type.tensor_type.shape.dim]
            dims = []
            for i, d in enumerate(ty.shape.values):
                static = onnx_dims[i] if i < len(onnx_dims) else None
                try:
                    dims.append(static if static is not None and not hasattr(d, "value") else dim_text(d))
                except ValueError:
                    dims.append(str(d))
            shape = tuple(dims)
        specs.append(TensorSpec(vi.name, shape, str(ty.dtype)))
    return specs


def _to_relax(model: onnx.ModelProto, inputs: list[TensorSpec], origin: Mapping[str, str] | None = None,
              op_types: Mapping[str, str] | None = None, dim_ranges: Mapping[str, DimRange] | None = None):
    """Import ``model`` into Relax: ``(mod, node_of, tensor_of, absorbed)``; see :class:`ImportedModel`.

    ``node_of`` names the user's nodes through ``origin``, which maps a
    (prepared) node name of ``model`` to the user's node, and ``op_types``
    to that node's op type (see :mod:`byoc.pipeline.prepare`); a name without an entry
    is the user's own. ``tensor_of`` names the tensors of ``model``: a fused
    node's result holds the tensor it was fused into. ``absorbed`` maps a user
    node the import made nothing of to why (:mod:`byoc.pipeline.import_rewrites`).
    """

    from tvm import relax

    from byoc.pipeline.importer import ProvenanceImporter, bind_trailing_params, unique_binding_names
    from byoc.pipeline.qdq_form import held_integer_constants

    opset = next(
        (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1
    )
    # FoldConstant would compute DQ(integer weight) into a float constant: the weights
    # are parameters while it runs, and bound as constants after.
    model, held = held_integer_constants(model)
    specs = list(inputs) + [TensorSpec(name, tuple(t.dims), str(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)))
                            for name, t in held.items()]
    importer = ProvenanceImporter({s.name: list(s.shape) for s in specs}, {s.name: s.dtype for s in specs},
                                  dim_ranges or {})
    try:
        # TVM's importer prints and warns on its own; a library must not. The silencing swaps process-wide
        # state (sys.stdout, the warning filters) and the importer keeps some of its own: one import at a time.
        with QUIET_LOCK, warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            mod = importer.with_dim_bounds(importer.from_onnx(model.graph, opset))
            # what a converter made and nothing reads (an Expand its readers broadcast past: import_rewrites)
            mod.update_func(mod.get_global_var("main"), relax.analysis.remove_all_unused(mod["main"]))
            owners = importer.binding_provenance(mod["main"])
            results = importer.results(mod["main"])
            mod = _fold_constants(mod)
            if held:
                mod = bind_trailing_params(mod, [onnx.numpy_helper.to_array(t) for t in held.values()])
            main, renamed = unique_binding_names(mod["main"])
            mod.update_func(mod.get_global_var("main"), main)
    except ModelLoadError:
        raise
    except Exception as err:  # noqa: BLE001 - TVM's converters raise every kind of error
        node = importer.current_node
        where = f" at node {(origin or {}).get(node.name, node.name)!r} ({node.op_type})" if node else ""
        first = first_line(err)
        raise ModelLoadError(
            f"TVM could not import the model{where}: {first}; "
            "this op or attribute combination is not supported by TVM's ONNX importer"
        ) from None
    # FoldConstant keeps the var of every binding it keeps; renaming maps old vars to new.
    kept = {b.var for block in mod["main"].body.blocks for b in block.bindings}
    node_of = {}
    for var, node in owners.items():
        var = renamed.get(var, var)
        if var in kept:
            node_of[var.name] = node
    outputs_of = {n.name: [o for o in n.output if o] for n in model.graph.node}
    tensor_of = {}
    for var, node in results.items():
        var = renamed.get(var, var)
        if var in kept and len(outputs_of.get(node.name, ())) == 1:
            tensor_of[var.name] = outputs_of[node.name][0]
    if origin:
        op_types = op_types or {}
        node_of = {b: OnnxNode(origin.get(n.name, n.name), op_types.get(n.name, n.op_type))
                   for b, n in node_of.items()}
    computed = {n.name for n in node_of.values()}  # an Expand another op still reads is computed after all
    absorbed = {user: why for name, why in importer.absorbed.items()
                if (user := (origin or {}).get(name, name)) not in computed}
    return mod, node_of, tensor_of, absorbed


def _fold_constants(mod):
    """``relax.transform.FoldConstant`` on ``mod``, without the bindings it leaks.

    TVM 0.27's FoldConstant legalizes an op to see whether it folds; for ops
    whose legalization emits helper bindings (``dynamic_strided_slice`` adds
    a ``call_tir`` to a shape function, ``tensor_to_shape``, ``match_cast``)
    and does not fold, those bindings stay in ``main`` while the PrimFunc
    they call is dropped, and no pipeline can build the module ("There is
    no definition of I.GlobalVar"). Nothing uses them, so they are removed;
    when that does not give a well-formed module the unfolded one is kept.
    """
    import tvm_ffi
    from tvm import ir, relax

    folded = relax.transform.FoldConstant()(mod)
    defined = {gv.name_hint for gv in folded.functions}
    updates = {}
    for gv, func in folded.functions.items():
        if not isinstance(func, relax.Function):
            continue
        referenced: set[str] = set()
        tvm_ffi.structural_walk(func, [(ir.GlobalVar, lambda g: referenced.add(g.name_hint))])
        if referenced <= defined:
            continue
        cleaned = _without_dangling_calls(func, defined)
        if cleaned is None:
            return mod
        updates[gv] = cleaned
    if not updates:
        return folded
    for gv, func in updates.items():
        folded.update_func(gv, func)
    try:
        folded = relax.transform.Normalize()(folded)  # types of the rebuilt function bodies
        relax.analysis.well_formed(folded)  # raises on the first defect
    except Exception:  # noqa: BLE001 - TVM raises several error types here
        return mod
    return folded


def _without_dangling_calls(func, defined: set):
    """``func`` without the bindings that call a function not in ``defined`` and their
    dependents, or None when something the function keeps uses one of them."""
    import tvm_ffi
    from tvm import ir, relax

    def calls_undefined(value) -> bool:
        names: set[str] = set()
        tvm_ffi.structural_walk(value, [(ir.GlobalVar, lambda g: names.add(g.name_hint))])
        return not names <= defined

    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return None
    dead: set = set()
    blocks = []
    for block in body.blocks:
        kept = []
        for binding in block.bindings:
            uses = set(relax.analysis.free_vars(binding.value))
            if calls_undefined(binding.value) or uses & dead:
                dead.add(binding.var)
            else:
                kept.append(binding)
        blocks.append(type(block)(kept, block.span))
    still_used = [b for block in blocks for b in block.bindings
                  if set(relax.analysis.free_vars(b.value)) & dead]
    if still_used or set(relax.analysis.free_vars(body.body)) & dead:
        return None
    new_body = relax.SeqExpr(blocks, body.body, body.span)
    return relax.Function(func.params, new_body, func.ret_ty, func.is_pure, func.attrs, func.span)

"""Import a checked, prepared ONNX model into Relax, keeping the map from every Relax binding to the ONNX node
that produced it, so that every report can use the user's own node names.

:func:`import_model` drives the frontend: load, check, apply the shapes, prepare, import.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from typing import Mapping, Sequence, Union

import onnx

from byoc.errors import ModelLoadError, first_line
from byoc.host.legalize import install_legalizations
from byoc.pipeline.frontend.check import (
    check_build_memory,
    check_model,
    check_supported_ops,
    check_tensor_sizes,
    check_tensor_values,
    inline_local_functions,
    read_as_the_writers_meant,
    sort_nodes,
)
from byoc.pipeline.frontend.dims import DimSetting, split_dim_settings
from byoc.pipeline.frontend.load import ModelSource, load_model
from byoc.pipeline.frontend.loop_bodies import check_body
from byoc.pipeline.frontend.onnx_model import (DimRange, HostLoop, ImportedModel, OnnxNode, TensorSpec, default_opset,
                                               name_nodes)
from byoc.pipeline.frontend.prepare import prepare
from byoc.pipeline.frontend.prepare.simplify import QUIET_LOCK
from byoc.pipeline.frontend.run_time_sequences import element_type
from byoc.pipeline.frontend.shapes import apply_input_shapes, declared_dims, model_inputs, name_dims

#: progress of the long stages, for an application that wants it (the library never configures logging)
_log = logging.getLogger(__name__)


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
    name); ``dims`` fixes or bounds dims by name (:mod:`byoc.pipeline.frontend.dims`).
    """
    if isinstance(source, ImportedModel):
        return source
    return _imported(source, input_shapes, base_dir, dims)


def _imported(source: ModelSource, input_shapes=None, base_dir=None, dims=None, scope: str = "") -> ImportedModel:
    """:func:`import_model`; with ``scope``, of the body of the host loop of that symbol (``loop_bodies``)."""
    fixed, ranges = split_dim_settings(dims)
    model = inline_local_functions(load_model(source, base_dir))
    check_tensor_values(model.graph)
    check_build_memory(model.graph, str(source) if isinstance(source, (str, os.PathLike)) else "the model")
    name_nodes(model.graph)
    sort_nodes(model.graph)
    read_as_the_writers_meant(model)
    overrides = apply_input_shapes(model, input_shapes) if input_shapes else []
    name_dims(model, fixed, ranges)
    model = check_model(model, overrides)
    inputs, dim_ranges = model_inputs(model, ranges)
    check_tensor_sizes(model.graph)
    _log.info("preparing %s: %d ONNX nodes", model.graph.name or "the model", len(model.graph.node))
    # Folding and unrolling run before the op check: a recurrent op is
    # supported once it is unrolled, and a folded op no longer needs TVM.
    prep = prepare(model)
    try:
        check_supported_ops(prep.model.graph, prep.origin)
        _log.info("importing %d prepared nodes into Relax", len(prep.model.graph.node))
        mod, node_of, tensor_of, absorbed, loops = to_relax(prep.model, inputs, prep.origin,
                                                             _op_types(model, prep.origin), dim_ranges, scope=scope)
    except ModelLoadError as err:
        if not prep.simplifier:
            raise
        # Preparation must never be the reason a model fails: try the model as given (a float16 model
        # computed in float32 still: prep.unfolded).
        given = prep.unfolded.model if prep.unfolded else model
        try:
            check_supported_ops(given.graph)
            mod, node_of, tensor_of, absorbed, loops = to_relax(given, inputs, dim_ranges=dim_ranges, scope=scope)
        except ModelLoadError:
            raise err from None
        warnings.warn(f"the model prepared by {prep.simplifier} does not import ({err}); "
                      "imported the model as given, without folding", stacklevel=2)
        removed = prep.unfolded.fate if prep.unfolded else {}
        return ImportedModel(mod, model, inputs, _output_specs(model, mod), node_of, prepared={**removed, **absorbed},
                             prepared_model=given, tensor_of=tensor_of, dims=dim_ranges,
                             loops=_host_loops(loops, {}), scope=scope)
    return ImportedModel(mod, model, inputs, _output_specs(model, mod), node_of,
                         prepared={**prep.fate, **absorbed}, prepared_model=prep.model, simplifier=prep.simplifier,
                         tensor_of=tensor_of, dims=dim_ranges, loops=_host_loops(loops, prep.origin), scope=scope)


def _host_loops(specs: list, origin: Mapping[str, str]) -> list[HostLoop]:
    """Each Loop the host runs, its body imported (its own loops too) and checked (``loop_bodies``)."""
    loops = []
    for spec in specs:
        body = _imported(spec.body, scope=spec.symbol)
        check_body(spec, body.mod["main"])
        loops.append(HostLoop(origin.get(spec.node, spec.node), spec, body))
    return loops


def _op_types(model: onnx.ModelProto, origin: Mapping[str, str]) -> dict[str, str]:
    """Prepared node name -> the op type of the user node it comes from."""
    op_of = {n.name: n.op_type for n in model.graph.node}
    return {name: op_of[user] for name, user in origin.items() if user in op_of}


def _output_specs(model: onnx.ModelProto, mod) -> list[TensorSpec]:
    from tvm import relax

    from byoc.vendor.values import dim_text

    ret = mod["main"].ret_ty if hasattr(mod["main"], "ret_ty") else mod["main"].body.ty
    fields = list(ret.fields) if len(model.graph.output) > 1 else [ret]
    specs = []
    for vi, ty in zip(model.graph.output, fields):
        if isinstance(ty, (relax.ObjectType, relax.TupleType)):  # a sequence (a tuple where its length is known)
            specs.append(TensorSpec(vi.name, tuple(declared_dims(vi) or ()), element_type(vi.type)[1], sequence=True))
            continue
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


def to_relax(model: onnx.ModelProto, inputs: list[TensorSpec], origin: Mapping[str, str] | None = None,
              op_types: Mapping[str, str] | None = None, dim_ranges: Mapping[str, DimRange] | None = None,
              scope: str = ""):
    """Import ``model`` into Relax: ``(mod, node_of, tensor_of, absorbed, loops)``; see :class:`ImportedModel`.

    ``node_of`` names the user's nodes through ``origin``, which maps a
    (prepared) node name of ``model`` to the user's node, and ``op_types``
    to that node's op type (see :mod:`byoc.pipeline.frontend.prepare`); a name without an entry
    is the user's own. ``tensor_of`` names the tensors of ``model``: a fused
    node's result holds the tensor it was fused into. ``absorbed`` maps a user
    node the import made nothing of to why (:mod:`byoc.pipeline.frontend.import_rewrites`).
    ``loops`` are the Loops the host runs (:class:`~byoc.pipeline.frontend.onnx_model.LoopSpec`), their
    bodies not yet imported; ``scope`` names the host loop whose body ``model`` is (:class:`ImportedModel`).
    """

    from tvm import relax

    from byoc.pipeline.frontend.common_subexpressions import merged_common_subexpressions
    from byoc.pipeline.frontend.importer import (ProvenanceImporter, bind_trailing_params, unique_binding_names,
                                                 unique_dim_names)
    from byoc.pipeline.frontend.prepare.qdq_form import held_integer_constants

    install_legalizations()  # the constant folding below legalizes
    opset = default_opset(model)
    # FoldConstant would compute DQ(integer weight) into a float constant: the weights
    # are parameters while it runs, and bound as constants after.
    model, held = held_integer_constants(model)
    specs = list(inputs) + [TensorSpec(name, tuple(t.dims), str(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)))
                            for name, t in held.items()]
    importer = ProvenanceImporter({s.name: list(s.shape) for s in specs}, {s.name: s.dtype for s in specs},
                                  dim_ranges or {}, scope)
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
            main, merged = merged_common_subexpressions(mod["main"])
            main, renamed = unique_binding_names(main, scope)
            mod.update_func(mod.get_global_var("main"), main)
            mod = unique_dim_names(mod)
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
    for var, into in merged.items():  # a node whose every computation repeats another node's
        user, same = (origin or {}).get(owners[var].name, owners[var].name) if var in owners else None, owners.get(into)
        if user and user not in computed and user not in absorbed:
            other = (origin or {}).get(same.name, same.name) if same else "an earlier node"
            absorbed[user] = f"computes what {other} computes (one computation serves both)"
    return mod, node_of, tensor_of, absorbed, importer.loops


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

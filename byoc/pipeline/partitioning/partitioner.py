"""Merge per-op decisions into partitions and apply the policies.

``MergeCompositeFunctions`` (TVM, cycle-safe) groups each vendor's composite
functions into regions, through producers and consumers; regions of one vendor
that read a common value and do not depend on each other are then merged too
(:mod:`byoc.pipeline.partitioning.siblings`). byoc then applies ``min_ops``: a region with fewer
op calls goes back to the host with the reason "below min_ops", and the
whole annotate+merge runs again (another vendor may now claim those ops)
until no region is too small. Each round demotes the small regions of the
highest-priority vendor that has any; every round adds demotions, so it ends.

Partitions are named ``<vendor>_<index>`` in the order the host program
calls them; that name is also the exported symbol.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence, Union

from byoc.vendor.values import const_nbytes, shape_dims
from byoc.pipeline.annotate.annotator import BINDINGS_ATTR, Annotation, Decision, annotate, target_reason
from byoc.errors import ByocError, TargetError, last_line
from byoc.pipeline.frontend import import_model
from byoc.pipeline.frontend.onnx_model import ImportedModel, OnnxNode, TensorSpec
from byoc.pipeline.partitioning.host_loops import with_host_loops
from byoc.pipeline.partitioning.merging import merge_regions
from byoc.vendor.graph import PartitionGraph, partition_graph
from byoc.vendor.options import vendor_option_settings
from byoc.pipeline.partitioning.partition_checks import Fallback, partition_check_verdicts
from byoc.pipeline.partitioning.device_edges import residencies, transfers
from byoc.pipeline.partitioning.pieces import pieces_named, pieces_unnamed
from byoc.pipeline.partitioning.specializations import (parse_specialize, specialized_dims, specialized_function,
                                                         specialized_symbol)
from byoc.vendor.registry import resolve_vendors
from byoc.deploy.targets import TargetPreset, resolve_target
from byoc.vendor import Vendor

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoundaryTensor:
    """A tensor crossing a partition boundary.

    ``source`` is the ONNX tensor's name (a graph input, or the output of a
    single-output node whose whole result it is), else the name of the ONNX
    node that produced it (an intermediate value of that node's ops).
    """

    source: str
    shape: tuple  # sizes, and the text of each symbolic dim ("batch", "seq*16")
    dtype: str

    @property
    def nbytes(self) -> Optional[int]:
        """Bytes per call; None when a dim is symbolic."""
        return TensorSpec(self.source, self.shape, self.dtype).nbytes


@dataclass
class Partition:
    """One subgraph handed to one vendor."""

    name: str
    vendor: str
    bindings: list[str]
    onnx_nodes: list[str]
    ops: list[str]
    rules: list[str]
    inputs: list[BoundaryTensor]
    outputs: list[BoundaryTensor]
    constant_bytes: int
    global_var: object = field(repr=False, default=None)
    #: why its vendor's partition check split it off the partition it was part of ("" when it did not)
    split: str = ""
    #: a static-shape vendor's partition with symbolic dims: the sizes it is compiled for, one
    #: :class:`~byoc.pipeline.partitioning.specializations.Specialization` each (empty otherwise)
    specializations: list = field(default_factory=list)

    @property
    def boundary_bytes(self) -> int:
        """Bytes that cross the boundary per call (inputs plus outputs)."""
        return sum(t.nbytes or 0 for t in self.inputs) + sum(t.nbytes or 0 for t in self.outputs)


@dataclass(frozen=True)
class HostNode:
    """One ONNX node with ops left on the host: its ops and, per vendor, why each declined."""

    node: Optional[OnnxNode]  # None for an op no ONNX node produced
    ops: tuple[str, ...]
    reasons: Mapping[str, str]  # vendor -> why it declined (distinct reasons of the ops joined by "; ")


@dataclass
class PartitionPlan:
    """The result of :func:`partition`: where every op goes, and the cut module.

    ``report()`` renders the partition report (the CLI's output) as text,
    JSON, DOT or HTML.
    """

    imported: ImportedModel
    vendors: list[Vendor]
    partitions: list[Partition]
    decisions: dict[str, Decision]
    mod: object = field(repr=False)  # tvm.IRModule: host ops in main, one Codegen function per partition
    min_ops: int = 1
    keep_on_host: tuple = ()
    target: TargetPreset = field(default_factory=lambda: resolve_target("x86_64"))
    #: measured placement's decisions (:class:`byoc.pipeline.artifact.placement_record.Placement`); None when the rules placed
    placement: object = None
    #: ``(vendor, binding) -> reason`` for the ops kept off a vendor that its rules take (measured placement, a
    #: codegen that failed on their partition, ``min_ops``, a partition check): what cutting the model again must
    #: keep
    demoted: Mapping = field(default_factory=dict)
    #: the part of ``demoted`` that cutting was given rather than found (measured placement, a failed codegen):
    #: what a cut with other options keeps, while ``min_ops`` and the partition checks judge afresh
    imposed: Mapping = field(default_factory=dict)
    #: the partitions their vendors gave back while this plan was made (the report's "Fallbacks")
    fallbacks: list = field(default_factory=list)
    #: vendor name -> option name -> value, as the user gave them (``partition(..., vendor_options=...)``): the
    #: checks judged with these options resolved (:meth:`options_for`), and a build with others cuts again
    vendor_options: Mapping = field(default_factory=dict)
    #: the sizes static-shape vendors' partitions are specialized for (``partition(..., specialize=...)``), as
    #: profiles: dim name -> size (:func:`~byoc.pipeline.partitioning.specializations.parse_specialize`)
    specialize: tuple = ()
    #: each Loop the host runs (its node's name) -> the plan of its body, whose partitions and decisions this
    #: plan's lists hold too (:mod:`~byoc.pipeline.partitioning.host_loops`)
    loops: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        parts = ", ".join(p.name for p in self.partitions) or "none"
        graph = self.imported.model.graph.name if self.imported.model is not None else ""
        return (f"<PartitionPlan {graph or 'model'!r} for {self.target.name}: "
                f"{len(self.partitions)} partition(s) ({parts}), {self.offloaded_ops} of {len(self.decisions)} "
                f"ops offloaded, {len(self.host_nodes)} ONNX node(s) with host ops>")

    @property
    def host_ops(self) -> list[Decision]:
        """Every op call left on the host (an ONNX node may have several); see :attr:`host_nodes`."""
        return [d for d in self.decisions.values() if d.on_host]

    @property
    def host_nodes(self) -> list[HostNode]:
        """The host ops grouped per ONNX node, in the model's order."""
        grouped: dict[object, list[Decision]] = {}
        for decision in self.host_ops:
            grouped.setdefault(decision.node.name if decision.node else decision.binding, []).append(decision)
        nodes = []
        for decisions in grouped.values():
            reasons: dict[str, list[str]] = {}
            for decision in decisions:
                for vendor, reason in decision.reasons.items():
                    reasons.setdefault(vendor, [])
                    if reason not in reasons[vendor]:
                        reasons[vendor].append(reason)
            nodes.append(HostNode(decisions[0].node, tuple(d.op for d in decisions),
                                  {vendor: "; ".join(why) for vendor, why in reasons.items()}))
        return nodes

    @property
    def offloaded_ops(self) -> int:
        return sum(1 for d in self.decisions.values() if not d.on_host)

    def options_for(self, vendor: Vendor) -> dict:
        """What ``vendor``'s checks, partition check and codegen see as its options in this plan: its declared
        options resolved with the user's (:meth:`Vendor.options_given`)."""
        return vendor.options_given(self.vendor_options.get(vendor.name))

    def graph(self, part: Partition, sizes: Optional[Mapping[str, int]] = None) -> PartitionGraph:
        """``part`` as a :class:`~byoc.vendor.graph.PartitionGraph` carrying its vendor's options and the model's
        dim bounds; with ``sizes`` (dim name -> size), specialized for them. Raises
        :class:`~byoc.errors.UnsupportedConstruct` for a partition the plain view cannot show."""
        vendor = next(v for v in self.vendors if v.name == part.vendor)
        func, symbol = self.mod[part.global_var], part.name
        if sizes is not None:
            symbol = specialized_symbol(part.name, sizes)
            func = specialized_function(func, sizes, symbol)
        graph = partition_graph(func, symbol, options=self.options_for(vendor), dim_bounds=self.imported.dim_bounds,
                                sizes=sizes)
        residency = residencies(self).get(part.name)
        if residency is not None:
            graph.resident_inputs = dict(residency.resident_inputs)
            graph.resident_outputs = dict(residency.resident_outputs)
            graph.device_only_outputs = residency.device_only_outputs
        return graph

    def transfers(self) -> dict:
        """Partition name -> what one call of it moves between the host and its vendor's device
        (:class:`~byoc.pipeline.partitioning.device_edges.Transfers`), for each partition of a vendor with a device
        memory (:mod:`byoc.vendor.device`)."""
        return transfers(self)

    def graphs(self, part: Partition) -> list[PartitionGraph]:
        """What ``part``'s codegen compiles: its graph (:meth:`graph`), or one graph per size it is specialized
        for that its partition check did not refuse."""
        if not part.specializations:
            return [self.graph(part)]
        return [self.graph(part, s.sizes) for s in part.specializations if not s.refused]

    def cut_again(self, demoted: Optional[Mapping[tuple[str, str], str]] = None,
                  vendor_options: Optional[Mapping] = None) -> "PartitionPlan":
        """This plan's model cut again with its policies, keeping off their vendors the ops it was told to
        (:attr:`imposed`) and ``demoted`` ones, with its options or ``vendor_options``."""
        return cut(self.imported, self.vendors, self.target, self.min_ops, self.keep_on_host,
                   {**self.imposed, **(demoted or {})},
                   self.vendor_options if vendor_options is None else vendor_options, self.specialize)

    def partition(self, name: str) -> Partition:
        for part in self.partitions:
            if part.name == name:
                return part
        raise KeyError(f"no partition named {name!r}; partitions: {[p.name for p in self.partitions]}")


def _region_bindings(func) -> list[str]:
    """Names of the original bindings inside one merged (Codegen) function."""
    from tvm import relax

    names: list[str] = []
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function) and value.attrs is not None and BINDINGS_ATTR in value.attrs:
                names.extend(str(value.attrs[BINDINGS_ATTR]).split(","))
    return names


def _constant_bytes(func) -> int:
    import tvm_ffi
    from tvm.ir.expr import GenericConst

    seen: dict = {}

    def visit(expr):
        seen[expr] = const_nbytes(expr)

    # structural_walk calls back only for constants: a Python call per node would
    # cost more than TVM's partitioning passes on large graphs.
    tvm_ffi.structural_walk(func, [(GenericConst, visit)])
    return sum(seen.values())


def _tensor_types(ty) -> list:
    from tvm import relax

    if isinstance(ty, relax.TupleType):
        return [f for field_ty in ty.fields for f in _tensor_types(field_ty)]
    return [ty]


def _merged_regions(mod) -> list[tuple[object, object]]:
    """``(call binding, GlobalVar)`` per Codegen function, in call order."""
    from tvm import relax

    regions = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                func = mod[value.op]
                if func.attrs is not None and "Codegen" in func.attrs:
                    regions.append((binding, value.op))
    return regions


def _source_names(imported: ImportedModel, main, items: Mapping[str, list[str]]) -> dict[str, str]:
    """Main var name -> the ONNX tensor it holds (an input or a node's output), else its producing node's name.

    ``items`` is :func:`_tuple_outputs`.
    """
    from tvm import relax

    names = {p.name: spec.name for p, spec in zip(main.params, imported.inputs)}
    names.update({b: imported.tensor_of.get(b, n.name) for b, n in imported.node_of.items()})
    for block in main.body.blocks:  # a Split's halves: item i is the node's output i
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
                outputs = items.get(value.tuple_value.name, ())
                if value.index < len(outputs):
                    names[binding.var.name] = outputs[value.index]
    return names


def _tuple_outputs(imported: ImportedModel, main) -> dict[str, list[str]]:
    """Main var name -> its ONNX tensors, for a tuple that is a multi-output node's result (a Split's).

    Only for a node imported as itself with one tuple field per output: an
    unrolled LSTM's Splits are not its outputs.
    """
    from tvm import relax

    if imported.model is None:  # a Relax module given without its ONNX model (benchmarks/run.py's scaling graphs)
        return {}
    prepared = imported.prepared_model if imported.prepared_model is not None else imported.model
    imported_as = {n.name: n.op_type for n in prepared.graph.node}
    outputs = {n.name: list(n.output) for n in imported.model.graph.node}
    items = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            node = imported.node_of.get(binding.var.name)
            ty = binding.var.ty
            if (node is not None and isinstance(ty, relax.TupleType) and imported_as.get(node.name) == node.op_type
                    and len(outputs.get(node.name, ())) == len(ty.fields) and all(outputs[node.name])):
                items[binding.var.name] = outputs[node.name]
    return items


def partition(
    model,
    vendors: Iterable = ("c_source",),
    *,
    target: Union[str, TargetPreset] = "x86_64",
    min_ops: int = 1,
    keep_on_host: Sequence[str] = (),
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    dims: Optional[Mapping[str, object]] = None,
    strict: bool = False,
    vendor_options: Optional[Mapping[str, Mapping[str, object]]] = None,
    specialize=None,
) -> PartitionPlan:
    """Annotate ``model`` for ``vendors`` and cut it into partitions for ``target``.

    ``model`` is a path, bytes, ``ModelProto`` or :class:`ImportedModel`.
    ``vendors`` (names or :class:`Vendor` objects) are in priority order.
    ``target`` is ``"x86_64"``, ``"ppc64le"`` or ``"s390x"`` (optionally
    ``NAME:MCPU``): a vendor that cannot run there offloads nothing, gives
    that as its reason and is named once in a ``RuntimeWarning``, or, with
    ``strict=True``, is a :class:`TargetError`.
    ``min_ops`` is the smallest number of op calls a partition may have;
    ``keep_on_host`` lists ONNX node names or op types that stay on the host;
    ``input_shapes`` sets whole input shapes (``{"input": [1, 3, 224,
    224]}``) and ``dims`` fixes or bounds symbolic dims by name
    (``{"batch_size": 1, "sequence_length": "..512"}``,
    :mod:`byoc.pipeline.frontend.dims`); a symbolic dim neither names stays symbolic.
    ``vendor_options`` (vendor name -> option name -> value, as :func:`byoc.build` takes them) reach every
    rule's check (``Match.options``), every partition check and, unless the build is given others, the codegen.
    ``specialize`` names the sizes of symbolic dims a static-shape vendor's partitions are compiled for
    (``{"batch": [1, 2, 4]}``, :mod:`byoc.pipeline.partitioning.specializations`).
    The CLI options map one to one onto these arguments.
    """
    if int(min_ops) < 1:
        raise ByocError(f"min_ops must be at least 1, got {min_ops}")
    preset = resolve_target(target)
    vendors = resolve_vendors(vendors)
    vendor_option_settings(vendors, vendor_options)  # a bad option is refused before the model is read
    unusable = [target_reason(v, preset.name) for v in vendors if target_reason(v, preset.name)]
    if strict and unusable:
        raise TargetError(f"{'; '.join(unusable)}: leave them out of the vendors for {preset.name}, or build "
                          "for a target they run on")
    for vendor in vendors:  # once per vendor here; each op's reason in the plan still says why
        if target_reason(vendor, preset.name):
            warnings.warn(f"{vendor.name} cannot build for {preset.name} (its runtime is "
                          f"{' and '.join(vendor.targets)} only): all its ops stay on the host",
                          RuntimeWarning, stacklevel=2)
    imported = import_model(model, input_shapes=input_shapes, dims=dims)
    profiles = parse_specialize(specialize, imported.dims)
    return cut(imported, vendors, preset, min_ops, tuple(keep_on_host), {}, vendor_options or {}, profiles)


def cut(imported: ImportedModel, vendors: list[Vendor], preset: TargetPreset, min_ops: int,
        keep_on_host: tuple, demoted: Mapping[tuple[str, str], str],
        vendor_options: Optional[Mapping] = None, specialize: tuple = ()) -> PartitionPlan:
    """The plan :func:`partition` makes of an imported model, with ``demoted`` ops kept off their vendors.

    ``demoted`` maps ``(vendor, binding)`` to the reason that vendor may not
    take the binding (measured placement's decisions, :mod:`byoc.pipeline.placement.placement`);
    ``min_ops`` and the vendors' partition checks add their own demotions to a copy. ``specialize`` holds the
    profiles static-shape vendors' partitions are specialized for.
    """
    imposed, demoted = dict(demoted), dict(demoted)
    vendor_options = dict(vendor_options or {})
    pieces: dict[tuple[str, str], int] = {}  # the partition checks' splits (pieces.py)
    split_at: dict[tuple[str, str], str] = {}
    fallbacks: list[Fallback] = []
    _log.info("annotating and partitioning for %s", ", ".join(v.name for v in vendors) or "the host alone")
    specialized = specialized_dims(specialize)
    plan = None
    while plan is None:
        annotation: Annotation = annotate(imported, vendors, keep_on_host, demoted, preset.name, vendor_options, specialized)
        if all(d.on_host for d in annotation.decisions.values()):
            merged = annotation.fused  # nothing to merge (and MergeCompositeFunctions rejects some graphs)
            break
        try:
            merged = pieces_unnamed(merge_regions(pieces_named(annotation.fused, pieces)))
        except Exception as err:  # noqa: BLE001 - TVM refuses e.g. match_cast or If bindings in main
            first = last_line(err)
            reason = f"TVM's MergeCompositeFunctions cannot partition this graph ({first})"
            warnings.warn(f"byoc: every op stays on the host: {reason}", RuntimeWarning, stacklevel=2)
            everything = {(v.name, b): reason for v in annotation.vendors for b in annotation.decisions}
            annotation = annotate(imported, vendors, keep_on_host, everything, preset.name, vendor_options,
                                  specialized)
            merged = annotation.fused
            break
        too_small = []
        joining = {v.name: set(v.joining_rules) for v in annotation.vendors}
        for _, gvar in _merged_regions(merged):
            func = merged[gvar]
            vendor = str(func.attrs["Codegen"])
            bindings = [b for b in _region_bindings(func) if b in annotation.decisions]
            if len(bindings) < min_ops:
                too_small.append((vendor, bindings, f"below min_ops: its partition would have {len(bindings)} "
                                                    f"op(s) < {min_ops}"))
            elif bindings and all(annotation.decisions[b].rule in joining.get(vendor, ()) for b in bindings):
                rules = ", ".join(sorted({annotation.decisions[b].rule for b in bindings}))
                too_small.append((vendor, bindings, f"{rules} only join a partition of other ops, and this region "
                                                    "has none"))
        if not too_small:
            plan = _plan(imported, annotation, merged, min_ops, keep_on_host, preset, vendor_options, specialize)
            verdicts = partition_check_verdicts(plan, pieces)
            if verdicts:  # cut again without the ops the checks refused, and split: what is left is checked again
                fallbacks += verdicts.fallbacks
                demoted.update(verdicts.demoted)
                pieces.update(verdicts.pieces)
                split_at.update(verdicts.split_at)
                plan = None
            else:
                for part in plan.partitions:
                    part.specializations = verdicts.specializations.get(part.name, [])
            continue
        # Demote only the highest-priority vendor's small regions this round:
        # the ops it gives up may let a lower-priority vendor form a region
        # that is large enough.
        priority = [v.name for v in annotation.vendors]
        first = min(priority.index(vendor) for vendor, _, _ in too_small)
        for vendor, bindings, reason in too_small:
            if priority.index(vendor) != first:
                continue
            for binding in bindings:
                demoted[(vendor, binding)] = reason
    if plan is None:  # every op on the host
        plan = _plan(imported, annotation, merged, min_ops, keep_on_host, preset, vendor_options, specialize)
    plan.demoted, plan.imposed, plan.fallbacks = demoted, imposed, fallbacks
    for part in plan.partitions:
        part.split = next((split_at[(part.vendor, b)] for b in part.bindings if (part.vendor, b) in split_at), "")
    if imported.loops:  # each body cut as a model of its own, under the same policies (its names are its own)
        with_host_loops(plan, {loop: cut(loop.body, vendors, preset, min_ops, keep_on_host, imposed, vendor_options)
                               for loop in imported.loops})
    return plan


def _rename_regions(mod, scope: str = ""):
    """Name each Codegen function ``<vendor>_<index>`` in call order (GlobalVar and symbol); in a host loop's body
    (``scope``), ``<vendor>_<scope>_<index>``."""
    import tvm
    from tvm import relax
    from tvm.relax.expr import _update_type

    counters: dict[str, int] = {}
    renamed: dict[object, object] = {}
    for _, gvar in _merged_regions(mod):
        vendor = str(mod[gvar].attrs["Codegen"])
        index = counters.get(vendor, 0)
        counters[vendor] = index + 1
        new = tvm.ir.GlobalVar(f"{vendor}_{scope}_{index}" if scope else f"{vendor}_{index}")
        _update_type(new, gvar.ty)
        renamed[gvar] = new

    @relax.expr_functor.mutator
    class _Renamer(relax.expr_functor.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op in renamed:
                return relax.Call(renamed[call.op], call.args, call.attrs, call.ty_args)
            return call

    functions = {}
    for gvar, func in mod.functions_items():
        if gvar in renamed:
            functions[renamed[gvar]] = func.with_attr("global_symbol", renamed[gvar].name_hint)
        elif gvar.name_hint == "main":
            functions[gvar] = _Renamer(mod).visit_expr(func)
        else:
            functions[gvar] = func
    return tvm.IRModule(functions, attrs=mod.attrs)


def _output_labels(func, sources: Mapping[str, str], items: Mapping[str, list[str]],
                   order: Mapping[str, int]) -> Optional[list[str]]:
    """The ONNX tensor each output of the Codegen function ``func`` holds, in its order; None if one is unknown.

    Each output is the result of a composite call (the composite stands for
    the original bindings it names, the last in ``order`` being its result)
    or an item of one (a Split's half, named by ``items``).
    """
    from tvm import relax

    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}

    def original(var) -> Optional[str]:
        call = bound.get(var)
        composite = bound.get(call.op) if isinstance(call, relax.Call) and isinstance(call.op, relax.Var) else None
        if not isinstance(composite, relax.Function) or composite.attrs is None \
                or BINDINGS_ATTR not in composite.attrs:
            return None
        return max(str(composite.attrs[BINDINGS_ATTR]).split(","), key=lambda name: order.get(name, -1))

    def labels(expr) -> Optional[list[str]]:
        if isinstance(expr, relax.Tuple):
            fields = [labels(field) for field in expr.fields]
            return None if None in fields else [label for field in fields for label in field]
        value = bound.get(expr)
        if isinstance(value, relax.TupleGetItem):
            tensors = items.get(original(value.tuple_value), ())
            return [tensors[value.index]] if value.index < len(tensors) else None
        name = original(expr)
        return None if name is None else items.get(name) or [sources.get(name, name)]

    return labels(func.body.body)


def _plan(imported, annotation, merged, min_ops, keep_on_host, target, vendor_options, specialize) -> PartitionPlan:
    from tvm import relax

    original = imported.mod["main"]
    items = _tuple_outputs(imported, original)
    sources = _source_names(imported, original, items)
    order = {b.var.name: i for i, b in enumerate(b for block in original.body.blocks for b in block.bindings)}
    merged = _rename_regions(merged, imported.scope)
    main = merged["main"]
    # Label every value of the partitioned main by what produced it, walking in
    # order: merging creates new variables whose names may collide with the
    # original bindings', so only host bindings are looked up by name.
    label: dict = {param: spec.name for param, spec in zip(main.params, imported.inputs)}
    partitions = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.TupleGetItem) and isinstance(label.get(value.tuple_value), list):
                label[binding.var] = label[value.tuple_value][value.index]
                continue
            if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)
                    and "Codegen" in (merged[value.op].attrs or {})):
                label[binding.var] = sources.get(binding.var.name, binding.var.name)
                continue
            part = _partition_of(annotation, merged, value, label, (sources, items, order))
            partitions.append(part)
            names = [t.source for t in part.outputs]
            label[binding.var] = names[0] if len(names) == 1 else names
    return PartitionPlan(imported, annotation.vendors, partitions, annotation.decisions, merged,
                         min_ops, keep_on_host, target, vendor_options=vendor_options, specialize=specialize)


def _partition_of(annotation, merged, call, label, naming) -> Partition:
    """The Partition for one call of a Codegen function in the partitioned main.

    ``naming`` is what :func:`_output_labels` reads after ``func``.
    """
    from tvm import relax

    gvar = call.op
    func = merged[gvar]
    name = gvar.name_hint
    inside = set(_region_bindings(func))
    bindings = [b for b in annotation.decisions if b in inside]  # program order
    decisions = [annotation.decisions[b] for b in bindings]
    nodes = list(dict.fromkeys(d.node.name for d in decisions if d.node is not None))
    inputs = []
    for arg in call.args:
        if not isinstance(arg, relax.Var):
            continue  # a shape that sizes the partition's symbolic dims (no tensor crosses the boundary)
        names = label.get(arg, arg.name)
        for i, ty in enumerate(_tensor_types(arg.ty)):
            inputs.append(BoundaryTensor(names[i] if isinstance(names, list) else names, shape_dims(ty.shape), str(ty.dtype)))
    out_types = _tensor_types(func.ret_ty)
    labels = _output_labels(func, *naming)
    if labels is None or len(labels) != len(out_types):
        labels = [f"{name}:{i}" for i in range(len(out_types))]
    outputs = [BoundaryTensor(lbl, shape_dims(ty.shape), str(ty.dtype)) for lbl, ty in zip(labels, out_types)]
    return Partition(
        name=name, vendor=str(func.attrs["Codegen"]), bindings=bindings, onnx_nodes=nodes,
        ops=[d.op for d in decisions], rules=list(dict.fromkeys(d.rule for d in decisions)),
        inputs=inputs, outputs=outputs, constant_bytes=_constant_bytes(func), global_var=gvar,
    )

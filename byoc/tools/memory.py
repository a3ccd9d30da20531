"""Activation memory of a partitioned model: what TVM plans, and the lower bound.

Both numbers are read from the same program: the host program of the
artifact, lowered by the passes ``tvm.compile`` runs for a CPU (LLVM) target
(``tvm.relax.backend.cpu_generic``), with every partition replaced by the
``call_dps_packed`` that ``RunCodegen`` would put there. Counted are the
tensors the artifact allocates (intermediate results and model outputs);
model inputs belong to the caller, weights are constants, and memory inside
a vendor's kernels is the vendor's own.

* **planned**: after TVM's ``StaticPlanBlockMemory``, the sum of every
  ``relax.memory.alloc_storage`` plus every ``relax.builtin.alloc_tensor``
  left unplanned (the outputs), i.e. what the VM holds at its peak.
* **lower bound** (as in the ONNC paper): the largest total size of tensors
  live at the same time, in the executed order. A tensor is live from the
  call that writes it to the last call that reads it (model outputs until
  the end); views (reshape, tuple items) share their source's memory.

Symbolic dims: each dim with an upper bound (``dims={"seq": "..512"}``) is
counted at that bound, which is what TVM plans for. A dim without one leaves
its sizes symbolic, and a figure is then a formula of the dims
(``768*batch*seq``): a sum for the planned bytes, the step whose live
tensors dominate every other for the lower bound (``max(a, b)`` where no
one step does for every size).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Mapping, Optional, Union

from byoc.pipeline.partitioning.partitioner import PartitionPlan
from byoc.deploy.targets import resolve_target
from byoc.vendor.values import static_dims

PLANNED_SOURCE = "TVM StaticPlanBlockMemory (alloc_storage + unplanned alloc_tensor) on the host program"
LOWER_BOUND_SOURCE = "max total size of tensors live at once, in executed order (ONNC)"
MODEL_LOWER_BOUND_SOURCE = ("the same bound for the whole model, every op in its executed order (partitions or not): "
                            "what any split of it needs")
SCOPE = ("host activations: intermediate and output tensors; inputs, weights and vendor-internal memory excluded "
         "(the vendor runtimes report theirs after a build)")


#: Bytes: an int, or the formula of the symbolic dims it depends on (a TIR expression while counting,
#: its text in a :class:`MemoryEstimate`).
Bytes = Union[int, str]


@dataclass(frozen=True)
class RuntimeRow:
    """One partition's vendor runtime memory, as the runtime reported it when built (or, with ``--memory``, in a
    fresh process that loaded the exported library and ran it once)."""

    partition: str
    vendor: str
    workspace_bytes: int
    constant_bytes: int
    model_constant_bytes: Optional[int] = None
    device_bytes: Optional[int] = None  # what it holds in its vendor's device memory (None: no device)


@dataclass(frozen=True)
class MemoryEstimate:
    """Activation bytes planned by TVM next to the lower bound for the same call order, the whole
    model's lower bound, and (after a build) what each vendor runtime holds."""

    planned_bytes: Bytes
    lower_bound_bytes: Bytes
    steps: int  # calls in the executed order (host kernels and partitions)
    model_lower_bound_bytes: Bytes
    runtimes: Optional[tuple[RuntimeRow, ...]] = None  # None: not built
    #: the symbolic dims counted at their upper bound (name -> size); the figures' formulas read the others
    at_bounds: Mapping[str, int] = field(default_factory=dict)
    #: what a fresh process gained by loading the exported library and one run (byoc.tools.resident), or None
    resident: Optional[Mapping] = None

    @property
    def total_planned_bytes(self) -> Optional[Bytes]:
        """The host's planned activations plus every vendor runtime's workspace (None before a build)."""
        if self.runtimes is None:
            return None
        workspace = sum(r.workspace_bytes for r in self.runtimes)
        if isinstance(self.planned_bytes, int):
            return self.planned_bytes + workspace
        return f"{self.planned_bytes} + {workspace}" if workspace else self.planned_bytes

    def with_runtimes(self, plan: PartitionPlan, runtime_memory: Mapping) -> "MemoryEstimate":
        """This estimate with each partition's runtime memory (``Artifact.runtime_memory``); partitions whose
        vendor reports nothing are left out."""
        rows = tuple(RuntimeRow(p.name, p.vendor, **asdict(runtime_memory[p.name]))
                     for p in plan.partitions if p.name in runtime_memory)
        return replace(self, runtimes=rows)

    def with_resident(self, plan: PartitionPlan, built: Mapping, resident) -> "MemoryEstimate":
        """This estimate with what a fresh process gained by loading the exported library and running it once
        (a :class:`byoc.tools.resident.Resident`): the runtimes' rows as they were there and then, where they
        report live, else as ``built`` (``Artifact.runtime_memory``) has them."""
        from byoc.vendor import RuntimeMemory

        loaded = {name: RuntimeMemory(*row) for name, row in resident.runtimes.items()}
        return replace(self.with_runtimes(plan, {**built, **loaded}), resident=resident.as_dict())

    def as_dict(self) -> dict:
        out = {
            "planned_bytes": self.planned_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "steps": self.steps,
            "model_lower_bound_bytes": self.model_lower_bound_bytes,
            "planned_source": PLANNED_SOURCE,
            "lower_bound_source": LOWER_BOUND_SOURCE,
            "model_lower_bound_source": MODEL_LOWER_BOUND_SOURCE,
            "scope": SCOPE,
        }
        if self.runtimes is not None:
            out["runtimes"] = [asdict(r) for r in self.runtimes]
            out["total_planned_bytes"] = self.total_planned_bytes
        if self.at_bounds:
            out["at_bounds"] = dict(self.at_bounds)
        if self.resident is not None:
            out["resident"] = dict(self.resident)
        return out


def estimate_memory(plan: PartitionPlan, target="x86_64") -> MemoryEstimate:
    """Planned activation bytes and the ONNC lower bound of ``plan``'s host program, and the whole model's bound.

    The vendor runtimes' own memory is known only after a build: see
    :meth:`MemoryEstimate.with_runtimes`.
    """
    from tvm import relax

    tvm_target = resolve_target(target).tvm_target()
    bounds = {name: r.max for name, r in plan.imported.dims.items() if r.max is not None}
    lowered = _lowered(_host_module(_at_bounds(plan.mod, bounds)), tvm_target)
    with tvm_target:
        planned = relax.transform.StaticPlanBlockMemory()(lowered)
    bound, steps = _lower_bound(lowered["main"])
    model_bound, _ = _lower_bound(_lowered(_at_bounds(plan.imported.mod, bounds), tvm_target)["main"])
    return MemoryEstimate(_bytes(_planned_bytes(planned["main"])), bound, steps, model_bound, at_bounds=bounds)


def _at_bounds(mod, bounds: Mapping[str, int]):
    """``mod`` with the symbolic dims of ``main`` that have an upper bound bound to it."""
    from tvm import relax

    return relax.transform.BindSymbolicVars(dict(bounds), "main")(mod) if bounds else mod


def _lowered(mod, tvm_target):
    """``mod`` through the passes ``tvm.compile`` runs for a CPU target, up to memory planning."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline

    from byoc.host.compiler import legalize_passes

    with tvm_target:
        return tvm.transform.Sequential(
            pipeline.library_dispatch_passes(tvm_target)
            + legalize_passes(tvm_target)
            + pipeline.dataflow_lower_passes(tvm_target)
        )(mod)


def _host_module(mod):
    """``mod`` without its partition functions, ``main`` calling them as external symbols.

    The other functions stay: the importer emits some ops as TIR PrimFuncs of
    their own (a reflect Pad is ``mirror_pad``), which ``main`` calls.
    """
    import tvm

    functions = {
        gvar: func
        for gvar, func in mod.functions.items()
        if gvar.name_hint != "main" and not (func.attrs is not None and "Codegen" in func.attrs)
    }
    host = tvm.IRModule(functions)
    host["main"] = _externalize_partitions(mod)
    return host


def _externalize_partitions(mod):
    """``main`` with each partition call replaced by the ``call_dps_packed`` RunCodegen makes.

    Done here rather than with RunCodegen so that estimating memory needs no
    codegen run (and no ``relax.ext.*`` global).
    """
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Externalize(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if isinstance(call.op, relax.GlobalVar):
                func = mod[call.op]
                if func.attrs is not None and "Codegen" in func.attrs:
                    symbol = relax.ExternFunc(str(func.attrs["global_symbol"]))
                    ret = call.ty  # in main's dims (the function's own are other variables)
                    out_types = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
                    return relax.call_dps_packed(symbol, relax.Tuple(list(call.args)), out_types)
            return call

    return _Externalize(mod).visit_expr(mod["main"])


def _extent(shape_expr):
    """Product of a ShapeExpr's extents: an int, or a TIR expression when one is symbolic."""
    dims = static_dims(shape_expr)
    if dims is not None:
        return math.prod(dims)
    return math.prod(shape_expr.values[1:], start=shape_expr.values[0])


def _alloc_bytes(call):
    """Bytes allocated by an alloc_storage/builtin.alloc_tensor call (a TIR expression when symbolic).

    Argument positions follow TVM's op definitions (and its estimate_memory_usage):
    ``alloc_storage(size_in_bytes, ...)``, ``builtin.alloc_tensor(shape, dtype, ...)``.
    """
    import tvm

    if call.op.name == "relax.memory.alloc_storage":
        return _extent(call.args[0])
    dtype = tvm.DataType(str(call.args[1].value))
    return _extent(call.args[0]) * ((dtype.bits + 7) // 8) * dtype.lanes


def _dims_analyzer(exprs):
    """An analyzer that knows every symbolic dim in ``exprs`` is at least 1, and reads the variables of one
    name as one dim: lowering leaves several (a function's own copies), which it would not combine."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer, ConstIntBound

    analyzer = Analyzer()
    canonical: dict = {}
    for var in {v for e in exprs if not isinstance(e, int) for v in tirx.analysis.undefined_vars(e)}:
        first = canonical.setdefault(str(var.name), var)
        if first.same_as(var):
            analyzer.update(var, ConstIntBound(1, ConstIntBound.POS_INF))
        else:
            analyzer.bind(var, first)
    return analyzer


def _bytes(value) -> Bytes:
    """An int, or a symbolic byte count's formula (``768*batch*seq``)."""
    from byoc.vendor.values import dim_text

    if isinstance(value, int):
        return value
    value = _dims_analyzer([value]).simplify(value)
    if getattr(value, "value", None) is not None:
        return int(value.value)
    try:
        return str(dim_text(value))
    except ValueError:
        return str(value)


def _peak(totals: list) -> Bytes:
    """The largest of the steps' live bytes: an int, or the formula of the steps no other step dominates for
    every size of the dims (``max(a, b)`` when several remain)."""
    if all(isinstance(t, int) for t in totals):
        return max(totals, default=0)
    analyzer = _dims_analyzer(totals)
    totals = [analyzer.simplify(t) if not isinstance(t, int) else t for t in totals]
    kept: list = []
    for total in totals:
        if any(analyzer.can_prove(other >= total) for other in kept):
            continue
        kept = [other for other in kept if not analyzer.can_prove(total >= other)] + [total]
    texts = [str(_bytes(t)) for t in kept]
    return _bytes(kept[0]) if len(kept) == 1 else f"max({', '.join(texts)})"


def _bindings(func):
    for block in func.body.blocks:
        yield from block.bindings


def _planned_bytes(func) -> int:
    from tvm import ir, relax

    total = 0
    for binding in _bindings(func):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, ir.Op) and value.op.name in (
            "relax.memory.alloc_storage", "relax.builtin.alloc_tensor"
        ):
            total = total + _alloc_bytes(value)
    return total


def _lower_bound(func) -> tuple[Bytes, int]:
    """ONNC lower bound over the lowered (pre-planning) ``main``; also the number of steps."""
    from tvm import ir, relax

    buffers: dict = {}  # relax var -> frozenset of buffer ids it may refer to
    fields: dict = {}  # relax var bound to a tuple -> the buffer ids of each field
    sizes: list[int] = []
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    step = 0

    def refs(expr) -> frozenset:
        if isinstance(expr, relax.Var):
            return buffers.get(expr, frozenset())
        if isinstance(expr, relax.Tuple):
            return frozenset().union(*[refs(f) for f in expr.fields]) if expr.fields else frozenset()
        if isinstance(expr, relax.TupleGetItem):
            # One field, not the whole tuple: a partition's second output must not
            # keep its first alive.
            source = expr.tuple_value
            if isinstance(source, relax.Tuple):
                return refs(source.fields[expr.index])
            if isinstance(source, relax.Var) and source in fields:
                return fields[source][expr.index]
            return refs(source)
        return frozenset()

    def use(ids, at):
        for i in ids:
            first.setdefault(i, at)
            last[i] = max(last.get(i, at), at)

    for binding in _bindings(func):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, ir.Op) and value.op.name == "relax.builtin.alloc_tensor":
            sizes.append(_alloc_bytes(value))
            buffers[binding.var] = frozenset([len(sizes) - 1])
        elif isinstance(value, relax.Call):
            # A kernel or partition call (a step), or a view such as reshape,
            # whose result aliases its arguments.
            ids = frozenset().union(*[refs(a) for a in value.args]) if value.args else frozenset()
            use(ids, step)
            buffers[binding.var] = ids
            step += 1
        else:
            if isinstance(value, relax.Tuple):
                fields[binding.var] = [refs(f) for f in value.fields]
            buffers[binding.var] = refs(value)
    use(refs(func.body.body), step)  # outputs stay live to the end
    totals = [sum((sizes[i] for i in first if first[i] <= at <= last[i]), 0) for at in range(step + 1)]
    return _peak(totals), step

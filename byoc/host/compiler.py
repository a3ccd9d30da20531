"""The host build: what TVM's LLVM target compiles for an artifact, fused, parallel and vectorized.

What ``tvm.compile(mod, target)`` does for a CPU target in TVM 0.27: it runs
``relax.pipeline.default_build_pipeline``, which legalizes every Relax op into
a PrimFunc of its own (no ``FoldConstant``, no ``FuseOps``/``FuseTIR``; the
fusing ``relax.get_default_pipeline`` is used for GPU targets only) and
schedules none of them: each op is one serial loop nest, vectorized only
where LLVM's loop vectorizer finds a way.

:func:`compile_host` runs instead:

1. TVM's CPU pipeline (``relax.backend.cpu_generic``): ``LegalizeOps``,
   ``FoldConstant`` (a transposed weight is transposed once, at build time),
   ``FuseOps`` + ``FuseTIR`` (conv2d + bias + clip is one PrimFunc);
2. a schedule for each PrimFunc those passes made (:func:`ScheduleHost`):
   the outer spatial loops are fused into one parallel loop (a unit batch
   loop folds into it), the innermost spatial loop is vectorized, and a
   reduction (conv2d, matmul, pooling) accumulates a register tile of
   outputs over its reduction loops, with its elementwise epilogue (bias,
   activation, residual add) applied to each tile as it completes;
3. the rest of TVM's CPU pipeline (memory planning, VM lowering) and
   ``tvm.compile``'s TIR pipeline.

``tvm.s_tir.dlight`` has CPU rules only for GEMV and softmax-like
reductions; applied to MobileNetV2 they made it 4x slower than no schedule
at all, so byoc schedules the PrimFuncs itself.

Parallel loops are calls into TVM's runtime thread pool
(``TVMBackendParallelLaunch``; the standalone program's serial stub runs
them in one task). On x86_64 the pool's default size is half the logical
CPUs (TVM assumes hyper-threading): set ``TVM_NUM_THREADS`` to use them all.
Vector widths follow the target: 128 bits for the portable presets, 256 or
512 with an mcpu that has AVX or AVX-512 (``x86_64:native`` is the fast
choice for the build machine itself).

Not touched: partitions offloaded to vendors (external modules, not
PrimFuncs); PrimFuncs that were in the module before (hand-written
``call_tir`` kernels: neither fused nor scheduled); PrimFuncs marked
scheduled or making impure calls (extern C, packed functions). A PrimFunc
the schedule cannot handle is built as TVM wrote it.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Mapping, Optional

from tvm.relax.expr_functor import PyExprMutator
from tvm.relax.expr_functor import mutator as relax_mutator

from byoc.deploy.targets import TargetPreset
from byoc.host.legalize import install_legalizations
from byoc.host.recorded import text_function
from byoc.host.relink import compile_linkable
from byoc.host.run_io import RecordRunIO

#: The Relax function an artifact's host program answers with its host calls (:func:`_host_calls`, JSON)
HOST_CALLS_FUNCTION = "byoc_host_calls"
#: The PrimFunc a host program with no op of its own gets, so that TVM links machine code (:func:`_no_op`)
NO_OP_FUNCTION = "byoc_host_no_op"

_SCHEDULED = "tirx.is_scheduled"
# Ops whose vector form computes something else: x86 vector shifts (the TIR
# LShift/RShift nodes and these calls) give 0 for a count >= the width or
# negative where the scalar instruction masks the count, which is what TVM's
# unscheduled build returns (ONNX BitShift conformance cases).
_SCALAR_ONLY = ("tirx.shift_left", "tirx.shift_right")
_OPAQUE_PATTERN = 8  # relax's OpPatternKind::kOpaque
_log = logging.getLogger(__name__)


def compile_host(mod, preset: TargetPreset, extern_alignment: Optional[Mapping[str, int]] = None,
                 linkable: bool = False):
    """Compile the Relax ``mod`` (vendor partitions already lowered by ``RunCodegen``) for ``preset``.

    Returns the ``tvm.compile`` executable; fusion, parallel loops and
    vectorization as described in this module's docstring. The arithmetic is
    TVM's operators': every output element sums its terms in the same order
    as TVM's unscheduled kernels do. The program records what a run may share
    with its caller (:mod:`byoc.host.run_io`); ``extern_alignment`` is what each
    vendor function needs of its inputs' addresses. With ``linkable``, the
    same build as a :class:`~byoc.host.relink.HostLink`, whose ``executable()``
    is that executable.
    """
    import tvm

    def compile_with(pipeline):
        if linkable:
            return compile_linkable(mod, target, pipeline)
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)

    install_legalizations()
    target = preset.tvm_target()
    try:
        return compile_with(host_pipeline(target, extern_alignment or {}))
    except Exception as err:  # noqa: BLE001 - e.g. an intrinsic LLVM cannot lower once vectorized
        # What TVM builds on its own still gives the right answer, only slower.
        _log.debug("host pipeline failed, building with TVM's default pipeline: %s",
                   str(err).strip().splitlines()[-1:] or err)
        from tvm import relax

        return compile_with(relax.get_pipeline("default"))


def host_pipeline(target, extern_alignment: Mapping[str, int]):
    """The Relax pipeline :func:`compile_host` runs: TVM's CPU pipeline with :func:`HostLowering`, and the
    record of what a run may share with its caller (:func:`byoc.host.run_io.RecordRunIO`)."""
    import tvm
    # The pipeline module, not the cpu_generic package: only it has dataflow_lower_passes.
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    @tvm.transform.module_pass(opt_level=0, name="ByocHostPipeline")
    def pipeline(mod, _ctx):
        with target:
            return tvm.transform.Sequential(
                cpu.library_dispatch_passes(target) + [HostLowering(target), RecordRunIO(extern_alignment)]
                + cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
            )(mod)

    return pipeline


def HostLowering(target):  # noqa: N802 - a pass, named like TVM's
    """``LegalizeOps`` for the CPU ``target``, then fusion and :func:`ScheduleHost`.

    A drop-in replacement for ``relax.transform.LegalizeOps()`` in a Relax
    pipeline (TVM's CPU ``legalize_passes``: ``LegalizeOps``,
    ``AnnotateTIROpPattern``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``).
    Only the PrimFuncs these passes create are scheduled; those already in
    the module are someone's own kernels and stay as they are. The module gains
    :data:`HOST_CALLS_FUNCTION`: which bindings of ``main`` each host function
    call computes, so a profile names the ONNX nodes behind a host function.
    """
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="ByocHostLowering")
    def lowering(mod, _ctx):
        existing = {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        mod = mod.clone()  # the caller's module (e.g. a PartitionPlan's) must not change
        for gv, func in list(mod.functions.items()):
            # Hand-written kernels without a declared pattern are opaque to FuseOps:
            # fusing them is not ours to decide (and FuseTIR rejects some of them).
            if gv.name_hint in existing and (func.attrs is None or "op_pattern" not in func.attrs):
                mod[gv] = func.with_attr("op_pattern", _OPAQUE_PATTERN)
        calls = []
        has_main = any(g.name_hint == "main" and isinstance(f, relax.Function) for g, f in mod.functions.items())
        with target:
            for step in legalize_passes(target):
                if step.info.name == "FuseOps" and has_main:
                    mod["main"] = _NameCalls().visit_expr(mod["main"])
                mod = step(mod)
                if step.info.name == "FuseOps" and has_main:
                    calls = _host_calls(mod)
                    # An exported VM writes a span as a "scope", with a C++ warning per call on save and load.
                    mod["main"] = _NameCalls(named=False).visit_expr(mod["main"])
        mod = ScheduleHost(target, skip=existing)(mod)
        if not any(isinstance(f, tvm.tirx.PrimFunc) for f in mod.functions.values()):
            # Without a PrimFunc TVM links an empty C source module, and a VM over one exports itself through
            # a C compiler before its first call: a model all on vendors would need gcc to run.
            mod[NO_OP_FUNCTION] = _no_op()
        if calls:
            mod[HOST_CALLS_FUNCTION] = text_function(HOST_CALLS_FUNCTION, json.dumps(calls))
        return mod

    return lowering


def legalize_passes(target) -> list:
    """TVM's CPU ``legalize_passes`` (LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR), with
    :func:`UnfusedScalarParams` before FuseOps."""
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    passes = list(cpu.legalize_passes(target))
    at = next(i for i, p in enumerate(passes) if p.info.name == "FuseOps")
    return passes[:at] + [UnfusedScalarParams()] + passes[at:]


def UnfusedScalarParams():  # noqa: N802 - a pass, named like TVM's
    """Keep PrimFuncs that take a scalar parameter no buffer's shape names out of fusion. A legalized op over a
    symbolic dim given as a value (``R.arange(past, past + seq)``'s start, a decoder's positions;
    ``R.shape_to_tensor``) takes that dim as a parameter, and TVM 0.27's FuseTIR defines it twice (``RenewDefs``:
    "VarRemapGet(source) == nullptr"): the host build fell back to TVM's unfused pipeline, and the memory report
    failed. Scalars that a buffer's shape names too (an op over ``past + seq`` takes both dims) fuse: a decoder's
    mask glue is one host function, not one per op."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="ByocUnfusedScalarParams")
    def unfused(mod, _ctx):
        for gv, func in list(mod.functions.items()):
            if isinstance(func, tvm.tirx.PrimFunc) and _scalar_params_beside_shapes(func):
                mod[gv] = func.with_attr("op_pattern", _OPAQUE_PATTERN)
        return mod

    return unfused


def _scalar_params_beside_shapes(func) -> bool:
    """Whether the PrimFunc ``func`` takes a scalar parameter that no buffer's shape names."""
    import tvm

    scalars = [p for p in func.params if isinstance(p.ty, tvm.ir.PrimType)]
    buffers = [p.ty for p in func.params if isinstance(p.ty, tvm.tirx.buffer.BufferType)]
    named = {v.name for t in buffers for dim in t.shape for v in tvm.tirx.analysis.undefined_vars(dim)}
    return any(p.name not in named for p in scalars)


def _no_op():
    """A PrimFunc that does nothing, so the host program is machine code even when no op is left on it."""
    from tvm.script import tirx as T

    @T.prim_func
    def no_op():
        T.func_attr({"global_symbol": NO_OP_FUNCTION})
        T.evaluate(0)

    return no_op


@relax_mutator
class _NameCalls(PyExprMutator):
    """Each op call of ``main`` with its binding's name as its span, which fusion keeps on the calls it moves
    into a fused function (and the binding names it does not); with ``named=False``, with no span again."""

    def __init__(self, named: bool = True):
        super().__init__()
        self.named = named

    def visit_var_binding_(self, binding):
        import tvm
        from tvm import relax

        value = binding.value
        if not isinstance(value, relax.Call):
            return super().visit_var_binding_(binding)
        span = tvm.ir.Span(tvm.ir.SourceName(binding.var.name), 0, 0, 0, 0) if self.named else None
        named = self.builder_.normalize(relax.Call(value.op, value.args, value.attrs, value.ty_args, span))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, named))


def _host_calls(mod) -> list:
    """``[function, [binding, ...]]`` per call of a host function in ``main`` after ``FuseOps``, in order: the
    function's name as the VM calls it, and the original bindings (of the partitioned main) it computes."""
    import tvm
    from tvm import relax

    def named(call) -> list:
        return [call.span.source_name.name] if call.span is not None else []

    calls = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call):
                continue
            if isinstance(value.op, tvm.ir.GlobalVar) and isinstance(mod[value.op], relax.Function):
                inner = [b.value for blk in mod[value.op].body.blocks for b in blk.bindings]
                calls.append([value.op.name_hint, [n for c in inner if isinstance(c, relax.Call) for n in named(c)]])
            elif value.op == tvm.ir.Op.get("relax.call_tir") and isinstance(value.args[0], tvm.ir.GlobalVar):
                calls.append([value.args[0].name_hint, named(value)])
    return [call for call in calls if call[1]]


class _Vector:
    """Vector and register sizes of a target, in elements of a given width."""

    def __init__(self, target):
        from tvm.target.codegen import llvm_get_cpu_features

        # llvm_get_vector_width reports the build machine's width when no mcpu
        # is given; the code LLVM emits then is baseline (SSE2 on x86_64).
        features = set(llvm_get_cpu_features(target))
        self.bits = 512 if "avx512f" in features else 256 if "avx" in features else 128
        self.registers = 32 if "avx512f" in features else 16

    def lanes(self, dtype_bits: int) -> int:
        return max(self.bits // max(dtype_bits, 8), 1)  # bool is 1 bit wide but stored in a byte


def ScheduleHost(target, skip=frozenset()):  # noqa: N802 - a pass, named like TVM's
    """A module pass that schedules every PrimFunc not named in ``skip`` for the CPU ``target``.

    See the module docstring for the schedule. Functions it cannot read or
    must not parallelize (:func:`_schedulable`) are left as they are, but for
    the gate of their parallel loops (:func:`_parallel_when_worth_it`).
    """
    import tvm

    vector = _Vector(target)

    @tvm.transform.module_pass(opt_level=0, name="ByocScheduleHost")
    def schedule_host(mod, _ctx):
        updates = {}
        for gv, func in mod.functions.items():
            if not isinstance(func, tvm.tirx.PrimFunc) or gv.name_hint in skip:
                continue
            scheduled = _schedule_func(func, vector) if _schedulable(func) else None
            if scheduled is None:
                # TVM's own parallel loops (topi's scatter, sort, ...) get the same gate as byoc's
                scheduled = _parallel_when_worth_it(func)
            if not scheduled.same_as(func):
                updates[gv] = scheduled
        mod = mod.clone()  # assigning into the module given would change it for its other holders
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return schedule_host


def _schedulable(func) -> bool:
    """Not marked scheduled, no impure call (extern C, packed function, LLVM intrinsic), no shift.

    Such calls have effects or thread safety TVM cannot see, so a function
    making them keeps the serial loops TVM wrote. Pure ones (``expf``
    through ``call_pure_extern``) are fine.
    """
    import tvm
    import tvm_ffi

    if func.attrs is not None and _SCHEDULED in func.attrs and bool(func.attrs[_SCHEDULED]):
        return False
    impure = []

    def visit(call):
        name = getattr(call.op, "name", "")
        if (name.startswith("tirx.") and "call" in name and "pure" not in name) or name in _SCALAR_ONLY:
            impure.append(name)

    shifts = (tvm.ir.prim.expr.LShift, tvm.ir.prim.expr.RShift)
    tvm_ffi.structural_walk(func, [(tvm.ir.expr.Call, visit), (shifts, lambda shift: impure.append("shift"))])
    return not impure


def _schedule_func(func, vector: _Vector):
    """``func`` scheduled for the CPU, or None when it is left as TVM wrote it."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    try:
        if not _schedule(sch, vector):
            return None
    except Exception as err:  # noqa: BLE001 - a primitive refused this function: build it unscheduled
        _log.debug("host schedule skipped a PrimFunc: %s", str(err).strip().splitlines()[-1:] or err)
        return None
    return _parallel_when_worth_it(sch.mod["main"]).with_attr(_SCHEDULED, True)


def _parallel_when_worth_it(func):
    """``func`` whose parallel loops over symbolic extents run serially below :data:`_PARALLEL_MIN_WORK`
    iterations (their nest's extents multiplied, at run time). TVM's launch of a parallel loop asks the OS how
    many CPUs there are (``MaxConcurrency``: ``std::thread::hardware_concurrency``, a sysfs read): a decoder step's
    mask glue, dozens of tiny host functions over ``past + 1`` positions, spent 1.5 ms a token on those reads."""
    import tvm
    import tvm_ffi
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    def nest_work(loop):
        extents = [loop.extent]
        tvm_ffi.structural_walk(loop.body, [(tirx.For, lambda inner: extents.append(inner.extent))])
        work = extents[0]
        for extent in extents[1:]:
            work = work * extent
        return work

    def gate(loop, mutator):
        if loop.kind != tirx.ForKind.PARALLEL:
            return mutator.default_mutate(loop)
        work = Analyzer().simplify(nest_work(loop))
        if isinstance(work, tirx.IntImm):
            return loop
        serial = tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                          annotations=loop.annotations)
        return tirx.IfThenElse(work >= tirx.IntImm(str(work.ty), _PARALLEL_MIN_WORK), loop, serial)

    gated = tvm_ffi.structural_mutate(func, [(tirx.For, gate)])
    if gated.same_as(func):
        return func
    # The serial copy defines the loop's variables a second time: each definition gets a variable of its own.
    return tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": gated}))["main"]


# -- the schedule -------------------------------------------------------------------------
# Fused parallel loops stop growing at this many iterations: enough chunks for
# any thread pool, and the loops inside stay nested (no div/mod per element).
_PARALLEL_CHUNKS = 128
# Below this many loop iterations a parallel launch costs more than it saves.
_PARALLEL_MIN_WORK = 1 << 14


def _schedule(sch, vector: _Vector) -> bool:
    """Schedule every block of ``sch``'s function; False when dlight cannot analyse it."""
    blocks = _blocks(sch)
    if blocks is None:
        return False
    if _inline(sch, blocks):
        blocks = _blocks(sch)
    if not blocks:
        return False
    done = set()
    for info in blocks:
        if info.name in done:
            continue
        kinds = info.dom_kind()
        if set(kinds) == {"S"}:
            _schedule_spatial(sch, info.block_rv, vector)
        elif re.fullmatch("S+R+", kinds):
            done.add(_schedule_reduction(sch, info, vector))
        done.add(info.name)
    return True


def _blocks(sch):
    """dlight's block analysis (kinds S/R/O per iterator), or None for a function it cannot read."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    return normalize_prim_func(sch)


def _extent(sch, loop) -> Optional[int]:
    extent = sch.get(loop).extent
    return int(extent.value) if hasattr(extent, "value") else None


def _spatial(sch, block) -> bool:
    from tvm import tirx

    return all(iv.iter_type == tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)


def _is_copy(sch, block) -> bool:
    """Whether the block copies element for element (a pad without padding): inlining it is free."""
    import tvm_ffi
    from tvm import ir, tirx

    body = sch.get(block).body
    return (isinstance(body, tirx.BufferStore) and isinstance(body.value, ir.expr.TensorLoad)
            and tvm_ffi.structural_equal(list(body.indices), list(body.value.indices)))


def _inline(sch, blocks) -> bool:
    """Merge elementwise chains: an all-spatial block goes into its consumers when they
    are all-spatial too (or when it only copies), then into its producer when that is
    all-spatial. Inlining into a reduction would recompute the block per reduction step;
    a padding block stays (inlined, its bounds test would sit in the innermost loop).
    ``blocks`` is the function's analysis (:func:`_blocks`); returns whether any block
    was inlined (the analysis is then stale: it costs a quarter of a host build to redo).
    """
    inlined = False
    for info in blocks:
        block = info.block_rv
        consumers = sch.get_consumers(block)
        if not _spatial(sch, block) or not consumers:
            continue
        if _is_copy(sch, block) or all(_spatial(sch, c) for c in consumers):
            inlined |= _try(sch.compute_inline, block)
    for info in (_blocks(sch) or []) if inlined else blocks:
        block = info.block_rv
        producers = sch.get_producers(block)
        if _spatial(sch, block) and producers and all(_spatial(sch, p) for p in producers):
            inlined |= _try(sch.reverse_compute_inline, block)
    return inlined


def _try(primitive, *args) -> bool:
    """Apply a schedule primitive that may legitimately refuse (e.g. inlining an output block)."""
    from tvm.s_tir import ScheduleError

    try:
        primitive(*args)
    except ScheduleError:
        return False
    return True


def _divisor(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` that is at most ``limit``."""
    return max(d for d in range(1, min(extent, limit) + 1) if extent % d == 0)


def _vector_width(extent: int, lanes: int) -> int:
    """The vector loop's length: a divisor of ``extent`` filling at most one register.

    Longer odd lengths (28 floats on AVX-512) split into pieces LLVM spills;
    a short extent with no useful divisor (7 floats on SSE) is taken whole.
    """
    width = _divisor(extent, lanes)
    return extent if width == 1 and extent <= 2 * lanes else width


def _parallelize(sch, loops: list, work: Optional[int]):
    """Fuse the outer ``loops`` until there are enough chunks and make that loop parallel.

    Returns the innermost of ``loops`` after fusing (the loop a tile hangs from).
    """
    extents = [_extent(sch, loop) for loop in loops]
    count, product = 0, 1
    while count < len(loops) and product < _PARALLEL_CHUNKS:
        extent = extents[count]
        if extent is None:
            break
        product *= extent
        count += 1
    count = max(count, 1)
    outer = sch.fuse(*loops[:count]) if count > 1 else loops[0]
    if work is None or work >= _PARALLEL_MIN_WORK:
        sch.parallel(outer)
    return ([outer] + list(loops[count:]))[-1]


def _work(sch, loops) -> Optional[int]:
    product = 1
    for loop in loops:
        extent = _extent(sch, loop)
        if extent is None:
            return None
        product *= extent
    return product


def _schedule_spatial(sch, block, vector: _Vector) -> None:
    """Parallel outer loops, a vectorized inner loop, for an all-spatial block."""
    loops = sch.get_loops(block)
    if not loops:
        return
    work = _work(sch, loops)
    # Trailing unit loops carry no work: the vector loop is the last real one.
    while len(loops) > 1 and _extent(sch, loops[-1]) == 1:
        loops = loops[:-1]
    inner, outer = loops[-1], list(loops[:-1])
    extent = _extent(sch, inner)
    lanes = vector.lanes(sch.get(block).writes[0].source.dtype.bits)
    if extent is not None and extent >= 2:
        width = _vector_width(extent, lanes)
        if width > 1:
            rest, vec = sch.split(inner, [None, width])
            sch.vectorize(vec)
            inner = rest
    _parallelize(sch, outer + [inner], work)


def _schedule_reduction(sch, info, vector: _Vector) -> Optional[str]:
    """Tile a block whose loops are spatial then reduction (conv2d, matmul, pooling, mean).

    The innermost spatial axis becomes a vector of ``width`` outputs, and when
    another spatial axis is missing from the reads that vector comes from (the
    output channel of a conv2d, the row of a matmul) ``rows`` of those vectors
    form a register tile: each input vector loaded is used ``rows`` times.
    The tile loops go inside the reduction loops, so the tile accumulates in
    registers. The one all-spatial consumer (bias, activation, residual add)
    runs right after each tile. Returns that consumer's name, or None.
    """
    block = info.block_rv
    stmt = sch.get(block)
    n_spatial = info.dom_kind().count("S")
    spatial = [it.loop_rv for it in info.iters[:n_spatial]]
    reduce = [it.loop_rv for it in info.iters[n_spatial:]]
    spatial_vars = [it.var for it in info.iters[:n_spatial]]
    work = _work(sch, spatial + reduce)
    lanes = vector.lanes(stmt.writes[0].source.dtype.bits)
    extent = _extent(sch, spatial[-1])
    width = 1
    if extent is not None and _last_dim_only(stmt, spatial_vars[-1]):
        width = _vector_width(extent, lanes)
    tile = []
    if width > 1:
        rest, vec = sch.split(spatial[-1], [None, width])
        spatial[-1], tile = rest, [vec]
        axis = _row_axis(stmt, spatial_vars[:-1], spatial_vars[-1])
        rows_extent = _extent(sch, spatial[axis]) if axis is not None else None
        if axis is not None and rows_extent is not None and rows_extent > 1:
            # A quarter of the vector registers hold the tile: measured best on
            # SSE2 (16 registers) and AVX-512 (32); more rows spill.
            rows = _divisor(rows_extent, max(1, vector.registers // (4 * -(-width // lanes))))
            if rows > 1:
                rest, row = sch.split(spatial[axis], [None, rows])
                spatial[axis], tile = rest, [row, vec]
        sch.reorder(*spatial, *reduce, *tile)
    anchor = _parallelize(sch, spatial, work)
    if not tile:
        return None
    epilogue = None
    consumers = sch.get_consumers(block)
    if len(consumers) == 1 and _spatial(sch, consumers[0]):
        if _try(sch.reverse_compute_at, consumers[0], anchor, True):
            epilogue = sch.get(consumers[0]).name_hint
            _vectorize_last(sch, consumers[0])
    # Loop kinds are set before decompose_reduction: the update block it leaves
    # has no init, and schedule primitives refuse it afterwards.
    sch.vectorize(tile[-1])
    if len(tile) == 2:
        sch.unroll(tile[0])
    sch.decompose_reduction(block, reduce[0])
    return epilogue


def _vectorize_last(sch, block) -> None:
    loop = sch.get_loops(block)[-1]
    extent = _extent(sch, loop)
    if extent is not None and extent >= 2:
        sch.vectorize(loop)


def _region_vars(region) -> list:
    """Per dimension of a buffer region, the variables its start index uses."""
    from tvm.tirx.analysis import undefined_vars

    return [undefined_vars(r.min) for r in region.region]


def _uses(variables, var) -> bool:
    return any(v.same_as(var) for v in variables)


def _last_dim_only(stmt, var) -> bool:
    """Whether every buffer the block touches indexes ``var``, if at all, in its last dimension only.

    Then consecutive ``var`` are consecutive (or evenly strided) addresses,
    and a vector over it is a load, not a gather of scattered elements.
    """
    for region in list(stmt.reads) + list(stmt.writes):
        dims = _region_vars(region)
        if any(_uses(vs, var) for vs in dims[:-1]):
            return False
    return True


def _row_axis(stmt, outer_vars, vector_var) -> Optional[int]:
    """The innermost of ``outer_vars`` that no read indexed by ``vector_var`` uses, or None."""
    vector_reads = [[v for vs in dims for v in vs] for dims in map(_region_vars, stmt.reads)
                    if any(_uses(vs, vector_var) for vs in dims)]
    if not vector_reads:
        return None
    for i in reversed(range(len(outer_vars))):
        if not any(_uses(used, outer_vars[i]) for used in vector_reads):
            return i
    return None

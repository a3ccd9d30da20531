"""Vendor regions from composite calls: TVM's ``MergeCompositeFunctions``, then :func:`merge_siblings`, then
the shape arguments the regions need no more (:func:`inline_shape_arguments`).

TVM 0.27 passes a symbolic scalar argument (the ``n`` of ``R.arange(0, n, 1)``,
as transformers' position ids and masks import) as the TIR variable itself,
and ``MergeCompositeFunctions`` looks every call argument up among the
bindings it has seen: a bare TIR variable is none of them, and the pass fails
("Could not find memo-ized group"). A compound expression is a leaf it
accepts, so such an argument (or a tuple field, as strided_slice's bounds)
is written ``n + 0`` first: the same value.

It also refuses ``match_cast`` bindings ("Invalid type: relax.expr.MatchCast"),
which the importer writes where a symbolic dim must be checked at run time (a
Squeeze of it, a Concat whose dims no analysis proves equal). They go through
the merge as plain bindings of the value they cast (host bindings, which the
merge leaves as they are), and come back as they were.

The merge drops every binding whose variable nothing reads, and a cast that
defines dims (the shape a Squeeze or Reshape computes from an input, the
length of a Range) is often read by nothing but those dims. Once hidden as a
plain binding it was dropped with the chain that computes it, and the host
build then failed ("PrimExpr ... has not been computed"). So ``main`` returns
the hidden casts beside its own result during the merge
(:func:`_casts_kept`), and gets its result back after it.
"""

from __future__ import annotations

from byoc.pipeline.annotate.shape_args import inline_shape_arguments
from byoc.pipeline.partitioning.siblings import casts_defining_dims, merge_siblings


def merge_regions(mod):
    """``mod`` (after FuseOpsByPattern) with each vendor's composite calls grouped into Codegen functions."""
    from tvm.relax.transform import MergeCompositeFunctions

    hidden, casts = _match_casts_hidden(_scalar_vars_as_expressions(mod))
    kept, ret_ty = _casts_kept(hidden, casts)
    merged = MergeCompositeFunctions()(kept)
    merged = merge_siblings(_restored_match_casts(_result_restored(merged, ret_ty), casts))
    return inline_shape_arguments(_ordered_by_dims(merged), "Codegen")  # TVM passes a shape per composite that took one


def _ordered_by_dims(mod):
    """``mod`` whose ``main`` computes each binding after the casts that define the dims its type names.

    A binding may read a dim without reading the variable whose cast defines it: a host Tile's result is sized
    by a shape computed in a region, and TVM's merge, seeing no variable between them, put the region's call
    after the Tile. The bindings of each dataflow block are put in an order that respects both kinds of
    dependence, as near their order as it allows (a stable topological sort; at a cycle, the earliest binding
    not yet placed goes next). ``mod`` itself when the order holds already.
    """
    import heapq

    from tvm import relax

    main = mod["main"]
    blocks, changed = [], False
    for block in main.body.blocks:
        bindings = list(block.bindings)
        if not isinstance(block, relax.DataflowBlock):
            blocks.append(block)
            continue
        position = {b.var: n for n, b in enumerate(bindings)}
        defines = casts_defining_dims(bindings)
        needs = []
        for n, b in enumerate(bindings):
            deps = {position[v] for v in relax.analysis.free_vars(b.value) if v in position}
            deps |= {defines[d] for d in relax.analysis.tir_vars_in_type(b.var.ty) if d in defines and defines[d] != n}
            needs.append(deps)
        readers: dict = {}
        for n, deps in enumerate(needs):
            for d in deps:
                readers.setdefault(d, []).append(n)
        waiting = [len(deps) for deps in needs]
        ready = [n for n, w in enumerate(waiting) if w == 0]
        heapq.heapify(ready)
        order, placed = [], [False] * len(bindings)
        while len(order) < len(bindings):
            if not ready:
                # A cycle, which no order would hold: the earliest binding not yet placed goes next (so the
                # bindings stuck in it keep their relative order), and the rest of the block is still put in order
                # (YOLOv8's anchors, a Range per detection head, each after the cast of its length: leaving the whole
                # block as it was failed the host build, "has not been computed")
                ready = [min(n for n in range(len(bindings)) if not placed[n])]
            n = heapq.heappop(ready)
            if placed[n]:
                continue
            placed[n] = True
            order.append(n)
            for r in readers.get(n, []):
                waiting[r] -= 1
                if waiting[r] == 0 and not placed[r]:
                    heapq.heappush(ready, r)
        if order == sorted(order):
            blocks.append(block)  # the order holds: as it was
            continue
        changed = True
        blocks.append(relax.DataflowBlock([bindings[n] for n in order], block.span))
    return _with_main_blocks(mod, blocks) if changed else mod


def _with_main_blocks(mod, blocks):
    """``mod`` whose ``main`` has ``blocks`` for its bindings, and its result as before."""
    import tvm
    from tvm import relax

    main = mod["main"]
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = relax.Function(
        main.params, relax.SeqExpr(blocks, main.body.body), main.ret_ty, main.is_pure, main.attrs, main.span)
    return tvm.IRModule(functions, attrs=mod.attrs)


def _with_main_bindings(mod, rebind):
    """``mod`` whose ``main`` has each binding ``b`` replaced by ``rebind(b)`` (a binding, or a list of bindings);
    ``mod`` itself if none changes."""
    main = mod["main"]
    blocks, changed = [], False
    for block in main.body.blocks:
        bindings = []
        for b in block.bindings:  # ``rebind`` gives one binding, or a list of them
            new = rebind(b)
            bindings += new if isinstance(new, list) else [new]
        changed |= len(bindings) != len(block.bindings) or any(
            not new.same_as(old) for new, old in zip(bindings, block.bindings))
        blocks.append(type(block)(bindings, block.span))
    return _with_main_blocks(mod, blocks) if changed else mod


def _match_casts_hidden(mod):
    """``mod`` with each match_cast binding of ``main`` a plain binding of its value, and the casts by var."""
    from tvm import relax

    casts = {}
    builder = relax.BlockBuilder()
    main = mod["main"]

    def composite(value) -> bool:
        return isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar) \
            and "Composite" in (mod[value.op].attrs or {})

    read_on_host = set(relax.analysis.free_vars(main.body.body))
    for block in main.body.blocks:
        for b in block.bindings:
            if not composite(b.value):
                read_on_host.update(relax.analysis.free_vars(b.value))

    def rebind(binding):
        if not isinstance(binding, relax.MatchCast):
            return binding
        casts[binding.var] = binding
        shape = getattr(binding.ty, "shape", None)
        if isinstance(binding.value, relax.Var) and isinstance(shape, relax.ShapeExpr) and binding.var in read_on_host:
            # ``y = x`` is an alias the merge substitutes away, and a host op reading the cast loses its dims (the
            # importer casts a broadcast operand, a region's output, to the other operand's dims: the host's
            # ``where`` then had no shape to be built with). A reshape to the cast's dims keeps them, and is taken
            # back after the merge. A cast only regions read stays an alias: the region takes it in.
            return relax.VarBinding(binding.var, builder.normalize(relax.op.reshape(binding.value, shape)))
        return relax.VarBinding(binding.var, binding.value)

    return _with_main_bindings(mod, rebind), casts


_KEEP = "byoc_casts_kept"


def _casts_kept(mod, casts):
    """``mod`` whose ``main`` also returns every hidden cast, so that the merge keeps each and what it reads;
    and ``main``'s own result, for :func:`_result_restored`."""
    import tvm
    from tvm import relax

    main = mod["main"]
    if not casts:
        return mod, None
    blocks = list(main.body.blocks)
    last = blocks[-1]
    keep = relax.Var(_KEEP, relax.TupleType([c.ty for c in casts.values()]))
    binding = relax.VarBinding(keep, relax.Tuple(list(casts)))
    blocks[-1] = type(last)(list(last.bindings) + [binding], last.span)
    body = relax.SeqExpr(blocks, relax.Tuple([main.body.body, keep]))
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = relax.Function(
        main.params, body, relax.TupleType([main.ret_ty, keep.ty]), main.is_pure, main.attrs, main.span)
    return tvm.IRModule(functions, attrs=mod.attrs), main.ret_ty


def _result_restored(mod, ret_ty):
    """``mod`` after the merge, ``main`` returning its own result (of ``ret_ty``) again, without the binding of
    the kept casts."""
    import tvm
    from tvm import relax

    if ret_ty is None:
        return mod
    main = mod["main"]
    blocks = [type(block)([b for b in block.bindings if str(b.var.name) != _KEEP], block.span)
              for block in main.body.blocks]
    returned = main.body.body.fields[0]
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = relax.Function(
        main.params, relax.SeqExpr(blocks, returned), ret_ty, main.is_pure, main.attrs, main.span)
    return tvm.IRModule(functions, attrs=mod.attrs)


def _restored_match_casts(mod, casts):
    from tvm import relax

    if not casts:
        return mod

    def rebind(binding):
        original = casts.get(binding.var)
        if original is None:
            return binding
        value = binding.value
        if isinstance(original.value, relax.Var) and isinstance(value, relax.Call) \
                and getattr(value.op, "name", "") == "relax.reshape":  # the reshape hiding it
            value = value.args[0]
        return relax.MatchCast(binding.var, value, original.ty, original.span)

    mod = _with_main_bindings(mod, rebind)
    # A cast of a variable nobody reads (a computed shape whose dims a host Tile's result has) was an alias the
    # merge substituted away: it comes back right after the binding of what it casts, defining its dims again.
    main = mod["main"]
    bound = {b.var for block in main.body.blocks for b in block.bindings}
    lost = {}
    for var, cast in casts.items():
        if var not in bound and isinstance(cast.value, relax.Var) and cast.value in bound:
            lost.setdefault(cast.value, []).append(cast)
    if not lost:
        return mod
    return _with_main_bindings(mod, lambda b: [b, *lost.get(b.var, [])])


def _scalar_vars_as_expressions(mod):
    """``mod`` whose ``main`` passes no bare symbolic (TIR) variable as a call argument."""
    import tvm
    from tvm import relax, tirx
    from tvm.relax.expr_functor import PyExprMutator, mutator

    main = mod["main"]
    relax_vars = set(main.params)
    for block in main.body.blocks:
        relax_vars.update(b.var for b in block.bindings)

    def wrapped(arg):
        if tvm.ir.is_prim_var(arg) and arg not in relax_vars:
            return tirx.Add(arg, tirx.IntImm(str(arg.ty), 0))
        if isinstance(arg, relax.Tuple):  # strided_slice's (begin, end) tuples of dims
            fields = [wrapped(f) for f in arg.fields]
            return arg if all(a.same_as(b) for a, b in zip(fields, arg.fields)) else relax.Tuple(fields, arg.span)
        return arg

    @mutator
    class _Wrap(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            args = [wrapped(a) for a in call.args]
            if all(a.same_as(b) for a, b in zip(args, call.args)):
                return call
            return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    new_main = _Wrap().visit_expr(main)
    if new_main.same_as(main):
        return mod
    functions = dict(mod.functions_items())
    functions[mod.get_global_var("main")] = new_main
    return tvm.IRModule(functions, attrs=mod.attrs)

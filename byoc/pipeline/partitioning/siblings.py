"""Merge sibling partitions: two regions of one vendor that read a common value.

TVM's ``MergeCompositeFunctions`` grows a region through producers and
consumers only. Two regions that both read one host tensor (the branches of
a detector head after a host op, a partition per branch) stay apart, and
each pays a boundary and a call of its own. :func:`merge_siblings` joins
them into one Codegen function when neither depends on the other, directly
or through any other binding: the merged region then has no path out of it
and back in, so the graph stays acyclic. Merging repeats until no pair is
left, so three siblings become one.

The merged function takes the union of both argument lists (a value both
read is one parameter) and returns both results as one flat tuple; in
``main`` each original result variable is re-bound to its part of that
tuple, so every reader is left as it was. Bindings between the two calls
that read the first one's result move after the merged call (none of them
feeds the second, or the two would depend on each other).
"""

from __future__ import annotations

from typing import Optional


def merge_siblings(mod):
    """``mod`` (after ``MergeCompositeFunctions``) with sibling Codegen functions merged; ``mod`` itself when
    there are none."""
    while True:
        merged = _merge_one_pair(mod)
        if merged is None:
            return mod
        mod = merged


def _merge_one_pair(mod):
    """``mod`` with the first mergeable pair of one dataflow block of ``main`` merged, or None."""
    import tvm
    from tvm import relax

    main = mod["main"]
    if not isinstance(main.body, relax.SeqExpr):
        return None
    for k, block in enumerate(main.body.blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        pair = _sibling_pair(mod, list(block.bindings))
        if pair is None:
            continue
        bindings, gvar_a, gvar_b, merged_func, merged_gvar = _merged_bindings(mod, list(block.bindings), *pair)
        blocks = list(main.body.blocks)
        blocks[k] = relax.DataflowBlock(bindings, block.span)
        new_main = relax.Function(main.params, relax.SeqExpr(blocks, main.body.body), main.ret_ty, main.is_pure,
                                  main.attrs, main.span)
        functions = {g: f for g, f in mod.functions_items() if g not in (gvar_a, gvar_b)}
        functions[mod.get_global_var("main")] = new_main
        functions[merged_gvar] = merged_func
        return relax.transform.Normalize()(tvm.IRModule(functions, attrs=mod.attrs))  # types of the new exprs
    return None


def _codegen_call(mod, binding) -> Optional[str]:
    """The vendor of a Codegen function ``binding`` calls, else None."""
    from tvm import relax

    value = binding.value
    if not (isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar)):
        return None
    attrs = mod[value.op].attrs
    return str(attrs["Codegen"]) if attrs is not None and "Codegen" in attrs else None


def casts_defining_dims(bindings) -> dict:
    """Each symbolic dim a ``match_cast`` among ``bindings`` defines -> the index of the first such cast. Keyed by
    the dim itself: dims of one name hint may be different variables (every layer's Tile dims)."""
    from tvm import relax

    defined_at: dict = {}
    for n, b in enumerate(bindings):
        if isinstance(b, relax.MatchCast):
            for dim in relax.analysis.definable_tir_vars_in_type(b.ty):
                defined_at.setdefault(dim, n)
    return defined_at


def _sibling_pair(mod, bindings) -> Optional[tuple[int, int]]:
    """Indices ``(i, j)``, ``i < j``, of two calls of one vendor's functions that read a common variable,
    with no path from the first to the second; or None."""
    from tvm import relax

    position = {b.var: n for n, b in enumerate(bindings)}
    defined_at = casts_defining_dims(bindings)
    calls: dict[int, str] = {}
    # after[n]: the calls binding n depends on, directly or through other bindings (a bit per call index);
    # a binding whose type names a dim depends on the cast that defines it (a Range's length, a computed shape)
    after: list[int] = []
    for n, b in enumerate(bindings):
        reach = 0
        dims = relax.analysis.tir_vars_in_type(b.var.ty)
        sources = [position.get(v) for v in relax.analysis.free_vars(b.value)]
        sources += [defined_at.get(d) for d in dims]
        for d in sources:
            if d is not None and d < n:  # a cast after the binding defines no dim it reads here
                reach |= after[d] | ((1 << d) if d in calls else 0)
        after.append(reach)
        vendor = _codegen_call(mod, b)
        if vendor is not None:
            calls[n] = vendor
    order = sorted(calls)
    for x, i in enumerate(order):
        reads_i = set(bindings[i].value.args)
        for j in order[x + 1:]:
            if calls[j] == calls[i] and not (after[j] >> i) & 1 and reads_i & set(bindings[j].value.args) \
                    and _outputs_of(mod[bindings[i].value.op]) is not None \
                    and _outputs_of(mod[bindings[j].value.op]) is not None:
                return i, j
    return None


def _outputs_of(func) -> Optional[list]:
    """The result expressions of a Codegen function: its body's value, or each field of a tuple it returns;
    None for a result that is neither (a tuple variable, a nested tuple)."""
    from tvm import relax

    result = func.body.body
    if isinstance(result, relax.Tuple):
        fields = list(result.fields)
        return fields if all(not isinstance(f.ty, relax.TupleType) for f in fields) else None
    return None if isinstance(result.ty, relax.TupleType) else [result]


def _merged_bindings(mod, bindings, i: int, j: int):
    """``bindings`` with calls ``i`` and ``j`` replaced by one call of a merged function, and that function.

    Returns ``(bindings, gvar_i, gvar_j, merged function, its GlobalVar)``."""
    import tvm
    from tvm import relax
    from tvm.relax.expr import _update_type

    call_a, call_b = bindings[i].value, bindings[j].value
    func_a, func_b = mod[call_a.op], mod[call_b.op]
    # A value both read becomes one parameter: func_b's is bound to func_a's.
    shared = {}
    for param_b, arg_b in zip(func_b.params, call_b.args):
        for param_a, arg_a in zip(func_a.params, call_a.args):
            if arg_a.same_as(arg_b):
                shared[param_b] = param_a
                break
    func_b = func_b.bind_params(shared) if shared else func_b
    args = list(call_a.args) + [a for p, a in zip(mod[call_b.op].params, call_b.args) if p not in shared]
    outs_a, outs_b = _outputs_of(func_a), _outputs_of(func_b)
    result = relax.Tuple(outs_a + outs_b)
    merged = relax.Function(list(func_a.params) + list(func_b.params),
                            relax.SeqExpr(list(func_a.body.blocks) + list(func_b.body.blocks), result),
                            result.ty, func_a.is_pure, func_a.attrs)
    gvar = tvm.ir.GlobalVar(call_a.op.name_hint)
    _update_type(gvar, merged.ty)
    merged = merged.with_attr("global_symbol", gvar.name_hint) if "global_symbol" in (func_a.attrs or {}) else merged

    joined = relax.DataflowVar(f"{bindings[i].var.name}_siblings", result.ty)
    rebound = [relax.VarBinding(joined, relax.Call(gvar, args, ret_ty=result.ty))]
    for var, outs, offset in ((bindings[i].var, outs_a, 0), (bindings[j].var, outs_b, len(outs_a))):
        parts = [relax.TupleGetItem(joined, offset + k) for k in range(len(outs))]
        rebound.append(relax.VarBinding(var, relax.Tuple(parts) if isinstance(var.ty, relax.TupleType)
                                        else parts[0]))
    # Bindings between the two calls that read the first one's result (directly or not) move after the merge.
    moved, kept, readers_of_a = [], [], {bindings[i].var}
    for b in bindings[i + 1:j]:
        if any(v in readers_of_a for v in relax.analysis.free_vars(b.value)):
            readers_of_a.add(b.var)
            moved.append(b)
        else:
            kept.append(b)
    return (bindings[:i] + kept + rebound + moved + bindings[j + 1:], call_a.op, call_b.op, merged, gvar)

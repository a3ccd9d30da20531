"""Vendor regions from composite calls: TVM's ``MergeCompositeFunctions``, then :func:`merge_siblings`.

TVM 0.27 passes a symbolic scalar argument (the ``n`` of ``R.arange(0, n, 1)``,
as transformers' position ids and masks import) as the TIR variable itself,
and ``MergeCompositeFunctions`` looks every call argument up among the
bindings it has seen: a bare TIR variable is none of them, and the pass fails
("Could not find memo-ized group"). A compound expression is a leaf it
accepts, so such an argument (or a tuple field, as strided_slice's bounds)
is written ``n + 0`` first: the same value.
"""

from __future__ import annotations

from byoc.pipeline.siblings import merge_siblings


def merge_regions(mod):
    """``mod`` (after FuseOpsByPattern) with each vendor's composite calls grouped into Codegen functions."""
    from tvm.relax.transform import MergeCompositeFunctions

    return merge_siblings(MergeCompositeFunctions()(_scalar_vars_as_expressions(mod)))


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

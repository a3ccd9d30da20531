"""Partitions specialized for the sizes a build names, and the choice among them by shape.

A static-shape vendor (``Vendor(static_shapes=True)``) compiles each of its partitions once per size of its
symbolic dims that the build names (:attr:`Partition.specializations
<byoc.pipeline.partitioning.partitioner.Partition.specializations>`). This module makes the program call them:

* :func:`dispatched` (the artifact): each call of such a partition becomes a call of a dispatcher, which compares
  the partition's symbolic dims with each specialization's sizes (``relax.If``) and calls the one they equal,
  or the partition as host code at any other size. A specialization is never called at other sizes: its
  arguments are cast to its static shapes inside the branch that compared them.
* :func:`at_sizes` (the standalone program, whose sizes are known when it is made): the call of the one
  specialization of those sizes, or of the host code.

The vendor's codegen compiles each specialization as a partition of its own (:func:`specialized_function`,
symbol :attr:`~byoc.pipeline.partitioning.specializations.Specialization.symbol`); the symbolic partition itself never reaches it.
"""

from __future__ import annotations

from typing import Mapping

from byoc.pipeline.partitioning.specializations import host_function, matches, specialized_function


def _dispatcher(func, branches: list, host) -> object:
    """A function with ``func``'s signature that calls the specialization of each of ``branches`` (``(sizes,
    (GlobalVar, function))``) where its symbolic dims equal ``sizes`` (name -> size), else ``host`` (a
    GlobalVar). A specialization's arguments are cast to its static types inside the branch that compared them,
    and its result back to ``func``'s type: the If's branches must agree."""
    from tvm import relax, tirx

    fresh = relax.utils.copy_with_new_vars(func)
    params = list(fresh.params)
    dim_vars = {var.name: var for var in relax.analysis.defined_symbolic_vars(fresh)}
    ret_ty = fresh.ret_ty

    def call_of(gvar, args, gvar_ret_ty):
        result = relax.Var("result", gvar_ret_ty)
        bindings = [relax.VarBinding(result, relax.Call(gvar, args))]
        if gvar_ret_ty is not ret_ty:
            out = relax.Var("out", ret_ty)
            bindings.append(relax.MatchCast(out, result, ret_ty))
            result = out
        return relax.SeqExpr([relax.BindingBlock(bindings)], result)

    body = call_of(host, params, ret_ty)
    for sizes, (gvar, spec_func) in reversed(branches):
        cast_args, bindings = [], []
        for param, spec_param in zip(params, spec_func.params):
            var = relax.Var(param.name, spec_param.ty)
            bindings.append(relax.MatchCast(var, param, spec_param.ty))
            cast_args.append(var)
        branch = call_of(gvar, cast_args, spec_func.ret_ty)
        branch = relax.SeqExpr([relax.BindingBlock(bindings + list(branch.blocks[0].bindings))], branch.body)
        cond = tirx.all(*[dim_vars[name] == size for name, size in sizes.items()])
        result = relax.Var("dispatched", ret_ty)
        body = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(
            result, relax.If(relax.prim_value(cond), branch, body))])], result)
    return relax.BlockBuilder().normalize(relax.Function(params, body, ret_ty, is_pure=True))


def dispatched(mod, partitions: list):
    """``mod`` with each of ``partitions`` that has specializations called through a dispatcher by shape: the
    dispatcher takes the partition's GlobalVar, so its callers are unchanged; each specialization is a
    partition function of its own (exported as its symbol), and the partition itself host code
    (``<partition>_host``), called at every other size."""
    import tvm

    functions = dict(mod.functions_items())
    for part in partitions:
        kept = [s for s in part.specializations if not s.refused]
        if not kept:
            continue
        func = functions[part.global_var]
        branches = []
        for spec in kept:
            branches.append((spec.sizes, _global(spec.symbol, specialized_function(func, spec.sizes, spec.symbol))))
        host = _global(f"{part.name}_host", host_function(func, f"{part.name}_host"))
        functions.update(dict([host, *(branch for _, branch in branches)]))
        # public: RunCodegen rewrites the calls of partitions in public functions only
        functions[part.global_var] = _dispatcher(func, branches, host[0]).with_attr("global_symbol", part.name)
    return tvm.IRModule(functions, attrs=mod.attrs)


def _global(name: str, func) -> tuple:
    """(GlobalVar ``name`` typed as ``func``, ``func``)."""
    import tvm
    from tvm.relax.expr import _update_type

    gvar = tvm.ir.GlobalVar(name)
    _update_type(gvar, func.ty)
    return gvar, func


def at_sizes(mod, partitions: list, sizes: Mapping[str, int]):
    """``mod`` with each of ``partitions`` that has specializations replaced, under its GlobalVar, by the
    specialization of ``sizes`` (each dim a specialization names at its size there), or by host code, inlined
    into its caller (a standalone program calls no Relax function), when none is of those sizes."""
    import tvm
    from tvm import relax

    functions = dict(mod.functions_items())
    inline = False
    for part in partitions:
        if not part.specializations:
            continue
        func = functions[part.global_var]
        kept = [s for s in part.specializations if not s.refused]
        spec = next((s for s in kept if matches(s.sizes, sizes)), None)
        if spec is not None:
            functions[part.global_var] = specialized_function(func, spec.sizes, spec.symbol)
        else:
            functions[part.global_var] = host_function(func, part.name).without_attr("global_symbol")
            inline = True
    module = tvm.IRModule(functions, attrs=mod.attrs)
    return relax.transform.InlinePrivateFunctions()(module) if inline else module

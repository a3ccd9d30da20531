"""Shape arguments of composite functions, written into their bodies.

FuseOpsByPattern makes every non-constant argument of a matched op a
parameter of the composite function, and a ``relax.reshape`` to a symbolic
shape (``R.shape([batch, seq * 16])``) is not constant: the shape becomes a
parameter, then an argument of the partition, which a vendor runtime is
called with next to its tensors. Yet the composite already knows that shape:
its tensor parameters define ``batch`` and ``seq``. :func:`inline_shape_arguments`
writes such shapes into the body and drops the parameter, so a partition's
arguments stay tensors and each runtime computes the shape from the sizes it
binds per call.

It runs twice: on the composites (after FuseOpsByPattern), and on the merged
partitions (after MergeCompositeFunctions), which TVM gives one shape
parameter per composite that took one: a ResNet with a symbolic height and
width had 66 copies of ``R.shape([width, height])``, each made and passed on
every call, though its input defines both dims. A shape parameter equal to an
earlier one is folded into it.
"""

from __future__ import annotations


def _defined_vars(params) -> set[str]:
    """The symbolic dims a function's tensor parameters define: those that are a whole dim of one."""
    from tvm import relax

    names = set()
    for param in params:
        ty = param.ty
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            names.update(str(d.name) for d in ty.shape.values if type(d).__name__ == "Var")
    return names


def _inlinable(param, defined: set[str]) -> bool:
    from tvm import relax

    from byoc.vendor.values import dim_names

    ty = param.ty
    return (isinstance(ty, relax.ShapeType) and ty.values is not None
            and set(dim_names(relax.ShapeExpr(ty.values))) <= defined)


def _replaced_shapes(params) -> dict:
    """Parameter index -> what replaces it: the shape itself where tensor parameters define its dims, else an
    earlier shape parameter of the same dims."""
    from tvm import relax

    defined = _defined_vars(params)
    replaced, first = {}, {}
    for i, param in enumerate(params):
        if _inlinable(param, defined):
            replaced[i] = relax.ShapeExpr(param.ty.values)
        elif isinstance(param.ty, relax.ShapeType) and param.ty.values is not None:
            key = tuple(str(v) for v in param.ty.values)
            if key in first:
                replaced[i] = first[key]
            else:
                first[key] = param
    return replaced


def inline_shape_arguments(mod, kind: str = "Composite"):
    """``mod`` whose functions of ``kind`` (the attribute ``Composite`` or ``Codegen``) take no shape parameter
    their tensor parameters determine, nor one equal to an earlier one."""
    import tvm
    from tvm import relax
    from tvm.relax.expr import _update_type
    from tvm.relax.expr_functor import PyExprMutator, mutator

    dropped: dict = {}  # composite GlobalVar -> (its replacement, the parameters it no longer takes)
    functions = {}
    for gv, func in mod.functions_items():
        shapes = {}
        if isinstance(func, relax.Function) and func.attrs is not None and kind in func.attrs:
            shapes = _replaced_shapes(func.params)
        if not shapes:
            functions[gv] = func
            continue
        bound = func.bind_params({func.params[i]: value for i, value in shapes.items()})
        new_gv = relax.GlobalVar(gv.name_hint)
        _update_type(new_gv, bound.ty)  # a GlobalVar keeps the type it was made with: its callers are typed by it
        functions[new_gv] = bound
        dropped[gv] = (new_gv, set(shapes))
    if not dropped:
        return mod

    @mutator
    class _DropArguments(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            replaced = dropped.get(call.op) if isinstance(call.op, relax.GlobalVar) else None
            if replaced is None:
                return call
            new_gv, indices = replaced
            args = [a for i, a in enumerate(call.args) if i not in indices]
            return relax.Call(new_gv, args, call.attrs, call.ty_args, call.span)

    for gv, func in list(functions.items()):
        if isinstance(func, relax.Function) and (func.attrs is None or not any(k in func.attrs
                                                                                for k in ("Composite", "Codegen"))):
            functions[gv] = _DropArguments().visit_expr(func)
    return tvm.IRModule(functions, attrs=mod.attrs)

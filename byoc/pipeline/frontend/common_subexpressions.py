"""One binding per index computation over symbolic dims (int64, int32, boolean) in an imported ``main``: a pure
op call on the same arguments as an earlier one is that earlier binding. Importers write the same glue once per
layer: a decoder's attention masks and positions from the same symbolic dims (onnxruntime-genai's
GroupQueryAttention, rewritten per layer; optimum's exports slice the same mask in every layer), which ran on the
host once per layer, dozens of tiny kernels a token. The same holds for a float result made only of such glue and
constants: a rotary table gathered at the positions, a boolean mask cast to float (GroupQueryAttention's, once per
layer). (TVM 0.27's EliminateCommonSubexpr merged none of them.)"""

from __future__ import annotations

__all__ = ["merged_common_subexpressions"]


def merged_common_subexpressions(func):
    """``func`` with each pure op call of an index result (:func:`_glue`) that repeats an earlier binding's value
    (structurally, after the merges before it) replaced by that binding; and the merged vars, each mapped to the
    var it became."""
    import tvm
    import tvm_ffi
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class _Merge(PyExprMutator):
        def __init__(self):
            super().__init__()
            self.seen: dict[int, list] = {}
            self.merged: dict = {}
            self.glue: set = set()  # the vars of index results and of what is made of them and constants only

        def visit_var_binding_(self, binding):
            value = self.visit_expr(binding.value)
            if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and _pure(value.op) \
                    and (_glue(binding.var, value) or _of_glue_only(value, self.glue)):
                self.glue.add(binding.var)
                key = tvm_ffi.structural_hash(value)
                for earlier, var in self.seen.get(key, []):
                    if tvm_ffi.structural_equal(value, earlier):
                        self.set_var_remap(binding.var, var)
                        self.merged[binding.var] = var
                        return
                self.seen.setdefault(key, []).append((value, binding.var))
            self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    merge = _Merge()
    result = merge.visit_expr(func)
    return result, merge.merged


def _glue(var, value) -> bool:
    """An index computation over symbolic dims: an int64, int32 or boolean result (positions, masks, gather
    indices) whose shape or arguments hold a symbolic dim. Float, 8-bit and static computations are left as
    written: the preparation copies some on purpose (a quantized activation per int8 unit reading it, each
    unit's own DQ and zero point), and vendors match units on those copies."""
    import tvm_ffi
    from tvm import relax, tirx

    ty = var.ty
    if not isinstance(ty, relax.TensorType) or str(ty.dtype) not in ("int64", "int32", "bool") or ty.shape is None:
        return False
    found: list = []  # a symbolic dim in the result's shape or an argument's (a ShapeExpr, a prim value)
    tvm_ffi.structural_walk([ty.shape, *value.args], [(tirx.Var, found.append)])
    return bool(found)


def _of_glue_only(value, glue: set) -> bool:
    """Whether the call ``value`` reads glue (``glue``: vars of index results and what is made of them) and
    nothing else but constants and immediates: no activation, so merging two such calls merges no unit's copy."""
    from tvm.ir import expr

    leaves: list = []
    stack = list(value.args)
    while stack:
        arg = stack.pop()
        if isinstance(arg, expr.Tuple):
            stack.extend(arg.fields)
        elif isinstance(arg, (expr.Var, expr.Constant)):  # shapes and immediates (ShapeExpr, PrimValue) are no data
            leaves.append(arg)
    return any(arg in glue for arg in leaves) and all(isinstance(arg, expr.Constant) or arg in glue for arg in leaves)


def _pure(op) -> bool:
    try:
        return bool(op.get_attr("FPurity"))
    except Exception:  # noqa: BLE001 - an op without the attribute is taken to have effects
        return False

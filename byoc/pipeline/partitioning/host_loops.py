"""The Loops the host runs (:mod:`byoc.pipeline.frontend.loop_bodies`), put together after partitioning.

Each body was cut for the vendors as a model of its own, into a plan whose bindings and partitions are named in
the loop's scope (``loop0/...``, ``dnnl_loop0_0``). :func:`with_host_loops` adds the body plan to the model's plan:
the body's ``main`` becomes the function ``<loop>_body``, its partitions join the plan's (the builder compiles
them with the others) and its decisions the plan's (the report lists its host ops). After the vendors' modules
are in (TVM's ``RunCodegen``, which follows every call into its callee and would recurse without end),
:func:`run_host_loops` adds the functions that run each loop and defines the placeholder ``<loop>`` that ``main``
(or an enclosing body) calls: it runs ``<loop>_step`` (the body, its outputs cast to the carried types) while the
condition holds and the count is not reached, stacking each iteration's scan outputs.

Relax has no loop; recursion is the loop, as in TVM's TFLite WHILE lowering. The VM recurses on the C stack (a
chain of about 2,500 calls overflows it), so the iterations are nested :data:`LEVELS` deep: the function of level
0 runs at most :data:`FANOUT` iterations, each level above calls the one below at most :data:`FANOUT` times, and
the top level as often as needed. A run of ``n`` iterations is then at most ``3 * FANOUT + n / FANOUT**3`` calls
deep. Scan outputs grow by a Concat per iteration, a copy of what has been stacked.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from byoc.errors import ByocError
from byoc.pipeline.frontend.loop_bodies import PLACEHOLDER, element_type

__all__ = ["FANOUT", "LEVELS", "run_host_loops", "with_host_loops"]

#: calls of the level below that one call chain of a level makes at most
FANOUT = 64
#: levels of nesting: the top one unbounded
LEVELS = 4
_UNBOUNDED = np.iinfo(np.int64).max


def with_host_loops(plan, bodies: Mapping) -> None:
    """Put each host loop's body plan (``bodies``: :class:`~byoc.pipeline.frontend.onnx_model.HostLoop` -> its
    :class:`PartitionPlan`) into ``plan``, in place: its functions (the body's ``main`` as ``<loop>_body``), its
    partitions, decisions and fallbacks. ``main`` keeps the loop's placeholder until :func:`run_host_loops`."""
    import tvm
    from tvm.relax.expr import _update_type

    functions = dict(plan.mod.functions_items())
    names = {gvar.name_hint for gvar in functions}
    for loop, body_plan in bodies.items():
        for gvar, func in body_plan.mod.functions_items():  # its partitions, under the GlobalVars its main calls
            name = f"{loop.spec.symbol}_body" if gvar.name_hint == "main" else gvar.name_hint
            if name in names:
                raise ByocError(f"internal error: the body of Loop {loop.node!r} defines {name!r} again")
            if gvar.name_hint == "main":
                gvar = tvm.ir.GlobalVar(name)
                _update_type(gvar, func.ty)
                func = func.with_attr("global_symbol", name)  # RunCodegen lowers calls in public functions only
            functions[gvar] = func
            names.add(name)
        plan.partitions.extend(body_plan.partitions)
        plan.decisions.update(body_plan.decisions)
        plan.fallbacks.extend(body_plan.fallbacks)
        plan.loops[loop.node] = body_plan
    plan.mod = tvm.IRModule(functions, attrs=plan.mod.attrs)


def run_host_loops(mod, loops: list):
    """``mod`` (a plan's module after ``RunCodegen``) with the functions that run ``loops`` (the model's
    :class:`~byoc.pipeline.frontend.onnx_model.HostLoop` list, and the loops in their bodies), each loop's
    placeholder function defined as its entry. Added after ``RunCodegen``, which follows every call into its
    callee and would recurse without end."""
    from tvm import relax

    everything = []
    pending = list(loops)
    while pending:  # loops inside bodies too
        loop = pending.pop()
        everything.append(loop)
        pending.extend(loop.body.loops)
    if not everything:
        return mod
    bb = relax.BlockBuilder(mod)
    for loop in everything:  # the placeholder's GlobalVar, which main (or a body) calls, gets its definition
        _loop_functions(bb, loop, mod.get_global_var(f"{loop.spec.symbol}_body"), mod.get_global_var(loop.spec.symbol))
    return bb.get()


def _loop_functions(bb, loop, body_gv, entry_gv) -> None:
    """Add the functions that run ``loop`` to ``bb``'s module, and define its entry ``entry_gv`` (the placeholder):
    ``(trip?, cond, carried..., captured...) -> (carried..., scan outputs...)``."""
    from tvm import relax, tirx
    from tvm.relax.utils import copy_with_new_vars

    body = bb.get()[body_gv]
    params = list(body.params)
    carried = [p.ty for p in params[2:2 + loop.spec.carried]]
    captured = [p.ty for p in params[2 + loop.spec.carried:]]
    scan_types = [element_type(loop.spec, body, j) for j in range(loop.spec.scans)]
    scalar, flag = relax.TensorType((), "int64"), relax.TensorType((), "bool")

    def fresh(name: str, types: list) -> list:
        return [relax.Var(f"{name}{k}", ty) for k, ty in enumerate(types)]

    def add(name: str, func_params: list, build, ret_type=None) -> object:
        """Add function ``name``, its body made by ``build(builder, its GlobalVar)``. With ``ret_type`` the function
        is declared first, so that its body may call it, and returns that type: a level's state, whose stacked
        outputs grow (a type inferred from one branch would say they keep their length)."""
        gvar = None
        if ret_type is not None:
            declared = relax.op.call_pure_packed(PLACEHOLDER, *func_params, ty_args=[ret_type])
            gvar = bb.add_func(relax.Function(func_params, declared, ret_type), name)
        fb = relax.BlockBuilder()
        with fb.function(name, func_params, private=True):
            fb.emit_func_output(build(fb, gvar))
        func = fb.get()[name]
        if ret_type is not None:
            func = relax.Function(func.params, func.body, ret_type, func.is_pure, func.attrs)
        func = copy_with_new_vars(func)
        if gvar is None:
            return bb.add_func(func, name)
        bb.update_func(gvar, func)
        return gvar

    # one iteration: the body, its outputs cast to the types the loop carries (a cast the run checks where the
    # body's own types say less, a Slice at run-time positions)
    step_params = [relax.Var("i", scalar), relax.Var("cond", flag), *fresh("carried", carried),
                   *fresh("captured", captured)]

    def step(fb, _):
        outs = fb.emit(relax.Call(body_gv, step_params))
        cond = fb.emit(relax.TupleGetItem(outs, 0))
        if cond.ty.ndim != 0:
            cond = fb.emit(relax.op.reshape(cond, ()))
        values = [fb.match_cast(relax.TupleGetItem(outs, 1 + k), ty) for k, ty in enumerate(carried + scan_types)]
        return relax.Tuple([cond, *values])

    step_gv = add(f"{loop.spec.symbol}_step", step_params, step)

    def state_params() -> list:
        """A level's parameters: budget, i, trip?, cond, carried..., captured..., stacked scan outputs..."""
        stacked = [relax.TensorType([tirx.Var(f"stacked{j}", "int64"), *ty.shape.values], ty.dtype)
                   for j, ty in enumerate(scan_types)]
        return ([relax.Var("budget", scalar), relax.Var("i", scalar)]
                + ([relax.Var("trip", scalar)] if loop.spec.has_trip else []) + [relax.Var("cond", flag)]
                + fresh("carried", carried) + fresh("captured", captured) + fresh("stacked", stacked))

    def split(values: list) -> dict:
        at = 3 if loop.spec.has_trip else 2
        n, m = len(carried), len(captured)
        return {"budget": values[0], "i": values[1], "trip": values[2] if loop.spec.has_trip else None,
                "cond": values[at], "carried": values[at + 1:at + 1 + n], "captured": values[at + 1 + n:at + 1 + n + m],
                "stacked": values[at + 1 + n + m:]}

    def args(budget, i, trip, cond, carried_values, captured_values, stacked) -> list:
        return [budget, i, *([trip] if loop.spec.has_trip else []), cond, *carried_values, *captured_values, *stacked]

    # the state a level returns: i, cond, carried..., stacked scan outputs (their length known only at run time)
    state_type = relax.TupleType([scalar, flag, *carried,
                                  *[relax.TensorType(dtype=ty.dtype, ndim=ty.ndim + 1) for ty in scan_types]])
    one = relax.const(1, "int64")
    below = None
    for level in range(LEVELS):
        p = state_params()
        s = split(p)

        def level_body(fb, gvar, s=s, below=below):
            go = fb.emit(relax.op.logical_and(s["cond"], relax.op.greater(s["budget"], relax.const(0, "int64"))))
            if loop.spec.has_trip:
                go = fb.emit(relax.op.logical_and(go, relax.op.less(s["i"], s["trip"])))
            left = relax.op.subtract(s["budget"], one)
            if below is None:  # level 0: one iteration, then the next
                outs = relax.Call(step_gv, [s["i"], s["cond"], *s["carried"], *s["captured"]])
                stacked = [relax.op.concat([acc, relax.op.expand_dims(
                    relax.TupleGetItem(outs, 1 + loop.spec.carried + j), [0])], axis=0) for j, acc in enumerate(s["stacked"])]
                then = relax.Call(gvar, args(left, relax.op.add(s["i"], one), s["trip"], relax.TupleGetItem(outs, 0),
                                             [relax.TupleGetItem(outs, 1 + k) for k in range(loop.spec.carried)],
                                             s["captured"], stacked))
            else:  # FANOUT iterations of the level below, then the next FANOUT
                state = relax.Call(below, args(relax.const(FANOUT, "int64"), s["i"], s["trip"], s["cond"],
                                               s["carried"], s["captured"], s["stacked"]))
                then = relax.Call(gvar, args(left, relax.TupleGetItem(state, 0), s["trip"],
                                             relax.TupleGetItem(state, 1),
                                             [relax.TupleGetItem(state, 2 + k) for k in range(loop.spec.carried)],
                                             s["captured"], [relax.TupleGetItem(state, 2 + loop.spec.carried + j)
                                                             for j in range(len(scan_types))]))
            done = relax.Tuple([s["i"], s["cond"], *s["carried"], *s["stacked"]])
            return fb.emit(relax.If(go, then, done))

        below = add(f"{loop.spec.symbol}_level{level}", p, level_body, state_type)

    entry_params = ([relax.Var("trip", scalar)] if loop.spec.has_trip else []) + [relax.Var("cond", flag)] \
        + fresh("carried", carried) + fresh("captured", captured)

    def entry(fb, _):
        trip = entry_params[0] if loop.spec.has_trip else None
        rest = entry_params[1:] if loop.spec.has_trip else entry_params
        empty = [relax.op.zeros(relax.ShapeExpr([0, *ty.shape.values]), str(ty.dtype)) for ty in scan_types]
        state = fb.emit(relax.Call(below, args(relax.const(_UNBOUNDED, "int64"), relax.const(0, "int64"), trip,
                                               rest[0], rest[1:1 + loop.spec.carried], rest[1 + loop.spec.carried:], empty)))
        return relax.Tuple([fb.emit(relax.TupleGetItem(state, 2 + k))
                            for k in range(loop.spec.carried + len(scan_types))])

    fb = relax.BlockBuilder()
    with fb.function(loop.spec.symbol, entry_params, private=True):
        fb.emit_func_output(entry(fb, None))
    bb.update_func(entry_gv, copy_with_new_vars(fb.get()[loop.spec.symbol]))

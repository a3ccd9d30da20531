"""What a run may share with its caller: inputs handed to the program without a copy, outputs returned without one.

A run used to copy every input (into a buffer aligned as TVM's compiled functions assume) and every output (out of
the program's tensor). On a one-op model those copies cost more than the op (a softmax over 786 KB: 0.04 ms in,
0.03 ms out, and about as much again in page faults of the fresh buffers, around a 0.07 ms kernel). Neither copy is
needed where the program keeps to two rules, which this module reads off the lowered ``main`` at build time:

* An input is read by nothing that assumes more alignment than the caller's array has. TVM's compiled host
  functions assume 64 bytes of every tensor they are given (:data:`HOST_ALIGNMENT`, unchecked: an AVX load of a
  misaligned address faults); a vendor's runtime needs what its codegen declares
  (:attr:`byoc.vendor.Codegen.input_alignment`). The run copies an input only when its address is not a multiple
  of what its readers need.
* An output is a tensor the program made in this call (an op's result, or a view of one) and no other output
  shares it. A constant of the program, an input, or one tensor returned twice is copied, so the caller can never
  change the program, their own input, or one output through another. Nothing writes into an input: byoc runs no
  in-place pass, and a vendor runtime writes only the outputs it is given.

Older artifacts carry no record (:func:`byoc.host.recorded.read_json` gives None) and keep the copies.
"""

from __future__ import annotations

import json
from typing import Mapping

from byoc.host.recorded import text_function

#: the Relax function of a built program that holds this module's record (JSON)
RUN_IO_FUNCTION = "byoc_run_io"

#: the data alignment TVM's compiled functions assume of every tensor they are given (it is not checked)
HOST_ALIGNMENT = 64

# Relax ops whose result is a view of their first argument's memory at run time (VMBuiltinLower makes
# relax.reshape the builtin reshape; match_cast and plain var bindings are views too, handled apart).
_VIEW_OPS = ("relax.reshape", "relax.memory.view")
# Ops whose result the program allocates in the call (destination-passing calls: host functions, vendors).
_MAKING_OPS = ("relax.call_tir", "relax.call_dps_packed")


def run_io(main, extern_alignment: Mapping[str, int]) -> dict:
    """The record for the lowered Relax ``main``: ``{"input_alignment": [bytes per parameter], "fresh_outputs":
    [bool per output, in the order the run flattens them]}``.

    ``extern_alignment``: what each vendor function (a ``call_dps_packed`` symbol) needs of its inputs; a symbol
    not in it needs :data:`HOST_ALIGNMENT`, as does every other reader of an input.
    """
    import tvm
    from tvm import relax

    origin: dict = {}  # var -> the tensor it is at run time: a var, or (var, index) for a field of a call's tuple
    tuples: dict = {}  # var -> the relax.Tuple bound to it
    made = set()  # vars whose value the program allocates in the call
    need = {p: 1 for p in main.params}

    def root(var):
        return origin.get(var, var)

    def base(tensor):
        return tensor[0] if isinstance(tensor, tuple) else tensor

    def read(var, alignment):
        if var in tuples:
            return read_all(tuples[var], alignment)
        param = base(root(var))
        if param in need:
            need[param] = max(need[param], alignment)

    def read_all(expr, alignment=HOST_ALIGNMENT):
        relax.analysis.post_order_visit(expr, lambda e: read(e, alignment) if isinstance(e, relax.Var) else None)

    for block in main.body.blocks:
        for binding in block.bindings:
            var, value = binding.var, binding.value
            if isinstance(value, relax.Var):  # a plain binding or a match_cast: the same tensor
                origin[var] = root(value)
                continue
            if isinstance(value, relax.TupleGetItem) and isinstance(value.tuple_value, relax.Var):
                inner = value.tuple_value
                if inner in tuples:
                    field = tuples[inner].fields[value.index]
                    origin[var] = root(field) if isinstance(field, relax.Var) else field
                else:  # an output of a multi-output call: made if the call was
                    origin[var] = (root(inner), value.index)
                continue
            if isinstance(value, relax.Tuple):
                tuples[var] = value  # what reads its fields reads the tensors themselves
            op = value.op.name if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) else None
            if op in _VIEW_OPS and isinstance(value.args[0], relax.Var):
                origin[var] = root(value.args[0])
                read_all(relax.Tuple(value.args[1:]))
                continue
            if op == "relax.call_dps_packed" and isinstance(value.args[0], relax.ExternFunc):
                read_all(value.args[1], extern_alignment.get(str(value.args[0].global_symbol), HOST_ALIGNMENT))
            elif not isinstance(value, relax.Tuple):
                read_all(value)
            if op in _MAKING_OPS:
                made.add(var)

    leaves = _leaves(main.body.body, tuples)
    roots = [root(leaf) if isinstance(leaf, relax.Var) else None for leaf in leaves]
    fresh = [r is not None and base(r) in made and roots.count(r) == 1 for r in roots]
    return {"input_alignment": [need[p] for p in main.params], "fresh_outputs": fresh}


def _leaves(expr, tuples: dict) -> list:
    """The tensors a Relax return value holds, in the order :func:`byoc.pipeline.artifact.artifact.vm_outputs` flattens
    the VM's result (nested tuples, depth first); ``tuples``: the vars bound to tuples."""
    from tvm import relax

    expr = tuples.get(expr, expr)
    if isinstance(expr, relax.Tuple):
        return [leaf for field in expr.fields for leaf in _leaves(field, tuples)]
    return [expr]


def RecordRunIO(extern_alignment: Mapping[str, int]):  # noqa: N802 - a pass, named like TVM's
    """A pass that adds :data:`RUN_IO_FUNCTION` (the record of :func:`run_io`) to a module whose ``main`` is
    legalized, for the run to read back. It analyzes ``main`` as ``RewriteDataflowReshape`` will leave it (a
    reshape kernel becomes a view there), and changes nothing else."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name="ByocRecordRunIO")
    def record(mod, _ctx):
        main = relax.transform.RewriteDataflowReshape()(mod)["main"]
        mod = mod.clone()
        mod[RUN_IO_FUNCTION] = text_function(RUN_IO_FUNCTION, json.dumps(run_io(main, extern_alignment)))
        return mod

    return record

"""TVM's ONNX importer, extended to remember which ONNX node made which binding.

TVM's converters return expressions that are bound either at once or later,
when the next node's expression is normalized. So provenance is found after
the import, by identity: the value (or var) a converter returned belongs to
its node, and helper bindings a converter emitted on the way belong to the
node that consumes them.
"""

from __future__ import annotations

import math

import numpy as np
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

from byoc.vendor.values import const_array, is_tensor_const
from byoc.pipeline.onnx_model import OnnxNode


class ProvenanceImporter(ONNXGraphImporter):
    """ONNXGraphImporter that records the ONNX node of each converted expression."""

    def __init__(self, shape_dict, dtype_dict):
        # An input with an empty (zero) extent is left to TVM's own reading of the model,
        # which makes that extent symbolic: TVM's converters and passes break on a static
        # 0 (Trilu, reshape and broadcast_to treat it as "copy this dimension").
        shape_dict = {name: shape for name, shape in shape_dict.items() if 0 not in list(shape)}
        super().__init__(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True)
        self._owner: dict[object, OnnxNode] = {}
        self.current_node: OnnxNode | None = None

    def _convert_operator(self, op_name, inputs, attrs, opset):
        node = OnnxNode(attrs["tvm_custom"]["name"], op_name)
        self.current_node = node
        if op_name == "Clip":
            sym = self._convert_clip(inputs, attrs, opset)
        else:
            sym = None
        if sym is None:
            sym = super()._convert_operator(op_name, inputs, attrs, opset)
        self._owner[sym] = node
        if isinstance(sym, relax.Tuple):
            for item in sym.fields:
                self._owner.setdefault(item, node)
        return sym

    def _convert_clip(self, inputs, attrs, opset):
        """Clip with constant bounds as ``relax.clip`` (TVM emits opaque call_tir).

        Returns None when a bound is not a constant, to fall back to TVM.
        """
        if opset < 11:
            low, high = attrs.get("min", -math.inf), attrs.get("max", math.inf)
        else:
            bounds = []
            for index, default in ((1, -math.inf), (2, math.inf)):
                bound = inputs[index] if len(inputs) > index else None
                if bound is None:
                    bounds.append(default)
                elif is_tensor_const(bound) and const_array(bound).size == 1:
                    value = float(const_array(bound).reshape(()))
                    bounds.append(default if np.isnan(value) else value)  # ONNX: NaN = unbounded
                else:
                    return None
            low, high = bounds
        x = inputs[0]
        if not isinstance(x.ty, relax.TensorType) or not str(x.ty.dtype).startswith("float"):
            return None
        return self.bb.normalize(relax.op.clip(x, relax.prim_value(float(low)), relax.prim_value(float(high))))

    def results(self, main: relax.Function) -> dict[relax.Var, OnnxNode]:
        """The binding vars of ``main`` that are a converter's result, with their ONNX node."""
        owner: dict[relax.Var, OnnxNode] = {}
        for binding in (b for block in main.body.blocks for b in block.bindings):
            node = self._owner.get(binding.value) or self._owner.get(binding.var)
            if node is not None:
                owner[binding.var] = node
        return owner

    def binding_provenance(self, main: relax.Function) -> dict[relax.Var, OnnxNode]:
        """Map each binding var in ``main`` to the ONNX node that produced it."""
        bindings = [b for block in main.body.blocks for b in block.bindings]
        owner = self.results(main)
        direct = set(owner)
        bound = {b.var for b in bindings}
        # A helper binding belongs to its earliest consumer. Walking backwards,
        # every consumer is final before its producers are reached, and the
        # earliest consumer writes last.
        for binding in reversed(bindings):
            node = owner.get(binding.var)
            if node is None:
                continue
            for var in relax.analysis.free_vars(binding.value):
                if var in bound and var not in direct:
                    owner[var] = node
        return owner


@mutator
class _Renamer(PyExprMutator):
    def __init__(self, names: dict):
        super().__init__()
        self.names = names

    def visit_var_def_(self, var):
        new = self.names.get(var)
        if new is None:
            return var
        kind = relax.DataflowVar if isinstance(var, relax.DataflowVar) else relax.Var
        return kind(new, var.ty)

    def visit_dataflow_var_def_(self, var):
        return self.visit_var_def_(var)


def unique_binding_names(main: relax.Function) -> tuple[relax.Function, dict]:
    """``main`` with every binding var uniquely named, and the map old var -> new var.

    TVM's converters sometimes emit two bindings with the same name (``lv``);
    byoc keys decisions and reports by binding name, so they must be unique.
    """
    seen: set[str] = {p.name for p in main.params}
    names: dict = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            name = binding.var.name
            if name in seen:
                k = 1
                while f"{name}_{k}" in seen:
                    k += 1
                name = names[binding.var] = f"{name}_{k}"
            seen.add(name)
    if not names:
        return main, {}
    renamer = _Renamer(names)
    new = renamer.visit_expr(main)
    old_vars = [b.var for block in main.body.blocks for b in block.bindings]
    new_vars = [b.var for block in new.body.blocks for b in block.bindings]
    return new, dict(zip(old_vars, new_vars))


def bind_trailing_params(mod, values: list):
    """``mod`` whose ``main`` has its last ``len(values)`` parameters bound to ``values`` (numpy) as constants.

    The bound parameters leave ``main``'s signature and its ``num_input``.
    """
    import tvm

    main = mod["main"]
    params = list(main.params)[len(main.params) - len(values):]
    binding = {param: relax.const(tvm.runtime.tensor(value), str(value.dtype)) for param, value in zip(params, values)}
    bound = relax.transform.BindParams("main", binding)(mod)
    func = bound["main"]
    if func.attrs is not None and "num_input" in func.attrs:
        func = func.with_attr("num_input", len(func.params))
        bound.update_func(bound.get_global_var("main"), func)
    return bound

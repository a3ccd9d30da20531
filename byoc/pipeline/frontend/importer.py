"""TVM's ONNX importer, extended to remember which ONNX node made which binding.

TVM's converters return expressions that are bound either at once or later,
when the next node's expression is normalized. So provenance is found after
the import, by identity: the value (or var) a converter returned belongs to
its node, and helper bindings a converter emitted on the way belong to the
node that consumes them.
"""

from __future__ import annotations

import math
import re

import numpy as np
import onnx
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.relax.frontend.onnx.onnx_frontend import ONNXGraphImporter

from byoc.pipeline.frontend import matmul_nbits, run_time_sequences
from byoc.pipeline.frontend.max_pool_indices import max_pool_indices
from byoc.pipeline.frontend.affine_grid import affine_grid_of_run_time_size
from byoc.pipeline.frontend.col2im import col2im
from byoc.pipeline.frontend.deform_conv import deform_conv
from byoc.pipeline.frontend.determinant import determinant
from byoc.pipeline.frontend.bit_cast import bit_cast
from byoc.pipeline.frontend.check import BYOC_CONVERTS
from byoc.pipeline.frontend.cumulative import CUMULATIVE, cumulative
from byoc.pipeline.frontend.import_rewrites import (BROADCASTING_BINARY, VARIADIC_AS_BINARY, einsum_as_matmul,
                                                    variadic_as_binary_chain, where_of_a_constant_condition,
                                                    without_implied_broadcasts)
from byoc.pipeline.frontend.loop_bodies import convert_loop, loop_reads
from byoc.pipeline.frontend.onnx_model import LoopSpec, OnnxNode
from byoc.pipeline.frontend.pow_types import pow_of_other_types
from byoc.pipeline.frontend.run_time_values import (REDUCTIONS, constant_of_run_time_shape, reduce_over_run_time_axes,
                                                     reshape_to_run_time_shape, split_at_run_time_sizes,
                                                     top_k_of_run_time_k)
from byoc.pipeline.frontend.run_time_nms import nms_of_run_time_limits
from byoc.pipeline.frontend.run_time_pad import pad_by_run_time_widths
from byoc.pipeline.frontend.run_time_resize import resize_by_run_time_scales, upsample_by_run_time_scales
from byoc.pipeline.frontend.tensor_scatter import tensor_scatter
from byoc.vendor.values import const_array, is_tensor_const


#: Converters of ops whose shape-deciding input is computed at run time (TVM's need it constant)
_RUN_TIME_VALUES = {"Reshape": reshape_to_run_time_shape, "Split": split_at_run_time_sizes, "TopK": top_k_of_run_time_k,
                    "ConstantOfShape": constant_of_run_time_shape, "Pad": pad_by_run_time_widths,
                    "AffineGrid": affine_grid_of_run_time_size, "Resize": resize_by_run_time_scales,
                    "Upsample": upsample_by_run_time_scales}


class ProvenanceImporter(ONNXGraphImporter):
    """ONNXGraphImporter that records the ONNX node of each converted expression."""

    def __init__(self, shape_dict, dtype_dict, dim_ranges=None, scope: str = ""):
        from tvm import tirx

        #: the host loop whose body this imports ("" for a model's main graph): names its own loops' symbols
        self.scope = scope

        # An input with an empty (zero) extent is left to TVM's own reading of the model,
        # which makes that extent symbolic: TVM's converters and passes break on a static
        # 0 (Trilu, reshape and broadcast_to treat it as "copy this dimension").
        shape_dict = {name: shape for name, shape in shape_dict.items() if 0 not in list(shape)}
        # A symbolic dim is one int64 TIR variable per name, whichever inputs name it.
        self.dim_vars = {d: tirx.Var(d, "int64") for shape in shape_dict.values() for d in shape
                         if isinstance(d, str) and d.isidentifier()}
        self.dim_ranges = dict(dim_ranges or {})
        shape_dict = {name: [self._dim(d) if isinstance(d, str) else d for d in shape]
                      for name, shape in shape_dict.items()}
        super().__init__(shape_dict, dtype_dict, keep_params_in_input=False, sanitize=True)
        self._owner: dict[object, OnnxNode] = {}
        self.current_node: OnnxNode | None = None
        #: ONNX node name -> why the import made nothing of it (:mod:`byoc.pipeline.frontend.import_rewrites`)
        self.absorbed: dict[str, str] = {}
        #: the Loops the host runs, in import order (:mod:`byoc.pipeline.frontend.loop_bodies`)
        self.loops: list[LoopSpec] = []
        #: each sequence of run-time length -> (rank, dtype) of its tensors (:mod:`run_time_sequences`)
        self.sequence_elements: dict = {}

    def _dim(self, text: str):
        """A symbolic dim's TIR variable, or the expression of them a dim named by one is (shapes.name_dims)."""
        import ast

        from tvm import tirx

        if text.isidentifier():
            return self.dim_vars[text]
        arithmetic = {ast.Add: tirx.Add, ast.Sub: tirx.Sub, ast.Mult: tirx.Mul, ast.FloorDiv: tirx.floordiv}

        def expr(node):
            if isinstance(node, ast.BinOp):
                return arithmetic[type(node.op)](expr(node.left), expr(node.right))
            return self.dim_vars[node.id] if isinstance(node, ast.Name) else tirx.IntImm("int64", node.value)

        return expr(ast.parse(text, mode="eval").body)

    def from_onnx(self, graph, opset):
        """TVM's import, with each node's input list reachable from :meth:`_parse_value_proto` (see there)."""
        from tvm.relax.frontend.onnx import onnx_frontend

        plain = onnx_frontend.onnx_input
        importer = self

        class _Inputs(plain):
            def __init__(self, *args):
                super().__init__(*args)
                importer._inputs = self

        onnx_frontend.onnx_input = _Inputs  # the frontend builds each node's inputs with this name
        try:
            return super().from_onnx(graph, opset)
        finally:
            onnx_frontend.onnx_input = plain

    def _parse_graph_input(self, graph):
        """TVM's inputs; a sequence input (or optional sequence) is an ``R.Object`` of run-time length."""
        super()._parse_graph_input(graph)
        for vi in graph.input:
            if run_time_sequences.run_time_value_type(vi.type) and vi.name in self._inputs:
                var = relax.Var(self._nodes[vi.name].name, relax.ObjectType())
                self._nodes[vi.name] = self._inputs[vi.name] = var
                self.sequence_elements[var] = run_time_sequences.element_type(vi.type)

    def _check_for_unsupported_ops(self, graph):
        """TVM's check, which knows no contrib op, on the graph without the contrib ops byoc converts itself."""
        plain = onnx.GraphProto()
        plain.node.extend(n for n in graph.node if (n.domain, n.op_type) not in matmul_nbits.IMPORTED_CONTRIB_OPS
                          and n.op_type not in BYOC_CONVERTS)
        return super()._check_for_unsupported_ops(plain)

    def _parse_value_proto(self, value_proto):
        """Called on each node right after its inputs are gathered, before TVM refuses a symbolic shape input
        to the ops it does not list as taking one (Mul, Add, Unsqueeze ...): such inputs become
        :class:`_ShapeValue` (which :func:`_shape_arithmetic` computes on) or int64 tensors."""
        inputs = getattr(self, "_inputs", None)
        if isinstance(value_proto, onnx.NodeProto) and inputs is not None:
            self._inputs = None
            _wrap_shape_inputs(value_proto.op_type, inputs, self.bb)
        return super()._parse_value_proto(value_proto)

    def _convert_operator(self, op_name, inputs, attrs, opset):
        node = OnnxNode(attrs["tvm_custom"]["name"], op_name)
        self.current_node = node
        if op_name in ("Squeeze", "Unsqueeze") and len(inputs) > 1 and is_tensor_const(inputs[1]) \
                and const_array(inputs[1]).ndim == 0:  # one axis as a scalar, which onnxruntime takes; TVM does not
            inputs[1] = relax.const(const_array(inputs[1]).reshape(1))
        if op_name == "Clip":
            sym = self._convert_clip(inputs, attrs, opset)
        elif op_name == "MatMulNBits":  # com.microsoft: TVM's importer reads no op domain (check_supported_ops)
            sym = matmul_nbits.convert(self.bb, inputs, attrs)
        elif op_name == "InstanceNormalization":
            sym = self._convert_instance_norm(inputs, attrs)
        elif op_name == "Pad" and (sym := _constant_pad(inputs, attrs, opset)) is not None:
            sym = self.bb.normalize(sym)
        elif op_name == "Gather" and (sym := _gather_as_slice(inputs, attrs)) is not None:
            sym = self.bb.normalize(sym)
        elif op_name == "Einsum" and (sym := einsum_as_matmul(inputs, attrs, self.bb)) is not None:
            pass
        elif op_name == "Where" and (sym := where_of_a_constant_condition(inputs)) is not None:
            pass
        elif op_name in VARIADIC_AS_BINARY and (sym := variadic_as_binary_chain(
                op_name, _agreeing_on_broadcast_dims(inputs, self.bb), self.bb)) is not None:
            pass
        elif op_name in REDUCTIONS and (sym := reduce_over_run_time_axes(op_name, inputs, attrs, self.bb)) is not None:
            pass
        elif op_name in _RUN_TIME_VALUES and (sym := _RUN_TIME_VALUES[op_name](inputs, attrs, self.bb)) is not None:
            pass
        elif op_name in CUMULATIVE and (sym := cumulative(op_name, inputs, attrs, self.bb)) is not None:
            pass
        elif op_name == "Pow" and (sym := pow_of_other_types(inputs, self.bb)) is not None:
            pass
        elif op_name == "Col2Im" and (sym := col2im(inputs, attrs, self.bb)) is not None:
            pass
        elif op_name in run_time_sequences.SEQUENCE_OPS and (sym := run_time_sequences.convert(
                op_name, node.name, inputs, attrs, self.sequence_elements, self.bb, self.scope)) is not None:
            pass
        elif op_name == "Det":
            sym = determinant(node.name, inputs, self.bb)
        elif op_name == "DeformConv":
            sym = deform_conv(node.name, inputs, attrs, self.bb)
        elif op_name == "TensorScatter" and (sym := tensor_scatter(node.name, inputs, attrs, self.bb)) is not None:
            pass
        elif op_name == "BitCast" and (sym := bit_cast(node.name, inputs, attrs, self.bb)) is not None:
            pass
        elif op_name == "Loop":
            symbol = f"{self.scope}_loop{len(self.loops)}" if self.scope else f"loop{len(self.loops)}"
            # a count from a Shape, a carried dim: tensors, as the body's inputs are
            outer = {name: _shape_value_as_tensor(self._nodes[name], self.bb) for name in loop_reads(attrs["body"])
                     if name in self._nodes}
            values = [_shape_value_as_tensor(x, self.bb) for x in inputs]
            sym, spec = convert_loop(self.bb, node.name, symbol, values, attrs, outer, opset, self.sequence_elements)
            self.loops.append(spec)
        elif op_name == "NonMaxSuppression" and any(
                limit is not None and not isinstance(limit, tvm.ir.expr.Constant) for limit in inputs[2:5]):
            sym = nms_of_run_time_limits(inputs, attrs, self.bb)
        elif op_name == "NonMaxSuppression":
            inputs, sym = _nms_parameters(inputs), None
        else:
            for expand in without_implied_broadcasts(op_name, inputs, self.bb):
                if (owner := self._owner.get(expand)) is not None:
                    self.absorbed[owner.name] = "an Expand its reader's broadcasting implies: the reader reads " \
                                                "the Expand's input"
            sym = _shape_arithmetic(op_name, inputs, attrs)
            if sym is None:
                _shapes_as_tensors(op_name, inputs, self.bb)
            elif isinstance(sym, relax.Call):  # TVM's converters read their inputs' types
                sym = self.bb.normalize(sym)
        if sym is None and op_name == "Concat":
            _agree_on_concat_dims(inputs, attrs.get("axis", 0), self.bb)
        if sym is None and op_name in _MULTIDIRECTIONAL:
            _agree_on_broadcast_dims(inputs, self.bb)
        if sym is None and op_name == "MatMul":
            _agree_on_broadcast_dims(inputs, self.bb, matrices=True)
        if sym is None and op_name == "Squeeze":
            _squeezed_dims_are_one(inputs, attrs, self.bb)
        if sym is None and op_name == "Resize":
            _resize_to_spatial_sizes(inputs)
        if sym is None and op_name == "Expand":
            _expand_target_broadcast(inputs, self.bb)
        if sym is None:
            sym = super()._convert_operator(op_name, inputs, attrs, opset)
            if op_name == "MaxPool" and attrs["tvm_custom"]["num_outputs"] == 2:  # and its Indices
                with_indices = max_pool_indices(inputs[0], self.bb.normalize(sym), attrs, self.bb)
                sym = sym if with_indices is None else with_indices
        sym = _with_run_time_dims(sym, node.name, self.bb)
        self._owner[sym] = node
        if isinstance(sym, relax.Tuple):
            for item in sym.fields:
                self._owner.setdefault(item, node)
        return sym

    def _convert_instance_norm(self, inputs, attrs):
        """InstanceNormalization as ``relax.nn.group_norm`` of one group per channel: one op a vendor can take,
        where TVM's converter spells it as mean, variance, sqrt and divide. None (TVM's converter) when the
        channel count is not a number."""
        from tvm import tirx

        x = inputs[0]
        shape = x.ty.shape if isinstance(x.ty, relax.TensorType) else None
        if not isinstance(shape, relax.ShapeExpr) or len(shape.values) < 3 \
                or not isinstance(shape.values[1], tirx.IntImm):
            return None
        rank = len(shape.values)
        return self.bb.normalize(relax.op.nn.group_norm(
            x, inputs[1], inputs[2], num_groups=int(shape.values[1]), channel_axis=1, axes=list(range(2, rank)),
            epsilon=float(attrs.get("epsilon", 1e-5))))

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

    def with_dim_bounds(self, mod):
        """``mod`` whose ``main`` says the range of each symbolic dim (TVM's ``tir_var_upper_bound`` and
        ``tir_var_lower_bound``: memory planning sizes buffers for the largest sizes)."""
        upper = {name: r.max for name, r in self.dim_ranges.items() if name in self.dim_vars and r.max is not None}
        lower = {name: r.min for name, r in self.dim_ranges.items() if name in self.dim_vars}
        if not self.dim_vars:
            return mod
        func = mod["main"]
        if upper:
            func = func.with_attr("tir_var_upper_bound", upper)
        func = func.with_attr("tir_var_lower_bound", lower or {name: 1 for name in self.dim_vars})
        func = func.with_attr("tir_non_negative_var", list(self.dim_vars))
        mod.update_func(mod.get_global_var("main"), func)
        return mod

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


#: Ops whose result's shape only the run tells, which TVM legalizes all the same (a shape function computes it)
_RUN_TIME_SHAPED = frozenset({"relax.dynamic_strided_slice"})


def _with_run_time_dims(sym, name: str, bb):
    """``sym``, or where it is the result of one of :data:`_RUN_TIME_SHAPED` (a Slice at run-time positions), the
    same tensor with a new symbolic dim per axis (``<node>_dim<k>``), bound when the model runs: TVM's converters
    read shapes, and refuse a tensor without one. Other shapeless results are left as they are: TVM could not
    legalize the op that made them either (a product of a 4 and a dim that may be 1), and the import refuses them
    by the node that reads them."""
    from tvm import tirx

    if not (isinstance(sym, relax.Call) and isinstance(sym.op, tvm.ir.Op) and sym.op.name in _RUN_TIME_SHAPED):
        return sym
    sym = bb.normalize(sym)
    ty = sym.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is not None or ty.ndim < 0:
        return sym
    stem = re.sub(r"\W", "_", name)  # a dim's name is an identifier: codegens and reports match dims by it
    dims = [tirx.Var(f"{stem}_dim{k}", "int64") for k in range(ty.ndim)]
    return bb.match_cast(sym, relax.TensorType(dims, ty.dtype))


def unique_binding_names(main: relax.Function, scope: str = "") -> tuple[relax.Function, dict]:
    """``main`` with every binding var uniquely named, and the map old var -> new var.

    TVM's converters sometimes emit two bindings with the same name (``lv``);
    byoc keys decisions and reports by binding name, so they must be unique.
    With ``scope`` (a host loop's body, :mod:`~byoc.pipeline.frontend.loop_bodies`) every name is
    ``<scope>/<name>``: unique in the model whose plan the body's joins.
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
            if scope:
                names[binding.var] = f"{scope}/{name}"
    if not names:
        return main, {}
    renamer = _Renamer(names)
    new = renamer.visit_expr(main)
    old_vars = [b.var for block in main.body.blocks for b in block.bindings]
    new_vars = [b.var for block in new.body.blocks for b in block.bindings]
    return new, dict(zip(old_vars, new_vars))


def unique_dim_names(mod):
    """``mod`` whose ``main`` gives each of its symbolic dims a name of its own.

    TVM's converters name every Range's length ``range_len_0``: YOLOv8's three detection heads make three such
    dims, each its own variable. Vendors see dims by name (:mod:`byoc.vendor.graph`), so a partition holding two
    heads bound them as one (``range_len_0 = 20 ..., another input has 40``). The second and later variables of a
    name become ``<name>_1``, ``<name>_2``, ... (a name no other dim has).
    """
    import tvm
    import tvm_ffi
    from tvm import relax, tirx

    found: dict[str, list] = {}

    def visit(var):
        if not isinstance(var.ty, tvm.ir.PrimType):  # a Relax variable (TVM 0.27 has one Var class for both)
            return
        same = found.setdefault(str(var.name), [])
        if not any(var.same_as(other) for other in same):
            same.append(var)

    tvm_ffi.structural_walk(mod["main"], [(tirx.Var, visit)])
    taken, renamed = set(found), {}
    for name, variables in found.items():
        for k, var in enumerate(variables[1:], 1):
            new = f"{name}_{k}"
            while new in taken:
                new += "_"
            taken.add(new)
            renamed[var] = tirx.Var(new, var.ty)
    return relax.transform.BindSymbolicVars(renamed, "main")(mod) if renamed else mod


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


# -- shape arithmetic on symbolic dims ----------------------------------------------
# Exporters compute the target of a Reshape or Expand from Shape(x): Gather, Slice, Concat,
# Unsqueeze, Cast and integer arithmetic on the dims. TVM's importer keeps such a value
# symbolic (a ShapeExpr, or a PrimValue for one dim) for some of these ops only, and falls
# back to int64 tensors for the rest, which Reshape then refuses. These converters keep the
# value symbolic for the forms TVM lacks, so the shape reaches Reshape as TIR expressions of
# the model's dims (``batch*sequence_length``).

class _ShapeValue:
    """A symbolic shape value (a ShapeExpr) handed to an op TVM would refuse it for; only
    :func:`_shape_arithmetic` reads it."""

    def __init__(self, shape):
        self.shape = shape


#: Ops :func:`_shape_arithmetic` computes on symbolic shape values (TVM converts the rest on tensors).
_SHAPE_OPS = frozenset({"Mul", "Add", "Sub", "Div", "Unsqueeze"})
#: The ops TVM's frontend itself lets take a ShapeExpr input (its _construct_nodes).
_TVM_SHAPE_OPS = frozenset({"Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand", "Concat",
                            "Equal", "Where", "Cast", "CastLike", "Squeeze"})


def _wrap_shape_inputs(op_type: str, inputs, bb) -> None:
    """In place: the ShapeExpr inputs of an op TVM refuses them for become :class:`_ShapeValue` when every
    input is a shape value (the op is shape arithmetic), else int64 tensors."""
    if op_type in _TVM_SHAPE_OPS:
        return
    shaped = [i for i, x in enumerate(inputs) if isinstance(x, relax.Expr) and isinstance(x.ty, relax.ShapeType)]
    if not shaped:
        return
    arithmetic = op_type in _SHAPE_OPS and all(x is None or isinstance(x, relax.ShapeExpr) or _is_int_prim(x)
                                               or is_tensor_const(x) for x in inputs)
    for i in shaped:
        value = inputs[i]
        if arithmetic and isinstance(value, relax.ShapeExpr):
            inputs[i] = _ShapeValue(value)
        else:
            inputs[i] = bb.normalize(relax.op.shape_to_tensor(value))


def _shape_values(value):
    """``(dims, scalar)`` of a shape-valued expression (a ShapeExpr, a PrimValue, or an integer constant
    of rank <= 1), or None for anything else."""
    from tvm.ir import GenericConst

    if isinstance(value, _ShapeValue):
        value = value.shape
    if isinstance(value, relax.ShapeExpr):
        return list(value.values), False
    if _is_int_prim(value):
        return [value], True
    if isinstance(value, GenericConst) and str(value.ty.dtype) in ("int64", "int32"):
        array = value.value.numpy()
        if array.ndim <= 1:
            return [int(v) for v in array.reshape(-1)], array.ndim == 0
    return None


def _symbolic(dims: list, scalar: bool):
    """The relax value of shape dims: a constant when all are static (TVM's constant paths take it), else a
    ShapeExpr, or a PrimValue for a scalar."""
    from tvm import tirx

    values = [tirx.IntImm("int64", d) if isinstance(d, int) else d for d in dims]
    if all(isinstance(v, tirx.IntImm) for v in values):
        array = np.array([int(v.value) for v in values], dtype=np.int64)
        return relax.const(array.reshape(()) if scalar else array, "int64")
    if scalar:
        return relax.prim_value(values[0])
    return relax.ShapeExpr(values)


def _is_int_prim(value) -> bool:
    """A scalar integer prim value. TVM 0.27 passes them as plain TIR expressions, and a TIR variable is
    of the same class as a relax one: only its PrimType tells them apart."""
    import tvm

    return tvm.ir.is_prim_expr(value) and "int" in str(value.ty)


#: Ops whose operands broadcast multidirectionally (ONNX's numpy-style broadcasting).
_MULTIDIRECTIONAL = BROADCASTING_BINARY | frozenset({"Where", "Equal", "Less", "Greater", "LessOrEqual",
                                                     "GreaterOrEqual", "And", "Or", "Xor", "Mod", "Sum", "Mean"})

#: Element-wise ops TVM converts only on tensors: a symbolic shape value among their inputs becomes one.
_ELEMENTWISE = frozenset({"Mul", "Add", "Sub", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                          "Where", "Max", "Min", "Mod", "And", "Or", "Not"})


def _shapes_as_tensors(op_name: str, inputs, bb) -> None:
    """Turn the symbolic shape values among an element-wise op's inputs into int64 tensors, in place, when
    another input is a tensor computed at run time (transformers' attention masks: Range(seq) * seq); and any
    :class:`_ShapeValue` :func:`_shape_arithmetic` did not compute on, for any op."""
    for i, x in enumerate(inputs):  # wrapped for shape arithmetic that did not apply: TVM takes the tensor
        if isinstance(x, _ShapeValue):
            inputs[i] = bb.normalize(relax.op.shape_to_tensor(x.shape))
    symbolic = [i for i, x in enumerate(inputs) if isinstance(x, relax.ShapeExpr) or _is_int_prim(x)]
    if op_name in ("Cast", "CastLike"):
        # A symbolic int cast to a float (DeBERTa's sqrt(float(head_size) * scale)): TVM makes it a float TIR
        # expression, which no op after it takes; the cast of an int64 tensor is a float tensor.
        symbolic = symbolic[:1] if symbolic[:1] == [0] else []
    elif op_name not in _ELEMENTWISE:
        return
    else:
        computed = any(isinstance(x, relax.Expr) and not isinstance(x, relax.ShapeExpr) and not is_tensor_const(x)
                       and isinstance(bb.normalize(x).ty, relax.TensorType) for x in inputs if x is not None)
        if not computed:
            return
    for i in symbolic:
        inputs[i] = _shape_value_as_tensor(inputs[i], bb)


def _shape_value_as_tensor(value, bb):
    """A symbolic shape value (a ShapeExpr, :class:`_ShapeValue` or scalar int prim) as an int64 tensor (a scalar for
    the prim); any other value as it is."""
    if isinstance(value, _ShapeValue):
        value = value.shape
    if isinstance(value, relax.ShapeExpr):
        return bb.normalize(relax.op.shape_to_tensor(value))
    if not _is_int_prim(value):
        return value
    vector = bb.normalize(relax.op.shape_to_tensor(relax.ShapeExpr([value])))
    return bb.normalize(relax.op.reshape(vector, ()))


def _agree_on_concat_dims(inputs, axis: int, bb) -> None:
    """In place: Concat inputs whose other dims TVM cannot prove equal to the first input's are cast to them
    (``match_cast``, checked when the model runs, as onnxruntime checks them). PP-OCR's recognizer joins
    ``((h-33)//48+1, w')`` with ``(1, w')``: equal for every height it is run at, which no analysis of the
    dims can know, and TVM gives up the whole shape, leaving every op after it without one."""
    from tvm.sym.analyzer import Analyzer

    types = [getattr(x, "ty", None) for x in inputs]  # Concat has no optional input
    if len(types) < 2 or not all(isinstance(t, relax.TensorType) and t.shape is not None for t in types):
        return
    first = list(types[0].shape.values)
    if any(len(t.shape.values) != len(first) for t in types):
        return
    axis = axis + len(first) if axis < 0 else axis
    analyzer = Analyzer()
    for i, (x, ty) in enumerate(zip(inputs, types)):
        dims = list(ty.shape.values)
        if i == 0 or all(analyzer.can_prove_equal(a, b) for k, (a, b) in enumerate(zip(dims, first)) if k != axis):
            continue
        target = [d if k == axis else f for k, (d, f) in enumerate(zip(dims, first))]
        inputs[i] = bb.match_cast(x, relax.TensorType(target, ty.dtype))


def _agree_on_broadcast_dims(inputs, bb, matrices: bool = False) -> None:
    """In place: the operands of a broadcasting op (``Add``, ``Where``, ``Less`` ...) whose symbolic dims on one
    axis TVM can neither prove equal nor 1 are cast to the first operand's dim there (``match_cast``, checked when
    the model runs). TVM gives up the result's shape for such an axis, and a result without a shape can be neither
    legalized nor read: the host build failed ("TVM could not build the host program: R.where(...)"), or the
    import did at the first op after it. wav2vec2's positional conv adds its output, whose frames went through a
    padding and a slice (``min(max(f, 0), f + 1)``), to the features' ``f`` frames: equal for every input length,
    which TVM cannot know. A T5 export whose ``input_ids`` and ``attention_mask`` lengths are two dims (its
    ``dynamic_axes`` given as lists name each input's dims apart) meets them in its mask's ``Where`` over the
    position bias. A dim of 1 still broadcasts; a symbolic dim that is 1 only when the model runs does not (TVM's
    kernels index both operands' axis alike), and such a call is refused. A static dim against a symbolic one is
    left to TVM: there the symbolic one being 1 is how a model broadcasts, and the import is refused instead.
    With ``matrices`` (MatMul) only the batch axes broadcast, the last two are the matrices': DeBERTa's
    disentangled attention multiplies queries of batch ``b * h`` by position keys repeated to ``b * h`` by a
    computed count."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    typed = [(i, x.ty) for i, x in enumerate(inputs) if isinstance(x, relax.Expr)
             and isinstance(getattr(x, "ty", None), relax.TensorType)]
    if len(typed) < 2 or any(ty.shape is None for _, ty in typed):
        return
    kept = 2 if matrices else 0  # trailing axes that do not broadcast
    if matrices and any(len(ty.shape.values) < 3 for _, ty in typed):
        return
    rank = max(len(ty.shape.values) for _, ty in typed) - kept
    analyzer = Analyzer()

    def is_one(dim) -> bool:
        return isinstance(dim, tirx.IntImm) and dim.value == 1

    targets = []
    for axis in range(rank):
        sizes = [ty.shape.values[axis - rank + len(ty.shape.values) - kept] for _, ty in typed
                 if axis - rank + len(ty.shape.values) - kept >= 0]
        sizes = [d for d in sizes if not is_one(d)]
        static = any(isinstance(d, tirx.IntImm) for d in sizes)
        targets.append(sizes[0] if sizes and not static else None)
    for i, ty in typed:
        dims = list(ty.shape.values)
        batch = dims[:len(dims) - kept]
        cast = [d if is_one(d) or target is None or analyzer.can_prove_equal(d, target) else target
                for d, target in zip(batch, targets[rank - len(batch):])] + dims[len(dims) - kept:]
        if any(c is not d for c, d in zip(cast, dims)):
            inputs[i] = bb.match_cast(inputs[i], relax.TensorType(cast, ty.dtype))


def _agreeing_on_broadcast_dims(inputs, bb) -> list:
    """A copy of ``inputs`` after :func:`_agree_on_broadcast_dims`."""
    inputs = list(inputs)
    _agree_on_broadcast_dims(inputs, bb)
    return inputs


def _squeezed_dims_are_one(inputs, attrs, bb) -> None:
    """In place: a Squeeze of a symbolic dim reads its input cast to size 1 there (``match_cast``, checked when
    the model runs, as onnxruntime checks it); TVM refuses to squeeze a dim it cannot prove is 1."""
    x = inputs[0]
    axes = attrs.get("axes")
    if axes is None and len(inputs) > 1 and inputs[1] is not None and is_tensor_const(inputs[1]):
        axes = [int(a) for a in const_array(inputs[1]).reshape(-1)]
    ty = getattr(x, "ty", None)
    if not axes or not isinstance(ty, relax.TensorType) or ty.shape is None:
        return
    dims = list(ty.shape.values)
    axes = {a + len(dims) if a < 0 else a for a in axes}
    if all(getattr(dims[a], "value", None) == 1 for a in axes if 0 <= a < len(dims)):
        return
    target = [1 if k in axes else d for k, d in enumerate(dims)]
    inputs[0] = bb.match_cast(x, relax.TensorType(target, ty.dtype))


def _nms_parameters(inputs):
    """NonMaxSuppression's inputs for TVM's converter, which reads its three limits as constants (byoc's
    ``run_time_nms`` takes those given at run time). Its IoU threshold is the next float32 above the model's,
    because TVM suppresses a box whose IoU equals the threshold, where ONNX keeps it (it suppresses above the
    threshold only)."""
    import numpy as np

    inputs = list(inputs)
    if len(inputs) > 3 and inputs[3] is not None:
        threshold = np.float32(inputs[3].value.numpy().reshape(-1)[0])
        inputs[3] = relax.const(np.nextafter(threshold, np.float32(np.inf)), "float32")
    return inputs


def _constant_pad(inputs, attrs, opset):
    """A constant-mode Pad by constant, non-negative widths as ``relax.nn.pad``: one op a vendor can take (dnnl
    does: a fill and a copy into the middle), where TVM's converter emits an opaque ``call_tir`` of
    ``topi.nn.pad``: Swin-V2's window padding, on the host inside every stage. None (TVM's converter) for
    the other modes, widths or values computed at run time, and negative widths (ONNX crops by them)."""
    x = inputs[0]
    ty = getattr(x, "ty", None)
    if attrs.get("mode", b"constant") not in (b"constant", "constant") or not isinstance(ty, relax.TensorType) \
            or ty.ndim < 0:
        return None
    if opset < 11:
        pads, value, axes = list(attrs.get("pads", [])), float(attrs.get("value", 0.0)), None
    else:
        operands = [inputs[i] if len(inputs) > i else None for i in (1, 2, 3)]
        if not all(arg is None or is_tensor_const(arg) for arg in operands):
            return None
        pads = [int(p) for p in const_array(operands[0]).reshape(-1)]
        value = float(const_array(operands[1]).reshape(-1)[0]) if operands[1] is not None \
            and const_array(operands[1]).size else 0.0
        axes = None if operands[2] is None else [int(a) for a in const_array(operands[2]).reshape(-1)]
    axes = list(range(ty.ndim)) if axes is None else [a + ty.ndim if a < 0 else a for a in axes]
    if len(pads) != 2 * len(axes) or min(pads, default=0) < 0 or not all(0 <= a < ty.ndim for a in axes):
        return None
    widths = [0] * (2 * ty.ndim)  # relax.nn.pad: (before, after) per axis
    for k, axis in enumerate(axes):
        widths[2 * axis], widths[2 * axis + 1] = pads[k], pads[k + len(axes)]
    return relax.op.nn.pad(x, widths, "constant", value)


def _gather_as_slice(inputs, attrs):
    """A Gather of run-time data at a constant scalar index, or at constant consecutive indices, as the slice it
    is (a scalar index then drops the axis): Swin's q, k, v = qkv[0], qkv[1], qkv[2] in a dynamo export, and
    BERT's pooler reading token 0 of a symbolic sequence. TVM's
    converter wraps each index in int64 arithmetic on the data's shape (negative indices count from the end),
    host ops that split the encoder into a partition per block. None (TVM's Gather) for any other Gather."""
    from tvm import tirx

    data, index = inputs[0], inputs[1]
    ty = getattr(data, "ty", None)
    if is_tensor_const(data) or not is_tensor_const(index) or not isinstance(ty, relax.TensorType) \
            or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = list(ty.shape.values)
    axis = int(attrs.get("axis", 0))
    axis = axis + len(dims) if axis < 0 else axis
    positions = const_array(index).astype(np.int64)
    if not 0 <= axis < len(dims) or positions.ndim > 1 or positions.size == 0:
        return None
    if not isinstance(dims[axis], tirx.IntImm):  # a symbolic dim is at least 1: index 0 alone (BERT's CLS token)
        if positions.reshape(-1).tolist() != [0]:
            return None
        extent = 1
    else:
        extent = int(dims[axis])
    positions = np.where(positions < 0, positions + extent, positions).reshape(-1)
    first = int(positions[0])
    if positions.min() < 0 or positions.max() >= extent \
            or not np.array_equal(positions, np.arange(first, first + positions.size)):
        return None  # out of range (TVM's converter reports it) or not one slice
    sliced = relax.op.strided_slice(data, [axis], [first], [first + positions.size], assume_inbound=True)
    return relax.op.squeeze(sliced, [axis]) if const_array(index).ndim == 0 else sliced


def _expand_target_broadcast(inputs, bb) -> None:
    """An Expand to a shape computed at run time reads, in place of that shape, the shape it broadcasts to.

    ONNX's Expand broadcasts both ways: a 1 in the shape keeps the input's dim (``[3, 1]`` expanded by
    ``[2, 1, 6]`` is ``[2, 3, 6]``). TVM's converter honours that for a constant shape, but takes a run-time
    shape as the result's shape, a silently wrong ``[2, 1, 6]``. So the shape becomes, dim by dim, the
    input's dim where the shape says 1, right-aligned, as the input's dims are known when the model runs.
    """
    import numpy as np

    data, shape = inputs[0], inputs[1]
    data_ty, shape_ty = getattr(data, "ty", None), getattr(shape, "ty", None)
    if isinstance(shape, (relax.ShapeExpr, tvm.ir.expr.Constant)) or not isinstance(data_ty, relax.TensorType) \
            or not isinstance(shape_ty, relax.TensorType) or data_ty.ndim < 0 \
            or not isinstance(shape_ty.shape, relax.ShapeExpr) or len(shape_ty.shape.values) != 1 \
            or not isinstance(shape_ty.shape.values[0], tvm.tirx.IntImm):
        return
    length, rank = int(shape_ty.shape.values[0]), data_ty.ndim
    dims = bb.emit(relax.op.astype(relax.op.shape_to_tensor(relax.op.shape_of(data)), "int64"))
    if length > rank:
        dims = bb.emit(relax.op.concat([relax.const(np.ones(length - rank), "int64"), dims]))
    elif rank > length:
        shape = bb.emit(relax.op.concat([relax.const(np.ones(rank - length), "int64"),
                                         relax.op.astype(shape, "int64")]))
    one = relax.const(1, "int64")
    inputs[1] = bb.emit(relax.op.where(relax.op.equal(shape, one), dims, shape))


def _resize_to_spatial_sizes(inputs) -> None:
    """In place: a Resize to ``sizes`` that are a shape with symbolic batch or channel dims and fixed spatial
    ones (torchvision's segmentation heads: ``Concat(Shape(x)[:2], [512, 512])``) gets the spatial sizes alone,
    after two placeholders: TVM's converter reads only ``sizes[2:]``, but reads every dim as a number."""
    from tvm import tirx

    sizes = inputs[3] if len(inputs) > 3 else None
    if not isinstance(sizes, relax.ShapeExpr) or len(sizes.values) < 3:
        return
    spatial = list(sizes.values)[2:]
    if all(isinstance(d, tirx.IntImm) for d in spatial):
        inputs[3] = relax.ShapeExpr([0, 0, *spatial])


def _symbolic_equal(inputs, values):
    """``Equal`` of a symbolic shape and a shape or constant, dim by dim, as a boolean constant: the legacy
    exporter's ``Where(Equal(shape, -1), 1, shape)`` before an Expand. TVM's converter compares the dims by
    structure, a ``T.int64(-1)`` dim with the integer -1 of the constant, and found them never equal: the
    shape kept its -1. None (TVM's converter) unless every pair is provably equal or provably not."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer, ConstIntBound

    if len(values) != 2 or any(v is None for v in values) or not any(
            isinstance(x, (relax.ShapeExpr, _ShapeValue)) or _is_int_prim(x) for x in inputs):
        return None
    (left, left_scalar), (right, right_scalar) = values
    if len(left) != len(right) and 1 not in (len(left), len(right)):
        return None
    n = max(len(left), len(right))
    left, right = (v * n if len(v) == 1 else v for v in (left, right))
    analyzer = Analyzer()
    pairs = [tuple(tirx.IntImm("int64", d) if isinstance(d, int) else d for d in pair) for pair in zip(left, right)]
    for var in {v for a, b in pairs for v in tirx.analysis.undefined_vars(a - b)}:  # dims: never negative
        analyzer.update(var, ConstIntBound(0, ConstIntBound.POS_INF))
    equal = []
    for a, b in pairs:
        if analyzer.can_prove_equal(a, b):
            equal.append(True)
        elif analyzer.can_prove(a != b):
            equal.append(False)
        else:
            return None
    result = np.array(equal, dtype=bool)
    return relax.const(result.reshape(()) if left_scalar and right_scalar else result, "bool")


def _symbolic_range(inputs, values):
    """``arange`` over scalar shape values (transformers' ``Range(0, seq)`` for positions and masks), so its
    length is the dim itself: TVM's Range converts the values to tensors and casts the length to a new
    variable, which no other dim equals (and whose ``match_cast`` TVM's MergeCompositeFunctions refuses).
    None (TVM's own Range) unless the step is a positive constant and the length provably not negative."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer, ConstIntBound

    if len(values) != 3 or any(v is None or not v[1] for v in values) or not any(map(_is_int_prim, inputs)):
        return None
    (start,), (limit,), (step,) = (v[0] for v in values)
    if not isinstance(step, int) or step <= 0:
        return None
    dtype = next(str(x.ty) for x in inputs if _is_int_prim(x))
    start, limit = (tirx.IntImm(dtype, d) if isinstance(d, int) else d for d in (start, limit))
    analyzer = Analyzer()
    for var in tirx.analysis.undefined_vars(limit - start):  # dims: never negative
        analyzer.update(var, ConstIntBound(0, ConstIntBound.POS_INF))
    if not analyzer.can_prove(limit - start >= 0):
        return None
    return relax.op.arange(relax.prim_value(start), relax.prim_value(limit),
                           relax.prim_value(tirx.IntImm(dtype, step)), dtype)


def _shape_arithmetic(op_name: str, inputs, attrs):
    """The symbolic result of a shape op TVM would turn into tensors, or None to leave the op to TVM."""
    from tvm import tirx

    if op_name not in ("Gather", "Concat", "Cast", "Squeeze", "Mul", "Add", "Sub", "Div", "Unsqueeze", "Range",
                       "Equal") or not inputs:
        return None
    values = [_shape_values(x) if x is not None else None for x in inputs]
    if op_name == "Range":
        return _symbolic_range(inputs, values)
    if op_name == "Equal":
        return _symbolic_equal(inputs, values)
    if values[0] is None or not any(isinstance(x, (relax.ShapeExpr, _ShapeValue)) or _is_int_prim(x)
                                    for x in inputs[:2]):
        return None  # static values are TVM's own business (its constant folding)
    dims, scalar = values[0]
    if op_name == "Unsqueeze":  # a 0-D value to 1-D (TVM takes a PrimValue; a ShapeExpr arrives wrapped)
        axes = values[1][0] if len(values) > 1 and values[1] is not None else attrs.get("axes")
        return _symbolic(dims, False) if scalar and list(axes or ()) in ([0], [-1]) else None
    if op_name == "Gather":
        if values[1] is None or scalar or attrs.get("axis", 0) != 0 or not is_tensor_const(inputs[1]):
            return None
        index, index_scalar = values[1]
        if any(not isinstance(i, int) or not -len(dims) <= i < len(dims) for i in index):
            return None
        return _symbolic([dims[i] for i in index], index_scalar)
    if op_name == "Concat":
        if any(v is None or v[1] for v in values):
            return None
        return _symbolic([d for v in values for d in v[0]], False)
    if op_name == "Cast":
        return inputs[0] if attrs.get("to") in (6, 7) else None  # int32, int64
    if op_name == "Squeeze":
        return _symbolic(dims, True) if len(dims) == 1 and not scalar else None
    if len(values) != 2 or values[1] is None:
        return None
    other, other_scalar = values[1]
    if len(dims) != len(other) and 1 not in (len(dims), len(other)):
        return None
    n = max(len(dims), len(other))
    left = dims * n if len(dims) == 1 else dims
    right = other * n if len(other) == 1 else other
    ops = {"Mul": lambda a, b: a * b, "Add": lambda a, b: a + b, "Sub": lambda a, b: a - b,
           "Div": lambda a, b: tirx.floordiv(a, b)}

    def prim(d):
        return tirx.IntImm("int64", d) if isinstance(d, int) else d

    result = [ops[op_name](prim(a), prim(b)) for a, b in zip(left, right)]
    return _symbolic([tirx.IntImm("int64", int(r.value)) if isinstance(r, tirx.IntImm) else r for r in result],
                     scalar and other_scalar)

"""LSTM, GRU and RNN rewritten as plain ONNX ops, unrolled over time.

TVM's Relax ONNX importer has no converter for the recurrent ops, yet real
models (voice activity detectors, OCR recognisers) are built around them.
:func:`decompose_recurrent` replaces every ``LSTM``, ``GRU`` and ``RNN`` node
of the default domain by MatMul/Add/Mul/Sigmoid/Tanh/Split/Concat/Reshape
(and the other activations the spec lists), one step per time index, which
needs the sequence length and batch to be static.

The semantics are the ONNX operator spec's, with onnxruntime's choices where
the spec is silent: activation alphas/betas are consumed in order only by
the functions that take them, with onnxruntime's defaults (LeakyRelu 0.01,
HardSigmoid 0.2/0.5, Elu 1.0, otherwise 0); ``clip`` bounds the inputs of
the gate activations but not the cell state LSTM's h() reads;
``sequence_lens`` shorter than the sequence masks the padded steps (the
state stops, ``Y`` is 0 there).

Per direction, the input projection ``X·Wᵀ + Wb + Rb`` of every time step is
one MatMul, cut into per-step, per-gate slices by one Split; each step adds
only ``H·R_gᵀ``, one MatMul per gate, so the state's path holds nothing but
MatMul/Add/Mul and activations and a vendor can take all steps as one
partition. Weights, biases, peepholes and initial states that are constants
are sliced and transposed here into new initializers; when they are graph
inputs the same slicing is done with Split/Reshape/Transpose in the graph.

onnxruntime's ``DynamicQuantizeLSTM`` (``com.microsoft``, what
``quantize_dynamic`` makes of an LSTM) unrolls the same way, as onnxruntime
computes it: its int8 weights ``[directions, K, 4 * hidden]`` stay int8, and
each product is the form ``quantize_dynamic`` writes for a MatMul
(DynamicQuantizeLinear of the rows, MatMulInteger, Cast, times the two
scales), which a vendor takes as a dynamic int8 unit: the input's rows of all
steps quantized at once, the hidden state at each step.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Union

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from byoc.errors import DynamicShapeError, InvalidModelError, UnsupportedAttributeError
from byoc.pipeline.frontend.onnx_model import all_graphs, default_opset

__all__ = ["QUANTIZED_LSTM", "RECURRENT_OPS", "decompose_recurrent", "is_recurrent"]

#: The op types :func:`decompose_recurrent` replaces (default ONNX domain).
RECURRENT_OPS = ("LSTM", "GRU", "RNN")
#: onnxruntime's LSTM of int8 weights, which it replaces too
QUANTIZED_LSTM = ("com.microsoft", "DynamicQuantizeLSTM")

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
#: lower-case name -> (name, takes alpha, takes beta, default alpha, default beta), as onnxruntime
_ACTIVATIONS = {
    "relu": ("Relu", False, False, 0.0, 0.0),
    "tanh": ("Tanh", False, False, 0.0, 0.0),
    "sigmoid": ("Sigmoid", False, False, 0.0, 0.0),
    "affine": ("Affine", True, True, 0.0, 0.0),
    "leakyrelu": ("LeakyRelu", True, False, 0.01, 0.0),
    "thresholdedrelu": ("ThresholdedRelu", True, False, 0.0, 0.0),
    "scaledtanh": ("ScaledTanh", True, True, 0.0, 0.0),
    "hardsigmoid": ("HardSigmoid", True, True, 0.2, 0.5),
    "elu": ("Elu", True, False, 1.0, 0.0),
    "softsign": ("Softsign", False, False, 0.0, 0.0),
    "softplus": ("Softplus", False, False, 0.0, 0.0),
}
_EXTRA_ATTRIBUTES = {"LSTM": ("input_forget",), "GRU": ("linear_before_reset",), "RNN": ()}
_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)

#: A value while building: a tensor name in the graph, or a constant still in numpy.
Value = Union[str, np.ndarray]


def decompose_recurrent(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Return a new model (the given one is never modified) in which every LSTM/GRU/RNN node
    (default domain) is replaced by standard ops, and a map from every new node's name to the
    name of the recurrent node it came from. Models without recurrent nodes come back unchanged
    (a copy) with {}.

    The recurrent nodes' output tensors keep their names, so consumers and graph outputs stay
    wired. Raises :class:`~byoc.errors.DynamicShapeError` when a node's sequence length or batch
    is not static, :class:`~byoc.errors.UnsupportedAttributeError` for a setting that cannot be
    converted and :class:`~byoc.errors.InvalidModelError` for a node the spec does not allow;
    every message names the node.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    every_graph = list(all_graphs(out.graph))
    if not any(is_recurrent(n) for g in every_graph for n in g.node):
        return out, {}
    context = _Context(out, every_graph)
    origin: dict[str, str] = {}
    # Subgraphs first: rewriting a graph copies its nodes, and with them their (already rewritten) bodies.
    for graph in reversed(every_graph):
        if not any(is_recurrent(n) for n in graph.node):
            continue
        rewritten = []
        consumed: set[str] = set()
        for node in graph.node:
            if not is_recurrent(node):
                rewritten.append(node)
                continue
            builder = _Builder(context, node)
            builder.build()
            rewritten.extend(builder.nodes)
            graph.initializer.extend(builder.initializers)
            origin.update((n.name, node.name) for n in builder.nodes)
            consumed.update(name for name in node.input if name)
        del graph.node[:]
        graph.node.extend(rewritten)
        _drop_unused_initializers(graph, consumed, context)
    return out, origin


# -- model-wide facts -------------------------------------------------------------------
def is_recurrent(node: onnx.NodeProto) -> bool:
    return (node.domain in ("", "ai.onnx") and node.op_type in RECURRENT_OPS) or (
        (node.domain, node.op_type) == QUANTIZED_LSTM)


class _QuantizedWeight(NamedTuple):
    """An int8 (or uint8) weight [K, N] of a DynamicQuantizeLSTM, its scale (one, or one per column) and its one
    zero point."""

    codes: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray


def _value_infos(graph_list):
    for graph in graph_list:
        yield from graph.input
        yield from graph.value_info
        yield from graph.output


class _Context:
    """What the builders need to know about the whole model: opset, shapes, constants, names."""

    def __init__(self, model: onnx.ModelProto, graphs: list):
        self.opset = default_opset(model)
        self.graphs = graphs
        self._model = model
        self._inferred = None
        self.types: dict[str, tuple[int, Optional[tuple]]] = {}
        self._read_types(graphs)
        self.constants: dict[str, np.ndarray] = {}
        for graph in graphs:
            # An initializer that is also a graph input is only a default the caller may replace.
            inputs = {vi.name for vi in graph.input}
            for init in graph.initializer:
                if init.name not in inputs:
                    self.constants[init.name] = init
            for node in graph.node:
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
                    value = next((a.t for a in node.attribute if a.name == "value"), None)
                    if value is not None:
                        self.constants[node.output[0]] = value
        # Node and tensor names live in separate namespaces; new ones must be unique in each.
        self.used: set[str] = set()
        self.used_nodes: set[str] = set()
        for graph in graphs:
            self.used.update(vi.name for vi in _value_infos([graph]))
            self.used.update(init.name for init in graph.initializer)
            self.used.update(init.values.name for init in graph.sparse_initializer)
            for node in graph.node:
                self.used_nodes.add(node.name)
                self.used.update(node.input)
                self.used.update(node.output)

    def _read_types(self, graphs) -> None:
        for vi in _value_infos(graphs):
            tensor = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                continue
            dims = None
            if tensor.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                             for d in tensor.shape.dim)
            if vi.name not in self.types or self.types[vi.name][1] is None:
                self.types[vi.name] = (tensor.elem_type, dims)
        for graph in graphs:
            for init in graph.initializer:
                self.types.setdefault(init.name, (init.data_type, tuple(init.dims)))

    def type_of(self, name: str) -> tuple[int, Optional[tuple]]:
        """(element type, dims with None for unknown) of a tensor; shape inference when unknown."""
        known = self.types.get(name)
        if (known is None or known[1] is None or None in known[1]) and self._inferred is None:
            try:
                # data_prop follows Shape->Gather->Concat->Reshape chains, as exporters write them.
                self._inferred = onnx.shape_inference.infer_shapes(self._model, data_prop=True)
            except Exception:  # noqa: BLE001 - inference is a best effort; unknown stays unknown
                self._inferred = self._model
            else:
                self._read_types(list(all_graphs(self._inferred.graph)))
            known = self.types.get(name)
        return known if known is not None else (TensorProto.UNDEFINED, None)

    def inputs_static(self) -> bool:
        """Whether every input of the main graph has a fully known shape."""
        main = self.graphs[0]
        initialized = {init.name for init in main.initializer}
        for vi in main.input:
            if vi.name in initialized:
                continue
            dims = self.types.get(vi.name, (0, None))[1]
            if dims is None or None in dims:
                return False
        return True

    def constant(self, name: str) -> Optional[np.ndarray]:
        value = self.constants.get(name)
        if value is None:
            return None
        if isinstance(value, TensorProto):
            try:
                value = numpy_helper.to_array(value)
            except Exception:  # noqa: BLE001 - e.g. external data not loaded: use it as a tensor
                return None
            self.constants[name] = value
        return value

    def fresh(self, base: str) -> str:
        """A tensor name starting with ``base`` that no tensor of the model has."""
        return _fresh(base, self.used)

    def fresh_node(self, base: str) -> str:
        """A node name starting with ``base`` that no node of the model has."""
        return _fresh(base, self.used_nodes)


def _fresh(base: str, used: set[str]) -> str:
    name, index = base, 1
    while name in used:
        index += 1
        name = f"{base}_{index}"
    used.add(name)
    return name


def _drop_unused_initializers(graph: onnx.GraphProto, candidates: set[str], context: _Context) -> None:
    """Remove the recurrent nodes' weights no node reads any more (their pre-split copies replace them)."""
    read: set[str] = {o.name for o in graph.output}
    for sub in context.graphs:
        for node in sub.node:
            read.update(node.input)
    keep = [init for init in graph.initializer if init.name in read or init.name not in candidates]
    if len(keep) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(keep)


# -- one recurrent node -------------------------------------------------------------------
class _Builder:
    """Emits the nodes and initializers that replace one recurrent node."""

    def __init__(self, context: _Context, node: onnx.NodeProto):
        self.ctx = context
        self.node = node
        # a DynamicQuantizeLSTM is an LSTM whose products are dynamic int8 ones (_quantized_matmul)
        self.quantized = (node.domain, node.op_type) == QUANTIZED_LSTM
        self.op = "LSTM" if self.quantized else node.op_type
        self.label = node.name or node.op_type
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        self._cache: dict = {}  # small constants already made initializers
        self._directions: dict = {}  # (tensor, axis) -> its per-direction pieces
        self._quantized_rows: dict = {}  # tensor -> its DynamicQuantizeLinear outputs (one per product's rows)
        self.may_be_empty = False  # some sequence_lens value may be 0

    # -- errors ------------------------------------------------------------------------
    def _where(self) -> str:
        op = self.node.op_type
        return f"{op} node '{self.node.name}'" if self.node.name else f"an unnamed {op} node"

    def _unsupported(self, attribute: str, why: str, fix: str) -> UnsupportedAttributeError:
        return UnsupportedAttributeError(
            f"{self._where()}: {attribute} {why}; {fix}", self.node.name, attribute)

    def _invalid(self, why: str) -> InvalidModelError:
        return InvalidModelError(f"{self._where()}: {why}")

    # -- reading the node ------------------------------------------------------------------
    def _input(self, index: int) -> Optional[str]:
        return self.node.input[index] if len(self.node.input) > index and self.node.input[index] else None

    def _output(self, index: int) -> Optional[str]:
        return self.node.output[index] if len(self.node.output) > index and self.node.output[index] else None

    def _operand(self, index: int) -> Optional[Value]:
        """Input ``index`` as a constant array when it is one, else its tensor name."""
        name = self._input(index)
        if name is None:
            return None
        value = self.ctx.constant(name)
        return value if value is not None else name

    def _settings(self) -> None:
        if self.ctx.opset < 7:
            raise self._unsupported(
                "opset", f"is {self.ctx.opset}; only opset 7 and later recurrent ops are converted",
                "convert the model to opset 7 or later with onnx.version_converter")
        known = {"activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout",
                 *_EXTRA_ATTRIBUTES[self.op]}
        unknown = sorted(set(self.attrs) - known)
        if unknown:
            raise self._unsupported(f"attribute '{unknown[0]}'", f"is not an attribute of {self.op}",
                                    "re-export the model without it")
        direction = self.attrs.get("direction", b"forward")
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise self._invalid(f"direction '{direction}' is not forward, reverse or bidirectional")
        self.direction = direction
        self.num_directions = 2 if direction == "bidirectional" else 1
        self.layout = int(self.attrs.get("layout", 0))
        if self.layout not in (0, 1):
            raise self._invalid(f"layout {self.layout} is not 0 or 1")
        self.linear_before_reset = int(self.attrs.get("linear_before_reset", 0)) != 0
        self.input_forget = int(self.attrs.get("input_forget", 0)) != 0
        clip = self.attrs.get("clip")
        self.clip = None if clip is None else float(clip)
        if self.clip is not None and not self.clip > 0:
            raise self._invalid(f"clip {self.clip} is not a positive threshold")

        x_name, w_name, r_name = self._input(0), self._input(1), self._input(2)
        if not (x_name and w_name and r_name):
            raise self._invalid("inputs X, W and R are required")
        elem, x_dims = self.ctx.type_of(x_name)
        if elem not in _FLOAT_TYPES:
            name = TensorProto.DataType.Name(elem) if elem else "unknown"
            raise self._unsupported(
                "input X", f"has element type {name}; only float16, float and double are converted",
                "export the recurrent layer in float32")
        self.dtype = helper.tensor_dtype_to_np_dtype(elem)
        if x_dims is None or len(x_dims) != 3 or x_dims[0] is None or x_dims[1] is None:
            if self.ctx.inputs_static():
                fix = ("the model's inputs are static, but shape inference cannot follow them to X (it is "
                       "computed in If/Loop branches or from Shape values); export the recurrent layer with "
                       "a fixed sequence length, outside data-dependent branches")
            else:
                main = self.ctx.graphs[0]
                symbolic = sorted({d.dim_param for vi in main.input for d in vi.type.tensor_type.shape.dim
                                   if d.dim_param})
                example = ", ".join(f"{name!r}: <size>" for name in symbolic) or "..."
                fix = (f"fix the symbolic dims that reach it, dims={{{example}}} (CLI: --dim NAME=SIZE), or give "
                       "the inputs' shapes (input_shapes=...)")
            raise DynamicShapeError(
                f"{self._where()}: the sequence length and batch of input X '{x_name}' must be static "
                f"to unroll it over time (shape {_show(x_dims)}); {fix}")
        seq, batch = (x_dims[0], x_dims[1]) if self.layout == 0 else (x_dims[1], x_dims[0])
        self.seq_length, self.batch = seq, batch

        hidden = self.attrs.get("hidden_size")
        if hidden is None:
            r_dims = self.ctx.type_of(r_name)[1]
            hidden = r_dims[2] if r_dims is not None and len(r_dims) == 3 else None
            if hidden is None:
                raise self._unsupported("attribute 'hidden_size'", "is missing and R's shape is unknown",
                                        "set hidden_size on the node")
        self.hidden = int(hidden)
        if self.hidden <= 0:
            raise self._invalid(f"hidden_size {self.hidden} is not positive")
        self.activations = self._activations()

    def _activations(self) -> list[list[tuple[str, float, float]]]:
        """Per direction, the (name, alpha, beta) of each of the op's activation functions."""
        defaults = _DEFAULT_ACTIVATIONS[self.op]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in self.attrs.get("activations", [])]
        per_direction = len(defaults)
        if not names:
            names = list(defaults) * self.num_directions
        if len(names) != per_direction * self.num_directions:
            raise self._invalid(f"activations lists {len(names)} functions, expected "
                                f"{per_direction * self.num_directions} ({per_direction} per direction)")
        alphas = [float(a) for a in self.attrs.get("activation_alpha", [])]
        betas = [float(b) for b in self.attrs.get("activation_beta", [])]
        resolved = []
        for name in names:
            entry = _ACTIVATIONS.get(name.lower())
            if entry is None:
                raise self._unsupported(
                    f"activation '{name}'", "is not one of the spec's activation functions "
                    f"({', '.join(e[0] for e in _ACTIVATIONS.values())})", "use one of those")
            canonical, takes_alpha, takes_beta, alpha, beta = entry
            if takes_alpha and alphas:
                alpha = alphas.pop(0)
            if takes_beta and betas:
                beta = betas.pop(0)
            resolved.append((canonical, alpha, beta))
        return [resolved[d * per_direction:(d + 1) * per_direction] for d in range(self.num_directions)]

    # -- emitting ----------------------------------------------------------------------------
    def _tensor(self, what: str) -> str:
        return self.ctx.fresh(f"{self.label}/{what}")

    def _emit(self, op_type: str, inputs: Sequence[Value], what: str, outputs: int = 1,
              names: Optional[Sequence[str]] = None, **attrs) -> Union[str, list[str]]:
        ins = [self._name(v, f"{what}_in") if not isinstance(v, str) else v for v in inputs]
        outs = list(names) if names is not None else [self._tensor(what if outputs == 1 else f"{what}_{i}")
                                                       for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, ins, outs, name=self.ctx.fresh_node(f"{self.label}/{what}"),
                                           **attrs))
        return outs[0] if outputs == 1 else outs

    def _name(self, value: Value, what: str) -> str:
        """A constant as an initializer (each distinct one once), or the tensor name as is."""
        if isinstance(value, str):
            return value
        array = np.array(value, order="C")  # ascontiguousarray would make a 0-d index 1-d
        # Small constants (shapes, indices, scalars, masks) recur; weights are each used once.
        key = (array.dtype.str, array.shape, array.tobytes()) if array.size <= 1024 else None
        if key is None or key not in self._cache:
            name = self._tensor(what)
            self.initializers.append(numpy_helper.from_array(array, name))
            if key is None:
                return name
            self._cache[key] = name
        return self._cache[key]

    def _scalar(self, value: float) -> np.ndarray:
        return np.array(value, dtype=self.dtype)

    def _ints(self, values) -> np.ndarray:
        return np.array(list(values), dtype=np.int64)

    # shape and slicing ops, folded when their operand is a constant
    def _direction(self, value: Value, index: int, axis: int, shape: Sequence[int], what: str) -> Value:
        """Direction ``index`` of ``value`` along ``axis``, which is dropped (the result has ``shape``).

        Split + Reshape rather than Gather: no index to bound-check, and TVM's take
        warns on every build that out-of-bounds indices would crash it.
        """
        if not isinstance(value, str):
            return np.take(value, index, axis=axis)
        key = (value, axis)
        if key not in self._directions:
            self._directions[key] = self._split(value, axis, [1] * self.num_directions, f"{what}_split")
        return self._reshape(self._directions[key][index], shape, what)

    def _split(self, value: Value, axis: int, sizes: Sequence[int], what: str) -> list[Value]:
        if len(sizes) == 1:
            return [value]
        if not isinstance(value, str):
            return np.split(value, np.cumsum(sizes)[:-1], axis=axis)
        if self.ctx.opset < 13:
            return self._emit("Split", [value], what, outputs=len(sizes), axis=axis, split=list(sizes))
        return self._emit("Split", [value, self._ints(sizes)], what, outputs=len(sizes), axis=axis)

    def _transpose(self, value: Value, perm: Sequence[int], what: str) -> Value:
        if not isinstance(value, str):
            return np.transpose(value, perm)
        return self._emit("Transpose", [value], what, perm=list(perm))

    def _reshape(self, value: Value, shape: Sequence[int], what: str, name: Optional[str] = None) -> Value:
        if name is None and not isinstance(value, str):
            return np.reshape(value, shape)
        return self._emit("Reshape", [value, self._ints(shape)], what, names=[name] if name else None)

    def _concat(self, values: Sequence[Value], axis: int, what: str) -> Value:
        if len(values) == 1:
            return values[0]
        if not any(isinstance(v, str) for v in values):
            return np.concatenate(values, axis=axis)
        return self._emit("Concat", list(values), what, axis=axis)

    # arithmetic, folded on constants; None stands for a tensor known to be zero
    def _binary(self, op_type: str, a: Value, b: Value, what: str) -> Value:
        if not isinstance(a, str) and not isinstance(b, str):
            return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op_type](a, b).astype(self.dtype)
        return self._emit(op_type, [a, b], what)

    def _add(self, a: Optional[Value], b: Optional[Value], what: str) -> Optional[Value]:
        if a is None:
            return b
        if b is None:
            return a
        return self._binary("Add", a, b, what)

    def _mul(self, a: Optional[Value], b: Optional[Value], what: str) -> Optional[Value]:
        if a is None or b is None:
            return None
        return self._binary("Mul", a, b, what)

    def _matmul(self, a: Optional[Value], b: Union[Value, _QuantizedWeight], what: str) -> Optional[Value]:
        if a is None:
            return None
        if isinstance(b, _QuantizedWeight):
            return self._quantized_matmul(a, b, what)
        return self._emit("MatMul", [a, b], what)

    def _quantized_matmul(self, a: Value, b: _QuantizedWeight, what: str) -> Optional[Value]:
        """``a`` x ``b`` as onnxruntime's DynamicQuantizeLSTM computes it: ``a`` quantized to uint8 by its own
        range (DynamicQuantizeLinear, once per tensor whatever reads it), integer products, then both scales."""
        if not isinstance(a, str) and not np.any(a):
            return None  # a constant zero state: its product is zero
        name = self._name(a, f"{what}_rows")
        if name not in self._quantized_rows:
            self._quantized_rows[name] = self._emit("DynamicQuantizeLinear", [name], f"{what}_q", outputs=3)
        rows, scale, zero_point = self._quantized_rows[name]
        product = self._emit("MatMulInteger", [rows, b.codes, zero_point, b.zero_point], f"{what}_int")
        real = self._emit("Cast", [product], f"{what}_real", to=TensorProto.FLOAT)
        return self._emit("Mul", [real, self._emit("Mul", [scale, b.scale], f"{what}_scale")], what)

    def _quantized_weights(self, index: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Direction ``d`` of a DynamicQuantizeLSTM's weight input ``index`` (W 1, R 2): its codes [K, 4 * hidden],
        scales (one, or one per column) and zero point, all constants, or an error naming what is not."""
        scale_index, zero_index = (8, 9) if index == 1 else (10, 11)
        what = "W" if index == 1 else "R"
        values = [self.ctx.constant(name) if (name := self._input(i)) else None for i in (index, scale_index,
                                                                                           zero_index)]
        if any(v is None for v in values):
            raise self._unsupported(f"input {what} (or its scale or zero point)", "is not a constant",
                                    "give the quantized weights, scales and zero points as initializers")
        codes, scale, zero_point = values
        zeros = np.unique(np.asarray(zero_point)[d])
        if codes.dtype not in (np.int8, np.uint8) or len(zeros) != 1:
            raise self._unsupported(f"input {what}", "holds no 8-bit codes with one zero point per direction",
                                    "quantize the LSTM with onnxruntime's quantize_dynamic")
        return codes[d], np.asarray(scale, dtype=np.float32)[d], zeros.astype(codes.dtype).reshape(())

    def _clip(self, value: Value, what: str) -> Value:
        if self.clip is None:
            return value
        if self.ctx.opset < 11:
            return self._emit("Clip", [value], what, min=-self.clip, max=self.clip)
        return self._emit("Clip", [value, self._scalar(-self.clip), self._scalar(self.clip)], what)

    def _activate(self, function: tuple[str, float, float], value: Value, what: str, clip: bool = True) -> Value:
        """``function`` (name, alpha, beta) of ``value``, clipped first unless ``clip`` is False."""
        if clip:
            value = self._clip(value, f"{what}_clip")
        name, alpha, beta = function
        if name in ("Relu", "Tanh", "Sigmoid", "Softsign", "Softplus"):
            return self._emit(name, [value], what)
        if name in ("LeakyRelu", "Elu"):
            return self._emit(name, [value], what, alpha=alpha)
        if name == "HardSigmoid":
            return self._emit(name, [value], what, alpha=alpha, beta=beta)
        if name == "Affine":
            return self._emit("Add", [self._emit("Mul", [value, self._scalar(alpha)], f"{what}_scale"),
                                      self._scalar(beta)], what)
        if name == "ScaledTanh":
            inner = self._emit("Mul", [value, self._scalar(beta)], f"{what}_scale")
            return self._emit("Mul", [self._emit("Tanh", [inner], f"{what}_tanh"), self._scalar(alpha)], what)
        # ThresholdedRelu: x where x > alpha, else 0 (the op itself only exists from opset 10)
        if self.ctx.opset >= 10:
            return self._emit("ThresholdedRelu", [value], what, alpha=alpha)
        above = self._emit("Greater", [value, self._scalar(alpha)], f"{what}_above")
        mask = self._emit("Cast", [above], f"{what}_mask", to=helper.np_dtype_to_tensor_dtype(self.dtype))
        return self._emit("Mul", [value, mask], what)

    # -- the rewrite -----------------------------------------------------------------------
    def build(self) -> None:
        self._settings()
        seq, batch, hidden = self.seq_length, self.batch, self.hidden
        gates = _GATES[self.op] * hidden
        x = self._input(0)
        if self.layout == 1:
            x = self._transpose(x, (1, 0, 2), "X_time_major")
        x = self._reshape(x, (seq * batch, -1), "X_rows")
        w, r, b = self._operand(1), self._operand(2), self._operand(3)
        if self.quantized:  # onnxruntime's layout: [directions, K, gates]
            self._check_shape(1, (self.num_directions, None, gates))
            self._check_shape(2, (self.num_directions, hidden, gates))
        else:
            self._check_shape(1, (self.num_directions, gates, None))
            self._check_shape(2, (self.num_directions, gates, hidden))
        self._check_shape(3, (self.num_directions, 2 * gates))
        mask = self._sequence_mask()
        state_axis = 0 if self.layout == 0 else 1
        initial_h, initial_c, peephole = self._operand(5), None, None
        if self.op == "LSTM":
            initial_c, peephole = self._operand(6), self._operand(7)
            self._check_shape(7, (self.num_directions, 3 * hidden))
        state_shape = (self.num_directions, batch, hidden) if self.layout == 0 else \
            (batch, self.num_directions, hidden)
        self._check_shape(5, state_shape)
        if self.op == "LSTM":
            self._check_shape(6, state_shape)

        sequences, finals_h, finals_c = [], [], []
        for d in range(self.num_directions):
            tag = "" if self.num_directions == 1 else ("fw/" if d == 0 else "bw/")
            reverse = self.direction == "reverse" or d == 1
            if self.quantized:
                w_t: Union[Value, _QuantizedWeight] = _QuantizedWeight(*self._quantized_weights(1, d))
            else:
                w_t = self._transpose(self._direction(w, d, 0, (gates, -1), f"{tag}W"), (1, 0), f"{tag}W_T")
            bias, reset_bias = None, None
            if b is not None:
                w_bias, r_bias = self._split(self._direction(b, d, 0, (2 * gates,), f"{tag}B"), 0, [gates, gates],
                                              f"{tag}B_split")
                if self.op == "GRU" and self.linear_before_reset:
                    # Rbh multiplies with the reset gate, so only Rbz and Rbr join the projection.
                    r_zr, reset_bias = self._split(r_bias, 0, [2 * hidden, hidden], f"{tag}Rb_split")
                    zeros = np.zeros(hidden, dtype=self.dtype)
                    r_bias = self._concat([r_zr, zeros], 0, f"{tag}Rb_zr")
                bias = self._add(w_bias, r_bias, f"{tag}bias")
            projection = self._add(self._matmul(x, w_t, f"{tag}XW"), bias, f"{tag}XW_bias")
            steps = self._gate_inputs(projection, tag)
            state = (batch, hidden)
            h = None if initial_h is None else self._direction(initial_h, d, state_axis, state, f"{tag}initial_h")
            c = None if initial_c is None else self._direction(initial_c, d, state_axis, state, f"{tag}initial_c")
            p = None if peephole is None else self._split(
                self._direction(peephole, d, 0, (3 * hidden,), f"{tag}P"), 0, [hidden] * 3, f"{tag}P_split")
            acts = self.activations[d]
            step = {"LSTM": self._lstm_step, "GRU": self._gru_step, "RNN": self._rnn_step}[self.op]
            weights = self._quantized_recurrence(d) if self.quantized else self._recurrence_weights(
                self._direction(r, d, 0, (gates, hidden), f"{tag}R"), tag)
            outputs = [None] * seq
            for t in (reversed(range(seq)) if reverse else range(seq)):
                name = f"{tag}t{t}/"
                new_h, new_c = step(steps[t], h, c, weights, reset_bias, p, acts, name)
                if mask is not None:
                    outputs[t] = self._mul(new_h, mask[t], f"{name}Y")
                    new_h = self._keep(new_h, h, mask[t], f"{name}H_kept")
                    if self.op == "LSTM":
                        new_c = self._keep(new_c, c, mask[t], f"{name}C_kept")
                else:
                    outputs[t] = new_h
                h, c = new_h, new_c
            if mask is not None and self.may_be_empty:
                # As onnxruntime: an empty sequence ends in zero states, not in the initial ones.
                h, c = self._mul(h, mask[0], f"{tag}Y_h_empty"), self._mul(c, mask[0], f"{tag}Y_c_empty")
            sequences.append(outputs)
            finals_h.append(h)
            finals_c.append(c)
        self._outputs(sequences, finals_h, finals_c)

    def _check_shape(self, index: int, expected: tuple) -> None:
        name = self._input(index)
        if name is None:
            return
        dims = self.ctx.type_of(name)[1]
        if dims is None:
            return
        if len(dims) != len(expected) or any(
                e is not None and d is not None and d != e for d, e in zip(dims, expected)):
            what = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][index]
            raise self._invalid(f"input {what} '{name}' has shape {_show(dims)}, expected {_show(expected)}")

    def _gate_inputs(self, projection: Value, tag: str) -> list[list[Value]]:
        """Per time step, per gate, the [batch, hidden] slice of the input projection [seq*batch, gates*hidden].

        All the slicing happens here, off the recurrence: the steps then chain only
        MatMul/Add/Mul and activations, which vendors take as one partition.
        """
        seq, batch, hidden, gates = self.seq_length, self.batch, self.hidden, _GATES[self.op]
        if gates > 1:
            # [seq, batch, gate, hidden] -> [seq, gate, batch, hidden]: each (step, gate) is a run of rows.
            projection = self._reshape(projection, (seq, batch, gates, hidden), f"{tag}XW_gates")
            projection = self._transpose(projection, (0, 2, 1, 3), f"{tag}XW_gate_major")
            projection = self._reshape(projection, (seq * gates * batch, hidden), f"{tag}XW_rows")
        pieces = self._split(projection, 0, [batch] * (seq * gates), f"{tag}XW_step")
        return [pieces[t * gates:(t + 1) * gates] for t in range(seq)]

    def _recurrence_weights(self, r_d: Value, tag: str) -> list[Value]:
        """Rᵀ of one direction, one [hidden, hidden] matrix per gate (one H·Rᵀ product per gate).

        Every step reads them: a constant R becomes one initializer per gate here, not one per step
        (ddddocr's 32-step bidirectional LSTM held 512 MB of copies).
        """
        gates = _GATES[self.op]
        per_gate = self._split(r_d, 0, [self.hidden] * gates, f"{tag}R_split")
        return [self._name(self._transpose(r_g, (1, 0), f"{tag}R{g}_T"), f"{tag}R{g}_T")
                for g, r_g in enumerate(per_gate)]

    def _quantized_recurrence(self, d: int) -> list:
        """A DynamicQuantizeLSTM's R of direction ``d``, one int8 [hidden, hidden] weight per gate (its columns)."""
        codes, scale, zero_point = self._quantized_weights(2, d)
        h = self.hidden
        return [_QuantizedWeight(codes[:, g * h:(g + 1) * h], scale if scale.ndim == 0 else scale[g * h:(g + 1) * h],
                                 zero_point) for g in range(_GATES["LSTM"])]

    def _lstm_step(self, xs, h, c, weights, _reset_bias, p, acts, name):
        f_act, g_act, h_act = acts
        g_i, g_o, g_f, g_c = (self._add(x, self._matmul(h, r, f"{name}HR_{gate}"), f"{name}{gate}_pre")
                              for x, r, gate in zip(xs, weights, "iofc"))
        p_i, p_o, p_f = p if p is not None else (None, None, None)
        i = self._activate(f_act, self._add(g_i, self._mul(c, p_i, f"{name}Pi_C"), f"{name}i_peep"), f"{name}i")
        if self.input_forget:
            f = self._binary("Sub", self._scalar(1.0), i, f"{name}f")
        else:
            f = self._activate(f_act, self._add(g_f, self._mul(c, p_f, f"{name}Pf_C"), f"{name}f_peep"), f"{name}f")
        cell = self._activate(g_act, g_c, f"{name}c")
        new_c = self._add(self._mul(f, c, f"{name}f_C"), self._mul(i, cell, f"{name}i_c"), f"{name}C")
        o = self._activate(f_act, self._add(g_o, self._mul(new_c, p_o, f"{name}Po_C"), f"{name}o_peep"), f"{name}o")
        # As onnxruntime: clip bounds the gates' inputs, never the cell state h() reads.
        new_h = self._mul(o, self._activate(h_act, new_c, f"{name}C_act", clip=False), f"{name}H")
        return new_h, new_c

    def _gru_step(self, xs, h, _c, weights, reset_bias, _p, acts, name):
        f_act, g_act = acts
        (x_z, x_r, x_h), (r_z, r_r, r_h) = xs, weights
        z = self._activate(f_act, self._add(x_z, self._matmul(h, r_z, f"{name}HR_z"), f"{name}z_pre"), f"{name}z")
        r = self._activate(f_act, self._add(x_r, self._matmul(h, r_r, f"{name}HR_r"), f"{name}r_pre"), f"{name}r")
        if self.linear_before_reset:
            hr = self._add(self._matmul(h, r_h, f"{name}HR_h"), reset_bias, f"{name}HR_h_bias")
            recurrent = self._mul(r, hr, f"{name}r_HR")
        else:
            recurrent = self._matmul(self._mul(r, h, f"{name}r_H"), r_h, f"{name}rH_R")
        candidate = self._activate(g_act, self._add(x_h, recurrent, f"{name}h_pre"), f"{name}h")
        if h is None:
            # (1 - z) ⊙ h̃ when the previous state is zero
            return self._binary("Sub", candidate, self._mul(z, candidate, f"{name}z_h"), f"{name}H"), None
        # (1 - z) ⊙ h̃ + z ⊙ H  ==  h̃ + z ⊙ (H - h̃)
        delta = self._binary("Sub", h, candidate, f"{name}H_minus_h")
        return self._add(candidate, self._mul(z, delta, f"{name}z_delta"), f"{name}H"), None

    def _rnn_step(self, xs, h, _c, weights, _reset_bias, _p, acts, name):
        pre = self._add(xs[0], self._matmul(h, weights[0], f"{name}HR"), f"{name}pre")
        return self._activate(acts[0], pre, f"{name}H"), None

    # -- sequence_lens ---------------------------------------------------------------------
    def _sequence_mask(self) -> Optional[list[Value]]:
        """Per time step a [batch, 1] mask (1 while the step is inside the sequence), or None if all are."""
        name = self._input(4)
        if name is None:
            return None
        seq, batch = self.seq_length, self.batch
        lengths = self.ctx.constant(name)
        if lengths is not None:
            lengths = np.asarray(lengths).reshape(-1)
            if lengths.size != batch:
                raise self._invalid(f"sequence_lens '{name}' has {lengths.size} values for batch {batch}")
            if np.any(lengths < 0) or np.any(lengths > seq):
                raise self._invalid(f"sequence_lens '{name}' holds {lengths.tolist()}, outside 0..{seq} "
                                    "(the sequence length)")
            if np.all(lengths == seq):
                return None  # every sequence is full: nothing to mask
            self.may_be_empty = bool(np.any(lengths == 0))
            masks = (np.arange(seq)[:, None] < lengths[None, :]).astype(self.dtype)
            return [masks[t].reshape(batch, 1) for t in range(seq)]
        self.may_be_empty = True
        float_type = helper.np_dtype_to_tensor_dtype(self.dtype)
        # Less on integers only exists from opset 9: compare as floats, exact for any real length.
        lengths_f = self._emit("Cast", [name], "seq_lens_float", to=float_type)
        lengths_row = self._reshape(lengths_f, (1, batch), "seq_lens_row")
        steps = np.arange(seq, dtype=self.dtype).reshape(seq, 1)
        inside = self._emit("Less", [steps, lengths_row], "step_inside")
        masks = self._emit("Cast", [inside], "step_mask", to=float_type)
        masks = self._reshape(masks, (seq * batch, 1), "step_mask_rows")
        return self._split(masks, 0, [batch] * seq, "step_mask_split")

    def _keep(self, new: Value, old: Optional[Value], mask: Value, what: str) -> Value:
        """``new`` inside the sequence, ``old`` (None: zero) past its end."""
        if old is None:
            return self._mul(new, mask, what)
        delta = self._binary("Sub", new, old, f"{what}_delta")
        return self._add(old, self._mul(delta, mask, f"{what}_masked"), what)

    # -- outputs ---------------------------------------------------------------------------
    def _outputs(self, sequences, finals_h, finals_c) -> None:
        seq, batch, hidden, dirs = self.seq_length, self.batch, self.hidden, self.num_directions
        y, y_h, y_c = self._output(0), self._output(1), self._output(2)
        if y is not None:
            ordered = [sequences[d][t] for t in range(seq) for d in range(dirs)]
            if self.layout == 0:
                joined = self._concat(ordered, 0, "Y_rows")
                self._reshape(joined, (seq, dirs, batch, hidden), "Y", name=y)
            else:
                joined = self._concat(ordered, 1, "Y_cols")
                self._reshape(joined, (batch, seq, dirs, hidden), "Y", name=y)
        for name, finals, what in ((y_h, finals_h, "Y_h"), (y_c, finals_c, "Y_c")):
            if name is None:
                continue
            if self.op != "LSTM" and what == "Y_c":
                raise self._invalid("has a third output; only LSTM has Y_c")
            finals = [f if f is not None else np.zeros((batch, hidden), self.dtype) for f in finals]
            if self.layout == 0:
                self._reshape(self._concat(finals, 0, f"{what}_rows"), (dirs, batch, hidden), what, name=name)
            else:
                self._reshape(self._concat(finals, 1, f"{what}_cols"), (batch, dirs, hidden), what, name=name)


def _show(dims) -> str:
    if dims is None:
        return "unknown"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"

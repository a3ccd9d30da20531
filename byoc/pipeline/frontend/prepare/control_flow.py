"""Loop and Scan unrolled into the ops of their bodies, where the trip count is known when the model is compiled.

TVM's Relax importer has neither op. Unrolled, a body's convs and matmuls are
ordinary nodes of the main graph: the vendors' rules see them, and a loop
over a few layers becomes one partition, as the layers would be. onnxruntime
keeps the loop on its CPU provider and partitions each body alone; onnx-mlir
lowers both ops for static shapes, as this does.

* **Loop** (opset 11+ semantics), where the trip count ``M`` is a constant (an
  initializer or a Constant node; folding makes most computed counts one:
  the unrolling runs again after it). Iteration ``k`` reads the constant
  ``k`` as ``iteration_num``. When the body's condition passes its input
  through (or is a constant true), every iteration runs. When the body
  computes it, the loop runs its ``M`` iterations with each carried value
  kept (``Where``) once the condition has been false: what ONNX's loop
  returns, with no data-dependent shape. Scan outputs of a full loop are
  each iteration's value, stacked on a new first axis. Every other Loop
  stays as it is, for the host to run (:mod:`byoc.pipeline.frontend.loop_bodies`):
  a trip count known only when the model runs, no trip count (a while loop),
  scan outputs of a loop that may stop early, a carried value whose shape
  the body does not declare unchanged in such a loop, scan outputs of 0
  iterations, and more iterations than :data:`MAX_UNROLLED_NODES` allows.
* **Scan** (opset 9+), where the sequence length is the static size of the
  scan inputs' scan axis. Iteration ``t`` reads each scan input's slice ``t``
  (``Gather``; from the end for a reverse direction) and each scan output is
  the slices stacked along its axis. Any other Scan (a length known only when
  the model runs, more steps than :data:`MAX_UNROLLED_NODES` allows, scan
  outputs of 0 steps) becomes a Loop the host runs (:meth:`_Unroller._scan_as_loop`).
* **Scan** at opset 8, whose states and scan inputs lead with a batch axis the
  body does not see: unrolled per batch entry and step where both are static
  and each entry scans the whole length (:meth:`_Unroller._batched_scan`).

Nodes of iteration ``k`` are named ``<loop node>/<k>/<body node>`` and their
values ``<loop node>/<k>/<body value>``. Subgraphs inside a body (an ``If``)
are copied with the body's names renamed. Nested loops unroll from the
outside in, each pass taking what the last one exposed.

What cannot run raises :class:`~byoc.errors.UnsupportedAttributeError` naming
the node and why: a loop with neither trip count nor condition (unbounded),
a Scan before opset 9 over a batch or length only the run tells (or entries of
several lengths), a Scan the host would run whose scanned tensors have no
known rank, or a reverse scan output of one before opset 10.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import helper, numpy_helper

from byoc.errors import UnsupportedAttributeError
from byoc.pipeline.frontend.onnx_model import constant_node_value, default_opset, subgraphs

__all__ = ["CONTROL_FLOW_OPS", "MAX_UNROLLED_NODES", "unroll_control_flow"]

CONTROL_FLOW_OPS = ("Loop", "Scan")

#: Body nodes a model's Loops and Scans may unroll into, nested ones included; beyond it the host runs the loop
#: rather than the graph growing without bound.
MAX_UNROLLED_NODES = 20000


def unroll_control_flow(model: onnx.ModelProto, required: bool = False) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` with every Loop and Scan of its main graph unrolled, and each new node's name -> the Loop or Scan
    node it comes from.

    A node this cannot unroll stays as it is, unless ``required``: then it raises
    :class:`~byoc.errors.UnsupportedAttributeError` naming the node and why. ``model`` itself when there is
    nothing to unroll (no copy).
    """
    if not any(_is_control_flow(n) for n in model.graph.node):
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    made_from: dict[str, str] = {}
    budget = [MAX_UNROLLED_NODES]  # what the passes may still unroll, all loops of the model together
    while True:  # nested loops: each pass unrolls the ones the last one brought into the main graph
        unroller = _Unroller(out, required, budget)
        nodes: list[onnx.NodeProto] = []
        changed = False
        for node in out.graph.node:
            unrolled = unroller.unroll(node) if _is_control_flow(node) else None
            if unrolled is None:
                nodes.append(node)
                continue
            changed = True
            source = made_from.get(node.name, node.name)
            made_from.pop(node.name, None)
            for new in unrolled:
                made_from[new.name] = source
            nodes.extend(unrolled)
        if not changed:
            return (out, made_from) if made_from else (model, {})
        del out.graph.node[:]
        out.graph.node.extend(nodes)
        out.graph.initializer.extend(unroller.initializers)


def _is_control_flow(node: onnx.NodeProto) -> bool:
    return node.domain in ("", "ai.onnx") and node.op_type in CONTROL_FLOW_OPS


class _Unroller:
    """Unrolls the Loop and Scan nodes of one graph; collects the constants the unrolled nodes read."""

    def __init__(self, model: onnx.ModelProto, required: bool, budget: list):
        self.graph = model.graph
        self.budget = budget
        self.opset = default_opset(model)
        self.required = required
        self.initializers: list[onnx.TensorProto] = []
        self.constants: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        for node in self.graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = constant_node_value(node)
                if value is not None:
                    self.constants[node.output[0]] = value
        self._shapes: Optional[dict[str, list]] = None
        self._model = model

    # -- refusing ------------------------------------------------------------------------------------------------
    def _cannot(self, node: onnx.NodeProto, why: str, advice: str) -> None:
        if self.required:
            raise UnsupportedAttributeError(f"{node.op_type} node {node.name!r}: {why}; {advice}")

    def unroll(self, node: onnx.NodeProto) -> Optional[list[onnx.NodeProto]]:
        """The nodes that replace ``node``, or None when it stays (see :func:`unroll_control_flow`)."""
        body = next(iter(subgraphs(node)), None)
        if body is None:
            return None
        return self._loop(node, body) if node.op_type == "Loop" else self._scan(node, body)

    # -- Loop ----------------------------------------------------------------------------------------------------
    def _loop(self, node: onnx.NodeProto, body: onnx.GraphProto) -> Optional[list[onnx.NodeProto]]:
        trip, cond = _at(node.input, 0), _at(node.input, 1)
        if not trip and not cond:
            self._cannot(node, "a loop with neither a trip count nor a condition runs without bound",
                         "give it a trip count (ONNX Loop's input M)")
            return None
        count = self.constants.get(trip) if trip else None
        if count is None:  # iterations known only when the model runs: the host runs the loop (loop_bodies)
            return None
        count = int(np.asarray(count).reshape(-1)[0])
        if cond and cond in self.constants and not bool(np.asarray(self.constants[cond]).reshape(-1)[0]):
            count = 0
        carried = list(node.input[2:])
        n_carried, n_scan = len(carried), len(body.output) - 1 - len(carried)
        stops = not _passes_condition_through(body, self.constants)
        if cond and cond not in self.constants:
            stops = True
        if stops and n_scan and count:  # as many scan outputs as iterations run, which the data tells: the host
            return None                 # runs the loop (loop_bodies)
        if stops and count and not _carried_shapes_kept(body, n_carried):
            # Where(running, new, old) is the loop's value only if new and old have one shape: a value whose shape
            # may change runs in the host loop, which checks the body keeps it
            return None
        if not self._fits(body, count) or (n_scan and not count):
            return None  # too many to unroll, or scan outputs of no iteration: the host runs the loop
        nodes: list[onnx.NodeProto] = []
        prefix = node.name
        running = cond if (stops and cond) else ""
        if stops and not running:
            running = self._constant(f"{prefix}/true", np.array(True))
        scans: list[list[str]] = [[] for _ in range(n_scan)]
        for k in range(count):
            rename = {body.input[0].name: self._constant(f"{prefix}/{k}/iteration", np.array(k, dtype=np.int64))}
            if len(body.input) > 1:
                rename[body.input[1].name] = running or self._constant(f"{prefix}/true", np.array(True))
            for vi, value in zip(body.input[2:], carried):
                rename[vi.name] = value
            iteration, outputs = self._inline(body, rename, f"{prefix}/{k}")
            nodes += iteration
            new_carried = outputs[1:1 + n_carried]
            if stops:
                keep = running
                new_carried = [self._node(nodes, "Where", [keep, new, old], f"{prefix}/{k}/kept_{i}")
                               for i, (new, old) in enumerate(zip(new_carried, carried))]
                running = self._node(nodes, "And", [running, outputs[0]], f"{prefix}/{k}/running")
            carried = new_carried
            for i, value in enumerate(outputs[1 + n_carried:]):
                scans[i].append(self._node(nodes, "Unsqueeze", [value], f"{prefix}/{k}/stacked_{i}", axes=[0]))
        finals = carried + [self._stack(nodes, items, 0, f"{prefix}/scan_{i}") for i, items in enumerate(scans)]
        return nodes + self._bind_outputs(node, finals)

    # -- Scan ----------------------------------------------------------------------------------------------------
    def _scan(self, node: onnx.NodeProto, body: onnx.GraphProto) -> Optional[list[onnx.NodeProto]]:
        if self.opset < 9:
            return self._batched_scan(node, body)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "body"}
        n_scan_in = int(attrs["num_scan_inputs"])
        n_state = len(node.input) - n_scan_in
        n_scan_out = len(body.output) - n_state
        in_axes = list(attrs.get("scan_input_axes", [0] * n_scan_in))
        in_dirs = list(attrs.get("scan_input_directions", [0] * n_scan_in))
        out_axes = list(attrs.get("scan_output_axes", [0] * n_scan_out))
        out_dirs = list(attrs.get("scan_output_directions", [0] * n_scan_out))
        scan_inputs = list(node.input[n_state:])
        lengths = set()
        for name, axis in zip(scan_inputs, in_axes):
            shape = self._shape(name)
            size = None if shape is None or not shape else shape[axis % len(shape)]
            lengths.add(size if isinstance(size, int) else None)
        length = lengths.pop() if len(lengths) == 1 else None
        if length is None or (n_scan_out and not length) or not self._fits(body, length):
            # a length only the run tells, no step to type the outputs by, or too many steps: the host loops
            return self._scan_as_loop(node, body, n_state, in_axes, in_dirs, out_axes, out_dirs)
        prefix = node.name
        nodes: list[onnx.NodeProto] = []
        states = list(node.input[:n_state])
        scans: list[list[str]] = [[] for _ in range(n_scan_out)]
        for t in range(length):
            rename = dict(zip((vi.name for vi in body.input[:n_state]), states))
            for i, (name, axis, reverse) in enumerate(zip(scan_inputs, in_axes, in_dirs)):
                index = self._constant(f"{prefix}/{t}/index_{i}",
                                       np.array(length - 1 - t if reverse else t, dtype=np.int64))
                rank = len(self._shape(name) or [])
                rename[body.input[n_state + i].name] = self._node(
                    nodes, "Gather", [name, index], f"{prefix}/{t}/slice_{i}", axis=axis % rank)
            iteration, outputs = self._inline(body, rename, f"{prefix}/{t}")
            nodes += iteration
            states = outputs[:n_state]
            for i, (value, axis) in enumerate(zip(outputs[n_state:], out_axes)):
                # a negative axis counts from the end of the stacked output, as Unsqueeze's does
                scans[i].append(self._node(nodes, "Unsqueeze", [value], f"{prefix}/{t}/stacked_{i}", axes=[axis]))
        finals = list(states)
        for i, (items, axis, reverse) in enumerate(zip(scans, out_axes, out_dirs)):
            finals.append(self._stack(nodes, items[::-1] if reverse else items, axis, f"{prefix}/scan_{i}"))
        return nodes + self._bind_outputs(node, finals)

    def _batched_scan(self, node: onnx.NodeProto, body: onnx.GraphProto) -> Optional[list[onnx.NodeProto]]:
        """Opset 8's Scan, whose states and scan inputs have a batch axis first (the scan inputs' sequence axis
        second) that the body does not see: unrolled per batch entry and step, where both are static and every
        entry's length is the whole axis (``sequence_lens`` absent, or a constant of that length each)."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name != "body"}
        n_scan_in = int(attrs["num_scan_inputs"])
        lengths_input, states_in = node.input[0], list(node.input[1:len(node.input) - n_scan_in])
        scan_inputs = list(node.input[len(node.input) - n_scan_in:])
        n_state, n_scan_out = len(states_in), len(body.output) - len(states_in)
        directions = list(attrs.get("directions", [0] * n_scan_in))
        shapes = [self._shape(name) for name in scan_inputs]
        sizes = {tuple(shape[:2]) if shape is not None and len(shape) >= 2 else None for shape in shapes}
        batch, length = next(iter(sizes)) if len(sizes) == 1 and None not in sizes else (None, None)
        if not isinstance(batch, int) or not isinstance(length, int):
            self._cannot(node, "Scan before opset 9 (with a batch axis) over a batch or length known only when the "
                         "model runs", "export at opset 9 or later, or give the input shapes")
            return None
        given = self.constants.get(lengths_input) if lengths_input else None
        if lengths_input and (given is None or np.any(np.asarray(given) != length)):
            self._cannot(node, "Scan before opset 9 with sequence_lens that are not each the whole length",
                         "export at opset 9 or later")
            return None
        if not length or not self._fits(body, batch * length):
            self._cannot(node, "Scan before opset 9 (with a batch axis) of more steps than byoc unrolls",
                         "export at opset 9 or later")
            return None
        prefix = node.name
        nodes: list[onnx.NodeProto] = []
        finals: list[list[str]] = [[] for _ in range(n_state + n_scan_out)]
        for b in range(batch):
            at_b = self._constant(f"{prefix}/batch_{b}", np.array(b, dtype=np.int64))
            states = [self._node(nodes, "Gather", [name, at_b], f"{prefix}/{b}/state_{k}", axis=0)
                      for k, name in enumerate(states_in)]
            entries = [self._node(nodes, "Gather", [name, at_b], f"{prefix}/{b}/input_{i}", axis=0)
                       for i, name in enumerate(scan_inputs)]
            scans: list[list[str]] = [[] for _ in range(n_scan_out)]
            for t in range(length):
                rename = dict(zip((vi.name for vi in body.input[:n_state]), states))
                for i, (entry, reverse) in enumerate(zip(entries, directions)):
                    index = self._constant(f"{prefix}/step_{length - 1 - t if reverse else t}",
                                           np.array(length - 1 - t if reverse else t, dtype=np.int64))
                    rename[body.input[n_state + i].name] = self._node(
                        nodes, "Gather", [entry, index], f"{prefix}/{b}/{t}/slice_{i}", axis=0)
                iteration, outputs = self._inline(body, rename, f"{prefix}/{b}/{t}")
                nodes += iteration
                states = outputs[:n_state]
                for i, value in enumerate(outputs[n_state:]):
                    scans[i].append(self._node(nodes, "Unsqueeze", [value], f"{prefix}/{b}/{t}/stacked_{i}", axes=[0]))
            entry_values = states + [self._stack(nodes, items, 0, f"{prefix}/{b}/scan_{i}")
                                     for i, items in enumerate(scans)]
            for k, value in enumerate(entry_values):
                finals[k].append(self._node(nodes, "Unsqueeze", [value], f"{prefix}/{b}/batched_{k}", axes=[0]))
        return nodes + self._bind_outputs(node, [self._stack(nodes, items, 0, f"{prefix}/output_value_{k}")
                                                 for k, items in enumerate(finals)])

    def _scan_as_loop(self, node: onnx.NodeProto, body: onnx.GraphProto, n_state: int, in_axes: list,
                      in_dirs: list, out_axes: list, out_dirs: list) -> Optional[list[onnx.NodeProto]]:
        """The Scan as a Loop the host runs (:mod:`byoc.pipeline.frontend.loop_bodies`): its trip count the first
        scan input's length, each step's slices Gathers in the body, each scan output stacked by the Loop on a
        new first axis, then reversed and moved to its axis where the Scan says so."""
        prefix, scan_inputs = node.name, list(node.input[n_state:])
        ranks = [len(shape) if (shape := self._shape(name)) is not None else None for name in scan_inputs]
        out_ranks = [len(vi.type.tensor_type.shape.dim) if vi.type.tensor_type.HasField("shape") else None
                     for vi in body.output[n_state:]]
        if None in ranks or None in out_ranks:
            self._cannot(node, "a scan input or output of unknown rank", "give the scanned tensors known ranks")
            return None
        if any(out_dirs) and self.opset < 10:
            self._cannot(node, "a reverse scan output over a length known only when the model runs, before "
                         "opset 10 (no Slice step)", "export at opset 10 or later")
            return None
        nodes: list[onnx.NodeProto] = []
        shape = self._node(nodes, "Shape", [scan_inputs[0]], f"{prefix}/input_shape")
        axis = self._constant(f"{prefix}/scan_axis", np.array(in_axes[0] % ranks[0], dtype=np.int64))
        count = self._node(nodes, "Gather", [shape, axis], f"{prefix}/length", axis=0)
        iteration, cond = f"{prefix}/iteration", f"{prefix}/cond"
        steps: list[onnx.NodeProto] = []
        last = None
        for i, (name, in_axis, reverse) in enumerate(zip(scan_inputs, in_axes, in_dirs)):
            index = iteration
            if reverse:  # step t reads slice length - 1 - t
                last = last or self._node(steps, "Sub", [count, self._constant(f"{prefix}/one", np.array(1, np.int64))],
                                          f"{prefix}/last")
                index = self._node(steps, "Sub", [last, iteration], f"{prefix}/index_{i}")
            steps.append(helper.make_node("Gather", [name, index], [body.input[n_state + i].name],
                                          name=f"{prefix}/slice_{i}", axis=in_axis % ranks[i]))
        steps.append(helper.make_node("Identity", [cond], [f"{prefix}/cond_out"], name=f"{prefix}/cond_out"))
        loop_body = helper.make_graph(
            steps + list(body.node), f"{body.name or prefix}_loop",
            [helper.make_tensor_value_info(iteration, onnx.TensorProto.INT64, []),
             helper.make_tensor_value_info(cond, onnx.TensorProto.BOOL, []), *body.input[:n_state]],
            [helper.make_tensor_value_info(f"{prefix}/cond_out", onnx.TensorProto.BOOL, []), *body.output],
            list(body.initializer))
        stacked = [f"{prefix}/stacked_{j}" for j in range(len(out_axes))]
        states = [f"{prefix}/state_{k}" for k in range(n_state)]
        nodes.append(helper.make_node("Loop", [count, "", *node.input[:n_state]], states + stacked,
                                      name=f"{prefix}/loop", body=loop_body))
        finals = list(states)
        for j, (value, out_axis, reverse, rank) in enumerate(zip(stacked, out_axes, out_dirs, out_ranks)):
            if reverse:
                value = self._node(nodes, "Slice", [
                    value, *(self._constant(f"{prefix}/flip_{what}", np.array([v], np.int64))
                             for what, v in (("start", -1), ("end", np.iinfo(np.int64).min), ("axis", 0),
                                             ("step", -1)))], f"{prefix}/reversed_{j}")
            out_axis %= rank + 1
            if out_axis:
                perm = list(range(1, out_axis + 1)) + [0] + list(range(out_axis + 1, rank + 1))
                value = self._node(nodes, "Transpose", [value], f"{prefix}/moved_{j}", perm=perm)
            finals.append(value)
        return nodes + self._bind_outputs(node, finals)

    # -- shared pieces -------------------------------------------------------------------------------------------
    def _fits(self, body: onnx.GraphProto, count: int) -> bool:
        """Whether ``count`` iterations of ``body`` fit in what the model may still unroll; takes them from it
        (:data:`MAX_UNROLLED_NODES`: beyond it the host runs the loop)."""
        size = count * max(1, _node_count(body))
        if size > self.budget[0]:
            return False
        self.budget[0] -= size
        return True

    def _inline(self, body: onnx.GraphProto, rename: dict[str, str], prefix: str) -> tuple[list, list[str]]:
        """Copies of ``body``'s nodes reading ``rename``'s values for its inputs, and the names of its outputs."""
        rename = dict(rename)
        for tensor in body.initializer:
            rename[tensor.name] = self._constant(f"{prefix}/{tensor.name}", numpy_helper.to_array(tensor))
        for node in body.node:
            for output in node.output:
                if output:
                    rename[output] = f"{prefix}/{output}"
        nodes = []
        for node in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = f"{prefix}/{node.name or node.output[0]}"
            copy.input[:] = [rename.get(name, name) for name in node.input]
            copy.output[:] = [rename.get(name, name) for name in node.output]
            for sub in subgraphs(copy):
                _rename_outer_names(sub, rename)
            nodes.append(copy)
        # a body output may be one of its inputs, or an outer value (read as is)
        return nodes, [rename.get(vi.name, vi.name) for vi in body.output]

    def _bind_outputs(self, node: onnx.NodeProto, finals: list[str]) -> list[onnx.NodeProto]:
        """Identity nodes writing the Loop's or Scan's own output names (readers and graph outputs keep them)."""
        return [helper.make_node("Identity", [value], [output], name=f"{node.name}/output_{i}")
                for i, (output, value) in enumerate(zip(node.output, finals)) if output]

    def _stack(self, nodes: list, items: list[str], axis: int, name: str) -> str:
        if len(items) == 1:
            return items[0]
        return self._node(nodes, "Concat", items, name, axis=axis)

    def _node(self, nodes: list, op_type: str, inputs: list[str], name: str, axes=None, **attrs) -> str:
        """Append one node named ``name`` writing the value ``name``; Unsqueeze's axes as its opset spells them."""
        if op_type == "Unsqueeze":
            if self.opset >= 13:
                inputs = inputs + [self._constant(f"{name}/axes", np.array(axes, dtype=np.int64))]
            else:
                attrs["axes"] = axes
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def _constant(self, name: str, value: np.ndarray) -> str:
        if name not in self.constants:
            self.constants[name] = value
            self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def _shape(self, name: str) -> Optional[list]:
        """Tensor ``name``'s dims (ints, or None where not static) where shape inference knows them."""
        if name in self.constants:
            return list(self.constants[name].shape)
        if self._shapes is None:
            inferred = onnx.shape_inference.infer_shapes(self._model)
            self._shapes = {}
            for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
                if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                    self._shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                             for d in vi.type.tensor_type.shape.dim]
        return self._shapes.get(name)


def _at(names, index: int) -> str:
    return names[index] if index < len(names) else ""


def _node_count(graph: onnx.GraphProto) -> int:
    return sum(1 + sum(_node_count(sub) for sub in subgraphs(node)) for node in graph.node)


def _carried_shapes_kept(body: onnx.GraphProto, n_carried: int) -> bool:
    """Whether the body declares each carried value's output with the shape of its input: every dim a number or
    a name, the same on both."""
    def dims(vi: onnx.ValueInfoProto) -> Optional[list]:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            return None
        out = []
        for d in vi.type.tensor_type.shape.dim:
            if not (d.HasField("dim_value") or d.dim_param):
                return None
            out.append(d.dim_value if d.HasField("dim_value") else d.dim_param)
        return out

    pairs = zip(body.input[2:2 + n_carried], body.output[1:1 + n_carried])
    return all(dims(i) is not None and dims(i) == dims(o) for i, o in pairs)


def _passes_condition_through(body: onnx.GraphProto, outer: dict) -> bool:
    """Whether the body's condition output is its condition input (through Identity nodes) or a constant true, of
    the body's or of the enclosing graph's (``outer``: TorchScript's for-loop reads the main graph's true)."""
    cond_in = body.input[1].name if len(body.input) > 1 else None
    writer = {out: node for node in body.node for out in node.output}
    constants = {**outer, **{t.name: numpy_helper.to_array(t) for t in body.initializer}}
    name = body.output[0].name
    while True:
        if name == cond_in:
            return True
        if name in constants:
            return bool(np.asarray(constants[name]).reshape(-1)[0])
        node = writer.get(name)
        if node is None:
            return False
        if node.op_type == "Identity":
            name = node.input[0]
            continue
        if node.op_type == "Constant":
            value = constant_node_value(node)
            return value is not None and value.dtype == np.bool_ and bool(value.reshape(-1)[0])
        return False


def _rename_outer_names(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename, in place, the values ``graph`` (and its subgraphs) reads from enclosing scopes."""
    local = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    local |= {out for node in graph.node for out in node.output}
    outer = {name: new for name, new in rename.items() if name not in local}
    for node in graph.node:
        node.input[:] = [outer.get(name, name) for name in node.input]
        for sub in subgraphs(node):
            _rename_outer_names(sub, outer)
    for vi in graph.output:
        if vi.name in outer:  # a branch returning an outer value: an Identity keeps the output's name
            graph.node.append(helper.make_node("Identity", [outer[vi.name]], [vi.name]))


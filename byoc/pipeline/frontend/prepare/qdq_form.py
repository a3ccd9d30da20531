"""Keep a QDQ model's node units whole through simplification and import.

A vendor takes ``DQ(x), DQ(w), DQ(b) -> Conv -> Q(y)`` as one int8 conv
only when it sees the integer weight and its scale. Two steps of preparation
would lose them:

* constant folding (onnxsim, onnxslim, then Relax's ``FoldConstant``)
  computes ``DequantizeLinear`` of a constant integer weight into a float
  constant. :func:`held_integer_constants` lifts every integer tensor a
  DequantizeLinear reads into a graph input for the time of folding, and
  :func:`restore_held` puts it back as an initializer;
* onnxruntime's quantizer writes one DequantizeLinear per tensor, shared by
  every consumer (a residual branch reads it twice), while a node unit owns
  its DequantizeLinear nodes. :func:`unshared_dequantize` gives each consumer
  its own copy, as onnxruntime's ``EnsureUniqueDQForNodeUnit`` does.

Neither step changes what the model computes. A third, :func:`gathered_before_dequantize`, moves an embedding
lookup in front of its table's dequantization, which computes the same too.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_INTEGER_TYPES = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32}


def held_integer_constants(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto]]:
    """``model`` with the integer initializers DequantizeLinear reads turned into graph inputs, and the packed
    weights of MatMulNBits (:mod:`byoc.pipeline.frontend.matmul_nbits`), which folding would widen to float32.

    Only those a node unit may take are held: a DequantizeLinear some of whose
    readers also read a value computed from the model's inputs. One whose readers
    compute constants alone (YOLOv8's anchor grid, quantized by onnxruntime:
    ``DQ(c) + Range(...) -> Q -> DQ -> Reshape -> ... -> Expand``) is left to be
    folded; held, that grid was six partitions recomputed on every call.

    Returns ``(model, held)``: ``model`` itself when nothing is held (no copy),
    else a copy, and the held initializers by name.
    """
    initializers = {t.name: t for t in model.graph.initializer}
    runtime = _runtime_values(model.graph, set(initializers))
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in model.graph.output}

    def read_at_run_time(dq: onnx.NodeProto) -> bool:
        return dq.output[0] in outputs or any(
            _has_subgraph(r) or any(name in runtime for name in r.input) for r in readers.get(dq.output[0], ()))

    from byoc.pipeline.frontend.matmul_nbits import held_weights

    names = held_weights(model) | {n.input[0] for n in model.graph.node
             if n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") and n.input
             and n.input[0] in initializers and initializers[n.input[0]].data_type in _INTEGER_TYPES
             and read_at_run_time(n)}
    # The 8-bit weight of a MatMulInteger (quantize_dynamic's matmuls): folded, TVM's import widens it to an
    # int32 constant (4x its bytes), and a vendor's dynamic int8 unit needs it as the integer it is.
    names |= {n.input[1] for n in model.graph.node
              if n.op_type == "MatMulInteger" and n.domain in ("", "ai.onnx") and len(n.input) > 1
              and n.input[1] in initializers and initializers[n.input[1]].data_type in _INTEGER_TYPES
              and n.input[0] in runtime}
    if not names:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    held = {t.name: t for t in out.graph.initializer if t.name in names}
    kept = [t for t in out.graph.initializer if t.name not in names]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    for name, tensor in held.items():
        out.graph.input.append(helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
    return out, held


#: Ops whose result is not a function of their inputs: never constant.
_NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli"}


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _runtime_values(graph: onnx.GraphProto, constants: set[str]) -> set[str]:
    """Names of the values computed from the graph's inputs (not from constants alone), in one pass over the
    (topologically sorted) nodes. A node with a subgraph may read outer values its inputs do not name: its
    results count as computed at run time, as do a random op's."""
    runtime = {vi.name for vi in graph.input if vi.name not in constants}
    for node in graph.node:
        if node.op_type in _NONDETERMINISTIC or _has_subgraph(node) or any(n in runtime for n in node.input):
            runtime.update(node.output)
    return runtime


def restore_held(model: onnx.ModelProto, held: dict[str, onnx.TensorProto]) -> None:
    """Turn the graph inputs :func:`held_integer_constants` made back into initializers, in place.

    An input the simplifier dropped (its reader was dead code) is not restored.
    """
    if not held:
        return
    inputs = [vi for vi in model.graph.input if vi.name not in held]
    present = {vi.name for vi in model.graph.input if vi.name in held}
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.graph.initializer.extend(held[name] for name in held if name in present)


def unshared_dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Give every consumer of a shared DequantizeLinear its own copy.

    Returns ``(model, copies)``: ``model`` itself when no DequantizeLinear is
    shared, else a changed copy, and ``{copy's node name: the original's
    name}``. A DequantizeLinear whose result is also a graph output keeps it.
    """
    if not any(_shared(model.graph)):
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
    outputs = {o.name for o in graph.output}
    copies: dict[str, str] = {}
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        readers = consumers.get(node.output[0], [])
        for k, (reader, index) in enumerate(readers[1:] if node.output[0] not in outputs else readers, start=1):
            name = f"{node.name}/for_{reader.name}_{k}"
            copy = helper.make_node("DequantizeLinear", list(node.input), [name], name=name)
            copy.attribute.extend(node.attribute)
            reader.input[index] = name
            nodes.append(copy)
            copies[name] = node.name
    del graph.node[:]
    graph.node.extend(nodes)
    return out, copies


def unshared_dynamic_quantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """Give every MatMulInteger a DynamicQuantizeLinear of its own (quantize_dynamic's Q, K and V read one).

    A dynamic int8 unit (``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(x_scale * w_scale)``) is
    one match, and matches do not overlap: a shared DynamicQuantizeLinear would give one unit to the first
    matmul and leave the others' integer ops on the host. Each reader after the first gets a copy, and the
    ``Mul(x_scale, w_scale)`` of its own scale product reads the copy's scale. A runtime may compute the copies'
    quantization once (they are one function of one tensor). Returns ``(model, copies)`` as
    :func:`unshared_dequantize` does; a reader whose chain is not that form keeps the shared node.
    """
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    by_name = {n.name: n for n in graph.node}

    def starts(node: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The readers of a DynamicQuantizeLinear's x_q that start a unit: a MatMulInteger, or the Cast to float32
        that a ConvInteger's rewrite starts with (``<node>/x_f32``, qoperators.py)."""
        return [r for r in readers.get(node.output[0], ()) if r.op_type == "MatMulInteger"
                or (r.op_type == "Cast" and r.name.endswith("/x_f32") and f"{r.name[:-6]}/conv" in by_name)]

    shared = [n for n in graph.node if n.op_type == "DynamicQuantizeLinear" and n.domain in ("", "ai.onnx")
              and len(n.output) == 3 and len(starts(n)) > 1]
    if not shared:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    readers = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    by_name = {n.name: n for n in graph.node}
    copies: dict[str, str] = {}
    added: dict[str, list[onnx.NodeProto]] = {}

    def only_reader(name: str, op_type: str):
        found = readers.get(name, [])
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def zero_point_readers(start: onnx.NodeProto, x_q: str, x_zp: str) -> Optional[list[tuple[onnx.NodeProto, int]]]:
        """(node, input index) where the unit starting at ``start`` reads x_zp; None if it is not the form."""
        if start.op_type == "MatMulInteger":
            if start.input[0] != x_q or x_q in start.input[1:2] or (len(start.input) > 2 and start.input[2] not in ("", x_zp)):
                return None
            return [(start, 2)] if len(start.input) > 2 and start.input[2] else []
        zp_cast = by_name.get(f"{start.name[:-6]}/x_zp_f32")
        return [(zp_cast, 0)] if zp_cast is not None and list(zp_cast.input) == [x_zp] else []

    for original in shared:
        node = by_name[original.name]
        x_q, x_scale, x_zp = node.output
        for k, mm in enumerate(starts(node)[1:], start=1):
            zp_readers = zero_point_readers(mm, x_q, x_zp)
            if zp_readers is None:
                continue
            result = mm.output[0] if mm.op_type == "MatMulInteger" else by_name[f"{mm.name[:-6]}/conv"].output[0]
            cast = only_reader(result, "Cast")  # gone where the simplifier dropped a Cast of float32 to float32
            as_float = cast.output[0] if cast is not None else result
            scaled = only_reader(as_float, "Mul")
            product = None
            if scaled is not None:
                other = scaled.input[1] if scaled.input[0] == as_float else scaled.input[0]
                product = next((n for n in readers.get(x_scale, []) if n.op_type == "Mul" and other in n.output
                                and len(readers.get(other, [])) == 1), None)
            if product is None:
                continue
            name = f"{node.name}/for_{mm.name}_{k}"
            outputs = [f"{name}:{i}" for i in range(3)]
            copy = helper.make_node("DynamicQuantizeLinear", list(node.input), outputs, name=name)
            mm.input[0] = outputs[0]
            for reader, index in zp_readers:
                reader.input[index] = outputs[2]
            product.input[list(product.input).index(x_scale)] = outputs[1]
            added.setdefault(node.name, []).append(copy)
            copies[name] = node.name
    nodes = []
    for node in graph.node:
        nodes.append(node)
        nodes.extend(added.get(node.name, ()))
    del graph.node[:]
    graph.node.extend(nodes)
    return out, copies


def _shared(graph: onnx.GraphProto):
    """Yields once per DequantizeLinear result that more than one node input reads."""
    reads: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            reads[name] = reads.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            count = reads.get(node.output[0], 0) + (node.output[0] in outputs)
            if count > 1:
                yield node.name


def untransposed_gemm_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``Gemm(A, DQ(w), transB=1)`` as ``Gemm(A, DQ(w'))``, with the integer weight transposed here, once.

    The importer spells ``transB`` as a transpose of B, and between the
    DequantizeLinear and the matmul that transpose hides the unit
    ``DQ(A), DQ(w) -> MatMul`` from every vendor: the classifier of a
    torch-exported MobileNetV2 or ResNet ran in float32. Transposing the
    integer constant (and moving a per-channel axis with it) changes no value.
    Run it after :func:`unshared_dequantize`, when each DequantizeLinear has
    one reader. Returns ``model`` itself when no Gemm qualifies, else a copy.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    inputs = {vi.name for vi in graph.input} | {o.name for o in graph.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output}

    def qualifying(gemm: onnx.NodeProto):
        attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
        if gemm.op_type != "Gemm" or gemm.domain not in ("", "ai.onnx") or attrs.get("transB", 0) != 1 \
                or len(gemm.input) < 2 or gemm.input[1] not in producer or readers.get(gemm.input[1]) != 1 \
                or gemm.input[1] in inputs:
            return None
        index = producer[gemm.input[1]]
        dq = graph.node[index]
        dq_attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
        weight = initializers.get(dq.input[0]) if dq.op_type == "DequantizeLinear" else None
        if weight is None or dq.domain not in ("", "ai.onnx") or weight.name in inputs or len(weight.dims) != 2 \
                or weight.data_type not in _INTEGER_TYPES or dq_attrs.get("block_size", 0):
            return None
        return index, dq_attrs.get("axis", 1)

    found = [(k, hit) for k, node in enumerate(graph.node) if (hit := qualifying(node)) is not None]
    if not found:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    taken = {t.name for t in graph.initializer} | {name for n in graph.node for name in n.output} | inputs
    for k, (index, axis) in found:
        gemm, dq = graph.node[k], graph.node[index]
        name = f"{dq.input[0]}_transposed"
        while name in taken:
            name += "_"
        taken.add(name)
        weight = numpy_helper.to_array(initializers[dq.input[0]])
        graph.initializer.append(numpy_helper.from_array(weight.T.copy(), name))
        dq.input[0] = name
        _set_attribute(dq, "axis", 1 - axis % 2)
        _set_attribute(gemm, "transB", None)
    _drop_unread_initializers(graph, inputs)
    return out


def _set_attribute(node: onnx.NodeProto, name: str, value) -> None:
    """Set ``node``'s attribute ``name`` to ``value``, or remove it when ``value`` is None."""
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept if value is None else kept + [helper.make_attribute(name, value)])


def _drop_unread_initializers(graph: onnx.GraphProto, keep: set[str]) -> None:
    """Remove the initializers no node reads and ``keep`` does not name (a rewrite's replaced constants)."""
    read = {name for node in graph.node for name in node.input} | keep
    for tensor in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(tensor)


def dequantized_constants_outside_units(model: onnx.ModelProto) -> onnx.ModelProto:
    """``DequantizeLinear`` of a constant whose reader can start no node unit, computed into a float32 constant.

    A unit ends in a QuantizeLinear: the reader's result, or that result after
    a bias Add and a Relu or Clip, is quantized. When no such path exists
    (Silero VAD's last encoder conv, whose output quantization a simplifier
    folded away), the weight's DequantizeLinear is only a float constant
    spelled as an op: left as one, it is a partition of its own and its conv
    loses its constant weight. Computed as ONNX defines it, in float32
    (``(x - zero_point) * scale``). Run it after :func:`unshared_dequantize`.
    Returns ``model`` itself when nothing qualifies, else a copy.
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output} | {vi.name for vi in graph.input}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def quantized(tensor: str, tail: tuple) -> bool:
        """Whether ``tensor`` reaches a QuantizeLinear directly or through ops of ``tail``, in that order."""
        for reader in readers.get(tensor, ()):
            if reader.op_type == "QuantizeLinear":
                return True
            for k, op_type in enumerate(tail):
                if reader.op_type == op_type or (op_type == "Relu" and reader.op_type == "Clip"):
                    if any(quantized(out, tail[k + 1:]) for out in reader.output):
                        return True
        return False

    def foldable(node: onnx.NodeProto) -> bool:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or attrs.get("block_size", 0) \
                or not all(name in initializers and name not in outputs for name in node.input if name) \
                or node.output[0] in outputs or len(readers.get(node.output[0], ())) != 1:
            return False
        reader = readers[node.output[0]][0]
        return reader.op_type != "QuantizeLinear" and not any(quantized(out, ("Add", "Relu")) for out in reader.output)

    folded = [node for node in graph.node if foldable(node)]
    if not folded:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {node.name for node in folded}
    kept = []
    for node in out.graph.node:
        if node.name not in names:
            kept.append(node)
            continue
        x, scale, *zero_point = (numpy_helper.to_array(initializers[name]) for name in node.input if name)
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
        if scale.size > 1:  # per axis: along `axis` of x
            shape = [1] * x.ndim
            shape[axis % x.ndim] = -1
            scale = scale.reshape(shape)
            zero_point = [z.reshape(shape) for z in zero_point]
        shift = zero_point[0].astype(np.float32) if zero_point else np.float32(0)
        real = (x.astype(np.float32) - shift) * scale.astype(np.float32)
        out.graph.initializer.append(numpy_helper.from_array(real, node.output[0]))
    del out.graph.node[:]
    out.graph.node.extend(kept)
    _drop_unread_initializers(out.graph, outputs)
    return out


def gathered_before_dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``Gather(DQ(table), ids)`` as ``DQ(Gather(table, ids))``, for a constant 8-bit table with one scale and zero
    point: the same values (dequantizing is element-wise), but a call gathers the rows it needs at 8 bits and
    dequantizes those, where the quantizer's form dequantizes the whole table on every call (GPT-2's 50257 x 768
    token embedding: a partition of its own, 154 MB of float32 written per token) or folds it into a float copy.

    Returns the model (``model`` itself when nothing qualifies) and a map from each new node's name to the node it
    stands for: the Gather, or the DequantizeLinear when no other node read it (it is dropped, and the row
    dequantization is its).
    """
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def dequantized_table(gather: onnx.NodeProto) -> Optional[onnx.NodeProto]:
        dq = producer.get(gather.input[0]) if gather.input else None
        if gather.op_type != "Gather" or gather.domain not in ("", "ai.onnx") or dq is None \
                or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
            return None
        table, params = dq.input[0], [x for x in dq.input[1:] if x]
        if table not in initializers or initializers[table].data_type not in (TensorProto.INT8, TensorProto.UINT8) \
                or not all(x in initializers and np.prod(initializers[x].dims, dtype=np.int64) == 1 for x in params):
            return None
        return dq

    pairs = [(node, dq) for node in graph.node if (dq := dequantized_table(node)) is not None]
    if not pairs:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    made_from: dict[str, str] = {}
    replaced = {gather.name: dq for gather, dq in pairs}
    tables = {dq.name: dq.output[0] for _, dq in pairs}  # each dequantized table, by its DequantizeLinear
    dropped = {name for name, table in tables.items()
               if table not in outputs and all(r.name in replaced for r in readers[table])}
    nodes = []
    for node in out.graph.node:
        if node.name in dropped:
            continue
        dq = replaced.get(node.name)
        if dq is None:
            nodes.append(node)
            continue
        rows = f"{node.name}/rows"
        nodes.append(helper.make_node("Gather", [dq.input[0], *node.input[1:]], [rows], name=rows,
                                      **{a.name: helper.get_attribute_value(a) for a in node.attribute}))
        nodes.append(helper.make_node("DequantizeLinear", [rows, *dq.input[1:]], list(node.output),
                                      name=f"{node.name}/dequantize"))
        made_from.update({rows: node.name, f"{node.name}/dequantize": dq.name if dq.name in dropped else node.name})
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    gone = {tables[name] for name in dropped}
    kept = [vi for vi in out.graph.value_info if vi.name not in gone]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept)
    return out, made_from

"""Write a partitioned ONNX model: one node per partition, its body a local function.

Each partition becomes a node of op type ``<partition name>`` in domain
``byoc.<vendor>``; the model carries a matching model-local
``FunctionProto`` whose body is the partition's original nodes. Netron shows
the split (and opens the function on click); onnxruntime inlines local
functions, so the exported model computes what the original computes.

An ONNX node joins a partition's function only when every op it became in
Relax was offloaded to that partition. A node whose ops went to several
places (a Gemm's matmul to one vendor and its bias add to another, or to the
host) cannot be cut in ONNX: it stays a plain node in the main graph, and
the export warns, naming the node, where its ops went, and any partition
left with no node of its own. Nodes with subgraph attributes (their bodies
may read outer-scope values) also stay in the main graph.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Union

import onnx
from onnx import helper

from byoc.errors import OnnxExportError, first_line
from byoc.pipeline.partitioning.partitioner import PartitionPlan
from byoc.tools.report import HOST, node_targets

DOMAIN_PREFIX = "byoc."
FUNCTION_OPSET = 1  # version of every byoc.<vendor> domain
MIN_IR_VERSION = 8  # model-local functions need IR version 8



def node_partitions(plan: PartitionPlan) -> dict[str, str]:
    """ONNX node name -> partition name, for nodes whose ops all went to that one partition.

    A node that model preparation folded away has no op of its own; it goes
    with what absorbed it (a BatchNormalization fused into a Conv joins the
    Conv's partition), and a folded or removed node joins a partition when
    everything that reads its results is in that partition, so the exported
    partition is a convex piece of the user's graph as it was compiled.
    """
    owner = {node: where[0] for node, where in node_targets(plan).items()
             if len(where) == 1 and where[0] != HOST}
    prepared = plan.imported.prepared
    if not prepared:
        return owner
    graph = plan.imported.model.graph
    outputs = {o.name for o in graph.output}
    readers: dict[str, list[str]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node.name)
    for node in reversed(graph.node):  # consumers are settled before their producers
        fate = prepared.get(node.name)
        if fate is None or node.name in owner:
            continue
        if fate.startswith("fused into ") and "`" in fate:
            into = fate.split("`")[1]
            if into in owner:
                owner[node.name] = owner[into]
            continue
        outs = [o for o in node.output if o]
        if any(o in outputs for o in outs):
            continue
        parts = {owner.get(r) for o in outs for r in readers[o]}
        if len(parts) == 1 and None not in parts:
            owner[node.name] = parts.pop()
    return owner


def partitioned_model(plan: PartitionPlan) -> onnx.ModelProto:
    """The model of ``plan`` with every partition folded into one function node."""
    model = onnx.ModelProto()
    model.CopyFrom(plan.imported.model)
    graph = model.graph
    nodes = list(graph.node)
    owner = node_partitions(plan)
    vendor_of = {p.name: p.vendor for p in plan.partitions}
    _warn_about_split_nodes(plan, owner)

    # Units: one per partition (its nodes, in graph order) or one per host node.
    units: list[tuple[str | None, list[onnx.NodeProto]]] = []
    unit_of_part: dict[str, int] = {}
    for node in nodes:
        part = owner.get(node.name)
        if part is not None and any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                    for a in node.attribute):
            part = None
        if part is None:
            units.append((None, [node]))
        elif part in unit_of_part:
            units[unit_of_part[part]][1].append(node)
        else:
            unit_of_part[part] = len(units)
            units.append((part, [node]))

    consumers: dict[str, set[int]] = defaultdict(set)
    producer: dict[str, int] = {}
    for index, (_, members) in enumerate(units):
        for node in members:
            for name in node.input:
                if name:
                    consumers[name].add(index)
            for name in node.output:
                if name:
                    producer[name] = index
    graph_outputs = {o.name for o in graph.output}
    initializers = {t.name for t in graph.initializer}

    new_nodes = []
    for index in _unit_order(units, producer):
        part, members = units[index]
        if part is None:
            new_nodes.extend(members)
            continue
        inputs, weights, outputs = _signature(index, members, producer, consumers, graph_outputs, initializers)
        domain = DOMAIN_PREFIX + vendor_of[part]
        function = helper.make_function(
            domain, part, inputs + weights, outputs, members,
            opset_imports=list(model.opset_import),
            doc_string=f"byoc partition {part} for vendor {vendor_of[part]}",
        )
        model.functions.append(function)
        call = helper.make_node(part, inputs + weights, outputs, name=part, domain=domain)
        call.doc_string = f"{len(members)} ONNX node(s) offloaded to {vendor_of[part]}: " + ", ".join(
            n.name for n in members)
        new_nodes.append(call)

    del graph.node[:]
    graph.node.extend(new_nodes)
    visible = {name for node in new_nodes for name in node.output}
    kept_info = [vi for vi in graph.value_info if vi.name in visible]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    for vendor in dict.fromkeys(vendor_of[p] for p in unit_of_part):
        model.opset_import.append(helper.make_opsetid(DOMAIN_PREFIX + vendor, FUNCTION_OPSET))
    model.ir_version = max(model.ir_version, MIN_IR_VERSION)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        first = first_line(err)
        raise OnnxExportError(f"the partitioned ONNX model does not pass onnx.checker: {first}") from None
    return model


def _warn_about_split_nodes(plan: PartitionPlan, owner: dict[str, str]) -> None:
    """Warn when nodes split across places stay plain, and which partitions that leaves out of the file."""
    split = {node: where for node, where in node_targets(plan).items() if len(where) > 1}
    if not split:
        return
    left_out = [p.name for p in plan.partitions if p.name not in set(owner.values())]
    nodes = "; ".join(f"{node} ({' + '.join(where)})" for node, where in split.items())
    gone = f"; partitions with no whole node, so absent from the file: {', '.join(left_out)}" if left_out else ""
    warnings.warn(f"ONNX nodes whose ops went to several places stay plain nodes in the exported model "
                  f"(an ONNX node cannot be cut): {nodes}{gone}", RuntimeWarning, stacklevel=3)


def _signature(index, members, producer, consumers, graph_outputs, initializers):
    """Function inputs (activations, then weights, each in first-use order) and outputs."""
    inputs, weights, outputs = [], [], []
    for node in members:
        for name in node.input:
            if name and producer.get(name) != index and name not in inputs and name not in weights:
                (weights if name in initializers else inputs).append(name)
    for node in members:
        for name in node.output:
            if name and (name in graph_outputs or consumers[name] - {index}):
                outputs.append(name)
    return inputs, weights, outputs


def _unit_order(units, producer) -> list[int]:
    """Topological order of the units, earliest original node first on ties.

    A cycle means a partition's nodes are not convex in the ONNX graph (a
    path leaves the partition and comes back), which a single node cannot
    express.
    """
    import heapq

    deps: dict[int, set[int]] = {}
    for index, (_, members) in enumerate(units):
        deps[index] = {producer[n] for node in members for n in node.input
                       if n in producer and producer[n] != index}
    users: dict[int, set[int]] = defaultdict(set)
    for index, needs in deps.items():
        for need in needs:
            users[need].add(index)
    waiting = {index: len(needs) for index, needs in deps.items()}
    ready = [index for index, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(units):
        stuck = sorted({units[i][0] for i in waiting if waiting[i] > 0 and units[i][0]})
        raise OnnxExportError(
            f"partitions {stuck} cannot each be one ONNX node: a path leaves and re-enters them "
            "in the ONNX graph; export without those partitions (e.g. --keep-on-host their nodes)"
        )
    return order


def export_onnx(plan: PartitionPlan, path: Union[str, os.PathLike]) -> Path:
    """Write :func:`partitioned_model` of ``plan`` to ``path``; returns the path."""
    path = Path(path)
    if not path.parent.is_dir():
        raise OnnxExportError(f"folder {str(path.parent)!r} does not exist")
    onnx.save(partitioned_model(plan), str(path))
    return path

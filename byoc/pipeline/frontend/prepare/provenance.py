"""What became of each of the user's nodes in a prepared graph: the user's node each prepared node comes from
(``origin``), and for the user's nodes not imported as themselves, why (``fate``: folded, fused, removed,
merged)."""

from __future__ import annotations

import onnx

_IDENTITIES = {"Identity", "Dropout"}
# Ops a Conv absorbs when the simplifier fuses them into it.
_FUSABLE = {"BatchNormalization"}

def origin_map(user: onnx.GraphProto, prepared: onnx.GraphProto) -> dict[str, str]:
    """Prepared node name -> the user node it comes from.

    By name first (the simplifier keeps the names of the nodes it keeps:
    measured), then by the weights it reads (a rewrite that merged user nodes,
    MatMul + Add -> Gemm, hands the new node their weights under their names;
    the node comes from the merged node of its own op type, else from the
    first one), then by output tensor name (a rewrite that renamed the node
    still writes the tensor the user's node wrote: the node that tensor's
    writer was merged into, or a user node of the same op type up the
    producer chain, as a Conv that absorbed a BatchNormalization writes the
    BN's output), then by the data input it reads (two Reshapes merged into
    one read the first one's input). A node with none of these belongs to the
    node that consumes its result, like a helper of TVM's importer.
    """
    users = {n.name: n for n in user.node}
    producer = {out: n for n in user.node for out in n.output if out}
    merged = _merged_readers(user, prepared)
    origin: dict[str, str] = {}
    merged_into: dict[str, str] = {}
    for node in prepared.node:
        same = users.get(node.name)
        if same is not None and same.op_type == node.op_type:
            origin[node.name] = node.name
        elif node.name in merged:
            group = merged[node.name]
            origin[node.name] = next((n for n in group if users[n].op_type == node.op_type), group[0])
            for name in group:
                merged_into.setdefault(name, origin[node.name])
    gone = {n.name for n in user.node} - set(origin)
    readers: dict[tuple[str, int], list[onnx.NodeProto]] = {}
    for node in user.node:
        for slot, name in enumerate(node.input):
            readers.setdefault((name, slot), []).append(node)
    for node in prepared.node:
        if node.name in origin:
            continue
        source = next((producer[out] for out in node.output if out in producer), None)
        if source is not None:
            origin[node.name] = merged_into.get(source.name) or _same_kind_upstream(source, node.op_type, producer)
            continue
        same_job = next((r.name for slot, name in enumerate(node.input) for r in readers.get((name, slot), ())
                         if r.op_type == node.op_type and r.name in gone), None)
        if same_job is not None:
            origin[node.name] = same_job
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in prepared.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    for node in reversed(prepared.node):
        if node.name not in origin:
            origin[node.name] = _by_position(node, consumers, users, producer, origin) or node.name
    return origin


def _static_tensors(graph: onnx.GraphProto) -> set[str]:
    """The tensors of ``graph`` computable at compile time with static shapes: weights, constants, shapes."""
    static = {t.name for t in graph.initializer}
    for node in graph.node:
        if node.op_type in ("Shape", "Size") or all(name in static for name in node.input if name):
            static.update(out for out in node.output if out)
    return static


def _merged_readers(user: onnx.GraphProto, prepared: onnx.GraphProto) -> dict[str, list[str]]:
    """Prepared node name -> the user nodes merged into it, for the nodes a rewrite made of several.

    Such a node reads the merged nodes' weights under their names (a Gemm
    made of a MatMul and its bias Add reads the MatMul's weight and the Add's
    bias). The merged nodes are the user nodes gone from ``prepared`` that
    read one of them, in input order; nodes that only read what is
    computable at compile time are folded, not merged.
    """
    kept = {n.name for n in prepared.node}
    static = _static_tensors(user)
    weights = {t.name for t in user.initializer} | {
        out for n in user.node if n.op_type == "Constant" for out in n.output}
    readers: dict[str, list[str]] = {}
    for node in user.node:
        if node.name in kept or all(name in static for name in node.input if name):
            continue
        for name in node.input:
            if name in weights:
                readers.setdefault(name, []).append(node.name)
    user_names = {n.name for n in user.node}
    merged: dict[str, list[str]] = {}
    for node in prepared.node:
        group = [reader for name in node.input for reader in readers.get(name, ())]
        if node.name not in user_names and group:
            merged[node.name] = list(dict.fromkeys(group))
    return merged


def _by_position(node, consumers, users, producer, origin) -> str | None:
    """The user node whose tensor ``node``'s result replaced, or its consumer's origin.

    A reader that is still the user's node reads ``node``'s result in the
    input slot where it read the user's tensor; that tensor's producer is the
    user node this one stands for (a branch of an ``If`` on a constant,
    inlined under a new name, stands for the ``If``).
    """
    fallback = None
    for out in node.output:
        for reader in consumers.get(out, ()):
            user_reader = users.get(reader.name)
            if user_reader is not None and user_reader.op_type == reader.op_type:
                for slot, name in enumerate(reader.input):
                    if name == out and slot < len(user_reader.input):
                        source = producer.get(user_reader.input[slot])
                        if source is not None:
                            return source.name
            fallback = fallback or origin.get(reader.name)
    return fallback


def _same_kind_upstream(node: onnx.NodeProto, op_type: str, producer) -> str:
    """``node``'s name, or the nearest producer up its first inputs with ``op_type``."""
    seen, current = 0, node
    while current is not None and seen < 8:
        if current.op_type == op_type:
            return current.name
        current = producer.get(current.input[0]) if current.input else None
        seen += 1
    return node.name


def fates(user: onnx.GraphProto, prepared: onnx.GraphProto, origin: dict[str, str]) -> dict[str, str]:
    """User node -> what became of it, for the user nodes no prepared node comes from."""
    kept = set(origin.values())
    op_of = {n.name: n.op_type for n in user.node}
    constants = {t.name for t in prepared.initializer}
    constants |= {out for n in prepared.node if n.op_type == "Constant" for out in n.output}
    made_by = {out: n for n in prepared.node for out in n.output if out}
    graph_outputs = {o.name for o in user.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in user.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    producer = {out: n for n in user.node for out in n.output if out}

    by_name = {n.name: n for n in prepared.node}

    def read_as_constant(reader: onnx.NodeProto, tensor: str) -> bool:
        """Whether ``reader`` (a user node) now reads a constant where it read ``tensor``.

        The simplifier names the constants it makes itself, so the tensor is
        found by its position among the prepared node's inputs.
        """
        if folded.get(reader.name, False):
            return True
        now = by_name.get(reader.name)
        if now is None or now.op_type != reader.op_type:
            return False
        slots = [i for i, name in enumerate(reader.input) if name == tensor]
        return all(i < len(now.input) and now.input[i] in constants for i in slots)

    # A node is folded when each of its results became a constant, or vanished
    # and everything that used it now reads a constant or was folded too
    # (reverse order: consumers first).
    folded: dict[str, bool] = {}
    for node in reversed(user.node):
        if node.name in kept:
            continue
        outs = [o for o in node.output if o]
        folded[node.name] = bool(outs) and all(
            o in constants or (o not in made_by and o not in graph_outputs and all(
                read_as_constant(c, o) for c in consumers.get(o, ())))
            for o in outs)

    merges = _merges(user, prepared, origin)
    static = _static_tensors(user)

    def passes_through(node: onnx.NodeProto) -> bool:
        """Whether whatever read ``node``'s result now reads its one data input: it was a no-op.

        A graph output keeps its name, so there the node that wrote the data
        input, unchanged, now writes the output.
        """
        data = [name for name in node.input if name and name not in static]
        if len(data) != 1:
            return False
        # The data's writer must be unchanged: a Conv that absorbed a BatchNormalization
        # writes the tensor the BN read too, with other weights.
        writer = producer.get(data[0])
        writer_now = by_name.get(writer.name) if writer is not None else None
        if writer is not None and (writer_now is None or (writer_now.op_type, list(writer_now.input)) != (
                writer.op_type, list(writer.input))):
            return False

        def same_data(name: str) -> bool:
            return name == data[0] or (writer_now is not None and made_by.get(name) is writer_now)

        for out in (o for o in node.output if o):
            if out in graph_outputs and not same_data(out):
                return False
            for reader in consumers.get(out, ()):
                now = by_name.get(reader.name)
                if now is None or now.op_type != reader.op_type:
                    return False
                if not all(i < len(now.input) and same_data(now.input[i])
                           for i, name in enumerate(reader.input) if name == out):
                    return False
        return True

    fate: dict[str, str] = {}
    for node in user.node:
        if node.name in kept:
            if node.name in merges:  # the node the made one is reported as
                fate[node.name] = merges[node.name]
            continue
        outs = [o for o in node.output if o]
        used = any(consumers.get(o) or o in graph_outputs for o in outs)
        if not used:
            fate[node.name] = "removed: its result is not used"
        elif folded[node.name]:
            fate[node.name] = "folded into a constant"
        elif node.op_type in _IDENTITIES:
            fate[node.name] = f"removed: {node.op_type} passes its input through at inference"
        elif passes_through(node):
            fate[node.name] = "removed: a no-op for these shapes"
        elif node.name in merges:
            fate[node.name] = merges[node.name]
        else:
            # A rewrite that took the node over writes its tensor; a BatchNormalization
            # fused into its Conv leaves the Conv writing the Conv's own tensor.
            into = next((origin[made_by[o].name] for o in outs if o in made_by), None)
            if into is None and node.op_type in _FUSABLE:
                data = next((producer[i] for i in node.input if i in producer), None)
                into = data.name if data is not None and data.name in kept else None
            if into is not None and into != node.name:
                fate[node.name] = f"fused into {op_of.get(into, 'the node')} `{into}`"
            elif node.op_type in ("Constant", "ConstantOfShape"):
                fate[node.name] = "folded into a constant"
            else:
                fate[node.name] = "removed by the simplifier's rewrites"
    # User nodes that live on only as other ops (an If on a constant as its branch).
    became: dict[str, list[str]] = {}
    for node in prepared.node:
        became.setdefault(origin.get(node.name, node.name), []).append(node.op_type)
    for node in user.node:
        ops = became.get(node.name)
        if ops and node.op_type not in ops and node.name not in merges:
            listing = ", ".join(dict.fromkeys(ops))
            if node.op_type == "If":
                fate[node.name] = f"If on a constant condition: replaced by the branch it takes ({listing})"
            else:
                fate[node.name] = f"rewritten as {listing}"
    return fate


def _merges(user: onnx.GraphProto, prepared: onnx.GraphProto, origin: dict[str, str]) -> dict[str, str]:
    """User node -> "merged into a Gemm with Add `add`", for the user nodes a rewrite merged into one node.

    A node made by the simplifier (a name no user node has) stands for the
    user node ``origin`` gives and for the nodes whose weights it reads
    (:func:`_merged_readers`); with them go the nodes between them that are
    gone too, joined by tensors the prepared graph no longer has (the Div,
    Erf, Add and Mul of a Gelu). Nodes whose weights a made node reads are
    named first, so the Reshapes put around a Gemm are not taken for it.
    """
    op_of = {n.name: n.op_type for n in user.node}
    order = {n.name: i for i, n in enumerate(user.node)}
    present = {name for n in prepared.node for name in (*n.input, *n.output)}
    gone_nodes = {n.name for n in user.node} - set(origin.values())
    static = _static_tensors(user)
    writer = {out: n.name for n in user.node for out in n.output if out}
    readers: dict[str, list[str]] = {}
    for node in user.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.name)
    by_name = {n.name: n for n in user.node}
    between = {name for name in writer if name not in present and name not in static}

    def joined(start: list[str]) -> list[str]:
        seen, todo = list(dict.fromkeys(start)), list(start)
        while todo:
            node = by_name[todo.pop()]
            if node.op_type in _IDENTITIES:
                continue
            near = [writer[i] for i in node.input if i in between]
            near += [r for o in node.output if o in between for r in readers.get(o, ())]
            for name in near:
                if name in gone_nodes and name not in seen and by_name[name].op_type not in _IDENTITIES:
                    seen.append(name)
                    todo.append(name)
        return seen

    merged = _merged_readers(user, prepared)
    made = [n for n in prepared.node if n.name not in op_of]
    prepared_names = {n.name for n in prepared.node}
    merges: dict[str, str] = {}
    for node in sorted(made, key=lambda n: n.name not in merged):
        start = [origin.get(node.name, node.name)] + merged.get(node.name, [])
        if not all(name in op_of for name in start):
            continue
        together = joined(start) if start[0] not in prepared_names else []
        together = together[:1] + sorted(together[1:], key=order.get)
        if len(together) < 2:
            continue
        for name in together:  # the node it is reported as first, so the others share one text
            others = [f"{op_of[o]} `{o}`" for o in together if o != name]
            if len(others) > 2:
                others = [others[0], f"{len(others) - 1} other nodes"]
            merges.setdefault(name, f"merged into a {node.op_type} with {' and '.join(others)}")
    return merges

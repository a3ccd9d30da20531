"""Which values stay on a vendor's device between its partitions, and what each partition moves per call.

For a vendor whose codegen has a device memory (:mod:`byoc.vendor.device`), a value one of its partitions
computes and another of its partitions reads is kept on the device, in a slot named after the producer's output
(``npu_0:1``): the reader does not copy it in. When nothing on the host reads it either (a host op, the model's
outputs), the producer does not copy it out. Every other input is copied in and every other output out, per call;
the weights are copied once and stay.

A partition specialized per size (:mod:`byoc.pipeline.partitioning.specializations`) keeps nothing on the
device: at a size it has no specialization for it runs on the host, where a resident value would not be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Residency:
    """What one partition keeps on its vendor's device (:class:`~byoc.vendor.graph.PartitionGraph`'s fields)."""

    resident_inputs: dict = field(default_factory=dict)  # input position -> slot
    resident_outputs: dict = field(default_factory=dict)  # output position -> slot
    device_only_outputs: frozenset = frozenset()


@dataclass(frozen=True)
class Transfers:
    """What one call of a device vendor's partition moves (None: a dim is symbolic), the copies it saves by
    reading and leaving values on the device (``kept``), and its weights, copied to the device once."""

    vendor: str
    device: str
    to_device: Optional[int]
    to_host: Optional[int]
    kept: Optional[int]
    weights: int
    resident_inputs: tuple  # the slots it reads on the device
    resident_outputs: tuple  # the slots it leaves there


def residencies(plan: Any) -> dict[str, Residency]:
    """Partition name -> its :class:`Residency`, for each partition of a vendor with a device memory in ``plan``
    (a :class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan`)."""
    from tvm import relax

    from byoc.vendor import as_codegen

    device_vendors = {v.name for v in plan.vendors if as_codegen(v.codegen).device_memory is not None}
    parts = {p.global_var: p for p in plan.partitions if p.vendor in device_vendors and not p.specializations}
    if not parts:
        return {}
    main = plan.mod["main"]
    produced: dict = {}  # main var -> (partition, output position)
    readers: dict = {}  # main var -> [(partition, input position) or None for the host]
    calls: dict = {}  # partition call var -> partition
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op in parts:
                part = parts[value.op]
                calls[binding.var] = part
                if not isinstance(binding.var.ty, relax.TupleType):
                    produced[binding.var] = (part, 0)
                position = 0
                for arg in value.args:
                    if isinstance(arg, relax.Var) and not isinstance(arg.ty, relax.ShapeType):
                        readers.setdefault(arg, []).append((part, position))
                        position += 1
                continue
            if isinstance(value, relax.TupleGetItem) and value.tuple_value in calls:
                produced[binding.var] = (calls[value.tuple_value], value.index)
                continue
            for var in relax.analysis.free_vars(value):
                readers.setdefault(var, []).append(None)
    for var in relax.analysis.free_vars(main.body.body):
        readers.setdefault(var, []).append(None)
    inputs: dict[str, dict] = {p.name: {} for p in parts.values()}
    outputs: dict[str, dict] = {p.name: {} for p in parts.values()}
    only: dict[str, set] = {p.name: set() for p in parts.values()}
    for var, (part, output) in produced.items():
        on_device = [r for r in readers.get(var, []) if r is not None and r[0].vendor == part.vendor]
        if not on_device:
            continue
        slot = f"{part.name}:{output}"
        outputs[part.name][output] = slot
        if len(on_device) == len(readers[var]):
            only[part.name].add(output)
        for reader, position in on_device:
            inputs[reader.name][position] = slot
    return {name: Residency(inputs[name], outputs[name], frozenset(only[name])) for name in inputs}


def transfers(plan: Any) -> dict[str, Transfers]:
    """Partition name -> what one call of it moves, for each partition of a vendor with a device memory."""
    from byoc.vendor import as_codegen

    devices = {v.name: as_codegen(v.codegen).device_memory for v in plan.vendors}
    found = {}
    for name, residency in residencies(plan).items():
        part = plan.partition(name)
        ins = [t.nbytes for i, t in enumerate(part.inputs) if i not in residency.resident_inputs]
        outs = [t.nbytes for i, t in enumerate(part.outputs) if i not in residency.device_only_outputs]
        kept = [t.nbytes for i, t in enumerate(part.inputs) if i in residency.resident_inputs] + [
            t.nbytes for i, t in enumerate(part.outputs) if i in residency.device_only_outputs]
        found[name] = Transfers(part.vendor, devices[part.vendor].name, _total(ins), _total(outs), _total(kept),
                                int(part.constant_bytes), tuple(sorted(set(residency.resident_inputs.values()))),
                                tuple(residency.resident_outputs[k] for k in sorted(residency.resident_outputs)))
    return found


def _total(sizes: list) -> Optional[int]:
    """The sum of ``sizes``; None when one is (a symbolic dim's)."""
    return None if None in sizes else sum(sizes)

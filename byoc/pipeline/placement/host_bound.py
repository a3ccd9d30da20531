"""A lower bound on a partition's time on the host, from its heaviest ops alone.

Measured placement needs the host's time for a partition only to know whether the vendor beats it by
``min_speedup``. When the host is far slower, as TVM's untuned host kernels are against oneDNN on a CNN, a
part of the partition already shows it, and building and running the whole model for the host (the
largest cost of measured placement: DenseNet-121's host build took twice its rule-based build) is not
needed. The host's time for a partition is at least that of any of its ops, so the heaviest ones give a
lower bound: the convolutions, transposed convolutions and matmuls that hold most of its multiply-adds.
Ops of one kind with the same shapes and attributes take the same time, so each distinct one is built once,
in one small host model of them all, and counted as often as the partition has it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping, Optional

import numpy as np

from byoc.pipeline.frontend.onnx_model import ImportedModel, TensorSpec
from byoc.pipeline.placement.samples import SEED

#: the ops whose multiply-adds are counted: most of a CNN's or a transformer's work
HEAVY_OPS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv2d_transpose", "relax.matmul")
#: distinct heavy ops are taken, heaviest first, until they hold this share of a partition's multiply-adds
#: ... or until this many are taken (each one is compiled for the host). Half the multiply-adds in at most 8
#: ops left a small model whose vendor wins by 2.7x unsettled (PP-OCR cls: its bound showed less than dnnl's
#: 0.9 ms x 1.1, the whole host 2.5 ms), and its whole-model host build made measured placement 2.3x the
#: rule-based compile. 90% in at most 16 settles every partition of the dnnl suite with the bound alone:
#: compile 1.14x -> 1.19x the rule-based one as a geometric mean, the worst 2.29x -> 1.73x (Inception-v1).
COVERED_SHARE = 0.9
MAX_DISTINCT = 16
#: a vendor slower than this on a partition's heavy ops (multiply-adds per second) runs them at the speed of
#: scalar C loops (byoc's reference vendors: 0.5 GMAC/s on SqueezeNet), which the host's vectorized code
#: beats: a bound of part of the host's time cannot show such a vendor faster, so none is built
MIN_VENDOR_RATE = 2e9


@dataclasses.dataclass
class HeavyOp:
    """One distinct heavy op of a partition: a call of it, how often the partition has it, its multiply-adds."""

    call: object  # relax.Call
    count: int
    macs: float


@dataclasses.dataclass
class HostBound:
    """A partition's host time is at least ``ms``: the time of its ``distinct`` heaviest ops, each counted as
    often as the partition has it, which hold ``share`` of its multiply-adds."""

    ms: float
    distinct: int
    share: float

    def describe(self) -> str:
        return f"its {self.distinct} heaviest distinct op(s), {self.share:.0%} of its multiply-adds"


def distinct_heavy_ops(func) -> list[HeavyOp]:
    """The distinct heavy ops of ``func`` (a partition's function with its composites inlined and its dims
    bound), heaviest in all first; empty when a shape is symbolic or an operand is not floating point (its
    random inputs would mean nothing)."""
    import tvm
    import tvm_ffi
    from tvm import relax

    groups: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in HEAVY_OPS):
                continue
            shapes = [_static_shape(arg) for arg in call.args] + [_static_shape(call)]
            if any(s is None for s in shapes) or not all(_is_float(arg) for arg in call.args):
                return []
            key = (call.op.name, tuple(map(tuple, shapes)), tvm_ffi.structural_hash(call.attrs))
            if key in groups:
                groups[key].count += 1
            else:
                groups[key] = HeavyOp(call, 1, _macs(call.op.name, shapes))
    return sorted(groups.values(), key=lambda op: op.count * op.macs, reverse=True)


def could_settle(ranked: list[HeavyOp], vendor_ms: float) -> bool:
    """Whether a host bound could show faster the vendor that runs a partition of heavy ops ``ranked``
    (:func:`distinct_heavy_ops`) in ``vendor_ms``: it has some, and runs them at :data:`MIN_VENDOR_RATE` or
    more."""
    macs = sum(op.count * op.macs for op in ranked)
    if macs <= 0:
        return False
    return vendor_ms <= 0 or macs / (vendor_ms * 1e-3) >= MIN_VENDOR_RATE


def heaviest(ranked: list[HeavyOp]) -> list[HeavyOp]:
    """The first of ``ranked`` (:func:`distinct_heavy_ops`) up to :data:`COVERED_SHARE` of their multiply-adds,
    at most :data:`MAX_DISTINCT`."""
    total = sum(op.count * op.macs for op in ranked)
    taken, covered = [], 0.0
    for op in ranked[:MAX_DISTINCT]:
        if total <= 0 or covered >= COVERED_SHARE * total:
            break
        taken.append(op)
        covered += op.count * op.macs
    return taken


def host_lower_bounds(functions: Mapping[str, object], vendor_ms: Mapping[str, float], build: Callable, runs: int,
                      time_calls: Callable) -> dict[str, HostBound]:
    """Partition name -> :class:`HostBound` for each of ``functions`` (name -> function, as
    :func:`distinct_heavy_ops` takes): their heaviest ops built for the host as one model (``build(model,
    [])``) and timed (``time_calls(artifact, arrays, runs)`` -> call name -> ms per run). Empty, and nothing
    built, when a bound could not show one of them faster on its vendor, which runs it in ``vendor_ms[name]``
    (:func:`could_settle`): its host time then needs the whole model."""
    from tvm import relax
    from tvm.ir import GenericConst

    ranked = {name: distinct_heavy_ops(func) for name, func in functions.items()}
    if not all(could_settle(ops, vendor_ms[name]) for name, ops in ranked.items()):
        return {}
    heavy = {name: heaviest(ops) for name, ops in ranked.items()}
    distinct, index_of = [], {}
    for ops in heavy.values():
        for op in ops:
            index_of[id(op)] = len(distinct)
            distinct.append(op.call)
    params, calls = [], []
    for i, call in enumerate(distinct):
        args = []
        for j, arg in enumerate(call.args):
            if isinstance(arg, GenericConst):
                args.append(arg)
            else:
                params.append(relax.Var(f"op{i}_arg{j}", arg.ty))
                args.append(params[-1])
        calls.append(relax.Call(call.op, args, call.attrs, call.ty_args))
    builder = relax.BlockBuilder()
    with builder.function("main", params):
        with builder.dataflow():
            outputs = [builder.emit(call, name_hint=f"op{i}") for i, call in enumerate(calls)]
            result = builder.emit_output(relax.Tuple(outputs))
        builder.emit_func_output(result)
    specs = [TensorSpec(p.name, tuple(int(d) for d in p.ty.shape.values), str(p.ty.dtype))
             for p in params]
    rng = np.random.default_rng(SEED)
    arrays = [(rng.standard_normal(s.shape) * 0.1).astype(s.dtype) for s in specs]
    artifact = build(ImportedModel(builder.get(), None, specs, []), [])
    ms = time_calls(artifact, arrays, runs)
    function_of = {binding: name for name, bindings in artifact.host_calls() for binding in bindings}
    op_ms = [ms.get(function_of.get(f"op{i}"), math.nan) for i in range(len(distinct))]
    bounds = {}
    for name, ops in heavy.items():
        times = [op_ms[index_of[id(op)]] * op.count for op in ops]
        if all(t > 0 for t in times):  # a NaN (an op the host did not call by that name) gives no bound
            share = sum(op.count * op.macs for op in ops) / sum(op.count * op.macs for op in ranked[name])
            bounds[name] = HostBound(sum(times), len(ops), share)
    return bounds


def _static_shape(expr) -> Optional[list]:
    from tvm import relax, tirx

    info = expr.ty
    if not isinstance(info, relax.TensorType) or info.shape is None:
        return None
    dims = info.shape.values
    return [int(d) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def _is_float(expr) -> bool:
    return str(expr.ty.dtype).startswith(("float", "bfloat"))


def _macs(op: str, shapes: list) -> float:
    """Multiply-adds of one call: per output element (per input element for a transposed conv), the
    weight's extent past its first dim; a matmul's shared dim."""
    (a, w), out = shapes[:2], shapes[-1]
    if op == "relax.matmul":
        return float(np.prod(out)) * a[-1]
    per = float(np.prod(w[1:]))
    return (float(np.prod(a)) if op == "relax.nn.conv2d_transpose" else float(np.prod(out))) * per

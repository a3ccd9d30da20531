"""Check a partitioned build against onnxruntime, and find the partition that breaks it.

:func:`verify` builds the plan, runs it and onnxruntime on the same inputs
(random with a fixed seed, or the user's), and compares every output. On a
mismatch it rebuilds with each partition in turn moved back to the host
(its ONNX nodes added to ``keep_on_host``) and names the partitions whose
removal makes the outputs match. When no single partition explains it, it
offloads the partitions one more at a time, in call order, and names the
first whose addition breaks the result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import numpy as np
from onnx import TensorProto

from byoc.pipeline.frontend.dims import bind_dims

from byoc.pipeline.build.builder import build
from byoc.errors import ByocError, InputError
from byoc.pipeline.partitioning.partitioner import PartitionPlan, partition
from byoc.pipeline.placement.samples import SEED, UNBOUNDED_VERIFY_SIZE, random_inputs  # noqa: F401 - verify's API
from byoc.deploy.targets import resolve_target

# Vendor kernels may sum in another order than onnxruntime: per-dtype tolerance (rtol, atol).
TOLERANCE = {"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2), "float32": (1e-3, 1e-4), "float64": (1e-7, 1e-9)}

Progress = Optional[Callable[[str], None]]


@dataclass
class OutputCheck:
    """How one model output compares with onnxruntime."""

    name: str
    ok: bool
    max_abs_diff: float
    note: str = ""


@dataclass
class Verification:
    """The result of :func:`verify`.

    ``status`` is ``"ok"`` or ``"mismatch"``; ``culprits`` names the
    partitions found to cause a mismatch (empty when none could be named);
    ``lines`` explains the result for people. ``outputs`` are the checks of
    the last run (of the first that differed, on a mismatch).
    """

    status: str
    inputs: str
    outputs: list[OutputCheck]
    culprits: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    #: the symbolic dims' sizes of each run (``batch=1, seq=3``); empty for a static model or given inputs
    shapes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "inputs": self.inputs,
            "outputs": [{"name": o.name, "ok": o.ok, "max_abs_diff": o.max_abs_diff, "note": o.note}
                        for o in self.outputs],
            "culprits": list(self.culprits),
            "lines": list(self.lines),
            "shapes": list(self.shapes),
        }


#: The largest size verify draws for an unbounded dim.
UNBOUNDED_VERIFY_MAX = 16


def verify_sizes(dims: Mapping) -> dict[str, int]:
    """A size for each symbolic dim (name -> :class:`~byoc.pipeline.frontend.onnx_model.DimRange`): its upper bound
    where it has one, else :data:`UNBOUNDED_VERIFY_SIZE` (at least its lower bound)."""
    return {name: r.max if r.max is not None else max(r.min, UNBOUNDED_VERIFY_SIZE) for name, r in dims.items()}


def verify_shapes(dims: Mapping, seed: int = SEED) -> list[dict[str, int]]:
    """The sizes verify runs a model with symbolic dims at, one dict per run (no dims: one empty run).

    First :func:`verify_sizes` (the upper bounds); then each dim at its lower bound (2 for an unbounded
    dim whose lower bound is 1: a size of 1 broadcasts, and would hide a wrong broadcast); then sizes
    drawn between the bounds (up to :data:`UNBOUNDED_VERIFY_MAX` for an unbounded dim). Duplicates go.
    """
    rng = np.random.default_rng(seed)
    low = {n: r.min if r.max is not None or r.min > 1 else 2 for n, r in dims.items()}
    high = {n: r.max if r.max is not None else max(r.min, UNBOUNDED_VERIFY_MAX) for n, r in dims.items()}
    drawn = {n: int(rng.integers(min(low[n], high[n]), high[n] + 1)) for n in dims}
    runs = []
    for sizes in (verify_sizes(dims), low, drawn):
        if sizes not in runs:
            runs.append(sizes)
    return runs


def shape_label(sizes: Mapping[str, int]) -> str:
    """``batch=2, seq=16``: the sizes of one verify run, as the report prints them."""
    return ", ".join(f"{name}={size}" for name, size in sizes.items())


def load_inputs(path: Union[str, os.PathLike]) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz`` file, keyed by model input name."""
    fix = "save inputs with numpy.savez(path, input_name=array, ...)"
    path = Path(path)
    if not path.is_file():
        raise InputError(f"inputs file not found: {str(path)!r}" + (" (it is a folder)" if path.is_dir() else ""))
    with open(path, "rb") as file:
        if file.read(4) != b"PK\x03\x04":  # .npz is a zip archive; numpy would try to unpickle anything else
            raise InputError(f"{str(path)!r} is not an .npz archive of arrays; {fix}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise InputError(f"{str(path)!r} holds object arrays, which byoc does not load (they may run code); "
                             f"{fix} with numeric arrays") from None
        raise InputError(f"cannot read {str(path)!r} as .npz ({err}); {fix}") from None
    except (OSError, EOFError) as err:
        raise InputError(f"cannot read {str(path)!r} as .npz ({err}); {fix}") from None


def is_quantized(model) -> bool:
    """Whether ``model`` holds quantized ops (Q/DQ nodes, or QOperator ones)."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear", "ConvInteger", "MatMulInteger")
               or n.op_type.startswith("QLinear") or n.op_type == "QGemm" for n in model.graph.node)


#: What verify says about the reference of a quantized model.
QUANTIZED_REFERENCE = ("quantized model: onnxruntime ran each op as ONNX defines it (graph optimizations off); "
                       "its fused int8 kernels round intermediates otherwise, and outputs move by quanta")


def reference_outputs(plan: PartitionPlan, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs for the model of ``plan`` (its checked copy, shapes applied).

    A quantized model runs with graph optimizations off: each QDQ unit as its
    definition, not fused into onnxruntime's int8 kernels, whose different
    rounding of intermediates can move an output by several quanta (measured:
    2 on a four-layer CNN). That definition is what byoc's builds compute.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # onnxruntime warnings would break the one-line-per-phase output
    if is_quantized(plan.imported.model):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = plan.imported.model
    if not _holds(model, TensorProto.BFLOAT16):
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return session.run(None, dict(inputs))
    reference, rounded = _bfloat16_reference(model)
    session = ort.InferenceSession(reference.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feed = {name: a.astype(np.float32) if a.dtype.name == "bfloat16" else a for name, a in inputs.items()}
    names = [vi.name for vi in reference.graph.output]
    return [o.astype(_bfloat16_dtype()) if name in rounded else o for name, o in zip(names, session.run(None, feed))]


BFLOAT16_REFERENCE = ("bfloat16 model: onnxruntime has no bfloat16 kernels on CPU, so it ran the model computed in "
                      "float32 (its bfloat16 weights exactly, the inputs widened, the bfloat16 outputs rounded after), "
                      "as its CPU provider runs float16 models")


def _bfloat16_dtype():
    import ml_dtypes  # onnx's own dependency

    return np.dtype(ml_dtypes.bfloat16)


def _bfloat16_reference(model):
    """``model`` (which holds bfloat16) computed in float32 with a float32 interface, for onnxruntime, whose CPU
    provider has no bfloat16 kernels and whose Python API takes and gives no bfloat16 arrays; and the names of the
    outputs to round to bfloat16 after (byoc.pipeline.frontend.prepare.half_precision)."""
    from onnx import helper

    from byoc.pipeline.frontend.prepare.half_precision import compute_in_float32

    reference = compute_in_float32(model)[0]
    graph = reference.graph
    rounded = {vi.name for vi in graph.output if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16}
    for vi in (*graph.input, *graph.output):
        if vi.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for node in graph.node:  # the Casts that write the bfloat16 outputs
        if node.op_type == "Cast" and set(node.output) & rounded:
            for attr in node.attribute:
                if attr.name == "to":
                    attr.CopyFrom(helper.make_attribute("to", TensorProto.FLOAT))
    return reference, rounded


def _holds(model, elem_type: int) -> bool:
    graph = model.graph
    return any(vi.type.tensor_type.elem_type == elem_type for vi in (*graph.input, *graph.output, *graph.value_info)) \
        or any(t.data_type == elem_type for t in graph.initializer)


def _half_model(model) -> bool:
    from byoc.pipeline.frontend.prepare.half_precision import has_half_precision

    return has_half_precision(model)


def output_quanta(model) -> dict[str, float]:
    """Model output -> one quantum of it, for outputs a quantized model computes.

    An output that a DequantizeLinear with a per-tensor scale makes is off by
    one quantum, its scale, when a vendor's integer kernels round one
    intermediate differently from onnxruntime's; an 8-bit output of a
    QuantizeLinear (or a QLinear* op) is off by 1.
    """
    from onnx import numpy_helper

    producers = {out: node for node in model.graph.node for out in node.output}
    initializers = {t.name: t for t in model.graph.initializer}
    quanta = {}
    for output in model.graph.output:
        node = producers.get(output.name)
        if node is None:
            continue
        if node.op_type == "DequantizeLinear" and node.input[1] in initializers:
            scale = numpy_helper.to_array(initializers[node.input[1]])
            if scale.size == 1:
                quanta[output.name] = float(scale.reshape(()))
        elif node.op_type == "QuantizeLinear" or node.op_type.startswith("QLinear"):
            quanta[output.name] = 1.0
    return quanta


def compare(names: Sequence[str], got: Sequence[np.ndarray], want: Sequence[np.ndarray],
            quanta: Optional[Mapping[str, float]] = None, half: bool = False) -> list[OutputCheck]:
    """Per-output comparison with the per-dtype :data:`TOLERANCE` (exact for other dtypes).

    An output in ``quanta`` (see :func:`output_quanta`) may also be off by one
    quantum, and its check says so. ``half``: the model computes in float16/bfloat16, so a float32 output of it
    (``keep_io_types=True``) is compared with float16's tolerance: onnxruntime rounds to float16 around the ops it
    has float16 kernels for, byoc computes them in float32.
    """
    quanta = quanta or {}
    checks = []
    for name, a, b in zip(names, got, want):
        if isinstance(b, list) or b is None:  # a sequence output, each tensor compared (None: an empty optional)
            if b is None or not isinstance(a, list) or len(a) != len(b):
                given = "None" if a is None else f"{len(a)} tensor(s)" if isinstance(a, list) else "a tensor"
                wanted = "None" if b is None else f"{len(b)} tensor(s)"
                checks.append(OutputCheck(name, a is None and b is None, 0.0 if a is None and b is None
                                          else float("inf"), "" if a is b else f"got {given}, onnxruntime gives {wanted}"))
                continue
            checks += compare([f"{name}[{k}]" for k in range(len(b))], a, b, quanta, half)
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            checks.append(OutputCheck(name, False, float("inf"),
                                      f"got {a.dtype}{list(a.shape)}, onnxruntime gives {b.dtype}{list(b.shape)}"))
            continue
        if a.size == 0:
            checks.append(OutputCheck(name, True, 0.0))
            continue
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        rtol, atol = TOLERANCE.get("float16" if half and a.dtype == np.float32 else str(a.dtype), (0.0, 0.0))
        quantum = quanta.get(name)
        note = ""
        if quantum is not None:
            atol += quantum * (1 + rtol)
            note = (f"compared within one quantum ({quantum:.3g}, the scale of the DequantizeLinear it comes from): "
                    f"max {float(np.nanmax(diff)) / quantum:.2f} quanta") if quantum != 1.0 else \
                "compared within one quantum of its integer type"
        ok = bool(np.all(diff <= atol + rtol * np.abs(b.astype(np.float64)))
                  and np.array_equal(np.isnan(a), np.isnan(b)))
        checks.append(OutputCheck(name, ok, float(np.nanmax(diff)) if diff.size else 0.0, note))
    return checks


def _run(plan: PartitionPlan, target, inputs, want, artifact=None) -> list[OutputCheck]:
    artifact = artifact or build(plan, target=target)
    # Foreign targets run as the standalone program (under qemu); see byoc.deploy.standalone.
    got = artifact.run(inputs) if artifact.target.is_host else artifact.run_emulated(inputs)
    return compare([s.name for s in plan.imported.outputs], got, want, output_quanta(plan.imported.model),
                   half=_half_model(plan.imported.model))


def verify(
    plan: PartitionPlan,
    target=None,
    inputs: Optional[Mapping[str, np.ndarray]] = None,
    inputs_label: Optional[str] = None,
    progress: Progress = None,
    artifact=None,
    shapes: Optional[Sequence[Mapping[str, int]]] = None,
) -> Verification:
    """Build ``plan``, compare it with onnxruntime, and bisect a mismatch to a partition.

    ``target`` defaults to the plan's. ``inputs`` default to :func:`random_inputs`, at every run of
    ``shapes`` (dim name -> size per run; default :func:`verify_shapes`) when the model has symbolic
    dims: one build runs them all. ``inputs_label`` says in the result where the inputs came from.
    ``artifact``: a build of ``plan`` for ``target`` to check, instead of building one. Rebuilds for the
    bisection use the plan's own vendors, ``min_ops`` and ``keep_on_host``, and the inputs that differed.
    """
    say = progress or (lambda _: None)
    preset = plan.target if target is None else resolve_target(target)
    label = inputs_label or f"random (seed {SEED})"
    if inputs is not None:
        runs = [("", inputs)]
    else:
        sizes = [dict(s) for s in shapes] if shapes else verify_shapes(plan.imported.dims)
        runs = [(shape_label(s), random_inputs(plan.imported.inputs, sizes=s)) for s in sizes]
    wants = []
    for run_label, run_inputs in runs:
        say(f"verify: running onnxruntime{' at ' + run_label if run_label else ''}")
        wants.append(reference_outputs(plan, _checked(plan, run_inputs)))
    if artifact is None:
        say(f"verify: building {len(plan.partitions)} partition(s)")
        artifact = build(plan, target=preset)
    reference = [QUANTIZED_REFERENCE] if is_quantized(plan.imported.model) else []
    if _holds(plan.imported.model, TensorProto.BFLOAT16):
        reference.append(BFLOAT16_REFERENCE)
    at = [run_label for run_label, _ in runs if run_label]
    for (run_label, run_inputs), want in zip(runs, wants):
        say(f"verify: running {len(plan.partitions)} partition(s){' at ' + run_label if run_label else ''}")
        checks = _run(plan, preset, run_inputs, want, artifact)
        if all(c.ok for c in checks):
            continue
        where = f" at {run_label}" if run_label else ""
        lines = [f"output {c.name!r} differs from onnxruntime{where} (max abs diff {c.max_abs_diff:.3g})"
                 + (f": {c.note}" if c.note else "") for c in checks if not c.ok]
        culprits, more = _bisect(plan, preset, run_inputs, want, say)
        return Verification("mismatch", label + where, checks, culprits, lines + more + reference, at)
    shapes_text = f" at {len(at)} shape(s): {'; '.join(at)}" if at else ""
    return Verification("ok", label, checks, lines=[
        f"all {len(checks)} output(s) match onnxruntime on {label} inputs{shapes_text}"]
        + [f"output {c.name!r}: {c.note}" for c in checks if c.note] + reference, shapes=at)


def _checked(plan: PartitionPlan, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [s.name for s in plan.imported.inputs]
    missing = [n for n in names if n not in inputs]
    unknown = [n for n in inputs if n not in names]
    if missing or unknown:
        raise InputError(f"inputs do not match the model: missing {missing}, unknown {unknown}; "
                         f"the model's inputs are {names}")
    for spec in plan.imported.inputs:
        for array in (inputs[spec.name] or []) if spec.sequence else [inputs[spec.name]]:
            if array.dtype != np.dtype(spec.dtype):
                raise InputError(f"input {spec.name!r} is {array.dtype}{list(array.shape)}, "
                                 f"the model expects {spec.describe()}")
    tensors = [spec for spec in plan.imported.inputs if not spec.sequence]
    bind_dims(tensors, [inputs[spec.name].shape for spec in tensors], plan.imported.dims)
    return {n: inputs[n] for n in names}


def _replan(plan: PartitionPlan, on_host: Sequence[str]) -> PartitionPlan:
    keep = list(dict.fromkeys([*plan.keep_on_host, *on_host]))
    return partition(plan.imported, plan.vendors, target=plan.target, min_ops=plan.min_ops, keep_on_host=keep)


def _matches(plan, on_host, preset, inputs, want) -> Optional[bool]:
    """Whether the build with ``on_host`` nodes kept on the host matches; None if it cannot build."""
    try:
        return all(c.ok for c in _run(_replan(plan, on_host), preset, inputs, want))
    except ByocError:
        return None


def _bisect(plan, preset, inputs, want, say) -> tuple[list[str], list[str]]:
    parts = plan.partitions
    culprits, lines = [], []
    for part in parts:
        say(f"verify: rebuilding with {part.name} on the host")
        result = _matches(plan, part.onnx_nodes, preset, inputs, want)
        if result:
            culprits.append(part.name)
            lines.append(f"moving {part.name} ({part.vendor}: {', '.join(part.onnx_nodes)}) back to "
                         "the host makes every output match: it causes the mismatch")
        elif result is None:
            lines.append(f"could not rebuild with {part.name} on the host; it stays a suspect")
    if culprits:
        return culprits, lines
    all_nodes = [n for p in parts for n in p.onnx_nodes]
    say("verify: rebuilding with every partition on the host")
    if not _matches(plan, all_nodes, preset, inputs, want):
        lines.append("the mismatch remains with every partition on the host: "
                     "it does not come from a vendor partition")
        return [], lines
    # Several partitions are wrong together: offload them one more at a time.
    for count in range(1, len(parts) + 1):
        rest = [n for p in parts[count:] for n in p.onnx_nodes]
        say(f"verify: rebuilding with only the first {count} partition(s) offloaded")
        if _matches(plan, rest, preset, inputs, want) is False:
            culprit = parts[count - 1]
            lines.append(f"no single partition explains it; offloading partitions in call order, "
                         f"the mismatch starts with {culprit.name} ({culprit.vendor})")
            return [culprit.name], lines
    lines.append("no partition could be named: the mismatch depends on partitions working together")
    return [], lines

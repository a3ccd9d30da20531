"""Check a loaded model before it is prepared: read it as its writer meant, sort its nodes, refuse tensors of
2 GiB or more, run onnx.checker and shape inference, and refuse ops TVM's importer lacks (with what to do)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
import onnx
from onnx import shape_inference

from byoc.errors import (InsufficientMemoryError, InvalidModelError, UnsupportedOpsError, UnsupportedTypeError,
                         first_line)
from byoc.pipeline.frontend.matmul_nbits import IMPORTED_CONTRIB_OPS, check_matmul_nbits
from byoc.pipeline.frontend.onnx_model import subgraphs


def read_as_the_writers_meant(model: onnx.ModelProto) -> None:
    """Undo two habits of model writers that onnx.checker and strict shape inference reject, in place.

    - A dim of -1 means "unknown" to exporters and to onnxruntime's quantizer
      (PP-OCR's batch dim, then every value_info it writes), while ONNX reads
      it as a size that contradicts every inferred one. It becomes unknown.
    - A model of IR version 3 must list its initializers as graph inputs; tools
      that add initializers (onnxruntime's quantizer adds scales and zero
      points to the light zoo's opset-9 models) do not, and onnxruntime runs
      the result. Its IR version becomes 4, which reads the same graph
      without that rule.
    - onnxruntime registers a few ops of its own in ONNX's domain, where ONNX
      defines none at the model's opset (``SimplifiedLayerNormalization``;
      ``LayerNormalization`` before opset 17), and its transformer optimizer
      writes them there. onnx.checker refuses them; they are read as the
      ``com.microsoft`` ops they are, which preparation rewrites
      (:mod:`byoc.pipeline.frontend.prepare.contrib_ops`).
    - onnxruntime-genai's builder names the head size of a GroupQueryAttention's
      cache as a dim of its own (``kv_cache_dim``), which the op fixes: it
      becomes that size (:func:`~byoc.pipeline.frontend.prepare.contrib_attention.cache_head_dims`).
    """
    from byoc.pipeline.frontend.prepare.contrib_attention import cache_head_dims
    from byoc.pipeline.frontend.prepare.contrib_ops import ORT_DEFAULT_DOMAIN_OPS
    from byoc.pipeline.frontend.onnx_model import default_opset
    from byoc.pipeline.frontend.prepare.node_rewrite import MS_DOMAIN

    graph = model.graph
    fixed = cache_head_dims(model)
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                dim.ClearField("dim_value")
            elif dim.dim_param in fixed:
                dim.dim_value = fixed[dim.dim_param]
    if model.ir_version < 4 and not {t.name for t in graph.initializer} <= {vi.name for vi in graph.input}:
        model.ir_version = 4
    opset = default_opset(model)
    moved = False
    for node in graph.node:
        since = ORT_DEFAULT_DOMAIN_OPS.get(node.op_type, 0)
        if node.domain in ("", "ai.onnx") and node.op_type in ORT_DEFAULT_DOMAIN_OPS and (since is None or opset < since):
            node.domain, moved = MS_DOMAIN, True
    if moved and not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.add(domain=MS_DOMAIN, version=1)


def _outer_names(node: onnx.NodeProto) -> set[str]:
    """Names the subgraphs of ``node`` read, at any depth."""
    return {x for sub in subgraphs(node) for inner in sub.node for x in (*inner.input, *_outer_names(inner)) if x}


def sort_nodes(graph: onnx.GraphProto) -> None:
    """Put the nodes in a topological order (stable), or name the nodes of a cycle.

    onnx.checker only says "not topologically sorted"; exporters sometimes
    write unsorted graphs that are fine, while a real cycle can never run.
    """
    nodes = list(graph.node)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
    # A value a subgraph reads from the outer graph must be computed before the node that holds it.
    parents = [sorted({producer[x] for x in (*node.input, *_outer_names(node)) if x in producer and producer[x] != i})
               for i, node in enumerate(nodes)]
    self_loops = [nodes[i].name for i, node in enumerate(nodes) if any(producer.get(x) == i for x in node.input)]
    if self_loops:
        raise InvalidModelError(
            f"the graph has a cycle: node {self_loops[0]!r} consumes its own output; an ONNX graph "
            "must be acyclic: fix the exporter"
        )
    children: dict[int, list[int]] = {}
    for i, ps in enumerate(parents):
        for p in ps:
            children.setdefault(p, []).append(i)
    waiting = [len(ps) for ps in parents]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order: list[int] = []
    while ready:
        i = min(ready)  # stable: keep the file's order where it already works
        ready.remove(i)
        order.append(i)
        for c in children.get(i, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    if len(order) < len(nodes):
        stuck = [i for i in range(len(nodes)) if waiting[i] > 0]
        cycle, seen, i = [], set(), stuck[0]
        while i not in seen:  # every stuck node has a stuck parent: walk up until a repeat
            seen.add(i)
            cycle.append(i)
            i = next(p for p in parents[i] if waiting[p] > 0)
        loop = cycle[cycle.index(i):][::-1]
        path = " -> ".join(repr(nodes[k].name) for k in loop + loop[:1])
        raise InvalidModelError(
            f"the graph has a cycle: {path}; an ONNX graph must be acyclic: fix the exporter"
        )
    if order != list(range(len(nodes))):
        graph.ClearField("node")
        graph.node.extend(nodes[i] for i in order)


#: Largest tensor byoc accepts: element counts and byte sizes must fit in int32
#: (C kernels and many runtimes index with 32-bit sizes; such a tensor is a
#: corrupt or hostile model far more often than a real one).
MAX_TENSOR_BYTES = 2**31 - 1


def check_tensor_sizes(graph: onnx.GraphProto) -> None:
    """Refuse any input, output, intermediate or weight of 2 GiB or more elements or bytes."""
    def dims_of(vi):
        return [d.dim_value for d in vi.type.tensor_type.shape.dim if d.HasField("dim_value")]

    typed = [(vi.name, dims_of(vi), vi.type.tensor_type.elem_type)
             for vi in list(graph.input) + list(graph.value_info) + list(graph.output)]
    typed += [(t.name, list(t.dims), t.data_type) for t in graph.initializer]
    for name, dims, elem_type in typed:
        count = int(np.prod(dims, dtype=object)) if dims else 1
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 1
        if count > MAX_TENSOR_BYTES or count * itemsize > MAX_TENSOR_BYTES:
            raise InvalidModelError(
                f"tensor {name!r} has shape {dims} ({count * itemsize / 2**30:.1f} GiB); byoc refuses "
                f"tensors of 2 GiB or more: check the model's shapes (or input_shapes=)"
            )


def check_tensor_values(graph: onnx.GraphProto) -> None:
    """An :class:`UnsupportedTypeError` naming the graph's inputs and outputs that are neither tensors nor
    sequences of tensors (an optional of either is one of them): maps, sequences of sequences or of maps. An
    artifact takes and returns arrays, and lists of arrays for sequences
    (:mod:`~byoc.pipeline.frontend.run_time_sequences`)."""
    others = [(vi.name, _value_kind(vi.type)) for vi in (*graph.input, *graph.output)]
    others = [(name, kind) for name, kind in others if kind not in ("tensor", "sequence")]
    if others:
        listed = ", ".join(f"{name} ({kind})" for name, kind in others)
        raise UnsupportedTypeError(
            f"graph inputs or outputs that are neither tensors nor sequences of tensors: {listed}; byoc runs models "
            "whose inputs and outputs are tensors or sequences of tensors (give or return the map's values, or the "
            "inner sequences' concatenation, instead)", others)


def _value_kind(type_proto: onnx.TypeProto) -> str:
    """"tensor", "sequence" (of tensors), or what else a graph's value is (an optional is what it holds)."""
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        return _value_kind(type_proto.optional_type.elem_type)
    if kind == "sequence_type":
        inner = _value_kind(type_proto.sequence_type.elem_type)
        return "sequence" if inner == "tensor" else f"sequence of {inner}s"
    return "tensor" if kind is None else kind.removesuffix("_type")  # a writer may leave an output untyped


def check_model(model: onnx.ModelProto, overrides: Sequence[str] = ()) -> onnx.ModelProto:
    """Run onnx.checker and shape inference; ``overrides`` (from input_shapes) explain a failure."""
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = first_line(err)
        raise InvalidModelError(f"onnx.checker rejected the model: {first}") from None
    try:
        return shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as err:  # noqa: BLE001 - onnx raises several private error types here
        strict_error = first_line(err)
    if model.graph.value_info and "existing shape differ" in strict_error:
        # The shapes a writer declares for intermediate tensors are hints that onnxruntime checks against
        # nothing (onnxruntime-genai's builder declares its 1-element constants as scalars): inferred afresh.
        # ``model`` is byoc's own copy (import_model's), already written to by read_as_the_writers_meant: the
        # hints are dropped from it in place, not from a serialized copy of every weight.
        hinted = strict_error
        del model.graph.value_info[:]
        try:
            return shape_inference.infer_shapes(model, strict_mode=True)
        except Exception as err:  # noqa: BLE001 - as above
            strict_error = first_line(err)
        if strict_error == hinted:
            raise InvalidModelError(f"ONNX shape inference failed: {strict_error}")
    if strict_error.count("Inference error(s)") < 2:
        # An error on a node of the user's graph (declared and inferred shapes differ, an
        # attribute no shape fits): the model is wrong, and TVM would build nonsense from it.
        if overrides:
            raise InvalidModelError(
                f"the model does not work at the shape given: {'; '.join(overrides)}, and the model hard-codes "
                f"the original size (ONNX shape inference: {strict_error}); use the model's own size, or "
                "re-export it with that dim dynamic")
        raise InvalidModelError(f"ONNX shape inference failed: {strict_error}")
    # A nested error comes from inside an op's function body, which ONNX expands to infer
    # shapes and sometimes cannot (MeanVarianceNormalization from opset 13 on: a Constant
    # of its body has no value in that context), while TVM imports the op itself fine.
    # That is ONNX's limitation, not the model's: keep what non-strict inference finds.
    warnings.warn(
        f"ONNX shape inference failed in strict mode inside an op's function body ({strict_error}); "
        "continuing with the shapes non-strict inference finds. If the import fails later, this "
        "is the likely cause.",
        RuntimeWarning,
        stacklevel=3,
    )
    try:
        return shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as err:  # noqa: BLE001 - as above
        first = first_line(err)
        raise InvalidModelError(f"ONNX shape inference failed: {first}") from None


#: (domain prefix, what to do) for the op domains exporters write that are not ONNX's, first match wins
_DOMAIN_ADVICE = (
    # onnxruntime's dynamic quantizer and transformer optimizer write these; the float model quantized to QDQ is what
    # byoc runs as int8. onnxruntime's own ops that preparation does not rewrite (prepare/contrib_ops.py lists those
    # it does, prepare/recurrent.py takes DynamicQuantizeLSTM).
    ("com.microsoft", "they are onnxruntime's own ops, outside those byoc rewrites into standard ONNX "
                      "(byoc.pipeline.frontend.prepare.contrib_ops.CONTRIB_OPS): compile the model as exported, "
                      "before the tool that wrote them (onnxruntime's transformer optimizer: optimize_model with a "
                      "FusionOptions that turns that fusion off; quantize_dynamic: quantize_static's QDQ format)"),
    ("org.pytorch.aten", "ATen ops are torch's fallback for what its exporter could not write in ONNX: export "
                         "without operator_export_type=ONNX_ATEN_FALLBACK, at a newer opset, or with dynamo=True"),
    ("pkg.onnxscript", "these are functions of torch's dynamo exporter that the file calls but does not define: "
                       "export with torch.onnx.export(..., dynamo=True, optimize=True), which inlines them"),
    ("ai.onnx.ml", "ai.onnx.ml ops are classical machine learning (scikit-learn, trees), which byoc does not "
                   "compile: run that part of the pipeline apart, and compile the neural network alone"),
)


def inline_local_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the calls of the functions it defines itself (``model.functions``: torch's exporters write
    modules as functions when not asked to inline them) replaced by their bodies, as onnxruntime runs them; the
    nodes keep the functions' node names, made unique. The model as given when it defines none."""
    if not model.functions:
        return model
    import onnx.inliner

    return onnx.inliner.inline_local_functions(model)


#: Standard ops TVM's importer lacks that byoc's import converts: the Loops preparation leaves to the host
#: (loop_bodies.py), CumProd (cumulative.py), TensorScatter (tensor_scatter.py), BitCast (bit_cast.py), Col2Im
#: (col2im.py), Det (determinant.py) and DeformConv (deform_conv.py)
BYOC_CONVERTS = frozenset({"Loop", "CumProd", "TensorScatter", "BitCast", "Col2Im", "Det", "DeformConv"})


def check_supported_ops(graph: onnx.GraphProto, origin: Mapping[str, str] | None = None) -> None:
    """Refuse ops TVM's importer lacks; ``origin`` names prepared nodes by the user's nodes."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    origin = origin or {}
    known = set(_get_convert_map()) | {"If", "Constant"} | BYOC_CONVERTS
    missing = [
        (origin.get(n.name, n.name), n.op_type, n.domain)
        for n in graph.node
        if (n.domain not in ("", "ai.onnx") or n.op_type not in known)
        and (n.domain, n.op_type) not in IMPORTED_CONTRIB_OPS
    ]
    if missing:
        listing = ", ".join(
            f"{name} ({op}{' in domain ' + dom if dom else ''})" for name, op, dom in missing
        )
        kinds = sorted({op for _, op, _ in missing})
        domains = {dom for _, _, dom in missing}
        advice = next((text for prefix, text in _DOMAIN_ADVICE if any(d.startswith(prefix) for d in domains if d)),
                      "replace them in the exporter, or decompose them with onnx tools before compiling")
        raise UnsupportedOpsError(
            f"{len(missing)} node(s) use ops that cannot be imported: {listing}. "
            f"Unsupported op types: {', '.join(kinds)}; {advice}",
            missing,
        )
    check_matmul_nbits(graph, origin)


#: Bytes a build holds at its peak per byte of the model's weights, and besides them: measured on BERT-base
#: (417 MiB of weights, float32) with dnnl, through export: a peak of 2.77 GiB above the process's 0.2 GiB
#: (the ONNX model, its prepared copy, TVM's constants, the runtimes' copies, the library being linked).
BUILD_BYTES_PER_WEIGHT_BYTE = 7
BUILD_BYTES_BESIDES = 512 << 20


def available_memory() -> Optional[int]:
    """Bytes the system says it can give without swapping (``MemAvailable``, Linux), or None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_build_memory(graph: onnx.GraphProto, origin: str) -> None:
    """An :class:`~byoc.errors.InsufficientMemoryError` when building a model with ``graph``'s weights would need
    more memory than is available now (:data:`BUILD_BYTES_PER_WEIGHT_BYTE`), rather than a build that exhausts
    the machine."""
    # the bytes the initializers hold (external data was read in by now), not what their dims claim: a tensor
    # whose dims promise more than it carries is a malformed model, which the checks after this name
    weights = sum(t.ByteSize() for t in graph.initializer)
    need = BUILD_BYTES_PER_WEIGHT_BYTE * weights + BUILD_BYTES_BESIDES
    available = available_memory()
    if available is not None and need > available:
        gib = 1 << 30
        raise InsufficientMemoryError(
            f"building {origin} needs about {need / gib:.1f} GiB of memory (its {weights / gib:.2f} GiB of weights "
            f"are held about {BUILD_BYTES_PER_WEIGHT_BYTE}x at a build's peak, plus "
            f"{BUILD_BYTES_BESIDES / gib:.1f} GiB), but only {available / gib:.1f} GiB is available: build it on a "
            "machine with more memory, or free some (an artifact built elsewhere loads with about its weights' size)")

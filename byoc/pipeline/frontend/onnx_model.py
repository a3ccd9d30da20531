"""The model as the pipeline's stages share it: its types and two ONNX graph helpers.

:class:`ImportedModel` (the Relax module with the provenance of every
binding), :class:`TensorSpec` and :class:`OnnxNode` are what the frontend
hands to the annotator, partitioner, builder and artifact;
:func:`name_nodes` and :func:`subgraphs` are read by the frontend and by the
steps it drives (:mod:`~byoc.pipeline.frontend.prepare`,
:mod:`~byoc.pipeline.frontend.prepare.recurrent`, :mod:`~byoc.pipeline.frontend.importer`). They live
apart from :mod:`~byoc.pipeline.frontend`, which drives those steps, so that
no module of the pipeline imports one that imports it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

import numpy as np
import onnx


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of a model input or output.

    Each dim of ``shape`` is a size, or the name (an expression, for an
    output: ``"sequence_length*2"``) of a symbolic dim. A ``sequence`` is an
    ONNX sequence (or optional sequence) of tensors of ``dtype``, given and
    returned as a list of arrays (None for an empty optional), its length known
    when the model runs; ``shape`` is what the model declares of each tensor
    (``()`` where it declares no rank), which a run does not bind.
    """

    name: str
    shape: tuple[Union[int, str], ...]
    dtype: str
    sequence: bool = False

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def nbytes(self) -> Optional[int]:
        """Bytes of the tensor; None when a dim is symbolic."""
        if not self.is_static:
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        """``float32[batch, 3, 224, 224]``; ``sequence(float32[n])``."""
        text = f"{self.dtype}[{', '.join(map(str, self.shape))}]"
        return f"sequence({text})" if self.sequence else text


@dataclass(frozen=True)
class DimRange:
    """A symbolic dim of a model and the sizes it may take: ``min`` to ``max`` (None: unbounded)."""

    name: str
    min: int = 1
    max: Optional[int] = None

    def holds(self, size: int) -> bool:
        return size >= self.min and (self.max is None or size <= self.max)

    def describe(self) -> str:
        """``1..512``, ``1..`` when unbounded."""
        return f"{self.min}..{'' if self.max is None else self.max}"


@dataclass(frozen=True)
class OnnxNode:
    """The ONNX node a Relax binding came from."""

    name: str
    op_type: str


@dataclass
class ImportedModel:
    """A model imported into Relax, with the provenance of every binding.

    ``node_of`` maps the name of each binding in ``mod["main"]`` to the user's
    ONNX node that produced it (name and op type), through preparation: a
    binding of a Conv that absorbed a BatchNormalization names the Conv, one
    of an unrolled LSTM names the LSTM. ``model`` is byoc's own checked,
    shape-inferred copy of the user's model with the static input shapes
    applied, not the prepared graph: it is what onnxruntime runs as the
    reference in ``verify``, and the graph reports and the ONNX export are
    drawn on (the user's object is never modified). ``prepared_model`` is the
    graph TVM imported.
    """

    mod: object  # tvm.IRModule
    model: onnx.ModelProto
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    node_of: dict[str, OnnxNode] = field(default_factory=dict)
    #: User node name -> what preparation made of it, for each node not imported
    #: as itself ("folded into a constant", "fused into Conv `conv1`", ...).
    prepared: dict[str, str] = field(default_factory=dict)
    #: The graph TVM imported (``model`` after :mod:`byoc.pipeline.frontend.prepare`); None for
    #: an ImportedModel made by hand, which then stands for ``model`` itself.
    prepared_model: onnx.ModelProto | None = None
    #: The simplifier that prepared the model ("onnxsim 0.8.1"), or "" if none ran.
    simplifier: str = ""
    #: Binding name -> the ONNX tensor it holds, for each binding that is the
    #: whole result of a single-output node (reports name boundaries by it).
    tensor_of: dict[str, str] = field(default_factory=dict)
    #: Each symbolic dim of the inputs, by name, with its range (empty for a static model).
    dims: dict[str, DimRange] = field(default_factory=dict)
    #: The Loops the host runs (:mod:`byoc.pipeline.frontend.loop_bodies`), each with its body imported.
    loops: list[HostLoop] = field(default_factory=list)
    #: The host loop whose body this is ("" for a model): its bindings are named ``<scope>/...`` and its
    #: partitions ``<vendor>_<scope>_<k>``, apart from the enclosing model's.
    scope: str = ""

    @property
    def dim_bounds(self) -> dict[str, tuple]:
        """Each symbolic dim's ``(min, max)`` (max None when unbounded): what checks and codegens read."""
        return {name: (d.min, d.max) for name, d in self.dims.items()}


@dataclass(frozen=True)
class LoopSpec:
    """A Loop node the host runs, as the import found it, its body a model of its own
    (:mod:`byoc.pipeline.frontend.loop_bodies`)."""

    node: str  #: the Loop node's name in the imported graph
    symbol: str  #: the placeholder's name: a C identifier, unique in the model (``loop0``)
    body: onnx.ModelProto  #: inputs iteration, condition, carried..., captured...; outputs the body's
    carried: int  #: loop-carried values
    scans: int  #: scan outputs
    has_trip: bool  #: whether the loop has a trip count (else it runs while its condition holds)
    elements: tuple  #: each scan output's element: (dtype, its dims: an int each, None where only the run tells)


@dataclass(eq=False)
class HostLoop:
    """A Loop node the host runs, its body imported as a model of its own (:mod:`byoc.pipeline.frontend.loop_bodies`).

    In ``main`` it is a call of the placeholder ``spec.symbol`` taking ``(trip?, cond, carried..., captured...)``
    and giving ``(carried..., scan outputs...)``, which the build defines
    (:mod:`byoc.pipeline.partitioning.host_loops`).
    """

    node: str  #: the user's Loop node
    spec: LoopSpec
    body: ImportedModel  #: inputs iteration, condition, carried..., captured...; outputs condition, carried..., scans...


# -- ONNX graph helpers -----------------------------------------------------------
def name_nodes(graph: onnx.GraphProto, unnamed: str = "{op_type}_{index}") -> None:
    """Give every node a unique, non-empty name (reports are keyed by it); ``unnamed`` formats a missing one."""
    seen: set[str] = set()
    for index, node in enumerate(graph.node):
        name = node.name or unnamed.format(op_type=node.op_type, index=index)
        unique, k = name, 2
        while unique in seen:
            unique, k = f"{name}#{k}", k + 1
        node.name = unique
        seen.add(unique)


#: The value attributes of a Constant node other than ``value`` (ONNX's functions write them), and their dtypes.
CONSTANT_VALUE_FORMS = {"value_float": "float32", "value_floats": "float32", "value_int": "int64",
                        "value_ints": "int64"}


def constant_node_value(node: onnx.NodeProto) -> Optional[np.ndarray]:
    """A Constant node's value as a numpy array, from ``value`` or one of :data:`CONSTANT_VALUE_FORMS`; None for
    the other forms (strings, sparse tensors)."""
    from onnx import helper, numpy_helper

    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name in CONSTANT_VALUE_FORMS:
            return np.asarray(helper.get_attribute_value(attr), CONSTANT_VALUE_FORMS[attr.name])
    return None


def subgraphs(node: onnx.NodeProto):
    """The graphs ``node`` holds as attributes (If branches, Loop and Scan bodies)."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def all_graphs(graph: onnx.GraphProto):
    """``graph`` and every graph inside it (If branches, Loop and Scan bodies), at any depth."""
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from all_graphs(sub)


def index_inputs(model: Optional[onnx.ModelProto]) -> dict[str, tuple[int, str]]:
    """Model inputs that index a Gather of a constant directly (token ids into an embedding table): input name ->
    (the extent of the gathered axis, the Gather's node name), the smallest where one input indexes several.
    A run checks such inputs against the extent, as onnxruntime's Gather does (``Artifact.check_inputs``).
    None (a Relax module given without its ONNX model) has none."""
    if model is None:
        return {}
    graph_inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    tables = {t.name: list(t.dims) for t in model.graph.initializer}
    found: dict[str, tuple[int, str]] = {}
    for node in model.graph.node:
        if node.op_type != "Gather" or len(node.input) < 2 or node.input[1] not in graph_inputs:
            continue
        dims = tables.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if not dims or not -len(dims) <= axis < len(dims):
            continue
        extent = int(dims[axis])
        if node.input[1] not in found or extent < found[node.input[1]][0]:
            found[node.input[1]] = (extent, node.name)
    return found


def default_opset(model: onnx.ModelProto) -> int:
    """The version of ONNX's own domain the model is written in (1 when it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

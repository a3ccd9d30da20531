"""Serialize a partition (:class:`byoc.vendor.graph.PartitionGraph`) to a JSON graph.

Schema ``byoc.json_runtime.graph``, version 2 (:data:`SCHEMA_VERSION`)::

    {
      "format": "byoc.json_runtime.graph",
      "version": 2,
      "symbol": "json_runtime_0",              # the function the runtime exports
      "tensors": [                             # every value, declared once
        {"name": "input0", "kind": "input", "shape": [1, 3, 8, 8], "dtype": "float32"},
        {"name": "const0", "kind": "const", "shape": [4, 3, 3, 3], "dtype": "float32"},
        {"name": "t3",     "kind": "op",    "shape": [1, 4, 8, 8], "dtype": "float32"}
      ],
      "inputs":    ["input0"],                 # call order of the inputs
      "constants": ["const0"],                 # weights, by name; their bytes travel
                                               # next to the JSON, never inside it
      "outputs":   ["t3"],                     # call order of the outputs
      "nodes": [                               # execution order
        {
          "op": "json_runtime.conv2d_bias_relu",   # the vendor rule that took the node
          "inputs": ["input0", "const0", "const1"],  # tensors read from outside the node
          "outputs": ["t3"],                       # tensors the node hands on
          "body": [                                # the primitive ops of the rule's match
            {"kernel": "relax.nn.conv2d", "inputs": ["input0", "const0"], "output": "t1",
             "attrs": {"strides": {"type": "int[]", "value": [1, 1]}, ...}},
            ...
          ]
        }
      ]
    }

A graph may also carry the options its codegen was built with, as a
top-level ``"options"`` field typed like node attributes (written only when
the codegen declares options, so graphs without it are unchanged; a runtime
that does not read it ignores it)::

      "options": {"contention_watch": {"type": "bool", "value": true},
                  "winograd": {"type": "bool", "value": true}}

A graph-level driver dispatches on ``op`` (one node per rule match, as TVM's
own JSON runtimes do); the reference runtime executes ``body``, whose
``kernel`` is the Relax op name. Attribute values are typed:
``{"type": T, "value": V}`` with T one of ``none``, ``bool``, ``int``,
``float``, ``str``, ``int[]``, ``float[]``, ``str[]``. Floats are JSON numbers
except non-finite ones, written as the strings ``"inf"``, ``"-inf"``,
``"nan"`` so the JSON stays strict.

Version 2 adds one attribute: a body op with ``"only_if_cpu": F`` (a str) runs
only where the runtime reports CPU feature ``F``; the runtime leaves the
others out when it loads the graph, so a graph may compute one tensor in two
ways, each for the CPUs it suits (the dnnl runtime: ``vnni`` / ``no_vnni``
for int8 units whose kernels are exact only with VNNI). Runtimes read version
1 graphs too (they have no such ops). Tensor names are generated (``inputN``,
``constN``, ``tN``), never taken from the model.

Version 3 is what the dnnl codegen writes since the activations spelled as
several ops reach its runtime as one op each (``byoc.eltwise``, ``byoc.lrn``:
``codegens/dnnl/activations.py``): the dnnl runtime, which no longer finds
them in the op sequence, reads version 3 only and tells an older artifact to be
rebuilt; the JSON runtime reads 1 to 3.

Version 4 adds symbolic dims: a dim of a tensor's ``"shape"`` may be the
name of a symbolic dim of the model (``"batch"``) or an expression of them,
``[op, a, b]`` with ``op`` one of ``+ - * // % min max`` (``["*", "batch",
12]``). Every name must be a dim of a graph input, so that each call's input
shapes size it; a runtime compiles the graph once per set of sizes it is
called with and keeps at most the graph option ``"shape_cache"`` (an int,
default 8) of them. A graph with static shapes is written as before. When a
dim is no whole dim of any input (``seq`` where an input is ``(batch,
seq*16)``), TVM passes its size in a shape argument next to the tensors:
``"shape_arguments": [[position, ["seq"]]]`` lists each one's position among
the call's arguments (inputs and shapes, before the outputs) and the dims it gives
(``""`` for a static size, which gives none).

The text is deterministic: keys are sorted, separators fixed, names come
from counters, so the same partition gives byte-identical JSON in every
process.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from byoc.errors import CodegenError
from byoc.vendor.graph import PartitionGraph, Tensor
from byoc.vendor.values import tree_names

FORMAT = "byoc.json_runtime.graph"
SCHEMA_VERSION = 2
#: The version a graph with symbolic dims is written as (runtimes before it read only static shapes).
SYMBOLIC_VERSION = 4
DTYPES = ("float32",)


@dataclass(frozen=True)
class SerializedGraph:
    """A partition as the runtime takes it: JSON text plus named constant arrays."""

    symbol: str
    json: str
    constants: dict[str, np.ndarray]


def _float(value: float):
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return float(value)


def typed_attr(value: Any, where: str) -> dict:
    """``value`` as ``{"type": ..., "value": ...}``."""
    if value is None:
        return {"type": "none", "value": None}
    if isinstance(value, bool):
        return {"type": "bool", "value": value}
    if isinstance(value, int):
        return {"type": "int", "value": value}
    if isinstance(value, float):
        return {"type": "float", "value": _float(value)}
    if isinstance(value, str):
        return {"type": "str", "value": value}
    if isinstance(value, (tuple, list)):
        items = list(value)
        if all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return {"type": "int[]", "value": items}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in items):
            return {"type": "float[]", "value": [_float(float(v)) for v in items]}
        if all(isinstance(v, str) for v in items):
            return {"type": "str[]", "value": items}
        if all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in items):
            return {"type": "dim[]", "value": items}  # sizes and symbolic dims (a reshape's target); read by no runtime
    raise CodegenError(f"{where}: attribute value {value!r} has no JSON type; the json_runtime schema "
                       "takes none, bool, int, float, str and lists of int, float or str")


class _Names:
    """Generated tensor names: inputN, constN, tN."""

    def __init__(self, graph: PartitionGraph):
        self.names: dict[int, str] = {}
        for i, t in enumerate(graph.inputs):
            self.names[t.id] = f"input{i}"
        for i, t in enumerate(graph.constants):
            self.names[t.id] = f"const{i}"

    def __call__(self, t: Tensor) -> str:
        return self.names.setdefault(t.id, f"t{t.id}")


def _tensor_entry(t: Tensor, name: str, where: str, dtypes: tuple, dims: Mapping[str, Any]) -> dict:
    if t.dtype not in dtypes or (t.kind == "const" and t.dtype != "float32"):
        raise CodegenError(f"{where}: {t.kind} tensor of dtype {t.dtype}; the runtime takes {'/'.join(dtypes)} "
                           "(constants float32)")
    shape = [int(d) if isinstance(d, (int, np.integer)) else dims[d] for d in t.shape]
    return {"name": name, "kind": t.kind, "shape": shape, "dtype": t.dtype}


def _check_dims_bound(graph: PartitionGraph, where: str) -> None:
    """A runtime sizes each symbolic dim from a call's input shapes: each must be a whole dim of an input."""
    bound = {d for t in graph.inputs for d in t.shape if isinstance(d, str) and d.isidentifier()}
    bound |= {d for _, dims in graph.shape_arguments for d in dims if isinstance(d, str)}
    used = {name for tree in graph.dims.values() for name in tree_names(tree)}
    missing = sorted(used - bound)
    if missing:
        raise CodegenError(f"{where}: symbolic dim {missing[0]!r} is not a dim of any partition input, so a call "
                           "cannot size it (it appears only inside expressions such as a reshape's)")


def serialize(graph: PartitionGraph, dtypes: tuple = DTYPES, options: Optional[Mapping[str, Any]] = None,
              version: int = SCHEMA_VERSION) -> SerializedGraph:
    """The JSON graph and constants of one partition (schema in the module docstring).

    ``dtypes`` are the tensor dtypes the executing runtime takes (the oneDNN
    runtime adds uint8 and int8); constants are float32 whatever they hold.
    ``options`` (option name -> value), when given, are written as the
    graph's ``"options"`` field; ``version`` is the schema version written.
    """
    name = _Names(graph)
    where = f"partition {graph.symbol}"
    _check_dims_bound(graph, where)
    tensors: dict[str, dict] = {}

    def declare(t: Tensor) -> str:
        n = name(t)
        tensors.setdefault(n, _tensor_entry(t, n, where, dtypes, graph.dims))
        return n

    for t in graph.inputs:
        declare(t)
    for t in graph.constants:
        declare(t)

    # One node per rule match: consecutive ops that share a composite group.
    groups: list[list] = []
    for call in graph.ops:
        if groups and groups[-1][0].group == call.group:
            groups[-1].append(call)
        else:
            groups.append([call])
    read_later: set[int] = {t.id for t in graph.outputs}
    group_reads = [{t.id for call in calls for t in call.inputs} for calls in groups]

    nodes = []
    for index, calls in enumerate(groups):
        made = {call.output.id for call in calls}
        later = read_later | {i for reads in group_reads[index + 1 :] for i in reads}
        body, node_inputs = [], []
        for call in calls:
            op_where = f"{where}, {call.op}"
            ins = []
            for t in call.inputs:
                n = declare(t)
                ins.append(n)
                if t.id not in made and n not in node_inputs:
                    node_inputs.append(n)
            attrs = {key: typed_attr(value, f"{op_where} attribute {key!r}") for key, value in call.attrs.items()}
            body.append({"kernel": call.op, "inputs": ins, "output": declare(call.output), "attrs": attrs})
        outputs = list(dict.fromkeys(name(call.output) for call in calls if call.output.id in later))
        nodes.append({"op": calls[0].rule or calls[0].op, "inputs": node_inputs, "outputs": outputs, "body": body})

    document = {
        "format": FORMAT,
        "version": max(version, SYMBOLIC_VERSION) if graph.dims else version,
        "symbol": graph.symbol,
        "tensors": list(tensors.values()),
        "inputs": [name(t) for t in graph.inputs],
        "constants": [name(t) for t in graph.constants],
        "outputs": [declare(t) for t in graph.outputs],
        "nodes": nodes,
    }
    if graph.shape_arguments:
        document["shape_arguments"] = [[position, [d if isinstance(d, str) else "" for d in dims]]
                                       for position, dims in graph.shape_arguments]
    if options is not None:
        document["options"] = {key: typed_attr(value, f"{where} option {key!r}") for key, value in options.items()}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    constants = {name(t): np.ascontiguousarray(t.data, dtype=np.float32) for t in graph.constants}
    return SerializedGraph(graph.symbol, text, constants)

"""The JSON-runtime codegen: partitions become JSON graphs run by byoc's own runtime module.

Each partition is serialized by :mod:`.serializer` and wrapped, with its
constants, in a ``byoc_json_runtime`` module (the C++ in
``runtime/json_runtime.cc``). That module executes the graph with the same
reference kernels as the C-source codegen, saves itself into an exported
library (``SaveToBytes``) and loads back in a fresh process once
:meth:`JsonRuntimeCodegen.load_runtime` has run there (``byoc.load`` does it).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from byoc.vendor import Codegen, RuntimeMemory

from .runtime import JSON_RUNTIME, RuntimeLibrary, load_runtime
from .serializer import FORMAT, SCHEMA_VERSION, SerializedGraph, serialize

__all__ = ["FORMAT", "JsonRuntimeCodegen", "SCHEMA_VERSION", "SerializedGraph", "load_runtime", "module_memory",
           "serialize"]


def module_memory(module) -> RuntimeMemory:
    """What a graph-runtime module (json_runtime, dnnl) holds now, by its ``get_memory``: its workspace per call,
    the constants it keeps resident (those of the model it reads where they are, plus the copies its kernels
    made) and the model's constants it was given. A module loaded from a library whose kernels read copies of
    the weights holds none of the file's pages (``codegens/graph_runtime/weights.h``)."""
    workspace, held, made, given = (int(v) for v in list(module["get_memory"]())[:4])
    return RuntimeMemory(workspace, held + made, given)


class JsonRuntimeCodegen(Codegen):
    """Codegen that makes one runtime module per partition.

    ``library`` is the graph runtime that executes the JSON: byoc's reference
    kernels by default; the dnnl vendor passes its oneDNN runtime.
    """

    #: Both graph runtimes read a tensor at any address of its element type (plain C++ loops, oneDNN).
    input_alignment = 1

    def __init__(self, library: RuntimeLibrary = JSON_RUNTIME):
        self.library = library

    @property
    def module_kinds(self) -> tuple[str, ...]:
        """The type key of the modules this codegen makes (:attr:`byoc.vendor.Codegen.module_kinds`)."""
        return (self.library.module_kind,)

    def load_runtime(self) -> None:
        """Load the runtime library, so modules of ``module_kinds`` can be created and loaded."""
        self.library.load()

    def graph_options(self, options: Optional[Mapping] = None) -> Optional[dict]:
        """The declared options (:attr:`byoc.vendor.Codegen.declared_options`) as a graph carries them: their
        values in ``options``, else their defaults; None when this codegen declares none."""
        if not self.declared_options:
            return None
        given = options or {}
        return {o.name: given.get(o.name, o.default) for o in self.declared_options}

    def serialize(self, partition, options: Optional[Mapping] = None) -> SerializedGraph:
        """The JSON graph and constants of ``partition`` (a ``byoc.vendor.graph.PartitionGraph``), with the
        codegen's ``options`` (:meth:`graph_options`)."""
        return serialize(partition, options=self.graph_options(options))

    def compile(self, partitions: Sequence, options: Mapping) -> list:
        import tvm
        import tvm_ffi

        self.load_runtime()
        create = tvm_ffi.get_global_func(self.library.factory)
        modules = []
        for partition in partitions:
            graph = self.serialize(partition, options)
            names = sorted(graph.constants)
            tensors = [tvm.runtime.tensor(graph.constants[n]) for n in names]
            modules.append(create(graph.symbol, graph.json, names, tensors))
        return modules

    def runtime_memory(self, partitions: Sequence, modules: Sequence) -> dict:
        """What each module reports it holds (:meth:`byoc.vendor.Codegen.runtime_memory`): its workspace per
        call, and its constants (as given, plus any copies its executor made, e.g. reordered). A graph with
        symbolic dims makes its workspace per shape, at the shape's first call: before that, it reports
        nothing."""
        memory = {}
        for module in modules:
            if int(module["get_specializations"]()[0]) == 0:
                continue  # symbolic dims, no shape run yet: its workspace is not known
            memory[str(module["get_symbol"]())] = module_memory(module)
        return memory

"""The C-source codegen: partitions become plain C compiled into the artifact.

The emitted C is packaged with ``runtime.CSourceModuleCreate`` so TVM's
``export_library`` compiles it with the host or cross C compiler, next to the
host kernels. See :mod:`.emitter` for the layout of the source.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from byoc.vendor import Codegen, RuntimeMemory

from .body import Body
from .emitter import OP_EMITTERS, OpEmitter, emit_source, float_literal, kernels_source, source_memory

__all__ = ["Body", "CSourceCodegen", "OP_EMITTERS", "OpEmitter", "emit_source", "float_literal", "kernels_source"]


class CSourceCodegen(Codegen):
    """Codegen that emits one C source module for all of a vendor's partitions.

    Subclasses may extend :attr:`emitters` (Relax op name -> emitter) to add
    ops; the rules decide what is offloaded, the emitters only how.
    """

    emitters: Mapping[str, OpEmitter] = OP_EMITTERS
    #: The emitted C reads its tensors through plain pointers of their element type.
    input_alignment = 1

    def source(self, partitions: Sequence) -> str:
        """The C source for ``partitions`` (``byoc.vendor.graph.PartitionGraph``), on :attr:`device_memory`'s
        memory when a subclass sets it (:mod:`.device`)."""
        return emit_source(partitions, dict(self.emitters), self.device_memory)

    def standalone_source(self, partitions: Sequence) -> str:
        """The same C, for a standalone program (:meth:`byoc.vendor.Codegen.standalone_source`)."""
        return self.source(partitions)

    def runtime_memory(self, partitions: Sequence, modules: Sequence) -> dict:
        """What each partition's C takes (:meth:`byoc.vendor.Codegen.runtime_memory`): the temporaries it
        mallocs per call, and its constants, compiled into the artifact; on a device, both are device memory
        (the constants' host copy, in the artifact, is what the device's is copied from)."""
        found = source_memory(partitions, dict(self.emitters), self.device_memory)
        if self.device_memory is None:
            return {symbol: RuntimeMemory(workspace, constants) for symbol, (workspace, constants) in found.items()}
        return {symbol: RuntimeMemory(0, constants, device_bytes=workspace + constants)
                for symbol, (workspace, constants) in found.items()}

    def compile(self, partitions: Sequence, options: Mapping) -> list:
        import tvm

        create = tvm.get_global_func("runtime.CSourceModuleCreate")
        code = self.source(partitions)
        return [create(code, "c", [p.symbol for p in partitions], [])]

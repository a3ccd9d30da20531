"""The one TVM legalization byoc replaces, for the whole process: ``relax.take`` stays in bounds.

TVM looks legalizations up in a process-wide op table, so the replacement is process-wide too; it is installed
once, by the two steps that legalize (the Relax import's constant folding and the host build), never at import.
"""

from __future__ import annotations

import threading

_TAKE_LOCK = threading.Lock()
_take_installed = False


def quiet_in_range_take() -> None:
    """Legalize ``relax.take`` of mode "fast" as mode "clip" (once per process).

    TVM's ONNX importer writes every Gather as ``take(mode="fast")``, which
    reads out of bounds for an index outside the axis: a token id past the
    vocabulary segfaulted a BERT run, where onnxruntime names the Gather and
    the index. Legalizing it (topi::take) also logs "Fast mode segfaults when
    there are out-of-bounds indices" to stderr from C++, each time: dozens of
    lines for a transformer. TVM has no switch for its C++ log. The importer
    has made negative indices non-negative by then, so "clip" takes the same
    elements for every index inside the axis, and stays in bounds for the
    others; :meth:`byoc.Artifact.run` refuses a model input out of range where
    it indexes a Gather directly (token ids). Called before the import (by
    :func:`byoc.pipeline.frontend.relax_import.to_relax`, whose FoldConstant legalizes) and by
    :func:`byoc.host.compiler.compile_host`.
    """
    global _take_installed
    with _TAKE_LOCK:
        if _take_installed:
            return
        import tvm
        from tvm import topi

        fast = tvm.ir.Op.get("relax.take").get_attr("FLegalize")

        def legalize(bb, call):
            data, indices = call.args
            if call.attrs.mode == "fast":
                return bb.call_te(topi.take, data, indices, call.attrs.axis, mode="clip")
            return fast(bb, call)

        tvm.ir.register_op_attr("relax.take", "FLegalize", legalize, level=11)  # TVM's own is level 10
        _take_installed = True

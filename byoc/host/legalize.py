"""The TVM legalizations byoc replaces, for the whole process: ``relax.take`` stays in bounds, and a float max or
min of infinities is that infinity.

TVM looks legalizations up in a process-wide op table, so the replacements are process-wide too; they are installed
once, by the two steps that legalize (the Relax import's constant folding and the host build), never at import.
"""

from __future__ import annotations

import math
import threading

_LOCK = threading.Lock()
_installed = False


def install_legalizations() -> None:
    """Install byoc's legalizations (once per process).

    * ``relax.take`` of mode "fast" is legalized as mode "clip". TVM's ONNX
      importer writes every Gather as ``take(mode="fast")``, which reads out of
      bounds for an index outside the axis: a token id past the vocabulary
      segfaulted a BERT run, where onnxruntime names the Gather and the index.
      Legalizing it (topi::take) also logs "Fast mode segfaults when there are
      out-of-bounds indices" to stderr from C++, each time: dozens of lines for
      a transformer. TVM has no switch for its C++ log. The importer has made
      negative indices non-negative by then, so "clip" takes the same elements
      for every index inside the axis, and stays in bounds for the others;
      :meth:`byoc.Artifact.run` refuses a model input out of range where it
      indexes a Gather directly (token ids).
    * ``relax.max`` and ``relax.min`` of a float tensor start from -inf and
      +inf. TVM's start from the dtype's finite extremes, so the max of a row
      of -inf was -3.4e38: ONNX's own Attention function (opset 23) finds the
      rows its mask hides entirely by comparing such a max with -inf, and gave
      NaN there instead of 0. The max over an empty axis is -inf too, as ONNX
      defines it.

    Called before the import (by :func:`byoc.pipeline.frontend.relax_import.to_relax`, whose FoldConstant
    legalizes) and by :func:`byoc.host.compiler.compile_host`.
    """
    global _installed
    with _LOCK:
        if _installed:
            return
        _install_take()
        for name, combine, identity in (("relax.max", "max", -math.inf), ("relax.min", "min", math.inf)):
            _install_infinite_identity(name, combine, identity)
        _installed = True


def _install_take() -> None:
    import tvm
    from tvm import topi

    plain = tvm.ir.Op.get("relax.take").get_attr("FLegalize")

    def legalize(bb, call):
        data, indices = call.args
        if call.attrs.mode == "fast":
            return bb.call_te(topi.take, data, indices, call.attrs.axis, mode="clip")
        return plain(bb, call)

    tvm.ir.register_op_attr("relax.take", "FLegalize", legalize, level=11)  # TVM's own is level 10


def _install_infinite_identity(name: str, combine: str, identity: float) -> None:
    """Legalize the reduction ``name`` of a float tensor with ``identity`` (an infinity) as its start."""
    import tvm
    from tvm import te, tirx

    plain = tvm.ir.Op.get(name).get_attr("FLegalize")
    pair = getattr(tirx, combine)
    reducer = te.comm_reducer(lambda a, b: pair(a, b), lambda dtype: tirx.const(identity, dtype), name=f"{combine}_inf")

    def reduce(data, axes: list, keepdims: bool):
        rank = len(data.shape)
        dims = [te.reduce_axis((0, data.shape[i]), name=f"k{i}") for i in axes]
        by_axis = dict(zip(axes, dims))
        shape = [1 if i in by_axis else data.shape[i] for i in range(rank) if keepdims or i not in by_axis]

        def element(*index):
            kept = iter(index)
            at = []
            for i in range(rank):
                if keepdims:
                    position = next(kept)
                    at.append(by_axis.get(i, position))
                else:
                    at.append(by_axis[i] if i in by_axis else next(kept))
            return reducer(data[tuple(at)], axis=dims)

        return te.compute(shape, element, name=f"{combine}_inf")

    def legalize(bb, call):
        data = call.args[0]
        dtype = str(data.ty.dtype)
        if not dtype.startswith(("float", "bfloat")) or data.ty.ndim < 0:
            return plain(bb, call)
        rank = data.ty.ndim
        axes = sorted({int(a) % rank for a in call.attrs.axis}) if call.attrs.axis is not None else list(range(rank))
        if not axes:
            return plain(bb, call)
        return bb.call_te(reduce, data, axes, bool(call.attrs.keepdims))

    tvm.ir.register_op_attr(name, "FLegalize", legalize, level=11)

"""ONNX's BitCast (opset 26): a tensor's bits read as another type of the same width, which TVM's importer lacks.

It becomes TOPI's ``reinterpret`` (LLVM's bitcast). A bool and an 8-bit integer hold 0 or 1 in their byte alike, so
those convert as values (a bitcast of LLVM's one-bit bool is not one of a byte). A target type of another width is
refused by name, as ONNX defines none.
"""

from __future__ import annotations

from typing import Optional

import onnx
import tvm
from tvm import relax, topi

from byoc.errors import UnsupportedAttributeError


def bit_cast(node_name: str, inputs, attrs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """The Relax expression of a BitCast node (module docstring); None where the input's type is not known."""
    x = inputs[0]
    ty = x.ty if isinstance(x, relax.Expr) else None
    if not isinstance(ty, relax.TensorType) or ty.dtype is None:
        return None
    source = str(ty.dtype)
    target = str(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
    if _width(target) != _width(source):
        raise UnsupportedAttributeError(f"BitCast node {node_name!r}: to={target} from {source} (a type of the "
                                        "same bit width)", node_name, "to")
    if source == target:
        return x
    if "bool" in (source, target):
        return bb.normalize(relax.op.astype(x, target))
    return bb.emit_te(topi.reinterpret, x, target)


def _width(dtype: str) -> int:
    """Bits a value of ``dtype`` takes in a tensor (a bool a byte)."""
    return 8 if dtype == "bool" else tvm.DataType(dtype).bits

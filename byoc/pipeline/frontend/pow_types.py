"""ONNX's Pow of a base and an exponent of other types, and of integers.

ONNX lets the exponent's type differ from the base's (a float32 base to an int64 power), and the result has the
base's type. TVM's converter refuses both forms ("Binary operators must have the same datatype"), and its
``power`` takes floats only, so an integer base failed even to an exponent of its own type. onnxruntime runs all
of them. Here a float base takes the exponent cast to its type; an integer base is raised in float64, exact for
the integer results float64 holds (up to 2^53), and the result converted back as C's cast does (toward zero),
which is what onnxruntime and ONNX's reference give for a fractional power of an integer.
"""

from __future__ import annotations

from typing import Optional

from tvm import relax


def pow_of_other_types(inputs, bb: relax.BlockBuilder) -> Optional[relax.Expr]:
    """The Relax expression of a Pow whose operands' types differ or whose base is an integer, else None (TVM's
    converter)."""
    base, exponent = inputs[0], inputs[1]
    types = [x.ty if isinstance(x, relax.Expr) else None for x in (base, exponent)]
    if not all(isinstance(t, relax.TensorType) for t in types):
        return None
    base_type, exponent_type = str(types[0].dtype), str(types[1].dtype)
    if base_type.startswith("float"):
        if exponent_type == base_type:
            return None
        return bb.normalize(relax.op.power(base, relax.op.astype(exponent, base_type)))
    if not base_type.startswith(("int", "uint")):
        return None
    wide = relax.op.power(relax.op.astype(base, "float64"), relax.op.astype(exponent, "float64"))
    return bb.normalize(relax.op.astype(wide, base_type))

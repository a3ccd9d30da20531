"""A run's sequences: a sequence input given as a list of arrays, a sequence output returned as one.

A model's sequence (or optional sequence) input or output is a
:class:`~byoc.pipeline.frontend.onnx_model.TensorSpec` with ``sequence`` set; the program holds it as an array
of tensors (:mod:`byoc.host.sequences`, imported here so that a process that runs an artifact has the host's
sequence functions), and an empty optional as ``None``. Only a model with such an input or output takes these
paths: the run of a model of tensors alone does not pay for them.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from byoc.errors import InputDtypeError, InputError
from byoc.host.hand_over import tvm_tensor
from byoc.host.sequences import as_tensor_list, make_sequence
from byoc.pipeline.frontend.onnx_model import TensorSpec

__all__ = ["sequence_input", "sequence_outputs", "sequence_tensors"]


def sequence_input(spec: TensorSpec, value) -> Optional[list[np.ndarray]]:
    """``value`` for the sequence input ``spec``: a list of C-contiguous arrays of its dtype (None: an empty
    optional), or an :class:`InputError` naming the input and the element."""
    if value is None:
        return None
    if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
        raise InputError(f"input {spec.name!r} is a sequence ({spec.describe()}): give a list of arrays, "
                         f"got {type(value).__name__}")
    dtype = np.dtype(spec.dtype)
    arrays = []
    for k, item in enumerate(value):
        array = np.asarray(item)
        if array.dtype != dtype:
            raise InputDtypeError(f"input {spec.name!r}, element {k}, has dtype {array.dtype}, expected "
                                  f"{spec.dtype}; convert it with .astype(np.{spec.dtype})", spec.name)
        arrays.append(array if array.flags.c_contiguous else np.ascontiguousarray(array))  # keeps a 0-d one 0-d
    return arrays


def sequence_tensors(arrays: Optional[list[np.ndarray]]):
    """A checked sequence input as the program takes it (copies: the host's sequence functions hand its
    tensors on, and a caller's array must not change under a later read)."""
    return None if arrays is None else make_sequence([tvm_tensor(a) for a in arrays])


def sequence_outputs(result, specs: list[TensorSpec], vm_outputs: Callable[[object], list]) -> list:
    """A run's ``result`` as its outputs in ONNX order: an array per tensor output, a list of arrays per sequence
    output (None for an empty optional). ``vm_outputs`` makes a program's value arrays (copies: the artifact's)."""
    values = [result] if len(specs) == 1 else [result[k] for k in range(len(specs))]
    outputs: list = []
    for spec, value in zip(specs, values):
        if not spec.sequence:
            outputs.extend(vm_outputs(value))
        elif value is None:
            outputs.append(None)
        else:
            outputs.append([array for tensor in as_tensor_list(value) for array in vm_outputs(tensor)])
    return outputs

"""The host's functions on sequences whose length only the run tells (:mod:`byoc.pipeline.frontend.run_time_sequences`).

Such a sequence is, when the model runs, the array of tensors the Relax VM holds a tuple in (``tvm_ffi.Array``),
and an empty Optional is ``None``. A program calls these functions by name (``R.call_pure_packed``); they are
registered when this module is imported, which :mod:`byoc.pipeline.artifact.artifact` does, so any process that
runs an artifact has them. Each returns a new value and never changes its inputs: ONNX's sequences are values.

A position or split out of range raises a ``ValueError`` whose message starts with :data:`SEQUENCE_ERROR`;
``Artifact.run`` gives the caller that message as an :class:`~byoc.errors.InputError` (the VM hands on the
message, not the exception's class).
"""

from __future__ import annotations

import numpy as np
import tvm_ffi

from byoc.host.hand_over import tvm_tensor

__all__ = ["SEQUENCE_ERROR", "as_tensor_list", "make_sequence"]

#: how each message of these functions starts: ``Artifact.run`` recognizes them by it
SEQUENCE_ERROR = "byoc sequence: "


def _fail(text: str):
    return ValueError(SEQUENCE_ERROR + text)


def _tensor(array: np.ndarray):
    return tvm_tensor(array)  # a copy, aligned as TVM's compiled functions that read it assume


def _numpy(tensor) -> np.ndarray:
    try:
        return np.from_dlpack(tensor)
    except (BufferError, RuntimeError):  # a dtype numpy takes only from TVM's own copy (bfloat16)
        return tensor.numpy()


def _position(tensor, length: int, op: str, inclusive: bool = False) -> int:
    """ONNX's position (negative from the end) as an index; ``inclusive`` allows ``length`` (an insert's end)."""
    position = int(_numpy(tensor).reshape(-1)[0])
    end = length + 1 if inclusive else length
    if not -length <= position < end:
        allowed = f"[-{length}, {length}]" if inclusive else f"[-{length}, {length - 1}]"
        raise _fail(f"{op}: position {position} is outside {allowed} for a sequence of {length} tensor(s)")
    return position + length if position < 0 else position


def as_tensor_list(sequence) -> list:
    """The tensors of ``sequence`` (a ``tvm_ffi.Array``) as a list."""
    return [sequence[k] for k in range(len(sequence))]


def make_sequence(tensors: list):
    """A sequence of ``tensors`` as a program holds one."""
    return tvm_ffi.Array(tensors)


@tvm_ffi.register_global_func("byoc.sequence.length")
def _length(sequence):
    return _tensor(np.array(len(sequence), dtype=np.int64))


@tvm_ffi.register_global_func("byoc.sequence.at")
def _at(sequence, position):
    return sequence[_position(position, len(sequence), "SequenceAt")]


@tvm_ffi.register_global_func("byoc.sequence.insert")
def _insert(sequence, tensor, *position):
    items = as_tensor_list(sequence)
    at = _position(position[0], len(items), "SequenceInsert", inclusive=True) if position else len(items)
    items.insert(at, tensor)
    return make_sequence(items)


@tvm_ffi.register_global_func("byoc.sequence.erase")
def _erase(sequence, *position):
    items = as_tensor_list(sequence)
    if not items:
        raise _fail("SequenceErase: the sequence is empty")
    del items[_position(position[0], len(items), "SequenceErase") if position else -1]
    return make_sequence(items)


@tvm_ffi.register_global_func("byoc.sequence.concat")
def _concat(sequence, axis: int, new_axis: int):
    arrays = [_numpy(t) for t in as_tensor_list(sequence)]
    if not arrays:
        raise _fail("ConcatFromSequence: the sequence is empty")
    try:
        joined = np.stack(arrays, axis=axis) if new_axis else np.concatenate(arrays, axis=axis)
    except ValueError as err:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise _fail(f"ConcatFromSequence: tensors of shapes {shapes} do not join along axis {axis}: {err}") from None
    return _tensor(joined)


@tvm_ffi.register_global_func("byoc.sequence.split")
def _split(tensor, axis: int, keepdims: int, *split):
    array = _numpy(tensor)
    extent = array.shape[axis]
    if not split:  # each element one slice of the axis
        parts = np.split(array, extent, axis=axis) if extent else []
        return make_sequence([_tensor(p if keepdims else np.squeeze(p, axis=axis)) for p in parts])
    sizes = _numpy(split[0]).astype(np.int64)
    if sizes.ndim == 0:  # chunks of that size, the last one smaller
        chunk = int(sizes)
        if chunk <= 0:
            raise _fail(f"SplitToSequence: split {chunk} is not a positive chunk size")
        bounds = list(range(chunk, extent, chunk))
    else:
        if (sizes < 0).any() or int(sizes.sum()) != extent:
            raise _fail(f"SplitToSequence: split {sizes.tolist()} does not add up to the axis' {extent}")
        bounds = np.cumsum(sizes)[:-1].tolist()
    return make_sequence([_tensor(p) for p in np.split(array, bounds, axis=axis)])


@tvm_ffi.register_global_func("byoc.optional.has_element")
def _has_element(value):
    return _tensor(np.array(value is not None, dtype=np.bool_))


@tvm_ffi.register_global_func("byoc.optional.get_element")
def _get_element(value):
    if value is None:
        raise _fail("OptionalGetElement: the optional is empty")
    return value

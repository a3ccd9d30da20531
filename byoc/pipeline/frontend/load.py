"""Load an ONNX model from a path, bytes or a ModelProto: parse it, tell what it is when it is not one, and read
its external data from inside the model's folder only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from byoc.errors import ExternalDataError, ModelNotFoundError, NotOnnxError, TruncatedModelError
from byoc.host.recorded import METADATA_FUNCTION

ModelSource = Union[str, os.PathLike, bytes, onnx.ModelProto]

def load_model(source: ModelSource, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """Read ``source`` into a new ModelProto with external data resolved.

    ``source`` is a path, the serialized bytes, or a ``ModelProto`` (copied,
    never modified). ``base_dir`` is where external data files live; it
    defaults to the model file's folder. Raises a :class:`ModelLoadError`
    subclass that says what is wrong and what to do.
    """
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)
        origin = "the given ModelProto"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), "the given bytes")
        origin = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            raise ModelNotFoundError(f"{str(path)!r} is a folder, not a model file; give the path of the .onnx file")
        if not path.is_file():
            raise ModelNotFoundError(
                f"model file not found: {str(path)!r}; check the path (it must be an .onnx file)"
            )
        origin = str(path)
        model = _parse(path.read_bytes(), origin)
        if base_dir is None:
            base_dir = path.resolve().parent
    else:
        raise TypeError(
            f"expected a path, bytes or onnx.ModelProto, got {type(source).__name__}"
        )
    _resolve_external_data(model, base_dir, origin)
    return model


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    if not data:
        raise NotOnnxError(f"{origin} is empty (0 bytes); expected an ONNX model file")
    if data.startswith(b"\x7fELF"):
        if METADATA_FUNCTION.encode() in data:
            raise NotOnnxError(
                f"{origin} is a byoc artifact (a shared library that Artifact.export wrote), not an ONNX model: "
                "load it with byoc.load(path) in Python to run it; it is not partitioned or compiled again "
                "(give the .onnx model it was built from for that)"
            )
        raise NotOnnxError(f"{origin} is an ELF file (a shared library or program), not an ONNX model; "
                           "expected a model saved with onnx.save")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except DecodeError as err:
        if _looks_like_onnx(data):
            raise TruncatedModelError(
                f"{origin} starts like an ONNX model but cannot be parsed ({err}); "
                "the file is truncated or corrupt: copy or export it again"
            ) from None
        raise NotOnnxError(
            f"{origin} is not an ONNX protobuf ({err}); expected a model saved with onnx.save"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise NotOnnxError(
            f"{origin} is not an ONNX model (no ir_version or graph); "
            "expected a model saved with onnx.save"
        )
    if not model.graph.output:
        raise TruncatedModelError(
            f"{origin} has a graph with no outputs; the file is probably truncated: "
            "copy or export it again"
        )
    return model


def _looks_like_onnx(data: bytes) -> bool:
    """ModelProto serializes ir_version (field 1, varint) first: tag 0x08."""
    return len(data) >= 2 and data[0] == 0x08 and 1 <= data[1] <= 64


def _external_tensors(model: onnx.ModelProto):
    for tensor in external_data_helper._get_all_tensors(model):  # noqa: SLF001 - public in practice
        if external_data_helper.uses_external_data(tensor):
            yield tensor


def _resolve_external_data(model: onnx.ModelProto, base_dir, origin: str) -> None:
    tensors = list(_external_tensors(model))
    if not tensors:
        return
    if base_dir is None:
        raise ExternalDataError(
            f"{origin} stores weights in external data files; pass base_dir= "
            "(the folder that holds them) or load the model from its path"
        )
    root = Path(base_dir).resolve()
    for tensor in tensors:
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        target = (root / location).resolve()
        if Path(location).is_absolute() or not target.is_relative_to(root):
            raise ExternalDataError(
                f"tensor {tensor.name!r} points to external data {location!r} outside the "
                f"model folder {str(root)!r}; refused for safety: move the data file next "
                "to the model and re-save it with a relative location"
            )
        if not target.is_file():
            raise ExternalDataError(
                f"external data file {location!r} for tensor {tensor.name!r} is missing "
                f"(looked in {str(root)!r}); copy it next to the model"
            )
    try:
        external_data_helper.load_external_data_for_model(model, str(root))
    except (OSError, ValueError) as err:
        raise ExternalDataError(f"cannot read external data: {err}") from None

"""Typed errors raised by byoc.

Every error a user can cause derives from :class:`ByocError`, so a script can
catch one class, and the CLI can print one clean line for it. Each message
says what went wrong *and* what to do about it.
"""


class ByocError(Exception):
    """Base class of every error byoc raises on purpose."""


# -- model loading (byoc.frontend) -------------------------------------------
class ModelLoadError(ByocError):
    """The model could not be read or imported."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model path does not exist."""


class NotOnnxError(ModelLoadError):
    """The bytes are not an ONNX protobuf."""


class TruncatedModelError(ModelLoadError):
    """The file starts like an ONNX model but ends early or is corrupt."""


class InvalidModelError(ModelLoadError):
    """onnx.checker or shape inference rejected the model."""


class UnsupportedOpsError(ModelLoadError):
    """The model uses ops that the importer cannot convert.

    ``ops`` lists every offending node as ``(node_name, op_type, domain)``.
    """

    def __init__(self, message: str, ops: list[tuple[str, str, str]]):
        super().__init__(message)
        self.ops = ops


class ExternalDataError(ModelLoadError):
    """An external-data tensor is missing or points outside the model folder."""


class DynamicShapeError(ModelLoadError):
    """An input has a non-static shape and the user gave none."""


class UnsupportedAttributeError(ModelLoadError):
    """A node sets an attribute or input to a value byoc cannot convert.

    ``node`` is the node's name, ``attribute`` the attribute or input.
    """

    def __init__(self, message: str, node: str = "", attribute: str = ""):
        super().__init__(message)
        self.node = node
        self.attribute = attribute


# -- vendors and policies -----------------------------------------------------
class VendorError(ByocError):
    """A vendor definition or registration is invalid."""


class UnknownVendorError(VendorError, KeyError):
    """No vendor is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class CodegenError(ByocError):
    """A vendor's codegen raised or produced code that does not compile."""


# -- building and running -------------------------------------------------------
class BuildError(ByocError):
    """TVM could not build or export the partitioned module."""


class StandaloneError(BuildError):
    """The artifact cannot become a standalone program, or the program failed."""


class TargetError(ByocError):
    """The target is unknown, or its toolchain is missing."""


class InputError(ByocError, ValueError):
    """Run-time inputs do not match the model (names, count, shape, dtype)."""


class ArtifactLoadError(ByocError):
    """An exported artifact could not be loaded."""

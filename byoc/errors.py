"""Typed errors raised by byoc.

Every error a user can cause derives from :class:`ByocError`, so a script can
catch one class, and the CLI can print one clean line for it. Each message
says what went wrong *and* what to do about it.
"""


class ByocError(Exception):
    """Base class of every error byoc raises on purpose."""


def first_line(err: BaseException) -> str:
    """The first line of ``err``'s message (or its type's name when it has none): another tool's words, kept short."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def last_line(err: BaseException) -> str:
    """The last line of ``err``'s message (or its type's name): where TVM puts the message, after its traceback."""
    text = str(err).strip()
    return text.splitlines()[-1] if text else type(err).__name__


# -- model loading (byoc.pipeline.frontend) -------------------------------------------
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


class QuantizationError(InvalidModelError):
    """A quantization parameter the ONNX spec does not allow (named with its node; byoc.pipeline.frontend.prepare.qoperators)."""


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


class UnsupportedTypeError(ModelLoadError):
    """A graph input or output is of a type byoc does not run: a sequence or a map.

    ``values`` lists each as ``(name, type)``.
    """

    def __init__(self, message: str, values: list[tuple[str, str]]):
        super().__init__(message)
        self.values = values


class UnsupportedAttributeError(ModelLoadError):
    """A node sets an attribute or input to a value byoc cannot convert.

    ``node`` is the node's name, ``attribute`` the attribute or input.
    """

    def __init__(self, message: str, node: str = "", attribute: str = ""):
        super().__init__(message)
        self.node = node
        self.attribute = attribute


class HalfPrecisionError(UnsupportedAttributeError):
    """A float16/bfloat16 model holds what byoc cannot compute in float32 (a BitCast of a half tensor, a sequence
    of half tensors at the model's edge): byoc.pipeline.frontend.prepare.half_precision. ``node`` names the node
    (empty for a graph input or output), ``attribute`` its attribute or the tensor."""


# -- vendors and policies -----------------------------------------------------
class VendorError(ByocError):
    """A vendor definition or registration is invalid."""


class VendorOptionError(VendorError, ValueError):
    """A vendor option is unknown, or its value is of the wrong type or not among its choices.

    ``vendor`` and ``option`` name it (empty when the message is about a declaration).
    """

    def __init__(self, message: str, vendor: str = "", option: str = ""):
        super().__init__(message)
        self.vendor = vendor
        self.option = option


class PolicyError(ByocError):
    """A partitioning policy (``keep_on_host``, ``min_ops``) names something that is not in the model."""


class UnknownVendorError(VendorError, KeyError):
    """No vendor is registered under the requested name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class CodegenError(ByocError):
    """A vendor's codegen raised or produced code that does not compile."""


class UnsupportedConstruct(CodegenError):
    """A partition holds a construct :class:`byoc.vendor.graph.PartitionGraph` cannot express."""


class UnsupportedOp(CodegenError):
    """A codegen has no code for an op a rule offloaded (the rule and the emitters disagree)."""


# -- building and running -------------------------------------------------------
class BuildError(ByocError):
    """TVM could not build or export the partitioned module."""


class InsufficientMemoryError(BuildError, MemoryError):
    """Building the model would need more memory than the machine has available: the message gives both sizes
    (checked before the build starts, not once it has exhausted the machine)."""


class StandaloneError(BuildError):
    """The artifact cannot become a standalone program, or the program failed."""


class TargetError(ByocError):
    """The target is unknown, or its toolchain is missing."""


class AptUnavailable(TargetError):
    """apt-get is missing here, or cannot install (not root); the packages must be installed by hand."""


class OnnxExportError(ByocError):
    """The partitioned model cannot be written as ONNX."""


class InputError(ByocError, ValueError):
    """Run-time inputs do not match the model (names, count, shape, dtype)."""


class InputShapeError(InputError):
    """A call's input breaks the model's signature: a wrong rank, a static dim of another size, a symbolic dim with
    two sizes across the inputs, or one outside its range. ``input`` names the input, ``dim`` the dim (its name, or
    its axis as a string for a static one; empty for a wrong rank)."""

    def __init__(self, message: str, input: str = "", dim: str = ""):  # noqa: A002 - the public attribute's name
        super().__init__(message)
        self.input = input
        self.dim = dim


class InputDtypeError(InputError, TypeError):
    """A call's input has another dtype than the model's. ``input`` names it."""

    def __init__(self, message: str, input: str = ""):  # noqa: A002
        super().__init__(message)
        self.input = input


class GenerationError(ByocError, ValueError):
    """A model cannot generate as :class:`byoc.generation.Generator` runs it (no token input, no cache pairs
    of past inputs and present outputs), or a generation cannot go on (a prompt or length past the model's
    maximum positions)."""


class ArtifactLoadError(ByocError):
    """An exported artifact could not be loaded."""


class ArtifactTargetError(ArtifactLoadError, TargetError):
    """The file is a shared library for another machine (e.g. an s390x artifact on x86_64): it cannot be loaded here.

    ``target`` names what it was built for (a preset's name, e.g. ``"s390x"``, when byoc knows the machine).
    """

    def __init__(self, message: str, target: str = ""):
        super().__init__(message)
        self.target = target


#: The error classes (what ``from byoc.errors import *`` and ``byoc`` export).
__all__ = [name for name, value in list(globals().items()) if isinstance(value, type) and issubclass(value, ByocError)]

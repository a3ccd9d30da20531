"""What a vendor writes: rules that say what its hardware supports, and a codegen.

A vendor is one :class:`Vendor` object. Its rules come in two kinds:

* :class:`OpRule` - one Relax op (``"relax.nn.conv2d"``) plus a check;
* :class:`PatternRule` - a ``tvm.relax.dpl`` pattern (conv2d + bias + relu)
  plus a check.

A check takes a :class:`Match` and returns :data:`SUPPORTED` or a reason
string that a person can read ("kernel 7x7 > 5x5"). Checks never raise on
user data; a check that raises anyway is reported as a rejection.

Rules are tried in the order given, so list larger patterns before the
single ops they contain (as in TVM's pattern tables).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Union

from byoc.errors import VendorError


class _Supported:
    """The single value a check returns to accept a match."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SUPPORTED"

    def __bool__(self) -> bool:
        return True


SUPPORTED = _Supported()
CheckResult = Union[_Supported, str]


@dataclass(frozen=True)
class Match:
    """What a rule's check sees: one match of its op or pattern.

    ``root`` is the matched call (the last op of a pattern), ``annotated``
    maps the rule's annotation names to matched expressions, ``calls`` holds
    every op call of the match in program order, and ``options`` are the
    vendor's options.
    """

    rule: str
    root: Any  # relax.Call
    annotated: Mapping[str, Any]
    calls: tuple
    options: Mapping[str, Any]


Check = Callable[[Match], CheckResult]


def always(_: Match) -> CheckResult:
    """A check that accepts every match."""
    return SUPPORTED


_RULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_.]*$")


@dataclass(frozen=True)
class OpRule:
    """Offload one Relax op, e.g. ``OpRule("acme.relu", "relax.nn.relu")``."""

    name: str
    op: str
    check: Check = always

    def dataflow_pattern(self):
        import tvm
        from tvm.relax.dpl import is_op, wildcard

        try:
            arity = tvm.ir.Op.get(self.op).num_inputs
        except Exception:
            raise VendorError(f"rule {self.name!r}: {self.op!r} is not a Relax op") from None
        return is_op(self.op)(*[wildcard() for _ in range(arity)]), {"root": None}


@dataclass(frozen=True)
class PatternRule:
    """Offload a dataflow pattern.

    ``pattern`` is a ``tvm.relax.dpl`` pattern, or a zero-argument callable
    that builds one (or a ``(pattern, annotations)`` pair) so that vendors
    can define rules at import time without touching TVM state.
    """

    name: str
    pattern: Any
    check: Check = always
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def dataflow_pattern(self):
        built = self.pattern() if callable(self.pattern) and not _is_dfpattern(self.pattern) else self.pattern
        if isinstance(built, tuple):
            built, annotations = built
            return built, dict(annotations)
        return built, dict(self.annotations)


def _is_dfpattern(obj) -> bool:
    from tvm.relax.dpl import DFPattern

    return isinstance(obj, DFPattern)


Rule = Union[OpRule, PatternRule]


class Codegen(Protocol):
    """Turns a vendor's partitions into TVM runtime modules.

    ``compile`` receives :class:`byoc.vendor.graph.PartitionGraph` objects (one per
    partition, with ``symbol`` the function name to export) and the vendor's
    options, and returns a list of ``tvm.runtime.Module``.
    """

    def compile(self, partitions: Sequence[Any], options: Mapping[str, Any]) -> list: ...


def runtime_module_kinds(codegen: Codegen) -> tuple[str, ...]:
    """The type keys of the runtime modules ``codegen`` makes that need its runtime loaded to load back.

    A codegen whose modules are not built into TVM (a runtime library of its
    own) declares them as ``module_kinds`` and provides ``load_runtime()``;
    byoc calls it when it builds for the vendor or loads an artifact holding
    such modules, never at import.
    """
    return tuple(getattr(codegen, "module_kinds", ()))


def standalone_source(codegen: Codegen) -> Optional[Callable[[Sequence[Any]], str]]:
    """How ``codegen`` writes its partitions into a standalone C program, or None when it cannot.

    A codegen whose partitions can be linked into byoc's standalone program
    (plain C, no TVM runtime; see :mod:`byoc.deploy.standalone`) declares it
    with a ``standalone_source(partitions) -> str`` method. The C it returns
    defines, for each :class:`~byoc.vendor.graph.PartitionGraph` it is given,
    the tvm-ffi packed entry point ``__tvm_ffi_<symbol>``. Codegens whose
    modules need the TVM runtime (JSON runtime, oneDNN) do not have it.
    """
    method = getattr(codegen, "standalone_source", None)
    return method if callable(method) else None


@dataclass(frozen=True)
class RuntimeMemory:
    """What a partition's vendor runtime holds, as the runtime (or the code it runs) reports it.

    ``workspace_bytes``: what one call works in (intermediates, scratch), per
    call in flight; ``constant_bytes``: the weights and other constants it
    keeps, its own copies (reordered for its kernels) included.
    """

    workspace_bytes: int
    constant_bytes: int


def runtime_memory(codegen: Codegen, partitions: Sequence[Any], modules: Sequence[Any]) -> Mapping[str, RuntimeMemory]:
    """Per partition symbol, what ``codegen``'s runtime holds for the ``modules`` it made from ``partitions``.

    A codegen reports it with a ``runtime_memory(partitions, modules)``
    method returning that mapping; one without it reports nothing (``{}``).
    """
    method = getattr(codegen, "runtime_memory", None)
    return dict(method(partitions, modules)) if callable(method) else {}


@dataclass(frozen=True)
class Vendor:
    """A vendor: its name, its rules (in priority order), its codegen, its options."""

    name: str
    rules: tuple
    codegen: Codegen
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    # Target presets (``byoc.deploy.targets``) whose artifacts can run this vendor's
    # modules; empty means every target.
    targets: tuple = ()

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name or ""):
            raise VendorError(
                f"vendor name {self.name!r} must be an identifier (letters, digits, _); "
                "it becomes part of TVM's relax.ext.<name> and of C symbols"
            )
        object.__setattr__(self, "rules", tuple(self.rules))
        seen = set()
        for rule in self.rules:
            if not isinstance(rule, (OpRule, PatternRule)):
                raise VendorError(f"vendor {self.name!r}: {rule!r} is not an OpRule or PatternRule")
            if not _RULE_NAME.match(rule.name) or rule.name.split(".")[0] != self.name:
                raise VendorError(
                    f"vendor {self.name!r}: rule name {rule.name!r} must look like "
                    f"'{self.name}.<name>'"
                )
            if rule.name in seen:
                raise VendorError(f"vendor {self.name!r}: rule {rule.name!r} is defined twice")
            seen.add(rule.name)
        if not callable(getattr(self.codegen, "compile", None)):
            raise VendorError(f"vendor {self.name!r}: codegen must have a compile(partitions, options) method")

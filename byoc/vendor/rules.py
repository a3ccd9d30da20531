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

import difflib
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from byoc.errors import StandaloneError, VendorError
from byoc.vendor.ops import MatchView, OpCall, Tensor
from byoc.vendor.options import OptionSetting, VendorOption, check_declarations, declared, option, resolve


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


#: What a static-shape vendor's partition does at sizes the build did not specialize it for (``Vendor.other_sizes``)
OTHER_SIZES = ("host", "refuse")


@dataclass(frozen=True)
class Match:
    """What a rule's check sees: one match of its op or pattern.

    A check reads the match as a codegen reads its partition, as plain
    :class:`~byoc.vendor.ops.OpCall` and :class:`~byoc.vendor.ops.Tensor`
    objects (shapes, dtypes, attributes as Python values, constants as numpy
    arrays), written when the check first asks:

    * ``match.ops``: every op call of the match (in the order TVM's matcher gives them, which need not
      be program order);
    * ``match.op``: the matched op call (an :class:`OpRule`'s op, a pattern's last op);
    * ``match.ops_of("relax.nn.conv2d", ...)``: the op calls of those ops, in that order;
    * ``match.call(name)`` and ``match.tensor(name)``: the op call, or the tensor (a call's: its
      result), that the pattern annotates as ``name`` (``match.names`` lists them);
    * ``match.tensors``: every tensor operand and result of every op call, in that order.

    ``options`` are the vendor's options. ``dim_bounds`` maps each symbolic
    dim of the model to its ``(min, max)`` (max None when unbounded); a check
    reads a dim's bound with :func:`byoc.vendor.checks.dim_bound`.
    ``specialized`` maps each symbolic dim the build specializes a static-shape vendor's partitions for
    (``Vendor(static_shapes=True)``, ``specialize=``) to its sizes: the codegen gets such a dim as a static
    size, once per size (:func:`byoc.vendor.checks.static_shapes` accepts it so; ``dim_bounds`` gives the
    least and largest of the sizes).

    The low-level escape hatch, for what the plain view does not say: ``root``
    is the matched ``relax.Call``, ``annotated`` maps the rule's annotation
    names to matched Relax expressions, and ``calls`` holds every matched
    ``relax.Call``, in the order of ``ops``. byoc's own checks do not read them.
    """

    rule: str
    root: Any  # relax.Call
    annotated: Mapping[str, Any]
    calls: tuple
    options: Mapping[str, Any]
    dim_bounds: Mapping[str, tuple] = field(default_factory=dict)
    specialized: Mapping[str, tuple] = field(default_factory=dict)

    @cached_property
    def _view(self) -> MatchView:
        return MatchView(self.calls, self.rule)

    @property
    def ops(self) -> tuple[OpCall, ...]:
        """Every op call of the match, in the order of ``calls`` (a split: one per result)."""
        return tuple(self._view.ops)

    @property
    def op(self) -> OpCall:
        """The matched op call: an :class:`OpRule`'s op, a pattern's last op."""
        found = self._view.call(self.root)
        return found if found is not None else self._view.ops[-1]

    def ops_of(self, *ops: str) -> list[OpCall]:
        """The op calls of the match whose op is one of ``ops`` (``"relax.nn.conv2d"``), in the order of
        :attr:`ops`."""
        return [c for c in self._view.ops if c.op in ops]

    def call(self, name: str) -> Optional[OpCall]:
        """The op call the pattern annotates as ``name``; None when it annotates no op call so (an optional
        part it did not match, or a name it does not have)."""
        expr = self.annotated.get(name)
        return None if expr is None else self._view.call(expr)

    def tensor(self, name: str) -> Tensor:
        """The tensor the pattern annotates as ``name``: a constant (``data`` holds it), an operand, or an op
        call's result. A ``KeyError`` naming the annotations when the pattern has no ``name``."""
        if name not in self.annotated:
            raise KeyError(f"rule {self.rule!r} annotates no {name!r} (it annotates "
                           f"{', '.join(sorted(self.annotated)) or 'nothing'})")
        return self._view.tensor(self.annotated[name])

    @property
    def names(self) -> tuple[str, ...]:
        """The names the pattern annotates (for ``call`` and ``tensor``)."""
        return tuple(self.annotated)

    @property
    def tensors(self) -> list[Tensor]:
        """Every tensor operand and result of every op call of the match, in the order of :attr:`ops`."""
        return [t for c in self._view.ops for t in (*c.inputs, *([c.output] if c.output is not None else []))]


Check = Callable[[Match], CheckResult]


def always(_: Match) -> CheckResult:
    """A check that accepts every match."""
    return SUPPORTED


_RULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_.]*$")
_BARE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def qualified_rule_name(vendor: str, name: str) -> str:
    """The full name of rule ``name`` under ``vendor``: ``"<vendor>.<name>"``.

    A bare name (an identifier, ``"conv2d"``) gets the vendor's prefix
    (``"acme.conv2d"``). A name that already starts with ``"<vendor>."`` is
    kept as it is, so rules written with the prefix by hand still work. Any
    other name (``"other.conv2d"``, ``"a-b"``) is a :class:`~byoc.errors.VendorError`.
    """
    if _BARE_NAME.match(name or ""):
        return f"{vendor}.{name}"
    if _RULE_NAME.match(name or "") and name.split(".")[0] == vendor:
        return name
    raise VendorError(f"vendor {vendor!r}: rule name {name!r} must be a name such as 'conv2d' (the vendor makes it "
                      f"'{vendor}.conv2d') or look like '{vendor}.<name>'")


@dataclass(frozen=True)
class OpRule:
    """Offload one Relax op, e.g. ``OpRule("relu", "relax.nn.relu")``.

    ``name`` is the rule's name within its vendor: the :class:`Vendor` makes
    it ``"<vendor>.<name>"`` (``"acme.relu"``), and keeps a name that already
    starts with ``"<vendor>."`` as it is (:func:`qualified_rule_name`).
    """

    name: str
    op: str
    check: Check = always

    def dataflow_pattern(self):
        import tvm
        from tvm.relax.dpl import is_op, wildcard

        try:
            arity = tvm.ir.Op.get(self.op).num_inputs
        except Exception:  # noqa: BLE001 - TVM's error for an unknown op name has no class of its own
            raise VendorError(f"rule {self.name!r}: {self.op!r} is not a Relax op") from None
        return is_op(self.op)(*[wildcard() for _ in range(arity)]), {"root": None}


@dataclass(frozen=True)
class PatternRule:
    """Offload a dataflow pattern, e.g. ``PatternRule("conv2d_relu", build, check)``.

    ``pattern`` is a ``tvm.relax.dpl`` pattern, or a zero-argument callable
    that builds one (or a ``(pattern, annotations)`` pair) so that vendors
    can define rules at import time without touching TVM state. ``name`` is
    prefixed by the vendor as an :class:`OpRule`'s is.
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


class Codegen:
    """The codegen interface: what byoc calls on a vendor's codegen. Public API; subclass it.

    As onnxruntime's ``IExecutionProvider``, it is one declared interface: the
    required :meth:`compile`, and a default for every optional capability, so
    a codegen overrides only what it has and byoc calls the rest without
    probing for it. A codegen's class is checked when its :class:`Vendor` is
    made (:func:`check_codegen`): a missing ``compile``, or an attribute named
    like a capability but not quite (``standalone_sources``, ``module_kind``),
    is a :class:`~byoc.errors.VendorError` there, not a capability silently
    off. Give a helper of your own that looks like a capability a leading
    underscore.

    A codegen that does not subclass this class (any object with a
    ``compile`` method, as before this interface) is still taken and checked
    the same way; byoc reaches its capabilities through :func:`as_codegen`,
    which supplies these defaults for the ones it lacks.
    """

    #: The type keys of the TVM runtime modules this codegen makes that need its
    #: runtime library loaded before they can be created or loaded back (a runtime
    #: of its own, e.g. ``("byoc_json_runtime",)``). byoc calls :meth:`load_runtime`
    #: when it builds for the vendor or loads an artifact holding such modules,
    #: never at import. Default: none (the modules are TVM's own kinds).
    module_kinds: tuple = ()

    #: The options this codegen takes (:class:`~byoc.vendor.options.VendorOption`: name, type, default,
    #: one-line doc). A build hands ``compile`` every one of them, resolved: the default, unless the
    #: vendor's ``options``, the user's ``vendor_options`` or the option's environment variable say
    #: otherwise (:mod:`byoc.vendor.options`). Default: none; ``compile`` then gets the vendor's ``options`` as
    #: they are.
    declared_options: tuple = ()

    #: The alignment, in bytes, this codegen's modules need of the address of each tensor a partition reads.
    #: A run hands the caller's input array to the program without a copy when its address is a multiple of
    #: what every reader of it needs (:mod:`byoc.host.run_io`), and copies it into an aligned buffer otherwise.
    #: Default: 64, what TVM's compiled functions assume; a runtime that reads any address of the element type
    #: (oneDNN, plain C loops) says 1.
    input_alignment: int = 64

    #: The version of what ``compile`` makes, which the codegen changes whenever its output for the same
    #: partitions and options may change (its compiler's version, say). When set, byoc caches the modules
    #: ``compile`` returns by the content of the partitions, the options and this version, and a build that
    #: finds them does not call ``compile`` (:mod:`byoc.pipeline.build.codegen_cache`). Default: "", no cache
    #: (a codegen whose output depends on anything else, such as files it reads, keeps it so).
    cache_version: str = ""

    #: The device memory this codegen's partitions run in (:class:`~byoc.vendor.device.DeviceMemory`), apart from
    #: the host's. byoc then keeps a value that only this vendor's partitions read on the device between them, and
    #: says so in each graph (``resident_inputs``, ``resident_outputs``, ``device_only_outputs``); byoc's C-source
    #: codegen writes the transfers (:mod:`byoc.vendor.device`). Default: None, the partitions run on host memory.
    device_memory: Any = None

    def compile(self, partitions: Sequence[Any], options: Mapping[str, Any]) -> list:
        """Required: the TVM runtime modules for ``partitions``, which export each partition's ``symbol``.

        ``partitions`` are :class:`byoc.vendor.graph.PartitionGraph` objects,
        all of the vendor's partitions in one build; ``options`` are the
        vendor's options. Called once per build.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement compile(partitions, options)")

    def load_runtime(self) -> None:
        """Load the runtime library behind :attr:`module_kinds` (and raise a ``BuildError`` saying what to
        install when it cannot). Default: nothing to load."""

    def standalone_source(self, partitions: Sequence[Any]) -> Optional[str]:
        """C that links ``partitions`` into byoc's standalone program (:mod:`byoc.deploy.standalone`), or None.

        The C defines, for each partition, the tvm-ffi packed entry point
        ``__tvm_ffi_<symbol>``, with no TVM runtime. Default: None, unsupported
        (codegens whose modules need the TVM runtime, as the JSON runtime's).
        """
        return None

    def runtime_memory(self, partitions: Sequence[Any], modules: Sequence[Any]) -> Mapping[str, "RuntimeMemory"]:
        """Per partition symbol, what this codegen's runtime holds for the ``modules`` it made from ``partitions``
        (:class:`RuntimeMemory`), for the memory report. Called once after the build; if it raises, the build
        still succeeds with a ``RuntimeWarning``. Default: nothing reported (``{}``)."""
        return {}

    def estimate_cost(self, partition: Any) -> Optional[float]:
        """Milliseconds one run of ``partition`` (a :class:`byoc.vendor.graph.PartitionGraph`) takes on this
        vendor's hardware, or None to have it measured. Measured placement (``byoc.compile(...,
        placement="measured")``) asks it before timing a partition here: a vendor whose hardware is not on the
        build machine gives its estimate this way. If it raises, byoc warns naming the vendor and measures.
        Default: None (measure)."""
        return None

    def availability(self) -> Optional[str]:
        """None when this codegen can build here, else one line saying why not and what to install (a missing
        wheel or library). It must be cheap and load nothing (look at package metadata or files, not
        :meth:`load_runtime`): ``python -m byoc.partition --list-vendors`` asks every vendor. Default: None
        (available)."""
        return None


#: The optional capabilities of :class:`Codegen`, each with its default.
CAPABILITIES = ("module_kinds", "declared_options", "input_alignment", "cache_version", "device_memory",
                "load_runtime",
                "standalone_source", "runtime_memory", "estimate_cost", "availability")
_METHODS = ("compile", "load_runtime", "standalone_source", "runtime_memory", "estimate_cost", "availability")
#: How close (difflib ratio) a codegen's attribute name must be to a capability's to be taken for a misspelling.
_NEAR = 0.8


class _DuckCodegen(Codegen):
    """A codegen that does not subclass :class:`Codegen`, seen through the interface: its own methods where
    it has them, the defaults elsewhere."""

    def __init__(self, wrapped: Any):
        self.wrapped = wrapped

    @property
    def module_kinds(self) -> tuple:  # type: ignore[override]
        return tuple(getattr(self.wrapped, "module_kinds", ()))

    @property
    def declared_options(self) -> tuple:  # type: ignore[override]
        return declared(self.wrapped)

    @property
    def input_alignment(self) -> int:  # type: ignore[override]
        return getattr(self.wrapped, "input_alignment", Codegen.input_alignment)

    @property
    def cache_version(self) -> str:  # type: ignore[override]
        return getattr(self.wrapped, "cache_version", Codegen.cache_version)

    def compile(self, partitions, options):
        return self.wrapped.compile(partitions, options)

    def load_runtime(self) -> None:
        own = getattr(self.wrapped, "load_runtime", None)
        if own is not None:
            own()

    def standalone_source(self, partitions):
        own = getattr(self.wrapped, "standalone_source", None)
        return own(partitions) if own is not None else None

    def runtime_memory(self, partitions, modules):
        own = getattr(self.wrapped, "runtime_memory", None)
        return own(partitions, modules) if own is not None else {}

    def estimate_cost(self, partition):
        own = getattr(self.wrapped, "estimate_cost", None)
        return own(partition) if own is not None else None

    def availability(self):
        own = getattr(self.wrapped, "availability", None)
        return own() if own is not None else None


def as_codegen(codegen: Any) -> Codegen:
    """``codegen`` as the :class:`Codegen` interface: itself when it subclasses it, else a view of it with the
    interface's defaults for the capabilities it does not have."""
    return codegen if isinstance(codegen, Codegen) else _DuckCodegen(codegen)


def _has_own(codegen: Any, method: str) -> bool:
    """Whether ``codegen`` provides ``method`` itself rather than through :class:`Codegen`'s default."""
    if isinstance(codegen, Codegen):
        return getattr(type(codegen), method, None) is not getattr(Codegen, method)
    return callable(getattr(codegen, method, None))


def check_codegen(codegen: Any, vendor: str) -> None:
    """A :class:`~byoc.errors.VendorError` when ``codegen`` does not keep the :class:`Codegen` interface.

    It must have a callable ``compile`` of its own; the capabilities it has
    must be methods (``module_kinds`` a tuple of strings); and no public
    attribute of its class may be named like a capability without being one:
    ``standalone_sources`` or ``runtime_mem`` would otherwise leave the
    capability quietly off. Attributes set on the instance are not looked at.
    """
    owner = f"vendor {vendor!r}: codegen {type(codegen).__name__}"
    if not callable(getattr(codegen, "compile", None)) or not _has_own(codegen, "compile"):
        raise VendorError(f"{owner} must have a compile(partitions, options) method")
    for name in _METHODS:
        if hasattr(codegen, name) and not callable(getattr(codegen, name)):
            raise VendorError(f"{owner}: {name} must be a method, not {type(getattr(codegen, name)).__name__}")
    kinds = getattr(codegen, "module_kinds", ())
    if isinstance(kinds, str) or not all(isinstance(k, str) for k in kinds):
        raise VendorError(f"{owner}: module_kinds must be a tuple of TVM module type keys (strings), got {kinds!r}")
    check_declarations(getattr(codegen, "declared_options", ()), owner)
    alignment = getattr(codegen, "input_alignment", Codegen.input_alignment)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise VendorError(f"{owner}: input_alignment must be a power of two in bytes (1: any address), "
                          f"got {alignment!r}")
    if not isinstance(getattr(codegen, "cache_version", ""), str):
        raise VendorError(f"{owner}: cache_version must be a string (\"\": no cache), "
                          f"got {getattr(codegen, 'cache_version')!r}")
    interface = set(dir(Codegen))
    for name in sorted(set(dir(type(codegen))) - interface):
        if name.startswith("_"):
            continue
        value = getattr(type(codegen), name, None)
        if isinstance(value, (tuple, list)) and value and all(isinstance(v, VendorOption) for v in value):
            near = ["declared_options"]
        else:
            near = difflib.get_close_matches(name, CAPABILITIES, n=1, cutoff=_NEAR)
        if near:
            raise VendorError(
                f"{owner} has {name!r}, which is not part of the codegen interface but looks like the capability "
                f"{near[0]!r} (byoc.vendor.Codegen); name it {near[0]!r} to provide that capability, or give a "
                "helper a name of its own (a leading underscore)")


def runtime_module_kinds(codegen: Any) -> tuple[str, ...]:
    """The type keys of the runtime modules ``codegen`` makes that need its runtime loaded to load back
    (:attr:`Codegen.module_kinds`)."""
    return tuple(as_codegen(codegen).module_kinds)


def standalone_source(codegen: Any) -> Optional[Callable[[Sequence[Any]], str]]:
    """How ``codegen`` writes its partitions into a standalone C program, or None when it cannot.

    A codegen has that capability when it provides
    :meth:`Codegen.standalone_source` itself (the default means unsupported).
    The function returned raises :class:`~byoc.errors.StandaloneError` if it
    returns None for the partitions it is given after all.
    """
    if not _has_own(codegen, "standalone_source"):
        return None
    interface = as_codegen(codegen)

    def emit(partitions: Sequence[Any]) -> str:
        source = interface.standalone_source(partitions)
        if source is None:
            raise StandaloneError(f"{type(codegen).__name__}.standalone_source gave no C for "
                                  f"{', '.join(p.symbol for p in partitions)}")
        return source

    return emit


def cost_estimator(codegen: Any) -> Optional[Callable[[Any], Optional[float]]]:
    """``codegen``'s :meth:`Codegen.estimate_cost`, or None when it does not provide one (the default, which
    has every partition measured): measured placement then need not flatten a partition to ask it."""
    return as_codegen(codegen).estimate_cost if _has_own(codegen, "estimate_cost") else None


@dataclass(frozen=True)
class RuntimeMemory:
    """What a partition's vendor runtime holds, as the runtime (or the code it runs) reports it.

    ``workspace_bytes``: what one call works in (intermediates, scratch), per
    call in flight; ``constant_bytes``: the weights and other constants it
    keeps resident, its own copies (reordered for its kernels) included;
    ``model_constant_bytes``: the partition's constants as the model gives
    them (None: not reported), so ``constant_bytes / model_constant_bytes``
    is how many times over it holds its weights. ``device_bytes``: what it
    holds in its vendor's device memory (:mod:`byoc.vendor.device`), weights
    and workspace, apart from the host's (None: no device).
    """

    workspace_bytes: int
    constant_bytes: int
    model_constant_bytes: Optional[int] = None
    device_bytes: Optional[int] = None


def runtime_memory(codegen: Any, partitions: Sequence[Any], modules: Sequence[Any]) -> Mapping[str, RuntimeMemory]:
    """Per partition symbol, what ``codegen``'s runtime holds for the ``modules`` it made from ``partitions``
    (:meth:`Codegen.runtime_memory`; ``{}`` for a codegen that does not report)."""
    return dict(as_codegen(codegen).runtime_memory(partitions, modules) or {})


@dataclass(frozen=True)
class _Verdict:
    """A partition check's answer about some op calls of the :class:`~byoc.vendor.graph.PartitionGraph` it was
    shown (``calls``, any sequence, kept as a tuple), with the ``reason`` the report gives."""

    calls: Sequence[Any]
    reason: str

    def __post_init__(self):
        object.__setattr__(self, "calls", tuple(self.calls))
        if not isinstance(self.reason, str) or not self.reason:
            raise VendorError(f"{type(self).__name__} needs a reason, got {self.reason!r}")


class LeaveOut(_Verdict):
    """What a partition check returns to keep some ops out of the partition it was shown: ``calls`` go to another
    vendor or the host, each with ``reason`` in the report. A call takes the ops its rule matched with it (a
    pattern's whole match). The rest is cut again and shown to the check again. Return several to give several
    reasons."""


class Split(_Verdict):
    """What a partition check returns to cut the partition it was shown into pieces, each a partition of the
    vendor's own: a new piece starts at each of ``calls`` (in the graph's order; the first op starts one anyway).
    Each piece is shown to the check again; the report gives ``reason`` beside the pieces split off."""


@dataclass(frozen=True)
class Vendor:
    """A vendor: its name, its rules (in priority order), its codegen, its options.

    Each rule is named ``"<vendor>.<rule name>"`` here (:func:`qualified_rule_name`): ``rules`` holds them
    so, and reports, decisions and artifacts name them so.

    ``partition_check(graph)`` judges each whole partition the rules made for this vendor, as its codegen
    would get it: it returns :data:`SUPPORTED`, a reason (the partition's ops go elsewhere),
    :class:`LeaveOut` (some go elsewhere; the rest is cut and checked again) or :class:`Split` (pieces, each a
    partition of its own and checked again).
    (:mod:`byoc.pipeline.partitioning.partition_checks`.)

    ``static_shapes=True`` says its codegen compiles static shapes only: on a model with symbolic dims, each of
    its partitions is compiled once per size the build names (``specialize=``), the codegen gets each as a
    static partition of its own, and a call at any other size runs the partition on the host
    (``other_sizes="host"``) or is refused by the artifact (``other_sizes="refuse"``)
    (:mod:`byoc.pipeline.partitioning.specializations`). A partition with a symbolic dim the build names no
    sizes for is refused, with that as its reason.

    ``options`` are passed to every check (``Match.options``). When the
    codegen declares its options (:attr:`Codegen.declared_options`) they must
    be among those, with values they take, and override the defaults in every
    build; otherwise they are passed to ``compile`` as they are.
    """

    name: str
    rules: tuple
    codegen: Any  # a Codegen, or any object with compile(partitions, options): see check_codegen
    options: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    # Target presets (``byoc.deploy.targets``) whose artifacts can run this vendor's
    # modules; empty means every target.
    targets: tuple = ()
    # Rules (by name) whose ops only join a partition of other ops: glue a kernel runs well inside a partition,
    # where it saves a cut, but not worth a partition's boundary alone. A region made of their ops only stays on
    # the host, with that reason.
    joining_rules: tuple = ()
    # A check of each whole partition: partition_check(graph) -> SUPPORTED, a reason (the partition is refused),
    # LeaveOut(s) (some ops are kept out) or a Split (pieces, each a partition). ``graph`` is the PartitionGraph
    # the codegen would get, with the build's options and the model's dim bounds.
    partition_check: Optional[Callable[[Any], Any]] = None
    # Its codegen compiles static shapes only: its partitions are specialized for the sizes a build names.
    static_shapes: bool = False
    # What a call at sizes no specialization has does: "host" (the partition runs on the host) or "refuse"
    # (the artifact refuses the call, naming the sizes it was built for).
    other_sizes: str = "host"

    def __post_init__(self):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name or ""):
            raise VendorError(
                f"vendor name {self.name!r} must be an identifier (letters, digits, _); "
                "it becomes part of TVM's relax.ext.<name> and of C symbols"
            )
        object.__setattr__(self, "rules", tuple(self.rules))
        seen = set()
        named = []
        for rule in self.rules:
            if not isinstance(rule, (OpRule, PatternRule)):
                raise VendorError(f"vendor {self.name!r}: {rule!r} is not an OpRule or PatternRule")
            full = qualified_rule_name(self.name, rule.name)
            if full in seen:
                raise VendorError(f"vendor {self.name!r}: rule {full!r} is defined twice")
            seen.add(full)
            named.append(rule if full == rule.name else replace(rule, name=full))
        object.__setattr__(self, "rules", tuple(named))
        joining = tuple(qualified_rule_name(self.name, r) for r in self.joining_rules)
        unknown = [r for r in joining if r not in seen]
        if unknown:
            raise VendorError(f"vendor {self.name!r}: joining_rules names no rule of it: {', '.join(unknown)}")
        object.__setattr__(self, "joining_rules", joining)
        check_codegen(self.codegen, self.name)
        if self.partition_check is not None and not callable(self.partition_check):
            raise VendorError(f"vendor {self.name!r}: partition_check must be a function of a PartitionGraph, "
                              f"got {self.partition_check!r}")
        if self.other_sizes not in OTHER_SIZES:
            raise VendorError(f"vendor {self.name!r}: other_sizes must be one of {', '.join(OTHER_SIZES)}, got "
                              f"{self.other_sizes!r}")
        if self.declared_options:
            for name, value in self.options.items():
                option(self.declared_options, name, self.name).check(value, self.name)

    @property
    def declared_options(self) -> tuple:
        """The options its codegen declares (:attr:`Codegen.declared_options`)."""
        return declared(self.codegen)

    def option(self, name: str) -> VendorOption:
        """The declared option ``name``, or a :class:`~byoc.errors.VendorOptionError` naming those there are."""
        return option(self.declared_options, name, self.name)

    def resolve_options(self, given: Optional[Mapping[str, Any]] = None,
                        environ: Optional[Mapping[str, str]] = None) -> dict[str, OptionSetting]:
        """Each declared option as a build with ``given`` (the user's options for this vendor) sets it: the
        default < this vendor's ``options`` < ``given`` < its environment variable (read from ``environ``,
        default ``os.environ``). Empty for a codegen that declares none (then ``given`` must be empty too)."""
        given = {} if given is None else given
        if not self.declared_options:
            resolve((), self.name, {}, given, environ)  # refuses any name, saying there are none
            return {}
        return resolve(self.declared_options, self.name, self.options, given, environ)

    def options_given(self, given: Optional[Mapping[str, Any]] = None) -> dict:
        """What every hook of this vendor sees as its options when a build is given ``given`` (the user's options
        for this vendor): :meth:`compile_options` of :meth:`resolve_options`."""
        return self.compile_options(self.resolve_options(given))

    def compile_options(self, settings: Mapping[str, OptionSetting]) -> dict:
        """What ``codegen.compile`` receives for ``settings`` (:meth:`resolve_options`): their values, or this
        vendor's ``options`` as they are when its codegen declares none."""
        if not self.declared_options:
            return dict(self.options)
        return {name: setting.value for name, setting in settings.items()}

"""byoc.annotate: decide, for every op call, which vendor takes it or why none does.

Matching is TVM's ``FuseOpsByPattern`` (``annotate_codegen=False``), fed with
every vendor's rules in priority order: vendor order first, then each
vendor's rule order; except that quantized node units
(:class:`~byoc.vendor.quantized.QuantizedUnitRule`) of every vendor come
before all float rules, so that no float rule splits a unit. Around each rule's check byoc adds what TVM lacks:

* every rejection is recorded with its reason, per vendor, per binding;
* policies (``keep_on_host``, demotions from ``min_ops``) reject with a reason;
* a match whose intermediate value is also used outside it is rejected
  (offloading it would need a second output);
* each accepted match tags its composite function with the names of the
  bindings it took (attribute ``byoc.bindings``), so decisions are read from
  what TVM actually fused, not from what the checks were told.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Union

from byoc.errors import ByocError, PolicyError
from byoc.pipeline.annotate.shape_args import inline_shape_arguments
from byoc.pipeline.frontend import import_model
from byoc.pipeline.frontend.onnx_model import ImportedModel, OnnxNode
from byoc.pipeline.frontend.run_time_sequences import HOST_FUNCTION_PREFIX
from byoc.vendor.registry import resolve_vendors
from byoc.vendor import SUPPORTED, Match, Vendor

BINDINGS_ATTR = "byoc.bindings"
VENDOR_ATTR = "byoc.vendor"
# The annotation under which byoc asks FuseOpsByPattern for a match's root expression: the
# key that carries a match's binding names from its check to the attributes of its function.
_ROOT = "byoc_root"
HOST = "host"



@dataclass(frozen=True)
class Decision:
    """Where one op call goes and why.

    ``vendor``/``rule`` are set when the op is offloaded; otherwise ``vendor``
    is None and ``reasons`` holds one reason per vendor that was asked. An
    offloaded op also lists the reasons of higher-priority vendors that
    declined it.
    """

    binding: str
    op: str
    node: Optional[OnnxNode]
    vendor: Optional[str] = None
    rule: Optional[str] = None
    reasons: Mapping[str, str] = field(default_factory=dict)
    rejections: tuple = ()  # every (rule, reason) that declined a match holding this op

    @property
    def target(self) -> str:
        return self.vendor or HOST

    @property
    def on_host(self) -> bool:
        return self.vendor is None


@dataclass
class Annotation:
    """The result of :func:`annotate`: decisions plus the fused module."""

    decisions: dict[str, Decision]
    fused: object  # tvm.IRModule with one composite function per accepted match
    vendors: list[Vendor]


@dataclass(frozen=True)
class _Attempt:
    vendor: str
    rule: str
    size: int
    reason: Optional[str]


#: the op name :func:`op_calls` gives a Loop the host runs (``host_loop(loop0)``)
HOST_LOOP = "host_loop"
#: the op name :func:`op_calls` gives a sequence op of run-time length (``host_sequence(sequence_at0)``)
HOST_SEQUENCE = "host_sequence"


def op_calls(main) -> list[tuple[str, str]]:
    """``(binding name, op name)`` for every op call in ``main``, in order."""
    from tvm import ir, relax

    calls = []
    for block in main.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.op, ir.Op):
                name = value.op.name
                if name == "relax.call_tir":
                    name = f"call_tir({value.args[0].name_hint})"
                calls.append((binding.var.name, name))
            elif isinstance(value, relax.Call) and isinstance(value.op, relax.GlobalVar):
                # an imported main calls no function but a loop the host runs (frontend.loop_bodies) or a sequence
                # op of run-time length (frontend.run_time_sequences)
                callee = value.op.name_hint
                kind = HOST_SEQUENCE if callee.startswith(HOST_FUNCTION_PREFIX) else HOST_LOOP
                calls.append((binding.var.name, f"{kind}({callee})"))
    return calls


def _keep_set(imported: ImportedModel, keep_on_host: Iterable[str]) -> dict[str, str]:
    """binding name -> the keep_on_host entry that pins it."""
    keep = list(keep_on_host or ())
    if not keep:
        return {}
    pinned: dict[str, str] = {}
    for binding, node in imported.node_of.items():
        for entry in keep:
            if entry in (node.name, node.op_type):
                pinned.setdefault(binding, entry)
    # A node that left no op to run (folded at import) is still a name the user may give.
    known = {name for node in imported.model.graph.node for name in (node.name, node.op_type)}
    unknown = [e for e in keep if e not in known]
    if unknown:
        raise PolicyError(
            f"keep_on_host entries {unknown} match no ONNX node name or op type in the model"
        )
    return pinned


class _RuleChecker:
    """Wraps one rule's check for FuseOpsByPattern and records what happened."""

    def __init__(self, vendor: Vendor, rule, state: "_State"):
        self.vendor, self.rule, self.state = vendor, rule, state

    def check(self, ctx) -> bool:
        matched = {var: value for var, value in ctx.matched_bindings.items()}
        names = [var.name for var in matched]
        root_var = ctx.value_to_bound_var.get(ctx.matched_expr)
        reason = self._policy_reason(ctx, matched, root_var)
        if reason is None:
            reason = self._vendor_reason(ctx, matched)
        for name in names:
            self.state.attempts.setdefault(name, []).append(
                _Attempt(self.vendor.name, self.rule.name, len(names), reason)
            )
        if reason is not None:
            return False
        self.state.accepted[(self.rule.name, ctx.matched_expr)] = ",".join(names)
        return True

    def attrs(self, annotated) -> dict:
        bindings = self.state.accepted[(self.rule.name, annotated[_ROOT])]
        return {BINDINGS_ATTR: bindings, VENDOR_ATTR: self.vendor.name}

    def _policy_reason(self, ctx, matched, root_var) -> Optional[str]:
        for var in matched:
            entry = self.state.pinned.get(var.name)
            if entry is not None:
                return f"kept on host by keep_on_host={entry!r}"
            demoted = self.state.demoted.get((self.vendor.name, var.name))
            if demoted is not None:
                return demoted
        from tvm import relax

        for var in matched:
            if root_var is not None and var.same_as(root_var):
                continue
            if not isinstance(var, relax.DataflowVar):
                return f"intermediate result of {self.rule.name} is also a function output"
            users = ctx.var_usages.get(var, [])
            if any(user not in matched for user in users):
                return f"intermediate result of {self.rule.name} is also used outside the pattern"
        return None

    def _vendor_reason(self, ctx, matched) -> Optional[str]:
        from tvm import ir, relax

        calls = tuple(
            v for v in matched.values() if isinstance(v, relax.Call) and isinstance(v.op, ir.Op)
        )
        match = Match(
            rule=self.rule.name,
            root=ctx.matched_expr,
            annotated={k: v for k, v in ctx.annotated_expr.items() if k != _ROOT},
            calls=calls,
            options=self.state.options.get(self.vendor.name, self.vendor.options),
            **self.state.shapes_for(self.vendor),
        )
        try:
            result = self.rule.check(match)
        except Exception as err:  # noqa: BLE001 - a vendor bug must not take the pipeline down
            return f"check of {self.rule.name} raised {type(err).__name__}: {err}"
        if result is SUPPORTED:
            return None
        if isinstance(result, str) and result:
            return result
        return f"check of {self.rule.name} returned {result!r}, not SUPPORTED or a reason string"


@dataclass
class _State:
    pinned: dict[str, str]
    demoted: Mapping[tuple[str, str], str]
    attempts: dict[str, list[_Attempt]] = field(default_factory=dict)
    # (rule, matched root expression) -> its binding names, comma-joined, for each accepted match
    accepted: dict[tuple, str] = field(default_factory=dict)
    # symbolic dim -> (min, max), what a rule's check reads as Match.dim_bounds
    dim_bounds: Mapping[str, tuple] = field(default_factory=dict)
    # vendor name -> its options resolved with the user's, what a rule's check reads as Match.options
    options: Mapping[str, Mapping] = field(default_factory=dict)
    # symbolic dim -> the sizes the build specializes static-shape vendors for, what their checks read as
    # Match.specialized
    specialized: Mapping[str, tuple] = field(default_factory=dict)

    def shapes_for(self, vendor: Vendor) -> dict:
        """``Match.dim_bounds`` and ``Match.specialized`` for ``vendor``'s checks: a static-shape vendor sees each
        specialized dim bounded by its least and largest size."""
        if not vendor.static_shapes or not self.specialized:
            return {"dim_bounds": self.dim_bounds}
        bounds = {**self.dim_bounds, **{name: (min(sizes), max(sizes)) for name, sizes in self.specialized.items()}}
        return {"dim_bounds": bounds, "specialized": self.specialized}


def _fusion_patterns(vendors: list[Vendor], state: _State):
    from tvm.relax.transform import FusionPattern

    from byoc.vendor.quantized import QuantizedUnitRule

    # Every vendor's quantized node units come before any float rule: a float rule that takes
    # the op at a unit's core (dnnl's conv2d) would leave its Q/DQ nodes to run alone.
    ordered = [(vendor, rule) for vendor in vendors for rule in vendor.rules]
    ordered.sort(key=lambda item: not isinstance(item[1], QuantizedUnitRule))  # stable: priority order otherwise
    patterns = []
    for vendor, rule in ordered:
        pattern, annotations = rule.dataflow_pattern()
        annotations = {k: (pattern if v is None else v) for k, v in annotations.items()}
        annotations[_ROOT] = pattern
        checker = _RuleChecker(vendor, rule, state)
        patterns.append(FusionPattern(rule.name, pattern, annotations, checker.check, checker.attrs))
    return patterns


def fusion_patterns(vendors: Iterable) -> list:
    """The tvm ``FusionPattern`` list byoc hands to ``FuseOpsByPattern`` for these vendors.

    Same patterns, same priority order and the same checks (vendor rules
    plus byoc's escaping-intermediate rule) as :func:`annotate`, without
    policies: for comparing byoc against TVM's passes alone. ``vendors``
    are names or :class:`Vendor` objects.
    """
    return _fusion_patterns(resolve_vendors(vendors), _State({}, {}))


def target_reason(vendor: Vendor, target: Optional[str]) -> Optional[str]:
    """Why ``vendor`` cannot take anything for ``target`` (a preset name), or None when it can."""
    if target is None or not vendor.targets or target in vendor.targets:
        return None
    return f"{vendor.name} runs on {', '.join(vendor.targets)} only, not {target}"


def _reason_for(vendor: Vendor, op: str, attempts: list[_Attempt], target: Optional[str]) -> str:
    unusable = target_reason(vendor, target)
    if unusable is not None:
        return unusable
    mine = [a for a in attempts if a.vendor == vendor.name and a.reason]
    if op.startswith(f"{HOST_LOOP}("):
        return ("a loop whose iterations are known only when the model runs: the host runs it, and its body is "
                "partitioned on its own")
    if op.startswith(f"{HOST_SEQUENCE}("):
        return "an op on a sequence whose length is known only when the model runs: the host runs it"
    if not mine:
        return f"no {vendor.name} rule for {op}"
    return min(mine, key=lambda a: a.size).reason  # the most specific rule speaks


def annotate(
    model: Union[ImportedModel, object],
    vendors: Iterable,
    keep_on_host: Iterable[str] = (),
    demoted: Mapping[tuple[str, str], str] | None = None,
    target: Optional[str] = None,
    vendor_options: Optional[Mapping[str, Mapping]] = None,
    specialized: Optional[Mapping[str, tuple]] = None,
) -> Annotation:
    """Give every op call of ``model`` a :class:`Decision`.

    ``model`` is an :class:`ImportedModel` (or anything ``import_model``
    takes). ``vendors`` are names or :class:`Vendor` objects; earlier ones win
    when several claim an op. ``keep_on_host`` holds ONNX node names or op
    types that must stay on the host. ``demoted`` maps ``(vendor, binding)``
    to a reason that vendor may not take that binding (used by min_ops).
    ``target`` is a target preset name (``"s390x"``): a vendor that cannot
    run there (:attr:`Vendor.targets`) takes nothing, and says so as its reason.
    ``vendor_options`` (vendor name -> option name -> value) are resolved as a build resolves them and reach
    every check as ``Match.options``. ``specialized`` (symbolic dim -> sizes) is what the build specializes
    static-shape vendors' partitions for: their checks read it as ``Match.specialized``.
    """
    from tvm.relax.transform import FuseOpsByPattern

    imported = import_model(model)
    vendor_list = resolve_vendors(vendors)
    main = imported.mod["main"]
    calls = op_calls(main)
    names = [b.var.name for block in main.body.blocks for b in block.bindings]
    if len(names) != len(set(names)):
        raise ByocError("internal error: binding names in main are not unique")

    state = _State(_keep_set(imported, keep_on_host), dict(demoted or {}),
                   dim_bounds=imported.dim_bounds,
                   options={v.name: v.options_given((vendor_options or {}).get(v.name))
                            for v in vendor_list},
                   specialized=dict(specialized or {}))
    fused = inline_shape_arguments(FuseOpsByPattern(
        _fusion_patterns([v for v in vendor_list if target_reason(v, target) is None], state),
        bind_constants=True, annotate_codegen=False
    )(imported.mod))

    taken: dict[str, tuple[str, str]] = {}  # binding -> (vendor, rule)
    for _, func in fused.functions_items():
        attrs = func.attrs
        if attrs is not None and "Composite" in attrs and BINDINGS_ATTR in attrs:
            for binding in str(attrs[BINDINGS_ATTR]).split(","):
                taken[binding] = (str(attrs[VENDOR_ATTR]), str(attrs["Composite"]))

    decisions: dict[str, Decision] = {}
    for binding, op in calls:
        attempts = state.attempts.get(binding, [])
        rejections = tuple((a.rule, a.reason) for a in attempts if a.reason)
        node = imported.node_of.get(binding)
        vendor_name, rule = taken.get(binding, (None, None))
        if rule is not None:
            earlier = vendor_list[: [v.name for v in vendor_list].index(vendor_name)]
            reasons = {v.name: _reason_for(v, op, attempts, target) for v in earlier}
            decisions[binding] = Decision(binding, op, node, vendor_name, rule, reasons, rejections)
        else:
            reasons = {v.name: _reason_for(v, op, attempts, target) for v in vendor_list}
            decisions[binding] = Decision(binding, op, node, None, None, reasons, rejections)
    return Annotation(decisions, fused, vendor_list)

"""Building blocks for rule checks, in the spirit of torch.fx's operator_support.

A check takes a :class:`~byoc.vendor.rules.Match` and returns ``SUPPORTED`` or a
reason. The helpers here read types and attributes off Relax expressions,
and :func:`all_of` chains checks so the first reason wins.
"""

from __future__ import annotations

from typing import Iterable, Optional

from byoc.vendor.values import Dim, dim_names, is_tensor_const, shape_dims, static_dims
from byoc.vendor.rules import SUPPORTED, Check, CheckResult, Match


def tensor_type(expr):
    """The Relax TensorType of ``expr``, or None for non-tensors."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def static_shape(expr) -> Optional[tuple[int, ...]]:
    """The static shape of a tensor expression, or None if any dim is symbolic."""
    ty = tensor_type(expr)
    return None if ty is None else static_dims(ty.shape)


def dims(expr) -> Optional[tuple[Dim, ...]]:
    """The dims of a tensor expression: ints where static, the text of each symbolic one
    (``"batch"``, ``"sequence_length*2"``); None for a non-tensor or an unknown rank."""
    ty = tensor_type(expr)
    return None if ty is None else shape_dims(ty.shape)


def dynamic_dims(expr) -> list[str]:
    """The names of the symbolic dims a tensor's shape depends on (``[]`` when it is static)."""
    ty = tensor_type(expr)
    return [] if ty is None else dim_names(ty.shape)


def dim_bound(match: Match, name: str) -> tuple[int, Optional[int]]:
    """``(min, max)`` of the symbolic dim ``name`` in the model (max None when unbounded)."""
    return tuple(match.dim_bounds.get(name, (1, None)))


def _tensors(expr) -> Iterable:
    from tvm import relax

    if isinstance(expr, relax.Tuple):
        for item in expr.fields:
            yield from _tensors(item)
    elif tensor_type(expr) is not None:
        yield expr


def match_tensors(match: Match) -> list:
    """Every tensor argument and result of every call in the match."""
    out = []
    for call in match.calls:
        for arg in call.args:
            out.extend(_tensors(arg))
        out.extend(_tensors(call))
    return out


def dtypes(*allowed: str) -> Check:
    """All tensors of the match have one of ``allowed`` dtypes."""

    def check(match: Match) -> CheckResult:
        for t in match_tensors(match):
            dtype = str(tensor_type(t).dtype)
            if dtype not in allowed:
                return f"dtype {dtype} not supported ({'/'.join(allowed)} only)"
        return SUPPORTED

    return check


def static_shapes(max_rank: int = 8) -> Check:
    """All tensors of the match have static shapes of rank <= ``max_rank``.

    The reason names the first symbolic dim: ``dim 'sequence_length' is dynamic``.
    """

    def check(match: Match) -> CheckResult:
        for t in match_tensors(match):
            names = dynamic_dims(t)
            if names:
                return f"dim {names[0]!r} is dynamic (static shapes only)"
            shape = static_shape(t)
            if shape is None:
                return "unknown rank (static shapes only)"
            if len(shape) > max_rank:
                return f"rank {len(shape)} > {max_rank} not supported"
        return SUPPORTED

    return check


def known_ranks(max_rank: int = 8) -> Check:
    """All tensors of the match have a known rank <= ``max_rank``; dims may be symbolic (for a runtime that
    specializes each call's shapes, as the JSON and dnnl runtimes do)."""

    def check(match: Match) -> CheckResult:
        for t in match_tensors(match):
            shape = dims(t)
            if shape is None:
                return "unknown rank not supported"
            if "" in dynamic_dims(t):
                # TVM's importer keeps an empty (0) input extent as an unnamed symbolic dim
                return "an empty (zero-sized) dim, which TVM keeps symbolic and unnamed"
            if len(shape) > max_rank:
                return f"rank {len(shape)} > {max_rank} not supported"
        return SUPPORTED

    return check


def attr_equals(op: str, name: str, allowed, what: str = "") -> Check:
    """Every call to ``op`` in the match has attribute ``name`` in ``allowed``."""
    allowed = allowed if isinstance(allowed, (tuple, list, set, frozenset)) else (allowed,)

    def check(match: Match) -> CheckResult:
        for call in calls_of(match, op):
            value = getattr(call.attrs, name)
            if value not in allowed:
                label = what or name
                return f"{label}={value} not supported"
        return SUPPORTED

    return check


def calls_of(match: Match, *ops: str) -> list:
    """The calls in the match whose op is one of ``ops``."""
    return [c for c in match.calls if c.op.name in ops]


def all_of(*checks: Check) -> Check:
    """A check that passes when every check passes; the first reason wins."""

    def check(match: Match) -> CheckResult:
        for item in checks:
            result = item(match)
            if result is not SUPPORTED:
                return result
        return SUPPORTED

    return check


# -- checks several vendors share (NCHW kernels) ------------------------------------
#: the channel-first layouts (data, kernel) of each conv op
_CHANNEL_FIRST = {"relax.nn.conv1d": ("NCW", "OIW"), "relax.nn.conv2d": ("NCHW", "OIHW")}
CONVS = tuple(_CHANNEL_FIRST)


def conv_layout_nchw(match: Match) -> CheckResult:
    """NCHW/OIHW layouts only (NCW/OIW for conv1d)."""
    for call in calls_of(match, *CONVS):
        a = call.attrs
        data, kernel = _CHANNEL_FIRST[call.op.name]
        if (a.data_layout, a.kernel_layout, a.out_layout) != (data, kernel, data):
            return f"layout {a.data_layout}/{a.kernel_layout} not supported ({data}/{kernel} only)"
    return SUPPORTED


def constant_conv_weight(match: Match) -> CheckResult:
    """constant weight."""
    for call in calls_of(match, *CONVS):
        if not is_tensor_const(call.args[1]):
            return "the weight is not a constant (it is prepared once, at build or load time)"
    return SUPPORTED


def per_channel_bias(match: Match) -> CheckResult:
    """bias is a per-channel constant.

    Reads the pattern's annotations ``conv`` (the conv call) and ``bias``.
    """
    out = dims(match.annotated["conv"])  # its channels are static (a constant weight's); others may be symbolic
    per_channel = (1, out[1], *(1,) * (len(out) - 2))
    bias = static_shape(match.annotated["bias"])
    if bias not in (per_channel, per_channel[1:]):
        return f"bias shape {bias} is not per-channel {per_channel}"
    return SUPPORTED


_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def pool_layout_nchw(match: Match) -> CheckResult:
    """NCHW layout only."""
    for call in (c for c in match.calls if c.op.name in _POOLS):
        if (call.attrs.layout, call.attrs.out_layout) != ("NCHW", "NCHW"):
            return f"layout {call.attrs.layout} not supported (NCHW only)"
    return SUPPORTED


def avg_pool_plain(match: Match) -> CheckResult:
    """no dilation, no ceil_mode."""
    for call in calls_of(match, "relax.nn.avg_pool2d"):
        if tuple(call.attrs.dilation) != (1, 1):
            return f"dilation {tuple(call.attrs.dilation)} not supported for average pooling"
        if call.attrs.ceil_mode:
            return "ceil_mode=1 not supported for average pooling"
    return SUPPORTED

"""Building blocks for rule checks, in the spirit of torch.fx's operator_support.

A check takes a :class:`~byoc.vendor.rules.Match` and returns ``SUPPORTED`` or a
reason. It reads the match's plain view, the :class:`~byoc.vendor.ops.OpCall`
and :class:`~byoc.vendor.ops.Tensor` objects a codegen gets too (``match.ops``,
``match.op``, ``match.ops_of``, ``match.tensor``, ``match.call``); the checks
here (``dtypes``, ``static_shapes``, ``known_ranks``, layouts, ...) are built
on it, and :func:`all_of` chains checks so the first reason wins.

:func:`tensor_type`, :func:`calls_of` and :func:`match_tensors` read the Relax
objects behind the view (``match.root``, ``match.annotated``,
``match.calls``): the low-level escape hatch for what the plain view does not
say. :func:`static_shape`, :func:`dims` and :func:`dynamic_dims` take either.

:func:`within_budget` makes a partition check (``Vendor(partition_check=...)``): a budget per partition, such
as an on-chip memory, kept by leaving out ops too large alone and splitting where the total would overflow.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Optional

import numpy as np

from byoc.vendor.ops import OpCall, Tensor
from byoc.vendor.values import Dim, dim_names, shape_dims, static_dims
from byoc.vendor.rules import SUPPORTED, Check, CheckResult, LeaveOut, Match, Split


def static_shape(value) -> Optional[tuple[int, ...]]:
    """The static shape of a :class:`~byoc.vendor.ops.Tensor` (or a tensor Relax expression), or None if
    any dim is symbolic or its rank is unknown."""
    if isinstance(value, Tensor):
        shape = value.shape
        static = tuple(d for d in shape or () if isinstance(d, int))
        return None if shape is None or len(static) != len(shape) else static
    ty = tensor_type(value)
    return None if ty is None else static_dims(ty.shape)


def dims(value) -> Optional[tuple[Dim, ...]]:
    """The dims of a :class:`~byoc.vendor.ops.Tensor` (or a tensor Relax expression): ints where static,
    the text of each symbolic one (``"batch"``, ``"sequence_length*2"``); None for an unknown rank."""
    if isinstance(value, Tensor):
        return None if value.shape is None else tuple(value.shape)
    ty = tensor_type(value)
    return None if ty is None else shape_dims(ty.shape)


def dynamic_dims(value) -> list[str]:
    """The names of the symbolic dims a tensor's shape depends on (``[]`` when it is static)."""
    if isinstance(value, Tensor):
        return value.dim_names
    ty = tensor_type(value)
    return [] if ty is None else dim_names(ty.shape)


def dim_bound(match: Match, name: str) -> tuple[int, Optional[int]]:
    """``(min, max)`` of the symbolic dim ``name`` in the model (max None when unbounded)."""
    return tuple(match.dim_bounds.get(name, (1, None)))


def scalar(tensor: Optional[Tensor]) -> Optional[float]:
    """The value of a one-element constant tensor, else None."""
    if tensor is None or tensor.kind != "const" or tensor.data is None or tensor.data.size != 1:
        return None
    return float(tensor.data.reshape(-1)[0])


def dtypes(*allowed: str) -> Check:
    """All tensors of the match have one of ``allowed`` dtypes."""

    def check(match: Match) -> CheckResult:
        for t in match.tensors:
            if t.dtype not in allowed:
                return f"dtype {t.dtype} not supported ({'/'.join(allowed)} only)"
        return SUPPORTED

    return check


def static_shapes(max_rank: int = 8) -> Check:
    """All tensors of the match have static shapes of rank <= ``max_rank``, or symbolic dims that the build
    specializes the vendor's partitions for (``Match.specialized``): its codegen gets those as static sizes.

    The reason names the first other symbolic dim: ``dim 'sequence_length' is dynamic``.
    """

    def check(match: Match) -> CheckResult:
        for t in match.tensors:
            names = [name for name in t.dim_names if name not in match.specialized]
            if names:
                return f"dim {names[0]!r} is dynamic (static shapes only)"
            if t.shape is None:
                return "unknown rank (static shapes only)"
            shape = t.shape
            if len(shape) > max_rank:
                return f"rank {len(shape)} > {max_rank} not supported"
        return SUPPORTED

    return check


def known_ranks(max_rank: int = 8) -> Check:
    """All tensors of the match have a known rank <= ``max_rank``; dims may be symbolic (for a runtime that
    specializes each call's shapes, as the JSON and dnnl runtimes do)."""

    def check(match: Match) -> CheckResult:
        for t in match.tensors:
            shape = t.shape
            if shape is None:
                return "unknown rank not supported"
            if "" in t.dim_names:
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
        for call in match.ops_of(op):
            value = call.attrs.get(name)
            if value not in allowed:
                label = what or name
                return f"{label}={value} not supported"
        return SUPPORTED

    return check


# -- the Relax objects behind the view: the low-level escape hatch -------------------------------

def tensor_type(expr):
    """The Relax TensorType of a Relax expression, or None for non-tensors."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    return ty if isinstance(ty, relax.TensorType) else None


def _tensors(expr) -> Iterable:
    from tvm import relax

    if isinstance(expr, relax.Tuple):
        for item in expr.fields:
            yield from _tensors(item)
    elif tensor_type(expr) is not None:
        yield expr


def match_tensors(match: Match) -> list:
    """Every tensor argument and result of every matched ``relax.Call``, as Relax expressions
    (``match.tensors`` is the plain view)."""
    out: list = []
    for call in match.calls:
        for arg in call.args:
            out.extend(_tensors(arg))
        out.extend(_tensors(call))
    return out


def calls_of(match: Match, *ops: str) -> list:
    """The matched ``relax.Call`` objects whose op is one of ``ops`` (``match.ops_of`` is the plain view)."""
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
    for call in match.ops_of(*CONVS):
        a = call.attrs
        data, kernel = _CHANNEL_FIRST[call.op]
        if (a["data_layout"], a["kernel_layout"], a["out_layout"]) != (data, kernel, data):
            return f"layout {a['data_layout']}/{a['kernel_layout']} not supported ({data}/{kernel} only)"
    return SUPPORTED


def constant_conv_weight(match: Match) -> CheckResult:
    """constant weight."""
    for call in match.ops_of(*CONVS):
        if call.inputs[1].kind != "const":
            return "the weight is not a constant (it is prepared once, at build or load time)"
    return SUPPORTED


def per_channel_bias(match: Match) -> CheckResult:
    """bias is a per-channel constant.

    Reads the pattern's annotations ``conv`` (the conv call) and ``bias``.
    """
    out = match.tensor("conv").shape  # its channels are static (a constant weight's); others may be symbolic
    per_channel = (1, out[1], *(1,) * (len(out) - 2))
    bias = static_shape(match.tensor("bias"))
    if bias not in (per_channel, per_channel[1:]):
        return f"bias shape {bias} is not per-channel {per_channel}"
    return SUPPORTED


_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def pool_layout_nchw(match: Match) -> CheckResult:
    """NCHW layout only."""
    for call in match.ops_of(*_POOLS):
        if (call.attrs["layout"], call.attrs["out_layout"]) != ("NCHW", "NCHW"):
            return f"layout {call.attrs['layout']} not supported (NCHW only)"
    return SUPPORTED


def avg_pool_plain(match: Match) -> CheckResult:
    """no dilation, no ceil_mode."""
    for call in match.ops_of("relax.nn.avg_pool2d"):
        if tuple(call.attrs["dilation"]) != (1, 1):
            return f"dilation {tuple(call.attrs['dilation'])} not supported for average pooling"
        if call.attrs["ceil_mode"]:
            return "ceil_mode=1 not supported for average pooling"
    return SUPPORTED


def output_bytes(call: OpCall) -> int:
    """The bytes of ``call``'s result; a :class:`ValueError` for a symbolic dim (a budget of static shapes)."""
    shape = static_shape(call.output)
    if shape is None:
        raise ValueError(f"{call.op}'s result has symbolic dims {call.output.shape}")
    return math.prod(shape) * np.dtype(call.output.dtype).itemsize


def within_budget(cost: Callable[[OpCall], int], budget: Callable[[Any], int], what: str) -> Callable:
    """A partition check that keeps each partition within ``budget(graph)`` (an on-chip memory, say) counted as
    the sum of ``cost(call)`` over its op calls, in order: an op whose cost alone is over the budget is left out
    (:class:`~byoc.vendor.rules.LeaveOut`), and the partition is split before each op that would take the
    running total over it (:class:`~byoc.vendor.rules.Split`). ``what`` names the cost in the reasons
    (``"bytes of activations"``). ``within_budget(output_bytes, lambda g: g.options["sram_bytes"], ...)``
    keeps every value a partition computes in SRAM."""

    def check(graph) -> Any:
        limit = budget(graph)
        too_large = [LeaveOut([c], f"{cost(c)} {what} alone, over the budget of {limit}")
                     for c in graph.ops if cost(c) > limit]
        if too_large:
            return too_large
        starts: list = []
        used = 0
        for call in graph.ops:
            used += cost(call)
            if used > limit:
                starts, used = starts + [call], cost(call)
        return Split(starts, f"{what} over the budget of {limit}") if starts else SUPPORTED

    check.__doc__ = f"{what} within the budget."
    return check

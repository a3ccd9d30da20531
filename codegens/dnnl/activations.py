"""Activations spelled as several ops, rewritten as the one op the oneDNN runtime runs.

TVM imports GELU, swish (SiLU), hard-swish, hard-sigmoid and LRN as chains of
element-wise ops. oneDNN computes each as one eltwise algorithm (or one LRN
primitive), as a primitive of its own or as a post-op of the conv or matmul
before it. The dnnl rules (``annotations/dnnl.py``) decide what dnnl takes;
this rewrite decides, once and in Python, which ops of a partition are one
activation, and hands the runtime one body op for it:

* ``byoc.eltwise`` with ``algorithm`` (``gelu_erf``, ``gelu_tanh``, ``swish``,
  ``hardswish``, ``hardsigmoid``, ``linear``), ``alpha`` and ``beta``: oneDNN's
  eltwise ``algorithm`` with those parameters, on the op's one input. A form
  that is an activation times a constant (GELU whose ``* 0.5`` the preparation
  folded into the next conv: ``x * (1 + erf(x / sqrt 2))``, twice GELU) is the
  activation, then ``linear`` with that factor as ``alpha``;
* ``byoc.lrn`` with ``size``, ``alpha``, ``beta`` and ``bias``: oneDNN's LRN
  across channels.

The runtime (``runtime/elementwise.cc``, ``runtime/norm.cc``) maps them to
primitives and post-ops and recognizes no form itself. Forms are found where
the runtime looked for them before: inside a rule's match (a conv's activation
tail, an activation rule of its own, the element-wise ops of an int8 unit), and
the tanh form of GELU across rule matches too (exporters write it in many
orders and groupings, so it is recognized by its value at sample points). The
rewritten op takes the place, rule and group of the form's first op; the
intermediates it replaces are read by nothing else.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import replace
from typing import Optional

import numpy as np

from byoc.errors import CodegenError
from byoc.vendor.graph import OpCall, PartitionGraph, Tensor

ELTWISE = "byoc.eltwise"
LRN = "byoc.lrn"

#: the scalars of x * 0.5 * (1 + erf(x / sqrt 2)), the erf form of GELU (the dnnl.gelu rules check them too;
#: torch's dynamo exporter multiplies by 1 / sqrt 2 where the legacy one divides by sqrt 2)
GELU_CONSTANTS = {"gelu_sqrt2": math.sqrt(2.0), "gelu_inv_sqrt2": math.sqrt(0.5), "gelu_one": 1.0, "gelu_half": 0.5}
#: the scalars of hard-swish x * clip(x + 3, 0, 6) / 6 (the dnnl hard-swish rules check them too)
HARDSWISH_CONSTANTS = {"hs_three": 3.0, "hs_six": 6.0}

_GELU_TANH_SAMPLES = (-4.0, -1.7, -0.6, -0.05, 0.3, 0.9, 2.1, 3.6)
_GELU_TANH_WINDOW = 12  # ops at most: the longest spelling seen (Keras/tf2onnx's c*x*x*x) has 9
#: the element-wise ops a tanh GELU is spelled with, as the numpy functions that evaluate them at the samples
_TANH_FORM_OPS = {"relax.multiply": np.multiply, "relax.add": np.add, "relax.subtract": np.subtract,
                  "relax.divide": np.divide, "relax.power": np.power, "relax.tanh": np.tanh}


def near(value: Optional[float], want: float) -> bool:
    """Whether a float32 constant ``value`` is ``want`` (sqrt 2, 3, 0.5, ...) to float32 precision, or is ``want``
    rounded to float16 or bfloat16: the constant of a half-precision model, which byoc computes in float32
    (byoc/pipeline/frontend/prepare/half_precision.py). Its GELU divides by 1.41406, not sqrt 2: computed as GELU,
    it differs by 1e-4 of the erf's argument, a tenth of a float16 ulp."""
    if value is None:
        return False
    return abs(value - want) <= 1e-6 * abs(want) + 1e-7 or value in _half_roundings(want)


@functools.lru_cache(maxsize=None)
def _half_roundings(want: float) -> frozenset:
    import ml_dtypes  # onnx's own dependency

    return frozenset({float(np.float16(want)), float(ml_dtypes.bfloat16(want))})


def activations_fused(graph: PartitionGraph) -> PartitionGraph:
    """``graph`` with each activation spelled as several ops replaced by one ``byoc.eltwise`` or ``byoc.lrn`` op.

    The caller's graph is left as it was. Raises :class:`CodegenError` for an
    LRN spelling oneDNN's LRN does not compute (the rule checks its window).
    """
    forms = _Forms(graph)
    ops, j = [], 0
    while j < len(graph.ops):
        found = forms.at(j)
        if found is None:
            ops.append(graph.ops[j])
            j += 1
            continue
        length, calls = found
        ops.extend(calls)
        j += length
    return graph if len(ops) == len(graph.ops) else replace(graph, ops=ops)


class _Forms:
    """The forms of one graph, as the runtime recognized them: op positions, nodes and reader counts."""

    def __init__(self, graph: PartitionGraph):
        self.ops = graph.ops
        self.next_id = graph.unused_id()
        self.uses = Counter([t.id for c in graph.ops for t in c.inputs] + [t.id for t in graph.outputs])
        # The JSON node of each op: consecutive ops of one composite group (as the serializer cuts them).
        self.node, node = [], -1
        for index, call in enumerate(graph.ops):
            node += index == 0 or call.group != graph.ops[index - 1].group
            self.node.append(node)

    def at(self, j: int) -> Optional[tuple[int, list[OpCall]]]:
        """(ops taken, the ops replacing them) for a form starting at op ``j``, or None."""
        lrn = self._lrn_at(j)
        if lrn is not None:
            return lrn
        first = self.ops[j]
        for x in first.inputs:  # the activation's input: the first op reads nothing else but constants
            if x.kind == "const":
                continue
            found = self._activation_at(j, x)
            if found is not None:
                length, algorithm, alpha, beta, *factor = found
                out = self.ops[j + length - 1].output
                attrs = {"algorithm": algorithm, "alpha": alpha, "beta": beta}
                if not factor:
                    return length, [OpCall(ELTWISE, [x], out, attrs, first.rule, first.group)]
                mid = Tensor(self.fresh_id(), out.shape, out.dtype, "op")
                scaled = {"algorithm": "linear", "alpha": factor[0], "beta": 0.0}
                return length, [OpCall(ELTWISE, [x], mid, attrs, first.rule, first.group),
                                OpCall(ELTWISE, [mid], out, scaled, first.rule, first.group)]
        return None

    def fresh_id(self) -> int:
        """A tensor id no op of the graph uses, for an intermediate a rewrite adds."""
        self.next_id += 1
        return self.next_id - 1

    # -- helpers ---------------------------------------------------------------------------
    def _is(self, j: int, i: int, op: str) -> bool:
        """Op j + i exists, is in op j's node, and is ``op``."""
        return j + i < len(self.ops) and self.node[j + i] == self.node[j] and self.ops[j + i].op == op

    def _once(self, t: Tensor) -> bool:
        return self.uses[t.id] == 1

    @staticmethod
    def _scalar(t: Tensor) -> Optional[float]:
        if t.kind != "const" or t.size != 1:
            return None
        return float(np.float32(np.asarray(t.data).reshape(-1)[0]))

    def _scalar_operand(self, call: OpCall, x: Tensor) -> tuple[Optional[float], bool]:
        """(the scalar constant operand of binary ``call`` other than ``x``, whether ``x`` comes first)."""
        if len(call.inputs) != 2:
            return None, False
        a, b = call.inputs
        other = b if a.id == x.id else a if b.id == x.id else None
        if other is None:
            return None, False
        return self._scalar(other), a.id == x.id

    @staticmethod
    def _reads_both(call: OpCall, x: Tensor, t: Tensor) -> bool:
        return len(call.inputs) == 2 and {call.inputs[0].id, call.inputs[1].id} == {x.id, t.id} and x.id != t.id

    @staticmethod
    def _reads_only(call: OpCall, t: Tensor) -> bool:
        return [i.id for i in call.inputs] == [t.id]

    @staticmethod
    def _clip(call: OpCall, lo: float, hi: float) -> bool:
        return (near(float(np.float32(call.attrs["min"])), lo) and near(float(np.float32(call.attrs["max"])), hi))

    # -- the forms ---------------------------------------------------------------------------
    def _activation_at(self, j: int, x: Tensor):
        """(length, algorithm, alpha, beta) of the activation on ``x`` starting at op ``j``, or None."""
        ops, at, once = self.ops, self._is, self._once
        found = self._gelu_at(j, x) or self._gelu_tanh_at(j, x)
        if found is None and at(j, 0, "relax.sigmoid") and self._reads_only(ops[j], x) and once(ops[j].output) \
                and at(j, 1, "relax.multiply") and self._reads_both(ops[j + 1], x, ops[j].output):
            found = (2, "swish", 1.0, 0.0)
        if found is None:
            found = self._hardswish_at(j, x) or self._hardsigmoid_at(j, x)
        if found is None or ops[j + found[0] - 1].output.shape != x.shape:  # a scalar of higher rank broadcast x
            return None
        return found

    def _gelu_at(self, j: int, x: Tensor):
        """x * 0.5 * (1 + erf(x / sqrt 2)) as five ops, as ONNX exports of GELU spell it: the legacy exporter's
        ((x * (1 + e)) * 0.5), or the dynamo exporter's x * (0.5 * (1 + e)) with x * (1 / sqrt 2) for the
        division; or the legacy form's first four ops alone, twice GELU, where the preparation folded the 0.5
        into the next op's weights."""
        ops = self.ops
        if j + 4 > len(ops) or self.node[j + 3] != self.node[j]:
            return None
        scale, erf, add, mul = ops[j:j + 4]
        c, first = self._scalar_operand(scale, x)
        if not (scale.op == "relax.divide" and first and near(c, GELU_CONSTANTS["gelu_sqrt2"])) and \
                not (scale.op == "relax.multiply" and near(c, GELU_CONSTANTS["gelu_inv_sqrt2"])):
            return None
        if erf.op != "relax.erf" or not self._reads_only(erf, scale.output):
            return None
        if add.op != "relax.add" or not near(self._scalar_operand(add, erf.output)[0], GELU_CONSTANTS["gelu_one"]):
            return None
        if not all(self._once(t) for t in (scale.output, erf.output, add.output)) or mul.op != "relax.multiply":
            return None
        last = ops[j + 4] if j + 4 < len(ops) and self.node[j + 4] == self.node[j] else None
        if self._reads_both(mul, x, add.output):
            if last is not None and last.op == "relax.multiply" and self._once(mul.output) \
                    and near(self._scalar_operand(last, mul.output)[0], GELU_CONSTANTS["gelu_half"]):
                return 5, "gelu_erf", 0.0, 0.0
            return 4, "gelu_erf", 0.0, 0.0, 2.0
        if near(self._scalar_operand(mul, add.output)[0], GELU_CONSTANTS["gelu_half"]) and self._once(mul.output) \
                and last is not None and last.op == "relax.multiply" and self._reads_both(last, x, mul.output):
            return 5, "gelu_erf", 0.0, 0.0
        return None

    def _gelu_tanh_at(self, j: int, x: Tensor):
        """0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) in any order and grouping an exporter writes it: the
        shortest window of element-wise ops on x and scalar constants whose intermediates nothing else reads and
        whose last result equals GELU's at sample points."""
        value = {x.id: np.array(_GELU_TANH_SAMPLES)}
        reads: Counter = Counter()
        has_tanh = False
        for n in range(1, _GELU_TANH_WINDOW + 1):
            if j + n > len(self.ops):
                return None
            call = self.ops[j + n - 1]
            function = _TANH_FORM_OPS.get(call.op)
            if function is None or function.nin != len(call.inputs) or call.output.shape != x.shape:
                return None
            args = []
            for t in call.inputs:
                if t.id in value:
                    args.append(value[t.id])
                    reads[t.id] += 1
                    continue
                scalar = self._scalar(t)
                if scalar is None:
                    return None  # reads something computed outside the window
                args.append(np.float64(scalar))
            has_tanh |= call.op == "relax.tanh"
            # A window that is no GELU may divide by zero or raise a negative number to a fraction on the way:
            # inf or NaN, which fails the check, and no warning.
            with np.errstate(all="ignore"):
                value[call.output.id] = np.broadcast_to(function(*args), (len(_GELU_TANH_SAMPLES),))
            if not has_tanh or not _is_gelu_tanh(value[call.output.id]):
                continue
            if any(t != x.id and self.uses[t] != count for t, count in reads.items()):
                return None
            return n, "gelu_tanh", 0.0, 0.0
        return None

    def _hardswish_at(self, j: int, x: Tensor):
        """x * clip(x + 3, 0, 6) / 6 (ONNX HardSwish)."""
        ops, at, once = self.ops, self._is, self._once
        if not (at(j, 0, "relax.add") and near(self._scalar_operand(ops[j], x)[0], HARDSWISH_CONSTANTS["hs_three"])
                and once(ops[j].output) and at(j, 1, "relax.clip") and self._reads_only(ops[j + 1], ops[j].output)
                and self._clip(ops[j + 1], 0.0, 6.0) and once(ops[j + 1].output) and at(j, 2, "relax.divide")):
            return None
        six, clip_first = self._scalar_operand(ops[j + 2], ops[j + 1].output)
        if not (near(six, HARDSWISH_CONSTANTS["hs_six"]) and clip_first and once(ops[j + 2].output)
                and at(j, 3, "relax.multiply") and self._reads_both(ops[j + 3], x, ops[j + 2].output)):
            return None
        return 4, "hardswish", 1.0 / 6.0, 0.5

    def _hardsigmoid_at(self, j: int, x: Tensor):
        """clip(alpha*x + beta, 0, 1) (ONNX HardSigmoid), or x times it (a hard-swish spelled out)."""
        ops, at, once = self.ops, self._is, self._once
        alpha = self._scalar_operand(ops[j], x)[0] if at(j, 0, "relax.multiply") else None
        beta = (self._scalar_operand(ops[j + 1], ops[j].output)[0]
                if at(j, 1, "relax.add") and once(ops[j].output) else None)
        if alpha is None or beta is None or math.isnan(alpha) or math.isnan(beta) or not once(ops[j + 1].output) \
                or not at(j, 2, "relax.clip") or not self._reads_only(ops[j + 2], ops[j + 1].output) \
                or not self._clip(ops[j + 2], 0.0, 1.0):
            return None
        if once(ops[j + 2].output) and at(j, 3, "relax.multiply") and self._reads_both(ops[j + 3], x, ops[j + 2].output):
            return 4, "hardswish", alpha, beta
        return 3, "hardsigmoid", alpha, beta

    def _lrn_at(self, k: int) -> Optional[tuple[int, OpCall]]:
        """ONNX LRN as TVM imports it, x / (bias + alpha * avg_pool3d(x * x over n channels))^beta: 8 ops."""
        ops = self.ops
        if k + 8 > len(ops) or self.node[k + 7] != self.node[k]:
            return None
        sq, expand, pool, squeeze, mul, add, power, div = ops[k:k + 8]
        if sq.op != "relax.multiply" or len(sq.inputs) != 2 or sq.inputs[0].id != sq.inputs[1].id:
            return None
        x = sq.inputs[0]

        def chain(call: OpCall, op: str, source: OpCall) -> bool:
            return call.op == op and bool(call.inputs) and call.inputs[0].id == source.output.id \
                and self._once(source.output)

        if not (chain(expand, "relax.expand_dims", sq) and chain(pool, "relax.nn.avg_pool3d", expand)
                and chain(squeeze, "relax.squeeze", pool) and chain(mul, "relax.multiply", squeeze)
                and chain(add, "relax.add", mul) and chain(power, "relax.power", add) and div.op == "relax.divide"
                and [t.id for t in div.inputs] == [x.id, power.output.id] and self._once(power.output)):
            return None
        alpha = self._scalar_operand(mul, squeeze.output)[0]
        bias = self._scalar_operand(add, mul.output)[0]
        beta, first = self._scalar_operand(power, add.output)
        a = pool.attrs
        size, window = list(a.get("pool_size", ())), int((a.get("pool_size") or (0,))[0])
        if (None in (alpha, bias, beta) or not first or len(x.shape) != 4 or div.output.shape != x.shape
                or size != [window, 1, 1] or list(a.get("strides", ())) != [1, 1, 1]
                or list(a.get("dilation", ())) != [1, 1, 1] or window % 2 != 1
                or list(a.get("padding", ())) != [window // 2, 0, 0, window // 2, 0, 0]
                or not a.get("count_include_pad") or a.get("ceil_mode")):
            raise CodegenError(f"{div.op}: not an LRN over channels with an odd window (the ops oneDNN's LRN computes)")
        attrs = {"size": window, "alpha": alpha, "beta": beta, "bias": bias}
        return 8, [OpCall(LRN, [x], div.output, attrs, sq.rule, sq.group)]


def _is_gelu_tanh(values: np.ndarray) -> bool:
    """GELU's values at the samples, with its constants sqrt(2/pi) and 0.044715 as written, or both rounded to
    float16 or bfloat16 (a half-precision model's, computed in float32: :func:`near`)."""
    t = np.array(_GELU_TANH_SAMPLES)
    for scale, cube in {(0.7978845608028654, 0.044715), *_gelu_tanh_half_constants()}:
        want = 0.5 * t * (1.0 + np.tanh(scale * (t + cube * t * t * t)))
        if np.all(np.abs(values - want) <= 1e-5 * np.abs(want) + 1e-6):
            return True
    return False


@functools.lru_cache(maxsize=None)
def _gelu_tanh_half_constants() -> frozenset:
    import ml_dtypes  # onnx's own dependency

    return frozenset((float(kind(0.7978845608028654)), float(kind(0.044715)))
                     for kind in (np.float16, ml_dtypes.bfloat16))

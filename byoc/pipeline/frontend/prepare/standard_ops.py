"""ONNX ops TVM's importer lacks and ONNX defines by no function, written as ops it converts (one entry each).

Ops ONNX defines by a function are inlined as that function instead
(:mod:`~byoc.pipeline.frontend.prepare.function_ops`); this table holds the
ones whose definition is prose only. The entries go through
:func:`~byoc.pipeline.frontend.prepare.node_rewrite.rewrite_nodes`, as the
contrib ops do.
"""

from __future__ import annotations

from byoc.pipeline.frontend.prepare.node_rewrite import NodeRewrite, Rewrites

__all__ = ["STANDARD_OPS"]


def _lp_normalization(u: NodeRewrite) -> None:
    """LpNormalization(x) = x / ||x||_p along ``axis`` (p 1 or 2); a zero norm divides by 1, as x is 0 there."""
    p, axis = u.attr("p", 2), u.attr("axis", -1)
    if p not in (1, 2):
        raise u.refuse_attr("p", "p = 1 or 2 (ONNX's LpNormalization)")
    norm = u.reduce("ReduceL2" if p == 2 else "ReduceL1", u.input(0), [axis], "norm")
    zero = u.add("Equal", [norm, u.scalar("zero", 0.0)], "norm_is_zero")
    safe = u.add("Where", [zero, u.scalar("one", 1.0), norm], "safe_norm")
    u.add("Div", [u.input(0), safe], "normalized", output=u.output(0))


STANDARD_OPS: Rewrites = {
    ("", "LpNormalization"): _lp_normalization,
}

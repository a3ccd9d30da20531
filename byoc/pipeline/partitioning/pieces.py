"""Pieces: a vendor's partition split where its partition check says, each piece a partition of its own.

TVM's ``MergeCompositeFunctions`` groups composite calls by the codegen their name starts with (``npu`` of
``npu.conv2d``), so two composites merge only when that prefix is the same. A split
(:class:`~byoc.vendor.rules.Split`) numbers the pieces of a vendor's ops: before the merge each composite of a
numbered piece is named ``npu~<piece>.<rule>`` (:func:`pieces_named`), so pieces never merge with one another,
and after it every name is as it was (:func:`pieces_unnamed`): the rest of byoc, and the vendor, never see the
mark. ``~`` cannot be part of a vendor's name (an identifier) nor of a piece number.
"""

from __future__ import annotations

from typing import Mapping

from byoc.pipeline.annotate.annotator import BINDINGS_ATTR, VENDOR_ATTR

PIECE_MARK = "~"


def pieces_named(fused, pieces: Mapping[tuple[str, str], int]):
    """``fused`` (FuseOpsByPattern's module) with each composite whose first binding ``pieces`` numbers (``(vendor,
    binding) -> piece``) named for its piece; ``fused`` itself when none is."""
    import tvm

    if not pieces:
        return fused
    functions = {}
    for gvar, func in fused.functions_items():
        attrs = func.attrs
        if attrs is not None and "Composite" in attrs and BINDINGS_ATTR in attrs:
            vendor = str(attrs[VENDOR_ATTR])
            piece = pieces.get((vendor, str(attrs[BINDINGS_ATTR]).split(",")[0]))
            if piece is not None:
                rule = str(attrs["Composite"])[len(vendor):]
                func = func.with_attr("Composite", f"{vendor}{PIECE_MARK}{piece}{rule}")
        functions[gvar] = func
    return tvm.IRModule(functions, attrs=fused.attrs)


def _unmarked(name: str) -> str:
    head, dot, rest = name.partition(".")
    return head.split(PIECE_MARK)[0] + dot + rest


def pieces_unnamed(merged):
    """``merged`` (after the merge) with every Codegen function's codegen and every composite's name as the vendor
    wrote them; ``merged`` itself when none is marked."""
    import tvm
    from tvm import relax

    functions, changed = {}, False
    for gvar, func in merged.functions_items():
        attrs = func.attrs
        if isinstance(func, relax.Function) and attrs is not None and PIECE_MARK in str(attrs.get("Codegen", "")):
            func = _with_composites_unmarked(func.with_attr("Codegen", _unmarked(str(attrs["Codegen"]))))
            changed = True
        functions[gvar] = func
    return tvm.IRModule(functions, attrs=merged.attrs) if changed else merged


def _with_composites_unmarked(func):
    """A Codegen function whose local composite functions are named as the vendor wrote them."""
    from tvm import relax

    blocks = []
    for block in func.body.blocks:
        bindings = []
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function) and value.attrs is not None and "Composite" in value.attrs:
                binding = relax.VarBinding(binding.var, value.with_attr(
                    "Composite", _unmarked(str(value.attrs["Composite"]))))
            bindings.append(binding)
        blocks.append(type(block)(bindings, block.span))
    return relax.Function(func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
                          func.attrs, func.span)

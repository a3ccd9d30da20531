"""A host program kept in its linkable parts, so that a text it records can change without a build.

``tvm.compile`` runs the Relax pipeline, generates the VM's bytecode, builds the PrimFuncs with LLVM and
links the three with the vendors' modules. The texts an artifact records (its metadata: the measured
placement's decisions among them) are Relax functions that return a string constant, so a new text needs
new bytecode only. Measured placement, which decides after the rule-based build and usually leaves every
partition where it was, relinks that build with its decisions instead of building the model again: a
build takes seconds, a relink milliseconds (:meth:`byoc.Artifact.relinked`).

These are the steps of TVM 0.27's ``relax.vm_build.build`` with the LLVM build kept; they use its private
``_vmcodegen`` and ``_filter_tir``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class HostLink:
    """The parts of one host build: the Relax module after the pipeline (``mod``), its PrimFuncs built
    (``kernels``, None when it has none), the vendors' modules, the constants, and the target."""

    mod: Any
    kernels: Optional[Any]
    vendor_modules: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    target: Any = None

    def executable(self, texts: Optional[dict[str, str]] = None):
        """The linked executable, with each text function named in ``texts`` returning its new text."""
        from tvm import relax
        from tvm.relax import _ffi_api
        from tvm.relax.vm_build import _vmcodegen

        mod = self.mod
        if texts:
            mod = mod.clone()
            for name, text in texts.items():
                mod[name] = _with_text(mod[name], text)
        builder = relax.ExecBuilder()
        _vmcodegen(builder, mod, "bytecode")
        return relax.VMExecutable(
            _ffi_api.VMLink(builder, self.target, self.kernels, self.vendor_modules, dict(self.params)))


def compile_linkable(mod, target, relax_pipeline) -> HostLink:
    """``tvm.compile(mod, target=target, relax_pipeline=relax_pipeline)`` (a CPU target), in parts."""
    import tvm
    from tvm.relax.vm_build import _filter_tir

    with target:
        lowered = relax_pipeline(mod)
    attrs = dict(lowered.attrs) if lowered.attrs else {}
    tir = _filter_tir(lowered)
    kernels = tvm.tirx.build(tir, target=target) if tir is not None and tir.get_global_vars() else None
    return HostLink(lowered, kernels, list(attrs.get("external_mods", [])),
                    dict(attrs.get("const_name_to_constant", {})), target)


def _with_text(func, text: str):
    """The lowered text function ``func`` (its body returns a string constant) returning ``text`` instead."""
    import tvm
    from tvm import relax

    body = func.body
    if not (isinstance(body, relax.SeqExpr) and isinstance(body.body, tvm.ir.expr.StringImm)):
        raise ValueError(f"{func} does not return a string constant")
    return relax.Function(func.params, relax.SeqExpr(body.blocks, tvm.ir.expr.StringImm(text)), func.ret_ty,
                          func.is_pure, func.attrs)

"""Partition calls lowered to calls of runtime modules, by TVM's ``RunCodegen``, without a global outliving it.

``RunCodegen`` looks a codegen up as the global ``relax.ext.<name>``. For each
lowering, :func:`lower_partitions` renames the partitions' codegen to a name
unique to it, registers a function under that name that hands back the
modules already built, and removes it when ``RunCodegen`` returns. No global
outlives a build and none of TVM's own is ever replaced; vendors never touch
TVM globals.

Both the builder and the standalone export (:mod:`byoc.deploy.standalone`,
which links the partitions' C itself) lower this way. This module imports no
other part of byoc, so the standalone export needs neither the builder nor
the artifact it makes.
"""

from __future__ import annotations

import contextlib
import uuid


@contextlib.contextmanager
def _codegens_for_this_build(mod, modules: dict[str, list]):
    """``mod`` with each partition's codegen renamed to a name of this build, registered while in the block.

    ``RunCodegen`` calls ``relax.ext.<Codegen attribute>``; the functions
    registered here only return the modules ``modules[vendor]`` already built.
    """
    import tvm_ffi

    token = uuid.uuid4().hex[:16]
    names = {vendor: f"byoc_{token}_{vendor}" for vendor in modules}
    renamed = {}
    for gvar, func in mod.functions_items():
        vendor = func.attrs.get("Codegen") if func.attrs is not None else None
        renamed[gvar] = func.with_attr("Codegen", names[str(vendor)]) if vendor is not None else func
    registered = []
    try:
        for vendor, name in names.items():
            built = modules[vendor]
            tvm_ffi.register_global_func(f"relax.ext.{name}", lambda functions, options, constants, built=built: built)
            registered.append(f"relax.ext.{name}")
        import tvm

        yield tvm.IRModule(renamed, attrs=mod.attrs)
    finally:
        for name in registered:
            tvm_ffi.remove_global_func(name)


def lower_partitions(mod, modules: dict[str, list]):
    """``mod`` after TVM's ``RunCodegen``: partition calls become calls of the modules in ``modules``.

    ``modules`` maps each vendor with partitions in ``mod`` to the runtime
    modules its codegen built (empty lists only rewrite the calls, as the
    standalone export does, which links the partitions' C itself).

    A vendor's modules hold their partitions' constants themselves (a codegen
    gets them as arrays in each :class:`~byoc.vendor.graph.PartitionGraph`).
    ``RunCodegen`` also records them as the module attribute
    ``const_name_to_constant``, which TVM's build would package as a constant
    loader beside those modules: every weight twice in an exported library.
    That copy is dropped.
    """
    from tvm import relax

    with _codegens_for_this_build(mod, modules) as renamed:
        lowered = relax.transform.RunCodegen()(renamed)
    return lowered.without_attr("const_name_to_constant") if "const_name_to_constant" in (lowered.attrs or {}) \
        else lowered

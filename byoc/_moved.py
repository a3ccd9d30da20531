"""Import paths of modules that moved into layers, kept working for one release.

byoc 0.1 had its modules side by side (``byoc.checks``, ``byoc.builder``, ...), and later its
pipeline in one flat folder (``byoc.pipeline.partitioner``). They now live in the layer and the stage
they belong to (``byoc.vendor.checks``, ``byoc.pipeline.partitioning.partitioner``). Importing an old
path gives the new module itself (same object, same registry) and a :class:`DeprecationWarning`
naming the new path. ``byoc.report`` is not among them: it is the report function now. Remove this module, and its hook in ``byoc/__init__``,
in the release after 0.2.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

#: old module path -> new module path
_STAGES = {  # byoc 0.1's byoc.pipeline.<module> -> its stage package (0.2)
    "onnx_model": "frontend.onnx_model", "dims": "frontend.dims", "importer": "frontend.importer",
    "import_rewrites": "frontend.import_rewrites", "prepare": "frontend.prepare",
    "quantized": "frontend.prepare.qoperators", "qdq_form": "frontend.prepare.qdq_form",
    "recurrent": "frontend.prepare.recurrent", "strided_views": "frontend.prepare.strided_views",
    "annotator": "annotate.annotator", "shape_args": "annotate.shape_args",
    "partitioner": "partitioning.partitioner", "merging": "partitioning.merging", "siblings": "partitioning.siblings",
    "placement_record": "artifact.placement_record", "profile": "artifact.profile",
    "host_bound": "placement.host_bound", "samples": "placement.samples",
    "builder": "build.builder", "lowering": "build.lowering",
}

#: old module path -> new module path
MOVED = {
    f"byoc.{old}": f"byoc.{new}"
    for old, new in {
        "checks": "vendor.checks", "graph": "vendor.graph", "registry": "vendor.registry",
        "frontend": "pipeline.frontend", "prepare": "pipeline.frontend.prepare",
        "recurrent": "pipeline.frontend.prepare.recurrent", "annotator": "pipeline.annotate.annotator",
        "partitioner": "pipeline.partitioning.partitioner", "builder": "pipeline.build.builder",
        "artifact": "pipeline.artifact.artifact", "host_build": "host.compiler", "memory": "tools.memory",
        "targets": "deploy.targets", "toolchain": "deploy.toolchain", "standalone": "deploy.standalone",
        "verify": "tools.verify", "onnx_export": "tools.onnx_export",
        **{f"pipeline.{old}": f"pipeline.{new}" for old, new in _STAGES.items()},
    }.items()
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path in :data:`MOVED` and loads it as the new module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}; import it from there (the old path goes in 0.3)",
                      DeprecationWarning, stacklevel=2)
        # the import system returns whatever sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())  # ahead of stale files an editable install may map

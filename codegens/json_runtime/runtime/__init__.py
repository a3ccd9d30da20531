"""The json_runtime runtime library: ``json_runtime.cc`` with the reference kernels.

Compiled when byoc is installed and loaded on demand by
:class:`.library.RuntimeLibrary` (see there).
"""

from __future__ import annotations

from .library import RuntimeLibrary

JSON_RUNTIME = RuntimeLibrary("json_runtime", package=__package__)
FACTORY = JSON_RUNTIME.factory
MODULE_KIND = JSON_RUNTIME.module_kind
load_runtime = JSON_RUNTIME.load

__all__ = ["FACTORY", "JSON_RUNTIME", "MODULE_KIND", "RuntimeLibrary", "load_runtime"]

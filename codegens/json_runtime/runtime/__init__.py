"""The json_runtime runtime library: ``json_runtime.cc`` with the reference kernels.

Built on first use and cached by :class:`.library.RuntimeLibrary` (see there
for the cache folder, locking and loading). The functions below are that
library's methods, kept as module functions for the codegen and the tests.
"""

from __future__ import annotations

from .library import BuildFlags, RuntimeLibrary

JSON_RUNTIME = RuntimeLibrary(
    "json_runtime",
    source=(__package__, "json_runtime.cc"),
    headers=(("byoc.codegens.c_source", "byoc_kernels.h"),),
)
FACTORY = JSON_RUNTIME.factory
MODULE_KIND = "byoc_json_runtime"

cache_dir = JSON_RUNTIME.cache_dir
library_path = JSON_RUNTIME.library_path
build_library = JSON_RUNTIME.build
load_runtime = JSON_RUNTIME.load

__all__ = ["BuildFlags", "FACTORY", "JSON_RUNTIME", "MODULE_KIND", "RuntimeLibrary", "build_library", "cache_dir",
           "library_path", "load_runtime"]

"""Find a graph runtime's shared library, installed with byoc, and load it when needed.

Each runtime (``json_runtime.cc``, ``codegens/dnnl/runtime/*.cc``, both with the shared
headers of ``codegens/graph_runtime/``) is compiled when byoc is installed (``setup.py``) into
``libbyoc_<name>.so`` next to its Python package, so using it needs no
compiler. Nothing happens at import: :meth:`RuntimeLibrary.load` runs when an
artifact that needs the runtime is built or loaded. It loads the runtime's
own dependencies first (``dependencies``: e.g. oneDNN from its wheel, by path),
and the library with ``RTLD_GLOBAL`` inside ``prepare`` (a context for process
settings that must be in place while the libraries load, e.g. environment
variables a dependency reads once, at its own load, and that are restored right
after), which registers the module factory and the
``ffi.Module.load_from_bytes.byoc_<name>`` loader.

Where the package is imported from a source checkout while byoc is installed
(``python -m byoc.partition`` run from the repository root), the library is
not next to the source; it is then found in the installed copy on
``sys.path``.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, ContextManager, Sequence

from byoc.errors import BuildError

REINSTALL_HINT = "reinstall byoc (`pip install .` from its source folder) to compile it"


@dataclass
class RuntimeLibrary:
    """One graph runtime: the package that holds its library, and what must happen before loading it.

    ``dependencies`` returns the shared libraries to load first, by path, or
    raises a :class:`BuildError` saying what to install (called when the
    library is needed, so a missing optional dependency is reported then, not
    at import). ``prepare()`` returns a context the libraries are loaded in.
    """

    name: str  # "json_runtime": the library's file name, the error prefix and the global names
    package: str  # the Python package whose folder holds libbyoc_<name>.so
    dependencies: Callable[[], Sequence[Path]] = tuple
    prepare: Callable[[], ContextManager] = contextlib.nullcontext
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loaded: Path | None = field(default=None, repr=False)

    @property
    def factory(self) -> str:
        """The global function that creates a module: ``byoc.<name>.create``."""
        return f"byoc.{self.name}.create"

    @property
    def module_kind(self) -> str:
        """The type key of the modules this runtime makes and loads: ``byoc_<name>``."""
        return f"byoc_{self.name}"

    @property
    def file_name(self) -> str:
        return f"libbyoc_{self.name}.so"

    def library_path(self) -> Path:
        """The installed library, or a BuildError that says how to get it."""
        beside = Path(str(resources.files(self.package).joinpath(self.file_name)))
        if beside.is_file():
            return beside
        relative = Path(*self.package.split("."), self.file_name)
        for entry in sys.path:  # a source checkout shadowing the installed package
            candidate = Path(entry or ".") / relative
            if candidate.is_file():
                return candidate.resolve()
        raise BuildError(f"the {self.name} runtime library ({self.file_name}) is not installed; {REINSTALL_HINT}")

    @property
    def loaded(self) -> bool:
        """Whether this process has loaded the library."""
        return self._loaded is not None

    def load(self) -> Path:
        """Make sure the library is loaded in this process; returns its path."""
        import tvm_ffi

        with self._lock:
            if self._loaded is not None:
                return self._loaded
            path = self.library_path()
            dependencies = list(self.dependencies())
            if tvm_ffi.get_global_func(self.factory, allow_missing=True) is None:
                try:
                    with self.prepare():
                        for dependency in dependencies:
                            ctypes.CDLL(str(dependency), mode=ctypes.RTLD_GLOBAL)
                        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                except OSError as err:
                    raise BuildError(f"cannot load the {self.name} runtime library {str(path)!r}: {err}; "
                                     f"{REINSTALL_HINT}") from None
            self._loaded = path
            return path

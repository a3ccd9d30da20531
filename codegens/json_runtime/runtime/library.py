"""Compile a graph runtime's C++ on first use, cache it per user, load it.

A runtime library (``json_runtime.cc``, ``dnnl_runtime.cc``, each with the
shared ``graph_runtime.h``) is compiled against the tvm-ffi headers of the
installed wheel, once per source hash, tvm / tvm-ffi version, compiler and
extra flags, into

    $BYOC_CACHE_DIR/<name>/            if BYOC_CACHE_DIR is set,
    $XDG_CACHE_HOME/byoc/<name>/       else if XDG_CACHE_HOME is set,
    ~/.cache/byoc/<name>/              otherwise.

A file lock serialises parallel first builds, and the library is written
under a temporary name and renamed, so no process ever loads a half-written
file. Loading uses ``RTLD_GLOBAL`` and registers the module factory and the
``ffi.Module.load_from_bytes.byoc_<name>`` loader; it must happen before an
artifact holding such modules is loaded.

The compiler is ``$CXX`` if set, else ``g++``.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

from byoc.errors import BuildError

HEADER_PACKAGE = __package__
SHARED_HEADER = "graph_runtime.h"
# Hidden visibility: several runtimes share graph_runtime.h and are loaded with
# RTLD_GLOBAL; each must bind to its own copy of the shared code, not the first loaded.
COMMON_FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden")


@dataclass(frozen=True)
class BuildFlags:
    """Extra compiler arguments of a runtime (include folders, libraries, rpaths)."""

    compile: tuple[str, ...] = ()
    link: tuple[str, ...] = ()


@dataclass
class RuntimeLibrary:
    """One graph runtime: its C++ source, the headers it includes, and how it links.

    ``flags`` is called when the library is needed, so a missing optional
    dependency (oneDNN) is reported as a BuildError at that moment, not at
    import. ``prepare`` runs just before the library is loaded into the process.
    """

    name: str  # "json_runtime": the cache folder, the error prefix and the global names
    source: tuple[str, str]  # (package, file)
    headers: tuple[tuple[str, str], ...] = ()  # (package, file), besides graph_runtime.h
    flags: Callable[[], BuildFlags] = BuildFlags
    prepare: Callable[[], None] = lambda: None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loaded: Path | None = field(default=None, repr=False)

    @property
    def factory(self) -> str:
        """The global function that creates a module: ``byoc.<name>.create``."""
        return f"byoc.{self.name}.create"

    def cache_dir(self) -> Path:
        """The folder that holds this runtime's compiled libraries."""
        explicit = os.environ.get("BYOC_CACHE_DIR")
        if explicit:
            return Path(explicit).expanduser() / self.name
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base).expanduser() / "byoc" / self.name

    def _files(self) -> dict[str, str]:
        """File name -> text of the source and every header it includes."""
        files = {}
        for package, name in (self.source, (HEADER_PACKAGE, SHARED_HEADER), *self.headers):
            files[name] = resources.files(package).joinpath(name).read_text()
        return files

    def library_path(self, flags: BuildFlags | None = None) -> Path:
        """Where the library for these sources, flags, tvm / tvm-ffi versions and compiler lives."""
        import tvm
        import tvm_ffi

        flags = flags or self.flags()
        key = hashlib.sha256()
        parts = [*self._files().values(), tvm.__version__, tvm_ffi.__version__, os.environ.get("CXX") or "g++",
                 os.uname().machine, *COMMON_FLAGS, *flags.compile, *flags.link]
        for part in parts:
            key.update(part.encode())
            key.update(b"\0")
        return self.cache_dir() / f"libbyoc_{self.name}-{key.hexdigest()[:20]}.so"

    def build(self) -> Path:
        """Compile the library unless the cache has it; returns its path."""
        import tvm_ffi

        flags = self.flags()
        target = self.library_path(flags)
        if target.is_file():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise BuildError(f"cannot create the byoc cache folder {str(target.parent)!r} ({err}); "
                             "set BYOC_CACHE_DIR to a writable folder") from None
        ffi_root = Path(tvm_ffi.__file__).parent
        with open(target.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if target.is_file():  # another process built it while we waited
                return target
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            build_dir = target.parent / f".build-{os.getpid()}"
            build_dir.mkdir(exist_ok=True)
            try:
                for name, text in self._files().items():
                    (build_dir / name).write_text(text)
                command = [
                    _compiler(self.name), *COMMON_FLAGS, str(build_dir / self.source[1]),
                    f"-I{build_dir}", f"-I{ffi_root / 'include'}", *flags.compile,
                    f"-L{ffi_root / 'lib'}", "-ltvm_ffi", f"-Wl,-rpath,{ffi_root / 'lib'}", *flags.link,
                    "-o", str(tmp),
                ]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                    raise BuildError(f"compiling the {self.name} runtime library failed ({' '.join(command)}):\n{tail}")
                os.replace(tmp, target)
            finally:
                shutil.rmtree(build_dir, ignore_errors=True)
                if tmp.exists():
                    tmp.unlink()
        return target

    def load(self) -> Path:
        """Make sure the library is loaded in this process; returns its path."""
        import tvm_ffi

        with self._lock:
            if self._loaded is not None:
                return self._loaded
            path = self.build()
            if tvm_ffi.get_global_func(self.factory, allow_missing=True) is None:
                self.prepare()
                try:
                    ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                except OSError as err:
                    raise BuildError(f"cannot load the {self.name} runtime library {str(path)!r}: {err}; "
                                     "delete it to have it rebuilt") from None
            self._loaded = path
            return path


def _compiler(runtime: str) -> str:
    cxx = os.environ.get("CXX") or "g++"
    found = shutil.which(cxx)
    if found is None:
        raise BuildError(
            f"the {runtime} vendor compiles its runtime library on first use with {cxx}, which is not "
            "installed; install it with `apt-get install -y --no-install-recommends g++` or set CXX"
        )
    return found

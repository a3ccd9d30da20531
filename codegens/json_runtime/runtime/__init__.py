"""Build the json_runtime C++ library on first use, cache it per user, load it.

The library (``json_runtime.cc`` plus the shared ``byoc_kernels.h``) is
compiled against the tvm-ffi headers of the installed wheel, once per
source hash and tvm / tvm-ffi version, into

    $BYOC_CACHE_DIR/json_runtime/            if BYOC_CACHE_DIR is set,
    $XDG_CACHE_HOME/byoc/json_runtime/       else if XDG_CACHE_HOME is set,
    ~/.cache/byoc/json_runtime/              otherwise.

A file lock serialises parallel first builds, and the library is written
under a temporary name and renamed, so no process ever loads a half-written
file. Loading uses ``RTLD_GLOBAL`` and registers the module factory and
``ffi.Module.load_from_bytes.byoc_json_runtime``; it must happen before an
artifact holding json_runtime modules is loaded.

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
from importlib import resources
from pathlib import Path

from byoc.errors import BuildError

SOURCE = "json_runtime.cc"
KERNELS_PACKAGE = "byoc.codegens.c_source"
KERNELS_HEADER = "byoc_kernels.h"
FACTORY = "byoc.json_runtime.create"
MODULE_KIND = "byoc_json_runtime"

_lock = threading.Lock()
_loaded: Path | None = None


def cache_dir() -> Path:
    """The folder that holds compiled runtime libraries."""
    explicit = os.environ.get("BYOC_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser() / "json_runtime"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "byoc" / "json_runtime"


def _sources() -> tuple[str, str]:
    source = resources.files(__package__).joinpath(SOURCE).read_text()
    header = resources.files(KERNELS_PACKAGE).joinpath(KERNELS_HEADER).read_text()
    return source, header


def _compiler() -> str:
    cxx = os.environ.get("CXX") or "g++"
    found = shutil.which(cxx)
    if found is None:
        raise BuildError(
            f"the json_runtime vendor compiles its runtime library on first use with {cxx}, which is not "
            "installed; install it with `apt-get install -y --no-install-recommends g++` or set CXX"
        )
    return found


def library_path() -> Path:
    """Where the library for this source, tvm and tvm-ffi version and compiler lives."""
    import tvm
    import tvm_ffi

    source, header = _sources()
    key = hashlib.sha256()
    for part in (source, header, tvm.__version__, tvm_ffi.__version__, os.environ.get("CXX") or "g++", os.uname().machine):
        key.update(part.encode())
        key.update(b"\0")
    return cache_dir() / f"libbyoc_json_runtime-{key.hexdigest()[:20]}.so"


def build_library() -> Path:
    """Compile the library unless the cache has it; returns its path."""
    import tvm_ffi

    target = library_path()
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
        source, header = _sources()
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        build_dir = target.parent / f".build-{os.getpid()}"
        build_dir.mkdir(exist_ok=True)
        try:
            (build_dir / SOURCE).write_text(source)
            (build_dir / KERNELS_HEADER).write_text(header)
            command = [
                _compiler(), "-std=c++17", "-O2", "-shared", "-fPIC", str(build_dir / SOURCE),
                f"-I{build_dir}", f"-I{ffi_root / 'include'}", f"-L{ffi_root / 'lib'}", "-ltvm_ffi",
                f"-Wl,-rpath,{ffi_root / 'lib'}", "-o", str(tmp),
            ]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-15:])
                raise BuildError(f"compiling the json_runtime library failed ({' '.join(command)}):\n{tail}")
            os.replace(tmp, target)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
            if tmp.exists():
                tmp.unlink()
    return target


def load_runtime() -> Path:
    """Make sure the runtime library is loaded in this process; returns its path."""
    global _loaded
    import tvm_ffi

    with _lock:
        if _loaded is not None:
            return _loaded
        path = build_library()
        if tvm_ffi.get_global_func(FACTORY, allow_missing=True) is None:
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError as err:
                raise BuildError(f"cannot load the json_runtime library {str(path)!r}: {err}; delete it to "
                                 "have it rebuilt") from None
        _loaded = path
        return path

"""Build byoc's native graph runtimes when the package is installed.

The JSON runtime (``json_runtime.cc``) and the oneDNN runtime (the
sources of ``codegens/dnnl/runtime/``) are plain C++ shared libraries against the tvm-ffi
headers; Python never imports them, byoc loads them with ctypes when an
artifact needs them (see ``codegens/json_runtime/runtime/library.py``). They
are compiled here, once, so a machine with byoc installed needs no compiler to
partition, build, run and load x86_64 models with them.

The headers come from the build environment (``[build-system] requires``):
``apache-tvm-ffi`` for tvm-ffi and ``onednn-devel-cpu-gomp`` for oneDNN. The
runtime dependency on tvm-ffi is pinned to the same release series, so the
library and the tvm-ffi it runs against agree. Without the oneDNN wheels (a platform
they do not exist for), the dnnl runtime is skipped and the ``dnnl`` vendor
still partitions and reports; building with it then says what is missing.
"""

import importlib.util
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Hidden visibility: several runtimes share the headers of codegens/graph_runtime/ and are loaded with
# RTLD_GLOBAL; each must bind to its own copy of the shared code, not the first loaded.
COMPILE_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]


def _shared_limits():
    """-D flags for the limits the runtimes share with Python, from their one source (codegens/limits.py)."""
    spec = importlib.util.spec_from_file_location("byoc_limits", ROOT / "codegens" / "limits.py")
    limits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(limits)
    return [f"-DBYOC_MAX_RANK={limits.MAX_RANK}"]
ONEDNN_VERSION = "2023.2.0"


def _tvm_ffi_flags():
    import tvm_ffi

    root = Path(tvm_ffi.__file__).parent
    return [f"-I{root / 'include'}"], [f"-L{root / 'lib'}", "-ltvm_ffi"]


def _dist_file(dist_name, suffix):
    """The installed file of ``dist_name`` ending with ``suffix``, or None."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if str(file).endswith(suffix):
            path = Path(dist.locate_file(file)).resolve()
            if path.exists():
                return path
    return None


def _onednn_flags():
    header = _dist_file("onednn-devel-cpu-gomp", "include/oneapi/dnnl/dnnl.hpp")
    library = _dist_file("onednn-cpu-gomp", "libdnnl.so.3")
    if header is None or library is None:
        return None
    # Linked by soname (libdnnl.so.3); byoc loads the wheel's copy by path before this library.
    # -fopenmp: the runtime sizes each primitive's OpenMP team (the libgomp oneDNN runs on).
    return [f"-I{header.parents[2]}", "-fopenmp"], [str(library), "-fopenmp"]


class NativeLibrary(Extension):
    """A shared library built with the C++ compiler directly (not a Python extension module)."""

    def __init__(self, name, sources, include_dirs, flags=None, optional=False):
        super().__init__(name, sources=sources)
        self.include_dirs = include_dirs
        self.flags = flags or (lambda: ([], []))
        self.optional = optional


class BuildNativeLibraries(build_ext):
    def get_ext_filename(self, fullname):
        # libbyoc_<name>.so, without the Python ABI tag: ctypes loads it, Python never imports it.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        flags = ext.flags()
        if flags is None:
            if ext.optional:
                self.announce(f"skipping {ext.name}: its dependencies are not installed", level=3)
                return
            raise RuntimeError(f"cannot build {ext.name}: its dependencies are not installed")
        compile_flags, link_flags = flags
        ffi_compile, ffi_link = _tvm_ffi_flags()
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        objects = Path(self.build_temp) / ext.name
        objects.mkdir(parents=True, exist_ok=True)
        compiler = os.environ.get("CXX", "g++")
        limits = _shared_limits()
        compiles = [
            [compiler, *COMPILE_FLAGS, *limits, "-c", str(ROOT / source),
             *(f"-I{ROOT / d}" for d in ext.include_dirs), *ffi_compile, *compile_flags,
             "-o", str(objects / (Path(source).stem + ".o"))]
            for source in ext.sources
        ]
        # One process per source, as many at once as there are CPUs: the oneDNN runtime is a dozen sources.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            list(pool.map(self._run, compiles))
        self._run([compiler, "-shared", *(command[-1] for command in compiles), *ffi_link, *link_flags,
                   "-o", str(target)])

    def _run(self, command):
        self.announce(shlex.join(command), level=3)
        subprocess.run(command, check=True)


RUNTIME = "codegens/json_runtime/runtime"
DNNL = "codegens/dnnl/runtime"
setup(
    ext_modules=[
        NativeLibrary("byoc.codegens.json_runtime.runtime.libbyoc_json_runtime", [f"{RUNTIME}/json_runtime.cc"],
                      [RUNTIME, "codegens", "codegens/c_source"]),
        NativeLibrary("byoc.codegens.dnnl.libbyoc_dnnl", sorted(str(p.relative_to(ROOT)) for p in (ROOT / DNNL).glob("*.cc")),
                      [DNNL, "codegens"], flags=_onednn_flags, optional=True),
    ],
    cmdclass={"build_ext": BuildNativeLibraries},
)

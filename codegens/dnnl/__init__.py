"""The dnnl codegen: partitions as JSON graphs run by a oneDNN-backed runtime.

The graph is the JSON-runtime's (same serializer, same module blob and
loader machinery, :mod:`byoc.codegens.json_runtime`); the executor in
``runtime/`` (the C++ sources, one file per concern) creates oneDNN primitives and reorders weights once, when
a module is created or loaded, and only binds buffers per call.

oneDNN comes from the package extra ``byoc-tvm[dnnl]``: the PyPI wheels
``onednn-cpu-gomp`` (the library, OpenMP threading) and
``onednn-devel-cpu-gomp`` (its headers), both 2023.2.0 (oneDNN 3.2). The
runtime library is compiled against the headers when byoc is installed (they
are a build requirement); at run time it needs the library wheel, which it
loads by path before itself.
"""

from __future__ import annotations

import contextlib
import os
from importlib import metadata
from pathlib import Path

from byoc.codegens.json_runtime import JsonRuntimeCodegen, SerializedGraph, serialize
from byoc.codegens.json_runtime.runtime import RuntimeLibrary
from byoc.errors import BuildError
from byoc.vendor import VendorOption

ONEDNN_VERSION = "2023.2.0"
#: the graph schema the dnnl runtime reads: 3, where activations arrive as one op (serializer.py's docstring)
GRAPH_VERSION = 3
LIBRARY_DIST = "onednn-cpu-gomp"
INSTALL_HINT = f'pip install "byoc-tvm[dnnl]" (or {LIBRARY_DIST}=={ONEDNN_VERSION})'

__all__ = ["DNNL_RUNTIME", "DnnlCodegen", "onednn_library"]


def _located(dist_name: str, suffix: str) -> Path:
    """The installed file of ``dist_name`` whose path ends with ``suffix``."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise BuildError(f"the dnnl vendor needs oneDNN, and {dist_name} is not installed; {INSTALL_HINT}") from None
    if dist.version != ONEDNN_VERSION:
        raise BuildError(f"the dnnl vendor is built for oneDNN {ONEDNN_VERSION} but {dist_name} {dist.version} is "
                         f"installed (the runtime was compiled against {ONEDNN_VERSION}); {INSTALL_HINT}")
    for file in dist.files or ():
        if str(file).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(file)).resolve()
            if path.exists():
                return path
    raise BuildError(f"{dist_name} is installed but {suffix} is missing from it; reinstall it: {INSTALL_HINT}")


def onednn_library() -> list[Path]:
    """oneDNN's shared library from its wheel, or a BuildError saying what to install."""
    return [_located(LIBRARY_DIST, "libdnnl.so.3")]


@contextlib.contextmanager
def bound_openmp_spinning():
    """While oneDNN's libraries load, let idle OpenMP threads spin about 12 ms, then sleep, unless the user chose a policy.

    oneDNN runs on OpenMP threads. How long an idle one spins before it sleeps
    (libgomp's GOMP_SPINCOUNT, default 300 000 rounds: about 5 ms here) decides
    what a call after a pause costs. Calls after pauses are how models run in
    services and in benchmarks' rounds, and on a virtual machine a thread that
    slept is slow to come back: the team then ran its primitives at the speed
    of one thread, or slower, for many calls. Measured on 2 idle cores of a KVM
    guest (AVX-512 VNNI), byoc[dnnl], median per call, bursts of 5 calls after
    50 ms pauses (and back to back):

    ==============================  =======================  ==================
    GOMP_SPINCOUNT                  Linear [128,768]x[768,   EfficientNet-B0
                                    3072]+b, after pauses
    ==============================  =======================  ==================
    10 000 (byoc's before)          3.7 ms                   6.35 (5.59) ms
    300 000 (libgomp's default)     2.3-3.2 ms               -
    1 000 000 (this)                1.9 ms                   6.37 (5.03) ms
    ==============================  =======================  ==================

    An idle process pays for it with about 12 ms of one core after each call.
    Shorter spinning had been chosen to bound what idle threads take from the
    host code between partitions, which measured no faster (MobileNetV2 2.28
    ms either way, BERT 59.7 ms with the default against 61.1 ms). libgomp
    reads the variable once, when it is loaded: it is set for the duration of
    the load and removed again, so ``os.environ`` is left as it was. It has no
    effect when something in the process loaded libgomp before;
    OMP_WAIT_POLICY or GOMP_SPINCOUNT set by the user win.
    """
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        yield
        return
    os.environ["GOMP_SPINCOUNT"] = "1000000"
    try:
        yield
    finally:
        del os.environ["GOMP_SPINCOUNT"]


DNNL_RUNTIME = RuntimeLibrary("dnnl", package=__package__, dependencies=onednn_library,
                              prepare=bound_openmp_spinning)


class DnnlCodegen(JsonRuntimeCodegen):
    """The JSON-runtime codegen, executed by the oneDNN runtime.

    Its options travel in each partition's graph (``"options"``), so an
    exported artifact computes as it was built, whatever the environment of
    the process that loads it. Each option's environment variable (``on`` or
    ``off``) is an explicit override read when the model is built; the
    artifact records it (``BYOC_DNNL_WINOGRAD=off from the environment``).
    """

    declared_options = (
        VendorOption("winograd", bool, True,
                     "run big 3x3 stride-1 convolutions as Winograd F(4x4, 3x3) (winograd.h: 1.6-2.3x faster per "
                     "layer, sums within about 1e-5 of the output instead of 1e-7)", env="BYOC_DNNL_WINOGRAD"),
        VendorOption("contention_watch", bool, True,
                     "watch the runs for a busy machine and then run serially (the runtime's contention watch)",
                     env="BYOC_DNNL_CONTENTION"),
        VendorOption("shape_cache", int, 8,
                     "a partition with symbolic dims keeps the primitives of at most this many shapes (least "
                     "recently used out first)", minimum=1),
    )

    def __init__(self):
        super().__init__(DNNL_RUNTIME)

    def availability(self):
        """None when oneDNN's wheel (at the version the runtime was built for) and the runtime library are
        installed, else what to install: what :meth:`load_runtime` needs, located from package metadata and
        files, nothing loaded."""
        try:
            self.library.dependencies()  # onednn_library()
            self.library.library_path()
        except BuildError as err:
            return str(err)
        return None

    def serialize(self, partition, options=None) -> SerializedGraph:
        """The JSON graph of ``partition``: batch norms folded into their convs (``batch_norm.py``), quantized
        units as the runtime runs them (``quantized.py``), activations spelled as several ops as one op each
        (``activations.py``), and the options (their defaults unless ``options`` say otherwise)."""
        from .activations import activations_fused
        from .batch_norm import batch_norms_folded
        from .quantized import lowered_for_dnnl

        graph = activations_fused(lowered_for_dnnl(batch_norms_folded(partition)))
        return serialize(graph, dtypes=("float32", "uint8", "int8"), version=GRAPH_VERSION,
                         options=self.graph_options(options))

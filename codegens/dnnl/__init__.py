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


#: libgomp's settings byoc chooses while oneDNN loads, each with the variables by which a user's own choice wins
_OPENMP_SETTINGS = (
    ({"GOMP_SPINCOUNT": "1000000"}, ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")),
    ({"OMP_PROC_BIND": "true"}, ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")),
)


@contextlib.contextmanager
def openmp_settings_while_loading():
    """While oneDNN's libraries load, bound idle OpenMP threads' spinning to about 12 ms and bind the team's
    threads to CPUs, each unless the user chose; the loading thread keeps the CPUs it had.

    oneDNN runs on OpenMP threads, and libgomp reads its settings once, when it
    is loaded: they are set for the duration of the load and removed again, so
    ``os.environ`` is left as it was. They have no effect when something in the
    process loaded libgomp before.

    **Spinning.** How long an idle thread spins before it sleeps (libgomp's
    GOMP_SPINCOUNT, default 300 000 rounds: about 5 ms here) decides what a
    call after a pause costs. Calls after pauses are how models run in services
    and in benchmarks' rounds. Measured on 2 idle cores of a KVM guest
    (AVX-512 VNNI), byoc[dnnl], median per call, bursts of 5 calls after 50 ms
    pauses (and back to back):

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
    ms either way, BERT 59.7 ms with the default against 61.1 ms).

    **Binding** (OMP_PROC_BIND=true: each team thread stays on a CPU of its
    own, after the caller's). A sleeping team thread that is woken unbound is
    queued on the CPU of the thread that woke it, which goes on computing its
    own share, and it waits for the scheduler's next tick there (4 ms on a 250
    Hz kernel). On the same guest an empty OpenMP region after a 50 ms pause
    took 4-7 ms unbound and 0.07 ms bound; the first call of Silero VAD over 8
    chunks after a pause took 12.6 ms on a team and 1.1 ms bound. libgomp also
    binds the thread that loads it, which every thread it starts later would
    inherit: that thread gets its CPUs back here, and the runtime holds a
    caller on its place only for the length of a run (``HeldOnPlace`` in
    ``runtime/common.h``).
    """
    chosen = {name: value for values, user_choices in _OPENMP_SETTINGS
              if not any(v in os.environ for v in user_choices) for name, value in values.items()}
    cpus = os.sched_getaffinity(0)
    os.environ.update(chosen)
    try:
        yield
    finally:
        for name in chosen:
            del os.environ[name]
        if "OMP_PROC_BIND" in chosen and os.sched_getaffinity(0) != cpus:
            os.sched_setaffinity(0, cpus)


DNNL_RUNTIME = RuntimeLibrary("dnnl", package=__package__, dependencies=onednn_library,
                              prepare=openmp_settings_while_loading)


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
        """The JSON graph of ``partition``: batch norms folded into their convs (``batch_norm.py``), weight-only
        int4/int8 matmuls as one op on their packed weight (``nbits.py``), dynamic int8 matmuls as one op each
        (``dynamic.py``), quantized units as the runtime runs them (``quantized.py``; element-wise ones as byte
        tables, ``tables.py``), activations spelled as several ops as one op each (``activations.py``), NaN guards
        as one op (``nan_guard.py``), RMS norms and rotary embeddings as one op each (``rms_norm.py``,
        ``rotary.py``), constant gather indices as float32
        (``gather.py``), and the options (their defaults unless ``options`` say otherwise)."""
        from .activations import activations_fused
        from .batch_norm import batch_norms_folded
        from .dynamic import dynamic_matmuls_fused
        from .gather import constant_indices_as_floats
        from .nan_guard import nan_guards_fused
        from .nbits import nbits_lowered
        from .quantized import lowered_for_dnnl
        from .rms_norm import rms_norms_fused
        from .rotary import rotaries_fused
        from .tables import tables_computed

        # NaN guards first: their boolean mask is nothing the quantized lowering may read as an integer; then
        # weight-only int4/int8 matmuls: their uint8 ops are no int8 unit (nbits.py)
        graph = constant_indices_as_floats(rotaries_fused(rms_norms_fused(activations_fused(lowered_for_dnnl(
            tables_computed(dynamic_matmuls_fused(nbits_lowered(nan_guards_fused(batch_norms_folded(partition))))))))))
        return serialize(graph, dtypes=("float32", "uint8", "int8", "bool", "int64"), version=GRAPH_VERSION,
                         options=self.graph_options(options))

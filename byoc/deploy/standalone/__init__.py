"""Standalone deployment: a built model as a C program that needs no TVM runtime.

:func:`export_standalone` writes a folder that builds, with the target's C
compiler alone, into a static program running the whole model;
:func:`run_emulated` builds that program for the artifact's target and runs it
(natively on x86_64, under qemu-user for ppc64le and s390x).

How it is made. The artifact's partitioned Relax module goes through TVM's
own build pipeline (``RunCodegen`` then the passes of
``relax.pipeline.default_build_pipeline`` up to ``LowerAllocTensor``), so
the buffers are TVM's static memory plan. ``main`` is then walked binding by
binding and becomes straight-line C:

- calls to TIR PrimFuncs (what ``call_tir`` lowers to) call the host kernels,
  built by LLVM for the target into ``kernels.o`` and called through their
  tvm-ffi packed ABI (``__tvm_ffi_<name>``, arguments as DLTensor pointers);
- ``call_dps_packed`` to a C-source partition calls its ``__tvm_ffi_<name>``
  entry point, whose C comes from the vendor's C-source codegen;
- ``alloc_storage``/``alloc_tensor`` become static 64-byte-aligned arrays and
  offsets into them; ``reshape`` is a view; tuples, several inputs and
  several outputs are supported;
- host-kernel weights become C literals (float32 through
  :func:`byoc.codegens.c_source.float_literal`, float64 as hexadecimal
  literals, integers as integer literals), so the value and not the byte
  pattern is compiled in: correct on little- and big-endian targets;
- the runtime symbols the kernels use are stubs: workspace allocation with
  malloc, a serial ``parallel launch``, and error reporting to stderr.

What it does not do: the host kernels are built again by LLVM from the same
lowered module for the same target (not extracted from the artifact's
executable), parallel loops run serially, and :func:`run_emulated` builds the
program afresh on every call (seconds, not milliseconds).

Symbolic dims: the program is planned for one shape (``dims=``;
:func:`run_emulated` takes it from the inputs). The C-source partitions are
the artifact's own C, which reads each call's dims, so two shapes run the
same partition code.

Refused, with a :class:`StandaloneError` that says why: artifacts loaded from
a file (the Relax program is no longer there), a symbolic dim without a size, partitions of
codegens that are not C-source (a JSON-runtime partition is run by a C++
runtime module on top of tvm-ffi, which does not exist for the cross
targets), packed calls other than C-source partitions, tensors of dtypes
other than float16/32/64 and (u)int8..64, and any other Relax construct
(control flow, ``match_cast``, calls to other Relax functions).

Inputs and outputs travel as tensor files, whose format
:mod:`byoc.deploy.standalone.tensor_file` defines.

The program is ``model INPUTS OUTPUTS``: it checks every input's dtype and
shape against the model, and writes the outputs in ONNX output order. It exits
0 on success, 2 on bad input files and 1 when a kernel reports an error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from byoc.deploy.standalone.c_program import c_array, model_source
from byoc.deploy.standalone.tensor_file import read_tensors, write_tensors
from byoc.deploy.targets import TargetPreset
from byoc.errors import StandaloneError, last_line
from byoc.host import compiler as host_build
from byoc.pipeline.build.lowering import lower_partitions
from byoc.pipeline.build.specialized import at_sizes
from byoc.pipeline.partitioning.specializations import matches
from byoc.pipeline.artifact.weights_section import blob_files, sections_assembly

__all__ = ["StandaloneProgram", "build_program", "c_array", "export_standalone", "read_tensors", "run_emulated",
           "run_program", "write_tensors"]

PROGRAM = "model"
KERNELS_OBJECT = "kernels.o"


# -- lowering ----------------------------------------------------------------------------
def _dim_sizes(artifact, dims) -> dict[str, int]:
    """The size of each of the artifact's symbolic dims, from ``dims``; a StandaloneError names any missing."""
    from byoc.pipeline.frontend.dims import DimRange, sizes_problem

    names = list(artifact.dims)
    dims = dict(dims or {})
    problem = sizes_problem(dims, names)
    if problem:
        raise StandaloneError(
            f"a standalone program plans its memory for one shape: give every symbolic dim a size with "
            f"dims={{...}} (the model's dims: {', '.join(names) or 'none'}; {problem})")
    sizes = {}
    for name in names:
        size = dims[name]
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) \
                or not artifact.dims.get(name, DimRange(name)).holds(int(size)):
            raise StandaloneError(f"dim {name!r} = {size!r} is not a size in its range "
                                  f"{artifact.dims.get(name, DimRange(name)).describe()}")
        sizes[name] = int(size)
    return sizes


def _calls_host_sequences(main) -> bool:
    """Whether ``main`` calls a sequence op of run-time length (:mod:`byoc.pipeline.frontend.run_time_sequences`)."""
    from byoc.pipeline.annotate.annotator import HOST_SEQUENCE, op_calls

    return any(op.startswith(f"{HOST_SEQUENCE}(") for _, op in op_calls(main))


def _lowered_module(artifact, sizes: dict[str, int]):
    """The artifact's module after TVM's build pipeline up to static memory planning, its symbolic dims
    (in ``main``; the partitions keep theirs and read them per call) bound to ``sizes``."""
    import tvm
    from tvm.relax import backend
    from tvm.relax import transform as T

    if artifact.plan is None:
        raise StandaloneError(
            "this artifact was loaded from a file, which holds compiled code but not the Relax "
            "program; build it again with byoc.compile(...) to export a standalone program"
        )
    # The host kernels as the artifact has them (byoc.host.compiler: fused, parallel, vectorized),
    # in the order of relax.pipeline.default_build_pipeline, stopping before the VM-specific
    # lowering. RunCodegen only rewrites the partition calls here: no module is handed to
    # it, the partitions' C is emitted again by _partition_sources.
    if artifact.plan.loops:
        raise StandaloneError(
            f"Loop {', '.join(repr(name) for name in artifact.plan.loops)} runs on the host as a loop of calls "
            "(its iterations are known only when the model runs), which a standalone program, one pass of its "
            "steps, does not have; give the loop a trip count known when the model is compiled, or deploy the "
            "artifact's library (Artifact.export)")
    sequences = [spec.name for spec in artifact.inputs + artifact.outputs if spec.sequence]
    if sequences or _calls_host_sequences(artifact.plan.imported.mod["main"]):
        where = ", ".join(map(repr, sequences)) or "inside it"
        raise StandaloneError(
            f"the model holds sequences whose length is known only when it runs ({where}), which the host's "
            "sequence functions of byoc's Python runtime hold; a standalone program has no such functions: deploy "
            "the artifact's library (Artifact.export)")
    target = artifact.target.tvm_target()
    mod = artifact.plan.mod
    if sizes:
        _check_refused_sizes(artifact.plan, sizes)
        mod = T.BindSymbolicVars(sizes, "main")(at_sizes(mod, artifact.plan.partitions, sizes))
    mod = lower_partitions(mod, {vendor.name: [] for vendor in artifact.plan.vendors})
    passes = [
        backend.DispatchSampling(),
        backend.DispatchSortScan(),
        host_build.HostLowering(target),
        T.RewriteDataflowReshape(),
        T.ToNonDataflow(),
        T.RemovePurityChecking(),
        T.CallTIRRewrite(),
        T.StaticPlanBlockMemory(),
        T.LowerAllocTensor(),
        T.AttachGlobalSymbol(),
    ]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def _check_refused_sizes(plan, sizes: dict[str, int]) -> None:
    """A :class:`StandaloneError` when a partition of a vendor that refuses other sizes has none of ``sizes``."""
    refusing = {v.name for v in plan.vendors if v.other_sizes == "refuse"}
    for part in plan.partitions:
        if part.vendor in refusing and part.specializations and not any(
                matches(s.sizes, sizes) for s in part.specializations):
            built = "; ".join(s.describe() for s in part.specializations)
            raise StandaloneError(f"partition {part.name} of vendor {part.vendor!r} was built for {built} only, and "
                                  f"{part.vendor} refuses other sizes: export at one of them, or build with these "
                                  "sizes in specialize=")


def _partition_sources(plan) -> tuple[dict[str, str], dict[str, bytes]]:
    """C source per vendor (file stem -> text) for every partition in ``plan``, and the blobs that C reads
    (:class:`~byoc.vendor.csource.CSource`: symbol -> bytes)."""
    from byoc.vendor import standalone_source
    from byoc.vendor.csource import CSource
    from byoc.vendor.graph import UnsupportedConstruct

    sources: dict[str, str] = {}
    blobs: dict[str, bytes] = {}
    for vendor in plan.vendors:
        parts = [p for p in plan.partitions if p.vendor == vendor.name]
        if not parts:
            continue
        emit = standalone_source(vendor.codegen)
        if emit is None:
            raise StandaloneError(
                f"partitions {', '.join(p.name for p in parts)} of vendor {vendor.name!r} are compiled by "
                f"{type(vendor.codegen).__name__}, whose modules run on the TVM runtime; a standalone "
                "program links only partitions whose codegen has standalone_source (C-source codegens). "
                "Build with such a vendor, or keep these ops on the host (keep_on_host=...)"
            )
        try:
            graphs = [graph for p in parts for graph in plan.graphs(p)]
        except UnsupportedConstruct as err:
            raise StandaloneError(f"vendor {vendor.name!r}: a partition holds {err}") from None
        emitted = emit(graphs)
        if isinstance(emitted, CSource):
            blobs.update(emitted.blobs)
            emitted = emitted.code
        sources[f"partitions_{vendor.name}"] = emitted
    return sources, blobs


def _kernels_object(mod, target: TargetPreset, path: Path) -> bool:
    """Build the module's PrimFuncs with LLVM for ``target`` into ``path``; False if there are none."""
    import tvm
    from tvm import tirx

    funcs = {gv: f for gv, f in mod.functions.items()
             if isinstance(f, tirx.PrimFunc) and gv.name_hint != host_build.NO_OP_FUNCTION}
    if not funcs:
        return False
    try:
        lib = tvm.tirx.build(tvm.IRModule(funcs), target=target.tvm_target())
        lib.write_to_file(str(path))
    except Exception as err:  # TVM raises many error types from deep inside
        first = last_line(err)
        raise StandaloneError(f"LLVM could not build the host kernels for {target.name}: {first}") from err
    return True



# -- the program ---------------------------------------------------------------------------
@dataclass
class StandaloneProgram:
    """A standalone program's folder: its C sources and object, for ``target``."""

    directory: Path
    target: TargetPreset
    sources: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)

    def build_command(self, cc: str) -> list[str]:
        """The compiler command (run inside :attr:`directory`) that links the program."""
        return [cc, "-O2", "-o", PROGRAM, *self.sources, *self.objects, "-lm", "-static"]


MAKEFILE_MARK = "# Builds the standalone byoc program for"


def _written_by_byoc(directory: Path) -> bool:
    makefile = directory / "Makefile"
    return directory.is_dir() and makefile.is_file() and makefile.read_text(errors="replace").startswith(MAKEFILE_MARK)


def export_standalone(artifact, directory: Union[str, os.PathLike], overwrite: bool = False,
                      dims: Optional[Mapping[str, int]] = None) -> StandaloneProgram:
    """Write ``artifact`` as a standalone C program into ``directory`` (new or empty).

    A program plans its memory statically, for one shape: an artifact with symbolic dims needs ``dims``,
    a size for each (``{"batch": 1, "seq": 128}``). Its C-source partitions stay as built, reading each
    call's dims from their arguments; only the host part is planned for that shape.

    With ``overwrite=True`` a folder that byoc wrote before (it has byoc's
    ``Makefile``) is emptied and written again; any other non-empty folder is
    refused, so no file of the user's is lost.

    The folder holds ``model.c`` (the runner, the buffers, host-kernel
    weights), one ``partitions_<vendor>.c`` per C-source vendor, ``kernels.o``
    (host kernels for the artifact's target) and a ``Makefile``. ``make``
    with the target's C compiler builds ``model``, a static executable; see
    the module docstring for what is covered and the tensor file format.
    """
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        if not (overwrite and _written_by_byoc(directory)):
            hint = "" if overwrite else " (or pass overwrite=True to replace a folder byoc wrote)"
            raise StandaloneError(f"{str(directory)!r} exists and is not an empty folder, nor one byoc wrote; "
                                  f"choose a new or empty one{hint}")
        shutil.rmtree(directory)
    plan = artifact.plan
    mod = _lowered_module(artifact, _dim_sizes(artifact, dims))
    partition_sources, blobs = _partition_sources(plan)
    symbols = {symbol for p in plan.partitions for symbol in [p.name, *(s.symbol for s in p.specializations)]}
    model_c = model_source(artifact, mod, symbols)
    directory.mkdir(parents=True, exist_ok=True)
    program = StandaloneProgram(directory, artifact.target)
    (directory / "model.c").write_text(model_c)
    program.sources.append("model.c")
    for stem, text in partition_sources.items():
        (directory / f"{stem}.c").write_text(text)
        program.sources.append(f"{stem}.c")
    if blobs:  # the codegens' blobs, each a symbol over its file's bytes (assembled by the program's compiler)
        files = {name: Path(path.name) for name, path in blob_files(blobs, directory).items()}  # make runs there
        (directory / "blobs.S").write_text(sections_assembly(files, "byoc_blob"))
        program.sources.append("blobs.S")
    if _kernels_object(mod, artifact.target, directory / KERNELS_OBJECT):
        program.objects.append(KERNELS_OBJECT)
    command = " ".join(program.build_command("$(CC)"))
    (directory / "Makefile").write_text(
        f"{MAKEFILE_MARK} {artifact.target.name}.\n"
        f"CC = {artifact.target.cc}\n\n{PROGRAM}: {' '.join(program.sources + program.objects)}\n"
        f"\t{command}\n"
    )
    return program


def build_program(program: StandaloneProgram) -> Path:
    """Compile and link ``program`` with its target's C compiler; returns the executable."""
    cc = program.target.compiler()
    program.target.static_libc()
    proc = subprocess.run(program.build_command(cc), cwd=program.directory, capture_output=True, text=True)
    if proc.returncode != 0:
        undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", proc.stderr)))
        if undefined:
            raise StandaloneError(
                f"the program for {program.target.name} needs runtime symbols a standalone program does "
                f"not provide: {', '.join(undefined)}"
            )
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise StandaloneError(f"compiling the standalone program for {program.target.name} failed:\n{tail}")
    return program.directory / PROGRAM


def run_program(program: StandaloneProgram, arrays: list[np.ndarray], executable: Path) -> list[np.ndarray]:
    """Run a built program on ``arrays`` (under qemu when the target is not the host)."""
    prefix = program.target.runner()
    inputs, outputs = program.directory / "inputs.bin", program.directory / "outputs.bin"
    write_tensors(inputs, arrays)
    proc = subprocess.run(prefix + [str(executable), str(inputs), str(outputs)], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:]) or f"exit status {proc.returncode}"
        how = f" under {Path(prefix[0]).name}" if prefix else ""
        raise StandaloneError(f"the standalone program for {program.target.name} failed{how}: {tail}")
    return read_tensors(outputs)


def run_emulated(artifact, inputs) -> list[np.ndarray]:
    """Build the standalone program for the artifact's target and run it on ``inputs``.

    Runs natively on the build host's target and under qemu-user otherwise;
    returns numpy arrays in ONNX output order. Each call builds the program
    afresh in a temporary folder.
    """
    from byoc.pipeline.frontend.dims import bind_dims

    arrays = artifact.check_inputs(inputs)
    sizes = bind_dims(artifact.inputs, [a.shape for a in arrays], artifact.dims)
    artifact.target.runner()  # a missing emulator is reported before any building
    with tempfile.TemporaryDirectory(prefix="byoc-standalone-") as tmp:
        program = export_standalone(artifact, Path(tmp) / "program", dims=sizes)
        return run_program(program, arrays, build_program(program))

"""Artifact: a built model that runs, exports to a shared library, and loads back.

An exported ``.so`` carries its own description (inputs, outputs, target,
partitions) as a Relax function named ``byoc_metadata``, so ``byoc.load``
needs nothing but the file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import tvm_ffi  # a run's hand-over: imported once here, not per call (a small model's call is ~10 us)

from byoc.errors import (ArtifactLoadError, ArtifactTargetError, BuildError, InputDtypeError, InputError, InputShapeError,
                         TargetError, last_line)
from byoc.pipeline.partitioning.specializations import matches
from byoc.pipeline.frontend.dims import bind_dims
from byoc.pipeline.frontend.onnx_model import DimRange, TensorSpec
from byoc.pipeline.artifact.placement_record import Placement
from byoc.deploy.targets import PRESETS, TargetPreset, host_name, resolve_target
from byoc.host.compiler import HOST_CALLS_FUNCTION
from byoc.host.recorded import METADATA_FUNCTION, read_json
from byoc.pipeline.artifact.library_file import missing_bytes, module_table_span, release_module_table
from byoc.pipeline.artifact.weights_section import blob_objects, weights_as_sections
from byoc.host.hand_over import tvm_tensor
from byoc.host.run_io import HOST_ALIGNMENT, RUN_IO_FUNCTION
from byoc.host.sequences import SEQUENCE_ERROR
from byoc.pipeline.artifact.sequence_io import sequence_input, sequence_outputs, sequence_tensors
from byoc.host.threads import check_threads, configure_host_pool, set_vendor_threads


_UNREAD = object()  # Artifact._shared_io before the program's record is read

#: one input's value: an array, or for a sequence input a list of arrays (None: an empty optional)
InputValue = Union[np.ndarray, Sequence[np.ndarray], None]
Inputs = Union[Mapping[str, InputValue], Sequence[InputValue], np.ndarray]


def _specs(rows) -> list[TensorSpec]:
    """The metadata's rows ([name, shape, dtype], "sequence" after them for a sequence) as specs."""
    return [TensorSpec(name, tuple(shape), dtype, sequence="sequence" in rest) for name, shape, dtype, *rest in rows]


class Artifact:
    """A compiled model.

    ``plan`` is the :class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan` it was built
    from (None for an artifact loaded from disk). ``inputs``/``outputs``
    describe the ONNX model's tensors, in ONNX order: each dim a size or the
    name of a symbolic dim, whose range ``dims`` gives. One artifact runs
    every shape its signature allows. ``threads`` sizes the host thread pool
    of each thread that runs it (see :mod:`byoc.host.threads`).
    """

    def __init__(self, executable, metadata: dict, plan=None, target: Optional[TargetPreset] = None,
                 library=None, threads: Optional[int] = None, host_link=None, blobs: Optional[dict] = None):
        self.executable = executable
        self._blobs = dict(blobs or {})  # the codegens' blobs (byoc.vendor.csource), linked in at export
        self._host_link = host_link  # its build in parts (byoc.host.relink), when built to be relinked
        self.metadata = metadata
        self.plan = plan
        self.target = target or resolve_target(metadata["target"], metadata.get("mcpu"))
        self.inputs = _specs(metadata["inputs"])
        self.outputs = _specs(metadata["outputs"])
        self.dims = {name: DimRange(name, low, high) for name, (low, high) in metadata.get("dims", {}).items()}
        #: inputs that index a Gather directly -> (the axis' extent, the Gather's node): each run checks them
        self.index_inputs = {name: (extent, node) for name, (extent, node) in metadata.get("index_inputs", {}).items()}
        # Checked on every run: a small model's whole call takes tens of microseconds, so these are worked out once.
        self._input_dtypes = [np.dtype(spec.dtype) for spec in self.inputs]
        #: sequences given or returned as lists (:mod:`byoc.host.sequences`): a run takes a slower path for them
        self._sequences = any(spec.sequence for spec in self.inputs + self.outputs)
        self._tensor_inputs = [spec for spec in self.inputs if not spec.sequence]
        self._static_shapes = (None if any(isinstance(d, str) for spec in self._tensor_inputs for d in spec.shape)
                               else [tuple(spec.shape) for spec in self._tensor_inputs])
        # The input shapes of the last call whose dims checked out: a decoder's steps repeat one shape per bucket,
        # and binding the dims again took a quarter of the call's Python (9 of 40 us).
        self._shapes_checked: Optional[list] = None
        self._library = library
        self._library_lock = threading.Lock()
        self._local = threading.local()
        self._tmpdir: Optional[str] = None
        self._host_calls: Optional[list] = None
        self._shared_io = _UNREAD
        self.threads = check_threads(threads)

    @property
    def runtime_memory(self) -> dict:
        """Partition name -> :class:`~byoc.vendor.RuntimeMemory`: what its vendor's runtime holds, as reported
        when it was built (empty for an artifact of an older byoc, and for vendors that do not report); what
        it holds now, here, is :meth:`memory`."""
        from byoc.vendor import RuntimeMemory

        return {name: RuntimeMemory(*pair) for name, pair in self.metadata.get("runtime_memory", {}).items()}

    def memory(self) -> dict:
        """Partition name -> :class:`~byoc.vendor.RuntimeMemory`: what its vendor runtime holds now, in this
        process, for the partitions whose runtime reports it (json_runtime, dnnl): workspace per call, the
        constants it keeps resident and the model's constants it was given. Live, unlike
        :attr:`runtime_memory`: a loaded artifact's dnnl partitions keep each weight once, in the layout its
        kernel reads, and none of the library file's pages; a partition with symbolic dims compiles per shape
        at its first call, and reports nothing before it."""
        from byoc.codegens.json_runtime import module_memory
        from byoc.pipeline.artifact.profile import runtime_modules

        modules = runtime_modules(self._loaded_library(), "get_memory")
        return {symbol: module_memory(module) for symbol, module in modules.items()
                if int(module["get_specializations"]()[0]) > 0}

    @property
    def vendor_options(self) -> dict:
        """Vendor -> option -> value: the options each vendor's codegen was built with (those it declares,
        for the vendors with partitions), as stored in the artifact, so a loaded one reports them too."""
        return {vendor: {name: setting.value for name, setting in options.items()}
                for vendor, options in self.vendor_option_settings.items()}

    @property
    def vendor_option_settings(self) -> dict:
        """Vendor -> option -> :class:`~byoc.vendor.OptionSetting`: each option's value with its default, where
        it came from and, for an environment variable, which one (empty for an artifact of an older byoc)."""
        from byoc.vendor import OptionSetting

        return {vendor: {name: OptionSetting.from_json(record) for name, record in options.items()}
                for vendor, options in self.metadata.get("vendor_options", {}).items()}

    @property
    def placement(self):
        """What measured placement decided (:class:`~byoc.pipeline.artifact.placement_record.Placement`: each rule-based
        partition's times per place, where it went and why), as stored in the artifact; None when the rules
        placed."""
        record = self.metadata.get("placement")
        return Placement.from_json(record) if record is not None else None

    def relinked(self, plan, metadata: dict) -> Optional["Artifact"]:
        """This artifact's compiled program recording ``metadata`` instead, as the artifact of ``plan``: for a
        plan that computes what this one's does and differs in what it records (measured placement's
        decisions when nothing moved). None unless it was built to be relinked (:mod:`byoc.host.relink`)."""
        if self._host_link is None:
            return None
        text = json.dumps(metadata, sort_keys=True)
        executable = self._host_link.executable({METADATA_FUNCTION: text})
        return Artifact(executable, json.loads(text), plan=plan, target=self.target, threads=self.threads,
                        blobs=self._blobs)

    # -- export -----------------------------------------------------------------------
    def export(self, path: Union[str, os.PathLike], overwrite: bool = False) -> Path:
        """Write the artifact as a shared library for its target; returns the path.

        An existing file is kept unless ``overwrite=True``.
        """
        if self.executable is None:
            raise BuildError("this artifact was loaded from a file; copy that file instead of exporting")
        path = Path(path)
        if path.exists() and not overwrite:
            raise BuildError(f"{str(path)!r} already exists; choose another path or pass overwrite=True")
        if not path.parent.is_dir():
            raise BuildError(f"folder {str(path.parent)!r} does not exist")
        cc = self.target.compiler()
        # Link into a temporary file first so a failure never leaves a broken file behind.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent, prefix=".byoc-")
        os.close(fd)
        try:
            with tempfile.TemporaryDirectory(prefix="byoc-weights-") as folder, \
                    weights_as_sections(self.executable, cc, Path(folder)) as addons:
                addons = addons + blob_objects(self._blobs, cc, Path(folder))
                self.executable.export_library(tmp, cc=cc, addons=addons)
            os.replace(tmp, path)
        except Exception as err:
            first = last_line(err)
            raise BuildError(f"exporting for {self.target.name} with {cc} failed: {first}") from err
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    # -- running ----------------------------------------------------------------------
    def _loaded_library(self):
        with self._library_lock:
            if self._library is None:
                if not self.target.is_host:
                    raise TargetError(
                        f"this artifact is built for {self.target.name} and cannot run on this "
                        f"host; export it, or use run_emulated()"
                    )
                if not _holds_c_source(self.executable.mod):
                    # Every module is already machine code (LLVM, vendor runtimes): run it in
                    # memory, so running needs no compiler.
                    self._library = self.executable
                else:
                    self._tmpdir = tempfile.mkdtemp(prefix="byoc-artifact-")
                    weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
                    self._library = load_library(self.export(Path(self._tmpdir) / "model.so"), self.threads)
            return self._library

    def _vm(self):
        # A VirtualMachine keeps per-call state: one per thread.
        vm = getattr(self._local, "vm", None)
        if vm is None:
            import tvm
            from tvm import relax

            library = self._loaded_library()
            # TVM's pool is per thread: sized before this thread's first run
            configure_host_pool(self.threads, vendor_team=self._runs_vendor_team())
            vm = relax.VirtualMachine(library, tvm.cpu())
            self._local.vm = vm
        return vm

    def _runs_vendor_team(self) -> bool:
        """Whether a partition's runtime runs a team of its own (it takes a thread count: dnnl's OpenMP team)."""
        import tvm_ffi

        vendors = {vendor for _, vendor in self.metadata.get("partitions", [])}
        return any(tvm_ffi.get_global_func(f"byoc.{vendor}.set_max_threads", allow_missing=True) is not None
                   for vendor in vendors)

    def _main(self):
        """This thread's VM's ``main``, looked up once: a lookup by name costs more than a microsecond a call,
        a tenth of a tiny model's whole run (measured on AMD EPYC)."""
        main = getattr(self._local, "main", None)
        if main is None:
            main = self._local.main = self._vm()["main"]
        return main

    def implementations(self) -> dict[str, list[str]]:
        """Partition name -> what runs each step of it, in order, as its vendor runtime reports it.

        For dnnl a step is ``"<primitive kind> <oneDNN implementation>"`` as oneDNN's verbose log names them
        (``"convolution brgconv:avx512_core"``, ``"binary ref:any"`` for its scalar reference kernel), or
        ``"kernel byoc:<name>"`` for byoc's own code. A partition with symbolic dims reports the shape it
        was called with last, and an empty list before its first call. Partitions whose runtime does not
        report (C source, json_runtime) are left out.
        """
        from byoc.pipeline.artifact.profile import runtime_modules

        modules = runtime_modules(self._loaded_library(), "get_implementations")
        return {symbol: [str(s) for s in module.get_function("get_implementations")()]
                for symbol, module in modules.items()}

    def host_calls(self) -> list[tuple[str, list[str]]]:
        """Each call of a host function in a run, in order: the function's name (as a profile names it) and
        the bindings of the partitioned Relax ``main`` it computes (fusion puts several in one function);
        empty for a program built without byoc's host pipeline, or by an older byoc."""
        if self._host_calls is None:
            recorded = read_json(self._vm(), HOST_CALLS_FUNCTION) or []
            self._host_calls = [(name, list(bindings)) for name, bindings in recorded]
        return self._host_calls

    def host_nodes(self) -> dict[str, list[str]]:
        """Host function -> the user's ONNX nodes it computes (over all its calls, in order)."""
        node_of = self.metadata.get("host_nodes", {})
        if self.plan is not None:
            node_of = {d.binding: d.node.name for d in self.plan.decisions.values() if d.node is not None}
        nodes: dict[str, list[str]] = {}
        for name, bindings in self.host_calls():
            known = nodes.setdefault(name, [])
            known.extend(n for n in dict.fromkeys(node_of[b] for b in bindings if b in node_of) if n not in known)
        return nodes

    def profile(self, inputs: Inputs, runs: int = 10, warmup: int = 1):
        """Where the time of a run goes: a :class:`~byoc.pipeline.artifact.profile.Profile`.

        Runs the model ``warmup`` + ``runs`` times as :meth:`run` does, then ``runs`` times instrumented: each
        partition (with its vendor, its ONNX nodes and, where its runtime times them, each step and what ran
        it), each host function and the time outside any call, per run. Inputs get the same checks and errors
        as :meth:`run`; the ordinary :meth:`run` is not slowed by profiling.
        """
        from byoc.pipeline.artifact.profile import profile_artifact

        if runs < 1 or warmup < 0:
            raise ValueError(f"profile needs runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
        return profile_artifact(self, inputs, runs, warmup)

    def tvm_inputs(self, arrays: Sequence[np.ndarray]) -> list:
        """``arrays`` (as :meth:`check_inputs` returns them) as the TVM tensors a run hands the VM: the arrays
        themselves where their addresses suit every reader of them, else copies (:mod:`byoc.host.run_io`)."""
        record = self._run_io()
        alignment = record["input_alignment"] if record else [None] * len(arrays)
        if self._sequences:
            return [sequence_tensors(a) if spec.sequence else tvm_tensor(a, need)
                    for spec, a, need in zip(self.inputs, arrays, alignment)]
        return [tvm_tensor(a, need) for a, need in zip(arrays, alignment)]

    @property
    def input_alignment(self) -> int:
        """The alignment in bytes that every input's address must have for a run to read it in place: the most
        that any reader of an input needs (:mod:`byoc.host.run_io`; an older artifact without the record
        copies every input, and says :data:`HOST_ALIGNMENT`)."""
        record = self._run_io()
        return max([HOST_ALIGNMENT] + (record["input_alignment"] if record else []))

    def _run_io(self) -> Optional[dict]:
        """What a run may share with its caller, as the program records it (None: share nothing)."""
        if self._shared_io is _UNREAD:
            self._shared_io = read_json(self._vm(), RUN_IO_FUNCTION)
        return self._shared_io

    def check_inputs(self, inputs: Inputs) -> list:
        """Inputs as arrays in ONNX order (a list of arrays for a sequence input), or an InputError that names the
        problem."""
        specs = self.inputs
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        # `type(...) is dict` first: isinstance against the Mapping ABC costs a small model's call a microsecond
        if type(inputs) is dict or isinstance(inputs, Mapping):
            names = [s.name for s in specs]
            try:
                arrays = [inputs[n] for n in names] if len(inputs) == len(names) else None
            except KeyError:
                arrays = None
            if arrays is None:
                missing = [n for n in names if n not in inputs]
                unknown = [n for n in inputs if n not in names]
                raise InputError(
                    f"inputs do not match the model: missing {missing}, unknown {unknown}; "
                    f"the model's inputs are {names}"
                )
        else:
            arrays = list(inputs)
            if len(arrays) != len(specs):
                raise InputError(
                    f"the model takes {len(specs)} input(s) ({[s.name for s in specs]}), got {len(arrays)}"
                )
        checked = []
        for spec, dtype, value in zip(specs, self._input_dtypes, arrays):
            if spec.sequence:
                checked.append(sequence_input(spec, value))
                continue
            if value is None:  # an empty optional: byoc takes an optional tensor input as the tensor
                raise InputError(f"input {spec.name!r} is None: an optional tensor input of this model must hold "
                                 f"a tensor ({spec.describe()})")
            array = value if type(value) is np.ndarray else np.asarray(value)
            if array.dtype is not dtype and array.dtype != dtype:
                raise InputDtypeError(
                    f"input {spec.name!r} has dtype {array.dtype}, expected {spec.dtype}; "
                    f"convert it with .astype(np.{spec.dtype})", spec.name
                )
            if not array.flags.c_contiguous:  # a 0-d array always is: np.ascontiguousarray would make it (1,)
                array = np.ascontiguousarray(array)
            checked.append(array)
            self.check_index_input(spec.name, array)
        shapes = ([a.shape for s, a in zip(specs, checked) if not s.sequence] if self._sequences
                  else [a.shape for a in checked])
        if shapes != self._static_shapes and shapes != self._shapes_checked:
            sizes = bind_dims(self._tensor_inputs, shapes, self.dims)  # or names what is wrong
            _check_sizes_only(sizes, self.metadata.get("sizes_only", {}))
            self._shapes_checked = shapes
        return checked

    def export_standalone(self, directory: Union[str, os.PathLike], overwrite: bool = False,
                          dims: Optional[Mapping[str, int]] = None):
        """Write a standalone C program (no TVM runtime) for this artifact's target.

        ``overwrite=True`` replaces a folder byoc wrote before, never another. The program is planned for
        one shape: a model with symbolic dims needs ``dims`` (``{"batch": 1}``).
        See :mod:`byoc.deploy.standalone` for what it covers and the I/O file format.
        """
        from byoc.deploy.standalone import export_standalone

        return export_standalone(self, directory, overwrite, dims)

    def run_emulated(self, inputs: Inputs) -> list[np.ndarray]:
        """Build the standalone program for this artifact's target and run it.

        Natively on x86_64, under qemu for ppc64le and s390x; outputs in ONNX order.
        """
        from byoc.deploy.standalone import run_emulated

        return run_emulated(self, inputs)

    def run(self, inputs: Inputs) -> list:
        """Run the model; returns numpy arrays in ONNX output order (for a sequence output, a list of arrays, or
        None for an empty optional: :class:`~byoc.pipeline.frontend.onnx_model.TensorSpec`)."""
        return self.run_bound(self.tvm_inputs(self.check_inputs(inputs)))

    def bind(self, inputs: Inputs) -> list:
        """``inputs`` checked as :meth:`run` checks them, as the tensors :meth:`run_bound` hands the program: each
        a view of the caller's array, so a run reads what the array holds then.

        For a caller that runs again and again on arrays it rewrites in place (:class:`byoc.Generator`'s token,
        mask and cache buffers), which saves a call the checks and hand-over of every input (about 40 us of a
        0.25 ms decoder step, measured on AMD EPYC). What the caller writes between runs is not checked again:
        it keeps the shapes, and checks token ids with :meth:`check_index_input`. An array that cannot be
        viewed (its address does not suit the program's readers of it, :mod:`byoc.host.run_io`; allocate it
        with :func:`byoc.host.hand_over.aligned_zeros` at :attr:`input_alignment`) is an :class:`InputError`.
        """
        if self._sequences:
            raise InputError("a model that takes or returns sequences cannot be bound: run it with run()")
        arrays = self.check_inputs(inputs)
        tensors = self.tvm_inputs(arrays)
        if isinstance(inputs, Mapping):
            given = [inputs[spec.name] for spec in self.inputs]
        else:
            given = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        for spec, value, array, tensor in zip(self.inputs, given, arrays, tensors):
            if array.size and (array is not value or tensor.data_ptr() != array.ctypes.data):
                raise InputError(f"input {spec.name!r} cannot be bound: the run would read a copy of it (a "
                                 f"C-contiguous {spec.dtype} array allocated with aligned_zeros can be)")
        return tensors

    def run_bound(self, tensors: Sequence) -> list[np.ndarray]:
        """Run the model on tensors from :meth:`bind`; returns numpy arrays in ONNX output order."""
        try:
            result = self._main()(*tensors)
        except Exception as err:  # TVM's VM raises its own error types
            if SEQUENCE_ERROR in str(err):  # a position or split the sequence does not allow (byoc.host.sequences)
                raise InputError(str(err).split(SEQUENCE_ERROR, 1)[1].splitlines()[0]) from None
            if "match_cast" not in str(err):
                raise
            # the importer's run-time checks where no analysis of the dims could tell (byoc.pipeline.frontend.importer,
            # .run_time_values, .loop_bodies)
            raise InputShapeError(
                "these inputs break a relation between dims that the model holds at run time (a Squeeze of a dim "
                "that must be 1, a Concat of dims that must be equal, or a value given at run time that decides a "
                "shape: reduction axes out of range or named twice, a Reshape's shape of another element count, "
                "Split sizes that do not add up to the axis, a TopK k over it, a CumSum's or CumProd's axis out of "
                "range, a TensorScatter's update past its cache's end, a ConstantOfShape's negative dim, a Pad's widths "
                "that crop past its input or axes out of range, an AffineGrid's size of another batch than theta's, a "
                "Resize's negative scale or size, a Col2Im's channels or columns of another count than its block and "
                "image shapes give; "
                "or a value "
                "a Loop the host runs "
                "carries whose shape changes from one iteration to the next, which the loop keeps): "
                f"{last_line(err).strip()}") from None
        if self._sequences:
            return sequence_outputs(result, self.outputs, vm_outputs)
        record = self._run_io()
        return vm_outputs(result, record["fresh_outputs"] if record else None)

    def check_index_input(self, name: str, array: np.ndarray) -> None:
        """An :class:`InputError` where ``array``, the input ``name``, holds an index out of the range of the
        Gather it indexes (as :meth:`run` checks; nothing for an input that indexes nothing)."""
        if name in self.index_inputs and array.size:
            _check_indices(name, array, *self.index_inputs[name])


def _check_sizes_only(sizes: Mapping[str, int], sizes_only: Mapping[str, list]) -> None:
    """An :class:`InputShapeError` when a call's ``sizes`` are none a partition of a vendor that refuses other
    sizes was built for (``sizes_only``: partition -> [vendor, [sizes, ...]], the artifact's metadata)."""
    for partition, (vendor, built) in sizes_only.items():
        if any(matches(each, sizes) for each in built):
            continue
        names = list(built[0])
        given = ", ".join(f"{name}={sizes.get(name)}" for name in names)
        listed = "; ".join(", ".join(f"{name}={size}" for name, size in each.items()) for each in built)
        raise InputShapeError(
            f"{given}: partition {partition} of vendor {vendor!r} was built for {listed} only ({vendor} runs static "
            f"shapes and refuses other sizes); compile again with these sizes in specialize=", "", names[0])


def _check_indices(name: str, array: np.ndarray, extent: int, node: str) -> None:
    """An InputError for an index outside [-extent, extent), as onnxruntime's Gather gives (the host's take clips)."""
    if array.size <= 4:  # a decoder step's token: Python compares one value in a tenth of numpy's time
        if all(-extent <= value < extent for value in array.ravel().tolist()):
            return
    bad = (array < -extent) | (array >= extent)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"input {name!r} has {array[where]} at {where}, outside the range [{-extent}, {extent - 1}] "
                         f"of the Gather {node!r} it indexes (a token id past the vocabulary?)")


def _holds_c_source(module) -> bool:
    """Whether ``module`` or an import of it is C source, which only a C compiler can turn into code."""
    return module.kind == "c" or any(_holds_c_source(m) for m in module.imports)






def vm_outputs(result, fresh: Optional[Sequence[bool]] = None) -> list[np.ndarray]:
    """A Relax VM result (a tensor, a shape, a scalar, or nested tuples of them) as numpy arrays, in order.

    Each tensor is copied out (through DLPack: ``.numpy()`` costs about 15 us a
    tensor), unless ``fresh`` says the program made it in this call and returns
    it once (:mod:`byoc.host.run_io`): then the array shares its memory. A
    result may be one of the module's constants, or an input, which the caller
    must not be able to change through it.
    """
    leaves = _result_leaves(result)
    if fresh is not None and len(fresh) != len(leaves):
        fresh = None
    return [_as_array(leaf, copy=fresh is None or not fresh[k]) for k, leaf in enumerate(leaves)]


def _result_leaves(result) -> list:
    if hasattr(result, "numpy") or isinstance(result, tvm_ffi.Shape) or not hasattr(result, "__iter__"):
        return [result]
    return [leaf for item in result for leaf in _result_leaves(item)]


def _as_array(leaf, copy: bool) -> np.ndarray:
    if hasattr(leaf, "numpy"):
        try:
            array = np.from_dlpack(leaf)
        except (BufferError, RuntimeError):  # a dtype numpy takes only from TVM's own copy (bfloat16, float8)
            return np.asarray(leaf.numpy())
        return array.copy() if copy else array
    if isinstance(leaf, tvm_ffi.Shape):  # an R.Shape output (ONNX Shape): one int64 tensor
        return np.array(list(leaf), dtype=np.int64)
    return np.asarray(leaf)  # a scalar output comes back as a Python value


def _load_runtimes_for(path: Path) -> None:
    """Load the runtime library of every vendor whose modules ``path`` holds.

    A library exported by TVM stores each module's type key (e.g.
    ``byoc_json_runtime``) as text, and TVM needs that kind's loader before it
    can load the file; so the file is searched for the kinds the registered
    vendors' codegens declare. Only the runtimes found are loaded.
    """
    import mmap

    from byoc.vendor.registry import get_vendor, list_vendors
    from byoc.vendor import as_codegen

    codegens = [as_codegen(get_vendor(name).codegen) for name in list_vendors()]
    wanted = {kind.encode(): codegen for codegen in codegens for kind in codegen.module_kinds}
    if not wanted or path.stat().st_size == 0:
        return
    span = module_table_span(path)  # the kinds are there: reading it alone leaves the weights unread
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start, end = (span[0], span[0] + span[1]) if span else (0, len(data))
        needed = [codegen for kind, codegen in wanted.items() if data.find(kind, start, end) >= 0]
    for codegen in needed:
        codegen.load_runtime()


#: e_type of the ELF files that are not shared libraries (ET_DYN, 3), as the messages name them
_ELF_TYPES = {1: "an ELF object file (.o)", 2: "an ELF executable", 4: "an ELF core dump"}

#: e_machine of some machines byoc has no preset for, to name them (the presets name their own)
_ELF_MACHINES = {3: "x86 (32-bit)", 8: "MIPS", 20: "PowerPC (32-bit)", 21: "PowerPC 64", 22: "IBM Z",
                 40: "ARM", 62: "x86_64", 183: "aarch64", 243: "RISC-V"}

_EXPECTED = "byoc.load expects the .so that Artifact.export wrote"


def _elf_header(head: bytes) -> Optional[tuple[int, str, int, int]]:
    """(bits, byte order, e_type, e_machine) from an ELF file's first 20 bytes; None when they are cut short
    or the class (EI_CLASS) or byte order (EI_DATA) is not one ELF defines."""
    if len(head) < 20 or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    order = "little" if head[5] == 1 else "big"
    return 32 * head[4], order, int.from_bytes(head[16:18], order), int.from_bytes(head[18:20], order)


def _host_machine() -> Optional[tuple[int, str, int]]:
    """(bits, byte order, e_machine) of the libraries this process can load: its preset's, else its own
    executable's (None when neither says)."""
    preset = PRESETS.get(host_name())
    if preset is not None:
        return 64, preset.byte_order, preset.elf_machine
    try:
        with open("/proc/self/exe", "rb") as file:
            header = _elf_header(file.read(20))
    except OSError:
        return None
    return header and (header[0], header[1], header[3])


def check_library_file(path: Path) -> None:
    """An ArtifactLoadError unless ``path`` is an ELF shared library this machine can load.

    The header is read before TVM sees the file: the dynamic loader reports a
    library built for another machine as "cannot open shared object file: No
    such file or directory". One for another machine is an
    :class:`~byoc.errors.ArtifactTargetError` naming the target it was built for.
    """
    if not path.is_file():
        kind = "a folder, not an artifact file" if path.is_dir() else "not found"
        raise ArtifactLoadError(f"artifact {kind}: {str(path)!r}; give the .so that Artifact.export wrote")
    with open(path, "rb") as file:
        head = file.read(20)
    if head[:4] != b"\x7fELF":
        text = head.isascii() and all(c >= 32 or c in b"\t\n\r" for c in head)
        what = "empty" if not head else "a text file, not a shared library" if text else "not a shared library"
        model_hint = (" It looks like an ONNX model: compile it first, e.g. byoc.compile(path, vendors=[...])"
                      if path.suffix == ".onnx" or head[:1] == b"\x08" else "")
        raise ArtifactLoadError(f"{str(path)!r} is {what}; {_EXPECTED}.{model_hint}")
    header = _elf_header(head)
    if header is None:
        raise ArtifactLoadError(f"{str(path)!r} starts like an ELF file but its header is cut short or corrupt; "
                                f"{_EXPECTED}: copy or export it again")
    bits, order, e_type, machine = header
    if e_type != 3:  # ET_DYN
        what = _ELF_TYPES.get(e_type, f"an ELF file of type {e_type}")
        raise ArtifactLoadError(f"{str(path)!r} is {what}, not a shared library; {_EXPECTED}")
    host = _host_machine()
    if host is None or (bits, order, machine) == host:
        missing = missing_bytes(path)
        if missing:
            raise ArtifactLoadError(f"{str(path)!r} is cut short: its segments need {missing} bytes past the "
                                    f"file's end (a copy or download that stopped early); {_EXPECTED}: copy or "
                                    "export it again")
        return
    here = host_name()
    preset = next((p for p in PRESETS.values() if (64, p.byte_order, p.elf_machine) == (bits, order, machine)),
                  None)
    if preset is None:
        what = _ELF_MACHINES.get(machine, "another machine")
        raise ArtifactTargetError(
            f"{str(path)!r} is a shared library for {what} (ELF machine {machine}, {bits}-bit {order}-endian), "
            f"not for this {here} machine, so it cannot be loaded here; load it on a machine of that kind",
            target=what)
    emulated = (f"; or, to run the model here, compile it for {preset.name} (byoc.compile(model, ..., "
                f"target={preset.name!r})) and call run_emulated(inputs) on that artifact, which runs its "
                f"standalone C program under {preset.qemu}, or write that program with export_standalone(folder) "
                f"and run it under {preset.qemu} yourself") if preset.qemu else ""
    raise ArtifactTargetError(
        f"{str(path)!r} was built for {preset.name} (ELF machine {machine}, {order}-endian), not for this "
        f"{here} machine, so it cannot be loaded here: load it with byoc.load on {preset.name} hardware"
        f"{emulated}", target=preset.name)


def load_library(path: Union[str, os.PathLike], threads: Optional[int] = None):
    """The TVM runtime module of the library at ``path``, with the vendor runtimes it holds loaded first.

    ``threads`` is handed to those runtimes before they create their modules
    (:mod:`byoc.host.threads`). For tools that drive the Relax VM themselves
    (benchmarks/where_time_goes.py); :func:`load` is the way to get an :class:`Artifact`.
    """
    import tvm  # noqa: F401 - registers TVM's module type, which the library's modules are made as
    import tvm_ffi

    path = Path(path)
    check_library_file(path)
    _load_runtimes_for(path)
    set_vendor_threads(check_threads(threads))
    try:
        # Not kept for the process's whole life (tvm-ffi's default): an artifact's modules, weights included, go
        # when the last object using them does, so a process that reloads a model does not hold every load.
        library = tvm_ffi.load_module(os.path.realpath(path), keep_module_alive=False)
    except Exception as err:  # noqa: BLE001 - TVM raises several types for a file it cannot load
        first = last_line(err)
        raise ArtifactLoadError(f"cannot load {str(path)!r}: {first}") from None
    release_module_table(Path(os.path.realpath(path)))  # TVM copied out what it needs
    return library


def load(path: Union[str, os.PathLike], threads: Optional[int] = None) -> Artifact:
    """Load an artifact written by :meth:`Artifact.export` (works in a fresh process).

    ``threads``: how many threads it may use, host and vendors alike (default:
    the user's OMP_NUM_THREADS / TVM_NUM_THREADS, else the CPUs the process may
    use; see :mod:`byoc.host.threads`).
    """
    path = Path(path)
    library = load_library(path, threads)
    try:
        import tvm
        from tvm import relax

        vm = relax.VirtualMachine(library, tvm.cpu())
        metadata = json.loads(str(vm[METADATA_FUNCTION]()))
    except Exception:  # noqa: BLE001 - no such function, or not a VM library: either way not an artifact
        raise ArtifactLoadError(
            f"{str(path)!r} is a TVM library but not a byoc artifact (no {METADATA_FUNCTION}); "
            "export it with byoc"
        ) from None
    return Artifact(None, metadata, plan=None, library=library, threads=threads)

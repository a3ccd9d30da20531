"""byoc.build: run each vendor's codegen on its partitions, then build the rest with LLVM.

byoc calls the codegens itself, before TVM's ``RunCodegen``, so that a
failing codegen is reported with the vendor's name and its partitions can go
back to the host. ``RunCodegen`` then lowers the partition calls to the
modules built, through a global ``relax.ext.<name>`` that lives only while it
runs (:func:`byoc.pipeline.build.lowering.lower_partitions`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import warnings
from typing import Iterable, Mapping, Optional, Sequence, Union

from byoc._version import __version__
from byoc.pipeline.artifact.artifact import Artifact
from byoc.errors import BuildError, ByocError, CodegenError, TargetError, last_line
from byoc.vendor.graph import UnsupportedConstruct
from byoc.host.compiler import compile_host
from byoc.host.recorded import METADATA_FUNCTION, text_function
from byoc.host.threads import check_threads, set_vendor_threads
from byoc.pipeline.frontend.onnx_model import index_inputs
from byoc.pipeline.build.codegen_cache import compile_cached
from byoc.pipeline.build.lowering import lower_partitions
from byoc.pipeline.build.specialized import dispatched
from byoc.pipeline.partitioning.host_loops import run_host_loops
from byoc.pipeline.partitioning.partition_checks import Fallback
from byoc.pipeline.partitioning.partitioner import PartitionPlan, partition
from byoc.pipeline.placement.placement import DEFAULT_MIN_SPEEDUP, check_placement, place_by_measurement
from byoc.deploy.targets import TargetPreset, resolve_target
from byoc.vendor import OptionSetting, Vendor, as_codegen, runtime_memory
from byoc.vendor.csource import modules_and_blobs
from byoc.vendor.options import vendor_option_settings

_log = logging.getLogger(__name__)


def _check_c_sources(modules: list, vendor: Vendor, target: Optional[TargetPreset]) -> None:
    """Compile every C source module with the target's C compiler (syntax only).

    A codegen that emits broken C is caught here, named, while its partitions
    can still go back to the host, rather than later inside ``export_library``.
    Without the target's compiler there is nothing to check with: export will
    report the missing compiler anyway.
    """
    for module in modules:
        if getattr(module, "kind", None) != "c" or target is None:
            continue
        try:
            cc = target.compiler()
        except TargetError:
            return
        proc = subprocess.run([cc, "-fsyntax-only", "-x", "c", "-"], input=module.inspect_source(),
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if "error" in line]
            first = (errors or proc.stderr.strip().splitlines() or ["(no message)"])[0]
            raise CodegenError(
                f"the {vendor.name!r} codegen emitted C that does not compile with {cc}: {first}"
            )


def run_codegen(plan: PartitionPlan, vendor: Vendor, target: Optional[TargetPreset] = None,
                options: Optional[Mapping] = None) -> tuple[list, dict, dict]:
    """The runtime modules ``vendor``'s codegen makes for its partitions in ``plan``, what they hold, and the
    blobs its C reads (:class:`~byoc.vendor.csource.CSource`: name -> bytes, linked in at export).

    ``options`` are what the codegen's ``compile`` receives (default: the
    vendor's options resolved without the user's, :meth:`Vendor.resolve_options`).
    With ``target``, C source modules are syntax-checked with its C compiler.
    Raises :class:`CodegenError` naming the vendor when the codegen fails.
    The second result maps a partition's name to its
    :class:`~byoc.vendor.RuntimeMemory` as the vendor reports it (nothing for
    a vendor that does not, or whose report fails: a ``RuntimeWarning``).
    """
    parts = [p for p in plan.partitions if p.vendor == vendor.name]
    if not parts:
        return [], {}, {}
    if options is None:
        options = vendor.options_given()
    _log.info("%s: compiling %d partition(s)", vendor.name, len(parts))
    graphs, items = _compiled(plan, vendor, parts, options)
    modules, blobs = modules_and_blobs(items, f"the {vendor.name!r} codegen")
    _check_c_sources(modules, vendor, target)
    try:
        memory = runtime_memory(vendor.codegen, graphs, modules)
    except Exception as err:  # noqa: BLE001 - a report, not the build: the artifact is still good
        warnings.warn(f"vendor {vendor.name!r} could not report its runtime memory: {type(err).__name__}: {err}",
                      RuntimeWarning, stacklevel=3)
        memory = {}
    return modules, memory, blobs


def _compiled(plan: PartitionPlan, vendor: Vendor, parts: list, options: Mapping) -> tuple[list, list]:
    """The partition graphs of ``parts`` and the modules ``vendor``'s codegen makes of them, or a
    :class:`CodegenError` naming the vendor and the partitions."""
    failed_on = f"the {vendor.name!r} codegen failed on {', '.join(p.name for p in parts)}"
    try:
        graphs = [graph for p in parts for graph in plan.graphs(p)]
    except UnsupportedConstruct as err:
        raise CodegenError(f"vendor {vendor.name!r}: a partition holds {err}") from None
    try:
        return graphs, compile_cached(as_codegen(vendor.codegen), vendor.name, graphs, options)
    except CodegenError as err:
        raise CodegenError(f"{failed_on}: {err}") from err
    except ByocError:
        raise  # e.g. a BuildError: the vendor's runtime is not installed, which no host fallback may hide
    except Exception as err:
        raise CodegenError(f"{failed_on}: {type(err).__name__}: {err}") from err


def _failing_partitions(plan: PartitionPlan, vendor: Vendor, options: Mapping) -> list:
    """(partition, why) for each of ``vendor``'s partitions in ``plan`` that its codegen fails on alone (after it
    failed on them together)."""
    failing = []
    for part in (p for p in plan.partitions if p.vendor == vendor.name):
        try:
            _compiled(plan, vendor, [part], options)
        except CodegenError as err:
            failing.append((part, str(err)))
    return failing


def _check_vendor_targets(plan: PartitionPlan, preset: TargetPreset) -> None:
    """A TargetError when a vendor with partitions cannot run on ``preset`` (its runtime would not load there)."""
    for vendor in plan.vendors:
        if vendor.targets and preset.name not in vendor.targets and any(p.vendor == vendor.name for p in plan.partitions):
            raise TargetError(
                f"vendor {vendor.name!r} runs on {', '.join(vendor.targets)} only, not {preset.name}; build for "
                f"{vendor.targets[0]}, or leave {vendor.name!r} out of the vendors for {preset.name}"
            )


def _codegen_all(plan: PartitionPlan, target: TargetPreset, strict: bool,
                 settings: Mapping[str, Mapping[str, OptionSetting]]) -> tuple[PartitionPlan, dict, dict, dict]:
    """Run every vendor's codegen with its options (``settings``, :func:`vendor_option_settings`); a failing
    vendor's partitions go back to the host.

    Returns the (possibly re-partitioned) plan, the modules per vendor,
    what each partition's runtime holds and the blobs of every vendor's C (:func:`run_codegen`).
    With ``strict`` a failure raises its :class:`CodegenError` instead.
    """
    given_back: list[Fallback] = []  # the codegens' fallbacks; each cut works out its partition checks' afresh
    while True:
        modules, memory, blobs, failed = {}, {}, {}, None
        for vendor in plan.vendors:
            options = vendor.compile_options(settings.get(vendor.name, {}))
            try:
                modules[vendor.name], reported, own = run_codegen(plan, vendor, target, options)
                clash = sorted(set(own) & set(blobs))
                if clash:
                    raise CodegenError(f"the {vendor.name!r} codegen named a blob {clash[0]!r}, as another vendor did")
                memory.update(reported)
                blobs.update(own)
            except CodegenError as err:
                if strict:
                    raise
                failed = (vendor, err, options)
                break
        if failed is None:
            return plan, modules, memory, blobs
        vendor, err, options = failed
        failing = _failing_partitions(plan, vendor, options)
        if not failing:  # it fails on its partitions together only: all of them go back
            failing = [(p, str(err)) for p in plan.partitions if p.vendor == vendor.name]
        warnings.warn(
            f"vendor {vendor.name!r} failed on {', '.join(p.name for p, _ in failing)}, whose ops run on the host "
            f"or another vendor instead (its other partitions stay): {failing[0][1]}",
            RuntimeWarning,
            stacklevel=3,
        )
        # Cutting again with those partitions' ops kept off the vendor, the reason recorded on each op (the report's
        # line for them): the others may claim them. Each round demotes ops that were the vendor's, so this ends.
        demoted = {}
        for part, why in failing:
            reason = f"the {vendor.name} codegen failed on partition {part.name}: {why}"
            demoted.update({(vendor.name, binding): reason for binding in part.bindings})
        given_back += [Fallback(vendor.name, part.name, len(part.bindings), f"its codegen: {why}")
                       for part, why in failing]
        plan = plan.cut_again(demoted)
        plan.fallbacks = given_back + plan.fallbacks


def _metadata(plan: PartitionPlan, target: TargetPreset, memory: dict,
              settings: Mapping[str, Mapping[str, OptionSetting]]) -> str:
    built = {p.vendor for p in plan.partitions}
    refusing = {v.name: v.other_sizes == "refuse" for v in plan.vendors}
    return json.dumps(
        {
            "schema": 1,
            "byoc_version": __version__,
            "target": target.name,
            "mcpu": target.mcpu,
            # [name, shape, dtype], and "sequence" after them for a sequence of tensors
            "inputs": [_spec_row(s) for s in plan.imported.inputs],
            "outputs": [_spec_row(s) for s in plan.imported.outputs],
            # each symbolic dim of the inputs -> [min, max (null: unbounded)]
            "dims": {name: [d.min, d.max] for name, d in plan.imported.dims.items()},
            # input -> [extent, Gather node] for inputs that index a constant's Gather directly (token ids)
            "index_inputs": {name: list(v) for name, v in index_inputs(plan.imported.model).items()},
            "partitions": [[p.name, p.vendor] for p in plan.partitions],
            # partition -> [[sizes, symbol, why refused ("": compiled)], ...] for a static-shape vendor's partition
            # specialized per size (at other sizes it runs on the host)
            "specializations": {p.name: [[dict(s.sizes), s.symbol, s.refused] for s in p.specializations]
                                for p in plan.partitions if p.specializations},
            # partition -> [vendor, the sizes it was built for] where the vendor refuses calls at other sizes
            "sizes_only": {p.name: [p.vendor, [dict(s.sizes) for s in p.specializations]]
                           for p in plan.partitions if p.specializations and refusing.get(p.vendor)},
            # partition -> the ONNX nodes it holds (a loaded artifact's profile names them)
            "partition_nodes": {p.name: list(p.onnx_nodes) for p in plan.partitions},
            # host binding -> its ONNX node (a loaded artifact's profile names a host function's nodes)
            "host_nodes": {d.binding: d.node.name for d in plan.host_ops if d.node is not None},
            # partition -> [workspace bytes per call, constant bytes held, the model's constant bytes (or None),
            # device bytes (or None: no device)],
            # as its vendor's runtime reports them
            "runtime_memory": {name: [m.workspace_bytes, m.constant_bytes, m.model_constant_bytes, m.device_bytes]
                               for name, m in memory.items()},
            # vendor -> option -> {value, default, source[, note]}: the options its codegen was built with
            "vendor_options": {vendor: {name: setting.as_json() for name, setting in options.items()}
                               for vendor, options in settings.items() if vendor in built},
            # measured placement: each rule-based partition's times per place and where it went
            # (absent: the rules placed)
            **({"placement": plan.placement.as_json()} if plan.placement is not None else {}),
        },
        sort_keys=True,
    )


def _spec_row(spec) -> list:
    """A model input's or output's row of the metadata (``Artifact``'s specs read it back)."""
    return [spec.name, list(spec.shape), spec.dtype] + (["sequence"] if spec.sequence else [])


def _input_alignment(plan: PartitionPlan) -> dict[str, int]:
    """Partition symbol -> the alignment its vendor's modules need of its inputs' addresses."""
    needs = {vendor.name: as_codegen(vendor.codegen).input_alignment for vendor in plan.vendors}
    return {symbol: needs[p.vendor] for p in plan.partitions
            for symbol in [p.name, *(s.symbol for s in p.specializations)]}


def _with_metadata(mod, text: str):
    mod[METADATA_FUNCTION] = text_function(METADATA_FUNCTION, text)
    return mod


def build(
    plan_or_model: Union[PartitionPlan, object],
    vendors: Optional[Iterable] = None,
    target: Union[str, TargetPreset, None] = None,
    *,
    strict: bool = False,
    threads: Optional[int] = None,
    vendor_options: Optional[Mapping[str, Mapping[str, object]]] = None,
    **partition_options,
) -> Artifact:
    """Compile a :class:`PartitionPlan` (or a model, partitioned first) into an :class:`Artifact`.

    ``target`` defaults to the plan's target (``"x86_64"`` for a model).
    ``vendors`` is used only when a model is given (default ``["c_source"]``).
    ``partition_options`` (``min_ops``, ``keep_on_host``, ``input_shapes``)
    are passed to :func:`byoc.partition` in that case.

    When a vendor's codegen raises or emits C that does not compile, its
    partitions go back to the host (re-partitioned without it) with a
    ``RuntimeWarning`` naming the vendor and the error; ``artifact.plan``
    is then the plan actually built. With ``strict=True`` that is a
    :class:`CodegenError` instead.

    ``threads``: how many threads the artifact may use, host pool and vendor
    runtimes alike (default: the user's OMP_NUM_THREADS / TVM_NUM_THREADS,
    else the CPUs the process may use; see :mod:`byoc.host.threads`).

    ``vendor_options``: vendor name -> option name -> value, e.g.
    ``{"dnnl": {"winograd": False}}``, over the options each vendor's codegen
    declares (:attr:`byoc.vendor.Codegen.declared_options`; their defaults,
    then the Vendor's own ``options``, then these, then an option's
    environment variable when set). The codegens get them; the artifact
    keeps them (:attr:`Artifact.vendor_options`). An unknown vendor or
    option, or a bad value, is a :class:`~byoc.errors.VendorOptionError`.
    Default: the options the plan was partitioned with. Options that differ
    from those cut the plan again first, so that the rules' and partition
    checks see what the codegen gets.
    """
    check_threads(threads)

    if isinstance(plan_or_model, PartitionPlan):
        if vendors is not None or partition_options:
            raise ByocError("build() got a PartitionPlan: vendors and partition options were already applied")
        plan = plan_or_model
        preset = resolve_target(target) if target is not None else plan.target
    else:
        preset = resolve_target(target or "x86_64")
        plan = partition(plan_or_model, vendors if vendors is not None else ("c_source",), target=preset,
                         strict=strict, vendor_options=vendor_options, **partition_options)
    return _build_plan(plan, preset, strict, threads, vendor_options)


def _build_plan(plan: PartitionPlan, preset: TargetPreset, strict: bool, threads: Optional[int],
                vendor_options: Optional[Mapping], relinkable: bool = False) -> Artifact:
    """:func:`build` of a plan for ``preset``; with ``relinkable`` the artifact keeps its build's parts, so that
    :meth:`Artifact.relinked` can record other metadata without a build."""
    _check_vendor_targets(plan, preset)
    plan = _with_options(plan, vendor_options)
    settings = vendor_option_settings(plan.vendors, plan.vendor_options)
    _prepare_vendor_runtimes(plan, threads)
    plan, modules, memory, blobs = _codegen_all(plan, preset, strict, settings)
    mod = run_host_loops(lower_partitions(dispatched(plan.mod, plan.partitions), modules), plan.imported.loops)
    metadata = _metadata(plan, preset, memory, settings)
    mod = _with_metadata(mod, metadata)
    _log.info("host: compiling %d op(s) with LLVM for %s", len(plan.host_ops), preset.name)
    try:
        built = compile_host(mod, preset, _input_alignment(plan), linkable=relinkable)
    except Exception as err:  # TVM raises many error types from deep inside
        first = last_line(err)
        raise BuildError(f"TVM could not build the host program for {preset.name}: {first}") from err
    if not relinkable:
        return Artifact(built, json.loads(metadata), plan=plan, target=preset, threads=threads, blobs=blobs)
    return Artifact(built.executable(), json.loads(metadata), plan=plan, target=preset, threads=threads,
                    host_link=built, blobs=blobs)


def _with_options(plan: PartitionPlan, vendor_options: Optional[Mapping]) -> PartitionPlan:
    """``plan``, cut again when ``vendor_options`` give a vendor other options than the plan's checks saw (so that
    checks and codegen agree); the plan's own options when ``vendor_options`` is None."""
    if vendor_options is None:
        return plan
    vendor_option_settings(plan.vendors, vendor_options)  # refuses a bad option before anything is cut
    if all(plan.options_for(v) == v.options_given(vendor_options.get(v.name)) for v in plan.vendors):
        return dataclasses.replace(plan, vendor_options=dict(vendor_options))
    _log.info("cutting again: the build's vendor options differ from those the plan was checked with")
    return plan.cut_again(vendor_options=vendor_options)


def _prepare_vendor_runtimes(plan: PartitionPlan, threads: Optional[int]) -> None:
    """Load the runtimes the plan's vendors need and give them the thread count, before they create modules."""
    for vendor in plan.vendors:
        codegen = as_codegen(vendor.codegen)
        if codegen.module_kinds and any(p.vendor == vendor.name for p in plan.partitions):
            codegen.load_runtime()
    set_vendor_threads(threads)


def compile(  # noqa: A001 - the public name the product promises
    model,
    vendors: Sequence = ("c_source",),
    target: Union[str, TargetPreset] = "x86_64",
    *,
    min_ops: int = 1,
    keep_on_host: Sequence[str] = (),
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    dims: Optional[Mapping[str, object]] = None,
    strict: bool = False,
    threads: Optional[int] = None,
    vendor_options: Optional[Mapping[str, Mapping[str, object]]] = None,
    placement: str = "rules",
    min_speedup: float = DEFAULT_MIN_SPEEDUP,
    sample_inputs=None,
    specialize=None,
) -> Artifact:
    """Partition and build ``model`` in one call; ``artifact.plan`` is the plan.

    ``strict`` is as in :func:`build`: a failing codegen raises instead of
    sending its partitions back to the host; and as in :func:`byoc.partition`:
    a vendor that cannot run on ``target`` is an error instead of taking
    nothing. ``threads`` and ``vendor_options`` (e.g. ``{"dnnl": {"winograd":
    False}}``) are as in :func:`build`; the options are checked before the
    model is imported. ``input_shapes`` and ``dims`` are as in :func:`byoc.partition`: by default every
    symbolic dim stays symbolic and the one artifact runs every size. ``specialize`` names the sizes a
    static-shape vendor's partitions are compiled for (``{"batch": [1, 2, 4]}``), as in :func:`byoc.partition`.

    ``placement="measured"`` times each partition on its vendor, on the host and on every other vendor that
    takes all its ops, and keeps it on its vendor only when that is at least ``min_speedup`` times faster
    than the fastest other place (:mod:`byoc.pipeline.placement.placement`); ``artifact.plan.placement`` and
    :attr:`Artifact.placement` hold the times and decisions. It runs the model on ``sample_inputs`` (as
    :meth:`Artifact.run` takes them; default: seeded random inputs of the declared shapes).
    """
    check_placement(placement, min_speedup)
    plan = partition(model, vendors, target=target, min_ops=min_ops, keep_on_host=keep_on_host,
                     input_shapes=input_shapes, dims=dims, strict=strict, vendor_options=vendor_options,
                     specialize=specialize)
    if placement == "rules":
        return build(plan, strict=strict, threads=threads, vendor_options=vendor_options)
    return build_measured(plan, sample_inputs, min_speedup=min_speedup, strict=strict, threads=threads,
                          vendor_options=vendor_options)


def build_measured(plan: PartitionPlan, sample_inputs=None, *, min_speedup: float = DEFAULT_MIN_SPEEDUP,
                   strict: bool = False, threads: Optional[int] = None,
                   vendor_options: Optional[Mapping[str, Mapping[str, object]]] = None) -> Artifact:
    """Build ``plan`` with each partition placed by measured cost (``compile(..., placement="measured")``,
    :mod:`byoc.pipeline.placement.placement`); the other arguments are as in :func:`compile`."""
    check_placement("measured", min_speedup)

    def build_with_options(plan_or_model, vendors_of_model, relinkable=False):
        if vendors_of_model is None:  # the plan, as the rules or the measurements place it
            return _build_plan(plan_or_model, plan_or_model.target, strict, threads, vendor_options, relinkable)
        names = {v.name for v in vendors_of_model}
        options = {name: values for name, values in (vendor_options or {}).items() if name in names}
        return build(plan_or_model, vendors_of_model, plan.target, threads=threads, vendor_options=options)

    return place_by_measurement(plan, build_with_options, sample_inputs, min_speedup=min_speedup)

"""``python -m byoc.partition``: which ONNX node went where, and why.

A thin layer over the library: import, partition, estimate memory, and
optionally export a partitioned ONNX file and verify against onnxruntime;
then print the report as text, JSON, DOT or HTML.

Exit codes: 0 ok, 1 verification mismatch, 2 usage or input error. Errors
are one line (``--debug`` adds the traceback); progress goes to stderr, one
line per phase (``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Optional, Sequence

PROG = "python -m byoc.partition"
_PACKAGE = Path(__file__).resolve().parents[1]  # warnings raised from byoc's code are shown
EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """A command-line mistake; reported as one line with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line instead of argparse's usage block
        raise _UsageError(f"{message} (see --help)")


def _input_shape(text: str) -> tuple[str, list[int | str]]:
    name, sep, dims = text.partition("=")
    try:
        shape = [d.strip() if d.strip().isidentifier() else int(d) for d in dims.split(",")] if dims else []
    except ValueError:
        shape = []
    if not sep or not name or not shape:
        raise argparse.ArgumentTypeError(f"expected NAME=D1,D2,..., e.g. input=1,3,224,224; got {text!r}")
    return name, shape


def _dim(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE, NAME=MIN..MAX or NAME=..MAX, e.g. "
                                         f"sequence_length=..512; got {text!r}")
    return name.strip(), value.strip()


def _specialize(text: str) -> tuple[str, object]:
    """``batch=1,2,4`` -> ``("batch", [1, 2, 4])``; ``batch=1..4`` -> ``("batch", "1..4")`` (every size in it)."""
    name, sep, value = text.partition("=")
    sizes = [v.strip() for v in value.split(",")]
    if sep and name.strip() and len(sizes) == 1 and ".." in sizes[0]:
        return name.strip(), sizes[0]
    if not sep or not name.strip() or not all(v.isdigit() for v in sizes):
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE,SIZE,... or NAME=MIN..MAX, e.g. batch=1,2,4; "
                                         f"got {text!r}")
    return name.strip(), [int(v) for v in sizes]


def _verify_dims(text: str) -> dict[str, int]:
    """``batch=1,seq=128`` -> ``{"batch": 1, "seq": 128}``: the sizes of one --verify run."""
    sizes = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"expected NAME=SIZE[,NAME=SIZE...] with sizes >= 1, e.g. "
                                             f"batch=1,sequence_length=128; got {text!r}")
        sizes[name.strip()] = int(value)
    return sizes


def _names(text: str) -> list[str]:
    """``a,b`` -> ``["a", "b"]``: options that take several names take them comma-separated or repeated."""
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME or NAME,NAME,...; got {text!r}")
    return names


def _vendor_option(text: str) -> tuple[str, str, str]:
    """``dnnl.winograd=off`` -> ``("dnnl", "winograd", "off")``; the value is read by the option's type later."""
    key, sep, value = text.partition("=")
    vendor, dot, name = key.strip().partition(".")
    if not sep or not dot or not vendor or not name or not value.strip():
        raise argparse.ArgumentTypeError(f"expected VENDOR.OPTION=VALUE, e.g. dnnl.winograd=off; got {text!r}")
    return vendor, name.strip(), value.strip()


def _vendor_options(vendors, assignments) -> dict:
    """The ``--vendor-option`` assignments as ``vendor_options`` (vendor -> option -> value of its type)."""
    from byoc.errors import VendorOptionError

    by_name = {v.name: v for v in vendors}
    options: dict[str, dict] = {}
    for vendor, name, text in assignments:
        if vendor not in by_name:
            raise VendorOptionError(f"--vendor-option {vendor}.{name}: vendor {vendor!r} is not among the vendors "
                                    f"({', '.join(by_name)}); add it with --vendor", vendor=vendor, option=name)
        options.setdefault(vendor, {})[name] = by_name[vendor].option(name).parse(text, vendor)
    return options


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    from byoc.tools.report import FORMATS

    parser = _Parser(
        prog=PROG,
        description="Partition an ONNX model for accelerator vendors and report which node went where, "
                    "and why.",
        epilog="exit codes: 0 ok, 1 verification mismatch, 2 usage or input error",
    )
    parser.add_argument("model", nargs="?", metavar="MODEL.onnx", help="the ONNX model")
    parser.add_argument("--vendor", type=_names, action="extend", metavar="NAME[,NAME...]",
                        help="vendors in priority order, repeated or comma-separated (default: c_source); "
                             "see --list-vendors")
    parser.add_argument("--vendor-module", action="append", default=[], metavar="MODULE|FILE.py",
                        help="import this Python module (or run this file) first: a vendor it registers with "
                             "byoc.register_vendor, or defines as VENDOR, can then be named by --vendor "
                             "(repeatable)")
    parser.add_argument("--min-ops", type=int, default=1, metavar="N",
                        help="smallest number of ops a partition may have (default 1)")
    parser.add_argument("--keep-on-host", type=_names, action="extend", default=[], metavar="NODE|OPTYPE[,...]",
                        help="ONNX node names or op types that stay on the host, repeated or comma-separated")
    parser.add_argument("--target", default="x86_64", metavar="T",
                        help="x86_64, ppc64le or s390x, optionally NAME:MCPU (default x86_64); a vendor that "
                             "cannot run there offloads nothing, with that reason")
    parser.add_argument("--strict", action="store_true",
                        help="a vendor that cannot run on the target, or whose codegen fails, is an error")
    parser.add_argument("--vendor-option", type=_vendor_option, action="append", default=[],
                        metavar="VENDOR.OPTION=VALUE",
                        help="set an option a vendor declares, e.g. dnnl.winograd=off (on/off for switches; "
                             "repeatable); used by the --verify build and shown in the report when not the default")
    parser.add_argument("--input-shape", type=_input_shape, action="append", default=[],
                        metavar="NAME=D1,D2,...", help="the whole shape of an input (repeatable; optional: symbolic "
                                                       "dims stay symbolic)")
    parser.add_argument("--dim", type=_dim, action="append", default=[], metavar="NAME=SIZE|MIN..MAX|..MAX",
                        help="fix a symbolic dim (batch_size=1) or bound it (sequence_length=..512); repeatable")
    parser.add_argument("--specialize", type=_specialize, action="append", default=[],
                        metavar="NAME=SIZE,SIZE,...|MIN..MAX",
                        help="the sizes of a symbolic dim that a static-shape vendor's partitions are compiled for, "
                             "one program per size (batch=1,2,4); repeatable, one per dim: every combination")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default text)")
    parser.add_argument("-o", "--output", metavar="OUT", help="write the report to OUT instead of stdout")
    parser.add_argument("--export-onnx", metavar="OUT.onnx",
                        help="write the model with each partition as one node (domain byoc.<vendor>)")
    parser.add_argument("--verify", action="store_true",
                        help="build, run and compare every output with onnxruntime; on a mismatch, "
                             "name the partition that causes it")
    parser.add_argument("--inputs", metavar="FILE.npz",
                        help="inputs for --verify, --profile and --memory (default: random, seed 0)")
    parser.add_argument("--memory", action="store_true",
                        help="build the model, export it, load it in a fresh process and run it once: the "
                             "memory section then gives what that process gained, and what each vendor "
                             "runtime held there (weights, workspace)")
    parser.add_argument("--profile", action="store_true",
                        help="build, run and add a Time section: each partition (and its oneDNN primitives) and "
                             "host function per run")
    parser.add_argument("--runs", type=int, metavar="N", help="runs --profile times (default 10)")
    parser.add_argument("--trace", metavar="OUT.json",
                        help="with --profile: write the last run as Trace Event JSON (Perfetto, chrome://tracing)")
    parser.add_argument("--placement", choices=("rules", "measured"), default="rules",
                        help="rules: each vendor takes what its rules accept (default); measured: time each "
                             "partition on its vendor, on the host and on the other vendors, and keep it "
                             "where it is fastest (runs the model: --inputs, else random inputs)")
    parser.add_argument("--min-speedup", type=float, metavar="X",
                        help="with --placement measured: how much faster than every other place a vendor must "
                             "be to keep a partition (default 1.1)")
    parser.add_argument("--verify-dims", type=_verify_dims, action="append", default=[],
                        metavar="NAME=SIZE[,...]",
                        help="sizes of the symbolic dims for one --verify run (repeatable: one run each; default: "
                             "the upper bounds, the lower bounds and sizes drawn between)")
    parser.add_argument("--list-vendors", action="store_true",
                        help="list registered vendors (and why one cannot build here, if so) and exit")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return parser


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _check_paths(args) -> None:
    for flag, path in (("-o", args.output), ("--export-onnx", args.export_onnx)):
        if path and _same_file(path, args.model):
            raise _UsageError(f"{flag} {path!r} is the input model; refusing to overwrite it")
        if path and not Path(path).resolve().parent.is_dir():
            raise _UsageError(f"{flag} {path!r}: folder {str(Path(path).resolve().parent)!r} does not exist")
    if args.output and args.export_onnx and _same_file(args.output, args.export_onnx):
        raise _UsageError("-o and --export-onnx name the same file")
    if args.verify_dims and not args.verify:
        raise _UsageError("--verify-dims is only used with --verify")
    if args.inputs and not (args.verify or args.profile or args.memory or args.placement == "measured"):
        raise _UsageError("--inputs is only used with --verify, --profile, --memory or --placement measured")
    if args.min_speedup is not None and args.placement != "measured":
        raise _UsageError("--min-speedup is only used with --placement measured")
    if (args.trace or args.runs is not None) and not args.profile:
        raise _UsageError(f"{'--trace' if args.trace else '--runs'} is only used with --profile")
    if args.runs is not None and args.runs < 1:
        raise _UsageError(f"--runs {args.runs}: give at least 1")
    for flag, path in (("--trace", args.trace),):
        if path and _same_file(path, args.model):
            raise _UsageError(f"{flag} {path!r} is the input model; refusing to overwrite it")
    if args.inputs and args.verify_dims:
        raise _UsageError("--inputs and --verify-dims both set what --verify runs: give one")


def _check_verify_dims(runs: list, dims) -> None:
    """Each --verify-dims run names every symbolic dim of the model, and only those."""
    from byoc.pipeline.frontend.dims import sizes_problem

    for sizes in runs:
        problem = sizes_problem(sizes, list(dims))
        if problem:
            raise _UsageError(f"--verify-dims {','.join(f'{k}={v}' for k, v in sizes.items())}: {problem}; "
                              f"the model's symbolic dims are {', '.join(dims) or 'none'}")


def _import_vendor_module(module: str) -> None:
    """Import ``module`` (a dotted name, or a ``.py`` file run as a script), for the vendors it registers, and
    register the ``Vendor`` it defines as ``VENDOR`` (as an entry point ``module:VENDOR`` would publish it)."""
    import importlib
    import runpy

    from byoc.vendor import Vendor
    from byoc.vendor.registry import register_vendor

    try:
        if module.endswith(".py") or os.sep in module:
            if not Path(module).is_file():
                raise _UsageError(f"--vendor-module {module}: no such file")
            defined = runpy.run_path(module, run_name="byoc_vendor_module").get("VENDOR")
        else:
            defined = getattr(importlib.import_module(module), "VENDOR", None)
        if isinstance(defined, Vendor):
            register_vendor(defined)
    except _UsageError:
        raise
    except ModuleNotFoundError as err:
        raise _UsageError(f"--vendor-module {module}: {err} (give an importable module name, or a .py file)")
    except Exception as err:  # noqa: BLE001 - the user's module: say which and what it raised
        raise _UsageError(f"--vendor-module {module} raised {type(err).__name__}: {err}")


def _list_vendors() -> str:
    """One line per vendor: its name and description, led by why it cannot build here when it cannot."""
    from byoc.vendor.registry import get_vendor, list_vendors, vendor_availability

    names = list_vendors()
    width = max((len(n) for n in names), default=0)
    lines = []
    for name in names:
        missing = vendor_availability(name)
        note = f"(unavailable: {missing}) " if missing else ""
        lines.append(f"{name.ljust(width)}  {note}{get_vendor(name).description}".rstrip() + "\n")
    return "".join(lines)


def _run(args, say) -> int:
    from byoc.pipeline.frontend import import_model
    from byoc.tools.memory import estimate_memory
    from byoc.tools.resident import measure_resident
    from byoc.tools.onnx_export import export_onnx
    from byoc.pipeline.partitioning.partitioner import partition
    from byoc.vendor.registry import resolve_vendors
    from byoc.tools.report import build_report, render
    from byoc.deploy.targets import resolve_target
    from byoc.tools.verify import load_inputs, random_inputs, verify, verify_sizes
    from byoc.pipeline.build.builder import build, build_measured
    from byoc.vendor.options import vendor_option_settings
    from byoc.pipeline.placement.placement import DEFAULT_MIN_SPEEDUP

    for module in args.vendor_module:
        _import_vendor_module(module)
    if args.list_vendors:
        sys.stdout.write(_list_vendors())
        return EXIT_OK
    if not args.model:
        raise _UsageError("MODEL.onnx is required (or use --list-vendors)")
    _check_paths(args)
    vendors = resolve_vendors(args.vendor or ["c_source"])
    vendor_options = _vendor_options(vendors, args.vendor_option)
    settings = vendor_option_settings(vendors, vendor_options)  # checked before the model is read
    target = resolve_target(args.target)
    shapes = dict(args.input_shape)

    say(f"importing {args.model}")
    imported = import_model(args.model, input_shapes=shapes or None, dims=dict(args.dim) or None)
    say(f"partitioning for {', '.join(v.name for v in vendors)} on {target.name}")
    plan = partition(imported, vendors, target=target, min_ops=args.min_ops, keep_on_host=args.keep_on_host,
                     strict=args.strict, vendor_options=vendor_options, specialize=dict(args.specialize) or None)
    given = load_inputs(args.inputs) if args.inputs else None
    verification = artifact = time = None
    if args.placement == "measured":
        say("placement: timing each partition on its vendor, on the host and on the other vendors")
        artifact = build_measured(plan, given, min_speedup=args.min_speedup or DEFAULT_MIN_SPEEDUP,
                                  strict=args.strict, vendor_options=vendor_options)
        plan = artifact.plan

    def built(stage: str):
        """The artifact --verify and --profile run: the one measured placement built, else built now. The report
        describes it from then on: a codegen that failed on a partition sent that partition's ops back."""
        nonlocal artifact, plan
        if artifact is None:
            say(f"{stage}: building for {target.name}")
            artifact = build(plan, target=target, vendor_options=vendor_options)
            plan = artifact.plan
        return artifact

    say("planning memory")
    memory = estimate_memory(plan, target)
    if args.export_onnx:
        say(f"exporting partitioned ONNX to {args.export_onnx}")
        export_onnx(plan, args.export_onnx)
    if args.verify:
        built("verify")
        _check_verify_dims(args.verify_dims, imported.dims)
        verification = verify(plan, target, given, Path(args.inputs).name if args.inputs else None,
                              progress=say, artifact=artifact, shapes=args.verify_dims or None)
    if args.profile:
        if not target.is_host:
            raise _UsageError(f"--profile runs the model, and a {target.name} build cannot run on this machine")
        artifact = built("profile")
        runs = 10 if args.runs is None else args.runs
        say(f"profile: {runs} runs")
        inputs = given if given is not None else random_inputs(artifact.inputs, sizes=verify_sizes(imported.dims))
        profile = artifact.profile(inputs, runs=runs)
        time = profile.to_json()
        if args.trace:
            profile.to_chrome_trace(args.trace)
            say(f"wrote the trace to {args.trace}")
    if args.memory:
        if not target.is_host:
            raise _UsageError(f"--memory runs the model, and a {target.name} build cannot run on this machine")
        artifact = built("memory")
        say("memory: loading the exported model in a fresh process and running it once")
        inputs = given if given is not None else random_inputs(artifact.inputs, sizes=verify_sizes(imported.dims))
        with tempfile.TemporaryDirectory(prefix="byoc-memory-") as folder:
            resident = measure_resident(artifact.export(Path(folder) / "model.so"), inputs, threads=artifact.threads)
    if artifact is not None:  # what was built: its options, and what its vendor runtimes hold
        settings = artifact.vendor_option_settings
        memory = (memory.with_resident(artifact.plan, artifact.runtime_memory, resident) if args.memory
                  else memory.with_runtimes(artifact.plan, artifact.runtime_memory))
    used = {p.vendor for p in plan.partitions} if artifact is None else set(settings)
    report = build_report(plan, Path(args.model).name, args.target, memory.as_dict(),
                          verification.as_dict() if verification else None,
                          {vendor: options for vendor, options in settings.items() if vendor in used}, time)
    text = render(report, args.format)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        say(f"wrote {args.format} report to {args.output}")
    else:
        sys.stdout.write(text)
    if verification is not None and not verification.ok:
        named = ", ".join(verification.culprits) or "no single partition"
        print(f"{PROG}: verification failed: outputs differ from onnxruntime; caused by {named}",
              file=sys.stderr)
        return EXIT_MISMATCH
    return EXIT_OK


@contextlib.contextmanager
def _progress(shown: bool):
    """The library's progress (its INFO log records, e.g. each vendor's compile and the host's LLVM build)
    as ``byoc:`` lines on stderr while the CLI runs, unless ``--quiet``."""
    if not shown:
        yield
        return
    logger = logging.getLogger("byoc")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("byoc: %(message)s"))
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)

    def fail(message: str) -> int:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
        return EXIT_USAGE

    from byoc.errors import ByocError

    try:
        args = build_parser().parse_args(argv)
        say = (lambda _: None) if args.quiet else (lambda m: print(f"byoc: {m}", file=sys.stderr, flush=True))
        with warnings.catch_warnings(record=True) as caught, _progress(not args.quiet):
            warnings.simplefilter("always")
            try:
                return _run(args, say)
            finally:
                # byoc's own, one line each and each once (a re-partition repeats them), even with --quiet
                lines = [f"{PROG}: warning: {' '.join(str(warning.message).split())}" for warning in caught
                         if Path(warning.filename).resolve().is_relative_to(_PACKAGE)]
                for line in dict.fromkeys(lines):
                    print(line, file=sys.stderr)
    except (_UsageError, ByocError) as err:
        return fail(str(err))
    except OSError as err:  # e.g. -o into a read-only folder
        return fail(f"{err.strerror or err}: {err.filename}" if err.filename else str(err))
    except Exception as err:  # noqa: BLE001 - a bug: still one line, the traceback with --debug
        return fail(f"internal error {type(err).__name__}: {err} (rerun with --debug for the traceback)")


if __name__ == "__main__":
    sys.exit(main())

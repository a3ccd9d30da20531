"""Conformance: the ONNX backend node tests, built with TVM alone and with byoc.

Each test case shipped in the ``onnx`` package (a one-node model plus input
and expected output arrays) is

* imported with TVM's own ONNX frontend
  (``tvm.relax.frontend.onnx.from_onnx(model, keep_params_in_input=False)``),
  built with TVM's default pipeline for ``{"kind": "llvm"}`` and run: the
  *plain* column, TVM without any byoc code;
* imported with :func:`byoc.import_model`, partitioned for every registered
  vendor, built with :func:`byoc.build` and run: the *byoc* column;

* run by onnxruntime's CPU provider: the *onnxruntime* column, the peer;

and the results are compared with the case's expected outputs, at the
case's own tolerances. A case that passes plain but fails byoc is a
regression: byoc refuses or miscomputes something TVM alone handles. That
list must be empty. Cases only byoc passes are listed too, and the cases
onnxruntime passes and byoc fails are counted by op family
(:func:`family`), with the first error of each: what to close next.

Cases run in worker processes (one TVM per process) with a per-case
timeout; a worker that hangs or crashes is replaced and its case is
counted as failed for both builds.

CLI::

    python -m byoc.conformance [--subset N] [--timeout S] [--jobs J] [--match SUBSTR ...] [--families]
                               [--constant-inputs]

A case byoc runs and answers wrong, where onnxruntime answers right, is listed as WRONG: no error told the user.
``--constant-inputs`` runs the cases as real models give their ops (every input but the first a constant).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

#: A case: (name, serialized model, data sets [(inputs, outputs)], rtol, atol).
Case = tuple


#: Name prefixes of the recurrent-layer cases (LSTM, GRU, RNN), counted on their own.
RECURRENT_PREFIXES = ("test_lstm", "test_gru", "test_rnn", "test_simple_rnn")


@dataclass
class CaseResult:
    """What happened to one case. ``plain``/``byoc`` are True when outputs matched.

    ``plain`` is TVM alone (its ONNX frontend and default build), ``byoc``
    is byoc's import, partitioning and build.
    """

    name: str
    imported: bool = False  # byoc imported the model
    plain: bool = False
    byoc: bool = False
    ort: bool = False  # onnxruntime's CPU provider matched
    partitions: int = 0
    error: str = ""  # why plain (TVM alone) failed
    byoc_error: str = ""
    byoc_wrong: bool = False  # byoc ran and its outputs were wrong: no error said so
    ort_error: str = ""


@dataclass
class Summary:
    """Counts over all cases, the regressions (pass plain, fail byoc) and the byoc-only passes."""

    results: list[CaseResult] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def imported(self) -> int:
        return sum(r.imported for r in self.results)

    @property
    def passed_plain(self) -> int:
        return sum(r.plain for r in self.results)

    @property
    def passed_byoc(self) -> int:
        return sum(r.byoc for r in self.results)

    @property
    def offloaded(self) -> int:
        """Cases whose byoc build has at least one partition."""
        return sum(r.partitions > 0 for r in self.results)

    @property
    def regressions(self) -> list[CaseResult]:
        """Cases TVM alone passes and byoc fails."""
        return [r for r in self.results if r.plain and not r.byoc]

    @property
    def byoc_only(self) -> list[CaseResult]:
        """Cases byoc passes and TVM alone fails."""
        return [r for r in self.results if r.byoc and not r.plain]

    @property
    def passed_ort(self) -> int:
        return sum(r.ort for r in self.results)

    @property
    def behind_ort(self) -> list[CaseResult]:
        """Cases onnxruntime passes and byoc fails."""
        return [r for r in self.results if r.ort and not r.byoc]

    @property
    def wrong_without_error(self) -> list[CaseResult]:
        """Cases onnxruntime passes where byoc ran and answered wrong: no error said so, the worst way to fail."""
        return [r for r in self.behind_ort if r.byoc_wrong]

    def families(self) -> list[tuple[str, int, int, str]]:
        """Per op family with cases onnxruntime passes and byoc fails: (family, how many, of how many cases,
        the first such case and its error), most first."""
        total: dict[str, int] = {}
        behind: dict[str, list[CaseResult]] = {}
        for r in self.results:
            total[family(r.name)] = total.get(family(r.name), 0) + 1
        for r in self.behind_ort:
            behind.setdefault(family(r.name), []).append(r)
        rows = [(name, len(cases), total[name], f"{cases[0].name}: {cases[0].byoc_error}")
                for name, cases in behind.items()]
        return sorted(rows, key=lambda row: (-row[1], row[0]))

    @property
    def recurrent(self) -> list[CaseResult]:
        """The LSTM, GRU and RNN cases."""
        return [r for r in self.results if r.name.startswith(RECURRENT_PREFIXES)]

    def table(self) -> str:
        """The summary table, then one line per regression and per byoc-only pass."""
        recurrent = self.recurrent
        rows = [
            ("total", self.total),
            ("imported by byoc", self.imported),
            ("passed plain (TVM alone)", self.passed_plain),
            ("passed byoc", self.passed_byoc),
            ("passed onnxruntime", self.passed_ort),
            ("pass onnxruntime, fail byoc", len(self.behind_ort)),
            ("offloaded (>=1 partition)", self.offloaded),
            ("pass plain, fail byoc", len(self.regressions)),
            ("pass byoc, fail plain", len(self.byoc_only)),
            ("wrong without an error", len(self.wrong_without_error)),
            ("recurrent cases", len(recurrent)),
            ("recurrent passed byoc", sum(r.byoc for r in recurrent)),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [f"{label:<{width}}  {value:>5}" for label, value in rows]
        lines += [f"  REGRESSION {r.name}: {r.byoc_error}" for r in self.regressions]
        lines += [f"  BYOC-ONLY {r.name} (plain: {r.error})" for r in self.byoc_only]
        lines += [f"  RECURRENT FAIL {r.name}: {r.byoc_error}" for r in recurrent if not r.byoc]
        lines += [f"  WRONG {r.name}: {r.byoc_error}" for r in self.wrong_without_error]
        return "\n".join(lines)

    def family_table(self) -> str:
        """One line per op family: cases onnxruntime passes and byoc fails, of the family's cases, and the first."""
        rows = self.families()
        width = max([len(name) for name, *_ in rows] + [6])
        lines = [f"{'family':<{width}}  behind  of  first case and byoc's error"]
        lines += [f"{name:<{width}}  {count:>6}  {of:>3}  {first[:160]}" for name, count, of, first in rows]
        return "\n".join(lines)


def family(case_name: str) -> str:
    """The ONNX op a node test is named after: the longest op type whose lowercased name starts the case's name
    without ``test_`` and underscores (``test_reduce_l1_keep_dims`` -> ``ReduceL1``); the name's first word when
    none does."""
    key = case_name.removeprefix("test_").replace("_", "").lower()
    best = max((op for op in _op_names() if key.startswith(op.lower())), key=len, default=None)
    return best or case_name.removeprefix("test_").split("_")[0]


@functools.lru_cache(maxsize=1)
def _op_names() -> tuple:
    from onnx import defs

    return tuple(sorted({schema.name for schema in defs.get_all_schemas_with_history()}))


# -- collecting -------------------------------------------------------------------------
def with_constant_inputs(cases: Sequence[Case]) -> list[Case]:
    """``cases`` as real models give their ops: every input but the first a constant (axes, shapes, scales,
    weights), in the cases with more than one input and one data set; the others are left out. Exporters write
    such inputs as initializers, where ONNX's node tests feed them at run time."""
    import onnx
    from onnx import numpy_helper

    out = []
    for name, model_bytes, data, rtol, atol in cases:
        model = onnx.load_from_string(model_bytes)
        if len(model.graph.input) < 2 or len(data) != 1:
            continue
        inputs, outputs = data[0]
        if any(not hasattr(x, "dtype") or x.dtype.kind == "O" for x in inputs[1:]):  # a sequence, an optional, text
            continue
        model.graph.initializer.extend(numpy_helper.from_array(x, vi.name)
                                       for vi, x in zip(list(model.graph.input)[1:], inputs[1:]))
        del model.graph.input[1:]
        out.append((name, model.SerializeToString(), [([inputs[0]], outputs)], rtol, atol))
    return out



def collect_cases(names: Optional[Iterable[str]] = None) -> list[Case]:
    """The ONNX backend node test cases, sorted by name (optionally only ``names``)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # some case generators divide by zero on purpose
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    wanted = set(names) if names is not None else None
    out = []
    for case in sorted(cases, key=lambda c: c.name):
        if wanted is not None and case.name not in wanted:
            continue
        assert case.model is not None and case.data_sets is not None, case.name  # a node case has both
        data = [([_array(x) for x in inputs], [_array(x) for x in outputs])
                for inputs, outputs in case.data_sets]
        out.append((case.name, case.model.SerializeToString(), data, case.rtol, case.atol))
    return out


def _array(value):
    """A case's input or output as numpy (some cases store TensorProtos, e.g. CastLike)."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_array(item) for item in value]
    return value


# -- running one case (inside a worker) ------------------------------------------------------
def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[-1] if text else ''}"[:300]


def _compare(actual: Sequence, expected: Sequence, rtol: float, atol: float) -> Optional[str]:
    import numpy as np

    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(e, list) or e is None:  # a sequence (None: an empty optional)
            if e is None or a is None:
                if a is not e:
                    return f"output {index}: {'None' if a is None else 'a value'}, expected {e!r:.40}"
                continue
            if not isinstance(a, (list, tuple)):
                return f"output {index}: a {type(a).__name__}, expected a sequence of {len(e)}"
            problem = _compare(list(a), e, rtol, atol)
            if problem:
                return f"output {index}, sequence {problem}"
            continue
        e = np.asarray(e)
        a = np.asarray(a)
        if a.shape != e.shape:
            return f"output {index}: shape {a.shape}, expected {e.shape}"
        if e.dtype.kind == "V" and a.dtype == e.dtype:
            # ml_dtypes (bfloat16, float8_*): numpy compares them only through a real float type.
            a, e = a.astype(np.float32), e.astype(np.float32)
        if e.dtype.kind in "fc":
            if not np.allclose(a.astype(e.dtype), e, rtol=rtol, atol=atol, equal_nan=True):
                return f"output {index}: max abs error {np.nanmax(np.abs(a.astype(np.float64) - e)):.3g}"
        elif e.dtype.kind in "iub" and a.dtype.kind in "iubf":
            if not np.array_equal(a.astype(e.dtype), e):
                return f"output {index}: values differ"
        else:
            return f"output {index}: dtype {a.dtype}, expected {e.dtype}"
    return None


def _feed(inputs) -> list:
    """The case's inputs as VM arguments (a sequence input is a tuple of tensors)."""
    import tvm

    def convert(x):
        if isinstance(x, (list, tuple)):
            return tvm.runtime.convert([convert(item) for item in x])
        return tvm.runtime.tensor(x)

    return [convert(x) for x in inputs]


def run_plain(model_bytes: bytes, data_sets, rtol: float, atol: float) -> None:
    """TVM alone: its ONNX frontend, its default build for plain LLVM, the VM; raises on any failure."""
    import contextlib
    import io
    import warnings

    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    from byoc.pipeline.artifact.artifact import vm_outputs

    model = onnx.load_from_string(model_bytes)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        mod = from_onnx(model, keep_params_in_input=False)
        executable = tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"}))
    for inputs, expected in data_sets:
        vm = relax.VirtualMachine(executable, tvm.cpu())
        problem = _compare(vm_outputs(vm["main"](*_feed(inputs))), expected, rtol, atol)
        if problem:
            raise AssertionError(problem)


def run_ort(model_bytes: bytes, data_sets, rtol: float, atol: float) -> None:
    """onnxruntime's CPU provider, all graph optimizations on (as it deploys); raises on any failure."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for inputs, expected in data_sets:
        problem = _compare(session.run(None, dict(zip(names, inputs))), expected, rtol, atol)
        if problem:
            raise AssertionError(problem)


def run_case(case: Case, vendors: Optional[Sequence[str]] = None) -> CaseResult:
    """Run one case with TVM alone (plain), onnxruntime and byoc; any error is a failure of that column.

    ``vendors`` in priority order; default every registered vendor.
    """
    import warnings

    import numpy as np

    import byoc

    name, model_bytes, data_sets, rtol, atol = case
    result = CaseResult(name)
    try:
        run_plain(model_bytes, data_sets, rtol, atol)
        result.plain = True
    except Exception as err:  # noqa: BLE001 - any failure is a result here
        result.error = _first_line(err)
    try:
        run_ort(model_bytes, data_sets, rtol, atol)
        result.ort = True
    except Exception as err:  # noqa: BLE001
        result.ort_error = _first_line(err)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = byoc.import_model(model_bytes)
    except Exception as err:  # noqa: BLE001
        result.byoc_error = "import: " + _first_line(err)
        return result
    result.imported = True
    arrays = [[x if isinstance(x, list) or x is None else np.asarray(x) for x in inputs] for inputs, _ in data_sets]
    if any(len(inputs) != len(imported.inputs) for inputs in arrays):
        result.byoc_error = "inputs: the case feeds optional or sequence inputs the import dropped"
        return result
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # byoc.partition is a callable module, which type checkers do not see (byoc/__init__.py)
            plan = byoc.partition(imported, list(vendors) if vendors is not None else byoc.list_vendors())
            artifact = byoc.build(plan, strict=True)
        result.partitions = len(plan.partitions)
        for inputs, (_, expected) in zip(arrays, data_sets):
            problem = _compare(artifact.run(inputs), expected, rtol, atol)
            if problem:
                result.byoc_wrong = True
                raise AssertionError(problem)
        result.byoc = True
    except Exception as err:  # noqa: BLE001
        result.byoc_error = _first_line(err)
    return result


# -- the worker pool -------------------------------------------------------------------
def _worker(conn) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(run_case(*job))


class _Slot:
    """One worker process and the case it is running."""

    def __init__(self, ctx):
        self.parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.case: Optional[Case] = None
        self.started = 0.0

    def submit(self, case: Case, vendors: Optional[Sequence[str]]) -> None:
        self.case, self.started = case, time.monotonic()
        self.parent.send((case, vendors))

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.parent.send(None)
            except OSError:
                pass
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.parent.close()


def run_cases(cases: Sequence[Case], jobs: int = 2, timeout: float = 60.0, progress=None,
              vendors: Optional[Sequence[str]] = None) -> Summary:
    """Run ``cases`` in ``jobs`` worker processes; a case over ``timeout`` seconds fails.

    ``vendors`` as in :func:`run_case`.
    ``progress``, if given, is called with each :class:`CaseResult` as it finishes.
    """
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")  # TVM holds threads: never fork a process that imported it
    pending = list(reversed(cases))
    results: dict[str, CaseResult] = {}
    slots = [_Slot(ctx) for _ in range(max(1, min(jobs, len(cases))))]

    def feed(slot: _Slot) -> None:
        if pending:
            slot.submit(pending.pop(), vendors)
        else:
            slot.case = None

    def finish(result: CaseResult) -> None:
        results[result.name] = result
        if progress is not None:
            progress(result)

    for slot in slots:
        feed(slot)
    try:
        while any(s.case is not None for s in slots):
            busy = [s for s in slots if s.case is not None]
            now = time.monotonic()
            wait_for = max(0.05, min(s.started + timeout - now for s in busy))
            ready = wait([s.parent for s in busy], timeout=wait_for)
            for index, slot in enumerate(slots):
                if slot.case is None:
                    continue
                if slot.parent in ready:
                    try:
                        finish(slot.parent.recv())
                        feed(slot)
                        continue
                    except (EOFError, OSError):
                        reason = f"worker died (exit code {slot.process.exitcode})"
                elif time.monotonic() - slot.started > timeout:
                    reason = f"timeout after {timeout:g} s"
                else:
                    continue
                finish(CaseResult(slot.case[0], error=reason, byoc_error=reason))
                slot.stop(kill=True)
                slots[index] = _Slot(ctx)
                feed(slots[index])
    finally:
        for slot in slots:
            slot.stop(kill=slot.case is not None)
    return Summary([results[c[0]] for c in cases if c[0] in results])


# -- CLI ---------------------------------------------------------------------------
def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the conformance suite; exit status 1 when a case passes with TVM alone but fails byoc."""
    parser = argparse.ArgumentParser(prog="python -m byoc.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--subset", type=int, default=None,
                        help="run every k-th case so that about N cases run (deterministic)")
    parser.add_argument("--match", action="append", default=None,
                        help="only cases whose name contains this text (repeat for several)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--verbose", action="store_true", help="print every case as it finishes")
    parser.add_argument("--families", action="store_true",
                        help="also print, per op family, the cases onnxruntime passes and byoc fails")
    parser.add_argument("--constant-inputs", action="store_true",
                        help="every input but the first as a constant, as real models give axes, shapes and "
                             "scales (the cases with one input are left out)")
    parser.add_argument("--vendors", default=None,
                        help="comma-separated vendors in priority order (default: every registered vendor)")
    args = parser.parse_args(argv)
    vendors = args.vendors.split(",") if args.vendors else None

    cases = collect_cases()
    if args.constant_inputs:
        cases = with_constant_inputs(cases)
    if args.match:
        cases = [c for c in cases if any(text in c[0] for text in args.match)]
    if args.subset and args.subset < len(cases):
        step = len(cases) / args.subset
        cases = [cases[int(i * step)] for i in range(args.subset)]
    start = time.monotonic()

    def progress(result: CaseResult) -> None:
        if args.verbose:
            status = f"plain={'ok' if result.plain else 'FAIL'} byoc={'ok' if result.byoc else 'FAIL'}"
            detail = "; ".join(f"{label}: {text}" for label, text in
                               (("plain", result.error), ("byoc", result.byoc_error)) if text)
            print(f"{result.name:<60} {status} parts={result.partitions} {detail}", flush=True)

    summary = run_cases(cases, jobs=args.jobs, timeout=args.timeout, progress=progress, vendors=vendors)
    print(summary.table())
    if args.families:
        print(summary.family_table())
    print(f"({len(cases)} cases, {args.jobs} jobs, {time.monotonic() - start:.0f} s)")
    return 1 if summary.regressions else 0


if __name__ == "__main__":
    sys.exit(main())

"""Generation: prefill and per-token decode of small decoder LLMs, byoc's ``Generator`` against onnxruntime (and
onnxruntime-genai's ``og.Generator`` on its own models), each side in its own process (issue 46, item 5).

Run from the repo root with byoc's Python, after ``benchmarks/generate_models.py`` has made the models and their
catalog (its docstring says how; it needs torch and two venvs)::

    python benchmarks/generate.py                                  # every cataloged model
    python benchmarks/generate.py --models llama_hf,qwen2_genai_int4 --threads 2 --repeat 3 --steps 64
    python benchmarks/generate.py --out results/generate-2026-11-27-amd-epyc.md   # also writes the .json
    python benchmarks/generate.py --report results/generate-2026-11-27-amd-epyc.json   # the tables of a run

For each model of the catalog (``<cache>/generate/catalog.jsonl``), one fresh process per side, one side at a
time (a process never times two runtimes: their thread pools would fight for the cores):

* **byoc**: ``byoc.compile(model, vendors=["dnnl"], threads=T)`` (the compile time is reported, not part of any
  ratio), then ``byoc.Generator(artifact)`` (default bucket 64, padded cache where the model allows it).
* **onnxruntime**: a CPU session (``intra_op_num_threads=T``) and the natural greedy loop of the exported form
  (``generate_models.greedy``'s): empty past arrays at the prefill, then each step feeds the last token with the
  previous step's ``present`` outputs as the past, the mask all ones, ``position_ids`` counting on.
* **onnxruntime-genai** (``*_genai_*`` models; in ``--genai-python``, default /tmp/genaienv/bin/python):
  ``og.Model`` on the builder's folder (``intra_op_num_threads=T`` overlaid on its genai_config), greedy
  ``og.Generator`` (``do_sample=False``, ``max_length`` prompt + steps + 1, its shared past/present buffer).
  ``append_tokens`` is the prefill; ``generate_next_token`` picks a token from the logits computed so far and
  runs the model lazily on the token before, so the first call after ``append_tokens`` only picks (not timed)
  and each later call is one decode step.

Each side runs in ``--rounds`` fresh processes (default 2), interleaved (onnxruntime, byoc, genai, onnxruntime,
...): the machine's load comes in bursts, and a burst then spoils one round of a side rather than the side. A
side's decode figures are those of its round with the lowest decode median (first8, last8 and the growth from that
one round), its prefill figures the smallest round medians; the JSON keeps every round's (``rounds_*``).

In each process, after loading: the bandwidth a plain copy reaches (``np.copyto`` of a 256 MB float32 array,
best of 5, counted as STREAM counts a copy: bytes read + bytes written, per second), a **check** generation (the
catalog's 8-token prompt, ``--steps`` decode steps; its tokens and every step's last-position logits are saved,
not timed), one **warm-up** generation (the 32-token prompt, ``--steps`` steps; its wall time is reported as
``first generation``: byoc specializes its primitives per input shape there), then ``--repeat`` repetitions of:
the prefill of the 32-token prompt and of the 8-token one (each timed alone), and a generation of ``--steps``
decode steps after the 32-token prompt, each step timed. A step's latency is the median over the repetitions;
the table gives the median over all steps (``decode ms/token``), the median of the first 8 and of the last 8
(``last8 / first8``: the growth with the past, which attention's own linear cost explains only in part), and
tokens/s = 1000 / decode ms. Prompts are seeded ids from 4 up (``generate_models.prompt_ids``).

Memory-bandwidth bound: decoding reads every weight once per token, so a step takes at least
``weight_bytes / bandwidth`` (``bound ms``; ``weight_bytes`` from the catalog, the initializers as stored: packed
int4 for the int4 forms, and including the token embedding table of which a step reads one row). ``bw share`` =
bound ms / decode ms. These models are small (4 to 32 MB of weights), so much of them stays in the CPU's caches
between steps and a share above 100% is possible: it measures how close a step is to streaming its weights, not
DRAM speed.

Correctness (checked, not timed): byoc's check tokens against onnxruntime's loop's, and the largest |logit
difference| over the steps before the first differing token (later steps are fed different tokens). For the
float forms the issue asks < 1e-3; the int4 forms differ by more, because onnxruntime's MatMulNBits with
``accuracy_level`` 4 quantizes the activations to int8 before its int4 GEMM, and byoc need not: the difference is
reported as measured, next to the catalog's smallest top-2 logit gap (a runtime whose logits differ by less than
half of it draws the same tokens). For the int4 forms the onnxruntime process also runs the check generation on
a copy of the file with ``accuracy_level`` 0 (float activations), and both byoc and onnxruntime's own
``accuracy_level`` 4 run are compared with it. og.Generator's tokens are compared with onnxruntime's too (it stops early at the
end-of-sequence id; then its prefix is compared).

The tables name the CPU and its ISA class (``timing_processes.machine_class``). ``--out FILE.md`` writes the
Markdown and ``FILE.json`` every figure (default ``benchmarks/results/generate-DATE-CPU.md``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

GENAI_PYTHON = "/tmp/genaienv/bin/python"
LONG_PROMPT = 32  # the prompt the timed generations start from
COPY_BYTES = 256 << 20
EDGE = 8  # the first / last steps compared for growth
FLOAT_TOLERANCE = 1e-3


# -- worker side (each runtime in a fresh process; numpy and the runtime only) -------------------
def copy_bandwidth(nbytes: int = COPY_BYTES, tries: int = 5) -> dict:
    """GB/s of ``np.copyto`` over ``nbytes`` (best of ``tries``): read + written bytes, and read bytes only."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    best = math.inf
    for _ in range(tries):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return {"copy_gbs": 2 * nbytes / best / 1e9, "read_gbs": nbytes / best / 1e9}


class OrtLoop:
    """The exported form's own greedy loop on an onnxruntime session (generate_models.greedy's, one call at a
    time): ``prefill(prompt) -> logits``, ``step(token) -> logits`` (the last position's, ``(vocab,)``)."""

    def __init__(self, entry: dict, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(entry["path"], options, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.entry = entry
        self.dtypes = {s["name"]: np.dtype(s["dtype"]) for s in entry["inputs"]}
        self.pairs = list(zip(entry["past_inputs"], entry["present_outputs"]))
        self.logits_index = self.names.index("logits")
        self.present_index = {name: self.names.index(present) for name, present in self.pairs}

    def _call(self, ids: np.ndarray) -> np.ndarray:
        length = ids.shape[1]
        feeds = {"input_ids": ids,
                 "attention_mask": np.ones((1, self.length + length), dtype=self.dtypes["attention_mask"])}
        if self.entry["position_ids"]:
            feeds["position_ids"] = np.arange(self.length, self.length + length,
                                              dtype=self.dtypes["position_ids"])[None]
        feeds.update(self.past)
        outputs = self.session.run(self.names, feeds)
        self.past = {name: outputs[self.present_index[name]] for name, _ in self.pairs}
        self.length += length
        return outputs[self.logits_index][0, -1]

    def prefill(self, prompt: list) -> np.ndarray:
        config = self.entry["config"]
        self.past = {name: np.zeros((1, config["kv_heads"], 0, config["head_dim"]), dtype=self.dtypes[name])
                     for name, _ in self.pairs}
        self.length = 0
        return self._call(np.asarray([prompt], dtype=self.dtypes["input_ids"]))

    def step(self, token: int) -> np.ndarray:
        return self._call(np.asarray([[token]], dtype=self.dtypes["input_ids"]))


class ByocLoop:
    """byoc's Generator, one call at a time (the same interface as :class:`OrtLoop`)."""

    def __init__(self, entry: dict, threads: int):
        import byoc

        start = time.perf_counter()
        self.artifact = byoc.compile(entry["path"], vendors=["dnnl"], threads=threads)
        self.compile_s = time.perf_counter() - start
        self.generator = byoc.Generator(self.artifact)

    def prefill(self, prompt: list) -> np.ndarray:
        return np.asarray(self.generator.prefill(np.asarray([prompt])))[0]

    def step(self, token: int) -> np.ndarray:
        return np.asarray(self.generator.step(np.asarray([token])))[0]


def _generation(loop, prompt: list, steps: int, timed: bool = False, keep_logits: bool = False) -> dict:
    """Greedy: prefill ``prompt`` and ``steps`` decode steps; the tokens (steps + 1), optionally every call's logits
    and every decode step's seconds."""
    logits = loop.prefill(prompt)
    tokens, kept, times = [int(np.argmax(logits))], [], []
    if keep_logits:
        kept.append(np.asarray(logits, dtype=np.float32).copy())
    for _ in range(steps):
        start = time.perf_counter()
        logits = loop.step(tokens[-1])
        if timed:
            times.append(time.perf_counter() - start)
        tokens.append(int(np.argmax(logits)))
        if keep_logits:
            kept.append(np.asarray(logits, dtype=np.float32).copy())
    return {"tokens": tokens, "logits": kept, "times": times}


def _timed_prefill(loop, prompt: list) -> float:
    start = time.perf_counter()
    loop.prefill(prompt)
    return time.perf_counter() - start


def _measure(loop, task: dict) -> dict:
    """The check generation, the warm-up generation, then ``repeat`` x (prefill 32, prefill 8, timed generation)."""
    short, long_, steps = task["prompt"], task["long_prompt"], task["steps"]
    check = _generation(loop, short, steps, keep_logits=True)
    np.save(task["logits"], np.stack(check["logits"]))
    start = time.perf_counter()
    _generation(loop, long_, steps)
    first_generation = time.perf_counter() - start
    prefill_long, prefill_short, step_times, tokens = [], [], [], None
    for _ in range(task["repeat"]):
        prefill_long.append(_timed_prefill(loop, long_))
        prefill_short.append(_timed_prefill(loop, short))
        run = _generation(loop, long_, steps, timed=True)
        step_times.append(run["times"])
        tokens = run["tokens"]
    return {"check_tokens": check["tokens"], "timed_tokens": tokens, "first_generation_s": first_generation,
            "prefill_long_s": prefill_long, "prefill_short_s": prefill_short, "step_s": step_times}


def _work_byoc(task: dict) -> dict:
    loop = ByocLoop(task["entry"], task["threads"])
    result = {"load_s": loop.compile_s, **copy_bandwidth()}
    plan = loop.artifact.plan
    result["partitions"] = len(plan.partitions)
    result["host_op_types"] = sorted({op.node.op_type for op in plan.host_ops if op.node is not None})
    result.update(_measure(loop, task))
    result["padded"] = loop.generator.padded
    result["cache_bytes"] = loop.generator.cache_bytes
    return result


def exact_int4_copy(entry: dict, folder: Path) -> dict:
    """The entry with its file rewritten to ``folder`` with every MatMulNBits' ``accuracy_level`` 0 (onnxruntime's
    int4 GEMM on float activations, not int8-quantized ones), the external data copied."""
    import onnx

    path = Path(entry["path"])
    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attribute in node.attribute:
                if attribute.name == "accuracy_level":
                    attribute.i = 0
    folder.mkdir(parents=True, exist_ok=True)
    for data in path.parent.iterdir():
        if data != path and data.name.startswith(path.name) and not (folder / data.name).exists():
            shutil.copyfile(data, folder / data.name)  # onnxruntime refuses a link out of the model's folder
    onnx.save(model, str(folder / path.name))
    return dict(entry, path=str(folder / path.name))


def _work_ort(task: dict) -> dict:
    import onnxruntime

    start = time.perf_counter()
    loop = OrtLoop(task["entry"], task["threads"])
    result = {"load_s": time.perf_counter() - start, **copy_bandwidth(), "version": onnxruntime.__version__}
    result.update(_measure(loop, task))
    if "com.microsoft:MatMulNBits" in task["entry"].get("contrib_ops", {}):
        exact = OrtLoop(exact_int4_copy(task["entry"], Path(task["logits"] + ".exact")), task["threads"])
        check = _generation(exact, task["prompt"], task["steps"], keep_logits=True)
        np.save(task["logits"] + ".exact.npy", np.stack(check["logits"]))
        result["exact_check_tokens"] = check["tokens"]
    return result


def _work_genai(task: dict) -> dict:
    """og.Generator greedy: append_tokens is the prefill; each generate_next_token after the first runs the
    model on the token before (lazily) and picks the next."""
    import onnxruntime_genai as og

    start = time.perf_counter()
    config = og.Config(task["entry"]["folder"])
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": task["threads"]}}}}))
    model = og.Model(config)
    result = {"load_s": time.perf_counter() - start, **copy_bandwidth(), "version": og.__version__}
    steps = task["steps"]

    def generation(prompt: list, timed: bool = False, keep_logits: bool = False) -> dict:
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + steps + 1)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(np.asarray(prompt, dtype=np.int32))
        prefill = time.perf_counter() - start
        kept, times = [], []
        if keep_logits:
            kept.append(np.asarray(generator.get_logits(), dtype=np.float32).reshape(-1).copy())
        first = True
        while not generator.is_done():
            start = time.perf_counter()
            generator.generate_next_token()
            elapsed = time.perf_counter() - start
            if timed and not first:
                times.append(elapsed)
            first = False
            if keep_logits and not generator.is_done():
                kept.append(np.asarray(generator.get_logits(), dtype=np.float32).reshape(-1).copy())
        sequence = [int(t) for t in generator.get_sequence(0)]
        return {"tokens": sequence[len(prompt):], "logits": kept, "times": times, "prefill": prefill}

    check = generation(task["prompt"], keep_logits=True)
    np.save(task["logits"], np.stack(check["logits"]))
    start = time.perf_counter()
    generation(task["long_prompt"])
    result["first_generation_s"] = time.perf_counter() - start
    prefill_long, prefill_short, step_times = [], [], []
    for _ in range(task["repeat"]):
        prefill_long.append(generation(task["long_prompt"])["prefill"])
        prefill_short.append(generation(task["prompt"])["prefill"])
        run = generation(task["long_prompt"], timed=True)
        step_times.append(run["times"])
    result.update(check_tokens=check["tokens"], timed_tokens=run["tokens"], prefill_long_s=prefill_long,
                  prefill_short_s=prefill_short, step_s=step_times)
    return result


WORKERS = {"byoc": _work_byoc, "onnxruntime": _work_ort, "genai": _work_genai}


def worker_main(task_file: str) -> int:
    task = json.loads(Path(task_file).read_text())
    result = WORKERS[task["kind"]](task)
    Path(task["result"]).write_text(json.dumps(result))
    return 0


# -- parent side --------------------------------------------------------------------------------
def run_worker(task: dict, python: str, timeout: float, tmp: Path) -> dict:
    """``python generate.py --worker TASK.json`` in its own process group (killed whole on timeout)."""
    stamp = f"{task['kind']}-{time.monotonic_ns()}"
    task = dict(task, result=str(tmp / f"result-{stamp}.json"), logits=str(tmp / f"logits-{stamp}.npy"))
    task_file = tmp / f"task-{stamp}.json"
    task_file.write_text(json.dumps(task))
    proc = subprocess.Popen([python, str(Path(__file__).resolve()), "--worker", str(task_file)],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"status": "timeout", "why": f"did not finish within --timeout {timeout:.0f} s"}
    if proc.returncode != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return {"status": "error", "why": (lines[-1] if lines else f"exit code {proc.returncode}")[:400],
                "stderr": err[-3000:]}
    result = json.loads(Path(task["result"]).read_text())
    result["logits"] = np.load(task["logits"])
    if Path(task["logits"] + ".exact.npy").exists():
        result["exact_logits"] = np.load(task["logits"] + ".exact.npy")
    return dict(result, status="ok")


def _ms(seconds: list) -> float:
    return statistics.median(seconds) * 1e3


def summarize(side: dict, weight_bytes: int) -> dict:
    """A worker's timings as the table's figures (milliseconds)."""
    per_step = [statistics.median(samples) * 1e3 for samples in zip(*side["step_s"])]
    out = {"load_s": side["load_s"], "first_generation_ms": side["first_generation_s"] * 1e3,
           "prefill_long_ms": _ms(side["prefill_long_s"]), "prefill_short_ms": _ms(side["prefill_short_s"]),
           "decode_ms": statistics.median(per_step), "first8_ms": statistics.median(per_step[:EDGE]),
           "last8_ms": statistics.median(per_step[-EDGE:]), "per_step_ms": [round(t, 4) for t in per_step],
           "copy_gbs": side["copy_gbs"], "read_gbs": side["read_gbs"]}
    out["growth"] = out["last8_ms"] / out["first8_ms"]
    out["tokens_per_s"] = 1e3 / out["decode_ms"]
    out["bound_ms"] = weight_bytes / (side["copy_gbs"] * 1e9) * 1e3
    out["bw_share"] = out["bound_ms"] / out["decode_ms"]
    for key in ("partitions", "host_op_types", "padded", "cache_bytes", "version"):
        if key in side:
            out[key] = side[key]
    return out


def best_of_rounds(rounds: list) -> dict:
    """One side's figures over the rounds: the decode figures of the round whose decode median is lowest (first8,
    last8 and the growth from one round), the smallest prefill medians; every round's in ``rounds_*``."""
    best = dict(min(rounds, key=lambda r: r["decode_ms"]))
    for key in ("prefill_long_ms", "prefill_short_ms", "load_s", "first_generation_ms"):
        best[key] = min(r[key] for r in rounds)
    for key in ("decode_ms", "prefill_long_ms", "prefill_short_ms", "growth"):
        best[f"rounds_{key}"] = [round(r[key], 4) for r in rounds]
    return best


def compare(tokens: list, logits: np.ndarray, ref_tokens: list, ref_logits: np.ndarray) -> dict:
    """Tokens equal, the first differing step, and the largest |logit difference| up to it (same inputs)."""
    n = min(len(tokens), len(ref_tokens))
    differ = next((i for i in range(n) if tokens[i] != ref_tokens[i]), None)
    same_input = n if differ is None else differ + 1  # step i's logits were fed the tokens before i
    steps = min(same_input, len(logits), len(ref_logits))
    per_step = [float(np.max(np.abs(logits[i].astype(np.float64) - ref_logits[i]))) for i in range(steps)]
    return {"tokens_equal": differ is None and len(tokens) == len(ref_tokens), "compared": n,
            "first_difference": differ, "max_logit_diff": max(per_step) if per_step else None,
            "logit_diff_per_step": [float(f"{d:.3g}") for d in per_step]}


def bench_model(entry: dict, args, tmp: Path) -> dict:
    from generate_models import prompt_ids

    row = {"name": entry["name"], "arch": entry["arch"], "form": entry["form"], "loadavg_before": os.getloadavg()[0],
           "weight_bytes": entry["weight_bytes"], "min_top2_gap": entry.get("min_top2_gap")}
    task = {"entry": entry, "threads": args.threads, "repeat": args.repeat, "steps": args.steps,
            "prompt": entry.get("prompt") or prompt_ids(), "long_prompt": prompt_ids(LONG_PROMPT)}
    sides = [("onnxruntime", sys.executable), ("byoc", sys.executable)]
    if entry["form"].startswith("genai"):
        sides.append(("genai", args.genai_python))
    raw, rounds = {}, {}
    for round_ in range(args.rounds):  # sides interleaved round by round: a burst of load hits one round, not a side
        for kind, python in sides:
            if round_ and kind not in raw:
                continue  # failed in the first round
            log(f"{entry['name']}: {kind} (round {round_ + 1}) ...")
            result = run_worker(dict(task, kind=kind), python, args.timeout, tmp)
            if result["status"] != "ok":
                log(f"{entry['name']}: {kind} {result['status']}: {result['why']}\n{result.get('stderr', '')}")
                if not round_:
                    row[kind] = {"status": result["status"], "why": result["why"]}
                continue
            raw.setdefault(kind, result)  # the first round's check generation is the one compared
            rounds.setdefault(kind, []).append(summarize(result, entry["weight_bytes"]))
            last = rounds[kind][-1]
            log(f"{entry['name']}: {kind} load {result['load_s']:.1f} s, prefill32 {last['prefill_long_ms']:.2f} "
                f"ms, decode {last['decode_ms']:.3f} ms/token")
    for kind in raw:
        row[kind] = dict(best_of_rounds(rounds[kind]), status="ok")
    row["loadavg_after"] = os.getloadavg()[0]
    ort = raw.get("onnxruntime")
    for kind in ("byoc", "genai"):
        if kind in raw and ort is not None:
            row[kind]["check"] = compare(raw[kind]["check_tokens"], raw[kind]["logits"], ort["check_tokens"],
                                         ort["logits"])
            row[kind]["timed_tokens_equal"] = raw[kind]["timed_tokens"] == ort["timed_tokens"][
                :len(raw[kind]["timed_tokens"])]
    if ort is not None and "exact_logits" in ort and "byoc" in raw:
        row["byoc"]["check_accuracy_level_0"] = compare(raw["byoc"]["check_tokens"], raw["byoc"]["logits"],
                                                        ort["exact_check_tokens"], ort["exact_logits"])
        row["ort_vs_accuracy_level_0"] = compare(ort["check_tokens"], ort["logits"], ort["exact_check_tokens"],
                                                 ort["exact_logits"])
    if ort is not None:
        row["ort_agrees_with_catalog"] = ort["check_tokens"][:len(entry["ort_tokens"])] == entry["ort_tokens"]
    b, o, g = (row.get(k, {}) for k in ("byoc", "onnxruntime", "genai"))
    if b.get("status") == "ok" and o.get("status") == "ok":
        row["prefill_ratio"] = b["prefill_long_ms"] / o["prefill_long_ms"]
        row["prefill_short_ratio"] = b["prefill_short_ms"] / o["prefill_short_ms"]
        row["decode_ratio"] = b["decode_ms"] / o["decode_ms"]
    if b.get("status") == "ok" and g.get("status") == "ok":
        row["genai_decode_ratio"] = b["decode_ms"] / g["decode_ms"]
        row["genai_prefill_ratio"] = b["prefill_long_ms"] / g["prefill_long_ms"]
    return row


# -- report -----------------------------------------------------------------------------------
def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _f(value, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def geomean(values: list):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _status(side: dict) -> str | None:
    return None if not side or side.get("status") == "ok" else f"{side['status']}: {side.get('why', '')}"


def report(result: dict) -> list[str]:
    rows, meta = result["rows"], result["meta"]
    lines = [f"# Generation: byoc (dnnl) Generator vs onnxruntime / onnxruntime-genai, {meta['date']}", "",
             f"Machine: {meta['machine']}; {meta['threads']} threads per side; {meta.get('rounds', 1)} rounds of "
             f"fresh processes per side, interleaved, the best round's figures, each the median of "
             f"{meta['repeat']} repetitions; decode over {meta['steps']} steps after a {LONG_PROMPT}-token prompt; onnxruntime "
             f"{meta.get('onnxruntime', '?')}, onnxruntime-genai {meta.get('onnxruntime_genai', '?')}.",
             f"Command: `{meta['command']}`; byoc at {meta.get('git', '?')}.", ""]
    if meta.get("note"):
        lines += [meta["note"], ""]
    lines += ["| model | form | byoc prefill ms | ort prefill ms | ratio | byoc decode ms/tok | ort decode ms/tok | "
              "ratio | genai decode ms/tok | byoc/genai | byoc last8/first8 | ort last8/first8 | byoc bw share | "
              "ort bw share | tokens equal | max logit diff |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        b, o, g = (row.get(k) or {} for k in ("byoc", "onnxruntime", "genai"))
        check = b.get("check") or {}
        equal = {True: "yes", False: f"**no** (from step {check.get('first_difference')})"}.get(
            check.get("tokens_equal"), "-")
        genai_check = g.get("check") or {}
        if "tokens_equal" in genai_check:
            equal += f" (genai: {'yes' if genai_check['tokens_equal'] else 'no'})"
        problems = "; ".join(f"{k} {s}" for k, s in (("byoc", _status(b)), ("ort", _status(o)),
                                                      ("genai", _status(g))) if s)
        lines.append(
            f"| {row['arch']} | {row['form']} | {_f(b.get('prefill_long_ms'))} | {_f(o.get('prefill_long_ms'))} | "
            f"{_f(row.get('prefill_ratio'))} | {_f(b.get('decode_ms'), '.3f')} | {_f(o.get('decode_ms'), '.3f')} | "
            f"{_f(row.get('decode_ratio'))} | {_f(g.get('decode_ms'), '.3f')} | {_f(row.get('genai_decode_ratio'))} | "
            f"{_f(b.get('growth'))} | {_f(o.get('growth'))} | {_f(b.get('bw_share') and 100 * b['bw_share'], '.0f')}% | "
            f"{_f(o.get('bw_share') and 100 * o['bw_share'], '.0f')}% | {equal} | "
            f"{_f(check.get('max_logit_diff'), '.2g')} |" + (f" {problems} |" if problems else ""))
    geo = {key: geomean([r.get(key) for r in rows]) for key in
           ("prefill_ratio", "prefill_short_ratio", "decode_ratio", "genai_decode_ratio", "genai_prefill_ratio")}
    lines += ["", f"Geomean byoc / onnxruntime: prefill ({LONG_PROMPT} tokens) {_f(geo['prefill_ratio'])}x, "
              f"prefill (8 tokens) {_f(geo['prefill_short_ratio'])}x, decode {_f(geo['decode_ratio'])}x. "
              f"byoc / onnxruntime-genai on its models: decode {_f(geo['genai_decode_ratio'])}x, "
              f"prefill {_f(geo['genai_prefill_ratio'])}x.", ""]
    lines += ["## Details", "",
              "| model | side | load s | first generation ms | prefill 32 ms | prefill 8 ms | first8 ms | last8 ms | "
              "decode ms | tokens/s | copy GB/s | bound ms | bw share | tokens equal ort | max logit diff | "
              "first diff step |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for kind in ("byoc", "onnxruntime", "genai"):
            s = row.get(kind)
            if not s:
                continue
            if s.get("status") != "ok":
                lines.append(f"| {row['name']} | {kind} | {_status(s)} |" + " |" * 13)
                continue
            check = s.get("check") or {}
            equal = {True: "yes", False: "**no**"}.get(check.get("tokens_equal"), "(reference)")
            lines.append(
                f"| {row['name']} | {kind} | {_f(s['load_s'], '.1f')} | {_f(s['first_generation_ms'], '.0f')} | "
                f"{_f(s['prefill_long_ms'])} | {_f(s['prefill_short_ms'])} | {_f(s['first8_ms'], '.3f')} | "
                f"{_f(s['last8_ms'], '.3f')} | {_f(s['decode_ms'], '.3f')} | {_f(s['tokens_per_s'], '.0f')} | "
                f"{_f(s['copy_gbs'], '.1f')} | {_f(s['bound_ms'], '.3f')} | {_f(100 * s['bw_share'], '.0f')}% | "
                f"{equal} | {_f(check.get('max_logit_diff'), '.2g')} | {_f(check.get('first_difference'), 'd')} |")
    exact = [r for r in rows if r.get("ort_vs_accuracy_level_0")]
    if exact:
        lines += ["", "int4 forms against onnxruntime with MatMulNBits' `accuracy_level` set to 0 (float activations, "
                  "no int8 quantization of them; the same file otherwise), check generation:", ""]
        for r in exact:
            b, o = (r.get("byoc") or {}).get("check_accuracy_level_0") or {}, r["ort_vs_accuracy_level_0"]
            lines.append(f"- {r['name']}: byoc tokens equal {b.get('tokens_equal')}, max logit diff "
                         f"{_f(b.get('max_logit_diff'), '.2g')} (first difference at step "
                         f"{b.get('first_difference')}); onnxruntime's accuracy_level 4 against it: tokens equal "
                         f"{o['tokens_equal']}, max logit diff {_f(o.get('max_logit_diff'), '.2g')} (first difference "
                         f"at step {o.get('first_difference')})")
    lines += ["", "Weight bytes (catalog, as stored; int4 packed) and the catalog's smallest top-2 logit gap "
              "(onnxruntime's 17-token loop):", ""]
    lines += [f"- {r['name']}: {r['weight_bytes'] / 1e6:.1f} MB, min top-2 gap {_f(r.get('min_top2_gap'), '.3g')}, "
              f"1-minute load average {_f(r.get('loadavg_before'))} before, {_f(r.get('loadavg_after'))} after"
              + (f"; byoc partitions {r['byoc'].get('partitions')}, host ops "
                 f"{', '.join(r['byoc'].get('host_op_types') or []) or 'none'}, cache padded "
                 f"{r['byoc'].get('padded')}" if (r.get('byoc') or {}).get('status') == 'ok' else "")
              for r in rows]
    return lines


def _git_state() -> str:
    """The commit byoc ran from, and the files of byoc/ changed but not committed (the install is editable)."""
    def git(*args) -> str:
        done = subprocess.run(["git", *args], cwd=HERE.parent, capture_output=True, text=True)
        return done.stdout.rstrip() if done.returncode == 0 else ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--", "byoc").splitlines() if line.strip()]
    return git("rev-parse", "--short", "HEAD").strip() + (f" (uncommitted in byoc/: {', '.join(dirty)})" if dirty else "")


def _cpu_slug() -> str:
    from timing_processes import cpu_model

    words = [w for w in cpu_model().replace("(R)", "").replace("(TM)", "").split() if w.isalnum()]
    return "-".join(words[:2]).lower() or "cpu"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated catalog names (default all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="decode steps per generation")
    parser.add_argument("--rounds", type=int, default=2,
                        help="fresh processes per side, interleaved (onnxruntime, byoc, genai, onnxruntime, ...); "
                             "each figure from the best round")
    parser.add_argument("--out", type=Path, default=None,
                        help="the Markdown file (and its .json); default benchmarks/results/generate-DATE-CPU.md")
    parser.add_argument("--models-dir", type=Path, default=None, help="the catalog's folder (generate_models.py)")
    parser.add_argument("--genai-python", default=GENAI_PYTHON, help="a Python with onnxruntime-genai")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per worker")
    parser.add_argument("--note", default="", help="a line for the Markdown header")
    parser.add_argument("--report", type=Path, default=None, help="print the tables of a run's JSON and stop")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(argv[1])
    args = parse_args(argv)
    if args.report:
        print("\n".join(report(json.loads(args.report.read_text()))))
        return 0
    import generate_models
    from timing_processes import machine_class

    folder = (args.models_dir or generate_models.default_out()).expanduser()
    entries = generate_models.read_catalog(folder)
    if not entries:
        sys.exit(f"no catalog in {folder}: run benchmarks/generate_models.py first (its docstring says how)")
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in {e["name"] for e in entries}]
    if unknown:
        sys.exit(f"not in the catalog: {', '.join(unknown)} (it has {', '.join(e['name'] for e in entries)})")
    entries = [e for e in entries if not names or e["name"] in names]
    today = datetime.date.today().isoformat()
    out = args.out or HERE / "results" / f"generate-{today}-{_cpu_slug()}.md"
    if not out.is_absolute() and not out.parent.exists() and (HERE / out).parent.exists():
        out = HERE / out
    meta = {"date": today, "git": _git_state(), "machine": machine_class(), "threads": args.threads, "repeat": args.repeat,
            "steps": args.steps, "rounds": args.rounds, "command": "python benchmarks/generate.py " + shlex.join(argv), "note": args.note}
    result = {"meta": meta, "rows": []}
    machine = f"Machine: {meta['machine']}"
    log(machine)
    with tempfile.TemporaryDirectory(prefix="byoc-generate-") as tmp:
        for entry in entries:
            row = bench_model(entry, args, Path(tmp))
            result["rows"].append(row)
            for kind, key in (("onnxruntime", "onnxruntime"), ("genai", "onnxruntime_genai")):
                if (row.get(kind) or {}).get("version"):
                    meta[key] = row[kind]["version"]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
            text = "\n".join(report(result)) + "\n"
            out.write_text(text)
    print(text)
    log(f"wrote {out} and {out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

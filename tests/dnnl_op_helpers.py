"""What the tests of the dnnl vendor on single ops and small graphs share (tests/test_dnnl_ops_*.py).

Each test builds a small ONNX graph with ``models.py``'s helpers, compiles it for dnnl through
``byoc.compile(..., strict=True)`` and compares every output with onnxruntime (``_compile``); ``_rules``
names the rules that took its ops, ``_reason`` why an op stayed on the host, and ``_onednn_exec`` lists the
primitives oneDNN executes (its verbose log, from a worker process started with oneDNN's verbose log on).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from onnx import helper

import byoc
from byoc.deploy.targets import host_cpu_features

from models import const, onnxruntime_outputs, random_inputs, rng

RTOL, ATOL = 1e-4, 1e-4
#: Whether byoc's GEMV runs here (a few rows by a constant weight, runtime/gemv.h): AVX-512 by cpuid, and oneDNN
#: not held below it (ONEDNN_MAX_CPU_ISA). It is no oneDNN primitive: oneDNN's log has no matmul for it.
GEMV_RUNS = "avx512f" in host_cpu_features() and os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() not in (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2")


def _f(*shape, seed=5, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _compile(m, host_ops=(), inputs=None, scale=1.0):
    """Compile for dnnl, check which ops stayed on the host, compare every output with onnxruntime."""
    artifact = byoc.compile(m, vendors=["dnnl"], strict=True)
    assert sorted(d.op for d in artifact.plan.host_ops) == sorted(host_ops), \
        [(d.op, d.reasons) for d in artifact.plan.host_ops]
    inputs = inputs or {k: v * np.float32(scale) for k, v in random_inputs(m).items()}
    for got, want in zip(artifact.run(inputs), onnxruntime_outputs(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    return artifact


def _rules(artifact) -> set[str]:
    return {d.rule for d in artifact.plan.decisions.values() if d.rule}


def _reason(m, op):
    plan = byoc.partition(m, ["dnnl"])
    reasons = [d.reasons["dnnl"] for d in plan.host_ops if d.op == op]
    assert reasons, f"{op} went to dnnl: {plan.host_ops}"
    return reasons[0]


def _conv(x, out, cin, cout, prefix, k=3, group=1, pads=(1, 1, 1, 1), seed=1):
    """A Conv node with a bias, and its initializers."""
    w, b = _f(cout, cin // group, k, k, seed=seed, scale=0.3), _f(cout, seed=seed + 50)
    node = helper.make_node("Conv", [x, f"{prefix}_w", f"{prefix}_b"], [out], name=prefix, pads=list(pads), group=group)
    return node, [const(f"{prefix}_w", w), const(f"{prefix}_b", b)]


# A worker process per environment, with oneDNN's verbose log on, builds and runs every model the tests hand it:
# Python, TVM and byoc are imported once per environment, not once per model (about 2 s each).
_WORKER = r"""
import ctypes, json, os, sys, traceback
import numpy as np, onnx, byoc
replies = os.fdopen(os.dup(1), "w")  # fd 1, where oneDNN logs, becomes each request's log file
flush_c_stdout = ctypes.CDLL(None).fflush
for request in sys.stdin:
    model_path, shapes, log_path = json.loads(request)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log, 1)
    os.close(log)
    try:
        a = byoc.compile(onnx.load(model_path), vendors=["dnnl"], strict=True)
        x = [np.ones(s, np.float32) for s in shapes or [i.shape for i in a.inputs]]
        a.run(x)  # the first run loads the module: weights are reordered then
        flush_c_stdout(None)
        print("RUN", flush=True)
        a.run(x)
        flush_c_stdout(None)
        del a
        reply = "ok"
    except Exception:
        reply = traceback.format_exc()[-2000:]
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
"""
_workers: dict[tuple, subprocess.Popen] = {}


def _worker(env: dict) -> subprocess.Popen:
    key = tuple(sorted(env.items()))
    if key not in _workers or _workers[key].poll() is not None:
        _workers[key] = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                         env={**os.environ, "ONEDNN_VERBOSE": "1", **env})
    return _workers[key]


@atexit.register
def _stop_workers() -> None:
    for worker in _workers.values():
        worker.stdin.close()
        worker.wait(timeout=60)


def _onednn_exec(m, env=None, shapes=None) -> list[str]:
    """oneDNN's log of the primitives a second run of ``m`` (built for dnnl in a process started with ``env``)
    executes, on inputs of the model's shapes, or of ``shapes`` (where it has symbolic dims)."""
    worker = _worker(env or {})
    with tempfile.TemporaryDirectory(prefix="byoc-onednn-log-") as tmp:
        model, log = Path(tmp) / "model.onnx", Path(tmp) / "log"
        model.write_bytes(m.SerializeToString())
        worker.stdin.write(json.dumps([str(model), shapes, str(log)]) + "\n")
        worker.stdin.flush()
        ready, _, _ = select.select([worker.stdout], [], [], 300)  # a hang fails the test; no timing assertion
        reply = json.loads(worker.stdout.readline() or '"the worker exited"') if ready else "no reply in 300 s"
        assert reply == "ok", reply
        return [line for line in log.read_text().split("RUN\n", 1)[1].splitlines() if ",exec," in line]


# -- activations as exporters spell them --------------------------------------------------------
def _activation_nodes(kind, x, out, p="act"):
    """ONNX nodes for an activation; HardSwish also spelled x * HardSigmoid(x), swish as x * Sigmoid(x)."""
    if kind == "hardsigmoid":
        return [helper.make_node("HardSigmoid", [x], [out], name=f"{p}_hs", alpha=0.2, beta=0.5)]
    if kind == "hardswish":
        return [helper.make_node("HardSwish", [x], [out], name=f"{p}_hsw")]
    if kind == "hardswish_hardsigmoid":
        return [helper.make_node("HardSigmoid", [x], [f"{p}_g"], name=f"{p}_hs", alpha=1 / 6, beta=0.5),
                helper.make_node("Mul", [x, f"{p}_g"], [out], name=f"{p}_mul")]
    if kind == "swish":
        return [helper.make_node("Sigmoid", [x], [f"{p}_s"], name=f"{p}_sig"),
                helper.make_node("Mul", [x, f"{p}_s"], [out], name=f"{p}_mul")]
    if kind == "swish_reversed":
        return [helper.make_node("Sigmoid", [x], [f"{p}_s"], name=f"{p}_sig"),
                helper.make_node("Mul", [f"{p}_s", x], [out], name=f"{p}_mul")]
    raise ValueError(kind)


ACTIVATIONS = ["hardsigmoid", "hardswish", "hardswish_hardsigmoid", "swish", "swish_reversed"]


def _gelu_tanh_nodes(spelling, x, out):
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + c * x^3))) as exporters spell it; c = 0.044715 (or ``wrong``)."""
    c = 0.04 if spelling == "wrong" else 0.044715
    n = helper.make_node
    scalars = [const(name, np.array(v, np.float32)) for name, v in
               (("c", c), ("k", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5), ("three", 3.0))]
    if spelling in ("keras", "wrong"):  # tf2onnx: c * x, * x, * x, + x, * k, tanh, + 1, * 0.5, * x
        nodes = [n("Mul", ["c", x], ["g1"]), n("Mul", [x, "g1"], ["g2"]), n("Mul", [x, "g2"], ["g3"]),
                 n("Add", [x, "g3"], ["g4"]), n("Mul", ["g4", "k"], ["g5"]), n("Tanh", ["g5"], ["g6"]),
                 n("Add", ["g6", "one"], ["g7"]), n("Mul", ["g7", "half"], ["g8"]), n("Mul", [x, "g8"], [out])]
    else:  # torch: pow(x, 3), and x * 0.5 first
        nodes = [n("Mul", [x, "half"], ["h"]), n("Pow", [x, "three"], ["g1"]), n("Mul", ["g1", "c"], ["g2"]),
                 n("Add", [x, "g2"], ["g3"]), n("Mul", ["g3", "k"], ["g4"]), n("Tanh", ["g4"], ["g5"]),
                 n("Add", ["g5", "one"], ["g6"]), n("Mul", ["h", "g6"], [out])]
    return nodes, scalars

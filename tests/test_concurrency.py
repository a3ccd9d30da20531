"""One artifact run from 8 threads at once gives the right answers (c_source and json_runtime).

The first runs race on loading the library; later runs share it, each
thread with its own VM.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import byoc

from models import onnxruntime_outputs, random_inputs, small_cnn, small_mlp

THREADS = 8
ROUNDS = 6


@pytest.mark.parametrize("vendor", ["c_source", "json_runtime"])
@pytest.mark.parametrize("make", [small_cnn, small_mlp], ids=["cnn", "mlp"])
def test_eight_threads_one_artifact(vendor, make):
    m = make()
    artifact = byoc.compile(m, vendors=[vendor])  # not run yet: threads race on the first load
    assert {p.vendor for p in artifact.plan.partitions} == {vendor}
    feeds = [random_inputs(m, seed=100 + i) for i in range(THREADS * ROUNDS)]
    expected = [onnxruntime_outputs(m, f) for f in feeds]
    start = threading.Barrier(THREADS)

    def work(thread: int):
        start.wait()
        results = []
        for k in range(thread, len(feeds), THREADS):
            results.append((k, artifact.run(feeds[k])))
        return results

    with ThreadPoolExecutor(THREADS) as pool:
        done = [r for chunk in pool.map(work, range(THREADS)) for r in chunk]
    assert sorted(k for k, _ in done) == list(range(len(feeds)))
    for k, outputs in done:
        for actual, want in zip(outputs, expected[k]):
            np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5)


def test_threads_on_a_loaded_artifact(tmp_path):
    m = small_cnn()
    path = byoc.compile(m, vendors=["c_source", "json_runtime"]).export(tmp_path / "m.so")
    loaded = byoc.load(path)
    feeds = [random_inputs(m, seed=i) for i in range(THREADS * 2)]
    with ThreadPoolExecutor(THREADS) as pool:
        outputs = list(pool.map(loaded.run, feeds))
    for f, out in zip(feeds, outputs):
        np.testing.assert_allclose(out[0], onnxruntime_outputs(m, f)[0], rtol=1e-4, atol=1e-5)


def test_two_threads_compile_at_once():
    """Two threads compiling at once both get a working artifact, and the process's stdout is its own after: TVM's
    importer and the silencing around it (sys.stdout, warning filters) are process-wide, so imports take turns.
    Without that, one thread's compile failed in TVM's Gemm converter (AssertionError)."""
    import sys

    stdout = sys.stdout
    models = [small_cnn(), small_mlp()]
    start = threading.Barrier(len(models))

    def compile_one(m):
        start.wait()
        return byoc.compile(m, vendors=["c_source"])

    with ThreadPoolExecutor(len(models)) as pool:
        artifacts = list(pool.map(compile_one, models))
    assert sys.stdout is stdout
    for m, artifact in zip(models, artifacts):
        feed = random_inputs(m, seed=3)
        for got, want in zip(artifact.run(feed), onnxruntime_outputs(m, feed)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

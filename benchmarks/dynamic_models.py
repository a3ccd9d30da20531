"""Models with symbolic input dims: seeded random weights, exported to ONNX, a JSON catalog line each.

Run it with a Python that has torch, not byoc's own environment (byoc itself never needs torch;
this script only writes the ONNX files byoc then reads). A separate venv that sees the system's
packages (onnx, onnxruntime, numpy) keeps torch out of the test environment::

    python -m venv --system-site-packages /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0            # the CPU wheel in /opt/wheels
    /tmp/torchenv/bin/pip install --no-deps torchvision==0.28.0   # the release made for torch 2.13
    /tmp/torchenv/bin/pip install pillow transformers onnxscript   # onnxscript: the dynamo exporter
    /tmp/torchenv/bin/python benchmarks/dynamic_models.py [--out DIR] [--force] [NAME ...]

Each model is written once to ``DIR/<name>.onnx`` (default ``$BYOC_MODEL_CACHE/dynamic``, else
``~/.cache/byoc-models/dynamic``) and reused after (``--force`` exports again). Every run then
checks each model with onnxruntime at each of its test shapes, against the torch module where
there is one, and prints one JSON line per model on stdout::

    {"name", "path", "description", "opset", "bytes", "verified",
     "inputs": [{"name", "dtype", "dims", "test_shapes"}], "test_dims"}

``dims`` is the input's shape as written in the ONNX file: an int for a fixed dim, the
``dim_param`` string for a symbolic one (null for a dim with neither). ``test_dims`` lists the
model's test runs, each a dict ``dim name -> size`` binding every symbolic dim of the model;
an input's ``test_shapes`` are the same runs restricted to its own symbolic dims (entry i of
every input belongs to run i). Notes, skips and failures go to stderr: one ``FAIL <model>: ...``
line per failed check (exit code 1), one ``SKIP <model>: ...`` line per model that could not be
made here (transformers, torchvision or onnxscript missing, the dynamo exporter failing, PP-OCR
when its wheel cannot be fetched). Without torch the script stops with a usage error, unless
``ppocr_rec_dyn`` is the only model named.

The models:

* ``bert_tiny_dyn``: transformers' BertModel (hidden 128, 2 layers, 2 heads, FFN 512, vocab 1000,
  eager attention), legacy TorchScript exporter at opset 17 with the Hugging Face exporter's
  dynamic axes: ``input_ids`` and ``attention_mask`` (int64) are ``[batch_size, sequence_length]``.
* ``bert_tiny_dynamo``: the same module through the dynamo exporter (``torch.export`` with
  ``Dim("batch_size")``, ``Dim("sequence_length")``) at opset 18, the exporter's own; asked for
  17 it converts with onnx's C API, which leaves ``unk__N`` dims in the value infos.
* ``resnet_dyn``: torchvision resnet18, ``input`` ``[batch, 3, height, width]``, opset 17 legacy.
* ``mobilenetv2_dyn``: torchvision mobilenet_v2, ``input`` ``[batch, 3, 224, 224]``, opset 17 legacy.
* ``audio_conv_dyn``: a wav2vec2-style feature encoder (7 Conv1d, GroupNorm on the first, GELU,
  LayerNorm + Linear projection, mean over time, Linear head) on ``input_values`` ``[1, samples]``;
  its outputs are ``logits`` ``[1, 12]`` and ``hidden_states`` ``[1, frames, 96]``.
* ``ppocr_rec_dyn``: the cached PP-OCRv4 recognizer of benchmarks/real_models.py (rapidocr), whose
  ``x`` is ``[p2o.DynamicDimension.0, 3, ?, p2o.DynamicDimension.1]`` (``?`` is a dim_param named
  "?"): tested at height 48 and widths 160, 320, 480. It is listed only while its width is free.

Issue 33's modern architectures, nobody's tuning target: one test shape each (a benchmark builds one
static artifact), batch symbolic, random BatchNorm statistics like the models above.

* ``regnet_y_400mf``: torchvision regnet_y_400mf, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``regnet_y_400mf_dynamo``: the same, dynamo exporter, opset 18, ``input`` ``[batch, 3, 224, 224]``.
* ``lraspp_mobilenet_v3``: torchvision lraspp_mobilenet_v3_large (``weights_backbone=None``), legacy exporter,
  opset 17, ``input`` ``[batch, 3, 512, 512]``; its output is ``out`` (21 classes at 512x512).
* ``convnext_tiny``: torchvision convnext_tiny, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``convnext_tiny_dynamo``: the same, dynamo exporter, opset 18, ``input`` ``[batch, 3, 224, 224]``.
* ``swin_t``: torchvision swin_t, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``swin_t_dynamo``: the same, dynamo exporter, opset 18, ``input`` ``[batch, 3, 224, 224]``.
* ``efficientnet_b0``: torchvision efficientnet_b0, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``gpt2_small``: transformers' GPT2LMHeadModel, default config (12 layers, 768, 12 heads, vocab 50257), eager
  attention, no KV cache, ``logits`` only; legacy exporter, opset 17, ``input_ids`` and ``attention_mask``
  (int64) ``[batch_size, sequence_length]``; tested at 1 x 64.
* ``bert_base``: BertModel at bert-base's size (12 layers, 768, 12 heads, FFN 3072, vocab 30522), legacy
  exporter, opset 17, ``input_ids`` and ``attention_mask`` (int64) ``[batch_size, sequence_length]``; 1 x 128.
* ``bert_base_dynamo``: the same module, dynamo exporter, opset 18, same inputs and test shape.
* ``vit_base``: transformers' ViTModel, default config (224, patch 16, 12 layers, 768), legacy exporter,
  opset 17, ``pixel_values`` ``[batch_size, 3, 224, 224]``; tested at batch 1.
* ``distilbert``: DistilBertModel, default config (6 layers, 768, 12 heads, vocab 30522), legacy exporter,
  opset 17, ``input_ids`` and ``attention_mask`` (int64) ``[batch_size, sequence_length]``; 1 x 128.

The held-out set added 2026-11-26, architectures nobody had tuned byoc for: the same rules (one test shape,
batch symbolic, random BatchNorm statistics, transformers' models in eager attention).

* ``resnet50_dynamo``: torchvision resnet50, dynamo exporter, opset 18, ``input`` ``[batch, 3, 224, 224]``.
* ``mobilenet_v3_large_dynamo``: torchvision mobilenet_v3_large, dynamo exporter, opset 18, ``input``
  ``[batch, 3, 224, 224]``.
* ``densenet121``: torchvision densenet121, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``shufflenet_v2_dynamo``: torchvision shufflenet_v2_x1_0, dynamo exporter, opset 18, ``input``
  ``[batch, 3, 224, 224]``.
* ``swin_v2_t``: torchvision swin_v2_t, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``maxvit_t``: torchvision maxvit_t, legacy exporter, opset 17, ``input`` ``[batch, 3, 224, 224]``.
* ``roberta_base``: RobertaModel at roberta-base's size (12 layers, 768, 12 heads, FFN 3072, vocab 50265, 514
  positions), legacy exporter, opset 17, ``input_ids`` and ``attention_mask`` (int64) ``[batch_size,
  sequence_length]``; 1 x 128.
* ``albert_base``: AlbertModel at albert-base's size (12 layers sharing one, 768, 12 heads, FFN 3072, embeddings
  128, vocab 30000), legacy exporter, opset 17, same inputs; 1 x 128.
* ``t5_small_encoder``: T5EncoderModel at t5-small's size (6 layers, 512, 8 heads, FFN 2048, vocab 32128), legacy
  exporter, opset 17, same inputs; 1 x 128.
* ``whisper_tiny_encoder``: the encoder of a WhisperModel at whisper-tiny's size (4 layers, 384, 6 heads, FFN 1536),
  legacy exporter, opset 17, ``input_features`` ``[batch_size, 80, 3000]`` (the encoder takes 30 s only);
  its output is ``last_hidden_state`` ``[batch_size, 1500, 384]``; tested at batch 1.
* ``wav2vec2_base``: Wav2Vec2Model, default config (wav2vec2-base: 7 Conv1d, 12 layers, 768, 12 heads), legacy
  exporter, opset 17, ``input_values`` ``[batch_size, samples]``; its output is ``last_hidden_state``
  ``[batch_size, frames, 768]``; tested at 1 x 16000 (exported at 2 x 12000).
* ``llama_small``: LlamaForCausalLM (8 layers, 512, 8 heads, 2 KV heads, FFN 1408, vocab 32000), no KV cache,
  ``logits`` only; legacy exporter, opset 17, ``input_ids`` and ``attention_mask`` (int64) ``[batch_size,
  sequence_length]``; tested at 1 x 64.
* ``mobilevit_small``: MobileViTModel, default config (mobilevit-small: 256, hidden 144/192/240), legacy exporter,
  opset 17, ``pixel_values`` ``[batch_size, 3, 256, 256]``; tested at batch 1.
* ``opt_125m``: OPTForCausalLM, default config (opt-125m: 12 layers, 768, 12 heads, vocab 50272), no KV cache,
  ``logits`` only; legacy exporter, opset 17, ``input_ids`` and ``attention_mask`` (int64) ``[batch_size,
  sequence_length]``; tested at 1 x 64.

The transformer models take the Hugging Face exporter's dynamic axes, through the legacy exporter:
that exporter (optimum-onnx 0.1.0, the latest) requires transformers < 4.58 and does not import with
transformers 5 (``transformers.modeling_utils.get_parameter_dtype`` is gone).

torchvision's wheels on PyPI are CUDA builds: their C extension does not load next to the CPU
torch, and torchvision 0.28's ``_meta_registrations`` then fails on ``torchvision::nms``. The
models used here are plain Python; ``_torchvision_ops_stub`` defines the two op schemas it needs
before anything imports torchvision (transformers does too), so the import succeeds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from real_models_catalog import FetchError, default_cache  # noqa: E402
from real_models_catalog import model_path as real_model_path  # noqa: E402

SEED = 20261125
OPSET = 17
DYNAMO_OPSET = 18  # the dynamo exporter's lowest own opset

BERT_CONFIG = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=512, max_position_embeddings=512)
BERT_DIMS = [{"batch_size": 1, "sequence_length": 16}, {"batch_size": 1, "sequence_length": 64},
             {"batch_size": 2, "sequence_length": 32}, {"batch_size": 4, "sequence_length": 128}]
TEXT_AXES = {0: "batch_size", 1: "sequence_length"}
BERT_OUTPUTS = {"last_hidden_state": TEXT_AXES, "pooler_output": {0: "batch_size"}}  # output -> its dynamic axes
BERT_BASE_CONFIG = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, max_position_embeddings=512)
PPOCR_DIMS = [{"p2o.DynamicDimension.0": 1, "?": 48, "p2o.DynamicDimension.1": 160},
              {"p2o.DynamicDimension.0": 1, "?": 48, "p2o.DynamicDimension.1": 320},
              {"p2o.DynamicDimension.0": 1, "?": 48, "p2o.DynamicDimension.1": 480},
              {"p2o.DynamicDimension.0": 2, "?": 48, "p2o.DynamicDimension.1": 320}]
PPOCR_WIDTH_AXIS = 3


def default_out() -> Path:
    return default_cache() / "dynamic"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- torch (imported lazily, inside the builders) -------------------------------------------
_STUB_LIBRARY = None  # the Library holding the stub schemas: it must stay alive


def _torchvision_ops_stub() -> None:
    """Defines ``torchvision::nms`` and ``qnms`` when torchvision's C extension cannot load (see the docstring)."""
    global _STUB_LIBRARY
    import torch

    spec = importlib.util.find_spec("torchvision")
    if _STUB_LIBRARY is not None or spec is None or not spec.submodule_search_locations:
        return
    folder = Path(list(spec.submodule_search_locations)[0])
    for lib in sorted(folder.glob("_C*.so")):
        try:
            torch.ops.load_library(str(lib))  # what torchvision.extension does first
            return
        except (ImportError, OSError):
            pass
    _STUB_LIBRARY = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _STUB_LIBRARY.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    log("note: torchvision's C extension does not load with this torch (a CUDA build?); "
        "its nms/qnms schemas are stubbed, the models need none of its ops")


def _seeded():
    import torch

    _torchvision_ops_stub()
    torch.manual_seed(SEED)
    return torch


def _random_bn_stats(module) -> None:
    """Random BatchNorm statistics, so folding them into the convs is not a no-op."""
    import torch

    for m in module.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)


def hf_module(model_class: str, config: dict, outputs: tuple, inputs: tuple = ("input_ids", "attention_mask"),
              part: str | None = None):
    """A transformers model (seeded random weights, eager attention) whose forward returns ``outputs``.

    Keyword call and a tuple out: transformers 5's forward, called positionally while tracing, fails
    ("got multiple values for argument 'use_cache'"). ``inputs``: ``input_ids`` and ``attention_mask``,
    or one of ``pixel_values``, ``input_values``, ``input_features``. ``part``: the attribute of the model
    to export instead of all of it (``encoder``). BatchNorm statistics are random, as in torchvision_module.
    """
    torch = _seeded()
    import transformers

    cls = getattr(transformers, model_class)
    hf = cls(cls.config_class(**config, attn_implementation="eager")).eval()
    if part is not None:
        hf = getattr(hf, part)
    _random_bn_stats(hf)

    class Text(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = hf

        def run(self, **inputs):
            out = self.model(**inputs, return_dict=True)
            return tuple(out[name] for name in outputs)

        def forward(self, input_ids, attention_mask):
            return self.run(input_ids=input_ids, attention_mask=attention_mask)

    class Image(Text):
        def forward(self, pixel_values):
            return self.run(pixel_values=pixel_values)

    class Audio(Text):
        def forward(self, input_values):
            return self.run(input_values=input_values)

    class Features(Text):
        def forward(self, input_features):
            return self.run(input_features=input_features)

    single = {"pixel_values": Image, "input_values": Audio, "input_features": Features}
    return (single[inputs[0]] if len(inputs) == 1 else Text)().eval()


def torchvision_module(name: str, **kwargs):
    """``torchvision.models.get_model(name)``, random weights and BatchNorm statistics."""
    _seeded()
    import torchvision

    module = torchvision.models.get_model(name, weights=None, **kwargs).eval()
    _random_bn_stats(module)
    return module


def audio_module(channels: int = 64, hidden: int = 96, classes: int = 12):
    _seeded()
    from torch import nn

    class AudioConv(nn.Module):
        """wav2vec2's feature encoder, narrower: 400-sample receptive field, 320-sample hop."""

        def __init__(self):
            super().__init__()
            layers, cin = [], 1
            for i, (k, s) in enumerate(((10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2))):
                conv = [nn.Conv1d(cin, channels, k, s, bias=False)]
                if i == 0:
                    conv.append(nn.GroupNorm(channels, channels))
                layers.append(nn.Sequential(*conv, nn.GELU()))
                cin = channels
            self.features = nn.Sequential(*layers)
            self.norm = nn.LayerNorm(channels)
            self.proj = nn.Linear(channels, hidden)
            self.head = nn.Linear(hidden, classes)

        def forward(self, input_values):
            frames = self.features(input_values.unsqueeze(1)).transpose(1, 2)  # (batch, frames, channels)
            hidden_states = self.proj(self.norm(frames))
            return self.head(hidden_states.mean(dim=1)), hidden_states

    return AudioConv().eval()


# -- exporting ---------------------------------------------------------------------------
def _example(dims: dict, shapes: dict, dtypes: dict):
    """Torch example inputs at ``dims`` for inputs of the given ONNX-style shapes."""
    import torch

    feeds = _feeds({name: [dims.get(d, d) for d in shape] for name, shape in shapes.items()}, dtypes,
                   np.random.default_rng(SEED))
    return tuple(torch.from_numpy(array) for array in feeds.values())


@contextlib.contextmanager
def _quiet_export():
    """Exporter chatter (progress lines on stdout, tracer and deprecation warnings) off stdout."""
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def export_legacy(module, example: tuple, path: Path, inputs: list, outputs: list, axes: dict) -> None:
    import torch

    with _quiet_export(), torch.no_grad():
        torch.onnx.export(module, example, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes, do_constant_folding=True)


def export_dynamo(module, example: tuple, path: Path, inputs: list, outputs: list, axes: dict) -> None:
    import torch

    dims: dict = {}  # positional: forward's parameters need not carry the ONNX input names (torchvision's is x)
    dynamic_shapes = tuple({axis: dims.setdefault(dim, torch.export.Dim(dim)) for axis, dim in axes[name].items()}
                           for name in inputs)
    with _quiet_export(), torch.no_grad():
        torch.onnx.export(module, example, str(path), dynamo=True, opset_version=DYNAMO_OPSET, input_names=inputs,
                          output_names=outputs, dynamic_shapes=dynamic_shapes, external_data=False, verbose=False)


# -- the models --------------------------------------------------------------------------
@dataclass(frozen=True)
class DynModel:
    """A model with symbolic dims: how to make its torch module and export it, or where its file is."""

    name: str
    description: str
    test_dims: list  # one dict dim name -> size per test run
    module: Callable | None = None  # () -> torch module; None: a model fetched as published
    exporter: Callable | None = None  # export_legacy | export_dynamo
    inputs: dict = field(default_factory=dict)  # input name -> ONNX-style shape (ints and dim names)
    dtypes: dict = field(default_factory=dict)  # input name -> numpy dtype name
    outputs: list = field(default_factory=list)
    axes: dict = field(default_factory=dict)  # name -> {axis: dim name}, inputs and outputs
    example: dict = field(default_factory=dict)  # the export's example dims: away from 1, which gets specialized
    needs: tuple = ()  # modules besides torch (and onnxscript, which build adds for the dynamo exporter)


BERT_INPUTS = {"input_ids": ["batch_size", "sequence_length"], "attention_mask": ["batch_size", "sequence_length"]}
TORCHVISION = ("torchvision", "PIL")
IMAGE_DIMS = [{"batch": 1, "height": 224, "width": 224}, {"batch": 2, "height": 160, "width": 160},
              {"batch": 1, "height": 256, "width": 192}]
LEGACY, DYNAMO = "TorchScript exporter, opset 17", "dynamo exporter (torch.export), opset 18"
HF_AXES = "the Hugging Face exporter's dynamic axes (optimum-onnx 0.1.0 needs transformers < 4.58)"


def _hf(model_class: str, config: dict, outputs: dict, test_dims: list, image: bool = False, inputs: dict | None = None,
        example: dict | None = None, part: str | None = None) -> dict:
    """DynModel fields of a transformers model: ``outputs`` maps each output to its dynamic axes.

    ``inputs``: one float input's ONNX-style shape (default ``input_ids`` and ``attention_mask``, or with
    ``image`` ``pixel_values`` at 224x224); ``example``: the export's example dims (default batch 2, sequence 16).
    """
    if image:
        inputs = {"pixel_values": ["batch_size", 3, 224, 224]}
    if inputs is None:
        inputs, dtypes = BERT_INPUTS, {"input_ids": "int64", "attention_mask": "int64"}
    else:
        dtypes = dict.fromkeys(inputs, "float32")
    axes = {name: {i: d for i, d in enumerate(shape) if isinstance(d, str)} for name, shape in inputs.items()}
    return dict(module=partial(hf_module, model_class, config, tuple(outputs), tuple(inputs), part), inputs=inputs,
                dtypes=dtypes, outputs=list(outputs), axes={**axes, **outputs},
                example=example or {"batch_size": 2, "sequence_length": 16}, test_dims=test_dims,
                needs=("transformers",))


def _vision(name: str, constructor: str, size: int = 224, exporter=export_legacy, output: str = "output",
            **kwargs) -> DynModel:
    """torchvision's ``constructor`` on ``input`` ``[batch, 3, size, size]``, tested at batch 1."""
    return DynModel(name, f"torchvision {constructor}, dynamic batch, {size}x{size}, "
                    f"{LEGACY if exporter is export_legacy else DYNAMO}", [{"batch": 1}],
                    partial(torchvision_module, constructor, **kwargs), exporter, {"input": ["batch", 3, size, size]},
                    {"input": "float32"}, [output], {"input": {0: "batch"}, output: {0: "batch"}}, {"batch": 2},
                    TORCHVISION)


BERT = _hf("BertModel", BERT_CONFIG, BERT_OUTPUTS, BERT_DIMS)
BERT_BASE = _hf("BertModel", BERT_BASE_CONFIG, BERT_OUTPUTS, [{"batch_size": 1, "sequence_length": 128}])
TEXT_128, TEXT_64 = [{"batch_size": 1, "sequence_length": 128}], [{"batch_size": 1, "sequence_length": 64}]
ROBERTA_BASE_CONFIG = dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)
ALBERT_BASE_CONFIG = dict(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
                          num_attention_heads=12, intermediate_size=3072)
T5_SMALL_CONFIG = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8)
WHISPER_TINY_CONFIG = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
                           decoder_layers=4, decoder_attention_heads=6, decoder_ffn_dim=1536, num_mel_bins=80)
LLAMA_SMALL_CONFIG = dict(vocab_size=32000, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                          num_key_value_heads=2, intermediate_size=1408, use_cache=False)

MODELS: dict[str, DynModel] = {m.name: m for m in (
    DynModel("bert_tiny_dyn", "BertModel (transformers, 2x128, 2 heads, vocab 1000), TorchScript exporter, "
             "opset 17", exporter=export_legacy, **BERT),
    DynModel("bert_tiny_dynamo", "the same BertModel, dynamo exporter (torch.export), opset 18",
             exporter=export_dynamo, **BERT),
    DynModel("resnet_dyn", "torchvision resnet18, dynamic batch, height and width, opset 17",
             IMAGE_DIMS, partial(torchvision_module, "resnet18"), export_legacy,
             {"input": ["batch", 3, "height", "width"]}, {"input": "float32"}, ["output"],
             {"input": {0: "batch", 2: "height", 3: "width"}, "output": {0: "batch"}},
             {"batch": 2, "height": 224, "width": 224}, TORCHVISION),
    DynModel("mobilenetv2_dyn", "torchvision mobilenet_v2, dynamic batch, opset 17",
             [{"batch": 1}, {"batch": 2}, {"batch": 4}], partial(torchvision_module, "mobilenet_v2"), export_legacy,
             {"input": ["batch", 3, 224, 224]}, {"input": "float32"}, ["output"],
             {"input": {0: "batch"}, "output": {0: "batch"}}, {"batch": 2}, TORCHVISION),
    DynModel("audio_conv_dyn", "wav2vec2-style Conv1d feature encoder + mean pool + Linear, dynamic samples, "
             "opset 17", [{"samples": 16000}, {"samples": 8000}, {"samples": 24000}], audio_module, export_legacy,
             {"input_values": [1, "samples"]}, {"input_values": "float32"}, ["logits", "hidden_states"],
             {"input_values": {1: "samples"}, "hidden_states": {1: "frames"}}, {"samples": 16000}),
    DynModel("ppocr_rec_dyn", "PP-OCRv4 text recognition (SVTR-LCNet), rapidocr-onnxruntime, as published "
             "(opset 12), free batch and width", PPOCR_DIMS),
    # issue 33's modern architectures: one test shape each, so a benchmark builds one static artifact
    _vision("regnet_y_400mf", "regnet_y_400mf"),
    _vision("regnet_y_400mf_dynamo", "regnet_y_400mf", exporter=export_dynamo),
    _vision("lraspp_mobilenet_v3", "lraspp_mobilenet_v3_large", 512, output="out", weights_backbone=None),
    _vision("convnext_tiny", "convnext_tiny"),
    _vision("convnext_tiny_dynamo", "convnext_tiny", exporter=export_dynamo),
    _vision("swin_t", "swin_t"),
    _vision("swin_t_dynamo", "swin_t", exporter=export_dynamo),
    _vision("efficientnet_b0", "efficientnet_b0"),
    DynModel("gpt2_small", f"GPT2LMHeadModel (transformers, default config: 12x768, 12 heads, vocab 50257, "
             f"no KV cache), logits only, {LEGACY}, {HF_AXES}", exporter=export_legacy,
             **_hf("GPT2LMHeadModel", dict(use_cache=False), {"logits": TEXT_AXES},
                   [{"batch_size": 1, "sequence_length": 64}])),
    DynModel("bert_base", f"BertModel (transformers, bert-base: 12x768, 12 heads, vocab 30522), {LEGACY}, {HF_AXES}",
             exporter=export_legacy, **BERT_BASE),
    DynModel("bert_base_dynamo", f"the same bert-base BertModel, {DYNAMO}", exporter=export_dynamo, **BERT_BASE),
    DynModel("vit_base", f"ViTModel (transformers, default config: 224, patch 16, 12x768), dynamic batch, {LEGACY}",
             exporter=export_legacy, **_hf("ViTModel", {}, dict.fromkeys(BERT_OUTPUTS, {0: "batch_size"}),
                                          [{"batch_size": 1}], image=True)),
    DynModel("distilbert", f"DistilBertModel (transformers, default config: 6x768, 12 heads, vocab 30522), {LEGACY}, "
             f"{HF_AXES}", exporter=export_legacy,
             **_hf("DistilBertModel", {}, {"last_hidden_state": TEXT_AXES},
                   [{"batch_size": 1, "sequence_length": 128}])),
    # the held-out set added 2026-11-26: architectures nobody had tuned byoc for, one test shape each
    _vision("resnet50_dynamo", "resnet50", exporter=export_dynamo),
    _vision("mobilenet_v3_large_dynamo", "mobilenet_v3_large", exporter=export_dynamo),
    _vision("densenet121", "densenet121"),
    _vision("shufflenet_v2_dynamo", "shufflenet_v2_x1_0", exporter=export_dynamo),
    _vision("swin_v2_t", "swin_v2_t"),
    _vision("maxvit_t", "maxvit_t"),
    DynModel("roberta_base", f"RobertaModel (transformers, roberta-base: 12x768, 12 heads, vocab 50265), {LEGACY}, "
             f"{HF_AXES}", exporter=export_legacy,
             **_hf("RobertaModel", ROBERTA_BASE_CONFIG, BERT_OUTPUTS, TEXT_128)),
    DynModel("albert_base", f"AlbertModel (transformers, albert-base: 12x768 sharing one layer, embeddings 128, "
             f"12 heads, vocab 30000), {LEGACY}, {HF_AXES}", exporter=export_legacy,
             **_hf("AlbertModel", ALBERT_BASE_CONFIG, BERT_OUTPUTS, TEXT_128)),
    DynModel("t5_small_encoder", f"T5EncoderModel (transformers, t5-small: 6x512, 8 heads, FFN 2048, vocab 32128), "
             f"{LEGACY}, {HF_AXES}", exporter=export_legacy,
             **_hf("T5EncoderModel", T5_SMALL_CONFIG, {"last_hidden_state": TEXT_AXES}, TEXT_128)),
    DynModel("whisper_tiny_encoder", f"WhisperModel's encoder (transformers, whisper-tiny: 4x384, 6 heads, 80 mel "
             f"bins x 3000 frames), dynamic batch, {LEGACY}", exporter=export_legacy,
             **_hf("WhisperModel", WHISPER_TINY_CONFIG, {"last_hidden_state": {0: "batch_size"}}, [{"batch_size": 1}],
                   inputs={"input_features": ["batch_size", 80, 3000]}, example={"batch_size": 2}, part="encoder")),
    DynModel("wav2vec2_base", f"Wav2Vec2Model (transformers, default config = wav2vec2-base: 7 Conv1d, 12x768, "
             f"12 heads), dynamic batch and samples, {LEGACY}", exporter=export_legacy,
             **_hf("Wav2Vec2Model", {}, {"last_hidden_state": {0: "batch_size", 1: "frames"}},
                   [{"batch_size": 1, "samples": 16000}], inputs={"input_values": ["batch_size", "samples"]},
                   example={"batch_size": 2, "samples": 12000})),
    DynModel("llama_small", f"LlamaForCausalLM (transformers, 8x512, 8 heads, 2 KV heads, FFN 1408, vocab 32000, "
             f"no KV cache), logits only, {LEGACY}, {HF_AXES}", exporter=export_legacy,
             **_hf("LlamaForCausalLM", LLAMA_SMALL_CONFIG, {"logits": TEXT_AXES}, TEXT_64)),
    DynModel("mobilevit_small", f"MobileViTModel (transformers, default config = mobilevit-small: 256, hidden "
             f"144/192/240), dynamic batch, {LEGACY}", exporter=export_legacy,
             **_hf("MobileViTModel", {}, dict.fromkeys(BERT_OUTPUTS, {0: "batch_size"}), [{"batch_size": 1}],
                   inputs={"pixel_values": ["batch_size", 3, 256, 256]}, example={"batch_size": 2})),
    DynModel("opt_125m", f"OPTForCausalLM (transformers, default config = opt-125m: 12x768, 12 heads, vocab 50272, "
             f"no KV cache), logits only, {LEGACY}, {HF_AXES}", exporter=export_legacy,
             **_hf("OPTForCausalLM", dict(use_cache=False), {"logits": TEXT_AXES}, TEXT_64)),
)}


# -- inputs, checks and the catalog -----------------------------------------------------
def _dims(value_info) -> list:
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        out.append(d.dim_value if kind == "dim_value" else d.dim_param if kind == "dim_param" else None)
    return out


def _graph_inputs(model: onnx.ModelProto) -> list:
    initializers = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def concrete(dims: list, binding: dict) -> list:
    """An input's ``dims`` with every symbolic dim bound by ``binding``; ValueError when one has no size."""
    shape = []
    for d in dims:
        if isinstance(d, int):
            shape.append(d)
        elif d in binding:
            shape.append(int(binding[d]))
        else:
            raise ValueError(f"dim {d!r} has no size in test shape {binding}")
    return shape


def _feeds(shapes: dict, dtypes: dict, rng: np.random.Generator) -> dict:
    """Seeded inputs: token ids in [0, 1000), attention masks with the later rows half padded, floats N(0, 1)."""
    feeds = {}
    for name, shape in shapes.items():
        if name == "attention_mask":
            mask = np.ones(shape, dtype=np.int64)
            for row in range(1, shape[0]):
                mask[row, max(1, shape[1] * (shape[0] - row) // shape[0]):] = 0
            feeds[name] = mask
        elif np.dtype(dtypes[name]).kind in "iu":
            feeds[name] = rng.integers(0, BERT_CONFIG["vocab_size"], shape).astype(dtypes[name])
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtypes[name])
    return feeds


_ONNX_NUMPY = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
               onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.DOUBLE: "float64"}


def verify(model: DynModel, path: Path, module=None) -> list[str]:
    """Problems running ``path`` with onnxruntime at each test shape (and against ``module``'s outputs)."""
    import onnxruntime as ort

    onnx_model = onnx.load(str(path), load_external_data=False)
    inputs = {vi.name: (_dims(vi), _ONNX_NUMPY.get(vi.type.tensor_type.elem_type, "float32"))
              for vi in _graph_inputs(onnx_model)}
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001 -- any load error is the model's failure
        return [f"onnxruntime cannot load it: {type(err).__name__}: {err}"]
    problems = []
    rng = np.random.default_rng(SEED)
    for binding in model.test_dims:
        try:
            shapes = {name: concrete(dims, binding) for name, (dims, _) in inputs.items()}
            feeds = _feeds(shapes, {name: dtype for name, (_, dtype) in inputs.items()}, rng)
            outs = session.run(None, feeds)
        except Exception as err:  # noqa: BLE001
            problems.append(f"{binding}: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
            continue
        bad = [o.name for o, value in zip(session.get_outputs(), outs)
               if value.dtype.kind == "f" and not np.isfinite(value).all()]
        if bad:
            problems.append(f"{binding}: non-finite values in {bad}")
        if module is not None:
            problems += _compare(module, feeds, outs, session, binding)
    return problems


def _compare(module, feeds: dict, outs: list, session, binding: dict) -> list[str]:
    import torch

    with torch.no_grad():
        ref = module(*(torch.from_numpy(v) for v in feeds.values()))
    ref = tuple(ref.values()) if isinstance(ref, dict) else ref if isinstance(ref, (tuple, list)) else (ref,)
    problems = []
    for meta, got, want in zip(session.get_outputs(), outs, ref):
        want = want.numpy()
        if got.shape != want.shape:
            problems.append(f"{binding}: {meta.name} is {list(got.shape)}, torch gives {list(want.shape)}")
            continue
        scale = float(np.abs(want).max()) or 1.0
        err = float(np.abs(got - want).max())
        log(f"  {meta.name} at {binding}: max |onnx - torch| {err:.3g}, max |torch| {scale:.3g}")
        if err > 1e-3 * scale + 1e-4:
            problems.append(f"{binding}: {meta.name} differs from torch by {err:.3g} (max |torch| {scale:.3g})")
    return problems


def catalog_entry(model: DynModel, path: Path, verified: bool) -> dict:
    onnx_model = onnx.load(str(path), load_external_data=False)
    opset = next((o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")), None)
    inputs = []
    for vi in _graph_inputs(onnx_model):
        dims = _dims(vi)
        symbolic = [d for d in dims if isinstance(d, str)]
        inputs.append({"name": vi.name, "dtype": _ONNX_NUMPY.get(vi.type.tensor_type.elem_type, "?"), "dims": dims,
                       "test_shapes": [{d: b[d] for d in symbolic if d in b} for b in model.test_dims]})
    return {"name": model.name, "path": str(path), "description": model.description, "opset": opset,
            "bytes": path.stat().st_size, "verified": verified, "inputs": inputs, "test_dims": model.test_dims}


# -- building ------------------------------------------------------------------------------
class Skip(Exception):
    """The model cannot be made on this machine (a note, not a failure)."""


def _ppocr_path() -> Path:
    try:
        path = real_model_path("ppocr_rec")
    except FetchError as err:
        raise Skip(f"not cached and not fetched ({err}); run benchmarks/real_models.py --fetch")
    vi = _graph_inputs(onnx.load(str(path), load_external_data=False))[0]
    width = _dims(vi)[PPOCR_WIDTH_AXIS]
    if not isinstance(width, str):
        raise Skip(f"{path}: the width of {vi.name!r} is {width!r}, not a free dim")
    return path


def build(model: DynModel, out: Path, force: bool) -> tuple[Path, object]:
    """The model's file (exported when missing or ``force``) and its torch module (None for a published model)."""
    if model.module is None:
        return _ppocr_path(), None
    needs = model.needs + ("onnxscript",) * (model.exporter is export_dynamo)  # the dynamo exporter writes through it
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"needs {', '.join(missing)}, not installed in {sys.executable}: run this script with the "
                   "torch venv (see its docstring)")
    module = model.module()
    path = out / f"{model.name}.onnx"
    if path.exists() and not force:
        log(f"{model.name}: cached {path}")
        return path, module
    example = _example(model.example, model.inputs, model.dtypes)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.onnx")
    start = time.perf_counter()
    try:
        model.exporter(module, example, tmp, list(model.inputs), model.outputs, model.axes)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    except Exception as err:
        if model.exporter is export_dynamo:
            raise Skip(f"the dynamo exporter failed: {type(err).__name__}: {str(err).splitlines()[0][:500]}")
        raise
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.data").unlink(missing_ok=True)
    log(f"{model.name}: exported in {time.perf_counter() - start:.1f} s to {path}")
    return path, module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(MODELS), help=f"models ({', '.join(MODELS)})")
    parser.add_argument("--out", type=Path, default=None,
                        help="cache folder (default $BYOC_MODEL_CACHE/dynamic, else ~/.cache/byoc-models/dynamic)")
    parser.add_argument("--force", action="store_true", help="export again even when the file is cached")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if importlib.util.find_spec("torch") is None and any(MODELS[name].module for name in args.names):
        parser.error(f"torch is not installed in {sys.executable}: run this script with the torch venv "
                     "(see its docstring), or name only ppocr_rec_dyn")
    out = (args.out or default_out()).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names:
        model = MODELS[name]
        start = time.perf_counter()
        try:
            path, module = build(model, out, args.force)
        except Skip as why:
            log(f"SKIP {name}: {why}")
            continue
        except Exception as err:  # noqa: BLE001 -- report it and go on with the next model
            log(f"FAIL {name}: export: {type(err).__name__}: {err}")
            log(traceback.format_exc())
            failed += 1
            continue
        problems = verify(model, path, module)
        for problem in problems:
            log(f"FAIL {name}: {problem}")
        failed += bool(problems)
        print(json.dumps(catalog_entry(model, path, not problems)), flush=True)
        log(f"{name}: {'verified' if not problems else 'FAILED'} at {len(model.test_dims)} shapes, "
            f"{path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

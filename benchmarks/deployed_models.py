"""Models in the forms people deploy them: random-weight architectures, exported with symbolic dims, then
optimized, quantized and halved by onnxruntime's and onnxconverter-common's own tools (issue 45, item 5).

Run it with a Python that has torch, not byoc's own environment (byoc never needs torch; this script only
writes the ONNX files ``benchmarks/deployed.py`` then reads). A venv that sees the system's packages (onnx,
onnxruntime, onnxconverter-common, numpy) keeps torch out of the test environment::

    python -m venv --system-site-packages /tmp/torchenv
    /tmp/torchenv/bin/pip install torch==2.13.0                   # the CPU wheel in /opt/wheels, never plain torch
    /tmp/torchenv/bin/pip install --no-deps torchvision==0.28.0   # transformers imports it (a CUDA build: stubbed)
    /tmp/torchenv/bin/pip install transformers onnxscript onnxconverter-common
    /tmp/torchenv/bin/python benchmarks/deployed_models.py [--out DIR] [--force] [--archs A,B] [--forms F,G]

Each file is written once to ``DIR/<arch>_<form>.onnx`` (default ``$BYOC_MODEL_CACHE/deployed``, else
``~/.cache/byoc-models/deployed``, beside benchmarks/dynamic_models.py's ``dynamic``) and reused after
(``--force`` makes it again). Every run then checks each file with onnxruntime at its test shape and writes the
catalog, one JSON line per file, to ``DIR/catalog.jsonl`` and to stdout::

    {"name", "arch", "form", "path", "description", "bytes", "opset", "domains", "contrib_ops",
     "inputs": [{"name", "dtype", "dims"}], "test_dims", "verified", "ort_err_vs_float", "ort_scale"}

``dims`` is the input's shape as written (an int, or the ``dim_param`` string of a symbolic dim); ``test_dims``
binds every symbolic dim to its size for the one test run; ``contrib_ops`` counts the op types of the file outside
the ONNX domain (``com.microsoft``: Attention, SkipLayerNormalization, MatMulNBits, ...), by ``domain:op_type``.
``ort_err_vs_float`` is max |onnxruntime on this file - onnxruntime on the float file| at the test shape, what the
form itself costs; ``ort_scale`` is max |onnxruntime on the float file|. Notes go to stderr, with ``FAIL`` lines
for failures (exit code 1) and ``SKIP`` lines for forms that do not apply.

The architectures (seeded random weights from transformers configs, eager attention; no hub access, no
tokenizer), at the sizes people deploy but no larger than a 2-core machine times in minutes:

* ``bert_base``: BertModel at bert-base's size (12x768, 12 heads, FFN 3072, vocab 30522); ``input_ids``,
  ``attention_mask``, ``token_type_ids`` (int64) ``[batch_size, sequence_length]``, outputs
  ``last_hidden_state`` and ``pooler_output``; tested at 1 x 128.
* ``vit_small``: ViTForImageClassification at ViT-S/16's size (DeiT-S: 12x384, 6 heads, FFN 1536, 224, patch
  16, 1000 classes); ``pixel_values`` ``[batch_size, 3, 224, 224]``, output ``logits``; tested at batch 1.
* ``resnet50``: benchmarks/benchmark_models.py's torch ResNet-50 (v1.5, random BatchNorm statistics);
  ``input`` ``[batch, 3, 224, 224]``, output ``output``; tested at batch 1.
* ``gpt2_small``: GPT2LMHeadModel, default config (12x768, 12 heads, vocab 50257), no KV cache: one forward
  pass over the sequence; ``input_ids``, ``attention_mask`` (int64) ``[batch_size, sequence_length]``, output
  ``logits``; tested at 1 x 64.
* ``convnext_tiny``: ConvNextForImageClassification at ConvNeXt-T's size (depths 3-3-9-3, widths 96-768, 224,
  1000 classes); ``pixel_values`` ``[batch_size, 3, 224, 224]``, output ``logits``; tested at batch 1.
* ``distilbert``: DistilBertModel, default config (6x768, 12 heads, FFN 3072, vocab 30522); ``input_ids``,
  ``attention_mask`` (int64) ``[batch_size, sequence_length]``, output ``last_hidden_state``; tested at 1 x 128.

Each is exported by the TorchScript exporter at opset 17 (the form onnxruntime's transformer optimizer's
fusions are written for) with the Hugging Face exporter's dynamic axes, then written in each form:

* ``float``: the export itself (the reference the other forms are made from).
* ``optimized``: ``onnxruntime.transformers.optimizer.optimize_model`` with ``model_type`` bert / vit / gpt2 and
  the model's ``num_heads`` and ``hidden_size`` (its default opt_level): com.microsoft Attention,
  SkipLayerNormalization, EmbedLayerNormalization, BiasGelu, FastGelu ... where its fusions match. ResNet-50
  and ConvNeXt-T have no model type there (DistilBERT is optimized as bert): their form is onnxruntime's own offline optimization (``only_onnxruntime``,
  opt_level 2, extended: FusedConv), the file ``optimized_model_filepath`` writes.
* ``dynamic_int8``: ``onnxruntime.quantization.quantize_dynamic`` with its defaults (s8 weights, per tensor).
* ``qdq``: ``quant_pre_process`` then ``quantize_static``, QDQ format, otherwise its defaults (s8 activations
  and weights, per tensor, MinMax), calibrated on 4 seeded random input sets at the test shape; the inputs'
  symbolic dims are kept.
* ``int4_sym``, ``int4_asym``: ``MatMulNBitsQuantizer`` (block size 32, symmetric or not; MatMulNBits), the
  transformers and ConvNeXt-T (its pointwise convolutions are MatMuls) only.
* ``fp16``: ``onnxconverter_common.float16.convert_float_to_float16(keep_io_types=True)``; where onnxruntime
  cannot load its file (GPT-2), onnxruntime's own copy, ``onnxruntime.transformers.float16`` (the description says).

The inputs (``feeds``, importable without torch): token ids uniform in [0, 1000), ``token_type_ids`` 0 on the
first half of the sequence and 1 on the rest, attention masks of ones with the later batch rows half padded,
floats N(0, 1); seeded.

torchvision's wheels on PyPI are CUDA builds: transformers imports torchvision, and benchmarks/
dynamic_models.py's ``_torchvision_ops_stub`` defines the two op schemas its import needs first.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import dynamic_models as dyn  # noqa: E402 - the torch helpers (seeding, the torchvision stub, quiet export)
from real_models_catalog import default_cache  # noqa: E402

SEED = 20261127
OPSET = 17
FORMS = ("float", "optimized", "dynamic_int8", "qdq", "int4_sym", "int4_asym", "fp16")
QUANTIZED = ("dynamic_int8", "qdq", "int4_sym", "int4_asym")
CALIBRATION_SETS = 4
INT4_BLOCK = 32
TOKEN_RANGE = 1000


def default_out() -> Path:
    return default_cache() / "deployed"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- inputs (no torch) ------------------------------------------------------------------
_ONNX_NUMPY = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
               onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.DOUBLE: "float64"}


def feeds(inputs: list, binding: dict, seed: int = SEED) -> dict:
    """Seeded inputs for a catalog entry's ``inputs`` at ``binding`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in inputs:
        shape, dtype = dyn.concrete(spec["dims"], binding), np.dtype(spec["dtype"])
        name = spec["name"]
        if name == "attention_mask":
            mask = np.ones(shape, dtype=dtype)
            for row in range(1, shape[0]):
                mask[row, max(1, shape[1] * (shape[0] - row) // shape[0]):] = 0
            out[name] = mask
        elif name == "token_type_ids":
            types = np.zeros(shape, dtype=dtype)
            types[..., shape[-1] // 2:] = 1
            out[name] = types
        elif dtype.kind in "iu":
            out[name] = rng.integers(0, TOKEN_RANGE, shape).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


def graph_inputs(model: onnx.ModelProto) -> list:
    """``[{"name", "dtype", "dims"}]`` of the model's inputs that are not initializers."""
    initializers = {i.name for i in model.graph.initializer}
    return [{"name": vi.name, "dtype": _ONNX_NUMPY.get(vi.type.tensor_type.elem_type, "?"), "dims": dyn._dims(vi)}
            for vi in model.graph.input if vi.name not in initializers]


def read_catalog(folder: Path) -> list:
    """The entries of ``folder/catalog.jsonl`` ([] when there is none)."""
    path = folder / "catalog.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- the architectures --------------------------------------------------------------------
TEXT3 = ("input_ids", "attention_mask", "token_type_ids")
TEXT2 = ("input_ids", "attention_mask")
TEXT_AXES = {0: "batch_size", 1: "sequence_length"}


@dataclass(frozen=True)
class Arch:
    name: str
    description: str
    module: Callable  # () -> torch module whose forward takes ``inputs`` positionally and returns a tuple
    inputs: dict  # name -> ONNX-style shape (ints and dim names)
    outputs: dict  # name -> {axis: dim name}
    test_dims: dict  # dim name -> size: the one test run
    example: dict  # the export's example dims, away from 1
    optimizer: dict = field(default_factory=dict)  # optimize_model's keywords
    transformer: bool = True  # the int4 forms apply

    @property
    def dtypes(self) -> dict:
        return {name: "int64" if name in TEXT3 else "float32" for name in self.inputs}


def hf_module(model_class: str, config: dict, inputs: tuple, outputs: tuple):
    """A transformers model (seeded random weights, eager attention), forward over ``inputs`` -> ``outputs``."""
    torch = dyn._seeded()
    import transformers

    cls = getattr(transformers, model_class)
    hf = cls(cls.config_class(**config, attn_implementation="eager")).eval()

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = hf

        def run(self, **kwargs):
            out = self.model(**kwargs, return_dict=True)
            return tuple(out[name] for name in outputs)

    class Text3(Wrapped):
        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.run(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)

    class Text2(Wrapped):
        def forward(self, input_ids, attention_mask):
            return self.run(input_ids=input_ids, attention_mask=attention_mask)

    class Image(Wrapped):
        def forward(self, pixel_values):
            return self.run(pixel_values=pixel_values)

    return {TEXT3: Text3, TEXT2: Text2}.get(inputs, Image)().eval()


def resnet50_module():
    """benchmarks/benchmark_models.py's ResNet-50, seeded, random BatchNorm statistics."""
    import benchmark_models

    dyn._seeded()
    module = benchmark_models._torch_modules()["resnet50"][0]().eval()
    dyn._random_bn_stats(module)
    return module


def _hf_arch(name, description, model_class, config, inputs, outputs, test_dims, optimizer):
    from functools import partial

    shapes = {n: ["batch_size", "sequence_length"] for n in inputs} if inputs != ("pixel_values",) \
        else {"pixel_values": ["batch_size", 3, 224, 224]}
    return Arch(name, description, partial(hf_module, model_class, config, inputs, tuple(outputs)), shapes, outputs,
                test_dims, {"batch_size": 2, "sequence_length": 16}, optimizer)


BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512)
VIT_SMALL = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536,
                 image_size=224, patch_size=16, num_labels=1000)
GPT2_SMALL = dict(use_cache=False)
CONVNEXT_TINY = dict(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], image_size=224, num_labels=1000)
DISTILBERT = dict()

ARCHS: dict[str, Arch] = {a.name: a for a in (
    _hf_arch("bert_base", "BertModel, bert-base size (12x768, 12 heads, vocab 30522), 3 text inputs",
             "BertModel", BERT_BASE, TEXT3, {"last_hidden_state": TEXT_AXES, "pooler_output": {0: "batch_size"}},
             {"batch_size": 1, "sequence_length": 128}, dict(model_type="bert", num_heads=12, hidden_size=768)),
    _hf_arch("vit_small", "ViTForImageClassification, ViT-S/16 size (12x384, 6 heads, 224, 1000 classes)",
             "ViTForImageClassification", VIT_SMALL, ("pixel_values",), {"logits": {0: "batch_size"}},
             {"batch_size": 1}, dict(model_type="vit", num_heads=6, hidden_size=384)),
    Arch("resnet50", "ResNet-50 v1.5 (benchmarks/benchmark_models.py), random BatchNorm statistics",
         resnet50_module, {"input": ["batch", 3, 224, 224]}, {"output": {0: "batch"}}, {"batch": 1}, {"batch": 2},
         dict(model_type="bert", only_onnxruntime=True, opt_level=2), transformer=False),
    _hf_arch("gpt2_small", "GPT2LMHeadModel, default config (12x768, 12 heads, vocab 50257), no KV cache",
             "GPT2LMHeadModel", GPT2_SMALL, TEXT2, {"logits": TEXT_AXES},
             {"batch_size": 1, "sequence_length": 64}, dict(model_type="gpt2", num_heads=12, hidden_size=768)),
    _hf_arch("convnext_tiny", "ConvNextForImageClassification, ConvNeXt-T size (3-3-9-3, 96-768, 224, 1000 classes)",
             "ConvNextForImageClassification", CONVNEXT_TINY, ("pixel_values",), {"logits": {0: "batch_size"}},
             {"batch_size": 1}, dict(model_type="bert", only_onnxruntime=True, opt_level=2)),
    _hf_arch("distilbert", "DistilBertModel, default config (6x768, 12 heads, vocab 30522), 2 text inputs",
             "DistilBertModel", DISTILBERT, TEXT2, {"last_hidden_state": TEXT_AXES},
             {"batch_size": 1, "sequence_length": 128}, dict(model_type="bert", num_heads=12, hidden_size=768)),
)}


def form_description(arch: Arch, form: str) -> str:
    if form == "optimized" and arch.optimizer.get("only_onnxruntime"):
        return "onnxruntime's offline optimization (optimize_model only_onnxruntime, opt_level 2)"
    return {
        "float": "TorchScript exporter, opset 17, symbolic dims",
        "optimized": f"optimize_model(model_type={arch.optimizer.get('model_type')!r}, "
                     f"num_heads={arch.optimizer.get('num_heads')}, hidden_size={arch.optimizer.get('hidden_size')})",
        "dynamic_int8": "quantize_dynamic, defaults",
        "qdq": f"quant_pre_process + quantize_static (QDQ, defaults), {CALIBRATION_SETS} random calibration sets",
        "int4_sym": f"MatMulNBitsQuantizer (4 bits, block {INT4_BLOCK}, symmetric)",
        "int4_asym": f"MatMulNBitsQuantizer (4 bits, block {INT4_BLOCK}, asymmetric)",
        "fp16": "convert_float_to_float16(keep_io_types=True)",
    }[form]


# -- writing each form --------------------------------------------------------------------
class Skip(Exception):
    """The form does not apply to the architecture (a note, not a failure)."""


def export_float(arch: Arch, path: Path) -> None:
    module = arch.module()
    import torch

    specs = [{"name": n, "dtype": arch.dtypes[n], "dims": dims} for n, dims in arch.inputs.items()]
    example = tuple(torch.from_numpy(a) for a in feeds(specs, arch.example).values())
    axes = {name: {i: d for i, d in enumerate(shape) if isinstance(d, str)} for name, shape in arch.inputs.items()}
    axes.update(arch.outputs)
    dyn.export_legacy(module, example, path, list(arch.inputs), list(arch.outputs), axes)


def write_optimized(arch: Arch, source: Path, path: Path) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    with dyn._quiet_export():
        optimized = optimize_model(str(source), use_gpu=False, **arch.optimizer)
        optimized.save_model_to_file(str(path))


def write_dynamic_int8(arch: Arch, source: Path, path: Path) -> None:
    from onnxruntime.quantization import quantize_dynamic

    with dyn._quiet_export():
        quantize_dynamic(str(source), str(path))


def write_qdq(arch: Arch, source: Path, path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    specs = graph_inputs(onnx.load(str(source), load_external_data=False))
    batches = iter([feeds(specs, arch.test_dims, SEED + k) for k in range(CALIBRATION_SETS)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    prepared = path.with_name(f".{path.stem}.pre.onnx")
    try:
        with dyn._quiet_export():
            try:  # what onnxruntime tells users to run first
                # its symbolic shape inference leaves sym_shape_infer_temp.onnx and a <uuid>.data copy of the
                # weights (437 MB for BERT-base) in the working directory: give it one of its own
                with tempfile.TemporaryDirectory(prefix="byoc-qdq-") as scratch, contextlib.chdir(scratch):
                    quant_pre_process(str(source.resolve()), str(prepared.resolve()))
                model = prepared
            except Exception as err:  # noqa: BLE001 - its symbolic shape inference fails on some graphs
                log(f"  quant_pre_process failed ({type(err).__name__}: {str(err)[:200]}); quantizing the export")
                model = source
            quantize_static(str(model), str(path), Reader(), quant_format=QuantFormat.QDQ)
    finally:
        prepared.unlink(missing_ok=True)
        for extra in path.parent.glob(f".{path.stem}.pre*"):
            extra.unlink(missing_ok=True)


def _write_int4(symmetric: bool):
    def write(arch: Arch, source: Path, path: Path) -> None:
        if not arch.transformer:
            raise Skip("MatMulNBits is for the transformers' MatMuls (a CNN has none)")
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        with dyn._quiet_export():
            quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), block_size=INT4_BLOCK, is_symmetric=symmetric)
            quantizer.process()
            quantizer.model.save_model_to_file(str(path), use_external_data_format=False)
    return write


def write_fp16(arch: Arch, source: Path, path: Path) -> None:
    """onnxconverter-common's converter; where onnxruntime cannot load its file (GPT-2: a Cast to float whose
    output it retypes to float16), onnxruntime's own copy of the converter (what its optimizer's
    ``convert_float_to_float16`` runs), which keeps such a Cast's type."""
    import onnxruntime as ort
    from onnxconverter_common.float16 import convert_float_to_float16

    with dyn._quiet_export():
        onnx.save(convert_float_to_float16(onnx.load(str(source)), keep_io_types=True), str(path))
    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return
    except Exception as err:  # noqa: BLE001 - onnxruntime's load errors have no common class
        log(f"  onnxruntime cannot load onnxconverter-common's fp16 file ({str(err).splitlines()[0][:200]}); "
            "converting with onnxruntime.transformers.float16 instead")
    from onnxruntime.transformers.float16 import convert_float_to_float16 as ort_convert

    with dyn._quiet_export():
        model = ort_convert(onnx.load(str(source)), keep_io_types=True)
    onnx.helper.set_model_props(model, {FP16_CONVERTER: "onnxruntime.transformers.float16"})
    onnx.save(model, str(path))


FP16_CONVERTER = "byoc_benchmark_fp16_converter"  # metadata key: the converter, where it is not onnxconverter-common


WRITERS = {"optimized": write_optimized, "dynamic_int8": write_dynamic_int8, "qdq": write_qdq,
           "int4_sym": _write_int4(True), "int4_asym": _write_int4(False), "fp16": write_fp16}


def make(arch: Arch, form: str, out: Path, force: bool) -> Path:
    """The file of ``arch`` in ``form`` (written when missing or ``force``)."""
    path = out / f"{arch.name}_{form}.onnx"
    if path.exists() and not force:
        return path
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.onnx")
    start = time.perf_counter()
    try:
        if form == "float":
            export_float(arch, tmp)
        else:
            WRITERS[form](arch, make(arch, "float", out, False), tmp)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.data").unlink(missing_ok=True)
    log(f"{arch.name}_{form}: written in {time.perf_counter() - start:.1f} s, {path.stat().st_size / 1e6:.1f} MB")
    return path


# -- checks and the catalog ----------------------------------------------------------------
def ort_outputs(path: Path, inputs: dict, disable_all: bool = False) -> list:
    """onnxruntime's outputs (CPU, 2 threads); ``disable_all``: with graph optimizations off, the definition."""
    from real_models_catalog import onnxruntime_outputs

    return onnxruntime_outputs(path, inputs, definition=disable_all)


def max_abs_err(outputs: list, reference: list) -> float:
    """The largest |a - b| over the outputs (inf on a shape mismatch, or a non-finite value where the other has none)."""
    worst = 0.0
    for a, b in zip(outputs, reference):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")
        finite = np.isfinite(b)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(a[finite] - b[finite]))))
    return worst


def contrib_ops(model: onnx.ModelProto) -> dict:
    counts = collections.Counter(f"{n.domain}:{n.op_type}" for n in model.graph.node
                                 if n.domain not in ("", "ai.onnx"))
    return dict(sorted(counts.items()))


def catalog_entry(arch: Arch, form: str, path: Path, float_outputs: list | None) -> dict:
    model = onnx.load(str(path), load_external_data=False)
    inputs = graph_inputs(model)
    entry = {"name": f"{arch.name}_{form}", "arch": arch.name, "form": form, "path": str(path),
             "description": f"{arch.description}; {form_description(arch, form)}", "bytes": path.stat().st_size,
             "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
             "domains": sorted({o.domain or "ai.onnx" for o in model.opset_import}),
             "contrib_ops": contrib_ops(model), "inputs": inputs, "test_dims": arch.test_dims}
    problems = [f"input {spec['name']} has no symbolic dim" for spec in inputs
                if not any(isinstance(d, str) for d in spec["dims"])]
    try:
        outs = ort_outputs(path, feeds(inputs, arch.test_dims))
        if not all(np.isfinite(o).all() for o in outs if o.dtype.kind == "f"):
            problems.append("onnxruntime's outputs hold non-finite values")
        if float_outputs is not None:
            entry["ort_err_vs_float"] = max_abs_err(outs, float_outputs)
            entry["ort_scale"] = max(float(np.abs(o).max(initial=0)) for o in float_outputs)
    except Exception as err:  # noqa: BLE001 - any error is the file's failure
        problems.append(f"onnxruntime: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
    converter = {p.key: p.value for p in model.metadata_props}.get(FP16_CONVERTER)
    if converter:
        entry["description"] += f" (onnxconverter-common's file did not load: {converter}'s converter)"
    entry["verified"] = not problems
    entry["problems"] = problems
    return entry


def check_float_against_torch(arch: Arch, path: Path) -> list[str]:
    """The float export against the torch module at the test shape (the other forms are made from it)."""
    import torch

    module = arch.module()
    specs = graph_inputs(onnx.load(str(path), load_external_data=False))
    inputs = feeds(specs, arch.test_dims)
    got = ort_outputs(path, inputs)
    with torch.no_grad():
        want = module(*(torch.from_numpy(v) for v in inputs.values()))
    want = want if isinstance(want, (tuple, list)) else (want,)
    problems = []
    for name, a, b in zip(arch.outputs, got, want):
        b = b.numpy()
        err, scale = max_abs_err([a], [b]), float(np.abs(b).max()) or 1.0
        log(f"  {name}: max |onnx - torch| {err:.3g}, max |torch| {scale:.3g}")
        if err > 1e-3 * scale + 1e-4:
            problems.append(f"{name} differs from torch by {err:.3g} (max |torch| {scale:.3g})")
    return problems


def catalog_parser(description: str, folder: str, archs, forms) -> argparse.ArgumentParser:
    """The options of a script that makes a cache folder of models (this one, generate_models.py): ``--out``,
    ``--archs``, ``--forms`` and ``--force``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"cache folder (default $BYOC_MODEL_CACHE/{folder}, else ~/.cache/byoc-models/{folder})")
    parser.add_argument("--archs", default=",".join(archs), help=f"comma-separated, from {', '.join(archs)}")
    parser.add_argument("--forms", default=",".join(forms), help=f"comma-separated, from {', '.join(forms)}")
    parser.add_argument("--force", action="store_true", help="make the files again even when cached")
    return parser


def chosen(parser: argparse.ArgumentParser, args, archs, forms) -> tuple[list, list]:
    """The architectures and forms ``args`` names, or the parser's error for one it does not know."""
    picked_archs, picked_forms = args.archs.split(","), args.forms.split(",")
    bad = [a for a in picked_archs if a not in archs] + [f for f in picked_forms if f not in forms]
    if bad:
        parser.error(f"unknown: {', '.join(bad)}")
    return picked_archs, picked_forms


def main(argv=None) -> int:
    parser = catalog_parser(__doc__.splitlines()[0], "deployed", ARCHS, FORMS)
    args = parser.parse_args(argv)
    archs, forms = chosen(parser, args, ARCHS, FORMS)
    missing = [m for m in ("torch", "transformers", "onnxconverter_common") if importlib.util.find_spec(m) is None]
    if missing:
        parser.error(f"{', '.join(missing)} not installed in {sys.executable}: run this script with the torch venv "
                     "(see its docstring)")
    out = (args.out or default_out()).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    kept = {e["name"]: e for e in read_catalog(out)}  # entries of files not made in this run stay listed
    failed = 0
    for arch_name in archs:
        arch = ARCHS[arch_name]
        try:
            float_path = make(arch, "float", out, args.force)
        except Exception as err:  # noqa: BLE001 - report it and go on with the next architecture
            log(f"FAIL {arch_name}: export: {type(err).__name__}: {err}\n{traceback.format_exc()}")
            failed += 1
            continue
        float_specs = graph_inputs(onnx.load(str(float_path), load_external_data=False))
        float_outputs = ort_outputs(float_path, feeds(float_specs, arch.test_dims))
        for form in forms:
            name = f"{arch_name}_{form}"
            try:
                path = make(arch, form, out, args.force and form != "float")
            except Skip as why:
                log(f"SKIP {name}: {why}")
                continue
            except Exception as err:  # noqa: BLE001 - the quantizers raise every kind of error
                log(f"FAIL {name}: {type(err).__name__}: {str(err)[:500]}\n{traceback.format_exc()}")
                failed += 1
                continue
            entry = catalog_entry(arch, form, path, float_outputs)
            if form == "float":
                problems = check_float_against_torch(arch, path)
                entry["problems"] += problems
                entry["verified"] = entry["verified"] and not problems
            failed += not record(out, kept, name, entry, f"ort err vs float {entry.get('ort_err_vs_float')}")
    return 1 if failed else 0


def record(out: Path, kept: dict, name: str, entry: dict, detail: str) -> bool:
    """Log ``entry``'s problems and a line on it (ending in ``detail``), print it, and write the catalog with it
    among the ``kept`` entries; returns whether it was verified."""
    for problem in entry["problems"]:
        log(f"FAIL {name}: {problem}")
    kept[name] = entry
    print(json.dumps(entry), flush=True)
    log(f"{name}: {'verified' if entry['verified'] else 'FAILED'}, {entry['bytes'] / 1e6:.1f} MB, "
        f"contrib ops {entry['contrib_ops'] or 'none'}, {detail}")
    (out / "catalog.jsonl").write_text("".join(json.dumps(e) + "\n" for e in kept.values()))
    return bool(entry["verified"])


if __name__ == "__main__":
    sys.exit(main())

"""Small random-weight decoder LLMs in the two ONNX forms people deploy for generation, made once, cached, and
checked by a greedy generation with onnxruntime (``benchmarks/generate.py`` reads the catalog).

Run it with the system Python (onnx, onnxruntime, numpy): it only verifies and writes the catalog there, and makes
the models in two venvs of their own, one per exporter, whose transformers versions differ (optimum-onnx 0.1.0
wants transformers < 4.58, onnxruntime-genai 0.18.0's builder the newer one)::

    python -m venv --system-site-packages /tmp/optenv
    /tmp/optenv/bin/pip install torch==2.13.0                      # the CPU wheel in /opt/wheels, never plain torch
    /tmp/optenv/bin/pip install optimum-onnx accelerate torch==2.13.0   # transformers 4.57.6, optimum 2.1.0
    python -m venv --system-site-packages /tmp/genaienv
    /tmp/genaienv/bin/pip install torch==2.13.0
    /tmp/genaienv/bin/pip install onnxruntime-genai==0.18.0 onnx_ir transformers torch==2.13.0
    python benchmarks/generate_models.py [--out DIR] [--force] [--archs A,B] [--forms F,G]
                                         [--optimum-python /tmp/optenv/bin/python]
                                         [--genai-python /tmp/genaienv/bin/python]

(accelerate only lets optimum deduplicate tied weights; onnx_ir is an import of the builder its wheel does not
declare. Neither venv has torchvision, so nothing needs its op stubs.) Each model is made once under ``DIR``
(default ``$BYOC_MODEL_CACHE/generate``, else ``~/.cache/byoc-models/generate``) and reused after (``--force``
makes it again)::

    DIR/hf_models/<arch>/     the transformers model (save_pretrained, safetensors) and its tokenizer
    DIR/<arch>_hf/model.onnx  optimum's export
    DIR/<arch>_genai_fp32/    the builder's folder: model.onnx, model.onnx.data, genai_config.json, tokenizer
    DIR/<arch>_genai_int4/
    DIR/catalog.jsonl         one JSON line per model (also printed to stdout)

The architectures (seeded random weights from transformers configs, ``initializer_range`` 0.05 so the logits are
not flat, then every bias N(0, 0.02) and every norm weight 1 + N(0, 0.1), where transformers' init leaves 0 and 1
that an exporter could drop unseen; no hub access), each with the same tokenizer: a ``tokenizers`` WordLevel
tokenizer over ``<unk> <s> </s> <pad> w0 .. w2043`` (ids 0-3 special, vocab 2048), split on whitespace, saved
through transformers' PreTrainedTokenizerFast (the builder copies it; nothing here tokenizes text):

* ``llama``: LlamaForCausalLM, 4 layers, hidden 384, 6 heads, 2 kv heads (GQA), head_dim 64, FFN 1024 (SwiGLU),
  RMSNorm, RoPE theta 1e4, untied lm_head.
* ``qwen2``: Qwen2ForCausalLM, 2 layers, hidden 512, 8 heads, 2 kv heads, head_dim 64, FFN 1408, q/k/v biases,
  RoPE theta 1e6, lm_head tied to the embedding.
* ``gpt2``: GPT2LMHeadModel, 4 layers, hidden 256, 4 heads (MHA), head_dim 64, learned positions, LayerNorm,
  GELU (tanh), lm_head untied (GPT-2 ties it, but at random weights the tied head predicts the token it was fed: the
  greedy loop drew one token 17 times, which checks no KV cache).

All take 512 positions. The forms:

* ``hf``: ``optimum-cli export onnx --task text-generation-with-past`` (optimum-onnx 0.1.0, float32, opset 18,
  TorchScript exporter): the one decoder file optimum writes, ``model.onnx``, plain ONNX ops. Inputs
  ``input_ids``, ``attention_mask`` ``[batch_size, past_sequence_length + sequence_length]``, ``position_ids``,
  ``past_key_values.N.key/value`` ``[batch_size, kv_heads, past_sequence_length, head_dim]``; outputs ``logits``
  and ``present.N.key/value``. Past length 0 (empty past arrays) is the prefill. The input order varies
  (GPT-2's file puts the past before ``attention_mask`` and ``position_ids``): feed by name.
* ``genai_fp32``, ``genai_int4``: ``python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu``
  (onnxruntime-genai 0.18.0): com.microsoft GroupQueryAttention (rotary inside), SkipSimplifiedLayerNormalization,
  MatMulNBits (int4: 4 bits, block 32, no zero points, ``accuracy_level`` 4, lm_head too; Qwen2's tied
  embedding becomes a GatherBlockQuantized on lm_head's int4 weight), external data, ``genai_config.json``.
  Inputs ``input_ids``, ``attention_mask`` ``[batch_size, total_sequence_length]`` (GQA reads sequence lengths
  from its row sums), ``past_key_values.N.key/value`` ``[batch_size, kv_heads, past_sequence_length,
  kv_cache_dim]`` (all keys, then all values); no ``position_ids``. The builder has no GPT-2 (a ``SKIP`` line).

Each run verifies every model with onnxruntime (``greedy``, below; no torch): a fixed prompt of 8 token ids
(seeded, from 4 up), prefill at past length 0, then 16 decode steps of one token feeding ``present`` back as the
past: 17 generated tokens, with no stop at the end-of-sequence id. The catalog entry then holds::

    {"name", "arch", "form", "path", "folder", "hf_folder", "description", "config": {"layers", "heads",
     "kv_heads", "head_dim", "hidden", "intermediate", "vocab", "max_positions"},
     "inputs": [{"name", "dtype", "dims"}], "outputs": [{"name", "dtype", "dims"}], "past_inputs",
     "present_outputs", "position_ids", "mask_dims", "past_length_zero", "opset", "op_counts", "contrib_ops",
     "bytes", "weight_bytes", "genai_config", "prompt", "steps", "ort_tokens", "torch_tokens", "torch_agrees",
     "top2_gaps", "min_top2_gap", "genai_tokens", "genai_agrees", "genai_note", "versions", "verified",
     "problems"}

``dims`` is a shape as written (an int, or the ``dim_param`` string of a symbolic dim); ``past_inputs[i]`` is fed
from ``present_outputs[i]`` of the step before; ``op_counts`` counts every op type by ``domain:op_type`` (the ONNX
domain as ``""``), ``contrib_ops`` only those outside it; ``weight_bytes`` sums the initializers' bytes (packed
int4 counted as stored); ``bytes`` is the size of the files (``.onnx`` and its external data); ``genai_config``
(genai forms, else null) is the builder's decoder input/output name patterns, ``context_length``,
``past_present_share_buffer`` (true: og.Generator keeps one past buffer of ``max_length``; ``greedy`` grows the
past by concatenation instead, which GroupQueryAttention also takes) and ``eos_token_id``. ``torch_tokens``
is transformers' own greedy loop (KV cache, same prompt) on the HF model, made when the model is;
``top2_gaps`` are, per step of the loop, the logit of the drawn token minus the runner-up's: a runtime whose
logits differ from onnxruntime's by less than half the smallest (``min_top2_gap``) draws the same tokens.
``genai_tokens`` is onnxruntime-genai's ``og.Generator`` greedy (``do_sample`` False, ``max_length`` prompt +
17) on the genai folder, which stops early if it draws the end-of-sequence id (``genai_note`` says).
``verified``: the loop ran from past length 0, and its tokens equal onnxruntime-genai's (genai forms) or
transformers' (hf; genai_fp32 compares too, but only the hf form requires it: GQA's float sums differ). Notes go
to stderr, with ``FAIL`` lines for failures (exit code 1) and ``SKIP`` lines for forms that do not apply.

Reuse ``greedy(run, entry, prompt, steps)`` with any runner: ``run(feeds) -> {output name: array}``.
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import deployed_models as deployed  # noqa: E402 - the options of a model-making script
import dynamic_models as dyn  # noqa: E402 - the declared dims of an input
from real_models_catalog import default_cache  # noqa: E402

SEED = 20261127
VOCAB = 2048
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0..3
BOS, EOS, PAD = 1, 2, 3
MAX_POSITIONS = 512
PROMPT_LENGTH = 8
STEPS = 16
FORMS = ("hf", "genai_fp32", "genai_int4")
OPTIMUM_PYTHON = "/tmp/optenv/bin/python"
GENAI_PYTHON = "/tmp/genaienv/bin/python"


def default_out() -> Path:
    return default_cache() / "generate"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the architectures --------------------------------------------------------------------
@dataclass(frozen=True)
class Arch:
    name: str
    model_class: str
    config: dict  # the transformers config's keywords
    description: str
    genai: bool = True  # onnxruntime-genai's builder takes it

    def summary(self) -> dict:
        """``{"layers", "heads", "kv_heads", "head_dim", "hidden", "intermediate", "vocab", "max_positions"}``."""
        c = self.config
        hidden = c.get("hidden_size", c.get("n_embd"))
        heads = c.get("num_attention_heads", c.get("n_head"))
        return {"layers": c.get("num_hidden_layers", c.get("n_layer")), "heads": heads,
                "kv_heads": c.get("num_key_value_heads", heads), "head_dim": hidden // heads, "hidden": hidden,
                "intermediate": c.get("intermediate_size", c.get("n_inner") or 4 * hidden),
                "vocab": c["vocab_size"], "max_positions": c.get("max_position_embeddings", c.get("n_positions"))}


_TOKENS = {"vocab_size": VOCAB, "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
           "initializer_range": 0.05}

ARCHS = {a.name: a for a in (
    Arch("llama", "LlamaForCausalLM",
         dict(_TOKENS, hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
              num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS, rope_theta=10000.0,
              tie_word_embeddings=False),
         "LlamaForCausalLM 4x384, 6 heads, 2 kv heads, head_dim 64, FFN 1024, vocab 2048"),
    Arch("qwen2", "Qwen2ForCausalLM",
         dict(_TOKENS, hidden_size=512, intermediate_size=1408, num_hidden_layers=2, num_attention_heads=8,
              num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS, rope_theta=1000000.0,
              tie_word_embeddings=True, use_sliding_window=False),
         "Qwen2ForCausalLM 2x512, 8 heads, 2 kv heads, head_dim 64, FFN 1408, qkv bias, tied lm_head, vocab 2048"),
    Arch("gpt2", "GPT2LMHeadModel",
         dict(_TOKENS, n_embd=256, n_layer=4, n_head=4, n_positions=MAX_POSITIONS, tie_word_embeddings=False),
         "GPT2LMHeadModel 4x256, 4 heads, head_dim 64, learned positions, untied lm_head, vocab 2048",
         genai=False),
)}


def prompt_ids(length: int = PROMPT_LENGTH, vocab: int = VOCAB, seed: int = SEED) -> list:
    """The fixed prompt: ``length`` seeded token ids in [4, vocab) (past the special tokens)."""
    return [int(t) for t in np.random.default_rng(seed).integers(len(SPECIAL), vocab, length)]


# -- the greedy loop (no torch) ----------------------------------------------------------
_ONNX_NUMPY = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32",
               onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16",
               onnx.TensorProto.DOUBLE: "float64", onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.INT8: "int8"}


def greedy(run: Callable, entry: dict, prompt: list, steps: int = STEPS) -> tuple:
    """Greedy generation through ``run(feeds) -> {output name: array}`` for the catalog ``entry``.

    Batch 1: the prefill feeds ``prompt`` with empty past arrays ``(1, kv_heads, 0, head_dim)``, then each of
    ``steps`` decode steps feeds the last token with the ``present`` outputs of the step before as the past. The
    attention mask is all ones over past + new tokens (both forms: ``[batch, past + sequence]``); ``position_ids``,
    where the model takes it, counts from the past length. No stop at the end-of-sequence id. Returns the
    ``steps + 1`` generated token ids and, per call, the logits of the last position (float32, ``(vocab,)``).
    """
    specs = {s["name"]: s for s in entry["inputs"]}
    kv_heads, head_dim = entry["config"]["kv_heads"], entry["config"]["head_dim"]
    past = {name: np.zeros((1, kv_heads, 0, head_dim), dtype=np.dtype(specs[name]["dtype"]))
            for name in entry["past_inputs"]}
    ids = np.asarray([prompt], dtype=np.dtype(specs["input_ids"]["dtype"]))
    past_length, tokens, logits = 0, [], []
    for _ in range(steps + 1):
        length = ids.shape[1]
        feeds = {"input_ids": ids,
                 "attention_mask": np.ones((1, past_length + length), dtype=np.dtype(specs["attention_mask"]["dtype"]))}
        if entry["position_ids"]:
            feeds["position_ids"] = np.arange(past_length, past_length + length,
                                              dtype=np.dtype(specs["position_ids"]["dtype"]))[None]
        feeds.update(past)
        outputs = run(feeds)
        last = np.asarray(outputs["logits"])[0, -1].astype(np.float32)
        token = int(np.argmax(last))
        tokens.append(token)
        logits.append(last)
        past = {name: outputs[present] for name, present in zip(entry["past_inputs"], entry["present_outputs"])}
        past_length += length
        ids = np.asarray([[token]], dtype=ids.dtype)
    return tokens, logits


def ort_runner(path: Path, threads: int = 0) -> Callable:
    """``run(feeds) -> {output name: array}`` on an onnxruntime CPU session of ``path``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds)))


# -- the catalog entry's description of a file ---------------------------------------------
def _spec(value_info) -> dict:
    return {"name": value_info.name, "dtype": _ONNX_NUMPY.get(value_info.type.tensor_type.elem_type, "?"),
            "dims": dyn._dims(value_info)}


def _weight_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for t in model.graph.initializer:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        total += int(np.prod(t.dims, dtype=np.int64)) * itemsize
    return total


def _pairs(inputs: list, outputs: list) -> tuple:
    """The past inputs in layer order (key before value) and the present output each is fed from."""
    names = {o["name"] for o in outputs}
    past, present = [], []
    layers = sorted({int(s["name"].split(".")[1]) for s in inputs if s["name"].startswith("past_key_values.")})
    for layer in layers:
        for kind in ("key", "value"):
            source = f"present.{layer}.{kind}"
            if source not in names:
                raise ValueError(f"no output {source} for past_key_values.{layer}.{kind}")
            past.append(f"past_key_values.{layer}.{kind}")
            present.append(source)
    return past, present


def describe(arch: Arch, form: str, path: Path, hf_folder: Path) -> dict:
    """The catalog entry's static part: the file's inputs, outputs, ops and sizes (no run)."""
    model = onnx.load(str(path), load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [_spec(vi) for vi in model.graph.input if vi.name not in initializers]
    outputs = [_spec(vi) for vi in model.graph.output]
    past, present = _pairs(inputs, outputs)
    ops = collections.Counter(f"{n.domain if n.domain != 'ai.onnx' else ''}:{n.op_type}" for n in model.graph.node)
    files = [path] + sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + ".") or
                            p.suffix == ".data" or p.name.endswith("_data"))
    specs = {s["name"]: s for s in inputs}
    return {"name": f"{arch.name}_{form}", "arch": arch.name, "form": form, "path": str(path),
            "folder": str(path.parent), "hf_folder": str(hf_folder), "description": form_description(arch, form),
            "config": arch.summary(), "inputs": inputs, "outputs": outputs, "past_inputs": past,
            "present_outputs": present, "position_ids": "position_ids" in specs,
            "mask_dims": specs["attention_mask"]["dims"],
            "opset": {(o.domain or ""): o.version for o in model.opset_import},
            "op_counts": dict(sorted(ops.items())),
            "contrib_ops": {k: v for k, v in sorted(ops.items()) if not k.startswith(":")},
            "bytes": sum(p.stat().st_size for p in dict.fromkeys(files)), "weight_bytes": _weight_bytes(model),
            "genai_config": _genai_config(path.parent / "genai_config.json")}


def _genai_config(path: Path) -> dict | None:
    """The parts of a builder's genai_config.json a runner needs (None for the hf form)."""
    if not path.exists():
        return None
    config = json.loads(path.read_text())
    decoder = config["model"]["decoder"]
    return {"path": str(path), "inputs": decoder["inputs"], "outputs": decoder["outputs"],
            "context_length": config["model"]["context_length"],
            "past_present_share_buffer": config["search"].get("past_present_share_buffer"),
            "eos_token_id": config["model"].get("eos_token_id")}


def form_description(arch: Arch, form: str) -> str:
    if form == "hf":
        return (f"{arch.description}; optimum-cli export onnx --task text-generation-with-past (float32): "
                "one decoder file taking past length 0 to max")
    return (f"{arch.description}; onnxruntime_genai.models.builder -p {form.split('_')[1]} -e cpu "
            "(GroupQueryAttention, SkipSimplifiedLayerNormalization" + (", MatMulNBits)" if form.endswith("int4")
                                                                        else ")"))


# -- making the models (in the venvs; torch only inside these functions) ---------------------
class Skip(Exception):
    pass


def _child(python: str, function: str, **kwargs) -> dict:
    """``function(**kwargs)`` of this module run by ``python``; its result comes back as JSON on stdout's last line."""
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import generate_models as g; "
            f"print(json.dumps(g.{function}(**json.loads(sys.argv[1]))))")
    done = subprocess.run([python, "-c", code, json.dumps(kwargs)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{function} in {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _command(args: list, what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(map(str, args))}):\n{(done.stdout + done.stderr)[-3000:]}")


def write_tokenizer(folder: str) -> None:
    """The WordLevel tokenizer (see the docstring), saved by PreTrainedTokenizerFast.save_pretrained."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(list(SPECIAL) + [f"w{i}" for i in range(VOCAB - len(SPECIAL))])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>", model_max_length=MAX_POSITIONS)
    fast.save_pretrained(folder)


def make_hf_model(arch: str, folder: str, prompt: list, steps: int) -> dict:
    """Writes the seeded random-weight transformers model and the tokenizer to ``folder``; returns transformers'
    own greedy tokens for ``prompt`` (KV cache, ``steps`` decode steps, no stop at EOS)."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    spec = ARCHS[arch]
    cls = getattr(transformers, spec.model_class)
    model = cls(cls.config_class(**spec.config)).eval()
    with torch.no_grad():  # transformers' init leaves biases at 0 and norm weights at 1: exporters may drop them
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, 0.02)
            elif param.dim() == 1:  # RMSNorm / LayerNorm weights
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
    model.save_pretrained(folder)
    write_tokenizer(folder)
    tokens = []
    with torch.no_grad():
        ids, past = torch.tensor([prompt]), None
        for _ in range(steps + 1):
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            token = int(out.logits[0, -1].argmax())
            tokens.append(token)
            ids = torch.tensor([[token]])
    return {"torch_tokens": tokens, "transformers": transformers.__version__, "torch": torch.__version__}


def genai_greedy(folder: str, prompt: list, steps: int) -> dict:
    """onnxruntime-genai's og.Generator greedy on ``folder``: the generated ids (at most ``steps + 1``)."""
    import onnxruntime_genai as og

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + steps + 1)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray(prompt, dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    sequence = [int(t) for t in generator.get_sequence(0)]
    return {"genai_tokens": sequence[len(prompt):], "onnxruntime_genai": og.__version__}


def make(arch: Arch, form: str, out: Path, force: bool, pythons: dict, made: dict) -> Path:
    """The form's .onnx, written unless cached (``made`` collects what the model-making children return)."""
    hf_folder = out / "hf_models" / arch.name
    meta = hf_folder / "reference.json"
    if force and hf_folder.name not in made.get("_hf_forced", set()):
        shutil.rmtree(hf_folder, ignore_errors=True)
        made.setdefault("_hf_forced", set()).add(hf_folder.name)
    if not meta.exists():
        log(f"{arch.name}: making the transformers model in {hf_folder}")
        tmp = hf_folder.with_name(hf_folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        result = _child(pythons["optimum"], "make_hf_model", arch=arch.name, folder=str(tmp),
                        prompt=prompt_ids(), steps=STEPS)
        (tmp / "reference.json").write_text(json.dumps(result) + "\n")
        shutil.rmtree(hf_folder, ignore_errors=True)
        tmp.rename(hf_folder)
    folder = out / f"{arch.name}_{form}"
    path = folder / "model.onnx"
    if form != "hf" and not arch.genai:
        raise Skip("onnxruntime-genai's model builder has no GPT-2")
    if path.exists() and not force:
        return path
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    started = time.perf_counter()
    if form == "hf":
        _command([pythons["optimum"], "-m", "optimum.commands.optimum_cli", "export", "onnx", "--task",
                  "text-generation-with-past", "--model", str(hf_folder), str(tmp)], "optimum export")
    else:
        with tempfile.TemporaryDirectory(dir=out) as cache:
            _command([pythons["genai"], "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o",
                      str(tmp), "-p", form.split("_")[1], "-e", "cpu", "-c", cache], "onnxruntime-genai builder")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    log(f"{folder.name}: written in {time.perf_counter() - started:.1f} s")
    return path


def verify(entry: dict, pythons: dict, hf_folder: Path) -> dict:
    """Runs ``greedy`` with onnxruntime (and og.Generator on the genai forms) and fills the entry's results."""
    prompt, problems = prompt_ids(), []
    entry.update(prompt=prompt, steps=STEPS, ort_tokens=None, past_length_zero=False)
    try:
        run = ort_runner(Path(entry["path"]))
        entry["ort_tokens"], logits = greedy(run, entry, prompt, STEPS)
        entry["past_length_zero"] = True
        gaps = [float(np.diff(np.sort(step)[-2:])[0]) for step in logits]
        entry["top2_gaps"] = [round(g, 6) for g in gaps]
        entry["min_top2_gap"] = round(min(gaps), 6)
    except Exception as err:  # noqa: BLE001 - a failure is the finding
        problems.append(f"onnxruntime greedy from past length 0: {type(err).__name__}: {str(err)[:500]}")
    import onnxruntime

    reference = json.loads((hf_folder / "reference.json").read_text())
    entry["versions"] = {"onnxruntime": onnxruntime.__version__, "transformers": reference["transformers"],
                         "torch": reference["torch"]}
    entry["torch_tokens"] = reference["torch_tokens"]
    entry["torch_agrees"] = entry["ort_tokens"] == entry["torch_tokens"]
    if entry["form"] == "hf" and entry["ort_tokens"] is not None and not entry["torch_agrees"]:
        problems.append(f"onnxruntime tokens {entry['ort_tokens']} != transformers' {entry['torch_tokens']}")
    if entry["form"].startswith("genai"):
        entry.update(genai_tokens=None, genai_agrees=False, genai_note="")
        try:
            result = _child(pythons["genai"], "genai_greedy", folder=entry["folder"], prompt=prompt, steps=STEPS)
            tokens = entry["genai_tokens"] = result["genai_tokens"]
            entry["versions"]["onnxruntime_genai"] = result["onnxruntime_genai"]
            ort = entry["ort_tokens"] or []
            if len(tokens) < STEPS + 1:
                entry["genai_note"] = f"og.Generator stopped after {len(tokens)} tokens (end-of-sequence id {EOS})"
                entry["genai_agrees"] = tokens == ort[:len(tokens)]
            else:
                entry["genai_agrees"] = tokens == ort
            if not entry["genai_agrees"]:
                problems.append(f"og.Generator tokens {tokens} != onnxruntime loop's {ort}")
        except Exception as err:  # noqa: BLE001
            problems.append(f"og.Generator: {type(err).__name__}: {str(err)[:1500]}")
    entry["problems"] = problems
    entry["verified"] = not problems
    return entry


def read_catalog(folder: Path) -> list:
    """The entries of ``folder/catalog.jsonl`` ([] when there is none)."""
    path = folder / "catalog.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv=None) -> int:
    parser = deployed.catalog_parser(__doc__.splitlines()[0], "generate", ARCHS, FORMS)
    parser.add_argument("--optimum-python", default=OPTIMUM_PYTHON,
                        help=f"the venv with optimum-onnx and torch (default {OPTIMUM_PYTHON})")
    parser.add_argument("--genai-python", default=GENAI_PYTHON,
                        help=f"the venv with onnxruntime-genai and torch (default {GENAI_PYTHON})")
    args = parser.parse_args(argv)
    archs, forms = deployed.chosen(parser, args, ARCHS, FORMS)
    pythons = {"optimum": args.optimum_python, "genai": args.genai_python}
    out = (args.out or default_out()).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    kept = {e["name"]: e for e in read_catalog(out)}  # entries of models not checked in this run stay listed
    failed, made = 0, {}
    for arch_name in archs:
        arch = ARCHS[arch_name]
        for form in forms:
            name = f"{arch_name}_{form}"
            try:
                path = make(arch, form, out, args.force, pythons, made)
                entry = describe(arch, form, path, out / "hf_models" / arch_name)
            except Skip as why:
                log(f"SKIP {name}: {why}")
                continue
            except Exception as err:  # noqa: BLE001 - report it and go on
                log(f"FAIL {name}: {type(err).__name__}: {str(err)[:3000]}\n{traceback.format_exc()}")
                failed += 1
                continue
            entry = verify(entry, pythons, out / "hf_models" / arch_name)
            failed += not deployed.record(out, kept, name, entry,
                                          f"ort {entry['ort_tokens']}, torch agrees {entry['torch_agrees']}, "
                                          f"genai agrees {entry.get('genai_agrees')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

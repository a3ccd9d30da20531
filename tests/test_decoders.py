"""Decoder LLM generation with a KV cache, compiled by byoc against onnxruntime, without torch/transformers/optimum:
the small random-weight models of tests/decoder_models.py in optimum's export form (Llama with GQA and rotary,
GPT-2) and onnxruntime-genai's builder form (GroupQueryAttention, float32 and int4 MatMulNBits). No ``dims=``
is given: the artifact runs every batch, sequence and past length, the past from length 0.

Tolerance: 1e-3 absolute on logits of magnitude ~10 and on the caches (float32 sums in other orders, oneDNN's
and MLAS's own exp/tanh; the float forms agree within ~1e-5 in practice). The builders assert every step's
top-2 logit gap is above 1e-3, so equal tokens are implied, and asserted too. For int4 the same bound holds:
with accuracy_level absent onnxruntime's MatMulNBits computes in float32 on the dequantized weight (within 5e-6
of the float model of the dequantized weights, ``genai_llama(4, dequantized=True)``), as byoc does.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import byoc
from byoc.errors import InputShapeError

import decoder_models as dm

ATOL = 1e-3

FORMS = {
    "hf_llama": dm.hf_llama,
    "hf_gpt2": dm.hf_gpt2,
    "genai_fp32": dm.genai_llama,
    "genai_int4": functools.partial(dm.genai_llama, 4),
}


@pytest.fixture(scope="session")
def decoder_model(tmp_path_factory):
    """``decoder_model(form) -> (ModelProto, path)``, each built (and its margin checked) once per session."""
    folder = tmp_path_factory.mktemp("decoders")
    cache: dict = {}

    def get(form):
        if form not in cache:
            model = FORMS[form]()
            path = folder / f"{form}.onnx"
            path.write_bytes(model.SerializeToString())
            cache[form] = (model, path)
        return cache[form]

    return get


@pytest.fixture(scope="module")
def compiled(decoder_model):
    """``compiled(form, vendor) -> (ModelProto, artifact, onnxruntime runner)``, compiled once per module."""
    cache: dict = {}

    def get(form, vendor="dnnl"):
        if (form, vendor) not in cache:
            model, path = decoder_model(form)
            cache[form, vendor] = (model, byoc.compile(str(path), vendors=[vendor]), dm.ort_runner(path))
        return cache[form, vendor]

    return get


def _runner(model, artifact):
    names = [vi.name for vi in model.graph.output]
    return lambda feeds: dict(zip(names, artifact.run(feeds)))


GENERATIONS = [("hf_llama", "dnnl"), ("hf_gpt2", "dnnl"), ("genai_fp32", "dnnl"), ("genai_int4", "dnnl"),
               ("hf_llama", "c_source"), ("genai_fp32", "c_source")]


@pytest.mark.parametrize("form,vendor", GENERATIONS, ids=[f"{f}-{v}" for f, v in GENERATIONS])
def test_greedy_generation_matches_onnxruntime(compiled, form, vendor):
    """A prefill of 5 prompt ids with an empty past (length 0), then 7 one-token steps feeding the presents back:
    byoc's 8 tokens are onnxruntime's, and every step's last-position logits are within ATOL."""
    model, artifact, ort = compiled(form, vendor)
    assert any(part.vendor == vendor for part in artifact.plan.partitions), artifact.plan
    want_tokens, want_logits = dm.greedy(model, ort)
    tokens, logits = dm.greedy(model, _runner(model, artifact))
    assert tokens == want_tokens
    for step, (got, want) in enumerate(zip(logits, want_logits)):
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"step {step}")


DECODES = [(form, past) for form in FORMS for past in (1, 7)]


@pytest.mark.parametrize("form,past_length", DECODES, ids=[f"{f}-past{p}" for f, p in DECODES])
def test_decode_from_a_past_of_batch_2(compiled, form, past_length):
    """One token per row after a random past of ``past_length`` for a batch of 2: logits and every present
    within ATOL of onnxruntime's. The optimum forms also get a left-padded first row (its mask starts with a 0)
    when the past is long enough; onnxruntime-genai's GroupQueryAttention reads the mask as per-row lengths of a
    right-padded cache, so its mask stays all ones."""
    model, artifact, ort = compiled(form)
    heads, head_dim = dm.cache_shape(model)
    rng = np.random.default_rng(past_length)
    past = {name: rng.standard_normal((2, heads, past_length, head_dim)).astype(np.float32)
            for name, _ in dm.past_names(model)}
    mask = np.ones((2, past_length + 1), np.int64)
    if form.startswith("hf_") and past_length > 1:
        mask[0, :2] = 0
    feeds = dm.feeds_for(model, np.array([[5], [99]], np.int64), past, past_length, mask)
    want = ort(feeds)
    got = _runner(model, artifact)(feeds)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("form", ["hf_llama", "genai_fp32"])
def test_the_past_length_may_be_0_and_every_other_dim_starts_at_1(compiled, form):
    _, artifact, _ = compiled(form)
    assert artifact.dims["past_sequence_length"].min == 0
    others = {name: d.min for name, d in artifact.dims.items() if name != "past_sequence_length"}
    assert others and set(others.values()) == {1}, others


@pytest.mark.parametrize("form", ["hf_llama", "genai_fp32"])
def test_a_past_of_the_wrong_head_count_is_an_input_shape_error(compiled, form):
    model, artifact, _ = compiled(form)
    heads, head_dim = dm.cache_shape(model)
    past = {name: np.zeros((1, heads + 1, 0, head_dim), np.float32) for name, _ in dm.past_names(model)}
    with pytest.raises(InputShapeError) as caught:
        artifact.run(dm.feeds_for(model, np.asarray([dm.PROMPT], np.int64), past, 0))
    assert caught.value.input.startswith("past_key_values.") and caught.value.dim == "1", str(caught.value)


def test_the_two_llama_forms_of_one_seed_are_one_model(decoder_model):
    """The builders' own check (onnxruntime only): the optimum and genai Llama of one seed draw the same weights,
    so their generations agree, which pins the hand-built rotary, GQA and norms of each form to the other's."""
    hf, _ = decoder_model("hf_llama")
    genai, _ = decoder_model("genai_fp32")
    hf_tokens, hf_logits = dm.greedy(hf, dm.ort_runner(hf))
    genai_tokens, genai_logits = dm.greedy(genai, dm.ort_runner(genai))
    assert hf_tokens == genai_tokens
    np.testing.assert_allclose(np.stack(hf_logits), np.stack(genai_logits), rtol=0, atol=1e-4)


# -- byoc.Generator ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("form,where", [("hf_llama", "end"), ("hf_gpt2", "end"), ("genai_fp32", "length")])
@pytest.mark.parametrize("bucket", [64, 3])
def test_the_generator_gives_onnxruntimes_tokens_from_padded_buffers(compiled, form, where, bucket):
    """Generator.generate equals onnxruntime's greedy loop, with the cache in buffers padded to buckets (3 tokens:
    the buffers grow several times in one generation). The padding was checked on the model at the first step:
    Concat caches put a call's new entries after the whole past, GroupQueryAttention after the cached tokens."""
    model, artifact, ort = compiled(form)
    want, _ = dm.greedy(model, ort, steps=dm.STEPS)
    generator = byoc.Generator(artifact, bucket=bucket)
    assert generator.generate(dm.PROMPT, dm.STEPS + 1)[0].tolist() == want
    assert generator.padded and generator.new_entries == where
    heads, head_dim = dm.cache_shape(model)
    assert generator.length == len(dm.PROMPT) + dm.STEPS
    # the model's own cache (keys and values of every layer) at a capacity of whole buckets, at most a bucket spare
    slots, spare = divmod(generator.cache_bytes, len(dm.past_names(model)) * heads * head_dim * 4)
    assert spare == 0 and slots % bucket == 0 and generator.length <= slots <= generator.length + bucket


def test_the_generator_without_padding_feeds_each_present_back(compiled):
    model, artifact, ort = compiled("hf_llama")
    want, want_logits = dm.greedy(model, ort, steps=3)
    generator = byoc.Generator(artifact, pad_cache=False)
    logits = [generator.prefill(dm.PROMPT)[0]]
    tokens = [int(logits[-1].argmax())]
    for _ in range(3):
        logits.append(generator.step([tokens[-1]])[0])
        tokens.append(int(logits[-1].argmax()))
    assert tokens == want and generator.padded is False
    np.testing.assert_allclose(np.stack(logits), np.stack(want_logits), atol=ATOL)


def test_generation_refuses_what_it_cannot_run(compiled):
    from byoc.errors import GenerationError
    from models import single_op

    _, artifact, _ = compiled("hf_gpt2")
    generator = byoc.Generator(artifact)
    with pytest.raises(GenerationError, match="before prefill"):
        generator.step([1])
    with pytest.raises(GenerationError, match="positions"):  # GPT-2's learned positions: 128 of them here
        generator.generate(np.ones((1, generator.max_length + 1), np.int64), 1)
    with pytest.raises(GenerationError, match="no token input"):
        byoc.Generator(byoc.compile(single_op("Relu", {"x": [1, 4]}, [1, 4]), vendors=[]))


def test_a_token_past_the_vocabulary_is_refused_in_a_bound_step(compiled):
    _, artifact, _ = compiled("genai_fp32")
    generator = byoc.Generator(artifact)
    generator.prefill(dm.PROMPT)
    for _ in range(3):  # past the first step, which decides the padding: steps run bound (Artifact.bind)
        generator.step([1])
    vocabulary = artifact.index_inputs[generator.signature.input_ids][0]
    with pytest.raises(byoc.InputError, match="outside the range"):  # the generator checks, not the bound run
        generator.step([vocabulary])
    assert generator.length == len(dm.PROMPT) + 3

"""Greedy generation with a decoder's KV cache: one prefill call, then one call per token.

A compiled partition is specialized per input shape on its first call at that shape (oneDNN's primitives are),
so a past that grows by one token every call would be a new shape every call: about 8 ms each for a 4-layer
decoder whose step takes 1.5 ms. The :class:`Generator` keeps the cache in buffers whose length grows in
buckets (64 tokens by default) and hands a buffer whole to every call as the past. The slots past the tokens
generated so far are zeros that the attention mask leaves out (mask 0), so a call sees one shape per bucket;
after each call the new tokens' keys and values, the last ``sequence`` entries of each present output, are
copied into their slots. The buffers are the caller's arrays, passed without a copy
(:mod:`byoc.host.run_io`). A step on them runs bound (:meth:`byoc.Artifact.bind`): the token, mask and position
arrays are rewritten in place and handed over as the same tensors while the shapes stay, so a step is not checked
and converted input by input again (about 40 us of a 0.25 ms step of a small int4 decoder).

That a masked slot changes nothing is checked on the model itself, not assumed: the first step after a prefill
runs both ways, on the prefill's own cache and on the buffer, and keeps the buffer only if the logits agree. That
check also finds where a padded call put the new entries: after the whole past (Hugging Face's exports, whose
Concat appends them) or after the cached tokens (onnxruntime-genai's GroupQueryAttention, which counts them from
the mask). A model whose attention does not leave masked slots out is generated without padding: each call's
past is the previous call's present, with no copy, and a new shape every call.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from byoc.errors import GenerationError
from byoc.host.hand_over import aligned_zeros
from byoc.generation.signature import DecoderSignature

__all__ = ["Generator"]

#: the padded and the unpadded step agree when their logits and new cache entries are within this share of the
#: largest (float32 sums taken in another order differ by about 1e-6 of it, and by up to about 1e-3 where a layer
#: quantizes its activations to int8 and such a difference flips a rounding; a mask that is not read moves the
#: attention by whole parts of it)
PADDING_TOLERANCE = 2e-3


class Generator:
    """Generate tokens greedily from a compiled decoder (``byoc.compile`` of an exported decoder with its past).

    ``max_length`` bounds the prompt plus generated tokens (default: the size of the position table that
    ``position_ids`` indexes, where the model has one). ``bucket`` is the growth step of the cache buffers, in
    tokens. ``pad_cache=False`` never pads; by default the first step after a prefill checks on the model that
    padded buffers give the same logits (see the module docstring).

    >>> generator = Generator(byoc.compile("decoder/model.onnx", vendors=["dnnl"]))
    >>> tokens = generator.generate([[1, 17, 42]], max_new_tokens=32)
    """

    def __init__(self, artifact, max_length: Optional[int] = None, bucket: int = 64,
                 pad_cache: bool = True):
        self.artifact = artifact
        self.signature = DecoderSignature.of(artifact.inputs, artifact.outputs)
        if bucket < 1:
            raise GenerationError(f"bucket={bucket}: the cache grows by at least one token")
        self.bucket = bucket
        positions = artifact.index_inputs.get(self.signature.position_ids or "")
        self.max_length = max_length if max_length is not None else (positions[0] if positions else None)
        # None: decided at the first step after a prefill; without a mask nothing can leave padding out
        self._mode = None if pad_cache and self.signature.attention_mask else False
        self._new_at: Optional[str] = None  # where a padded call's present holds the new entries: "end", "length"
        self._output_index = {spec.name: i for i, spec in enumerate(artifact.outputs)}
        self._input_dtypes = {spec.name: np.dtype(spec.dtype) for spec in artifact.inputs}
        self.reset()

    # -- state ------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the cache: the next call is a prefill."""
        self._cache: list[np.ndarray] = []
        self._unpadded: Optional[list[np.ndarray]] = None  # the prefill's own cache, for the padding check
        self.length = 0
        self._bound: Optional[_BoundStep] = None

    @property
    def padded(self) -> Optional[bool]:
        """Whether the cache is kept in padded buffers (None before the first step decides it)."""
        return self._mode

    @property
    def new_entries(self) -> Optional[str]:
        """Where a padded call's present outputs hold the tokens it was fed: ``"end"``, after the whole past (a
        Concat's cache), or ``"length"``, after the cached tokens (GroupQueryAttention); None before the first
        step decides it, or without padding."""
        return self._new_at

    @property
    def cache_bytes(self) -> int:
        """Bytes the cache holds now (its buffers, including the padding of the last bucket)."""
        return sum(a.nbytes for a in self._cache)

    # -- calls ------------------------------------------------------------------------------------
    def prefill(self, prompt) -> np.ndarray:
        """Start a generation from ``prompt`` (token ids, ``[batch, length]`` or one sequence); returns the
        logits of its last position, ``[batch, vocab]``."""
        ids = self._ids(prompt)
        self.reset()
        batch = ids.shape[0]
        empty = [np.zeros((batch, e.heads, 0, e.head_size), self._input_dtypes[e.past]) for e in self.signature.cache]
        logits, presents = self._call(ids, empty, 0, 0)
        self.length = ids.shape[1]
        if self._mode is False:
            self._cache = presents
        else:
            self._unpadded = presents if self._mode is None else None
            self._cache = [self._grown(p, self.length, self._capacity(self.length + 1)) for p in presents]
        return logits

    def step(self, tokens) -> np.ndarray:
        """Feed the next token of each row (``[batch]``, or ``[batch, n]`` for n tokens at once); returns the
        logits of the last position fed."""
        if self.length == 0:
            raise GenerationError("step() before prefill(): a generation starts from a prompt")
        ids = np.asarray(tokens, dtype=self._input_dtypes[self.signature.input_ids])
        ids = ids.reshape(ids.shape[0], -1) if ids.ndim else ids.reshape(1, 1)
        if ids.shape[0] != self._cache[0].shape[0]:
            raise GenerationError(f"step() got {ids.shape[0]} rows of tokens for a generation of batch "
                                  f"{self._cache[0].shape[0]}")
        self._check_length(self.length + ids.shape[1])
        if self._mode is False:
            logits, self._cache = self._call(ids, self._cache, self.length, self.length)
        else:
            logits = self._padded_step(ids)
        self.length += ids.shape[1]
        return logits

    def generate(self, prompt, max_new_tokens: int, eos_token_id: Optional[int] = None) -> np.ndarray:
        """Greedy generation: the ``[batch, n]`` tokens that follow ``prompt``, at most ``max_new_tokens``, fewer
        when every row has produced ``eos_token_id``."""
        if max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens={max_new_tokens}: generate at least one token")
        ids = self._ids(prompt)
        self._check_length(ids.shape[1] + max_new_tokens - 1)
        logits = self.prefill(ids)
        tokens = []
        for index in range(max_new_tokens):
            chosen = logits.argmax(-1)
            tokens.append(chosen)
            if (eos_token_id is not None and bool(np.all(chosen == eos_token_id))) or index == max_new_tokens - 1:
                break
            logits = self.step(chosen)
        return np.stack(tokens, axis=1)

    # -- the padded cache -------------------------------------------------------------------------
    def _capacity(self, length: int) -> int:
        capacity = -(-length // self.bucket) * self.bucket
        return capacity if self.max_length is None else max(min(capacity, self.max_length), length)

    def _padded_step(self, ids: np.ndarray) -> np.ndarray:
        new = ids.shape[1]
        capacity = self._cache[0].shape[2]
        end = self.length + new
        if self._mode is None:
            logits, presents = self._call(ids, self._cache, self.length, capacity)
            exact, unpadded = self._call(ids, self._unpadded or [], self.length, self.length)
            self._unpadded = None
            self._new_at = _where_new_entries(logits, presents, exact, unpadded, self.length, capacity, new)
            self._mode = self._new_at is not None
            if not self._mode:  # this model's attention does not leave masked slots out: no padding from here on
                self._cache = unpadded
                return exact
        else:
            logits, presents = self._bound_call(ids, capacity)
        start = capacity if self._new_at == "end" else self.length
        if end > capacity:
            self._cache = [self._grown(c, self.length, self._capacity(end + 1)) for c in self._cache]
            self._bound = None
        for buffer, present in zip(self._cache, presents):
            buffer[:, :, self.length:end] = present[:, :, start:start + new]
        return logits

    def _bound_call(self, ids: np.ndarray, capacity: int) -> tuple[np.ndarray, list]:
        """:meth:`_call` on the cache buffers (``capacity`` slots), run bound: the arrays of the last call's shapes
        rewritten in place."""
        self.artifact.check_index_input(self.signature.input_ids, ids)
        if self._bound is None or self._bound.ids.shape != ids.shape or self._bound.capacity != capacity:
            self._bound = _BoundStep(self.artifact, self.signature, self._input_dtypes, ids.shape, self._cache)
        outputs = self._bound.run(ids, self.length)
        logits = outputs[self._output_index[self.signature.logits]]
        return logits[:, -1], [outputs[self._output_index[entry.present]] for entry in self.signature.cache]

    def _grown(self, cache: np.ndarray, length: int, capacity: int) -> np.ndarray:
        alignment = self.artifact.input_alignment  # so that a bound run reads the buffer in place
        grown = aligned_zeros(cache.shape[:2] + (capacity,) + cache.shape[3:], cache.dtype, alignment)
        grown[:, :, :length] = cache[:, :, :length]
        return grown

    # -- one call ---------------------------------------------------------------------------------
    def _call(self, ids: np.ndarray, past: list, length: int, past_slots: int) -> tuple[np.ndarray, list]:
        """Run the model on ``ids`` after ``length`` tokens whose cache is ``past`` (``past_slots`` long, the
        slots from ``length`` on masked out); returns the last position's logits and the present outputs."""
        sig = self.signature
        batch, new = ids.shape
        feeds: dict[str, np.ndarray] = {sig.input_ids: ids}
        if sig.attention_mask:
            mask = np.ones((batch, past_slots + new), self._input_dtypes[sig.attention_mask])
            mask[:, length:past_slots] = 0
            feeds[sig.attention_mask] = mask
        if sig.position_ids:
            positions = np.arange(length, length + new, dtype=self._input_dtypes[sig.position_ids])
            feeds[sig.position_ids] = np.broadcast_to(positions, (batch, new)).copy()
        feeds.update({entry.past: array for entry, array in zip(sig.cache, past)})
        outputs = self.artifact.run(feeds)
        logits = outputs[self._output_index[sig.logits]]
        return logits[:, -1], [outputs[self._output_index[entry.present]] for entry in sig.cache]

    def _ids(self, prompt) -> np.ndarray:
        ids = np.asarray(prompt, dtype=self._input_dtypes[self.signature.input_ids])
        if ids.ndim == 1:
            ids = ids[None]
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise GenerationError(f"a prompt is [batch, length] token ids with length >= 1, got shape {ids.shape}")
        self._check_length(ids.shape[1])
        return ids

    def _check_length(self, length: int) -> None:
        if self.max_length is not None and length > self.max_length:
            raise GenerationError(f"{length} tokens are more than the model's {self.max_length} positions "
                                  f"(max_length); shorten the prompt or generate fewer tokens")


class _BoundStep:
    """A generator's padded step at one shape (rows, tokens fed, cache capacity), bound to its artifact
    (:meth:`byoc.Artifact.bind`): the token, mask and position arrays are written in place before each run."""

    def __init__(self, artifact, sig: DecoderSignature, dtypes: dict, shape: tuple, cache: list[np.ndarray]):
        batch, new = shape
        self.capacity = capacity = cache[0].shape[2]
        alignment = artifact.input_alignment
        self.ids = aligned_zeros(shape, dtypes[sig.input_ids], alignment)
        feeds = {sig.input_ids: self.ids}
        self.mask = self.positions = None
        self.mask_upto = 0  # the mask's slots [0, mask_upto) are 1
        if sig.attention_mask:
            self.mask = feeds[sig.attention_mask] = aligned_zeros((batch, capacity + new), dtypes[sig.attention_mask],
                                                                     alignment)
            self.mask[:, capacity:] = 1
        if sig.position_ids:
            self.positions = feeds[sig.position_ids] = aligned_zeros(shape, dtypes[sig.position_ids], alignment)
        feeds.update({entry.past: buffer for entry, buffer in zip(sig.cache, cache)})
        self.artifact = artifact
        self.tensors = self.artifact.bind(feeds)

    def run(self, ids: np.ndarray, length: int) -> list:
        self.ids[...] = ids
        if self.mask is not None and self.mask_upto != length:
            self.mask[:, :length] = 1
            self.mask[:, length:self.capacity] = 0
            self.mask_upto = length
        if self.positions is not None:
            self.positions[...] = np.arange(length, length + self.ids.shape[1])
        return self.artifact.run_bound(self.tensors)


def _where_new_entries(logits: np.ndarray, presents: list, exact: np.ndarray, unpadded: list, length: int,
                       capacity: int, new: int) -> Optional[str]:
    """Where a padded call put the new entries of its cache, "end" (after the whole past, as a Concat does) or
    "length" (after the cached tokens: onnxruntime's GroupQueryAttention), judged against the unpadded call of
    the same tokens; None when its logits differ, so padding changes what this model computes."""
    def close(got: np.ndarray, want: np.ndarray) -> bool:
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        return bool(np.abs(got - want).max(initial=0.0) <= PADDING_TOLERANCE * scale)

    if not close(logits, exact):
        return None
    # "length" first: byoc's GroupQueryAttention leaves the Concat's copy of the new entries at the end too (slots
    # onnxruntime leaves unspecified), while a Concat's present holds the buffer's padding at "length"
    for place, start in (("length", length), ("end", capacity)):
        if all(close(p[:, :, start:start + new], u[:, :, length:length + new]) for p, u in zip(presents, unpadded)):
            return place
    return None

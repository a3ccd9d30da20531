"""What a decoder's inputs and outputs are for: the token ids, the attention mask, the positions, the logits and
the cache, as pairs of a past input and the present output that the next call reads as that past.

Both forms that deploy decoders today are read by their names:

- Hugging Face's exporter (optimum, ``text-generation-with-past``): ``input_ids``, ``attention_mask``
  ``[batch, past + sequence]``, ``position_ids``, ``past_key_values.N.key``/``.value`` in; ``logits`` and
  ``present.N.key``/``.value`` out.
- onnxruntime-genai's model builder: the same names without ``position_ids`` (its GroupQueryAttention works
  the positions out from the mask).

A cache input is ``[batch, kv heads, past length, head size]``; its past length is one symbolic dim, which
every cache input shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from byoc.errors import GenerationError
from byoc.pipeline.frontend.onnx_model import TensorSpec

__all__ = ["CacheEntry", "DecoderSignature"]

_PAST = re.compile(r"^(?:past_key_values|past)[._](\d+)[._](key|value)$")
_PRESENT = re.compile(r"^(?:present_key_values|present)[._](\d+)[._](key|value)$")
_TOKENS = ("input_ids",)
_MASK = ("attention_mask",)
_POSITIONS = ("position_ids",)


@dataclass(frozen=True)
class CacheEntry:
    """One cached tensor: the past input a call reads, the present output it writes (past + the call's
    sequence), its kv heads and head size."""

    past: str
    present: str
    heads: int
    head_size: int


@dataclass(frozen=True)
class DecoderSignature:
    """The roles of a decoder's inputs and outputs (:meth:`of` reads them from a model's signature)."""

    input_ids: str
    attention_mask: Optional[str]
    position_ids: Optional[str]
    logits: str
    cache: tuple[CacheEntry, ...]
    past_dim: str  #: the symbolic dim of the cache inputs' past length

    @classmethod
    def of(cls, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> "DecoderSignature":
        """The roles in a model of these inputs and outputs, or a :class:`GenerationError` saying what is
        missing."""
        by_name = {s.name: s for s in inputs}
        tokens = next((n for n in _TOKENS if n in by_name), None)
        if tokens is None:
            raise GenerationError(f"the model has no token input {' or '.join(map(repr, _TOKENS))}: its inputs are "
                                  f"{sorted(by_name)}; generation needs a decoder with a KV cache")
        presents = {(m.group(1), m.group(2)): s for s in outputs if (m := _PRESENT.match(s.name))}
        cache, past_dims = [], set()
        for spec in inputs:
            found = _PAST.match(spec.name)
            if not found:
                continue
            present = presents.get((found.group(1), found.group(2)))
            if present is None:
                raise GenerationError(f"cache input {spec.name!r} has no present output of layer {found.group(1)} "
                                      f"to read it from: the outputs are {[s.name for s in outputs]}")
            shape = spec.shape
            if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int) \
                    or not isinstance(shape[2], str):
                raise GenerationError(f"cache input {spec.name!r} is {spec.describe()}; a cache is [batch, kv heads, "
                                      "past length, head size] with a symbolic past length")
            past_dims.add(shape[2])
            cache.append(CacheEntry(spec.name, present.name, shape[1], shape[3]))
        if not cache:
            raise GenerationError(f"the model has no cache inputs (past_key_values.N.key/value): its inputs are "
                                  f"{sorted(by_name)}; export it with its past (optimum's text-generation-with-past)")
        if len(past_dims) != 1:
            raise GenerationError(f"the cache inputs name {len(past_dims)} past lengths ({sorted(past_dims)}); "
                                  "generation needs one")
        logits = next((s.name for s in outputs if s.name == "logits"), outputs[0].name)
        return cls(tokens, next((n for n in _MASK if n in by_name), None),
                   next((n for n in _POSITIONS if n in by_name), None), logits, tuple(cache), past_dims.pop())

"""Generation with a decoder's KV cache: :class:`Generator` (greedy, the cache in padded buffers where the model
allows) and :class:`DecoderSignature` (which inputs and outputs are the tokens, mask, positions, logits and
cache)."""

from byoc.generation.generator import Generator
from byoc.generation.signature import CacheEntry, DecoderSignature

__all__ = ["CacheEntry", "DecoderSignature", "Generator"]

"""Seeded sample inputs for a model's declared inputs: what ``--verify`` and ``--profile`` run without
``--inputs``, and what measured placement times the model on."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from byoc.errors import InputError
from byoc.pipeline.frontend.onnx_model import TensorSpec

SEED = 0
#: The size verify gives an unbounded symbolic dim: small, and unlike the 1 an exporter traces with.
UNBOUNDED_VERIFY_SIZE = 3
#: The tensors of a sample sequence input.
SEQUENCE_SAMPLE_LENGTH = 2


def random_inputs(specs: Sequence[TensorSpec], seed: int = SEED, sizes: Mapping[str, int] | None = None
                  ) -> dict[str, np.ndarray]:
    """Reproducible inputs: normal floats, small non-negative integers, random booleans; each symbolic dim
    at its size in ``sizes``. A sequence input is a list of :data:`SEQUENCE_SAMPLE_LENGTH` such arrays (of 3
    elements each where the model declares no rank)."""
    rng = np.random.default_rng(seed)
    arrays: dict = {}
    for spec in specs:
        if spec.sequence:
            element = TensorSpec(spec.name, spec.shape or (3,), spec.dtype)
            arrays[spec.name] = [random_inputs([element], int(rng.integers(1 << 30)), sizes)[spec.name]
                                 for _ in range(SEQUENCE_SAMPLE_LENGTH)]
            continue
        dtype = np.dtype(spec.dtype)
        shape = tuple(d if isinstance(d, int) else (sizes or {}).get(d, UNBOUNDED_VERIFY_SIZE) for d in spec.shape)
        if dtype.kind == "f" or dtype.name == "bfloat16":  # ml_dtypes' bfloat16 is of kind "V" to numpy
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            arrays[spec.name] = rng.integers(0, 4, size=shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.random(shape) < 0.5
        else:
            raise InputError(f"cannot make random values for input {spec.name!r} of dtype {spec.dtype}; "
                             "pass --inputs FILE.npz")
    return arrays

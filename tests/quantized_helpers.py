"""What the tests of quantized models share (tests/test_quantized_*.py): the residual CNN quantized in each
format (the ``quantized`` fixture), seeded inputs, and onnxruntime's outputs as the reference.

Models are quantized by onnxruntime.quantization (tests/quantized_models.py).
Every result is compared with onnxruntime running the same quantized model
twice, within one quantum of the output: with its integer kernels (QDQ units
fused into QLinearConv and friends), and with graph optimizations off, which
computes each Quantize/DequantizeLinear and float op as ONNX defines them.
Per-channel models are quantized with ``reduce_range`` (7-bit weights), as
onnxruntime advises on CPUs without VNNI; with full-range weights its AVX2
kernels saturate (measured: up to 22 quanta from its own unfused run), and
byoc follows the ONNX definition (test_full_range_weights_follow_the_definition,
in tests/test_quantized_import.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from quantized_models import output_scale, quantize, residual_cnn

FORMATS = [("QDQ", False), ("QDQ", True), ("QOperator", False), ("QOperator", True)]  # (format, per channel)


@pytest.fixture(scope="module")
def quantized():
    cache = {}

    def get(fmt: str, per_channel: bool) -> onnx.ModelProto:
        if (fmt, per_channel) not in cache:
            cache[fmt, per_channel] = quantize(residual_cnn(), fmt, per_channel, reduce_range=per_channel)
        return cache[fmt, per_channel]

    return get


def _feed(seed: int = 5, shape=(1, 3, 16, 16)) -> dict:
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


def _ort(model: onnx.ModelProto, feed: dict, integer_kernels: bool = True) -> np.ndarray:
    """onnxruntime's output: with its int8 kernels, or (``integer_kernels=False``) every op as ONNX defines it."""
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not integer_kernels:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None,
                                                                                                            feed)[0]


def _within_one_quantum(model: onnx.ModelProto, artifact, shape, int8_reference: bool = True) -> None:
    """``artifact``'s outputs are within one quantum of onnxruntime's definition of ``model`` and, when
    ``int8_reference``, of onnxruntime's int8 kernels too (see ``_ort_int8_is_a_reference`` in
    tests/test_quantized_dnnl.py)."""
    quantum = output_scale(model)
    for seed in (5, 6):
        feed = _feed(seed, shape)
        got = artifact.run(feed)[0]
        for integer_kernels in (True, False) if int8_reference else (False,):
            expected = _ort(model, feed, integer_kernels)
            assert np.abs(got - expected).max() <= 1.001 * quantum, (integer_kernels, np.abs(got - expected).max())
        assert np.abs(expected).max() > 10 * quantum

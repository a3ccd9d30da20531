"""Quantized (QDQ int8) models with symbolic dims: one artifact runs every batch (and sequence length), with each
quantized unit on its vendor as the float model's ops are.

Models are helper-built float models quantized by onnxruntime.quantization (tests/quantized_models.py), then given
a symbolic batch (and, for the transformer layer, a symbolic sequence), as an exporter's ``dynamic_axes`` leaves
them. The reference is onnxruntime with graph optimizations off (each op as ONNX defines it, as in
tests/quantized_helpers.py): a result counts as correct within one quantum of it, or within onnxruntime's own
int8 run's distance from it (its fused kernels round intermediates differently: 0.29 on the attention layer).
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest

import byoc
from quantized_helpers import _feed, _ort
from quantized_models import (activation_cnn, attention_block, conv1d_net, depthwise_cnn, output_scale, quantize,
                              residual_cnn, transformer_mlp, with_symbolic_dims)

VENDORS = ["dnnl", "c_source"]
_QDQ = ("relax.quantize", "relax.dequantize")


def _compiled(model: onnx.ModelProto, vendors: list[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return byoc.compile(model, vendors=vendors, strict=True)


def _float_partitions(model: onnx.ModelProto, vendor: str) -> int:
    """How many partitions the float model has on ``vendor`` (with no op on the host)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=[vendor])
    assert not plan.host_ops
    return len(plan.partitions)


def _one_partition(artifact, vendor: str) -> None:
    """One partition on ``vendor``, and no op on the host: no QuantizeLinear or DequantizeLinear either."""
    plan = artifact.plan
    host = [(d.op, d.node.name if d.node is not None else None) for d in plan.host_ops]
    assert not [h for h in host if h[0] in _QDQ], host
    assert [p.vendor for p in plan.partitions] == [vendor] and not host, (byoc.report(plan), host)


def _matches_the_definition(model: onnx.ModelProto, artifact, shapes, seeds=(5, 6)) -> None:
    """At each shape, ``artifact``'s output is within one quantum of onnxruntime's definition of ``model``, or
    no further from it than onnxruntime's own int8 run."""
    quantum = output_scale(model)
    for shape in shapes:
        for seed in seeds:
            feed = _feed(seed, shape)
            got = artifact.run(feed)[0]
            want = _ort(model, feed, integer_kernels=False)
            assert got.shape == want.shape
            ort_error = float(np.abs(_ort(model, feed) - want).max())
            error = float(np.abs(got - want).max())
            assert error <= max(1.001 * quantum, ort_error), (shape, seed, error, ort_error, quantum)
            assert np.abs(want).max() > 10 * quantum


# (float model, input shape at batch 1, format, per channel, reduce_range, activation type)
CNNS = {
    "residual-per-tensor-7bit": (residual_cnn, (1, 3, 16, 16), "QDQ", False, True, "QUInt8"),
    "residual-full-range": (residual_cnn, (1, 3, 16, 16), "QDQ", False, False, "QUInt8"),
    "depthwise-per-channel": (depthwise_cnn, (1, 3, 32, 32), "QDQ", True, True, "QUInt8"),
    "activations-s8": (activation_cnn, (1, 3, 16, 16), "QDQ", False, True, "QInt8"),
    "conv1d-per-channel-full-range": (conv1d_net, (1, 1, 136), "QDQ", True, False, "QUInt8"),
    # QLinearConv and friends, rewritten into QDQ units; its MaxPool and Flatten run on the uint8 tensors. 7-bit
    # weights: onnxruntime's QLinearConv is the reference here, and without VNNI it saturates full-range ones
    "residual-qoperator": (residual_cnn, (1, 3, 16, 16), "QOperator", False, True, "QUInt8"),
}


@pytest.fixture(scope="module")
def quantized_dynamic():
    cache: dict = {}

    def get(name: str) -> onnx.ModelProto:
        if name not in cache:
            make, _, fmt, per_channel, reduce_range, activations = CNNS[name]
            cache[name] = with_symbolic_dims(quantize(make(), fmt, per_channel, reduce_range=reduce_range,
                                                      activation_type=activations), {0: "batch"})
        return cache[name]

    return get


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("name", list(CNNS))
def test_a_symbolic_batch_keeps_a_quantized_cnn_in_one_partition(quantized_dynamic, name, vendor):
    """A QDQ CNN with a symbolic batch is one partition on dnnl (and on c_source), as its float model is: every
    quantized unit and every lone Q/DQ on the vendor. One artifact runs batch 1 and 3 (oneDNN's primitives are made
    per call shape; the C reads the batch from each call) within a quantum of the definition."""
    model = quantized_dynamic(name)
    make, shape = CNNS[name][:2]
    if vendor == "dnnl":  # c_source has no float conv1d rule: its int8 units take more than its float rules
        assert _float_partitions(with_symbolic_dims(make(), {0: "batch"}), vendor) == 1
    artifact = _compiled(model, [vendor])
    _one_partition(artifact, vendor)
    _matches_the_definition(model, artifact, [(3,) + shape[1:], shape])


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("make, per_channel", [(residual_cnn, False), (depthwise_cnn, True)],
                         ids=["residual", "depthwise-per-channel"])
def test_symbolic_batch_height_and_width_of_a_quantized_cnn(make, per_channel, vendor):
    """A detector's or OCR model's export leaves the image size symbolic too: the convs' and pools' spatial sizes
    are then symbolic, and the int8 units still are one partition, run at three image sizes by one artifact."""
    model = with_symbolic_dims(quantize(make(), per_channel=per_channel, reduce_range=True),
                               {0: "batch", 2: "height", 3: "width"})
    artifact = _compiled(model, [vendor])
    _one_partition(artifact, vendor)
    _matches_the_definition(model, artifact, [(1, 3, 16, 16), (2, 3, 20, 24), (1, 3, 32, 12)], seeds=(5,))


def test_int8_primitives_run_at_each_batch_on_dnnl(quantized_dynamic):
    """With u8 activations and 7-bit weights the convolutions are oneDNN's int8 kernels on every CPU: at each
    batch size the partition's program is made for that shape and still runs them (not a float fallback)."""
    artifact = _compiled(quantized_dynamic("residual-per-tensor-7bit"), ["dnnl"])
    for batch in (2, 1):
        artifact.run(_feed(5, (batch, 3, 16, 16)))
        convs = [s for s in artifact.implementations()["dnnl_0"] if s.startswith("convolution")]
        assert len(convs) == 4 and all(_int8_kernel(s) for s in convs), convs


def _int8_kernel(step: str) -> bool:
    """Whether a oneDNN implementation (``"convolution jit_int8:avx2"``) is an int8 kernel: named so, or of an ISA
    whose only use in a convolution is int8 arithmetic (``brgconv:avx512_core_vnni``, ``brgconv:avx2_vnni``; float
    ones report ``avx512_core`` or ``avx2``)."""
    implementation, _, isa = step.split(" ", 1)[1].partition(":")
    return "int8" in implementation or isa.endswith("_vnni") or "amx" in isa


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("per_channel, reduce_range", [(False, True), (True, False)],
                         ids=["per-tensor-7bit", "per-channel-full-range"])
@pytest.mark.parametrize("make", [attention_block, transformer_mlp])
def test_a_transformer_with_symbolic_batch_and_sequence_is_one_quantized_partition(make, per_channel, reduce_range,
                                                                                      vendor):
    """A quantized transformer layer with symbolic batch and sequence: projections, the heads split and merged by
    Reshape/Transpose units over symbolic shapes, the scores' matmul of two 8-bit activations (its output's last
    dim is the sequence), softmax and residual adds are one partition. One artifact runs three shapes."""
    model = with_symbolic_dims(quantize(make(), per_channel=per_channel, reduce_range=reduce_range),
                               {0: "batch", 1: "seq"})
    assert _float_partitions(with_symbolic_dims(make(), {0: "batch", 1: "seq"}), vendor) == 1
    artifact = _compiled(model, [vendor])
    _one_partition(artifact, vendor)
    _matches_the_definition(model, artifact, [(1, 8, 16), (2, 5, 16), (3, 11, 16)], seeds=(5,))


def test_dnnl_listed_first_takes_the_whole_quantized_model_with_c_source_after_it(quantized_dynamic):
    """``vendors=["dnnl", "c_source"]`` on a symbolic batch: dnnl takes every unit, so nothing is split between
    the two (before, every Q and DQ stayed on the host and the units between them were cut into dnnl and c_source
    pieces: a ResNet-50 in 179 partitions)."""
    model = quantized_dynamic("residual-full-range")
    artifact = _compiled(model, ["dnnl", "c_source"])
    _one_partition(artifact, "dnnl")
    _matches_the_definition(model, artifact, [(2, 3, 16, 16)])


def test_an_exported_symbolic_int8_artifact_runs_other_batches_in_a_fresh_process(quantized_dynamic, tmp_path):
    """The exported library keeps the symbolic batch of its int8 partition: loaded in a new process, it runs a
    batch it never ran before, within a quantum of the definition."""
    model = quantized_dynamic("depthwise-per-channel")
    artifact = _compiled(model, ["dnnl"])
    path = tmp_path / "model.so"
    artifact.export(str(path))
    feed = _feed(7, (4, 3, 32, 32))
    np.save(tmp_path / "x.npy", feed["x"])
    script = ("import sys, numpy as np, byoc\n"
              "artifact = byoc.load(sys.argv[1])\n"
              "np.save(sys.argv[3], artifact.run({'x': np.load(sys.argv[2])})[0])\n")
    run = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    want = _ort(model, feed, integer_kernels=False)
    assert np.abs(np.load(tmp_path / "y.npy") - want).max() <= 1.001 * output_scale(model)

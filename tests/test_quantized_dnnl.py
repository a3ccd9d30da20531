"""Quantized models on dnnl: which oneDNN primitives run a unit (its verbose log), int8 with VNNI or as the
float definition without it (the AVX2 path tested on every machine, oneDNN capped at AVX2 where the CPU
has VNNI), element-wise units as byte tables, and the units dnnl runs in float32 or cannot take.

Models and references as tests/quantized_helpers.py describes: within one quantum of onnxruntime's output,
with its int8 kernels and as ONNX defines each op.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import byoc
from byoc.deploy.targets import host_cpu_features
from quantized_helpers import _feed, _ort, _within_one_quantum
from quantized_models import (activation_cnn, attention_block, deconv_net, output_scale, quantize, residual_cnn,
                              wide_cnn, windowed_conv)


#: Whether the CPU has VNNI (what onnxruntime's int8 kernels use: its ISA cannot be capped), and whether oneDNN
#: may use it here: not when ONEDNN_MAX_CPU_ISA holds it below (the suite run that way stands for an AVX2 machine).
#: By cpuid, as both libraries read it: under an emulated AVX2 CPU, /proc/cpuinfo still names the host's.
CPU_HAS_VNNI = bool(host_cpu_features() & {"avx512vnni", "avxvnni"})
ONEDNN_HAS_VNNI = CPU_HAS_VNNI and os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() not in (
    "SSE41", "AVX", "AVX2", "AVX512_CORE")
#: The oneDNN ISA caps a test runs under: "" (as the process has it) and, where oneDNN has VNNI, AVX2 too, so the
#: path of CPUs without VNNI is tested on every machine (ONEDNN_MAX_CPU_ISA; the runtime reads oneDNN's
#: effective ISA). The oneDNN wheel's x86_64 builds need AVX2 at least for their int8 kernels.
ISA_CAPS = ["", "AVX2"] if ONEDNN_HAS_VNNI else [""]


def _ort_int8_is_a_reference(reduce_range: bool) -> bool:
    """Whether onnxruntime's int8 kernels compute a model's definition here, to within a quantum.

    Without VNNI they sum u8 x s8 pairs in int16, which saturates with full-range weights (the quantizer's
    default): on an AVX2 machine the windowed conv's per-channel full-range weights put them 2 quanta from the
    definition. There only the definition is a reference (onnxruntime's own ISA cannot be capped, oneDNN's can)."""
    return reduce_range or CPU_HAS_VNNI


def _executed(make: str, reduce_range: bool, activation_type: str = "QUInt8", isa: str = "",
              shape: tuple = (1, 3, 16, 16), args: tuple = (), per_channel: bool = False) -> list[str]:
    """oneDNN's log of the primitives one run of ``make(*args)`` (from quantized_models, input of ``shape``),
    quantized per tensor (or ``per_channel``), executes (under oneDNN ISA cap ``isa``, if given)."""
    script = (
        "import sys, warnings; sys.path.insert(0, %r)\n"
        "import numpy as np, byoc\n"
        "from quantized_models import quantize, %s as make\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    model = quantize(make(*%r), per_channel=%r, reduce_range=%r, activation_type=%r)\n"
        "    artifact = byoc.compile(model, vendors=['dnnl'], strict=True)\n"
        "print('RUN', flush=True)\n"
        "artifact.run({'x': np.ones(%r, np.float32)})\n"
    ) % (str(Path(__file__).parent), make, tuple(args), per_channel, reduce_range, activation_type, tuple(shape))
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    log = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert log.returncode == 0, log.stderr[-2000:]
    run = log.stdout.split("RUN\n", 1)[1]  # after the build (whose weight reorders and byte tables are logged too)
    return [line for line in run.splitlines() if line.startswith("onednn_verbose") and ",exec," in line]


def _onednn_log(reduce_range: bool, activation_type: str = "QUInt8", isa: str = "") -> tuple[list, list]:
    """oneDNN's log of one run of the residual CNN quantized per tensor: (convolutions, matmuls) executed."""
    executed = _executed("residual_cnn", reduce_range, activation_type, isa)
    return [x for x in executed if ",convolution," in x], [x for x in executed if ",matmul," in x]


def _under_isa(isa: str, model: onnx.ModelProto, seeds=(5, 6, 7), shape=(1, 3, 16, 16)) -> list[np.ndarray]:
    """``model`` built for dnnl and run on ``seeds``' inputs of ``shape`` (as ``_feed`` makes them) in a process
    whose oneDNN is capped at ``isa``."""
    script = (
        "import sys, warnings, numpy as np, onnx, byoc\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    artifact = byoc.compile(onnx.load_from_string(sys.stdin.buffer.read()), vendors=['dnnl'], strict=True)\n"
        "outs = [artifact.run({'x': np.random.default_rng(s).standard_normal(%r).astype(np.float32)})[0]\n"
        "        for s in %r]\n"
        "np.save(sys.stdout.buffer, np.stack(outs))\n"
    ) % (tuple(shape), tuple(seeds))
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": isa} if isa else dict(os.environ)
    run = subprocess.run([sys.executable, "-c", script], input=model.SerializeToString(), capture_output=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    import io

    return list(np.load(io.BytesIO(run.stdout)))


def test_activation_units_run_on_8_bit_tensors_on_dnnl():
    """Swish, hard-swish and hard-sigmoid units run as byte tables and the squeeze-excitation multiply as a binary
    primitive, all on 8-bit tensors: no float copy of an activation is made but the pooled ones (the two global
    pools go DQ -> mean -> Q) and the model's output."""
    executed = _executed("activation_cnn", True)
    to_float = [x for x in executed if ",reorder," in x and "dst_f32" in x]
    assert len(to_float) == 3, to_float  # the two pools' inputs, the output
    binaries = [x for x in executed if ",binary," in x]
    assert len(binaries) == 2 and all("src_u8" in x and "dst_u8" in x for x in binaries), binaries  # SE, last add
    model = quantize(activation_cnn(), reduce_range=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    _within_one_quantum(model, artifact, (1, 3, 16, 16))
    steps = artifact.implementations()["dnnl_0"]
    assert steps.count("kernel byoc:byte_table") == 3, steps  # the 256-entry tables of the three activations


def _activation_unit(op: str, zero_point: np.ndarray) -> onnx.ModelProto:
    """Q -> DQ -> activation -> Q -> DQ on 8-bit activations of ``zero_point``'s type; "Silu" is x * sigmoid(x),
    "QuantizedSilu" the same with the sigmoid's output quantized (a sigmoid unit, then a multiply unit of two
    8-bit tensors that are both functions of x); "QuantizedHardSwish" x * relu6(x + 3) / 6 as three units."""
    from onnx import TensorProto, helper

    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s_in"),
             numpy_helper.from_array(zero_point, "z_in"),
             numpy_helper.from_array(np.array(0.03, np.float32), "s_out"),
             numpy_helper.from_array(zero_point, "z_out")]
    if op == "Silu":
        body = [helper.make_node("Sigmoid", ["xd"], ["sig"]), helper.make_node("Mul", ["xd", "sig"], ["y"])]
    elif op == "QuantizedSilu":  # onnxruntime's quantizer's SiLU: two units, the sigmoid's output quantized
        inits += [numpy_helper.from_array(np.array(1 / 255, np.float32), "s_sig"),
                  numpy_helper.from_array(np.array(0 if zero_point.dtype == np.uint8 else -128, zero_point.dtype),
                                          "z_sig")]
        body = [helper.make_node("Sigmoid", ["xd"], ["sig"]),
                helper.make_node("QuantizeLinear", ["sig", "s_sig", "z_sig"], ["sig_q"]),
                helper.make_node("DequantizeLinear", ["sig_q", "s_sig", "z_sig"], ["sig_d"]),
                helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd2"]),
                helper.make_node("Mul", ["xd2", "sig_d"], ["y"])]
    elif op == "QuantizedHardSwish":  # PP-OCR's x * relu6(x + 3) / 6 quantized: three units, each of the one before
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                  (("three", 3.0), ("zero", 0.0), ("six", 6.0), ("s_mid", 0.04))]
        body = [helper.make_node("Add", ["xd", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["r"]),
                helper.make_node("QuantizeLinear", ["r", "s_mid", "z_out"], ["r_q"]),
                helper.make_node("DequantizeLinear", ["r_q", "s_mid", "z_out"], ["r_d"]),
                helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd2"]),
                helper.make_node("Mul", ["xd2", "r_d"], ["m"]),
                helper.make_node("QuantizeLinear", ["m", "s_mid", "z_out"], ["m_q"]),
                helper.make_node("DequantizeLinear", ["m_q", "s_mid", "z_out"], ["m_d"]),
                helper.make_node("Div", ["m_d", "six"], ["y"])]
    else:
        body = [helper.make_node(op, ["xd"], ["y"])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]), *body,
             helper.make_node("QuantizeLinear", ["y", "s_out", "z_out"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "z_out"], ["out"])]
    shape = [1, 16, 16, 16]
    graph = helper.make_graph(nodes, "activation_unit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zero_point", [np.array(100, np.uint8), np.array(-20, np.int8)], ids=["u8", "s8"])
@pytest.mark.parametrize("op", ["Sigmoid", "HardSwish", "Tanh", "Silu", "QuantizedSilu", "QuantizedHardSwish"])
def test_element_wise_units_of_one_8_bit_tensor_run_as_a_byte_table_on_dnnl(op, zero_point):
    """A unit whose output depends on its one 8-bit input alone is a 256-entry table the runtime fills with the
    unit's own primitive when the module is made: no oneDNN primitive runs on the tensor but the input's quantize
    and the output's dequantize. A unit reading another unit's table of the same input composes it, and so does a
    unit whose source is another's table (the quantized SiLU and hard-swish are one table each; the tables they
    read are not computed). Every one of the 256 input codes is fed, in every position
    mod 64 (the vector width), and the output is within one quantum of onnxruntime's definition."""
    model = _activation_unit(op, zero_point)
    codes = np.arange(256) + (0 if zero_point.dtype == np.uint8 else -128)
    x = ((codes - int(zero_point)) * 0.05).astype(np.float32)
    feed = {"x": np.stack([np.roll(x, shift) for shift in range(16)]).reshape(1, 16, 16, 16)}
    script = (
        "import sys, warnings, numpy as np, onnx, byoc\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    artifact = byoc.compile(onnx.load_from_string(sys.stdin.buffer.read()), vendors=['dnnl'], strict=True)\n"
        "import tvm_ffi\n"
        "print('RUN', flush=True)\n"
        "np.save(%r, artifact.run({'x': np.load(%r)})[0])\n"
        "print('KERNEL RUNS', tvm_ffi.get_global_func('byoc.dnnl.kernel_runs')())\n")
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", feed["x"])
        run = subprocess.run([sys.executable, "-c", script % (f"{tmp}/y.npy", f"{tmp}/x.npy")],
                             input=model.SerializeToString(), capture_output=True, timeout=300,
                             env={**os.environ, "ONEDNN_VERBOSE": "1"})
        assert run.returncode == 0, run.stderr[-2000:]
        got = np.load(Path(tmp) / "y.npy")
    log = run.stdout.decode().split("RUN\n", 1)[1]
    assert log.splitlines()[-1] == "KERNEL RUNS 1", log.splitlines()[-1]  # one table per call, composed
    executed = [line for line in log.splitlines() if ",exec," in line]
    # the first run makes the module's primitives, the table's (one binary on the 256 codes) among them
    on_the_tensor = [line.split(",")[3] for line in executed if ",1x16x16x16" in line]
    assert on_the_tensor == ["reorder", "reorder"], executed
    expected = _ort(model, feed, False)
    assert np.abs(got - expected).max() <= 1.001 * 0.03, np.abs(got - expected).max()


def test_dnnl_runs_int8_primitives_for_7_bit_weights():
    """oneDNN's own log: with reduce_range weights the convolutions and the matmul read u8 and s8, write u8.

    The matmul (a [1, 8] x [8, 10] classifier) runs as a 1x1 convolution over its rows: oneDNN's int8 gemm is
    2.5-7x slower for a few rows."""
    convs, matmuls = _onednn_log(reduce_range=True)
    assert len(convs) == 4 and not matmuls, convs + matmuls
    assert sum("mb1_ic8oc10_ih1oh1kh1" in line for line in convs) == 1, convs
    for line in convs + matmuls:
        assert "src_u8" in line and "wei_s8" in line and "dst_u8" in line, line


def _vnni_under(isa: str) -> bool:
    return ONEDNN_HAS_VNNI and not isa


@pytest.mark.parametrize("isa", ISA_CAPS, ids=lambda isa: isa or "native")
def test_full_range_weights_run_int8_with_vnni_else_in_float_and_follow_the_definition(isa):
    """onnxruntime's quantizer writes full-range weights unless told reduce_range. Without VNNI, int8 kernels add
    u8 x s8 pairs in int16 and saturate (onnxruntime's do: PP-OCR cls quantized per tensor moved by 0.185 of its
    output range), so dnnl runs such units in float32 and equals the definition; with VNNI (int32 sums) the same
    artifact runs them on the int8 kernels, within one quantum of it."""
    convs, matmuls = _onednn_log(reduce_range=False, isa=isa)
    if _vnni_under(isa):  # the three convs and the classifier (an int8 matmul runs as a 1x1 conv over its rows)
        assert len(convs) == 4 and not matmuls, convs + matmuls
        assert all("src_u8" in line and "wei_s8" in line and "dst_u8" in line for line in convs), convs
    else:
        assert len(convs) == 3 and len(matmuls) == 1, convs + matmuls
        assert all("src_f32" in line and "wei_f32" in line for line in convs + matmuls), convs + matmuls
    model = quantize(residual_cnn(), "QDQ", reduce_range=False)
    quantum = output_scale(model)
    for seed, got in zip((5, 6, 7), _under_isa(isa, model)):
        want = _ort(model, _feed(seed), integer_kernels=False)
        if _vnni_under(isa):
            assert np.abs(got - want).max() <= 1.001 * quantum
        else:
            np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("isa", ISA_CAPS, ids=lambda isa: isa or "native")
@pytest.mark.parametrize("make", [residual_cnn, activation_cnn])
def test_s8_activations_run_int8_with_vnni_else_in_float_and_follow_the_definition(make, isa):
    """onnxruntime's QInt8 activations: without VNNI oneDNN's int8 kernels shift an s8 source to u8 and halve the
    weights, and a conv moved by up to 6 quanta, so such units run as their definition in float32; with VNNI
    the int8 kernels are exact and run them."""
    convs = [x for x in _executed(make.__name__, True, "QInt8", isa) if ",convolution," in x]
    int8 = [x for x in convs if "src_s8" in x and "wei_s8" in x]
    assert (len(int8) == len(convs)) if _vnni_under(isa) else not int8, convs
    model = quantize(make(), reduce_range=True, activation_type="QInt8")
    quantum = output_scale(model)
    for seed, got in zip((5, 6, 7), _under_isa(isa, model)):
        assert np.abs(got - _ort(model, _feed(seed), integer_kernels=False)).max() <= 1.001 * quantum


def test_a_float_unit_feeding_only_dequantizes_rounds_in_its_conv_without_an_8_bit_tensor():
    """Without VNNI (oneDNN capped at AVX2 here, on any machine) units with s8 activations run as their float
    definitions: conv, Q, then the next unit's DQ and conv. A Q that only dequantizes read becomes post-ops of the
    conv before it, which rounds its output to the quantization's grid: nothing moves to or from 8 bits between
    the first two convs of wide_cnn, and the result still equals the definition."""
    executed = [line.split(",") for line in _executed("wide_cnn", True, "QInt8", "AVX2")]
    convs = [i for i, fields in enumerate(executed) if fields[3] == "convolution"]
    between = executed[convs[0] + 1:convs[1]]
    assert between and not [f for f in between if "s8" in f[6]], [f[3:7] for f in executed]
    model = quantize(wide_cnn(), reduce_range=True, activation_type="QInt8")
    for seed, got in zip((5, 6, 7), _under_isa("AVX2", model)):
        np.testing.assert_allclose(got, _ort(model, _feed(seed), integer_kernels=False), atol=1e-6)


def _int8_weight_bytes(model: onnx.ModelProto) -> int:
    return sum(t.ByteSize() for t in model.graph.initializer if t.data_type in (onnx.TensorProto.INT8,
                                                                               onnx.TensorProto.UINT8))


@pytest.mark.parametrize("reduce_range", [False, True], ids=["full_range", "reduce_range"])
@pytest.mark.parametrize("make,shape", [(wide_cnn, (1, 3, 16, 16)),
                                        (lambda: attention_block(width=384, heads=4), (1, 8, 384))],
                         ids=["cnn", "transformer_layer"])
def test_int8_weights_travel_at_8_bits(make, shape, reduce_range):
    """The exported library of a QDQ model whose weights make its file is at most 1.2x the ONNX file: each 8-bit
    weight is sent once, packed at 8 bits, whether the unit runs int8 (reordered at load), both ways (full-range
    weights: the int8 op with VNNI, the float definition without, which dequantizes the same bytes at load), or as
    its float definition only (the grouped conv). Outputs within one quantum of the definition on each path; the
    runtime holds the packed bytes and the weights as its primitives take them (s8, or float32 in float32 units),
    not the float32 weights the artifact carried before."""
    model = quantize(make(), reduce_range=reduce_range)
    weights = _int8_weight_bytes(model)
    assert weights > 0.8 * model.ByteSize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert [p.vendor for p in artifact.plan.partitions] == ["dnnl"] and not artifact.plan.host_ops
    with tempfile.TemporaryDirectory() as tmp:
        size = artifact.export(Path(tmp) / "model.so").stat().st_size
    assert size <= 1.2 * model.ByteSize(), (size, model.ByteSize())
    # the module's constants: the packed bytes as given, and the weights as the primitives take them, s8 (at most
    # 2.5x the int8 bytes; 5x before) or, for the float definition, float32 (5.5x; 8x before, for the CNN)
    (memory,) = artifact.runtime_memory.values()
    int8_kernels = reduce_range or ONEDNN_HAS_VNNI
    assert memory.constant_bytes <= (2.5 if int8_kernels else 5.5) * weights, (memory.constant_bytes, weights)
    quantum = output_scale(model)
    for isa in ISA_CAPS:
        for seed, got in zip((5, 6, 7), _under_isa(isa, model, shape=shape)):
            want = _ort(model, _feed(seed, shape), integer_kernels=False)
            assert np.abs(got - want).max() <= 1.001 * quantum, (isa, np.abs(got - want).max())


def test_dnnl_names_the_int8_units_it_cannot_run():
    """uint8 weights: oneDNN's int8 weights are s8; the units go to c_source, listed after it, with dnnl's reason."""
    model = quantize(residual_cnn(), "QDQ", weight_type="QUInt8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = byoc.partition(model, vendors=["dnnl", "c_source"])
        artifact = byoc.compile(model, vendors=["dnnl", "c_source"])
    conv = next(d for d in plan.decisions.values() if d.node is not None and d.node.name == "conv1"
                and d.op == "relax.nn.conv2d")
    assert conv.rule == "c_source.qconv2d"
    assert conv.reasons["dnnl"] == "uint8 weights (oneDNN int8 weights are s8)"
    _within_one_quantum(model, artifact, (1, 3, 16, 16))


def test_a_dequantized_constant_that_a_dnnl_partition_returns():
    """Magika quantized by onnxruntime: a partition output is DQ of a constant (the JSON carries float constants
    only, so the runtime copies the one computed at build)."""
    node = onnx.helper.make_node
    inits = [numpy_helper.from_array(np.arange(-3, 3, dtype=np.int8).reshape(2, 3), "wq"),
             numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.int8(1), "zp")]
    graph = onnx.helper.make_graph(
        [node("DequantizeLinear", ["wq", "s", "zp"], ["w"], name="dq_w"), node("Add", ["x", "w"], ["y"], name="add")],
        "dq_out", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3]),
         onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2, 3])], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a failed codegen falling back to the host warns
        plan = byoc.partition(model, vendors=["dnnl"])
        artifact = byoc.build(plan)
    assert {p.vendor for p in artifact.plan.partitions} == {"dnnl"} and not artifact.plan.host_ops
    x = np.ones((2, 3), np.float32)
    for got, want in zip(artifact.run({"x": x}), _ort_all(model, {"x": x})):
        np.testing.assert_array_equal(got, want)


def _ort_all(model: onnx.ModelProto, feed: dict) -> list:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def test_grouped_convs_run_in_float_on_dnnl_never_on_the_reference_kernel():
    """oneDNN's int8 kernels on AVX2 take 4 channels per group at a time; with 6 they fall back to the reference
    kernel (ShuffleNet int8: 10 ms per conv). The grouped unit runs as its definition in float32 instead."""
    executed = _executed("grouped_cnn", True)
    assert not [x for x in executed if ",ref:" in x], executed
    convs = [x for x in executed if ",convolution," in x]
    assert len(convs) == 4 and sum("src_f32" in x and "wei_f32" in x for x in convs) == 1, convs  # the fc too


def test_a_conv_of_one_input_channel_runs_in_float_on_dnnl():
    """Silero VAD's 256-tap filter bank reads the raw signal, one channel: oneDNN's int8 kernels take input channels
    4 at a time and ran it at 4x the float32 definition's time. conv1d_net's filter bank runs in float32 (with
    weights within +-64 it would otherwise be int8 on every CPU); its other convs stay int8."""
    executed = _executed("conv1d_net", True, shape=(1, 1, 136))
    convs = [x for x in executed if ",convolution," in x]
    bank = [x for x in convs if "_ic1oc16_" in x]
    assert len(bank) == 1 and "src_f32" in bank[0] and "wei_f32" in bank[0], convs
    assert sum("src_u8" in x for x in convs) >= 2, convs


@pytest.mark.parametrize("reduce_range", [True, False], ids=["7-bit", "full-range"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("rank", [3, 4], ids=["conv1d", "conv2d-w1"])
def test_stride_1_unpadded_int8_conv1d_runs_as_windows_and_one_matmul(rank, per_channel, reduce_range):
    """oneDNN's int8 direct conv ran Magika's 5-tap conv at 40% of its int8 matmul's rate: byoc copies the
    windows (contiguous in NWC) as the rows of a matrix and runs one int8 matmul. Where the CPU has VNNI (the
    full-range weights' int8 path), oneDNN's log shows matmuls and no convolution. The output is within one
    quantum of onnxruntime's definition on every ISA class (here, and with oneDNN capped at AVX2 where the CPU
    has VNNI), and of onnxruntime's int8 kernels where those compute the definition."""
    model = quantize(windowed_conv(rank), "QDQ", per_channel, reduce_range=reduce_range)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert len(artifact.plan.partitions) == 1 and not artifact.plan.host_ops
    shape = (1, 16, 40, 1) if rank == 4 else (1, 16, 40)
    _within_one_quantum(model, artifact, shape, int8_reference=_ort_int8_is_a_reference(reduce_range))
    for isa in ISA_CAPS[1:]:  # the AVX2 machine's path, where this one has VNNI
        for seed, got in zip((5, 6), _under_isa(isa, model, (5, 6), shape)):
            want = _ort(model, _feed(seed, shape), integer_kernels=False)
            assert np.abs(got - want).max() <= 1.001 * output_scale(model), (isa, np.abs(got - want).max())
    if reduce_range or ONEDNN_HAS_VNNI:
        executed = _executed("windowed_conv", reduce_range, shape=shape, args=(rank,), per_channel=per_channel)
        assert not [x for x in executed if ",convolution," in x], executed
        assert len([x for x in executed if ",matmul," in x and "src_u8" in x and "wei_s8" in x]) == 2, executed


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_a_conv_transpose_unit_goes_to_dnnl_whole(per_channel):
    """DQ(x), DQ(w), DQ(b) -> ConvTranspose -> Q is one dnnl unit (PP-OCR det int8 kept its ConvTranspose on the
    host, in 5 partitions); it runs as its definition on the float32 deconvolution."""
    model = quantize(deconv_net(), "QDQ", per_channel, reduce_range=per_channel)
    assert "ConvTranspose" in {n.op_type for n in model.graph.node}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(model, vendors=["dnnl"], strict=True)
    assert len(artifact.plan.partitions) == 1
    rules = {d.rule for d in artifact.plan.decisions.values() if d.node is not None and d.node.name == "upsample"}
    assert rules == {"dnnl.qconv2d_transpose"}, rules
    _within_one_quantum(model, artifact, (1, 3, 16, 16))

"""Per-op speed table: each dnnl rule alone, over shapes taken from the real-model suites, against onnxruntime.

Run from the repo root::

    python benchmarks/ops.py                       # every case
    python benchmarks/ops.py conv_grouped attention --runs 30
    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/ops.py   # oneDNN held to the AVX2 class on a bigger machine

Each case is a small ONNX model made here with onnx.helper: one op, or the op behind the conv that gives
its input the layout it has inside a CNN (a broadcast multiply reads a conv's blocked output in
RegNet's squeeze-and-excitation, not a plain input). byoc builds it with ``vendors=["dnnl"]`` in this
process and exports it; then byoc and onnxruntime (2 threads) each time the same model in their own
process, one at a time per round (benchmarks/timing_processes.py), and the outputs are compared.

The table gives per case: byoc's and onnxruntime's medians end to end and their ratio; the time of the
op's kernels alone on each side (byoc: its partition's steps and host functions, from ``Artifact.profile``;
onnxruntime: its profiler's node events) and their ratio, which leaves out what a one-op model pays at its
boundary (the call, a reorder between the graph's plain layout and the kernel's) and a model
pays once per partition (the goal of issue 33: no row above 1.25); where byoc ran it ("dnnl", or "host" for ops no partition took), and what oneDNN ran for each
step (``Artifact.implementations``). A step on oneDNN's scalar reference kernel (``ref:``) is flagged: the
dnnl vendor's guarantee is that none is left where another way exists. The worst rows come last; the
machine class heads the table. ``--json FILE`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import timing_processes as timing  # noqa: E402 - next to this file

RNG_SEED = 20261125


class Graph:
    """An ONNX graph under construction: inputs, seeded constants, nodes; ``model()`` closes it."""

    def __init__(self, opset: int = 17):
        self.opset = opset
        self.rng = np.random.default_rng(RNG_SEED)
        self.nodes, self.inputs, self.consts = [], [], []

    def input(self, name: str, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        return name

    def const(self, shape: list, scale: float = 0.1, values=None) -> str:
        name = f"c{len(self.consts)}"
        array = np.asarray(values, np.float32) if values is not None else (
            self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.consts.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list, **attrs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1, group: int = 1, dilation: int = 1) -> str:
        pad = dilation * (k - 1) // 2
        return self.op("Conv", [x, self.const([cout, cin // group, k, k]), self.const([cout])], kernel_shape=[k, k],
                       strides=[stride, stride], pads=[pad] * 4, group=group, dilations=[dilation, dilation])

    def model(self, output: str, shape: list | None = None) -> onnx.ModelProto:
        """The graph with ``output`` as its output, of ``shape`` (default: what ONNX's shape inference says)."""
        graph = helper.make_graph(self.nodes, "op", self.inputs, [], self.consts)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        if shape is not None:
            model.graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, shape))
        else:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.value_info
            model.graph.output.append(next(vi for vi in inferred if vi.name == output))
        return model


# -- the cases: (family, label, builder) ----------------------------------------------------------------
def conv_case(c_in, c_out, size, k=3, stride=1, group=1, dilation=1):
    def build():
        g = Graph()
        return g.model(g.conv(g.input("x", [1, c_in, size, size]), c_in, c_out, k, stride, group, dilation))
    return build


def after_conv(channels, size, then, group=None):
    """A 1x1 conv (or a grouped 3x3 one) whose output, in the layout oneDNN gives it, goes into ``then``."""
    def build():
        g = Graph()
        x = g.input("x", [1, channels, size, size])
        y = g.conv(x, channels, channels, 3 if group else 1, group=group or 1)
        return g.model(then(g, y, channels))
    return build


def squeeze_excite(g, y, channels):
    """RegNet/MobileNetV3/EfficientNet: y * sigmoid(conv(relu(conv(mean(y))))), a [1, C, 1, 1] run-time scale."""
    squeezed = g.op("Relu", [g.conv(g.op("GlobalAveragePool", [y]), channels, channels // 4)])
    return g.op("Mul", [y, g.op("Sigmoid", [g.conv(squeezed, channels // 4, channels)])])


def per_channel_const(op_type):
    def then(g, y, channels):
        return g.op(op_type, [y, g.const([1, channels, 1, 1])])
    return then


def windowed_mask_add(windows, heads, tokens, constant):
    """Swin's shifted-window attention: scores [1, nW, heads, T, T] + a mask [1, nW, 1, T, T]."""
    def build():
        g = Graph()
        x = g.input("scores", [1, windows, heads, tokens, tokens])
        mask = g.const([1, windows, 1, tokens, tokens]) if constant else g.input("mask", [1, windows, 1, tokens, tokens])
        return g.model(g.op("Softmax", [g.op("Add", [x, mask])], axis=-1))
    return build


def linear(rows_shape, k, n, bias=True):
    """A Linear as exporters write it: MatMul by a [K, N] constant, then a bias Add (dynamo: 4-D rows)."""
    def build():
        g = Graph()
        y = g.op("MatMul", [g.input("x", [*rows_shape, k]), g.const([k, n], 0.05)])
        return g.model(g.op("Add", [y, g.const([n])]) if bias else y)
    return build


def dynamic_linear(rows_shape, k, n, per_channel=False):
    """A Linear quantized by onnxruntime's quantize_dynamic (s8 weights): DynamicQuantizeLinear -> MatMulInteger ->
    Cast -> Mul(x_scale * w_scale) -> bias Add, as in hubs' model_quantized.onnx."""
    def build():
        import logging

        from onnxruntime.quantization import QuantType, quantize_dynamic

        logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(linear(rows_shape, k, n)(), f"{tmp}/f.onnx")
            quantize_dynamic(f"{tmp}/f.onnx", f"{tmp}/q.onnx", per_channel=per_channel, weight_type=QuantType.QInt8)
            return onnx.load(f"{tmp}/q.onnx")
    return build


def qdq_conv(c_in, c_out, size, k=3, batch=2):
    """A conv + relu quantized by onnxruntime's quantize_static with its defaults (QDQ, s8 activations and
    full-range s8 weights, per tensor), exported with a symbolic batch: compiled once, timed at ``batch``."""
    def build():
        import logging

        from onnxruntime.quantization import CalibrationDataReader, quantize_static

        g = Graph()
        x = g.input("x", ["batch", c_in, size, size])
        pad = (k - 1) // 2
        y = g.op("Relu", [g.op("Conv", [x, g.const([c_out, c_in, k, k], 1 / math.sqrt(c_in * k * k)), g.const([c_out])],
                               kernel_shape=[k, k], pads=[pad] * 4)])
        float_model = g.model(y, ["batch", c_out, size, size])

        class Reader(CalibrationDataReader):
            def __init__(self):
                rng = np.random.default_rng(RNG_SEED)
                self.feeds = iter([{"x": rng.standard_normal((1, c_in, size, size)).astype(np.float32)}
                                   for _ in range(4)])

            def get_next(self):
                return next(self.feeds, None)

        logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice to pre-process
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(float_model, f"{tmp}/f.onnx")
            quantize_static(f"{tmp}/f.onnx", f"{tmp}/q.onnx", Reader())
            model = onnx.load(f"{tmp}/q.onnx")
        onnx.helper.set_model_props(model, {timing.TEST_DIMS_KEY: json.dumps({"batch": batch})})
        return model
    return build


def attention(heads, tokens, head_dim, mask):
    """softmax(Q Kt * scale + mask) V with Q, K, V [1, heads, T, d] and a [1, 1, 1, T] additive mask."""
    def build():
        g = Graph()
        q, k, v = (g.input(n, [1, heads, tokens, head_dim]) for n in "qkv")
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                              g.const([], values=1 / math.sqrt(head_dim))])
        if mask:
            scores = g.op("Add", [scores, g.input("mask", [1, 1, 1, tokens])])
        return g.model(g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v]))
    return build


def matmul_nbits(rows, k, n, bits=4, block=32, accuracy_level=0):
    """onnxruntime's com.microsoft MatMulNBits (weight-only int4/int8, what LLM exporters write): x [1, rows, K]
    by B packed [N, K/block, block*bits/8] with a scale and a packed uint8 zero point per block, as
    MatMulNBitsQuantizer writes them (asymmetric); codes, scales and zero points seeded at random.
    ``accuracy_level`` 4: x quantized to int8 per block on both sides (onnxruntime-genai's int4 exports)."""
    def build():
        g = Graph()
        blocks = -(-k // block)
        codes = g.rng.integers(0, 1 << bits, size=(n, blocks * block // (8 // bits), 8 // bits), dtype=np.uint8)
        packed = np.zeros(codes.shape[:-1], np.uint8)
        for i in range(8 // bits):
            packed |= (codes[..., i] << (bits * i)).astype(np.uint8)
        zero_codes = g.rng.integers(0, 1 << bits, size=(n, -(-blocks // (8 // bits)) * (8 // bits)), dtype=np.uint8)
        zeros = np.zeros((n, zero_codes.shape[1] // (8 // bits)), np.uint8)
        for i in range(8 // bits):
            zeros |= (zero_codes[:, i::8 // bits] << (bits * i)).astype(np.uint8)
        names = [f"c{len(g.consts) + i}" for i in range(3)]
        g.consts += [numpy_helper.from_array(packed.reshape(n, blocks, block * bits // 8), names[0]),
                     numpy_helper.from_array((g.rng.random(n * blocks) * 0.01).astype(np.float32), names[1]),
                     numpy_helper.from_array(zeros.reshape(-1), names[2])]
        levels = {"accuracy_level": accuracy_level} if accuracy_level else {}
        y = g.op("MatMulNBits", [g.input("x", [1, rows, k]), *names], domain="com.microsoft", K=k, N=n, bits=bits,
                 block_size=block, **levels)
        model = g.model(y, [1, rows, n])
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
        return model
    return build


def unary(op_type, shape, opset=17, **attrs):
    def build():
        g = Graph(opset)
        return g.model(g.op(op_type, [g.input("x", shape)], **attrs))
    return build


def layer_norm(shape):
    def build():
        g = Graph()
        x, n = g.input("x", shape), shape[-1]
        return g.model(g.op("LayerNormalization", [x, g.const([n]), g.const([n])], axis=-1, epsilon=1e-5))
    return build


def group_norm(channels, length, groups):
    def build():
        g = Graph(21)
        x = g.input("x", [1, channels, length])
        y = g.op("GroupNormalization", [x, g.const([channels]), g.const([channels])], num_groups=groups)
        return g.model(y, [1, channels, length])  # ONNX's shape inference has no GroupNormalization-21
    return build


def gelu_erf(shape):
    """GELU as torch's legacy exporter spells it: (x * (1 + erf(x / sqrt 2))) * 0.5."""
    def build():
        g = Graph()
        x = g.input("x", shape)
        erf = g.op("Erf", [g.op("Div", [x, g.const([], values=math.sqrt(2))])])
        doubled = g.op("Mul", [x, g.op("Add", [erf, g.const([], values=1.0)])])
        return g.model(g.op("Mul", [doubled, g.const([], values=0.5)]))
    return build


def pool(op_type, channels, size, **attrs):
    def build():
        g = Graph()
        return g.model(g.op(op_type, [g.conv(g.input("x", [1, channels, size, size]), channels, channels)], **attrs))
    return build


CASES = [
    # convs: a ResNet layer, a stem, RegNet-Y's group width 8 / 16 at each stage, MobileNet/EfficientNet
    # depthwise, DeepLab's dilated ones, odd channel counts and small spatial sizes
    ("conv", "3x3 64->64 56x56", conv_case(64, 64, 56)),
    ("conv", "1x1 256->64 56x56", conv_case(256, 64, 56, k=1)),
    ("conv", "stem 7x7/2 3->64 224x224", conv_case(3, 64, 224, k=7, stride=2)),
    ("conv", "3x3 17->33 35x35 (odd)", conv_case(17, 33, 35)),
    ("conv", "3x3 512->512 7x7 (small)", conv_case(512, 512, 7)),
    ("conv_grouped", "3x3 48 g6 56x56 (RegNet)", conv_case(48, 48, 56, group=6)),
    ("conv_grouped", "3x3 104 g13 28x28 (RegNet)", conv_case(104, 104, 28, group=13)),
    ("conv_grouped", "3x3 208 g26 14x14 (RegNet)", conv_case(208, 208, 14, group=26)),
    ("conv_grouped", "3x3 440 g55 7x7 (RegNet)", conv_case(440, 440, 7, group=55)),
    ("conv_grouped", "3x3 128 g32 56x56 (ResNeXt)", conv_case(128, 128, 56, group=32)),
    ("conv_depthwise", "3x3 144 112x112", conv_case(144, 144, 112, group=144)),
    ("conv_depthwise", "5x5/2 240 28x28", conv_case(240, 240, 28, k=5, stride=2, group=240)),
    ("conv_depthwise", "3x3 960 7x7", conv_case(960, 960, 7, group=960)),
    ("conv_depthwise", "3x3 72 56x56 (MobileNetV3, 4.5 blocks of 16)", conv_case(72, 72, 56, group=72)),
    ("conv_depthwise", "7x7 96 56x56 (ConvNeXt)", conv_case(96, 96, 56, k=7, group=96)),
    ("conv_dilated", "3x3 d2 256 64x64 (DeepLab)", conv_case(256, 256, 64, dilation=2)),
    ("conv_dilated", "3x3 d4 128 32x32", conv_case(128, 128, 32, dilation=4)),
    # broadcast element-wise ops over a conv's output (channel-blocked or channels-last)
    ("broadcast", "SE multiply 48 56x56 after grouped conv", after_conv(48, 56, squeeze_excite, group=6)),
    ("broadcast", "SE multiply 960 32x32", after_conv(960, 32, squeeze_excite)),
    ("broadcast", "SE multiply 120 64x64", after_conv(120, 64, squeeze_excite)),
    ("broadcast", "per-channel add 40 128x128", after_conv(40, 128, per_channel_const("Add"))),
    ("broadcast", "per-channel mul 72 64x64", after_conv(72, 64, per_channel_const("Mul"))),
    ("broadcast", "Swin mask add + softmax, const mask", windowed_mask_add(64, 3, 49, constant=True)),
    ("broadcast", "Swin mask add + softmax, input mask", windowed_mask_add(64, 3, 49, constant=False)),
    # matmuls: Linear as each exporter writes it, a GPT-2 head, attention
    ("matmul", "Linear [128,768]x[768,3072]+b", linear([128], 768, 3072)),
    ("matmul", "Linear dynamo 4-D [1,14,14,1536]x[1536,384]+b", linear([1, 14, 14], 1536, 384)),
    ("matmul", "Linear [1,64,768]x[768,3072]+b", linear([1, 64], 768, 3072)),
    ("matmul", "LM head [1,64,768]x[768,50257]", linear([1, 64], 768, 50257, bias=False)),
    # one token (a decoder's step): byoc's GEMV on AVX-512, weights streamed from the caches or from memory
    ("matmul", "Linear one token [1,1,512]x[512,1408]+b", linear([1, 1], 512, 1408)),
    ("matmul", "Linear one token [1,1,2048]x[2048,2048]+b", linear([1, 1], 2048, 2048)),
    ("matmul", "LM head one token [1,1,768]x[768,32000]", linear([1, 1], 768, 32000, bias=False)),
    # quantize_dynamic's int8 Linear (BERT-base at 128 tokens: QKV/out, FFN up, FFN down)
    ("matmul_dynamic_int8", "Linear [1,128,768]x[768,768]+b", dynamic_linear([1, 128], 768, 768)),
    ("matmul_dynamic_int8", "Linear [1,128,768]x[768,3072]+b", dynamic_linear([1, 128], 768, 3072)),
    ("matmul_dynamic_int8", "Linear [1,128,3072]x[3072,768]+b", dynamic_linear([1, 128], 3072, 768)),
    ("matmul_dynamic_int8", "Linear [1,1,768]x[768,768]+b (one token)", dynamic_linear([1, 1], 768, 768)),
    # weight-only int4 (onnxruntime's MatMulNBits): an LLM's decode step (GEMV, one token) and its prefill (GEMM)
    # quantize_static's int8 conv, compiled with a symbolic batch (one artifact for every batch), timed at batch 2
    ("conv_int8", "QDQ 3x3 64->64 56x56, batch symbolic (2)", qdq_conv(64, 64, 56)),
    ("conv_int8", "QDQ 1x1 256->64 56x56, batch symbolic (2)", qdq_conv(256, 64, 56, k=1)),
    ("matmul_nbits", "int4 GEMV [1,2048]x[2048,2048] block 32", matmul_nbits(1, 2048, 2048)),
    ("matmul_nbits", "int4 GEMV [1,4096]x[4096,4096] block 32", matmul_nbits(1, 4096, 4096)),
    ("matmul_nbits", "int4 GEMV [1,4096]x[4096,4096] block 128", matmul_nbits(1, 4096, 4096, block=128)),
    ("matmul_nbits", "int8 GEMV [1,2048]x[2048,2048] block 32", matmul_nbits(1, 2048, 2048, bits=8)),
    ("matmul_nbits", "int4 GEMM [64,2048]x[2048,2048] block 32", matmul_nbits(64, 2048, 2048)),
    ("matmul_nbits", "int4 GEMM [128,2048]x[2048,2048] block 32", matmul_nbits(128, 2048, 2048)),
    ("matmul_nbits", "int4 GEMM [64,4096]x[4096,4096] block 32", matmul_nbits(64, 4096, 4096)),
    # accuracy_level 4 (int8 activations): a small decoder's step (genai's int4 Llama: K 384) and the larger ones
    ("matmul_nbits", "int4 GEMV [1,384]x[384,640] block 32 level 4", matmul_nbits(1, 384, 640, accuracy_level=4)),
    ("matmul_nbits", "int4 GEMV [1,2048]x[2048,2048] block 32 level 4", matmul_nbits(1, 2048, 2048, accuracy_level=4)),
    ("matmul_nbits", "int8 GEMV [1,2048]x[2048,2048] block 32 level 4",
     matmul_nbits(1, 2048, 2048, bits=8, accuracy_level=4)),
    ("matmul_nbits", "int4 GEMM [64,2048]x[2048,2048] block 32 level 4", matmul_nbits(64, 2048, 2048, accuracy_level=4)),
    ("attention", "12 heads 128x64, mask", attention(12, 128, 64, mask=True)),
    ("attention", "12 heads 197x64 (ViT)", attention(12, 197, 64, mask=False)),
    ("attention", "2 heads 64x64, mask", attention(2, 64, 64, mask=True)),
    ("attention", "12 heads 512x64, mask (BERT at 512)", attention(12, 512, 64, mask=True)),
    ("attention", "12 heads 1024x64, mask", attention(12, 1024, 64, mask=True)),
    ("attention", "6 heads 1500x64 (Whisper)", attention(6, 1500, 64, mask=False)),
    # norms and activations
    ("norm", "LayerNorm [1,128,768]", layer_norm([1, 128, 768])),
    ("norm", "LayerNorm [1,3136,96] (Swin)", layer_norm([1, 3136, 96])),
    ("norm", "GroupNorm 512 groups [1,512,3200]", group_norm(512, 3200, 512)),
    ("norm", "GroupNorm 32 groups [1,256,4096]", group_norm(256, 4096, 32)),
    ("norm", "Softmax [1,12,128,128]", unary("Softmax", [1, 12, 128, 128], axis=-1)),
    ("activation", "Gelu op (opset 20) [1,128,3072]", unary("Gelu", [1, 128, 3072], opset=20)),
    ("activation", "Gelu tanh op (opset 20) [1,128,3072]", unary("Gelu", [1, 128, 3072], opset=20, approximate="tanh")),
    ("activation", "GELU erf form (legacy export) [1,128,3072]", gelu_erf([1, 128, 3072])),
    ("activation", "Sigmoid [1,256,56,56]", unary("Sigmoid", [1, 256, 56, 56])),
    ("activation", "HardSwish [1,96,56,56]", unary("HardSwish", [1, 96, 56, 56])),
    ("pool", "MaxPool 3x3/2 64 112x112", pool("MaxPool", 64, 112, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)),
    ("pool", "GlobalAveragePool 1280 7x7", pool("GlobalAveragePool", 1280, 7)),
    # a call's fixed cost: a kernel of well under a microsecond, so end to end is the call itself (input checks,
    # the hand-over, the VM, the partition's entry, the outputs) on each side
    ("call", "Relu [1,16]: a call's fixed cost", unary("Relu", [1, 16])),
]


# -- measuring -------------------------------------------------------------------------------------------
def build(path: Path, lib: Path, inputs: dict, runs: int) -> dict:
    """byoc's build of one case: where it ran, what oneDNN ran and the kernels' time per run (the steps of its
    partitions and its host functions, from ``Artifact.profile``), the exported library."""
    import byoc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        artifact = byoc.compile(str(path), vendors=["dnnl"])
    profile = artifact.profile(inputs, runs=runs, warmup=2)
    artifact.export(lib, overwrite=True)
    steps = [s for found in artifact.implementations().values() for s in found]
    kernels = sum(sum(s.ms for s in c.steps) if c.steps else c.median_ms for c in profile.calls if c.where != "vm")
    return {"partitions": len(artifact.plan.partitions), "implementations": steps, "byoc_kernel_ms": kernels}


def onnxruntime_kernel_ms(path: Path, inputs: dict, runs: int) -> float:
    """onnxruntime's kernels' time per run (its profiler's node events, median over ``runs`` runs after warm-up):
    the same op without either side's call overhead or input and output copies."""
    import os

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_profiling, options.intra_op_num_threads = True, 2
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(runs + 2):
        session.run(None, inputs)
    trace = session.end_profiling()
    events = json.loads(Path(trace).read_text())
    os.remove(trace)
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run"][-runs:]
    nodes = [(e["ts"], e["dur"]) for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    per_run = [sum(d for t, d in nodes if t0 <= t <= t1) for t0, t1 in windows]
    return statistics.median(per_run) / 1e3


def measure(family: str, label: str, make, args, tmp: Path) -> dict:
    row = {"family": family, "case": label}
    path, lib = tmp / "case.onnx", tmp / f"case-{abs(hash(label))}.so"
    onnx.save(make(), str(path))
    inputs = timing.random_inputs(path)
    try:
        row.update(build(path, lib, inputs, args.runs))
    except Exception as err:  # noqa: BLE001 - a case byoc cannot build is a row, not the end of the table
        row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        return row
    measured = timing.time_interleaved({"onnxruntime": ("onnxruntime", path), "byoc": ("byoc", lib)}, inputs,
                                      args, tmp, args.runs, args.warmup, calls=args.calls)
    if any(m["status"] != "ok" for m in measured.values()):
        row["error"] = "; ".join(f"{k}: {m['why']}" for k, m in measured.items() if m["status"] != "ok")
        return row
    ort, ours = measured["onnxruntime"], measured["byoc"]
    row["onnxruntime_ms"], row["byoc_ms"] = ort["median_s"] * 1e3, ours["median_s"] * 1e3
    row["ratio"] = ours["median_s"] / ort["median_s"]
    row["onnxruntime_kernel_ms"] = onnxruntime_kernel_ms(path, inputs, args.runs)
    row["kernel_ratio"] = row["byoc_kernel_ms"] / row["onnxruntime_kernel_ms"]
    row["max_abs_error"] = max(float(np.max(np.abs(a - b))) for a, b in zip(ours["outputs"], ort["outputs"]))
    return row


def _where(row: dict) -> str:
    if row.get("partitions") == 0:
        return "host"
    slow = sorted({s for s in row["implementations"] if " ref:" in s or " simple" in s})
    return "dnnl" + (f" SLOW: {', '.join(slow)}" if slow else "")


def print_table(rows: list, machine: str) -> None:
    print(f"machine class: {machine}")
    print("end to end: each side's whole call, in its own process; kernels: the time of the op's kernels alone,")
    print("byoc's partition steps and host functions (Artifact.profile), onnxruntime's node events (its profiler)")
    print(f"{'family':<15} {'case':<46} {'byoc ms':>8} {'ort ms':>8} {'ratio':>6} {'kernels':>8} {'ort':>8} "
          f"{'ratio':>6}  where")
    for r in rows:
        if "error" in r:
            print(f"{r['family']:<15} {r['case']:<46} error: {r['error']}")
            continue
        print(f"{r['family']:<15} {r['case']:<46} {r['byoc_ms']:>8.3f} {r['onnxruntime_ms']:>8.3f} {r['ratio']:>6.2f} "
              f"{r['byoc_kernel_ms']:>8.3f} {r['onnxruntime_kernel_ms']:>8.3f} {r['kernel_ratio']:>6.2f}  {_where(r)}")
    for key, what in (("ratio", "end to end"), ("kernel_ratio", "kernels")):
        timed = sorted((r for r in rows if key in r), key=lambda r: r[key])
        if not timed:
            continue
        geomean = math.exp(sum(math.log(r[key]) for r in timed) / len(timed))
        over = [r for r in timed if r[key] > 1.25]
        print(f"\n{what}: {len(timed)} cases, geometric mean {geomean:.2f}x onnxruntime, {len(over)} above 1.25x; "
              "worst rows:")
        for r in timed[-5:][::-1]:
            print(f"  {r[key]:.2f}x  {r['family']}: {r['case']}  ({_where(r)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("select", nargs="*", help="families or words of case labels (default: every case)")
    parser.add_argument("--runs", type=int, default=20, help="timed rounds per case")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5, help="calls per round")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for a process to load")
    parser.add_argument("--round-timeout", type=float, default=60, help="seconds per call")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cases = [c for c in CASES if not args.select or any(s == c[0] or s in c[1] for s in args.select)]
    if not cases:
        parser.error(f"no case matches {args.select}; families: {sorted({c[0] for c in CASES})}")
    machine = timing.machine_class()
    rows = []
    with tempfile.TemporaryDirectory(prefix="byoc-ops-") as tmp:
        for family, label, make in cases:
            rows.append(measure(family, label, make, args, Path(tmp)))
            r = rows[-1]
            print(f"  {family}: {label}: " + (r["error"] if "error" in r else f"{r['ratio']:.2f}x  {_where(r)}"),
                  file=sys.stderr, flush=True)
    print_table(rows, machine)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

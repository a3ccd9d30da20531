"""Benchmark models: ResNet-50, MobileNetV2 and a BERT-base encoder with random weights.

The large models are small torch module definitions written here (no
torchvision: there is no CPU build of it on this machine), exported to ONNX
with ``torch==2.13.0`` (``pip install torch==2.13.0``: the CPU wheel on
disk) and cached as ``<build>/<name>.onnx``; they are never committed.
The tiny models (``tiny_cnn``, ``tiny_mlp``), ``resnet18`` (the ResNet-18 shape of
issue 15: conv with bias, as an exporter leaves BatchNorm folded) and ``resnet50_helper`` (the ResNet-50
shape written the same way) are built with ``onnx.helper`` and need no torch, so the smoke test runs without it. ``<model>_int8`` is
that model quantized by ``onnxruntime.quantization`` (QDQ, u8/s8, per tensor, reduce_range).

``python benchmarks/benchmark_models.py [--build DIR] [NAME ...]`` builds the cache.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnx

HERE = Path(__file__).resolve().parent
DEFAULT_BUILD = HERE / "build"
OPSET = 17
IR_VERSION = 8  # onnxruntime 1.31 reads IR <= 13
SEED = 20260207


# -- torch module definitions (imported lazily: only the large models need torch) ----
def _torch_modules():
    import torch
    from torch import nn

    def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU):
        layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class Bottleneck(nn.Module):
        """ResNet v1.5 bottleneck: 1x1 -> 3x3 (stride) -> 1x1, projection shortcut when shapes change."""

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(conv_bn(cin, width, 1), conv_bn(width, width, 3, stride),
                                      conv_bn(width, cout, 1, act=None))
            self.short = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else nn.Identity()
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + self.short(x))

    class ResNet50(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            layers = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
            cin = 64
            for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                for i in range(blocks):
                    layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
                    cin = width * 4
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand):
            super().__init__()
            hidden = cin * expand
            layers = [conv_bn(cin, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
            layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                       conv_bn(hidden, cout, 1, act=None)]
            self.body = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            return x + self.body(x) if self.residual else self.body(x)

    class MobileNetV2(nn.Module):
        def __init__(self, classes=1000):
            super().__init__()
            layers = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)]
            cin = 32
            for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
                for i in range(n):
                    layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            layers.append(conv_bn(cin, 1280, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Linear(1280, classes)

        def forward(self, x):
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))

    class EncoderLayer(nn.Module):
        """BERT post-LN layer written with plain matmul/softmax so it exports to basic ONNX ops."""

        def __init__(self, hidden=768, heads=12, ffn=3072):
            super().__init__()
            self.heads, self.dim = heads, hidden // heads
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.ff1 = nn.Linear(hidden, ffn)
            self.ff2 = nn.Linear(ffn, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x):
            b, s, h = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / self.dim ** 0.5, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(b, s, h)
            x = self.ln1(x + self.out(ctx))
            return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))

    class BertEncoder(nn.Module):
        """BERT-base encoder (12 layers, hidden 768): takes the embedded sequence as input."""

        def __init__(self, layers=12):
            super().__init__()
            self.layers = nn.Sequential(*[EncoderLayer() for _ in range(layers)])

        def forward(self, x):
            return self.layers(x)

    return {
        "resnet50": (ResNet50, (1, 3, 224, 224)),
        "mobilenetv2": (MobileNetV2, (1, 3, 224, 224)),
        "bert": (BertEncoder, (1, 128, 768)),
    }


TORCH_MODELS = ("mobilenetv2", "resnet50", "bert")


def _export_torch(name: str, path: Path) -> None:
    import torch

    cls, shape = _torch_modules()[name]
    torch.manual_seed(SEED)
    module = cls().eval()
    # Random BatchNorm statistics, so folding them into the convs is not a no-op.
    for m in module.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    tmp = path.with_suffix(".tmp.onnx")
    with torch.no_grad():
        # dynamo=False: the TorchScript exporter needs no onnxscript and folds BatchNorm.
        torch.onnx.export(module, (torch.randn(*shape),), str(tmp), dynamo=False, opset_version=OPSET,
                          input_names=["input"], output_names=["output"], do_constant_folding=True)
    model = onnx.load(str(tmp))
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    tmp.unlink()


# -- tiny models (onnx.helper, no torch) ----------------------------------------------
def tiny_cnn() -> onnx.ModelProto:
    from byoc.examples import small_cnn

    return small_cnn()


def tiny_mlp() -> onnx.ModelProto:
    from byoc.examples import small_mlp

    return small_mlp()


def resnet18() -> onnx.ModelProto:
    """A ResNet-18-shaped model at 224x224, as an exporter leaves one with BatchNorm folded: every Conv
    has a bias, ReLU and residual Add are their own nodes, GlobalAveragePool -> Flatten -> Gemm. He-scaled
    seeded random weights keep the activations in range through the 17 convs."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(x, cin, cout, k, stride, name, relu=True):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = rng.uniform(-0.1, 0.1, cout)
        out = f"{name}_out"
        nodes.append(helper.make_node("Conv", [x, const(f"{name}_w", w), const(f"{name}_b", b)], [out], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"

    x = conv("input", 3, 64, 7, 2, "conv1")
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    x, cin = "pool1", 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"layer{stage + 1}.{block}"
            y = conv(conv(x, cin, cout, 3, stride, f"{name}.conv1"), cout, cout, 3, 1, f"{name}.conv2", relu=False)
            short = conv(x, cin, cout, 1, stride, f"{name}.down", relu=False) if stride != 1 or cin != cout else x
            nodes.append(helper.make_node("Add", [y, short], [f"{name}.add"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.relu"))
            x, cin = f"{name}.out", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    w, b = rng.standard_normal((1000, 512)) / np.sqrt(512), rng.uniform(-0.1, 0.1, 1000)
    nodes.append(helper.make_node("Gemm", ["flat", const("fc_w", w), const("fc_b", b)], ["output"], name="fc",
                                  transB=1))
    graph = helper.make_graph(nodes, "resnet18", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def resnet50_helper() -> onnx.ModelProto:
    """A ResNet-50-shaped model at 224x224 (torchvision's v1.5: bottleneck blocks of 3, 4, 6, 3, the stride on the
    3x3 conv, a 1x1 downsampling conv at each stage's first block), written like :func:`resnet18`: BatchNorm folded
    into conv biases, ReLU and residual Add as their own nodes, GlobalAveragePool -> Flatten -> Gemm. For the
    figures that need a ResNet-50 without torch (``resnet50`` is torch's export)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(SEED)
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def conv(x, cin, cout, k, stride, name, relu=True, gain=2.0):
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(gain / (cin * k * k))
        b = rng.uniform(-0.1, 0.1, cout)
        out = f"{name}_out"
        nodes.append(helper.make_node("Conv", [x, const(f"{name}_w", w), const(f"{name}_b", b)], [out], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
        if not relu:
            return out
        nodes.append(helper.make_node("Relu", [out], [f"{name}_relu"], name=f"{name}_relu"))
        return f"{name}_relu"

    x = conv("input", 3, 64, 7, 2, "conv1")
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1]))
    x, cin = "pool1", 64
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            name, cout = f"layer{stage + 1}.{block}", width * 4
            y = conv(x, cin, width, 1, 1, f"{name}.conv1")
            y = conv(y, width, width, 3, stride, f"{name}.conv2")
            y = conv(y, width, cout, 1, 1, f"{name}.conv3", relu=False, gain=0.5)  # residual branches stay in range
            short = conv(x, cin, cout, 1, stride, f"{name}.down", relu=False) if block == 0 else x
            nodes.append(helper.make_node("Add", [y, short], [f"{name}.add"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.relu"))
            x, cin = f"{name}.out", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    w, b = rng.standard_normal((1000, 2048)) / np.sqrt(2048), rng.uniform(-0.1, 0.1, 1000)
    nodes.append(helper.make_node("Gemm", ["flat", const("fc_w", w), const("fc_b", b)], ["output"], name="fc",
                                  transB=1))
    graph = helper.make_graph(nodes, "resnet50_helper", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                       [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


#: Models written with onnx.helper: no torch needed.
TINY_MODELS = {"tiny_cnn": tiny_cnn, "tiny_mlp": tiny_mlp, "resnet18": resnet18, "resnet50_helper": resnet50_helper}

# -- int8 models: a float model above quantized by onnxruntime -----------------------
#: "<float model>_int8": QDQ format, u8 activations, s8 weights, per tensor, with 7-bit weights
#: (``reduce_range``: what onnxruntime advises for CPUs without VNNI, whose int8 kernels saturate
#: full-range weights), calibrated on CALIBRATION_SAMPLES random inputs.
INT8_MODELS = ("tiny_cnn_int8", "mobilenetv2_int8", "resnet50_int8", "resnet18_int8", "resnet50_helper_int8")
CALIBRATION_SAMPLES = 4


def _quantize(float_path: Path, path: Path) -> None:
    import numpy as np
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    model = onnx.load(str(float_path))
    vi = model.graph.input[0]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    rng = np.random.default_rng(SEED)
    batches = iter([{vi.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(CALIBRATION_SAMPLES)])

    class Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    quantize_static(str(float_path), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=True)


ALL_MODELS = tuple(TINY_MODELS) + TORCH_MODELS + INT8_MODELS


def model_path(name: str, build: Path = DEFAULT_BUILD) -> Path:
    """Path of ``name``'s ONNX file in the build folder, exporting it first if missing."""
    build = Path(build)
    build.mkdir(parents=True, exist_ok=True)
    path = build / f"{name}.onnx"
    if path.exists():
        return path
    if name in TINY_MODELS:
        onnx.save(TINY_MODELS[name](), str(path))
    elif name in TORCH_MODELS:
        _export_torch(name, path)
    elif name in INT8_MODELS:
        _quantize(model_path(name.removesuffix("_int8"), build), path)
    else:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ALL_MODELS)}")
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(TORCH_MODELS), help=f"models ({', '.join(ALL_MODELS)})")
    parser.add_argument("--build", type=Path, default=DEFAULT_BUILD, help="cache folder (default benchmarks/build)")
    args = parser.parse_args(argv)
    for name in args.names:
        path = model_path(name, args.build)
        print(f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Make the loop models in this folder: what torch's two ONNX exporters write for loops, small enough to keep.

Run in a venv with torch (``pip install torch==2.13.0 onnx onnxscript``), from this folder:
``python make_loop_models.py``. Weights are seeded; the files are kept so that the tests need no torch.

* ``scripted_loop.onnx``: a TorchScript ``for i in range(x.size(0))`` over convs (TorchScript exporter, opset
  17): a Loop whose trip count is the input's first dim.
* ``dynamo_scan.onnx``: ``torch._higher_order_ops.scan`` over a Linear (dynamo exporter): a Scan.
* ``dynamo_while.onnx``: ``torch._higher_order_ops.while_loop`` (dynamo exporter): a Loop with no trip count,
  whose condition is computed from an input; the host runs it (byoc.pipeline.frontend.loop_bodies).
* ``scripted_loop_dynamic.onnx``, ``dynamo_scan_dynamic.onnx``: the first two exported with symbolic dims (the
  TorchScript exporter's ``dynamic_axes`` n, h, w; the dynamo exporter's ``dynamic_shapes`` steps and batch): the
  trip count and the scan length are known only when the model runs, so the host runs both loops.
"""

import onnx
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop


class ScriptedLoop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        h = torch.zeros_like(x[0:1])
        for i in range(x.size(0)):
            h = torch.relu(self.conv(x[i:i + 1]) + h)
        return h


class ScanModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, init, xs):
        def step(h, x):
            h2 = torch.tanh(self.lin(h) + x)
            return h2, h2 * 2

        return scan(step, init, xs)


class WhileModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, i, x):
        return while_loop(lambda i, x: i < 4, lambda i, x: (i + 1, torch.tanh(self.lin(x))), (i, x))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.onnx.export(torch.jit.script(ScriptedLoop().eval()), (torch.randn(3, 4, 8, 8),), "scripted_loop.onnx",
                      dynamo=False, opset_version=17, input_names=["x"], output_names=["h"])
    torch.onnx.export(ScanModel().eval(), (torch.randn(2, 16), torch.randn(5, 2, 16)), "dynamo_scan.onnx",
                      dynamo=True, input_names=["init", "xs"])
    torch.onnx.export(WhileModel().eval(), (torch.tensor(0), torch.randn(2, 8)), "dynamo_while.onnx", dynamo=True)
    torch.onnx.export(torch.jit.script(ScriptedLoop().eval()), (torch.randn(3, 4, 8, 8),),
                      "scripted_loop_dynamic.onnx", dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["h"], dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}})
    steps, batch = torch.export.Dim("steps", min=1, max=512), torch.export.Dim("batch", min=1, max=64)
    torch.onnx.export(ScanModel().eval(), (torch.randn(2, 16), torch.randn(5, 2, 16)), "dynamo_scan_dynamic.onnx",
                      dynamo=True, input_names=["init", "xs"],
                      dynamic_shapes={"init": {0: batch}, "xs": {0: steps, 1: batch}})
    for name in ("dynamo_scan.onnx", "dynamo_while.onnx", "dynamo_scan_dynamic.onnx"):  # the dynamo exporter
        onnx.save(onnx.load(name), name, save_as_external_data=False)  # writes weights beside the file

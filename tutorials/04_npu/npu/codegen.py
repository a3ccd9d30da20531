"""The NPU's codegen: hands each build's partitions to its compiler, npuc, and packages the C it writes."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from byoc.vendor import Codegen, CSource, DeviceMemory, VendorOption
from byoc.vendor.abi import abi_header

NPUC = Path(__file__).with_name("npuc.py")

# The NPU's memory, apart from the host's (simulated here): npu_write and npu_read are the only ways in and out.
NPU_MEMORY = DeviceMemory("npu memory", """#include <stdlib.h>
#include <string.h>
void* npu_alloc(size_t bytes) { return malloc(bytes); }
void npu_free(void* p) { free(p); }
void npu_write(void* npu, const void* host, size_t bytes) { memcpy(npu, host, bytes); }
void npu_read(void* host, const void* npu, size_t bytes) { memcpy(host, npu, bytes); }
""", alloc="npu_alloc", release="npu_free", to_device="npu_write", to_host="npu_read")


def described(graph, weights: list) -> dict:
    """A partition as npuc reads it: tensors by id, ops in order, and each constant's offset (in floats) in
    the weights, to which its values are appended (float32, little-endian)."""
    tensors = {t.id: t for t in [*graph.inputs, *graph.outputs, *graph.constants]
               + [c.output for c in graph.ops]}
    offsets = {}
    for t in graph.constants:
        offsets[t.id] = sum(w.size for w in weights)
        weights.append(t.data.astype("<f4").ravel())
    return {
        "symbol": graph.symbol,
        "inputs": [t.id for t in graph.inputs],
        "outputs": [t.id for t in graph.outputs],
        "shapes": {t.id: list(t.shape) for t in tensors.values()},
        "constants": offsets,
        # what stays in the NPU's memory between partitions: position -> slot, and the outputs the host never reads
        "on_npu": {"inputs": graph.resident_inputs, "outputs": graph.resident_outputs,
                   "only": sorted(graph.device_only_outputs)},
        "ops": [{"op": c.op, "inputs": [t.id for t in c.inputs], "output": c.output.id, "attrs": c.attrs}
                for c in graph.ops],
    }


class NpuCodegen(Codegen):
    declared_options = (VendorOption("sram_kib", int, 1024, "on-chip SRAM, KiB", minimum=1),)
    cache_version = "npuc 1.0"  # npuc's output changes only with its version: byoc may cache it
    input_alignment = 1  # npuc's C reads any float address
    device_memory = NPU_MEMORY  # byoc keeps values the NPU's partitions pass each other in its memory

    def __init__(self):
        self.compiler_runs = 0

    def compile(self, partitions, options):
        return [self.standalone_source(partitions)]

    def standalone_source(self, partitions):
        """npuc's C for ``partitions``, the entry-point ABI pasted above it (the C needs no include path), and
        their weights as the blob ``npu_weights``, which byoc links in beside the C."""
        with tempfile.TemporaryDirectory() as folder:
            spec, out = Path(folder) / "partitions.json", Path(folder) / "partitions.c"
            weights: list = []
            spec.write_text(json.dumps([described(p, weights) for p in partitions]))
            floats = sum(w.size for w in weights)
            self.compiler_runs += 1
            done = subprocess.run([sys.executable, str(NPUC), str(spec), "-o", str(out), "--floats", str(floats)],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"npuc failed: {done.stderr.strip()}")
            blob = b"".join(w.tobytes() for w in weights)
            return CSource(abi_header() + NPU_MEMORY.source + out.read_text(), [p.symbol for p in partitions],
                           {"npu_weights": blob})

"""A simulated device vendor: the C-source kernels on a memory of their own, whose copies in and out are counted.

Device memory comes from the device's own allocator, filled with NaN bytes when handed out, so a kernel that
reads a tensor byoc never copied in reads NaN, and a host that reads an output byoc never copied out reads
whatever it had: either way the outputs stop matching onnxruntime. ``sim_bytes_to_device`` and
``sim_bytes_to_host`` count the bytes each copy moves; :func:`counters` reads them from a loaded artifact's
library.
"""

from __future__ import annotations

import ctypes
import os

from byoc.annotations.c_source import float_and_int8_rules
from byoc.codegens.c_source import CSourceCodegen
from byoc.vendor import Vendor
from byoc.vendor.device import DeviceMemory

SOURCE = r"""
int64_t sim_bytes_to_device = 0, sim_bytes_to_host = 0, sim_live_bytes = 0, sim_peak_bytes = 0, sim_allocs = 0;

/* A block of device memory: its size before it, NaN bytes in it. */
void* sim_alloc(size_t bytes) {
  int64_t* block = (int64_t*)malloc(bytes + 16);
  if (!block) return NULL;
  block[0] = (int64_t)bytes;
  memset(block + 2, 0xff, bytes);
  sim_live_bytes += (int64_t)bytes;
  if (sim_live_bytes > sim_peak_bytes) sim_peak_bytes = sim_live_bytes;
  sim_allocs += 1;
  return block + 2;
}

void sim_release(void* p) {
  int64_t* block = (int64_t*)p - 2;
  sim_live_bytes -= block[0];
  memset(p, 0xff, (size_t)block[0]);
  free(block);
}

void sim_to_device(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); sim_bytes_to_device += (int64_t)bytes; }
void sim_to_host(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); sim_bytes_to_host += (int64_t)bytes; }
"""

DEVICE = DeviceMemory("simulated device", SOURCE, alloc="sim_alloc", release="sim_release",
                      to_device="sim_to_device", to_host="sim_to_host")


class SimulatedDevice(CSourceCodegen):
    """byoc's C-source kernels, run on the simulated device's memory."""

    device_memory = DEVICE


def vendor(name: str = "sim", **fields) -> Vendor:
    """The simulated device vendor: the reference kernels' float and int8 rules."""
    return Vendor(name, float_and_int8_rules(), SimulatedDevice(), description="a simulated device", **fields)


COUNTERS = ("sim_bytes_to_device", "sim_bytes_to_host", "sim_live_bytes", "sim_peak_bytes", "sim_allocs")


def counters(library) -> dict[str, int]:
    """The device's counters in ``library`` (the path of an exported artifact, loaded in this process)."""
    lib = ctypes.CDLL(os.fspath(library), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return {name: ctypes.c_int64.in_dll(lib, name).value for name in COUNTERS}

"""A vendor's device memory: memory apart from the host's, which byoc keeps tensors in between partitions.

A codegen declares its device (:attr:`byoc.vendor.Codegen.device_memory`) as :class:`DeviceMemory`: C that
allocates device memory and copies bytes in and out. byoc then

* works out which tensors stay on the device: a value one of the vendor's partitions computes and only its other
  partitions read is kept in a device buffer (a *slot*) from the producer to its readers, and never crosses to
  the host (:mod:`byoc.pipeline.partitioning.device_edges`);
* tells the codegen so in each :class:`~byoc.vendor.graph.PartitionGraph` (``resident_inputs``,
  ``resident_outputs``, ``device_only_outputs``);
* for byoc's C-source codegen, writes the glue: weights copied to the device once and kept there, every other
  input copied in and output copied out per call, temporaries on the device
  (:mod:`byoc.codegens.c_source.device`);
* reports the bytes each boundary moves per call, the weights resident on the device and what stays there
  (the report's "Device memory" section, :meth:`PartitionPlan.transfers
  <byoc.pipeline.partitioning.partitioner.PartitionPlan.transfers>`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from byoc.errors import VendorError


@dataclass(frozen=True)
class DeviceMemory:
    """A device's memory as C functions of the codegen's source.

    ``source`` defines them (it is pasted before the partitions); the other fields name them:

    * ``alloc``: ``void* alloc(size_t bytes)``: device memory, or NULL when there is none left;
    * ``release``: ``void release(void* ptr)``;
    * ``to_device``: ``void to_device(void* device_dst, const void* host_src, size_t bytes)``;
    * ``to_host``: ``void to_host(void* host_dst, const void* device_src, size_t bytes)``.

    The partitions' kernels run on device pointers. ``name`` is what reports call the device.
    """

    name: str
    source: str
    alloc: str
    release: str
    to_device: str
    to_host: str

    def __post_init__(self):
        for field_name in ("alloc", "release", "to_device", "to_host"):
            value = getattr(self, field_name)
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value or ""):
                raise VendorError(f"DeviceMemory {self.name!r}: {field_name} must name a C function, got {value!r}")
            if not re.search(rf"\b{value}\s*\(", self.source):
                raise VendorError(f"DeviceMemory {self.name!r}: its source does not define {field_name} "
                                  f"function {value!r}")

"""The C a partition runs on a vendor's device with (:class:`byoc.vendor.device.DeviceMemory`).

Every tensor the kernels read or write is device memory:

* a weight is copied to the device on the partition's first call and kept there;
* an input is copied in per call, unless an earlier partition of the vendor left it in a slot
  (``PartitionGraph.resident_inputs``);
* an output is computed on the device and copied out, unless nothing on the host reads it
  (``device_only_outputs``); one later partitions read is left in its slot (``resident_outputs``);
* temporaries are allocated on the device per call.

A slot is a device buffer of the translation unit (all of a vendor's partitions are one), grown when a call needs
more: the artifact's calls share it, so they run one at a time, as one device does.
"""

from __future__ import annotations

from byoc.errors import UnsupportedOp
from byoc.vendor.graph import PartitionGraph

#: Grows a slot to ``bytes`` (one at least: an allocator may give NULL for 0); NULL when the device has no room.
_RESERVE = """
static void* byoc_device_reserve(void** slot, size_t* capacity, size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (*slot == NULL || *capacity < bytes) {
    if (*slot != NULL) %(release)s(*slot);
    *slot = %(alloc)s(bytes);
    *capacity = *slot == NULL ? 0 : bytes;
  }
  return *slot;
}
"""


def device_source(device) -> str:
    """The device's own C and byoc's helper, pasted once before the partitions."""
    return device.source + "\n" + _RESERVE % {"alloc": device.alloc, "release": device.release}


class DeviceGlue:
    """The statements one partition body runs before and after its kernels, and the names they bind."""

    def __init__(self, device, unit, graph: PartitionGraph, c_type, size):
        self.device, self.unit, self.graph = device, unit, graph
        self.c_type, self.size = c_type, size  # the emitter's: a dtype's C type, a shape's element count as C
        self.declared: list[str] = []  # its device pointers, NULL until assigned (before any goto: C++ too)
        self.before: list[str] = []
        self.after: list[str] = []

    def _bytes(self, tensor) -> str:
        return f"sizeof({self.c_type(tensor.dtype)}) * (size_t)({self.size(tensor.shape)})"

    def _slot(self, name: str) -> tuple[str, str]:
        """The C variables of slot ``name`` (the buffer and its capacity), declared once in the unit."""
        slots = self.unit.slots
        if name not in slots:
            slots[name] = self.unit.fresh("byoc_slot")
            self.unit.decls.append(f"static void* {slots[name]}; /* {name} */\nstatic size_t {slots[name]}_capacity;")
        return slots[name], f"{slots[name]}_capacity"

    def _fresh(self, tensor, prefix: str) -> str:
        name = self.unit.fresh(prefix)
        self.declared.append(name)
        self.before.append(f"  {name} = {self.device.alloc}({self._bytes(tensor)} + 1);")
        self.before.append(f"  if (!{name}) {{ status = -2; goto done; }}")
        return name

    def input(self, position: int, tensor) -> str:
        """The device pointer input ``position`` is read through."""
        slot = self.graph.resident_inputs.get(position)
        if slot is not None:
            return f"(({self.c_type(tensor.dtype)}*){self._slot(slot)[0]})"
        name = self._fresh(tensor, "byoc_din")
        self.before.append(f"  {self.device.to_device}({name}, in[{position}], {self._bytes(tensor)});")
        return f"(({self.c_type(tensor.dtype)}*){name})"

    def constant(self, tensor, host: str) -> str:
        """The device copy of a weight (``host``: its C expression), made on the first call."""
        name = self.unit.fresh("byoc_dconst")
        self.unit.decls.append(f"static void* {name};")
        self.before.append(f"  if (!{name}) {{ {name} = {self.device.alloc}({self._bytes(tensor)} + 1); "
                           f"if (!{name}) {{ status = -2; goto done; }} "
                           f"{self.device.to_device}({name}, {host}, {self._bytes(tensor)}); }}")
        return f"(({self.c_type(tensor.dtype)}*){name})"

    def output(self, position: int, tensor) -> str:
        """The device pointer output ``position`` is computed into; copied out after the kernels unless nothing
        on the host reads it."""
        slot = self.graph.resident_outputs.get(position)
        if slot is not None:
            buffer, capacity = self._slot(slot)
            self.before.append(f"  if (!byoc_device_reserve(&{buffer}, &{capacity}, {self._bytes(tensor)})) "
                               "{ status = -2; goto done; }")
            name = buffer
        else:
            name = self._fresh(tensor, "byoc_dout")
        if position not in self.graph.device_only_outputs:
            self.after.append(f"  {self.device.to_host}(out[{position}], {name}, {self._bytes(tensor)});")
        return f"(({self.c_type(tensor.dtype)}*){name})"

    def passed_through(self, position: int, tensor, source: str) -> str:
        """The copy out of an output no op of the partition computes (an input, or another output again)."""
        if position in self.graph.resident_outputs:
            raise UnsupportedOp("an output that is an input or another output again, kept on the device")
        return f"{self.device.to_host}(out[{position}], {source}, {self._bytes(tensor)});"

    def allocate(self, ctype: str, count: str) -> str:
        """C that allocates ``count`` elements of ``ctype`` on the device (a temporary)."""
        return f"({ctype}*){self.device.alloc}(sizeof({ctype}) * (size_t)({count}) + 1)"

    def release(self, name: str) -> str:
        return f"  if ({name}) {self.device.release}({name});"

    def prologue(self) -> list[str]:
        """The declarations of the device pointers, at the top of the body."""
        return [f"  void* {name} = NULL;" for name in self.declared]

    def epilogue(self) -> list[str]:
        """After ``done:``: the release of the per-call device buffers."""
        return [self.release(name) for name in self.declared]

"""Named targets: the LLVM triple, the C compiler that links for it, and how to run it.

TVM 0.27 takes targets only as dicts, e.g.
``Target({"kind": "llvm", "mtriple": "s390x-ibm-linux"})``.
"""

from __future__ import annotations

import platform
import shutil
from dataclasses import dataclass
from typing import Optional, Union

from .errors import TargetError


@dataclass(frozen=True)
class TargetPreset:
    """A target byoc can build for."""

    name: str
    triple: str
    cc: str  # the C compiler that links shared libraries for this target
    debian_package: str  # where ``cc`` comes from on Debian
    qemu: Optional[str]  # user-mode emulator, None for the build host
    sysroot: Optional[str]
    mcpu: Optional[str] = None

    def tvm_target(self):
        import tvm

        config = {"kind": "llvm", "mtriple": self.triple}
        if self.mcpu:
            config["mcpu"] = self.mcpu
        return tvm.target.Target(config)

    @property
    def is_host(self) -> bool:
        return self.name == host_name()

    def compiler(self) -> str:
        """Path of ``cc``, or a TargetError naming the package to install."""
        found = shutil.which(self.cc)
        if found is None:
            raise TargetError(
                f"the C compiler for {self.name} ({self.cc}) is not installed; install it with "
                f"`apt-get install -y --no-install-recommends {self.debian_package}`"
            )
        return found


PRESETS = {
    "x86_64": TargetPreset("x86_64", "x86_64-linux-gnu", "gcc", "gcc", None, None),
    "ppc64le": TargetPreset("ppc64le", "powerpc64le-linux-gnu", "powerpc64le-linux-gnu-gcc",
                            "gcc-powerpc64le-linux-gnu", "qemu-ppc64le", "/usr/powerpc64le-linux-gnu"),
    "s390x": TargetPreset("s390x", "s390x-ibm-linux", "s390x-linux-gnu-gcc",
                          "gcc-s390x-linux-gnu", "qemu-s390x", "/usr/s390x-linux-gnu"),
}

_MCPUS = {
    "x86_64": (None, "native", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "skylake-avx512", "znver3", "znver4"),
    "ppc64le": (None, "pwr8", "pwr9", "pwr10"),
    "s390x": (None, "z13", "z14", "z15", "z16"),
}


def host_name() -> str:
    machine = platform.machine()
    return {"AMD64": "x86_64", "ppc64le": "ppc64le", "s390x": "s390x"}.get(machine, machine)


def resolve_target(target: Union[str, TargetPreset], mcpu: Optional[str] = None) -> TargetPreset:
    """A preset by name (``"x86_64"``, ``"ppc64le"``, ``"s390x"``), optionally with an mcpu.

    ``"s390x:z15"`` is the same as ``resolve_target("s390x", mcpu="z15")``.
    """
    if isinstance(target, TargetPreset):
        return target if mcpu is None else resolve_target(target.name, mcpu)
    name, _, suffix = str(target).partition(":")
    mcpu = mcpu or suffix or None
    if name not in PRESETS:
        raise TargetError(f"unknown target {target!r}; choose one of {', '.join(PRESETS)} (optionally NAME:MCPU)")
    if mcpu not in _MCPUS[name]:
        choices = ", ".join(m for m in _MCPUS[name] if m)
        raise TargetError(f"unknown mcpu {mcpu!r} for {name}; choose one of {choices}")
    preset = PRESETS[name]
    return TargetPreset(**{**preset.__dict__, "mcpu": mcpu})

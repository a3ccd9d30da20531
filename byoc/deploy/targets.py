"""Named targets: the LLVM triple, the C compiler that links for it, and how to run it.

TVM 0.27 takes targets only as dicts, e.g.
``Target({"kind": "llvm", "mtriple": "s390x-ibm-linux"})``.

Without an mcpu a preset is portable: ``x86_64`` code runs on any x86-64
CPU (SSE2, 128-bit vectors). ``x86_64:native`` builds for the CPU of the
machine building (AVX-512 where it has it), several times faster on the
host side, but only for CPUs with the same features.
"""

from __future__ import annotations

import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from byoc.errors import TargetError


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
    # The C library headers and static archives the cross compiler needs:
    # ``--no-install-recommends gcc-<triple>`` does not pull them in.
    libc_package: str = "libc6-dev"
    qemu_package: str = "qemu-user"
    # TVM's LLVM target assumes 128-bit vectors for s390x and logs a warning on
    # every build unless the width is given; stating it keeps the same code.
    vector_width: Optional[int] = None
    # What the ELF header of a library built for it says: e_machine, and the byte order
    # (EI_DATA) it is read in; byoc.load names a library built for another machine by them.
    elf_machine: int = 0
    byte_order: str = "little"

    def tvm_target(self):
        import tvm

        config = {"kind": "llvm", "mtriple": self.triple}
        if self.vector_width:
            config["vector-width"] = self.vector_width
        if self.mcpu == "native":
            config.update(self._native_cpu())
        elif self.mcpu:
            config["mcpu"] = self.mcpu
        return tvm.target.Target(config)

    def _native_cpu(self) -> dict:
        """``mcpu``/``mattr`` of the machine running this, as ``-march=native`` would pick them.

        TVM's LLVM does not resolve ``mcpu=native`` (it logs an error and
        builds for the generic CPU), so byoc asks LLVM for the host CPU's name
        and its actual features: a virtual machine often hides features its
        CPU model implies, and code using them would not run.
        """
        import tvm_ffi

        if not self.is_host:
            raise TargetError(
                f"mcpu 'native' means the CPU of this machine, which is not a {self.name}; "
                f"name the {self.name} CPU instead (e.g. {self.name}:{next(m for m in _MCPUS[self.name] if m)})"
            )
        name = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUName")()
        features = _llvm_features()
        return {"mcpu": str(name), "mattr": [f"{'+' if on else '-'}{f}" for f, on in sorted(features.items())]}

    @property
    def is_host(self) -> bool:
        return self.name == host_name()

    @property
    def debian_packages(self) -> tuple[str, ...]:
        """Every Debian package needed to build and run programs for this target here."""
        run = (self.qemu_package,) if self.qemu else ()
        return (self.debian_package, self.libc_package) + run

    def _libc_path(self) -> Path:
        folder = f"{self.sysroot}/lib" if self.sysroot else f"/usr/lib/{self.triple}"
        return Path(folder) / "libc.a"

    def missing_packages(self) -> list[str]:
        """The Debian packages still needed here to build (and, for a foreign target, run) its programs."""
        missing = []
        if shutil.which(self.cc) is None:
            missing.append(self.debian_package)
        if not self._libc_path().is_file():
            missing.append(self.libc_package)
        if not self.is_host and self.qemu and shutil.which(self.qemu) is None:
            missing.append(self.qemu_package)
        return missing

    def _not_installed(self, what: str) -> TargetError:
        """A TargetError for ``what``, naming every package this target still needs, in one command."""
        packages = " ".join(self.missing_packages())
        return TargetError(f"{what} is not installed; install what {self.name} needs with "
                           f"`apt-get update && apt-get install -y --no-install-recommends {packages}` (as root)")

    def compiler(self) -> str:
        """Path of ``cc``, or a TargetError naming the packages to install."""
        found = shutil.which(self.cc)
        if found is None:
            raise self._not_installed(f"the C compiler for {self.name} ({self.cc})")
        return found

    def static_libc(self) -> str:
        """Path of the target's static C library (standalone programs link statically).

        Raises TargetError naming the packages to install.
        """
        path = self._libc_path()
        if not path.is_file():
            raise self._not_installed(f"the static C library for {self.name} ({path})")
        return str(path)

    def runner(self) -> list[str]:
        """The command prefix that runs a program built for this target on this machine.

        Empty for the build host; ``[qemu-<arch>, -cpu, <model>]`` otherwise.
        Raises TargetError naming the packages when the emulator is missing.
        """
        if self.is_host:
            return []
        if self.qemu is None:
            raise TargetError(f"there is no emulator for {self.name} on this host")
        found = shutil.which(self.qemu)
        if found is None:
            raise self._not_installed(f"the emulator for {self.name} ({self.qemu})")
        cpu = _QEMU_CPUS.get((self.name, self.mcpu)) if self.mcpu else None
        return [found] + (["-cpu", cpu] if cpu else [])


PRESETS = {
    "x86_64": TargetPreset("x86_64", "x86_64-linux-gnu", "gcc", "gcc", None, None, elf_machine=62),  # EM_X86_64
    "ppc64le": TargetPreset("ppc64le", "powerpc64le-linux-gnu", "powerpc64le-linux-gnu-gcc",
                            "gcc-powerpc64le-linux-gnu", "qemu-ppc64le", "/usr/powerpc64le-linux-gnu",
                            libc_package="libc6-dev-ppc64el-cross", elf_machine=21),  # EM_PPC64
    "s390x": TargetPreset("s390x", "s390x-ibm-linux", "s390x-linux-gnu-gcc",
                          "gcc-s390x-linux-gnu", "qemu-s390x", "/usr/s390x-linux-gnu",
                          libc_package="libc6-dev-s390x-cross", vector_width=128,
                          elf_machine=22, byte_order="big"),  # EM_S390
}

# qemu's CPU model must offer the instructions LLVM may emit for ``mcpu``;
# qemu's default s390x model runs z13..z15 code, z16 needs "max".
_QEMU_CPUS = {
    ("ppc64le", "pwr8"): "power8",
    ("ppc64le", "pwr9"): "power9",
    ("ppc64le", "pwr10"): "power10",
    ("s390x", "z16"): "max",
}

_MCPUS = {
    "x86_64": (None, "native", "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "skylake-avx512", "znver3", "znver4"),
    "ppc64le": (None, "pwr8", "pwr9", "pwr10"),
    "s390x": (None, "z13", "z14", "z15", "z16"),
}


def _llvm_features() -> dict:
    import tvm_ffi

    return dict(tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")())


def host_cpu_features() -> set[str]:
    """The features of the CPU running this, by LLVM's names ("avx2", "avx512f", "avx512vnni", "avxvnni"),
    as its cpuid reports them: what libraries dispatch on (oneDNN, onnxruntime's MLAS), where /proc/cpuinfo
    may describe another CPU (an emulator's host)."""
    return {name for name, on in _llvm_features().items() if on}


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

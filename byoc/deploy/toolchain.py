"""Locating, and on request installing, what a target needs: cross compiler, C library, qemu.

byoc itself never installs anything: :func:`missing_packages` and
:func:`locate` only look, and the library raises
:class:`~byoc.errors.TargetError` naming the Debian package when something is
missing. :func:`install_missing` is for test suites and setup scripts that
choose to install, with apt-get.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Union

from byoc.errors import AptUnavailable, TargetError
from byoc.deploy.targets import TargetPreset, resolve_target



@dataclass(frozen=True)
class Toolchain:
    """What builds and runs programs for one target on this machine."""

    target: TargetPreset
    cc: str  # path of the C compiler
    libc: str  # path of the static C library
    runner: tuple[str, ...]  # command prefix that runs a target program (empty on the host)


def missing_packages(target: Union[str, TargetPreset]) -> list[str]:
    """The Debian packages still needed to build and run programs for ``target`` here."""
    return resolve_target(target).missing_packages()


def locate(target: Union[str, TargetPreset]) -> Toolchain:
    """The toolchain for ``target``, or a TargetError naming the first missing package."""
    preset = resolve_target(target)
    return Toolchain(preset, preset.compiler(), preset.static_libc(), tuple(preset.runner()))


def install_missing(target: Union[str, TargetPreset]) -> Toolchain:
    """Install the missing packages for ``target`` with apt-get, then :func:`locate` it.

    Raises :class:`AptUnavailable` when apt-get is absent or this process may
    not install packages, and TargetError when apt-get ran but failed.
    """
    packages = missing_packages(target)
    if packages:
        apt = shutil.which("apt-get")
        if apt is None:
            raise AptUnavailable(f"apt-get is not available; install {' '.join(packages)} by hand")
        if os.geteuid() != 0:
            raise AptUnavailable(f"installing packages needs root; run `sudo apt-get update && sudo apt-get install -y "
                                 f"--no-install-recommends {' '.join(packages)}`")
        command = [apt, "install", "-y", "--no-install-recommends", *packages]
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            # Package lists may be missing or stale (fresh containers): refresh once.
            subprocess.run([apt, "update"], capture_output=True, text=True, env=env)
            proc = subprocess.run(command, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-3:])
            raise TargetError(f"`apt-get install {' '.join(packages)}` failed:\n{tail}")
    return locate(target)

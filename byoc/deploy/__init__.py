"""Deployment: where an artifact runs.

:mod:`~byoc.deploy.targets` holds the target presets (x86_64, ppc64le,
s390x) and their toolchains; :mod:`~byoc.deploy.toolchain` finds or installs
a cross toolchain; :mod:`~byoc.deploy.standalone` turns an artifact into a C
program that needs no TVM runtime.
"""

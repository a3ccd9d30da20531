"""The host compiler: what TVM's LLVM target builds for the ops no vendor took.

:mod:`~byoc.host.compiler` lowers the host part of a partitioned module and
schedules its PrimFuncs (fused, parallel, vectorized) for a target preset.
"""

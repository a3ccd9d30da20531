"""Tools over a partition plan or an artifact: report, verification, ONNX export, memory.

:mod:`~byoc.tools.report` says which node went where and why;
:mod:`~byoc.tools.verify` checks an artifact against onnxruntime and bisects
a mismatch; :mod:`~byoc.tools.onnx_export` writes the plan back as an ONNX
model with one function per partition; :mod:`~byoc.tools.memory` estimates
the memory a plan needs. The commands built on them
(``python -m byoc.partition``, ``byoc.optable``, ``byoc.conformance``,
``byoc.examples``) sit at the top of the package.
"""

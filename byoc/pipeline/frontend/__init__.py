"""The frontend: an ONNX model in, an :class:`ImportedModel` (Relax, with each binding's ONNX node) out.

In order: :mod:`~byoc.pipeline.frontend.load` reads the file, :mod:`~byoc.pipeline.frontend.check` checks it,
:mod:`~byoc.pipeline.frontend.shapes` applies the shapes and dims the user gives,
:mod:`~byoc.pipeline.frontend.prepare` folds and rewrites what TVM's importer cannot take, and
:mod:`~byoc.pipeline.frontend.relax_import` imports the result (with :mod:`~byoc.pipeline.frontend.importer` and
:mod:`~byoc.pipeline.frontend.import_rewrites`). The types every later stage passes on live here, in
:mod:`~byoc.pipeline.frontend.onnx_model` (``ImportedModel``, ``TensorSpec``, ``OnnxNode``) and
:mod:`~byoc.pipeline.frontend.dims` (``dims=`` settings).
"""

from byoc.pipeline.frontend.load import ModelSource, load_model
from byoc.pipeline.frontend.onnx_model import DimRange, ImportedModel, OnnxNode, TensorSpec
from byoc.pipeline.frontend.relax_import import import_model

__all__ = ["DimRange", "ImportedModel", "ModelSource", "OnnxNode", "TensorSpec", "import_model", "load_model"]

"""The pipeline, one module per stage, in the order a model goes through them.

frontend (load, :mod:`~byoc.pipeline.prepare`, :mod:`~byoc.pipeline.recurrent`,
:mod:`~byoc.pipeline.importer`) -> :mod:`~byoc.pipeline.annotator` ->
:mod:`~byoc.pipeline.partitioner` -> :mod:`~byoc.pipeline.builder` ->
:mod:`~byoc.pipeline.artifact`. Each stage takes the previous one's result
as data (``ImportedModel`` -> ``Annotation`` -> ``PartitionPlan`` ->
``Artifact``); the public entry points are re-exported by :mod:`byoc`.
The types they pass (``ImportedModel``, ``TensorSpec``, ``OnnxNode``) live in
:mod:`~byoc.pipeline.onnx_model`, below the frontend and the steps it drives.
:mod:`~byoc.pipeline.lowering` turns partition calls into calls of built
modules, for the builder and for :mod:`byoc.deploy.standalone`; it imports
no other byoc module.
"""

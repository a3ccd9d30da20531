"""The pipeline, one package per stage, in the order they depend on each other.

:mod:`~byoc.pipeline.frontend` (load, check, prepare, import) -> :mod:`~byoc.pipeline.annotate` ->
:mod:`~byoc.pipeline.partitioning` -> :mod:`~byoc.pipeline.artifact` -> :mod:`~byoc.pipeline.placement` ->
:mod:`~byoc.pipeline.build`. Each stage takes the previous one's result as data (``ImportedModel`` ->
``Annotation`` -> ``PartitionPlan`` -> ``Artifact``); the public entry points are re-exported by :mod:`byoc`.
The artifact is what the build makes, and placement times artifacts, so it ranks below both: a module imports
only from its own stage and the ones before it in this list (``tests/test_layers.py``).
"""

"""Annotate: every op call of an :class:`~byoc.pipeline.frontend.onnx_model.ImportedModel` gets a decision,
offloaded to a vendor by one of its rules or kept on the host with one reason per vendor
(:mod:`~byoc.pipeline.annotate.annotator`); :mod:`~byoc.pipeline.annotate.shape_args` reads the shape arguments
the matched ops carry."""

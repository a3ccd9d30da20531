"""Build: each vendor's codegen compiles its partitions, the rest is compiled for the target by the host
build, and the result is an :class:`~byoc.pipeline.artifact.artifact.Artifact`
(:mod:`~byoc.pipeline.build.builder`); :mod:`~byoc.pipeline.build.lowering` turns partition calls into calls
of the built modules, for the builder and for :mod:`byoc.deploy.standalone`."""

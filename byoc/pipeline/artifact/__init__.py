"""The artifact: a built model that runs, profiles, exports and loads back
(:mod:`~byoc.pipeline.artifact.artifact`), with what a build recorded about it: the placement decisions
(:mod:`~byoc.pipeline.artifact.placement_record`) and where a run's time goes
(:mod:`~byoc.pipeline.artifact.profile`).

It is the runtime side of the pipeline: :func:`byoc.load` needs none of the stages that compile. So it ranks
below the two stages that make and measure artifacts, placement and build, which import it
(``tests/test_layers.py``)."""

"""The artifact: a built model that runs, profiles, exports and loads back
(:mod:`~byoc.pipeline.artifact.artifact`), with what a build recorded about it: the placement decisions
(:mod:`~byoc.pipeline.artifact.placement_record`) and where a run's time goes
(:mod:`~byoc.pipeline.artifact.profile`).

It is the runtime side of the pipeline: :func:`byoc.load` needs none of the stages that compile. So it ranks
below the two stages that make and measure artifacts, placement and build, which import it
(``tests/test_layers.py``)."""

# What byoc 0.1's module byoc.pipeline.artifact gave, at that path still (byoc._moved: until 0.3).
from byoc.pipeline.artifact.artifact import Artifact, check_library_file, load, tvm_tensor, vm_outputs  # noqa: E402
from byoc.host.recorded import METADATA_FUNCTION  # noqa: E402

__all__ = ["METADATA_FUNCTION", "Artifact", "check_library_file", "load", "tvm_tensor", "vm_outputs"]

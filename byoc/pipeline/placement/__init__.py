"""Placement by measured cost: each partition timed on its vendor, on the host and on the other vendors that
take it, and kept where it is fastest (:mod:`~byoc.pipeline.placement.placement`);
:mod:`~byoc.pipeline.placement.host_bound` bounds a partition's host time from its heaviest ops, and
:mod:`~byoc.pipeline.placement.samples` makes the seeded sample inputs they run on."""

# What byoc 0.1's module byoc.pipeline.placement gave, at that path still (byoc._moved: until 0.3).
from byoc.pipeline.placement.placement import (DEFAULT_MIN_SPEEDUP, HOST, PLACEMENTS, check_placement,  # noqa: E402
                                               choose, place_by_measurement, sample_inputs)

__all__ = ["DEFAULT_MIN_SPEEDUP", "HOST", "PLACEMENTS", "check_placement", "choose", "place_by_measurement",
           "sample_inputs"]

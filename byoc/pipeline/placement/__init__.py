"""Placement by measured cost: each partition timed on its vendor, on the host and on the other vendors that
take it, and kept where it is fastest (:mod:`~byoc.pipeline.placement.placement`);
:mod:`~byoc.pipeline.placement.host_bound` bounds a partition's host time from its heaviest ops, and
:mod:`~byoc.pipeline.placement.samples` makes the seeded sample inputs they run on."""

"""Partitioning: the annotated decisions merged into cycle-free regions under the partition policies, one Relax
function cut out per region (:mod:`~byoc.pipeline.partitioning.partitioner`, which returns the
:class:`~byoc.pipeline.partitioning.partitioner.PartitionPlan`); :mod:`~byoc.pipeline.partitioning.merging` and
:mod:`~byoc.pipeline.partitioning.siblings` decide which neighbours share a region."""

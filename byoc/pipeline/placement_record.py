"""What measured placement decided (:mod:`byoc.pipeline.placement`), as plans, artifacts and reports keep it.

Apart from the placement itself so that a loaded artifact reads its record without importing the pipeline
that builds (which imports the artifact)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping


@dataclass
class PlacedPartition:
    """One partition of the rule-based plan: its time in each place, where it went and why."""

    partition: str  # its name in the rule-based plan
    vendor: str  # the vendor the rules gave it
    onnx_nodes: list
    times_ms: dict  # place ("host" or a vendor) -> ms per run
    estimated: list  # places whose time the vendor's cost hook gave instead of a measurement
    place: str  # where it went: a vendor, or "host"
    reason: str

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Mapping) -> "PlacedPartition":
        return cls(**record)


@dataclass
class Placement:
    """What measured placement did: a decision per partition, and what it cost."""

    decisions: list  # PlacedPartition, in the rule-based plan's order
    candidate_builds: int  # builds of one partition's ops on one place (the two whole builds not counted)
    min_speedup: float

    def as_json(self) -> dict:
        return {"decisions": [d.as_json() for d in self.decisions], "candidate_builds": self.candidate_builds,
                "min_speedup": self.min_speedup}

    @classmethod
    def from_json(cls, record: Mapping) -> "Placement":
        return cls([PlacedPartition.from_json(d) for d in record["decisions"]], record["candidate_builds"],
                   record["min_speedup"])

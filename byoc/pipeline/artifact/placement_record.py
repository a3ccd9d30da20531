"""What measured placement decided (:mod:`byoc.pipeline.placement.placement`), as plans, artifacts and reports keep it.

Apart from the placement itself so that a loaded artifact reads its record without importing the pipeline
that builds (which imports the artifact)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional


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
    # places whose time is a lower bound (the host's, from the partition's heaviest ops), with what it counts
    bounds: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, record: Mapping) -> "PlacedPartition":
        return cls(**record)


@dataclass
class Placement:
    """What measured placement did: a decision per partition, and what it cost."""

    decisions: list  # PlacedPartition, in the rule-based plan's order
    candidate_builds: int  # builds made to time a place: the host's (heaviest ops, whole model), other vendors'
    min_speedup: float

    def as_json(self) -> dict:
        return {"decisions": [d.as_json() for d in self.decisions], "candidate_builds": self.candidate_builds,
                "min_speedup": self.min_speedup}

    @classmethod
    def from_json(cls, record: Mapping) -> "Placement":
        return cls([PlacedPartition.from_json(d) for d in record["decisions"]], record["candidate_builds"],
                   record["min_speedup"])


def quote_times(times: Mapping[str, float], estimated=(), bounds: Optional[Mapping[str, str]] = None,
                first: Optional[str] = None) -> str:
    """A partition's times as a decision and the reports quote them: ``first`` (its vendor) first, then the
    fastest, each marked when a cost hook estimated it or when it is a lower bound (and from what)."""
    bounds = bounds or {}

    def quoted(place: str, ms: float) -> str:
        if place in bounds:
            return f"{place} >= {ms:.3g} ms ({bounds[place]})"
        return f"{place} {ms:.3g} ms{' (estimated)' if place in estimated else ''}"

    return ", ".join(quoted(place, ms) for place, ms in sorted(times.items(), key=lambda item: (item[0] != first,
                                                                                                 item[1])))

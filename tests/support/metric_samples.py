"""What a registry exposes, for tests that compare two ways of recording the same observations."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

Sample = tuple[str, tuple[tuple[str, str], ...]]


def exposed(registry: CollectorRegistry) -> tuple[dict[Sample, float], dict[Sample, Any]]:
    """Every sample's value and every bucket's exemplar (labels and value, not its time); ``_created`` aside (the
    time a series was made)."""
    values, exemplars = {}, {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            values[key] = s.value
            if s.exemplar is not None:
                exemplars[key] = (s.exemplar.labels, s.exemplar.value)
    return values, exemplars

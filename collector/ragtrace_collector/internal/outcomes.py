"""Counts by outcome, kept both in the process (for reports and tests) and in a Prometheus counter when there is one:
the stream followers and the results stream count sent, received, dropped and malformed entries this way."""

from __future__ import annotations

from prometheus_client import Counter


class Outcomes:
    """``counts[outcome]`` in this process, and ``counter.labels(outcome)`` where a counter (one label) is given."""

    def __init__(self, counter: Counter | None, *outcomes: str) -> None:
        self.counts = dict.fromkeys(outcomes, 0)
        self._counter = counter

    def add(self, outcome: str, n: int = 1) -> None:
        if n:
            self.counts[outcome] += n
            if self._counter is not None:
                self._counter.labels(outcome).inc(n)

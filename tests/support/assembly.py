"""Stand-ins for what drives and watches an :class:`~ragtrace_collector.processor.pipeline.Pipeline`:
a clock the test moves, and an observer that records what assembly reports."""

from __future__ import annotations


class ManualClock:
    """``time.monotonic`` for tests (the assembler's, the metric label slots'): starts at 1000 s, moves when the
    test sets ``t``."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class RecordingObserver:
    """An ``AssemblyObserver`` keeping what it was told: late spans, completion reasons, the last in-flight size."""

    def __init__(self) -> None:
        self.late = 0
        self.completed: list[str] = []
        self.inflight_seen: tuple[int, int] | None = None

    def late_spans(self, n: int) -> None:
        self.late += n

    def trace_completed(self, reason: str) -> None:
        self.completed.append(reason)

    def inflight(self, traces: int, nbytes: int) -> None:
        self.inflight_seen = (traces, nbytes)

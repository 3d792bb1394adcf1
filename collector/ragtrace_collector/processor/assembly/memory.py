"""The in-process :class:`AssemblyState`: a dict in first-seen order plus a deadline heap."""

from __future__ import annotations

import heapq
from collections import OrderedDict

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.assembly.state import (
    REASON_EVICTED,
    REASON_MAX_WAIT,
    REASON_ROOT,
    REASON_SHUTDOWN,
    AddResult,
    AssemblyState,
    CompletedTrace,
)


class _Pending:
    __slots__ = ("deadline", "first_seen", "nbytes", "root_seen", "spans")

    def __init__(self, first_seen: float, deadline: float) -> None:
        self.spans: list[SpanData] = []
        self.nbytes = 0
        self.first_seen = first_seen
        self.deadline = deadline
        self.root_seen = False


class InMemoryAssemblyState(AssemblyState):
    """In-process state: a dict in first-seen order (oldest evicted first) plus a deadline heap."""

    def __init__(
        self,
        grace_seconds: float = 2.0,
        max_wait_seconds: float = 60.0,
        max_traces: int = 20_000,
        max_bytes: int = 256 * 1024 * 1024,
        completed_memory: int = 100_000,
    ) -> None:
        self.grace = grace_seconds
        self.max_wait = max_wait_seconds
        self.max_traces = max(1, max_traces)
        self.max_bytes = max(1, max_bytes)
        self.completed_memory = completed_memory
        self._traces: dict[str, _Pending] = {}
        self._heap: list[tuple[float, str]] = []
        self._bytes = 0
        self._completed: OrderedDict[str, None] = OrderedDict()

    def _remember(self, trace_id: str) -> None:
        done = self._completed
        done[trace_id] = None
        if len(done) > self.completed_memory:
            done.popitem(last=False)

    def _remove(self, trace_id: str, reason: str) -> CompletedTrace:
        pending = self._traces.pop(trace_id)
        self._bytes -= pending.nbytes
        self._remember(trace_id)
        return CompletedTrace(trace_id, pending.spans, reason, pending.first_seen)

    def add(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool, now: float) -> AddResult:
        result = AddResult()
        if trace_id in self._completed:
            result.late_spans = len(spans)
            return result
        pending = self._traces.get(trace_id)
        if pending is None:
            pending = _Pending(now, now + self.max_wait)
            self._traces[trace_id] = pending
            heapq.heappush(self._heap, (pending.deadline, trace_id))
        pending.spans.extend(spans)
        pending.nbytes += nbytes
        self._bytes += nbytes
        if root_seen:
            pending.root_seen = True
            deadline = now + self.grace
            if deadline < pending.deadline:
                pending.deadline = deadline
                heapq.heappush(self._heap, (deadline, trace_id))
                if len(self._heap) > 2 * len(self._traces) + 1024:
                    # superseded max-wait entries would otherwise linger for max_wait seconds
                    self._heap = [(p.deadline, tid) for tid, p in self._traces.items()]
                    heapq.heapify(self._heap)
        while len(self._traces) > self.max_traces or (self._bytes > self.max_bytes and len(self._traces) > 1):
            oldest = next(iter(self._traces))
            result.evicted.append(self._remove(oldest, REASON_EVICTED))
        return result

    def pop_due(self, now: float, limit: int | None = None) -> list[CompletedTrace]:
        out: list[CompletedTrace] = []
        heap = self._heap
        while heap and heap[0][0] <= now and (limit is None or len(out) < limit):
            deadline, trace_id = heapq.heappop(heap)
            pending = self._traces.get(trace_id)
            if pending is None or pending.deadline != deadline:
                continue  # already completed, or superseded by an earlier deadline
            out.append(self._remove(trace_id, REASON_ROOT if pending.root_seen else REASON_MAX_WAIT))
        if not self._traces and heap:
            heap.clear()
        return out

    def pop_all(self) -> list[CompletedTrace]:
        out = [self._remove(tid, REASON_SHUTDOWN) for tid in list(self._traces)]
        self._heap.clear()
        return out

    def inflight(self) -> tuple[int, int]:
        return len(self._traces), self._bytes

    def oldest_first_seen(self) -> float | None:
        # the dict is in first-seen order
        return next(iter(self._traces.values())).first_seen if self._traces else None

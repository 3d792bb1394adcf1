"""Assembly: spans of one trace, arriving across requests and batches, become one RagRecord.

A trace is complete when its root span has arrived and ``grace_seconds`` have passed (stragglers
exported in a later batch still make it; ragtrace's ``@pipeline`` span counts as the root, since it
ends after every RAG span of the request even when the trace's real root lives in another service), or ``max_wait_seconds`` after its first span whatever
happens (the root may live in another service, or never come). Spans for a trace already completed
are *late*: counted, not stored. In-flight traces are bounded by count and bytes; overflow completes
the oldest early (reason ``evicted``) and counts it, so memory stays bounded and nothing is silently lost.

Where in-flight traces wait is behind :class:`AssemblyState`, so the scale-out work can keep them in
Redis (spans of one trace reaching different receivers) while this module keeps the policy.
"""

from __future__ import annotations

import abc
import heapq
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ragtrace.attributes import RAGTRACE_SPAN_ROLE, ROLE_PIPELINE

from collector.conventions import build_record
from collector.receiver.spans import DecodedRequest, SpanData
from collector.record import RagRecord

REASON_ROOT = "root"  # root span ended + grace
REASON_MAX_WAIT = "max_wait"
REASON_EVICTED = "evicted"  # in-flight bounds exceeded: completed early
REASON_SHUTDOWN = "shutdown"


@dataclass
class CompletedTrace:
    """A trace leaving assembly, with why it was considered complete."""

    trace_id: str
    spans: list[SpanData]
    reason: str


@dataclass
class AddResult:
    late_spans: int = 0
    evicted: list[CompletedTrace] = field(default_factory=list)


class AssemblyState(abc.ABC):
    """In-flight traces waiting to complete.

    Contract for implementations (in-process here; Redis for several receivers):

    * ``add`` appends spans to a trace. Spans of a trace completed within the state's memory of
      completed ids are late: they are not stored, and ``AddResult.late_spans`` counts them.
      When the in-flight bounds are exceeded, the oldest traces (by first span) are removed and
      returned in ``AddResult.evicted``. A root span among ``spans`` (``root_seen``) moves the
      trace's deadline to ``now + grace`` if that is earlier than the current one.
    * ``pop_due`` removes and returns traces whose deadline has passed, at most ``limit``; each
      trace is returned once, even when several processes share the state.
    * ``pop_all`` removes and returns every in-flight trace (shutdown).
    * ``now`` is ``time.monotonic()`` seconds for the in-process state; implementations shared
      between hosts use their own clock and may ignore it.
    """

    @abc.abstractmethod
    def add(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool, now: float) -> AddResult:
        """Store ``spans`` (``nbytes`` encoded bytes) under ``trace_id``."""

    @abc.abstractmethod
    def pop_due(self, now: float, limit: int | None = None) -> list[CompletedTrace]:
        """Traces whose completion deadline is ``<= now``, oldest deadline first."""

    @abc.abstractmethod
    def pop_all(self) -> list[CompletedTrace]:
        """Everything in flight, with reason ``shutdown``."""

    @abc.abstractmethod
    def inflight(self) -> tuple[int, int]:
        """(traces, bytes) currently held."""

    def close(self) -> None:
        """Release resources."""


class _Pending:
    __slots__ = ("spans", "nbytes", "deadline", "root_seen")

    def __init__(self, deadline: float) -> None:
        self.spans: list[SpanData] = []
        self.nbytes = 0
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
        return CompletedTrace(trace_id, pending.spans, reason)

    def add(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool, now: float) -> AddResult:
        result = AddResult()
        if trace_id in self._completed:
            result.late_spans = len(spans)
            return result
        pending = self._traces.get(trace_id)
        if pending is None:
            pending = _Pending(now + self.max_wait)
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


class AssemblyObserver(Protocol):
    """What assembly reports (implemented by :class:`collector.export.ingest_metrics.IngestMetrics`)."""

    def late_spans(self, n: int) -> None: ...

    def trace_completed(self, reason: str) -> None: ...

    def inflight(self, traces: int, nbytes: int) -> None: ...


def state_from_config(assembly_config) -> AssemblyState:
    """The in-process state, or the shared one the scale-out module provides for ``shared_state``."""
    if assembly_config.shared_state:
        from collector import shared_state  # provided by the scale-out work (Redis)

        return shared_state.open_assembly_state(assembly_config.shared_state, assembly_config)
    return InMemoryAssemblyState(
        grace_seconds=assembly_config.grace_seconds,
        max_wait_seconds=assembly_config.max_wait_seconds,
        max_traces=assembly_config.max_inflight_traces,
        max_bytes=assembly_config.max_inflight_bytes,
        completed_memory=assembly_config.late_span_memory,
    )


class Assembler:
    """Feeds decoded requests into an :class:`AssemblyState` and turns completed traces into records.

    ``add`` is cheap (the receivers call it on the hot path); ``collect`` does the record building
    for whatever has completed, called periodically by the app.
    """

    def __init__(
        self,
        state: AssemblyState,
        observer: AssemblyObserver | None = None,
        builder: Callable[..., RagRecord] = build_record,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.observer = observer
        self.builder = builder
        self.clock = clock
        self._evicted: list[CompletedTrace] = []

    def add(self, decoded: DecodedRequest) -> None:
        now = self.clock()
        late = 0
        for trace_id, spans in decoded.traces.items():
            nbytes = 0
            root = False
            for s in spans:
                nbytes += s.nbytes
                if not s.parent_id or s.attrs.get(RAGTRACE_SPAN_ROLE) == ROLE_PIPELINE:
                    root = True
            result = self.state.add(trace_id, spans, nbytes, root, now)
            late += result.late_spans
            if result.evicted:
                self._evicted.extend(result.evicted)
        if late and self.observer is not None:
            self.observer.late_spans(late)

    def completed(self, limit: int | None = None, everything: bool = False) -> list[CompletedTrace]:
        """Traces ready to become records (evicted ones first); ``everything`` also takes in-flight ones."""
        out, self._evicted = self._evicted, []
        if everything:
            out.extend(self.state.pop_all())
        else:
            out.extend(self.state.pop_due(self.clock(), limit))
        if self.observer is not None:
            for c in out:
                self.observer.trace_completed(c.reason)
            self.observer.inflight(*self.state.inflight())
        return out

    def build(self, completed: CompletedTrace, full: bool = True) -> RagRecord:
        """The record of a completed trace; ``full=False`` for the text-free summary (see ``build_record``)."""
        record = self.builder(completed.trace_id, completed.spans, full=full)
        if completed.reason != REASON_ROOT:
            record.metadata.setdefault("ragtrace.assembly", completed.reason)
        # The evaluation events (collector.export.otlp_events) hang under the trace's root span.
        root = next((s for s in completed.spans if not s.parent_id), None)
        if root is not None and root.span_id:
            record.metadata.setdefault("root_span_id", root.span_id)
        return record

    def collect(self, limit: int | None = None, everything: bool = False) -> list[RagRecord]:
        """Build the records of every completed trace."""
        return [self.build(c) for c in self.completed(limit, everything)]

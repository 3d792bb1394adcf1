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

import time
from collections.abc import Callable
from typing import Protocol

from ragtrace.attributes import RAGTRACE_SPAN_ROLE, ROLE_PIPELINE
from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import REASON_ROOT, AssemblyState, CompletedTrace
from ragtrace_collector.processor.conventions import build_record, is_request

# Completion reason reported for a trace that is no request (an index build, a vector-store write): it makes
# no record, and is counted under this reason instead of the way it completed.
REASON_NO_REQUEST = "no_request"


class AssemblyObserver(Protocol):
    """What assembly reports (implemented by :class:`ragtrace_collector.telemetry.ingest.IngestMetrics`)."""

    def late_spans(self, n: int) -> None: ...

    def trace_completed(self, reason: str) -> None: ...

    def inflight(self, traces: int, nbytes: int) -> None: ...


def state_from_config(assembly_config: AssemblyConfig) -> AssemblyState:
    """The in-process state, or the Redis one shared by several receivers when ``shared_state`` is set."""
    if assembly_config.shared_state:
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState

        return RedisAssemblyState.from_config(assembly_config.shared_state, assembly_config)
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
        """Traces ready to become records (evicted ones first); ``everything`` also takes in-flight ones. Traces
        that are no request (see ``TraceSpans.is_request``) complete too, counted, but make no record."""
        out, self._evicted = self._evicted, []
        if everything:
            out.extend(self.state.pop_all())
        else:
            out.extend(self.state.pop_due(self.clock(), limit))
        requests = [c for c in out if is_request(c.spans)]
        if self.observer is not None:
            for c in out:
                self.observer.trace_completed(c.reason if c in requests else REASON_NO_REQUEST)
            self.observer.inflight(*self.state.inflight())
        return requests

    def build(self, completed: CompletedTrace, full: bool = True) -> RagRecord:
        """The record of a completed trace; ``full=False`` for the text-free summary (see ``build_record``)."""
        record = self.builder(completed.trace_id, completed.spans, full=full)
        if completed.reason != REASON_ROOT:
            record.metadata.setdefault("ragtrace.assembly", completed.reason)
        # The evaluation events (ragtrace_collector.exporter.otlp_events) hang under the trace's root span.
        root = next((s for s in completed.spans if not s.parent_id), None)
        if root is not None and root.span_id:
            record.metadata.setdefault("root_span_id", root.span_id)
        return record

    def collect(self, limit: int | None = None, everything: bool = False) -> list[RagRecord]:
        """Build the records of every completed trace."""
        return [self.build(c) for c in self.completed(limit, everything)]

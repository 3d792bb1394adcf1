"""Assembly: spans of one trace, arriving across requests and batches, grouped until the trace is complete.

A trace is complete when its root span has arrived and ``grace_seconds`` have passed (stragglers
exported in a later batch still make it; ragtrace's ``@pipeline`` span counts as the root, since it
ends after every RAG span of the request even when the trace's real root lives in another service), or
``max_wait_seconds`` after its first span whatever happens (the root may live in another service, or never
come). Spans for a trace already completed are *late*: counted, not stored. In-flight traces are bounded by
count and bytes; overflow completes the oldest early (reason ``evicted``) and counts it, so memory stays
bounded and nothing is silently lost.

Where in-flight traces wait is behind :class:`AssemblyState`, so the scale-out work can keep them in
Redis (spans of one trace reaching different receivers) while this module keeps the policy. What happens to a
trace once complete (log events folded into its spans, two traces of one request joined) is the joins' (see
``processor/joins/``), in the order ``processor/pipeline.py`` gives them.

GenAI log events (OTLP logs, see ``receiver.decode.extract_log_events``) arrive as carriers for their span and
wait in the state with the trace's spans, before or after them. Carriers of a trace no span of which has arrived
here are bounded apart (``max_log_only_traces`` traces, ``max_log_only_bytes``, forgotten after
``log_only_seconds``), so a flood of events for traces that never come cannot push the in-flight traces out:
beyond the bound they are dropped and counted (``over_limit``), as are those whose trace had completed
(``late``), through an observer that also implements :class:`LogEventsObserver`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol, runtime_checkable

from ragtrace.attributes import RAGTRACE_SPAN_ROLE, ROLE_PIPELINE
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.assembly.state import AddItem, AssemblyState, CompletedTrace


class AssemblyObserver(Protocol):
    """What assembly and the pipeline report (implemented by
    :class:`ragtrace_collector.telemetry.ingest.IngestMetrics`)."""

    def late_spans(self, n: int) -> None: ...

    def trace_completed(self, reason: str) -> None: ...

    def inflight(self, traces: int, nbytes: int) -> None: ...


@runtime_checkable
class LogEventsObserver(Protocol):
    """An observer's optional role: what became of log events (joined, unmatched, late, over_limit)."""

    def log_events(self, outcome: str, n: int) -> None: ...


# Log events' fates in assembly (the ``outcome`` of ragtrace_log_records_total; the joins report the others).
LOG_LATE = "late"
LOG_OVER_LIMIT = "over_limit"


class TraceAssembly:
    """Feeds decoded requests into an :class:`AssemblyState` and takes out the traces that completed.

    ``add`` is cheap (the receivers call it on the hot path); ``pop`` is called once per sweep. Time is the
    caller's (``now``: ``time.monotonic()`` seconds), so one sweep reads one clock.
    """

    def __init__(
        self,
        state: AssemblyState,
        observer: AssemblyObserver | None = None,
        max_log_only_traces: int = 2_000,
        max_log_only_bytes: int = 32 * 1024 * 1024,
        log_only_seconds: float = 120.0,
    ) -> None:
        self.state = state
        self.observer = observer
        self._evicted: list[CompletedTrace] = []
        # Traces only log events of which arrived here: (first seen, bytes), oldest first; bounded apart
        self._log_only: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._log_only_bytes = 0
        self.max_log_only_traces = max(1, max_log_only_traces)
        self.max_log_only_bytes = max(1, max_log_only_bytes)
        self.log_only_seconds = log_only_seconds

    def add(self, decoded: DecodedRequest, now: float) -> None:
        late = late_events = over = 0
        self._forget_log_only(now)
        items: list[AddItem] = []
        log_only: list[bool] = []  # per item: only GenAI log-event carriers (their late ones counted apart)
        for trace_id, spans in decoded.traces.items():
            nbytes = 0
            root = False
            carriers = 0
            for s in spans:
                nbytes += s.nbytes
                if s.is_log_carrier:
                    carriers += 1
                    continue
                if not s.parent_id or s.attrs.get(RAGTRACE_SPAN_ROLE) == ROLE_PIPELINE:
                    root = True
            if carriers == len(spans) and not self._admit_log_only(trace_id, nbytes, now):
                over += carriers
                continue
            if carriers < len(spans):
                self._spans_arrived(trace_id)
            items.append((trace_id, spans, nbytes, root))
            log_only.append(carriers == len(spans))
        for result, events_only in zip(self.state.add_many(items, now), log_only):  # one round trip when shared
            if events_only:
                late_events += result.late_spans
            else:
                late += result.late_spans
            if result.evicted:
                self._evicted.extend(result.evicted)
        if late and self.observer is not None:
            self.observer.late_spans(late)
        self._count_log_events(LOG_LATE, late_events)
        self._count_log_events(LOG_OVER_LIMIT, over)

    def pop(self, now: float, limit: int | None = None, everything: bool = False) -> list[CompletedTrace]:
        """The traces completed (evicted ones first, then those due, at most ``limit``); ``everything`` also takes
        the in-flight ones (shutdown). Each is returned once; :meth:`settle` confirms it once it has left."""
        out, self._evicted = self._evicted, []
        if everything:
            out.extend(self.state.pop_all())
        else:
            out.extend(self.state.pop_due(now, limit))
        for c in out:
            self._spans_arrived(c.trace_id)  # completed: no longer waiting
        if self.observer is not None:
            self.observer.inflight(*self.state.inflight())
        return out

    def settle(self, trace_ids: list[str]) -> None:
        """The popped traces ``trace_ids`` have left this process (see ``AssemblyState.settle``)."""
        if trace_ids:
            self.state.settle(trace_ids)

    def oldest_first_seen(self) -> float | None:
        """When the first span of the oldest trace in flight arrived (None: nothing in flight)."""
        return self.state.oldest_first_seen()

    def _admit_log_only(self, trace_id: str, nbytes: int, now: float) -> bool:
        """Whether carriers for a trace no span of which arrived here fit the log-only bound (then counted in it)."""
        held = self._log_only.get(trace_id)
        if held is None and len(self._log_only) >= self.max_log_only_traces:
            return False
        if self._log_only_bytes + nbytes > self.max_log_only_bytes:
            return False
        since, size = held if held is not None else (now, 0)
        self._log_only[trace_id] = (since, size + nbytes)
        self._log_only_bytes += nbytes
        return True

    def _spans_arrived(self, trace_id: str) -> None:
        """A trace known only from log events got spans: it is an ordinary in-flight trace from now on."""
        held = self._log_only.pop(trace_id, None)
        if held is not None:
            self._log_only_bytes -= held[1]

    def _forget_log_only(self, now: float) -> None:
        """Let go of log-only traces older than ``log_only_seconds`` (the state completes them by then; with a
        shared state another receiver may have): the bound counts only those that may still be waiting."""
        while self._log_only:
            trace_id, (since, size) = next(iter(self._log_only.items()))
            if now - since < self.log_only_seconds:
                break
            del self._log_only[trace_id]
            self._log_only_bytes -= size

    def _count_log_events(self, outcome: str, n: int) -> None:
        if n and isinstance(self.observer, LogEventsObserver):
            self.observer.log_events(outcome, n)

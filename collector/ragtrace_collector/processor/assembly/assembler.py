"""Assembly: spans of one trace, arriving across requests and batches, become one RagRecord.

A trace is complete when its root span has arrived and ``grace_seconds`` have passed (stragglers
exported in a later batch still make it; ragtrace's ``@pipeline`` span counts as the root, since it
ends after every RAG span of the request even when the trace's real root lives in another service), or ``max_wait_seconds`` after its first span whatever
happens (the root may live in another service, or never come). Spans for a trace already completed
are *late*: counted, not stored. In-flight traces are bounded by count and bytes; overflow completes
the oldest early (reason ``evicted``) and counts it, so memory stays bounded and nothing is silently lost.

Where in-flight traces wait is behind :class:`AssemblyState`, so the scale-out work can keep them in
Redis (spans of one trace reaching different receivers) while this module keeps the policy.

One model call traced in two traces (a framework's LLM span, and the client library's span starting a trace of
its own, see ``conventions/duplicates.py``) makes one record: in a service that writes both generator spans
nested in requests and traces of a bare model call, a completed bare call is held back (up to
``duplicate_call_window_seconds``) until a request of the same service shows a generator span that was sent the
same prompt and encloses it in time; its spans then join that request's trace (merged, when both complete in the
same sweep) or are dropped (the request's record already left). Either way it completes under the reason
``duplicate_llm_call``.

One request traced as two traces, its retrieval in one and the model call it fed in another (OpenLIT's LangChain
instrumentation, see ``conventions/halves.py``), makes one record too: in a service that writes traces starting
with a model call, a completed trace that only retrieved is held back (up to the same window) until a trace that
only called a model, of the same service, shows every retrieved passage in its prompt, having started after the
retrieval ended; the call's spans then join the retrieval's trace, the call's trace completing under the reason
``split_request``. A retrieval that fed no call is released as its own record after the window; a call whose
retrieval completed in a later sweep than it is not joined (with a shared pairing state, a call keeps looking for
``PairingState.settle`` seconds: another receiver may be about to hold its retrieval).

What these joins remember between sweeps (services' marks, the calls of requests that left, held retrievals) is
behind :class:`~ragtrace_collector.processor.assembly.pairing.PairingState`: with shared Redis state the two traces
of one request may complete in different receivers, so the Redis implementation shares that memory too.

GenAI log events (OTLP logs, see ``receiver.decode.extract_log_events``) arrive as carriers for their span and wait
in the state with the trace's spans, before or after them; a completing trace has them folded into their spans
(``conventions.log_events``) before anything reads it. Carriers of a trace no span of which has arrived here are
bounded apart (``max_log_only_traces`` traces, ``max_log_only_bytes``, forgotten after ``log_only_seconds``), so a
flood of events for traces that never come cannot push the in-flight traces out: beyond the bound they are dropped
and counted (``over_limit``), as are those whose span never came (``unmatched``) or whose trace had completed
(``late``), through an observer that also implements :class:`LogEventsObserver`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ragtrace.attributes import RAGTRACE_SPAN_ROLE, ROLE_PIPELINE
from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.model.record import RagRecord, RecordSummary
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.pairing import (
    MARK_BARE,
    MARK_NESTED,
    MAX_HELD,
    HeldRetrieval,
    InMemoryPairingState,
    PairingState,
)
from ragtrace_collector.processor.assembly.state import REASON_ROOT, AssemblyState, CompletedTrace
from ragtrace_collector.processor.conventions import build_record, build_summary, duplicates, halves, log_events
from ragtrace_collector.processor.conventions.extractors import is_request

# Completion reason reported for a trace that is no request (an index build, a vector-store write): it makes
# no record, and is counted under this reason instead of the way it completed.
REASON_NO_REQUEST = "no_request"
# Completion reason of a trace that only repeats a model call another trace's record holds (see the module docs).
REASON_DUPLICATE_CALL = "duplicate_llm_call"
# Completion reason of a trace holding the model-call half of a request whose retrieval was traced apart (joined).
REASON_SPLIT_REQUEST = "split_request"


class AssemblyObserver(Protocol):
    """What assembly reports (implemented by :class:`ragtrace_collector.telemetry.ingest.IngestMetrics`)."""

    def late_spans(self, n: int) -> None: ...

    def trace_completed(self, reason: str) -> None: ...

    def inflight(self, traces: int, nbytes: int) -> None: ...


@runtime_checkable
class LogEventsObserver(Protocol):
    """An observer's optional role: what became of log events (joined, unmatched, late, over_limit)."""

    def log_events(self, outcome: str, n: int) -> None: ...


# Log events' fates in assembly (the ``outcome`` of ragtrace_log_records_total).
LOG_JOINED = "joined"
LOG_UNMATCHED = "unmatched"
LOG_LATE = "late"
LOG_OVER_LIMIT = "over_limit"


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


def pairing_from_config(assembly_config: AssemblyConfig) -> PairingState:
    """This process's pairing memory, or the Redis one beside the shared in-flight state (``shared_state``)."""
    if assembly_config.shared_state:
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.processor.assembly.redis_pairing import RedisPairingState

        return RedisPairingState(assembly_config.shared_state, window=assembly_config.duplicate_call_window_seconds)
    return InMemoryPairingState(window=assembly_config.duplicate_call_window_seconds)


#: Record metadata the assembler writes (why a trace completed, the span scores annotate); never from span content.
DERIVED_METADATA = ("ragtrace.assembly", "root_span_id")


class Assembler:
    """Feeds decoded requests into an :class:`AssemblyState` and turns completed traces into records.

    ``add`` is cheap (the receivers call it on the hot path); ``collect`` does the record building
    for whatever has completed, called periodically by the app.
    """

    def __init__(
        self,
        state: AssemblyState,
        observer: AssemblyObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        pairing: PairingState | None = None,
        max_log_only_traces: int = 2_000,
        max_log_only_bytes: int = 32 * 1024 * 1024,
        log_only_seconds: float = 120.0,
    ) -> None:
        self.state = state
        self.observer = observer
        self.clock = clock
        self.pairing = pairing if pairing is not None else InMemoryPairingState()
        self._evicted: list[CompletedTrace] = []
        # bare calls completed here, waiting for the request that made the same call: (since, trace, call)
        self._held: OrderedDict[str, tuple[float, CompletedTrace, duplicates.ModelCall]] = OrderedDict()
        # model calls completed here whose retrieval another receiver may be about to hold: (since, trace, half)
        self._answers: OrderedDict[str, tuple[float, CompletedTrace, halves.AnswerHalf]] = OrderedDict()
        # Popped from the state and still held back here (pairing): settled only once they leave this process.
        self._holding: set[str] = set()
        # Popped from the state and gone from here in the last ``completed()`` call: what ``settle`` confirms.
        self._leaving: list[str] = []
        # Traces only log events of which arrived here: (first seen, bytes), oldest first; bounded apart
        self._log_only: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._log_only_bytes = 0
        self.max_log_only_traces = max(1, max_log_only_traces)
        self.max_log_only_bytes = max(1, max_log_only_bytes)
        self.log_only_seconds = log_only_seconds

    def add(self, decoded: DecodedRequest) -> None:
        now = self.clock()
        late = late_events = over = 0
        self._forget_log_only(now)
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
                if duplicates.is_generator(s.attrs):
                    self.pairing.mark(MARK_NESTED if s.parent_id else MARK_BARE, s.service, now)
            if carriers == len(spans) and not self._admit_log_only(trace_id, nbytes, now):
                over += carriers
                continue
            if carriers < len(spans):
                self._spans_arrived(trace_id)
            result = self.state.add(trace_id, spans, nbytes, root, now)
            if carriers == len(spans):
                late_events += result.late_spans
            else:
                late += result.late_spans
            if result.evicted:
                self._evicted.extend(result.evicted)
        if late and self.observer is not None:
            self.observer.late_spans(late)
        self._count_log_events(LOG_LATE, late_events)
        self._count_log_events(LOG_OVER_LIMIT, over)

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

    def _fold_log_events(self, out: list[CompletedTrace]) -> None:
        """Fold each completed trace's log events into their spans (see ``conventions.log_events``), counted."""
        joined = unmatched = 0
        for c in out:
            self._spans_arrived(c.trace_id)  # completed: no longer waiting
            folded = log_events.fold(c.spans)
            c.spans = folded.spans
            joined += folded.joined
            unmatched += folded.unmatched
        self._count_log_events(LOG_JOINED, joined)
        self._count_log_events(LOG_UNMATCHED, unmatched)

    def completed(self, limit: int | None = None, everything: bool = False) -> list[CompletedTrace]:
        """Traces ready to become records (evicted ones first); ``everything`` also takes in-flight ones. Traces
        that are no request (see ``TraceSpans.is_request``) complete too, counted, but make no record."""
        out, self._evicted = self._evicted, []
        self._leaving = []  # what the sweep did not settle is popped again after the lease
        if everything:
            out.extend(self.state.pop_all())
        else:
            out.extend(self.state.pop_due(self.clock(), limit))
        self._fold_log_events(out)
        popped = {c.trace_id for c in out}
        requests = [c for c in out if c.spans and is_request(c.classified())]  # log events alone: no request
        self.pairing.sync(self.clock())
        if self.observer is not None:
            for _ in range(len(out) - len(requests)):
                self.observer.trace_completed(REASON_NO_REQUEST)
        # only services writing traces that start with a model call can trace one request twice
        bare = self.pairing.marked(MARK_BARE, self.clock()) if requests or self._held or self._answers else set()
        requests = self._pair_duplicate_calls(requests, bare, everything)
        requests, joined = self._join_halves(requests, bare, everything)
        if self.observer is not None:
            for c in requests:
                self.observer.trace_completed(c.reason)
            for _ in range(joined):
                self.observer.trace_completed(REASON_SPLIT_REQUEST)
            self.observer.inflight(*self.state.inflight())
        self._track_popped(popped)
        return requests

    def _track_popped(self, popped: set[str]) -> None:
        """Remember which popped traces left this call (returned, merged into another, dropped as a duplicate,
        or held in the pairing state, which is shared Redis wherever the state is) and which are held back here.
        Replaced by each call: traces the sweep did not settle (the queue could not write) are popped again
        after the state's lease instead."""
        held = self._held.keys() | self._answers.keys()
        mine = popped | self._holding
        self._holding = mine & held
        self._leaving = sorted(mine - held)

    def settle(self) -> None:
        """Tell the state that what the last ``completed()`` let go of is safe: the sweep calls it once that
        chunk's records are on the queue (see ``AssemblyState.settle``)."""
        leaving, self._leaving = self._leaving, []
        if leaving:
            self.state.settle(leaving)

    def _pair_duplicate_calls(
        self, requests: list[CompletedTrace], bare: set[str | None], everything: bool
    ) -> list[CompletedTrace]:
        """``requests`` less the bare model calls repeating a request's call (merged into it, or dropped when its
        record already left) and less those held back for their request, plus the held ones whose window passed;
        the pairings reported under ``duplicate_llm_call`` (the traces returned are reported by the caller)."""
        now = self.clock()
        pending = list(self._held.values())
        self._held.clear()
        if not requests and not pending:
            return []
        # services writing both kinds of trace: only there can one call be traced twice
        mixed = self.pairing.marked(MARK_NESTED, now) & bare if bare else set()
        out: list[CompletedTrace] = []
        for c in requests:
            call = duplicates.bare_call(c.spans) if _service_of(c) in mixed else None
            if call is not None:
                pending.append((now, c, call))
            else:
                out.append(c)
        unbuilt = {c.trace_id: c for c in out if _service_of(c) in mixed}
        self.pairing.remember([call for c in unbuilt.values() for call in duplicates.framework_calls(c.spans)], now)
        paired = 0
        for since, c, call in pending:
            twin = self.pairing.take_twin(call, now)
            if twin is not None:
                owner = unbuilt.get(twin.trace_id)
                if owner is not None:
                    owner.spans.extend(duplicates.adopt(c.spans, call, twin))
                    owner.first_seen = min(owner.first_seen, c.first_seen)
                paired += 1
            elif everything or now - since >= self.pairing.window:
                out.append(c)
            else:
                self._held[c.trace_id] = (since, c, call)
        while len(self._held) > MAX_HELD:
            out.append(self._held.popitem(last=False)[1][1])
        if self.observer is not None:
            for _ in range(paired):
                self.observer.trace_completed(REASON_DUPLICATE_CALL)
        return out

    def _join_halves(
        self, requests: list[CompletedTrace], bare: set[str | None], everything: bool
    ) -> tuple[list[CompletedTrace], int]:
        """``requests`` with each model call that a held or completing retrieval fed joined into that retrieval's
        trace (see the module docs), less the retrievals held back for their call (and, with a shared pairing
        state, the calls still looking for theirs), plus the held ones whose time passed; and how many joined."""
        now = self.clock()
        out: list[CompletedTrace] = []
        held: list[HeldRetrieval] = []
        looking = list(self._answers.values())
        self._answers.clear()
        for c in requests:  # only services whose traces start with a model call can split a request so
            if _service_of(c) not in bare:
                out.append(c)
            elif (half := halves.retrieval_half(c.trace_id, c.spans)) is not None:
                held.append(HeldRetrieval(c, half))
            elif (answer := halves.answer_half(c.trace_id, c.spans)) is not None:
                looking.append((now, c, answer))
            else:
                out.append(c)
        if held:
            self.pairing.hold(held, now)
        joined = 0
        for since, c, answer in looking:
            retrieval = self.pairing.take_fed(answer)
            if retrieval is not None:
                spans = halves.join(retrieval.spans, c.spans, retrieval.trace_id)
                first_seen = min(retrieval.first_seen, c.first_seen)
                out.append(CompletedTrace(retrieval.trace_id, spans, retrieval.reason, first_seen))
                joined += 1
            elif everything or now - since >= self.pairing.settle:
                out.append(c)
            else:
                self._answers[c.trace_id] = (since, c, answer)
        while len(self._answers) > MAX_HELD:
            out.append(self._answers.popitem(last=False)[1][1])
        out.extend(self.pairing.release(now, everything))
        return out, joined

    def summary(self, completed: CompletedTrace) -> RecordSummary:
        """The text-free summary of a completed trace (see ``build_summary``), from its one classification."""
        return build_summary(completed.trace_id, completed.classified())

    def build(self, completed: CompletedTrace, sampling_weight: float = 1.0) -> RagRecord:
        """The record of a completed trace, with the sampler's weight, from its one classification."""
        record = build_record(completed.trace_id, completed.classified(), sampling_weight)
        # Keys the collector derives: a span's own metadata (OpenInference ``metadata``) never sets them, or a
        # traced request would choose the span its scores annotate.
        for key in DERIVED_METADATA:
            record.metadata.pop(key, None)
        if completed.reason != REASON_ROOT:
            record.metadata["ragtrace.assembly"] = completed.reason
        # The evaluation events (ragtrace_collector.exporter.otlp_events) hang under the trace's root span.
        root = next((s for s in completed.spans if not s.parent_id), None)
        if root is not None and root.span_id:
            record.metadata["root_span_id"] = root.span_id
        return record

    def oldest_first_seen(self) -> float | None:
        """When the first span of the oldest trace still here arrived — in flight, or completed and held back
        for pairing — (None: nothing here): what the assembly journal must keep since."""
        held = [c.first_seen for _, c, _ in (*self._held.values(), *self._answers.values())]
        found = [t for t in (self.state.oldest_first_seen(), self.pairing.oldest_first_seen(), *held) if t is not None]
        return min(found, default=None)

    def collect(self, limit: int | None = None, everything: bool = False) -> list[RagRecord]:
        """Build the records of every completed trace."""
        return [self.build(c) for c in self.completed(limit, everything)]


def _service_of(completed: CompletedTrace) -> str | None:
    return next((s.service for s in completed.spans if s.service), None)

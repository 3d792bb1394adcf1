"""One model call traced in two traces makes one record: the bare call's spans join the request that made it.

A framework's LLM span, and the client library's span starting a trace of its own (see
``conventions/duplicates.py``): in a service that writes both generator spans nested in requests and traces of a
bare model call (``ServiceMarks.mixed``), a completed bare call is held back (up to
``duplicate_call_window_seconds``) until a request of the same service shows a generator span that was sent the
same prompt and encloses it in time; its spans then join that request's trace (merged, when both complete in the
same sweep) or are dropped (the request's record already left). Either way it completes under the reason
``duplicate_llm_call``. The requests' calls are remembered in the :class:`PairingState` (shared, with Redis), the
bare calls waiting here: only the receiver that completed one pairs it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions import duplicates
from ragtrace_collector.processor.joins.join import Join, JoinObserver, service_of
from ragtrace_collector.processor.joins.pairing import MAX_HELD, PairingState
from ragtrace_collector.processor.joins.service_marks import ServiceMarks

# Completion reason of a trace that only repeats a model call another trace's record holds.
REASON_DUPLICATE_CALL = "duplicate_llm_call"


class DuplicateCallsJoin(Join):
    """Merges each bare model call into the request that made the same call, or drops it once that one left."""

    def __init__(self, pairing: PairingState, marks: ServiceMarks, observer: JoinObserver | None = None) -> None:
        self.pairing = pairing
        self.marks = marks
        self.observer = observer
        # bare calls completed here, waiting for the request that made the same call: (since, trace, call)
        self._held: OrderedDict[str, tuple[float, CompletedTrace, duplicates.ModelCall]] = OrderedDict()

    def join(self, traces: list[CompletedTrace], now: float, everything: bool) -> list[CompletedTrace]:
        """``traces`` less the bare model calls repeating a request's call (merged into it, or dropped when its
        record already left) and less those held back for their request, plus the held ones whose window passed."""
        pending = list(self._held.values())
        self._held.clear()
        if not traces and not pending:
            return []
        mixed = self.marks.mixed() if traces else set()  # services writing both kinds of trace
        out: list[CompletedTrace] = []
        for c in traces:
            call = duplicates.bare_call(c.spans) if service_of(c) in mixed else None
            if call is not None:
                pending.append((now, c, call))
            else:
                out.append(c)
        unbuilt = {c.trace_id: c for c in out if service_of(c) in mixed}
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

    def held(self) -> Collection[str]:
        return self._held.keys()

    def oldest_first_seen(self) -> float | None:
        return min((c.first_seen for _, c, _ in self._held.values()), default=None)

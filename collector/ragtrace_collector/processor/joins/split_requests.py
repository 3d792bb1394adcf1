"""One request traced as two traces makes one record: the model call's spans join the retrieval that fed it.

OpenLIT's LangChain instrumentation traces a request's retrieval in one trace and the model call it fed in another
(see ``conventions/halves.py``). In a service that writes traces starting with a model call
(``ServiceMarks.bare``), a completed trace that only retrieved is held back in the :class:`PairingState` (up to
``duplicate_call_window_seconds``) until a trace that only called a model, of the same service, shows every
retrieved passage in its prompt, having started after the retrieval ended; the call's spans then join the
retrieval's trace, the call's trace completing under the reason ``split_request``. A retrieval that fed no call is
released as its own record after the window; a call whose retrieval completed in a later sweep than it is not
joined (with a shared pairing state, a call keeps looking for ``PairingState.settle`` seconds: another receiver
may be about to hold its retrieval).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection

from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions import halves
from ragtrace_collector.processor.joins.join import Join, JoinObserver, service_of
from ragtrace_collector.processor.joins.pairing import MAX_HELD, HeldRetrieval, PairingState
from ragtrace_collector.processor.joins.service_marks import ServiceMarks

# Completion reason of a trace holding the model-call half of a request whose retrieval was traced apart (joined).
REASON_SPLIT_REQUEST = "split_request"


class SplitRequestsJoin(Join):
    """Joins each model call into the held retrieval that fed it; holds retrievals (in the pairing state) and,
    with a shared one, the calls still looking for theirs."""

    def __init__(self, pairing: PairingState, marks: ServiceMarks, observer: JoinObserver | None = None) -> None:
        self.pairing = pairing
        self.marks = marks
        self.observer = observer
        # model calls completed here whose retrieval another receiver may be about to hold: (since, trace, half)
        self._answers: OrderedDict[str, tuple[float, CompletedTrace, halves.AnswerHalf]] = OrderedDict()

    def join(self, traces: list[CompletedTrace], now: float, everything: bool) -> list[CompletedTrace]:
        """``traces`` with each model call that a held or completing retrieval fed joined into that retrieval's
        trace, less the retrievals held back for their call (and, with a shared pairing state, the calls still
        looking for theirs), plus the held ones whose time passed."""
        out: list[CompletedTrace] = []
        held: list[HeldRetrieval] = []
        looking = list(self._answers.values())
        self._answers.clear()
        bare = self.marks.bare() if traces else set()
        for c in traces:  # only services whose traces start with a model call can split a request so
            if service_of(c) not in bare:
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
        if self.observer is not None:
            for _ in range(joined):
                self.observer.trace_completed(REASON_SPLIT_REQUEST)
        return out

    def held(self) -> Collection[str]:
        return self._answers.keys()

    def oldest_first_seen(self) -> float | None:
        """What this process holds: the calls still looking, and the retrievals in a pairing state of its own."""
        found = [c.first_seen for _, c, _ in self._answers.values()]
        held = self.pairing.oldest_first_seen()
        return min([*found, held] if held is not None else found, default=None)

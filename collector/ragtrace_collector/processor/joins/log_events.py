"""GenAI log events joined to their spans, first of the joins, so every later step reads them as span data.

The carriers wait in assembly beside the trace's spans (``assembly/traces.py``); here each completed trace has
them folded into their spans (``conventions.log_events.fold``), those whose span never came left out, both
counted through the observer's :class:`~ragtrace_collector.processor.assembly.traces.LogEventsObserver` role.
"""

from __future__ import annotations

from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.assembly.traces import LogEventsObserver
from ragtrace_collector.processor.conventions import log_events
from ragtrace_collector.processor.joins.join import Join

# Log events' fates here (the ``outcome`` of ragtrace_log_records_total; assembly reports late and over_limit).
LOG_JOINED = "joined"
LOG_UNMATCHED = "unmatched"


class LogEventsJoin(Join):
    """Folds each trace's log events into their spans; holds nothing, returns every trace it is given."""

    def __init__(self, observer: LogEventsObserver | None = None) -> None:
        self.observer = observer

    def join(self, traces: list[CompletedTrace], now: float, everything: bool) -> list[CompletedTrace]:
        joined = unmatched = 0
        for c in traces:
            folded = log_events.fold(c.spans)
            c.spans = folded.spans
            joined += folded.joined
            unmatched += folded.unmatched
        if self.observer is not None:
            if joined:
                self.observer.log_events(LOG_JOINED, joined)
            if unmatched:
                self.observer.log_events(LOG_UNMATCHED, unmatched)
        return traces

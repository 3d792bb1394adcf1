"""Traces that are no request leave before the joins that pair requests: they make no record, counted.

An index build or a vector-store write is traced too; it must neither become a record nor be paired as half of
a request. Not a join: a step that only drops, kept to the same contract so the order stays one list.
"""

from __future__ import annotations

from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions.extractors import is_request
from ragtrace_collector.processor.joins.join import Join, JoinObserver

# Completion reason reported for a trace that is no request: it is counted under this reason instead of the way
# it completed.
REASON_NO_REQUEST = "no_request"


class RequestsOnly(Join):
    """Returns the traces that are requests (``TraceSpans.is_request``); log events alone are none."""

    def __init__(self, observer: JoinObserver | None = None) -> None:
        self.observer = observer

    def join(self, traces: list[CompletedTrace], now: float, everything: bool) -> list[CompletedTrace]:
        requests = [c for c in traces if c.spans and is_request(c.classified())]
        if self.observer is not None:
            for _ in range(len(traces) - len(requests)):
                self.observer.trace_completed(REASON_NO_REQUEST)
        return requests

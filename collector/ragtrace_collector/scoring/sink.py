"""The result-sink contract: the one interface every scoring output implements (Prometheus, OTLP evaluation events,
Phoenix annotations, the results store), as opentelemetry-python's ``SpanExporter`` is for spans."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from ragtrace_collector.internal.component import Component
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult


class ResultSink(Component):
    """Where recorded results go. ``emit`` never blocks for long (a sink that talks to a downstream buffers and
    sends from its own thread); :meth:`force_flush` waits for what was emitted to leave; ``shutdown(timeout)``
    (:class:`~ragtrace_collector.internal.component.Component`) sends what it can within ``timeout`` and counts the
    rest."""

    @abstractmethod
    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> object:
        """Take ``record``'s newly recorded ``results``, scored by ``judge``; what it returns is the sink's own."""

    def force_flush(self, timeout: float | None = None) -> bool:
        """Wait until what was emitted has left (sent or counted); False when ``timeout`` passed first. A sink
        that holds nothing has nothing to wait for."""
        return True

    def shutdown(self, timeout: float | None = None) -> None:
        """Nothing held: nothing to release (sinks with a downstream override it)."""

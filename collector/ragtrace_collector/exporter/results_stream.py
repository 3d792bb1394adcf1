"""Each scored record and its results onto one Redis stream, ``{prefix}:results``, for the receivers that show them.

Scaled out, a worker's results store holds only what it scored; receivers follow this stream into theirs
(``scoring/results_replica.py``), so the explorer that alerts link to shows every record. This is an exporter like OTLP
events and Phoenix: ``emit`` only queues (the scoring loop never waits on Redis), a thread of its own appends in
pipelined batches (``XADD ... MAXLEN ~ export.results_stream_max_entries``), and what Redis took is confirmed in the
worker's results store. What it could not send (an outage longer than its buffer, a stop) stays unconfirmed, and the
next start sends it again (``service/scoring.py`` ``ExportResume``); the replicas store each record once.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.config import ExportConfig
from ragtrace_collector.internal.outcomes import Outcomes
from ragtrace_collector.internal.redis import UNAVAILABLE, Breaker, connect
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_replica import entry_of, stream_key
from ragtrace_collector.scoring.sink import ResultSink

EXPORTER = "results_stream"  # its name in the results store's ``exported`` table
STATUSES = ("scored", "skipped", "error")  # every result: the explorer shows them all
BATCH = 100
_EXPORT = ExportConfig()  # the defaults are the config's (``export`` section), written once there

SENT = "sent"
DROPPED = "dropped"  # beyond the buffer while Redis was away: sent again at the next start

Confirm = Callable[[list[tuple[str, str]]], None]


class ResultsStream(ResultSink):
    """Queues each scored record and sends it to ``{prefix}:results`` from a thread (see the module docstring)."""

    def __init__(
        self,
        url: str,
        registry: CollectorRegistry | None = None,
        confirm: Confirm | None = None,
        *,
        max_entries: int = _EXPORT.results_stream_max_entries,
        max_buffer: int = 10_000,
        interval: float = 0.2,
        client: Any = None,
    ) -> None:
        self.stream = stream_key(url)
        self.confirm = confirm
        self.max_entries = max_entries
        self.interval = interval
        self._r: Any = client if client is not None else connect(url)
        self._breaker = Breaker("Redis (results stream)", "scored records wait here and are sent when it is back")
        self._buffer: collections.deque[tuple[RagRecord, list[MetricResult], str]] = collections.deque()
        self._max_buffer = max_buffer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        streamed = None
        if registry is not None:
            streamed = Counter(
                "ragtrace_results_streamed",
                "Scored records sent to the Redis results stream for the receivers' explorers: sent, and dropped"
                " beyond the buffer while Redis was away (sent again at the next start).",
                ("outcome",),
                registry=registry,
            )
        self._outcomes = Outcomes(streamed, SENT, DROPPED)
        self.counts = self._outcomes.counts

    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> None:
        if not results:
            return
        with self._lock:
            if len(self._buffer) >= self._max_buffer:
                self._buffer.popleft()
                self._outcomes.add(DROPPED, 1)
            self._buffer.append((record, list(results), judge))
            self._idle.clear()
        self._wake.set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ragtrace-results-stream", daemon=True)
        self._thread.start()

    def force_flush(self, timeout: float | None = None) -> bool:
        self._wake.set()
        return self._idle.wait(timeout)

    def shutdown(self, timeout: float | None = None) -> None:
        """Send what is queued within ``timeout``; the rest stays unconfirmed (the next start sends it)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._r.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            self.send_once()
        self.send_once()

    def send_once(self) -> int:
        """Send what is queued, a batch per round trip, until it is empty or Redis is away; returns how many."""
        sent = 0
        while self._breaker.available():
            with self._lock:
                batch = list(itertools.islice(self._buffer, BATCH))
            if not batch:
                break
            try:
                pipe = self._r.pipeline(transaction=False)
                for record, results, judge in batch:
                    pipe.xadd(self.stream, entry_of(record, results, judge), maxlen=self.max_entries, approximate=True)
                pipe.execute()
            except UNAVAILABLE as exc:
                self._breaker.failed(exc)
                break
            self._breaker.recovered()
            with self._lock:
                # emit appends at the right and, past the bound, drops at the left: of the batch, what is still at
                # the left is what to take off (one emit dropped meanwhile was sent all the same)
                for item in batch:
                    if self._buffer and self._buffer[0] is item:
                        self._buffer.popleft()
            if self.confirm is not None:
                self.confirm([(record.key, r.metric) for record, results, _ in batch for r in results])
            sent += len(batch)
        with self._lock:
            if not self._buffer:
                self._idle.set()
        self._outcomes.add(SENT, sent)
        return sent

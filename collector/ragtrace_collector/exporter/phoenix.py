"""Scores into Arize Phoenix as span annotations, where Phoenix users filter and sort traces.

Each scored result becomes one annotation of the scored request's root span (``record.metadata["root_span_id"]``,
set by the assembler) through Phoenix's REST API, ``POST /v1/span_annotations``::

    {"span_id": "<16 hex>", "name": "faithfulness", "annotator_kind": "LLM" | "CODE",
     "result": {"score": 0.5, "label": "fail", "explanation": "Unsupported claims: ..."},
     "identifier": "ragtrace/<judge>", "metadata": {"judge": ..., "pipeline": ..., "higher_is_better": ...}}

``annotator_kind`` is ``LLM`` when an LLM judge was called for the score, else ``CODE`` (the embedded judge,
lexical and latency metrics). The identifier makes a re-delivered score replace its annotation, not repeat it.
Phoenix is asked to insert asynchronously (``sync=false``): it holds an annotation whose span has not arrived
yet, so scores may reach it before the trace does.

Sending never blocks scoring: :meth:`PhoenixAnnotations.emit` only appends to a bounded queue; a background
thread with its own event loop posts batches with aiohttp, retrying a Phoenix that is down or overloaded with
backoff. Whatever cannot be delivered is counted in ``ragtrace_phoenix_annotations_total{outcome}`` (``sent``,
or why it was dropped: ``queue_full``, ``no_span``, ``rejected``, ``unreachable``, ``shutdown``), never lost
silently.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.exporter.otlp_events import explanation, parse_span_id
from ragtrace_collector.exporter.sender_loop import SenderLoop
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult

log = logging.getLogger(__name__)

ANNOTATIONS_PATH = "/v1/span_annotations"
OUTCOMES = ("sent", "queue_full", "no_span", "rejected", "unreachable", "shutdown")
LOCAL_JUDGE = "local"


def annotator_kind(result: MetricResult, judge: str) -> str:
    """``LLM`` when an LLM judge was called for this score, else ``CODE``."""
    return "LLM" if judge != LOCAL_JUDGE and result.usage.calls > 0 else "CODE"


def annotation(record: RagRecord, result: MetricResult, judge: str, span_id: str) -> dict[str, Any]:
    """One result as a Phoenix ``SpanAnnotationData`` body."""
    outcome: dict[str, Any] = {"score": float(result.score) if result.score is not None else None}
    if result.label:
        outcome["label"] = result.label
    why = explanation(result)
    if why:
        outcome["explanation"] = why
    metadata: dict[str, Any] = {"judge": judge, "higher_is_better": result.higher_is_better}
    if record.pipeline:
        metadata["pipeline"] = record.pipeline
    if record.trace_id:
        metadata["trace_id"] = record.trace_id
    return {
        "span_id": span_id,
        "name": result.metric,
        "annotator_kind": annotator_kind(result, judge),
        "result": outcome,
        "identifier": f"ragtrace/{judge}",
        "metadata": metadata,
    }


class PhoenixAnnotations:
    """A :class:`~ragtrace_collector.scoring.worker.ResultSink` posting each score to Phoenix as a span annotation.

    At most ``max_pending`` annotations wait (later ones are dropped and counted); they leave in batches of
    ``batch_size``, at least every ``flush_interval`` seconds; a batch Phoenix cannot take is retried
    ``max_attempts`` times with backoff, then counted ``unreachable``. ``shutdown`` sends what waits within its
    bound and counts the rest.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        batch_size: int = 100,
        max_pending: int = 10_000,
        timeout: float = 10.0,
        flush_interval: float = 1.0,
        max_attempts: int = 5,
        backoff_initial: float = 0.5,
        registry: CollectorRegistry | None = None,
    ) -> None:
        if batch_size < 1 or max_pending < 1:
            raise ValueError("phoenix batch_size and max_pending must be at least 1")
        self.url = endpoint.rstrip("/") + ANNOTATIONS_PATH
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.timeout = timeout
        self.flush_interval = flush_interval
        self.max_attempts = max_attempts
        self.backoff_initial = backoff_initial
        self.registry = registry if registry is not None else CollectorRegistry()
        self.counter = Counter(
            "ragtrace_phoenix_annotations",
            "Scores sent to Phoenix as span annotations (outcome=sent) or dropped, by why.",
            ("outcome",),
            registry=self.registry,
        )
        self._outcomes = {o: self.counter.labels(o) for o in OUTCOMES}
        self._pending: deque[dict[str, Any]] = deque()
        self._busy = 0  # annotations taken from the queue and not yet sent or dropped
        self._cond = threading.Condition()
        self._closing = False
        self._rejected_logged: set[int] = set()
        self._sender = SenderLoop("ragtrace-phoenix", self._run, "the phoenix exporter")
        self._wake = self._sender.wake
        self._sender.start()

    # -- the scoring side (never blocks) ---------------------------------------------------------
    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        """Queue one annotation per scored result; returns how many were queued."""
        scored = [r for r in results if r.status == "scored" and r.score is not None and math.isfinite(r.score)]
        if not scored:
            return 0
        span = parse_span_id((record.metadata or {}).get("root_span_id"))
        if span is None:  # a dataset row, or a trace whose root span never arrived: nothing to annotate
            self._count("no_span", len(scored))
            return 0
        span_id = format(span, "016x")
        queued = 0
        with self._cond:
            if self._closing:
                self._outcomes["shutdown"].inc(len(scored))
                return 0
            for result in scored:
                if len(self._pending) >= self.max_pending:
                    self._outcomes["queue_full"].inc()
                    continue
                self._pending.append(annotation(record, result, judge, span_id))
                queued += 1
            full = len(self._pending) >= self.batch_size
        if full:
            self._sender.signal()
        return queued

    def count(self, outcome: str) -> float:
        """Annotations counted under ``outcome`` (of :data:`OUTCOMES`) so far."""
        return self.registry.get_sample_value("ragtrace_phoenix_annotations_total", {"outcome": outcome}) or 0.0

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued was sent or dropped; False when ``timeout`` passed first."""
        self._sender.signal()
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def shutdown(self, timeout: float | None = None) -> None:
        """Send what waits (within ``timeout``, default twice the request timeout), count the rest, stop."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
        self._sender.stop(
            timeout if timeout is not None else 2 * self.timeout + 1
        )  # past it, in-flight work is cancelled
        with self._cond:
            left = len(self._pending)
            self._pending.clear()
        self._count("shutdown", left)

    # -- the sending side (its own thread and event loop) -------------------------------------------
    def _count(self, outcome: str, n: int) -> None:
        if n:
            self._outcomes[outcome].inc(n)

    def _take(self) -> list[dict[str, Any]]:
        with self._cond:
            n = min(self.batch_size, len(self._pending))
            batch = [self._pending.popleft() for _ in range(n)]
            self._busy += n
            return batch

    def _done(self, n: int) -> None:
        with self._cond:
            self._busy -= n
            self._cond.notify_all()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout, headers=self.headers) as session:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), self.flush_interval)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                while batch := self._take():
                    try:
                        await self._send(session, batch)
                    except asyncio.CancelledError:
                        self._count("shutdown", len(batch))
                        raise
                    finally:
                        self._done(len(batch))
                with self._cond:
                    if self._closing and not self._pending:
                        self._cond.notify_all()
                        return

    async def _send(self, session: aiohttp.ClientSession, batch: list[dict[str, Any]]) -> None:
        delay = self.backoff_initial
        problem = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with session.post(self.url, params={"sync": "false"}, json={"data": batch}) as reply:
                    if reply.status < 300:
                        self._count("sent", len(batch))
                        return
                    problem = f"HTTP {reply.status}: {(await reply.text())[:200]}"
                    if reply.status not in (408, 429) and reply.status < 500:
                        self._count("rejected", len(batch))  # a retry would be refused the same way
                        if reply.status not in self._rejected_logged:
                            self._rejected_logged.add(reply.status)
                            log.warning("phoenix refused %d span annotations (%s)", len(batch), problem)
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if attempt == self.max_attempts or self._closing:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
        self._count("unreachable", len(batch))
        log.warning("phoenix at %s unreachable, %d span annotations dropped (%s)", self.url, len(batch), problem)

"""Scores into Arize Phoenix as span and trace annotations, where Phoenix users filter and sort traces.

Each scored result becomes two annotations through Phoenix's REST API: one of the scored request's root span
(``record.metadata["root_span_id"]``, set by the assembler), ``POST /v1/span_annotations``::

    {"data": [{"span_id": "<16 hex>", "name": "faithfulness", "annotator_kind": "LLM" | "CODE",
               "result": {"score": 0.5, "label": "fail", "explanation": "Unsupported claims: ..."},
               "identifier": "ragtrace/<judge>",
               "metadata": {"judge": ..., "pipeline": ..., "higher_is_better": ..., "trace_id": ...,
                            "provenance": {"judge_model": ..., "judge_hash": ..., "metric_version": ..., ...}}}, ...]}

and one of its trace (``record.trace_id``), the same fields with ``trace_id`` for ``span_id``,
``POST /v1/trace_annotations``::

    {"data": [{"trace_id": "<32 hex>", "name": "faithfulness", "annotator_kind": ..., "result": ...,
               "identifier": ..., "metadata": ...}, ...]}

The span annotation shows on the root span (and filters spans: ``annotations['faithfulness'].score``); the trace
annotation fills the trace annotations column and chart of Phoenix's traces table.

``annotator_kind`` is ``LLM`` when an LLM judge was called for the score, else ``CODE`` (the embedded judge,
lexical and latency metrics). The identifier makes a re-delivered score replace its annotation, not repeat it:
Phoenix keeps one annotation per (span or trace, name, identifier) and upserts the next with the same three, so
the identifier is deterministic per judge, and a score is one (record, metric) on the record's root span and trace.

Delivery is at least once: each result whose annotations Phoenix took is confirmed (``confirm``, which the service
points at the results store); results stored but not confirmed (a ``kill -9``, a stop past its bound, a Phoenix
that was down) are sent again at the next start, and Phoenix upserts them.
Phoenix is asked to insert asynchronously (``sync=false``): it holds an annotation whose span or trace has not
arrived yet, so scores may reach it before the trace does.

Sending never blocks scoring: :meth:`PhoenixAnnotations.emit` only appends to a bounded queue; a background
thread with its own event loop posts batches (each of one kind, the kinds taking turns) with aiohttp, retrying a
Phoenix that is down or overloaded with backoff. Whatever cannot be delivered is counted in
``ragtrace_phoenix_annotations_total{kind,outcome}`` (``kind``: ``span`` or ``trace``; ``outcome``: ``sent``, or
why it was dropped: ``queue_full``, ``no_span`` (no root span id; span kind only), ``no_trace`` (no valid trace
id; trace kind only), ``rejected``, ``unreachable``, ``shutdown``), never lost silently. The kind tells apart a
Phoenix that takes one kind and refuses the other (one too old for trace annotations answers 4xx: ``rejected``,
never retried). A redirect is never followed (a 302 to a login page would have turned the POST into a GET
answered 200): it is ``rejected`` too, the log saying where it pointed. A reply's body is read up to
``MAX_REPLY_BYTES`` (see :mod:`~ragtrace_collector.exporter.sender_loop`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.config import PhoenixConfig
from ragtrace_collector.exporter.otlp_events import explanation, parse_span_id, parse_trace_id
from ragtrace_collector.exporter.sender_loop import SenderLoop, describe_status, read_reply
from ragtrace_collector.internal.urls import mask_credentials, mask_credentials_in
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.sink import ResultSink

log = logging.getLogger(__name__)

ANNOTATIONS_PATHS = {"span": "/v1/span_annotations", "trace": "/v1/trace_annotations"}
KINDS = ("span", "trace")
OUTCOMES = ("sent", "queue_full", "no_span", "no_trace", "rejected", "unreachable", "shutdown")
_NOT_OF = {"span": "no_trace", "trace": "no_span"}  # the outcome a kind never has: no series for it
LOCAL_JUDGE = "local"
EXPORTER = "phoenix"  # the name its confirmations are kept under in the results store
STATUSES = ("scored",)  # the results it sends (with a finite score)

#: Told the ``(record key, metric)`` results whose annotations Phoenix took, from the sending thread: what the
#: results store marks exported, so a restart sends again only what was not.
Confirm = Callable[[list[tuple[str, str]]], None]


class _Result:
    """One result's annotations on their way: confirmed once every kind queued for it was taken (a kind that has
    nothing to annotate, no span or no trace, is not waited for)."""

    __slots__ = ("key", "left", "lost", "metric")

    def __init__(self, key: str, metric: str) -> None:
        self.key = key
        self.metric = metric
        self.left = 0  # kinds queued and not yet taken
        self.lost = False  # a kind was not taken (queue full, unreachable, rejected, shutdown): sent again next start


def annotator_kind(result: MetricResult, judge: str) -> str:
    """``LLM`` when an LLM judge was called for this score, else ``CODE``."""
    return "LLM" if judge != LOCAL_JUDGE and result.usage.calls > 0 else "CODE"


def annotation_data(record: RagRecord, result: MetricResult, judge: str) -> dict[str, Any]:
    """One result as Phoenix's ``AnnotationData``: what its span and trace annotations share."""
    outcome: dict[str, Any] = {"score": float(result.score) if result.score is not None else None}
    if result.label:
        outcome["label"] = result.label
    why = explanation(result)
    if why:
        outcome["explanation"] = why
    metadata: dict[str, Any] = {"judge": judge, "higher_is_better": result.higher_is_better}
    if result.provenance:  # what produced the score: judge model and hash, metric and ragtrace versions
        metadata["provenance"] = dict(result.provenance)
    if record.pipeline:
        metadata["pipeline"] = record.pipeline
    if record.trace_id:
        metadata["trace_id"] = record.trace_id
    return {
        "name": result.metric,
        "annotator_kind": annotator_kind(result, judge),
        "result": outcome,
        "identifier": f"ragtrace/{judge}",
        "metadata": metadata,
    }


def annotation(record: RagRecord, result: MetricResult, judge: str, span_id: str) -> dict[str, Any]:
    """One result as a Phoenix ``SpanAnnotationData`` body."""
    return {"span_id": span_id, **annotation_data(record, result, judge)}


def trace_annotation(record: RagRecord, result: MetricResult, judge: str, trace_id: str) -> dict[str, Any]:
    """One result as a Phoenix ``TraceAnnotationData`` body."""
    return {"trace_id": trace_id, **annotation_data(record, result, judge)}


class PhoenixAnnotations(ResultSink):
    """A :class:`~ragtrace_collector.scoring.sink.ResultSink` posting each score to Phoenix as a span annotation
    of the request's root span and a trace annotation of its trace.

    At most ``max_pending`` annotations (of both kinds together) wait; later ones are dropped and counted; they
    leave in batches of at most ``batch_size`` annotations of one kind, at least every ``flush_interval``
    seconds; a batch Phoenix cannot take is retried ``max_attempts`` times with backoff, then counted
    ``unreachable``. ``shutdown`` sends what waits within its bound and counts the rest.
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
        confirm: Confirm | None = None,
    ) -> None:
        if batch_size < 1 or max_pending < 1:
            raise ValueError("phoenix batch_size and max_pending must be at least 1")
        self.urls = {kind: endpoint.rstrip("/") + path for kind, path in ANNOTATIONS_PATHS.items()}
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
            "Scores sent to Phoenix as span and trace annotations (outcome=sent) or dropped, by kind and why.",
            ("kind", "outcome"),
            registry=self.registry,
        )
        self._outcomes = {
            (k, o): self.counter.labels(kind=k, outcome=o) for k in KINDS for o in OUTCOMES if o != _NOT_OF[k]
        }
        self.confirm = confirm
        self._pending: dict[str, deque[tuple[dict[str, Any], _Result]]] = {k: deque() for k in KINDS}
        self._last = KINDS[-1]  # the kind of the last batch taken: the other goes next when both wait
        self._busy = 0  # annotations taken from the queue and not yet sent or dropped
        self._cond = threading.Condition()
        self._closing = False
        self._rejected_logged: set[tuple[str, int]] = set()
        self._sender = SenderLoop("ragtrace-phoenix", self._run, "the phoenix exporter")
        self._wake = self._sender.wake
        self._sender.start()

    @classmethod
    def from_config(
        cls, config: PhoenixConfig, registry: CollectorRegistry | None = None, confirm: Confirm | None = None
    ) -> PhoenixAnnotations:
        """The sink an ``export.phoenix`` section asks for (its ``endpoint`` must be set)."""
        if not config.endpoint:
            raise ValueError("export.phoenix.endpoint is not set")
        return cls(
            config.endpoint,
            api_key=config.api_key,
            batch_size=config.batch_size,
            max_pending=config.max_pending,
            timeout=config.timeout_seconds,
            registry=registry,
            confirm=confirm,
        )

    # -- the scoring side (never blocks) ---------------------------------------------------------
    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> int:
        """Queue a span and a trace annotation per scored result; returns how many annotations were queued."""
        scored = [r for r in results if r.status == "scored" and r.score is not None and math.isfinite(r.score)]
        if not scored:
            return 0
        span = parse_span_id((record.metadata or {}).get("root_span_id"))
        trace = parse_trace_id(record.trace_id)
        if span is None:  # a dataset row, or a trace whose root span never arrived: no span to annotate
            self._count("span", "no_span", len(scored))
        if trace is None:  # a dataset row: no trace to annotate
            self._count("trace", "no_trace", len(scored))
        items: list[tuple[str, dict[str, Any], _Result]] = []
        for result in scored:  # a score's two side by side: a full queue drops later scores, not one kind
            ref = _Result(record.key, result.metric)
            if span is not None:
                items.append(("span", annotation(record, result, judge, format(span, "016x")), ref))
            if trace is not None:
                items.append(("trace", trace_annotation(record, result, judge, format(trace, "032x")), ref))
        if not items:
            return 0
        queued = 0
        with self._cond:
            if self._closing:
                for kind, _, _ in items:
                    self._outcomes[(kind, "shutdown")].inc()
                return 0
            waiting = self._waiting()
            for kind, body, ref in items:
                if waiting >= self.max_pending:
                    self._outcomes[(kind, "queue_full")].inc()
                    ref.lost = True
                    continue
                ref.left += 1
                self._pending[kind].append((body, ref))
                waiting += 1
                queued += 1
            full = any(len(q) >= self.batch_size for q in self._pending.values())
        if full:
            self._sender.signal()
        return queued

    def count(self, outcome: str, kind: str | None = None) -> float:
        """Annotations counted under ``outcome`` (of :data:`OUTCOMES`) so far: of ``kind``, or of both kinds."""
        return sum(
            self.registry.get_sample_value("ragtrace_phoenix_annotations_total", {"kind": k, "outcome": outcome}) or 0.0
            for k in ((kind,) if kind else KINDS)
        )

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued was sent or dropped; False when ``timeout`` passed first."""
        self._sender.signal()
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting() and not self._busy, timeout)

    def force_flush(self, timeout: float | None = None) -> bool:
        """:meth:`flush`, as the sink contract names it (None: a minute)."""
        return self.flush(60.0 if timeout is None else timeout)

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
            left = {k: len(q) for k, q in self._pending.items()}
            for q in self._pending.values():
                q.clear()
        for kind, n in left.items():
            self._count(kind, "shutdown", n)

    # -- the sending side (its own thread and event loop) -------------------------------------------
    def _waiting(self) -> int:
        return sum(len(q) for q in self._pending.values())

    def _count(self, kind: str, outcome: str, n: int) -> None:
        if n:
            self._outcomes[(kind, outcome)].inc(n)

    def _take(self) -> tuple[str, list[tuple[dict[str, Any], _Result]]] | None:
        """The next batch, of one kind: the kinds take turns, so neither waits behind a stream of the other."""
        with self._cond:
            first = KINDS.index(self._last) + 1
            for kind in KINDS[first:] + KINDS[:first]:
                queue = self._pending[kind]
                if queue:
                    n = min(self.batch_size, len(queue))
                    batch = [queue.popleft() for _ in range(n)]
                    self._busy += n
                    self._last = kind
                    return kind, batch
            return None

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
                while taken := self._take():
                    kind, items = taken
                    taken_ok = False
                    try:
                        taken_ok = await self._send(session, kind, [body for body, _ in items])
                    except asyncio.CancelledError:
                        self._count(kind, "shutdown", len(items))
                        raise
                    finally:
                        self._settle([ref for _, ref in items], taken_ok)
                        self._done(len(items))
                with self._cond:
                    if self._closing and not self._waiting():
                        self._cond.notify_all()
                        return

    def _settle(self, refs: list[_Result], taken: bool) -> None:
        """Note one kind of these results taken by Phoenix (or not); confirm those whose every kind was."""
        done: list[tuple[str, str]] = []
        with self._cond:
            for ref in refs:
                ref.left -= 1
                ref.lost = ref.lost or not taken
                if ref.left == 0 and not ref.lost:
                    done.append((ref.key, ref.metric))
        if done and self.confirm is not None:
            try:
                self.confirm(done)
            except Exception as exc:  # not confirmed: sent again at the next start, which Phoenix upserts
                log.warning("phoenix annotations sent but not marked exported: %s", exc)

    async def _send(self, session: aiohttp.ClientSession, kind: str, batch: list[dict[str, Any]]) -> bool:
        """Post one batch, retrying what may pass later; True when Phoenix took it."""
        url = self.urls[kind]
        delay = self.backoff_initial
        problem = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                async with session.post(
                    url, params={"sync": "false"}, json={"data": batch}, allow_redirects=False
                ) as reply:
                    if reply.status < 300:
                        self._count(kind, "sent", len(batch))
                        return True
                    said = (await read_reply(reply)).decode("utf-8", "replace")[:200]
                    problem = describe_status(reply.status, reply.headers.get("Location")) + (
                        f": {said}" if said else ""
                    )
                    if reply.status not in (408, 429) and reply.status < 500:
                        self._count(kind, "rejected", len(batch))  # a retry would be refused the same way
                        if (kind, reply.status) not in self._rejected_logged:
                            self._rejected_logged.add((kind, reply.status))
                            log.warning("phoenix refused %d %s annotations (%s)", len(batch), kind, problem)
                        return False  # not confirmed: a key or a Phoenix fixed by the next start takes it then
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                problem = mask_credentials_in(f"{type(exc).__name__}: {exc}")
            if attempt == self.max_attempts or self._closing:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
        self._count(kind, "unreachable", len(batch))
        log.warning(
            "phoenix at %s unreachable, %d %s annotations dropped (%s)",
            mask_credentials(url),
            len(batch),
            kind,
            problem,
        )
        return False

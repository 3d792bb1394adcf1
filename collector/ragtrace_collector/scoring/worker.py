"""The scoring worker: lease sampled records, score them with the judge, record results once.

Flow for one leased record:

1. metrics to run = ``scoring.pipelines[record.pipeline]`` or ``scoring.metrics``, minus those the
   results store already holds for this record (a redelivered record does not pay the judge twice);
   on a shared queue, stored results that carry no cluster-wide scored mark (the worker died between
   storing and marking them) are marked and counted now instead of being skipped;
2. ``evaluate_record(record, metrics, judge, options)``;
3. results are written to the results store with insert-or-ignore; only rows that were new reach
   the Prometheus metrics and the ``gen_ai.evaluation.result`` events, so scoring is idempotent;
4. the record is acked — unless a metric failed because the judge was *unavailable*
   (``JudgeError(retryable=True)`` or a result with ``retryable``): then what did score is kept,
   the record is released back to the queue with a delay, and the whole worker backs off
   (exponentially, reset by the next success) instead of hammering a judge that is down. While it
   is down one record at a time probes it, so a refused key or a wrong model (which no retry fixes:
   the judge reports them as unavailable, not as verdicts) costs one request per backoff window, not
   the backlog; ``judge_unavailable{reason}`` counts each release and one warning names the cause.

While a record is being scored its lease is renewed (``RecordQueue.extend``), so a slow
judge does not get it redelivered mid-scoring. A record whose scoring raises something unexpected is released and retried; after
``max_attempts`` deliveries its metrics are recorded as errors so a poison record cannot block
the queue forever. ``shutdown(timeout)`` (the component contract) stops leasing, lets in-flight records finish
within half the timeout and releases the rest at once, so nothing leased is lost on shutdown (and a kill -9 just
lets their leases lapse); the results store and the result sinks it writes to are components of their own, shut
down after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import logging
import random
import time
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, cast

from ragtrace_collector.internal.component import AsyncComponent, Lifecycle
from ragtrace_collector.internal.secrets import Scrubber
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.queue.base import Leased, RecordQueue, SharedQueue
from ragtrace_collector.scoring.capabilities import Capability, capabilities_of
from ragtrace_collector.scoring.judge import Judge, JudgeError, JudgeIdentity, JudgeUnsupported, unavailable_scope
from ragtrace_collector.scoring.options import ScoringOptions
from ragtrace_collector.scoring.provenance import with_provenance
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.scoring.sink import ResultSink

__all__ = ["ResultSink", "ScoringObserver", "ScoringWorker", "TimedJudge", "metrics_selector"]

log = logging.getLogger(__name__)

Evaluate = Callable[[RagRecord, Sequence[str], Judge, Any], Awaitable[list[MetricResult]]]


class ScoringObserver(Protocol):
    """What the worker reports besides results (implemented by
    :class:`ragtrace_collector.exporter.prometheus.EvalMetrics`, which is also the Prometheus result sink)."""

    def observe_judge_latency(self, judge: str, seconds: float) -> None:
        """One judge decision took ``seconds``."""

    def judge_registered(self, judge: str) -> None:
        """A judge is in use (its series exist from the start, at zero)."""

    def judge_unavailable(self, judge: str, reason: str = "unavailable") -> None:
        """The judge could not be used (``reason``: :data:`~ragtrace_collector.scoring.judge.UnavailableReason`);
        a record went back to the queue."""

    def record_released(self, reason: str) -> None:
        """A record went back to the queue unscored, for ``reason``."""


class _Backoff:
    """Exponential backoff with jitter, shared by every task of one worker (the judge is shared)."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.current = 0.0
        self.until = 0.0

    def failed(self) -> float:
        """Note a failure; the delay grows once per window, not once per concurrent failure."""
        now = time.monotonic()
        if now < self.until:
            return self.until - now
        self.current = self.initial if self.current == 0.0 else min(self.maximum, self.current * 2)
        delay = self.current * random.uniform(0.8, 1.2)
        self.until = now + delay
        return delay

    def succeeded(self) -> None:
        self.current = 0.0
        self.until = 0.0

    def remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())

    @property
    def failing(self) -> bool:
        """Whether the last judge outage has not yet been followed by a success."""
        return self.current > 0.0


class TimedJudge(Judge):
    """Wraps a judge to report how long each decision took (``ragtrace_judge_latency_seconds``).

    It makes the decisions the wrapped judge makes, no more: ``TimedJudge(inner, observer)`` is an instance of
    a subclass that derives from exactly the decision interfaces ``inner`` declares
    (:func:`~ragtrace_collector.scoring.capabilities.capabilities_of`), each of their methods timed and
    delegated. Anything else (the judge's own attributes) is read from the wrapped judge.
    """

    _inner: Judge
    _observer: ScoringObserver

    def __new__(cls, inner: Judge, observer: ScoringObserver) -> TimedJudge:
        return super().__new__(_timed_class(capabilities_of(inner)))

    def __init__(self, inner: Judge, observer: ScoringObserver) -> None:
        self._inner = inner
        self._observer = observer
        self.name = inner.name
        observer.judge_registered(inner.name)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._inner, item)

    def identity(self) -> JudgeIdentity:
        return self._inner.identity()

    async def aclose(self) -> None:
        await self._inner.aclose()


@functools.cache
def _timed_class(interfaces: tuple[type[Capability], ...]) -> type[TimedJudge]:
    """The :class:`TimedJudge` that declares ``interfaces``, every method of theirs timed (one class per set)."""
    methods = {name: _timed(name, interface) for interface in interfaces for name in interface.methods()}
    names = ", ".join(interface.__name__ for interface in interfaces)
    cls = types.new_class(f"TimedJudge[{names}]", (TimedJudge, *interfaces), exec_body=lambda ns: ns.update(methods))
    return cast("type[TimedJudge]", cls)


def _timed(method_name: str, interface: type[Capability]) -> Callable[..., Awaitable[Any]]:
    async def method(self: TimedJudge, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            result = await getattr(self._inner, method_name)(*args, **kwargs)
        except JudgeUnsupported:
            raise  # not a decision: the judge declined without working
        except JudgeError:
            self._observer.observe_judge_latency(self.name, time.perf_counter() - start)
            raise
        self._observer.observe_judge_latency(self.name, time.perf_counter() - start)
        return result

    method.__name__ = method_name
    method.__qualname__ = f"TimedJudge.{method_name}"
    method.__doc__ = getattr(interface, method_name).__doc__
    return method


class ScoringWorker(AsyncComponent):
    """Scores queued records with at most ``concurrency`` in flight, from :meth:`start` (or :meth:`run`) until
    :meth:`shutdown`. Results go to ``store`` first (what is new), then the new ones to ``sinks``."""

    def __init__(
        self,
        queue: RecordQueue,
        judge: Judge,
        store: ResultsStore,
        metrics: ScoringObserver,
        *,
        metrics_for: Callable[[RagRecord], Sequence[str]],
        evaluate: Evaluate,
        options: ScoringOptions | None = None,
        sinks: ResultSink | None = None,
        concurrency: int = 4,
        lease_seconds: float = 120.0,
        poll_interval: float = 0.2,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        max_attempts: int = 10,
        judge_name: str | None = None,
        scrubber: Scrubber | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("scoring concurrency must be at least 1")
        self.queue = queue
        self.judge = judge
        self.judge_name = judge_name or judge.name
        # configured secrets (a provider may echo the API key in an error) out of what is stored and exported
        self.scrubber = scrubber if scrubber is not None else Scrubber()
        self.store = store
        self.metrics = metrics
        self.metrics_for = metrics_for
        self.evaluate = evaluate
        self.options = options
        self.sinks = sinks
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.max_attempts = max_attempts
        self.backoff = _Backoff(backoff_initial, backoff_max)
        self.on_usage: Callable[[JudgeUsage], None] | None = None  # e.g. the sampler's token budget
        self._inflight: dict[asyncio.Task[None], Leased] = {}
        self._keys: dict[str, list[Any]] = {}  # record key -> [lock, deliveries holding or awaiting it]
        self._commits: set[asyncio.Future[None]] = set()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self._outage: str | None = None  # the cause last logged for the current judge outage
        self.outage: str | None = None  # that cause and its message, for the explorer to say why records wait
        self._task: asyncio.Task[None] | None = None  # run() as started by start()
        self._shut = False

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start leasing and scoring (:meth:`run` as a task)."""
        self._task = asyncio.create_task(self.run(), name="ragtrace-scoring-worker")

    async def run(self) -> None:
        """Lease and score until :meth:`shutdown` (for a caller running the worker itself)."""
        self._running = asyncio.current_task()
        while not self._stopping.is_set():
            wait = self.backoff.remaining()
            if wait > 0:
                await self._sleep(wait)
                continue
            # while the judge is unavailable a single record probes it; full concurrency after a success
            free = (1 if self.backoff.failing else self.concurrency) - len(self._inflight)
            if free <= 0:
                await self._sleep(self.poll_interval)
                continue
            try:
                leased = await asyncio.to_thread(self.queue.lease, free, self.lease_seconds)
            except Exception as exc:
                log.warning("leasing from the queue failed, retrying: %s", exc)
                await self._sleep(max(self.poll_interval, 1.0))
                continue
            if self._stopping.is_set():
                for item in leased:
                    await self._release(item, 0.0, "shutdown")
                break
            for item in leased:
                task = asyncio.create_task(self._process(item))
                self._inflight[task] = item
                task.add_done_callback(self._done)
            if len(leased) < free:
                await self._sleep(self.poll_interval)

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop leasing and finish within ``timeout`` seconds (None: 10): in-flight records get half of it (those a
        slow judge holds are released, queued for the next start; the other half is the result sinks', shut down
        after the worker), then the commits under way, then the judge is closed."""
        if self._shut:
            return
        self._shut = True
        drain_timeout = 10.0 if timeout is None else max(0.0, timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout
        self._stopping.set()
        self._wake.set()
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=drain_timeout / 2)
        leftover = dict(self._inflight)
        for task in leftover:
            task.cancel()
        if leftover:
            await asyncio.gather(*leftover, return_exceptions=True)
            for item in leftover.values():
                await self._release(item, 0.0, "shutdown")  # a no-op for one its commit acks
        if self._commits:  # local writes: one that takes longer leaves its record leased (it comes back)
            await asyncio.wait(list(self._commits), timeout=max(0.5, deadline - loop.time()))
        running = self._task or self._running
        if running is not None and running is not asyncio.current_task():
            try:
                await asyncio.wait_for(running, timeout=max(0.1, min(1.0, deadline - loop.time())))
            except (asyncio.TimeoutError, asyncio.CancelledError):
                pass
        await self.judge.aclose()

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """For a worker run on its own (:func:`~ragtrace_collector.service.scoring.build_worker`, no service): shut
        it down, then its result sinks and its results store, within ``drain_timeout`` in all; what fails is logged."""
        parts = Lifecycle()
        parts.adopt("results store", self.store)
        if self.sinks is not None:
            parts.adopt("result sinks", self.sinks)
        parts.adopt("scoring worker", self)
        for failure in await parts.shutdown(drain_timeout):
            log.warning("stopping the scoring worker: %s", failure)

    def wake(self) -> None:
        """Look at the queue now instead of at the next poll (e.g. right after a put)."""
        self._wake.set()

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("scoring task failed", exc_info=task.exception())
        self._wake.set()

    # -- one record ----------------------------------------------------------------------------
    async def _process(self, item: Leased) -> None:
        record = item.record
        if not record.key:
            # No trace id and no row id: key it by content so idempotency still holds.
            digest = hashlib.sha256(record.model_dump_json().encode()).hexdigest()[:32]
            record = item.record = record.model_copy(update={"id": f"sha256:{digest}"})
        # Two deliveries of one record (a retried put, a lapsed lease) take turns in this worker: the
        # second then finds the first's results stored and marked, rather than stored and not yet
        # marked, which it would take for a crashed worker's and count a second time.
        entry = self._keys.setdefault(record.key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                await self._score(item)
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._keys[record.key]

    async def _score(self, item: Leased) -> None:
        record = item.record
        wanted = list(dict.fromkeys(self.metrics_for(record)))
        done, uncounted = await asyncio.to_thread(self._already_scored, record.key, wanted)
        todo = [m for m in wanted if m not in done]
        if not todo:
            if uncounted:
                await self._committed(item, [], uncounted)
            else:
                await asyncio.to_thread(self.queue.ack, item.receipt)
            return
        heartbeat = self._heartbeat(item)
        causes: list[JudgeError] = []
        try:
            with unavailable_scope() as causes:
                results = list(await self.evaluate(record, todo, self.judge, self.options))
        except JudgeError as exc:
            if exc.retryable:
                await self._judge_unavailable(item, exc)
                return
            results = [MetricResult(m, "error", reason=str(exc)) for m in todo]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if item.attempts < self.max_attempts:
                log.exception("scoring record %s failed (attempt %d), releasing it", record.key, item.attempts)
                await self._release(item, self.backoff.initial, "error")
                return
            log.exception("scoring record %s failed %d times, recording errors", record.key, item.attempts)
            results = [MetricResult(m, "error", reason=f"{type(exc).__name__}: {exc}") for m in todo]
        finally:
            if heartbeat is not None:
                heartbeat.cancel()

        # Recording is not cancellable: once results are being stored, shutdown waits for the
        # store, the metrics and the ack to happen together (a cancelled store-then-publish
        # would leave stored rows that never reached the metrics).
        await self._committed(item, results, uncounted, causes)

    async def _committed(
        self,
        item: Leased,
        results: list[MetricResult],
        uncounted: Sequence[MetricResult],
        causes: Sequence[JudgeError] = (),
    ) -> None:
        results = [scrubbed(with_provenance(r, self.judge), self.scrubber) for r in results]
        commit = asyncio.ensure_future(self._commit(item, results, uncounted, causes))
        self._commits.add(commit)
        commit.add_done_callback(self._commits.discard)
        await asyncio.shield(commit)

    async def _commit(
        self,
        item: Leased,
        results: list[MetricResult],
        uncounted: Sequence[MetricResult] = (),
        causes: Sequence[JudgeError] = (),
    ) -> None:
        record = item.record
        waiting = [r for r in results if r.status == "error" and r.retryable]
        final = [r for r in results if not (r.status == "error" and r.retryable)]
        new: list[bool] = []
        if uncounted:
            new += await asyncio.to_thread(self._claim, record.key, uncounted)
        if final:
            new += await asyncio.to_thread(self._record_results, record, final)
        if new:  # one publication per delivery: the record counts once in records_scored and the budget
            self._publish(record, list(uncounted) + final, new)
        if waiting:
            await self._judge_unavailable(item, _cause(causes, waiting[0]))
            return
        if self._outage is not None:
            log.info("judge %s answers again: scoring resumes", self.judge_name)
            self._outage = None
            self.outage = None
        self.backoff.succeeded()
        await asyncio.to_thread(self.queue.ack, item.receipt)

    def _heartbeat(self, item: Leased) -> asyncio.Task[None]:
        """Renew the lease every third of its length while the judge works, so a slow judge does
        not get the record redelivered (and paid for twice) mid-scoring."""

        async def beat() -> None:
            interval = max(0.05, self.lease_seconds / 3)
            while True:
                await asyncio.sleep(interval)
                try:
                    if not await asyncio.to_thread(self.queue.extend, item.receipt, self.lease_seconds):
                        return  # lease lost: the results store still keeps the counting exact
                except Exception as exc:
                    log.warning("renewing the lease of %s failed: %s", item.record.key, exc)

        return asyncio.create_task(beat())

    def _already_scored(self, key: str, wanted: Sequence[str]) -> tuple[set[str], list[MetricResult]]:
        """The metrics not to score again, and the stored results nobody has counted yet.

        On a shared queue (cluster-wide ``scored_marks``) a metric is done when this worker's store
        holds it or another worker marked it. A stored result without a mark is one this worker
        stored and then crashed before marking: it comes back to be marked and counted now, or the
        redelivery would skip it and it would never reach the metrics.
        """
        done = self.store.metrics_done(key)
        if not isinstance(self.queue, SharedQueue):
            return done, []
        marks = self.queue.scored_marks
        uncounted = [
            _stored_result(row)
            for row in (self.store.get(key) if done else [])
            if marks.owner_of(key, row.metric) is None
        ]
        done |= {m for m in wanted if m not in done and marks.owner_of(key, m) is not None}
        return done, uncounted

    def _claim(self, key: str, results: Sequence[MetricResult]) -> list[bool]:
        """Mark stored results as counted; ``True`` where this worker is the one to count them."""
        assert isinstance(self.queue, SharedQueue)  # only stored-but-unmarked results of a shared queue get here
        marks = self.queue.scored_marks
        return [marks.first(key, r.metric) for r in results]

    def _record_results(self, record: RagRecord, results: list[MetricResult]) -> list[bool]:
        """Store results; a result is *new* when its row was inserted here and, on a shared queue
        offering cluster-wide ``scored_marks`` (Redis), this worker is the first to claim it."""
        new = self.store.emit(record, results, self.judge_name)
        if isinstance(self.queue, SharedQueue):
            marks = self.queue.scored_marks
            new = [is_new and marks.first(record.key, r.metric) for r, is_new in zip(results, new)]
        return new

    def _publish(self, record: RagRecord, results: list[MetricResult], new: list[bool]) -> None:
        fresh = [r for r, is_new in zip(results, new) if is_new]
        if not fresh:
            return
        if self.sinks is not None:
            try:
                self.sinks.emit(record, fresh, self.judge_name)
            except Exception as exc:  # the result is already recorded; a sink's failure costs its copy only
                log.warning("results not sent to the sinks: %s", exc)
        if self.on_usage is not None:
            total = JudgeUsage()
            for r in fresh:
                total.add(r.usage)
            try:
                self.on_usage(total)
            except Exception as exc:
                log.warning("usage listener failed: %s", exc)

    async def _judge_unavailable(self, item: Leased, exc: JudgeError) -> None:
        """Pause scoring and put the record back; one warning per outage (or change of cause) names it.

        The record waits two pauses, so the next probe is another record: one record the judge keeps
        refusing cannot pass for an outage for ever (the judge tells that case apart once it has
        answered others)."""
        reason: str = exc.reason or "unavailable"
        delay = self.backoff.failed()
        # a record that waits without a reported cause of its own (its call shared another's) is the outage
        # already told, not a new one: one line per outage, however many records were in flight
        if reason == "unavailable" and self._outage is not None:
            reason = self._outage
        if self._outage != reason:
            self._outage = reason
            self.outage = f"{reason}: {self.scrubber.scrub(str(exc))}"
            log.warning(
                "judge unavailable (%s): %s; records wait in the queue, scoring paused (next try in %.1fs)",
                reason,
                exc,
                delay,
            )
        else:
            log.debug(
                "judge %s unavailable (%s); record %s back in the queue", self.judge_name, reason, item.record.key
            )
        self.metrics.judge_unavailable(self.judge_name, reason)
        await self._release(item, 2 * delay, None)

    async def _release(self, item: Leased, delay: float, reason: str | None) -> None:
        try:
            await asyncio.to_thread(self.queue.release, item.receipt, delay)
        except Exception as exc:  # the lease will lapse and the record come back anyway
            log.warning("releasing record %s failed: %s", item.record.key, exc)
        if reason is not None:
            self.metrics.record_released(reason)


def _cause(reported: Sequence[JudgeError], waiting: MetricResult) -> JudgeError:
    """Why a record waits: a reported failure that needs an operator first (it will not pass by
    itself), else the first reported one, else the waiting result's own message."""
    for error in reported:
        if error.reason in ("credentials", "permission", "config"):
            return error
    if reported:
        return reported[0]
    return JudgeError(waiting.reason or "judge unavailable", retryable=True)


def scrubbed(result: MetricResult, scrubber: Scrubber) -> MetricResult:
    """``result`` with every configured secret masked in its reason and details (the same result without any)."""
    if not scrubber or (result.reason is None and not result.details):
        return result
    reason = scrubber.scrub(result.reason) if result.reason is not None else None
    return dataclasses.replace(result, reason=reason, details=scrubber.scrub_value(result.details))


def _stored_result(row: Any) -> MetricResult:
    """A results-store row as the result it was stored from (judge usage is not stored)."""
    return MetricResult(
        row.metric,
        row.status,
        score=row.score,
        reason=row.reason,
        details=dict(row.details or {}),
        higher_is_better=bool(row.higher_is_better),
        label=row.label,
        provenance=dict(row.provenance or {}),
    )


def metrics_selector(default: Sequence[str], per_pipeline: dict[str, list[str]]) -> Callable[[RagRecord], list[str]]:
    """The metric list for a record: its pipeline's override, else the default list."""
    default = list(default)

    def select(record: RagRecord) -> list[str]:
        if record.pipeline is not None and record.pipeline in per_pipeline:
            return list(per_pipeline[record.pipeline])
        return default

    return select

"""One collector process: receivers → assembler → sampler → queue, the scoring worker, and ``/metrics``.

Everything runs in one asyncio loop. The receivers only decode and hand spans to the assembler; a
periodic sweep builds the records of completed traces, observes their latency metrics (every record),
samples them, and puts the sampled ones on the queue from a single background thread, so a slow queue
never stalls the receivers (while a put is under way, completed traces simply wait in assembly, which
is bounded). With ``role`` ``all`` or ``worker`` the scoring worker (``ragtrace_collector.scoring.worker``) leases from
the same queue in the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from ragtrace_collector.config import CollectorConfig
from ragtrace_collector.explorer import Explorer
from ragtrace_collector.explorer.app import Backlog
from ragtrace_collector.exporter.forward import Forwarder
from ragtrace_collector.internal.credentials import CredentialGuard, open_scopes
from ragtrace_collector.internal.hosts import HostPolicy, host_check_middleware, is_loopback
from ragtrace_collector.internal.journal import Journal
from ragtrace_collector.internal.urls import mask_credentials
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.assembly.assembler import Assembler, pairing_from_config, state_from_config
from ragtrace_collector.processor.sampling.budget import Budget
from ragtrace_collector.processor.sampling.sampler import Sampler, budget_from_config
from ragtrace_collector.processor.sweep import Sweeper
from ragtrace_collector.queue.base import ReportsMetrics
from ragtrace_collector.receiver.decode import MalformedRequest
from ragtrace_collector.receiver.ingest import Ingestor, decode_journaled
from ragtrace_collector.receiver.otlp_grpc import OtlpGrpcReceiver
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.review.feedback import FeedbackIntake
from ragtrace_collector.review.labels import LabelStore
from ragtrace_collector.review.metrics import AgreementCollector
from ragtrace_collector.scoring.results_store import ResultsStore
from ragtrace_collector.scoring.worker import ScoringWorker
from ragtrace_collector.service.scoring import blocked_metrics, build_worker
from ragtrace_collector.telemetry.completeness import IncompleteRecords
from ragtrace_collector.telemetry.ingest import IngestMetrics

log = logging.getLogger(__name__)


class _StopSteps:
    """The steps of one stop and its deadline: each step gets what remains of it (at least ``floor``, so a release
    still runs once the time is spent), and one that fails or times out is noted, not let stop the others (as the
    OpenTelemetry Collector's shutdown collects its components' errors)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        self.loop = loop
        self.deadline = deadline
        self.failed: list[str] = []

    def left(self) -> float:
        return max(0.0, self.deadline - self.loop.time())

    async def run(
        self, name: str, step: Callable[[], Awaitable[object]], floor: float = 0.0, extra: float = 0.0
    ) -> None:
        try:
            await asyncio.wait_for(step(), timeout=max(floor, self.left() + extra))
        except asyncio.TimeoutError:
            self.failed.append(f"{name}: timed out")
        except Exception as exc:
            self.failed.append(f"{name}: {type(exc).__name__}: {exc}")

    def call(self, name: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as exc:
            self.failed.append(f"{name}: {type(exc).__name__}: {exc}")


def metrics_response(registry: CollectorRegistry, accept: str | None) -> web.Response:
    """``/metrics`` with content negotiation: OpenMetrics (with exemplars) when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return web.Response(body=encoder(registry), headers={"Content-Type": content_type})


class CollectorApp:
    """The collector's process composition. Pass port 0 in the config to bind any free port;
    ``http_port``/``grpc_port``/``metrics_port`` give the bound ones after :meth:`start`."""

    def __init__(self, config: CollectorConfig, registry: CollectorRegistry | None = None, queue=None) -> None:
        self.config = config
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = IngestMetrics(self.registry, limits=config.limits)
        # one credential check (and one failed-credential limiter) for every listener and transport
        self.guard = CredentialGuard(config.auth, self.registry)
        self.queue = queue  # opened from config in start() unless given
        self._own_queue = queue is None
        self.assembler: Assembler | None = None
        self.sampler: Sampler | None = None
        self.sweeper: Sweeper | None = None
        self.ingestor: Ingestor | None = None
        self.forwarder: Forwarder | None = None  # passes received OTLP requests on (``forward.endpoint``)
        self.http: OtlpHttpReceiver | None = None
        self.grpc: OtlpGrpcReceiver | None = None
        self.worker: ScoringWorker | None = None
        self._worker_task: asyncio.Task | None = None
        self._sweep_task: asyncio.Task | None = None
        self._lag_task: asyncio.Task | None = None
        self._retention_task: asyncio.Task | None = None
        self.explorer: Explorer | None = None  # the records explorer, on the /metrics listener
        self.labels: LabelStore | None = None  # feedback and reviews, in the results store's file (start())
        self.feedback: FeedbackIntake | None = None  # stores feedback: the SDK's spans, the explorer API's items
        self.budget: Budget | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._metrics_port: int | None = None
        self._ready = False
        self._stopping = False

    # --- ports ---
    @property
    def http_port(self) -> int | None:
        return self.http.port if self.http is not None else None

    @property
    def grpc_port(self) -> int | None:
        return self.grpc.port if self.grpc is not None else None

    @property
    def metrics_port(self) -> int | None:
        return self._metrics_port

    @property
    def ready(self) -> bool:
        """Started, not stopping, and accepting: not while admission refuses every request (loop lag, downstream
        pressure, a queue that cannot write), so a balancer never routes requests that would be shed."""
        if not self._ready or self._stopping:
            return False
        return self.ingestor is None or not self.ingestor.refusing()

    # --- lifecycle ---
    def _open_queue(self):
        from ragtrace_collector.queue import QueueUnwritable, open_queue
        from ragtrace_collector.queue.spill import MEMORY

        url = self.config.queue_url
        if url.startswith("sqlite:"):
            Path(self.config.data_dir).mkdir(parents=True, exist_ok=True)
        # Only receivers put records, so only they hold any while Redis is away (workers open no spill file).
        spill = self.config.queue_spill if self.config.runs_receiver else MEMORY
        try:
            return open_queue(url, self.config.queue.max_depth, spill)
        except QueueUnwritable as exc:  # say what to set: serve prints it as its one line
            where = (
                "is the data directory writable? set data_dir or RAGTRACE_DATA_DIR"
                if self.config.queue.url is None
                else "is its directory writable? set queue.url or RAGTRACE_QUEUE__URL"
            )
            raise QueueUnwritable(f"{exc} ({where})") from exc

    def _check_exposure(self) -> None:
        """Refuse to listen beyond loopback while a scope (ingest, read, review) has no credential, unless
        ``auth.allow_unauthenticated`` says so: anyone who reached the ports could send spans or read records."""
        cfg = self.config
        listening = (cfg.listen.http_port, cfg.listen.grpc_port, cfg.listen.metrics_port) != (None, None, None)
        unguarded = [s.value for s in open_scopes(cfg.auth)]
        if not listening or is_loopback(cfg.listen.host) or not unguarded:
            return
        if not cfg.auth.allow_unauthenticated:
            raise ValueError(
                f"listen.host {cfg.listen.host!r} is reachable from other machines and no credential is configured"
                f" for {', '.join(unguarded)}: set auth.bearer_token (RAGTRACE_AUTH__BEARER_TOKEN, 16+ bytes) or"
                " auth.ingest_tokens / read_tokens / review_tokens, or set auth.allow_unauthenticated: true to let"
                " anyone who reaches these ports send spans and read records"
            )
        log.warning(
            "listening on %s with no credential for %s (auth.allow_unauthenticated): anyone who reaches these ports"
            " can use them",
            cfg.listen.host,
            ", ".join(unguarded),
        )

    async def start(self) -> None:
        cfg = self.config
        self._check_exposure()
        if self.queue is None:
            self.queue = self._open_queue()
        if isinstance(self.queue, ReportsMetrics):  # Redis queue: local buffer, shed, reclaimed
            self.queue.register_metrics(self.registry)
        if cfg.runs_receiver or cfg.explorer.enabled:  # feedback arrives as spans and through the explorer's API
            self._open_labels()
        if cfg.runs_receiver:
            self.assembler = Assembler(
                state_from_config(cfg.assembly),
                observer=self.metrics,
                pairing=pairing_from_config(cfg.assembly),
            )
            self.budget = budget_from_config(cfg.sampling, cfg.queue.url)
            self.sampler = Sampler(cfg.sampling, self.budget, observer=self.metrics)
            if cfg.forward.endpoint:
                self.forwarder = Forwarder.from_config(cfg.forward, self.registry)
            self.ingestor = Ingestor(
                self._take,
                self.metrics,
                guard=self.guard,
                max_pending_requests=cfg.limits.max_pending_requests,
                max_request_bytes=cfg.limits.max_request_bytes,
                retry_after_seconds=cfg.limits.retry_after_seconds,
                max_loop_lag_seconds=cfg.limits.max_loop_lag_seconds,
                read_timeout_seconds=cfg.limits.read_timeout_seconds,
                min_body_bytes_per_second=cfg.limits.min_body_bytes_per_second,
                max_receiving_bytes=cfg.limits.max_receiving_bytes,
                pressure=self._under_pressure,
                forward=self.forwarder.submit if self.forwarder is not None else None,
                journal=self._open_journal(),
            )
            self._replay_journal()  # before the receivers open: what a crash left is in assembly first
            self._lag_task = asyncio.create_task(self.ingestor.watch_loop_lag(), name="ragtrace-loop-lag")
            if cfg.listen.http_port is not None:
                self.http = OtlpHttpReceiver(
                    self.ingestor, ready=lambda: self.ready, middlewares=[self._host_check("otlp_http")]
                )
                await self.http.start(cfg.listen.host, cfg.listen.http_port)
            if cfg.listen.grpc_port is not None:
                self.grpc = OtlpGrpcReceiver(self.ingestor)
                await self.grpc.start(cfg.listen.host, cfg.listen.grpc_port)
            incomplete = IncompleteRecords(
                self.registry,
                self.metrics.service_label,
                interval=cfg.assembly.incomplete_log_interval_seconds,
                max_series=cfg.limits.max_series_per_label_set,
                idle_seconds=cfg.limits.label_idle_seconds,
                blocked=blocked_metrics(cfg.scoring),
            )
            self.sweeper = Sweeper(
                self.assembler, self.sampler, self.queue, self.metrics, incomplete, journal=self.ingestor.journal
            )
            self._sweep_task = asyncio.create_task(
                self.sweeper.run(cfg.assembly.sweep_interval_seconds), name="ragtrace-assembly-sweep"
            )
        if cfg.runs_worker:
            self.worker = build_worker(cfg, self.registry, self.queue)
            if self.budget is None:  # worker-only: no sampler, but the (shared) budget still hears the spending
                self.budget = budget_from_config(cfg.sampling, cfg.queue.url)
            # each scored record's judge usage is reported to the budget (the Redis one counts admitted
            # records until their report arrives)
            budget = self.budget
            self.worker.on_usage = lambda usage: budget.add_judge_tokens(usage.total_tokens)
            self._worker_task = asyncio.create_task(self.worker.run(), name="ragtrace-scoring-worker")
            self._retention_task = asyncio.create_task(
                self._enforce_retention(self.worker.store), name="ragtrace-results-retention"
            )
        if cfg.listen.metrics_port is not None:
            await self._start_metrics(cfg.listen.host, cfg.listen.metrics_port)
        self._ready = True
        log.info(
            "ragtrace collector up (role=%s): otlp/http %s, otlp/grpc %s, /metrics %s, queue %s",
            cfg.role,
            self.http_port,
            self.grpc_port,
            self.metrics_port,
            mask_credentials(cfg.queue_url),
        )

    def _backlog(self) -> Backlog:
        """What the explorer says above its list: records queued and not scored yet, and the judge's outage."""
        waiting = self.queue.depth() if self.queue is not None else 0
        return Backlog(waiting, self.worker.outage if self.worker is not None else None)

    def _open_journal(self) -> Journal | None:
        """The assembly journal (``assembly.journal``), or None (off, or in-flight spans wait in Redis)."""
        path = self.config.journal_path
        if path is None:
            return None
        try:
            return Journal(path)
        except OSError as exc:
            raise OSError(f"cannot open the assembly journal at {path}: {exc.strerror or exc}") from None

    def _open_labels(self) -> None:
        """The label store beside the results (``results_path``) and the feedback intake writing to it."""
        self.labels = LabelStore(self.config.results_path)
        self.feedback = FeedbackIntake(
            self.labels,
            self.registry,
            self._pipeline_of,
            limits=self.config.limits,
            service_label=self.metrics.service_label,
            pipeline_label=self.metrics.pipeline_label,
        )

    def _pipeline_of(self, trace_id: str) -> str | None:
        """The pipeline of a scored record of ``trace_id`` (feedback's label), where this process stores results."""
        worker = self.worker
        return worker.store.pipeline_of(trace_id) if worker is not None else None

    def _take(self, decoded: DecodedRequest) -> None:
        """The receivers' sink (and the journal replay's): feedback spans to the label store, the rest to assembly."""
        if self.feedback is not None:
            self.feedback.take(decoded)
        if decoded.traces and self.assembler is not None:
            self.assembler.add(decoded)

    def _replay_journal(self) -> None:
        """Ingest again what a previous process acknowledged and did not queue (a crash): its spans go to
        assembly (its feedback to the label store) as if just received, counted under transport ``journal``."""
        ingestor, assembler = self.ingestor, self.assembler
        if ingestor is None or ingestor.journal is None or assembler is None:
            return
        requests = spans = 0
        for kind, payload in ingestor.journal.replay():
            try:
                decoded = decode_journaled(kind, payload)  # spans, or a logs request's GenAI events
            except MalformedRequest:  # journaled only after it decoded: a foreign file, skipped
                continue
            self._take(decoded)  # re-sent feedback is stored once (its span id)
            requests += 1
            spans += decoded.accepted
            self.metrics.spans("journal", decoded.accepted, None)
        if requests:
            log.info("replayed %d acknowledged requests (%d spans) from the assembly journal", requests, spans)

    def _host_check(self, listener: str):
        """The DNS-rebinding check of one HTTP listener (``listen.allowed_hosts``), its refusals counted."""
        policy = HostPolicy(self.config.listen.host, self.config.listen.allowed_hosts)
        return host_check_middleware(policy, lambda reason: self.metrics.refused(listener, reason))

    async def _start_metrics(self, host: str, port: int) -> None:
        app = web.Application(middlewares=[self._host_check("metrics")])

        async def handle_metrics(request: web.Request) -> web.Response:
            # off the loop: collecting reads the queue (a Redis round trip, a SQLite lock), and a slow
            # or unreachable backend must not stall the receivers sharing this loop
            return await asyncio.to_thread(metrics_response, self.registry, request.headers.get("Accept"))

        async def handle_health(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        async def handle_ready(request: web.Request) -> web.Response:
            return web.Response(text="ready\n") if self.ready else web.Response(status=503, text="not ready\n")

        app.router.add_get("/metrics", handle_metrics)
        app.router.add_get("/healthz", handle_health)
        app.router.add_get("/readyz", handle_ready)
        if self.config.explorer.enabled:
            self.explorer = Explorer(
                self.config.results_path,
                self.config.explorer,
                self.guard,
                self.config.auth.session_hours,
                backlog=self._backlog,
                review=self.config.review,
                labels=self.labels,
                feedback=self.feedback,
            )
            self.explorer.add_routes(app)
            # judge vs human agreement in /metrics: a cached report, never a store scan per scrape
            self.registry.register(AgreementCollector(self.explorer.agreement, self.config.review.max_agreement_series))
        self._metrics_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._metrics_runner.setup()
        site = web.TCPSite(self._metrics_runner, host, port, reuse_address=True)
        await site.start()
        self._metrics_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop within ``drain_timeout`` seconds (default ``shutdown_timeout_seconds``), whatever the downstreams
        and the judge do: the receivers first, in-flight traces flushed to the queue, then the worker (scoring,
        then its exporters) and the forwarder, side by side, each given what remains of one deadline; then
        everything is let go. A step that fails or runs out of time is logged and the next ones still run; what
        the stop leaves undone is counted as ``shutdown`` and stays durable (unscored records stay queued, scores
        not exported are sent again at the next start)."""
        if self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        bound = self.config.shutdown_timeout_seconds if drain_timeout is None else max(0.0, drain_timeout)
        started = loop.time()
        stop = _StopSteps(loop, started + bound)
        await self._stop_intake(stop)
        forwarding = (  # the forwarder drains beside the worker: neither waits for the other's downstream
            asyncio.ensure_future(asyncio.to_thread(self.forwarder.shutdown, stop.left()))
            if self.forwarder is not None
            else None
        )
        await self._stop_scoring(stop)
        if forwarding is not None:
            await stop.run("forwarder", lambda: forwarding, extra=1.0)
        await self._release(stop)
        took = loop.time() - started
        if stop.failed:
            log.warning(
                "stopped in %.1fs (bound %.1fs); steps that failed or ran out of time: %s",
                took,
                bound,
                "; ".join(stop.failed),
            )
        else:
            log.info("stopped in %.1fs", took)

    async def _stop_intake(self, stop: _StopSteps) -> None:
        """Stop receiving, stop the periodic tasks, and flush every in-flight trace through sampling to the queue."""
        if self.http is not None:
            await stop.run("otlp/http receiver", self.http.stop, floor=0.5)
        grpc = self.grpc
        if grpc is not None:
            await stop.run("otlp/grpc receiver", lambda: grpc.stop(grace=min(1.0, stop.left())), floor=0.5)
        for task in (self._sweep_task, self._lag_task, self._retention_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        sweeper = self.sweeper
        if sweeper is not None:
            await stop.run("assembly flush", lambda: sweeper.run_once(everything=True), floor=0.5)

    async def _stop_scoring(self, stop: _StopSteps) -> None:
        """The worker finishes what it can within what remains (it bounds itself; the margin is a safety net)."""
        worker = self.worker
        if worker is not None:
            await stop.run("scoring worker", lambda: worker.stop(stop.left()), extra=1.0)
        if self._worker_task is not None:
            if not self._worker_task.done():
                self._worker_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._worker_task, timeout=max(0.5, stop.left()))

    async def _release(self, stop: _StopSteps) -> None:
        """Let go of what is local: the queue, /metrics and the explorer, assembly state, the budget."""
        sweeper = self.sweeper
        if sweeper is not None:
            await stop.run("queue puts", lambda: asyncio.to_thread(sweeper.close), floor=0.5)
        if self.queue is not None and self._own_queue:
            stop.call("queue", self.queue.close)
        journal = self.ingestor.journal if self.ingestor is not None else None
        if journal is not None:  # what was not queued stays in it for the next start
            await stop.run("assembly journal", lambda: asyncio.to_thread(journal.close), floor=0.5)
        runner = self._metrics_runner
        if runner is not None:
            await stop.run("/metrics listener", runner.cleanup, floor=0.5)
        explorer = self.explorer
        if explorer is not None:
            await stop.run("explorer", lambda: asyncio.to_thread(explorer.close), floor=0.5)
        labels = self.labels
        if labels is not None:  # after the explorer and the receivers, its writers
            await stop.run("label store", lambda: asyncio.to_thread(labels.close), floor=0.5)
        if self.assembler is not None:
            stop.call("assembly state", self.assembler.state.close)
            stop.call("pairing state", self.assembler.pairing.close)
        if self.budget is not None:
            stop.call("budget", self.budget.close)

    async def _enforce_retention(self, store: ResultsStore) -> None:
        """Keep the results store within ``export.results_retention`` (age and size), now and every interval."""
        retention = self.config.export.results_retention
        max_age = retention.max_age_hours * 3600.0 if retention.max_age_hours is not None else None
        while True:
            try:
                deleted = await asyncio.to_thread(store.enforce_retention, max_age, retention.max_bytes)
                if deleted:
                    log.info("results retention: %d records deleted (oldest first)", deleted)
            except Exception as exc:  # a locked or full disk must not stop the collector; next interval retries
                log.warning("results retention failed: %s", exc)
            await asyncio.sleep(retention.interval_seconds)

    # --- admission's view of downstream pressure ---
    def _under_pressure(self) -> bool:
        """Shed new OTLP requests while the queue cannot write (a full disk: what it was given waits in memory),
        completed traces wait longer than the backlog bound to become records, or assembly holds more than 90% of
        its trace or byte bound (rather than evicting)."""
        limits, assembly = self.config.limits, self.config.assembly
        if self.queue is not None and not self.queue.writable:
            return True
        if (
            self.sweeper is not None
            and limits.max_loop_lag_seconds is not None
            and self.sweeper.behind_for(asyncio.get_running_loop().time()) > limits.max_loop_lag_seconds
        ):
            return True
        if self.assembler is not None:
            traces, nbytes = self.assembler.state.inflight()
            return traces > 0.9 * assembly.max_inflight_traces or nbytes > 0.9 * assembly.max_inflight_bytes
        return False

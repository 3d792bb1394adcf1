"""One collector process: receivers → assembler → sampler → queue, the scoring worker, and ``/metrics``.

Everything runs in one asyncio loop. The receivers only decode and hand spans to the assembler; a
periodic sweep builds the records of completed traces, observes their latency metrics (every record),
samples them, and puts the sampled ones on the queue from a single background thread, so a slow queue
never stalls the receivers (while a put is under way, completed traces simply wait in assembly, which
is bounded). With ``role`` ``all`` or ``worker`` the scoring worker (``ragtrace_collector.scoring.worker``) leases from
the same queue in the same loop.

Every part is a component (:mod:`ragtrace_collector.internal.component`) held by one :class:`Lifecycle`: started
dependencies first (stores, then exporters, ``/metrics``, the worker, the sweep, the receivers last) and shut down
in reverse within ``shutdown_timeout_seconds``, every component past the failures of the others.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import CollectorConfig
from ragtrace_collector.explorer import Explorer
from ragtrace_collector.explorer.app import Backlog
from ragtrace_collector.exporter.forward import Forwarder
from ragtrace_collector.exporter.prometheus import MetricsEndpoint, metrics_response
from ragtrace_collector.internal import malformed_http
from ragtrace_collector.internal.component import Closing, Failure, Lifecycle, Task
from ragtrace_collector.internal.credentials import CredentialGuard, open_scopes
from ragtrace_collector.internal.hosts import HostPolicy, host_check_middleware, is_loopback
from ragtrace_collector.internal.journal import Journal
from ragtrace_collector.internal.urls import is_redis_url, mask_credentials
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.pipeline import Pipeline, pairing_from_config, state_from_config
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

__all__ = ["CollectorApp", "metrics_response"]

log = logging.getLogger(__name__)


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
        self.assembler: Pipeline | None = None
        self.sampler: Sampler | None = None
        self.sweeper: Sweeper | None = None
        self.ingestor: Ingestor | None = None
        self.forwarder: Forwarder | None = None  # passes received OTLP requests on (``forward.endpoint``)
        self.http: OtlpHttpReceiver | None = None
        self.grpc: OtlpGrpcReceiver | None = None
        self.worker: ScoringWorker | None = None
        self.explorer: Explorer | None = None  # the records explorer, on the /metrics listener
        self.labels: LabelStore | None = None  # feedback and reviews, in the results store's file (start())
        self.feedback: FeedbackIntake | None = None  # stores feedback: the SDK's spans, the explorer API's items
        self.budget: Budget | None = None
        self._retained: ResultsStore | None = None  # the results store this process keeps within its retention
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics, /healthz, /readyz and the explorer
        # every component, in start order; stop() shuts them down in reverse
        self.components = Lifecycle()
        self.stop_failures: list[Failure] = []  # what the last stop could not shut down (or not in time)
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
        return self.metrics_endpoint.port if self.metrics_endpoint is not None else None

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
        """Build and start every component the role needs, dependencies first; if one fails to start, those
        started before it are shut down (in reverse) and the error raised."""
        try:
            await self._start()
        except BaseException:
            failures = await self.components.shutdown(self.config.shutdown_timeout_seconds)
            for failure in failures:
                log.warning("start failed; shutting down %s", failure)
            raise

    async def _start(self) -> None:
        cfg = self.config
        parts = self.components
        self._check_exposure()
        malformed_http.install()  # before any listener: a request aiohttp cannot parse is a counted line, no traceback
        if self.queue is None:
            self.queue = await parts.start("queue", self._open_queue())
        if isinstance(self.queue, ReportsMetrics):  # Redis queue: local buffer, shed, reclaimed
            self.queue.register_metrics(self.registry)
        if cfg.runs_receiver or cfg.explorer.enabled:  # feedback arrives as spans and through the explorer's API
            await self._open_labels()
        if cfg.runs_receiver or cfg.runs_worker:  # the sampler spends it; the worker reports judge usage to it
            self.budget = budget_from_config(cfg.sampling, cfg.queue.url)
            await parts.start("budget", Closing(self.budget.close))
        journal: Journal | None = None
        if cfg.runs_receiver:
            state, pairing = state_from_config(cfg.assembly), pairing_from_config(cfg.assembly)
            await parts.start("assembly state", Closing(state.close))
            await parts.start("pairing state", Closing(pairing.close))
            self.assembler = Pipeline(state, observer=self.metrics, pairing=pairing)
            assert self.budget is not None
            self.sampler = Sampler(cfg.sampling, self.budget, observer=self.metrics)
            journal = self._open_journal()
            if journal is not None:  # closed after the sweep's last flush (it truncates the journal)
                await parts.start("assembly journal", journal)
        sinks_started = False
        if cfg.runs_worker:
            worker = self.worker = build_worker(cfg, self.registry, self.queue)
            await parts.start("results store", worker.store)
            if worker.sinks is not None:
                await parts.start("result sinks", worker.sinks)
                sinks_started = True
        if cfg.runs_receiver and cfg.forward.endpoint:
            # an exporter before the receivers that feed it; beside the result sinks, so neither waits on the
            # other's downstream at shutdown
            forwarder = Forwarder.from_config(cfg.forward, self.registry)
            start = parts.start_beside if sinks_started else parts.start
            self.forwarder = await start("forwarder", forwarder)
        if cfg.runs_receiver:
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
                journal=journal,
            )
        if self.worker is not None:
            self._retained = self.worker.store
        elif cfg.runs_receiver and cfg.explorer.enabled and is_redis_url(cfg.queue_url):
            await self._follow_results()
        if self._retained is not None:
            await parts.start("results retention", Task("ragtrace-results-retention", self._enforce_retention))
        await self._start_metrics()  # before the worker and the intake: shut down after them, scrapes see their stop
        if self.worker is not None:
            budget = self.budget
            assert budget is not None
            # each scored record's judge usage is reported to the budget (the Redis one counts admitted
            # records until their report arrives)
            self.worker.on_usage = lambda usage: budget.add_judge_tokens(usage.total_tokens)
            await parts.start("scoring worker", self.worker)
        if self.ingestor is not None:
            await self._start_intake(self.ingestor)
        self._ready = True
        log.info(
            "ragtrace collector up (role=%s): otlp/http %s, otlp/grpc %s, /metrics %s, queue %s",
            cfg.role,
            self.http_port,
            self.grpc_port,
            self.metrics_port,
            mask_credentials(cfg.queue_url),
        )

    async def _start_intake(self, ingestor: Ingestor) -> None:
        """The sweep, admission's loop-lag watch and the receivers: started last, shut down first (the sweep's last
        run flushes every in-flight trace to the queue once the receivers stopped)."""
        cfg, parts = self.config, self.components
        assert self.assembler is not None and self.sampler is not None and self.queue is not None
        self._replay_journal()  # before the receivers open: what a crash left is in assembly first
        incomplete = IncompleteRecords(
            self.registry,
            self.metrics.service_label,
            interval=cfg.assembly.incomplete_log_interval_seconds,
            max_series=cfg.limits.max_series_per_label_set,
            idle_seconds=cfg.limits.label_idle_seconds,
            blocked=blocked_metrics(cfg.scoring),
        )
        sweeper = self.sweeper = Sweeper(
            self.assembler, self.sampler, self.queue, self.metrics, incomplete, journal=ingestor.journal
        )

        async def flush() -> None:
            await sweeper.run_once(everything=True)
            await asyncio.to_thread(sweeper.close)  # the last puts

        await parts.start(
            "assembly sweep",
            Task("ragtrace-assembly-sweep", lambda: sweeper.run(cfg.assembly.sweep_interval_seconds), then=flush),
        )
        await parts.start("loop-lag watch", Task("ragtrace-loop-lag", ingestor.watch_loop_lag))
        if cfg.listen.http_port is not None:
            self.http = OtlpHttpReceiver.from_config(
                cfg.listen, ingestor, ready=lambda: self.ready, middlewares=[self._host_check("otlp_http")]
            )
            await parts.start("otlp/http receiver", self.http)
        if cfg.listen.grpc_port is not None:
            self.grpc = OtlpGrpcReceiver.from_config(cfg.listen, ingestor)
            await parts.start_beside("otlp/grpc receiver", self.grpc)

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

    async def _open_labels(self) -> None:
        """The label store beside the results (``results_path``) and the feedback intake writing to it; scaled out
        on Redis, the relay sharing feedback with the other hosts (their records are scored there)."""
        cfg = self.config
        labels = self.labels = await self.components.start("label store", LabelStore(cfg.results_path))
        relay = is_redis_url(cfg.queue_url)
        self.feedback = FeedbackIntake(
            labels,
            self.registry,
            self._pipeline_of,
            limits=cfg.limits,
            service_label=self.metrics.service_label,
            pipeline_label=self.metrics.pipeline_label,
            relay=relay,
        )
        if relay:
            # imported here so a collector without scale-out never imports the redis client
            from ragtrace_collector.review.feedback_relay import FeedbackRelay

            relayed = FeedbackRelay(
                labels, cfg.queue_url, self.registry, max_entries=cfg.review.feedback_relay_max_entries
            )
            await self.components.start("feedback relay", relayed)

    def _pipeline_of(self, trace_id: str) -> str | None:
        """The pipeline of a scored record of ``trace_id`` (feedback's label), where this process stores results (its
        own, or the workers' it keeps)."""
        store = self._retained
        return store.pipeline_of(trace_id) if store is not None else None

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

    async def _start_metrics(self) -> None:
        """``/metrics`` (``exporter.prometheus.MetricsEndpoint``), the explorer on the same listener."""
        cfg = self.config
        if cfg.listen.metrics_port is None:
            return
        routes = []
        if cfg.explorer.enabled:
            explorer = self.explorer = Explorer(
                cfg.results_path,
                cfg.explorer,
                self.guard,
                cfg.auth.session_hours,
                backlog=self._backlog,
                review=cfg.review,
                labels=self.labels,
                feedback=self.feedback,
                relay=is_redis_url(cfg.queue_url),
            )
            await self.components.start("explorer", explorer)  # after the listener, its reader
            routes.append(explorer.add_routes)
            # judge vs human agreement in /metrics: a cached report, never a store scan per scrape
            self.registry.register(AgreementCollector(explorer.agreement, cfg.review.max_agreement_series))
        self.metrics_endpoint = await self.components.start(
            "/metrics listener",
            MetricsEndpoint.from_config(
                cfg.listen,
                self.registry,
                ready=lambda: self.ready,
                middlewares=[self._host_check("metrics")],
                routes=routes,
            ),
        )

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop within ``drain_timeout`` seconds (default ``shutdown_timeout_seconds``), whatever the downstreams
        and the judge do: every component shut down in reverse start order (the receivers first, in-flight traces
        flushed to the queue, the worker, ``/metrics``, the result sinks and the forwarder side by side, the stores),
        each given what remains of one deadline. A component that fails or runs out of time is logged
        (and kept in ``stop_failures``) and the next ones still shut down; what the stop leaves undone is counted as
        ``shutdown`` and stays durable (unscored records stay queued, scores not exported are sent again at the next
        start)."""
        if self._stopping:
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        bound = self.config.shutdown_timeout_seconds if drain_timeout is None else max(0.0, drain_timeout)
        started = loop.time()
        self.stop_failures = await self.components.shutdown(bound)
        took = loop.time() - started
        if self.stop_failures:
            log.warning(
                "stopped in %.1fs (bound %.1fs); components that failed or ran out of time: %s",
                took,
                bound,
                "; ".join(str(f) for f in self.stop_failures),
            )
        else:
            log.info("stopped in %.1fs", took)

    async def _follow_results(self) -> None:
        """Scaled out, a receiver whose explorer is on keeps every worker's scored records in its own results store
        (``scoring/results_replica.py``): its explorer is the one alerts link to."""
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.scoring.results_replica import ResultsReplica

        store = self._retained = await self.components.start("results store", ResultsStore(self.config.results_path))
        await self.components.start("results replica", ResultsReplica(store, self.config.queue_url, self.registry))

    async def _enforce_retention(self) -> None:
        """Keep the results store within ``export.results_retention`` (age and size), now and every interval."""
        store = self._retained
        assert store is not None
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

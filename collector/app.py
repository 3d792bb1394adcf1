"""One collector process: receivers → assembler → sampler → queue, the scoring worker, and ``/metrics``.

Everything runs in one asyncio loop. The receivers only decode and hand spans to the assembler; a
periodic sweep builds the records of completed traces, observes their latency metrics (every record),
samples them, and puts the sampled ones on the queue from a single background thread, so a slow queue
never stalls the receivers (while a put is under way, completed traces simply wait in assembly, which
is bounded). With ``role`` ``all`` or ``worker`` the scoring worker (``collector.worker``) leases from
the same queue in the same loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from collector.assembly import Assembler, state_from_config
from collector.config import CollectorConfig
from collector.export.ingest_metrics import IngestMetrics
from collector.receiver.ingest import Ingestor
from collector.receiver.otlp_grpc import OtlpGrpcReceiver
from collector.receiver.otlp_http import OtlpHttpReceiver
from collector.record import RagRecord
from collector.sampling import Sampler, budget_from_config

log = logging.getLogger(__name__)

QUEUE_FULL = "queue_full"
QUEUE_ERROR = "queue_error"
ASSEMBLY_ERROR = "assembly_error"


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
        self.metrics = IngestMetrics(self.registry)
        self.queue = queue  # opened from config in start() unless given
        self._own_queue = queue is None
        self.assembler: Assembler | None = None
        self.sampler: Sampler | None = None
        self.ingestor: Ingestor | None = None
        self.http: OtlpHttpReceiver | None = None
        self.grpc: OtlpGrpcReceiver | None = None
        self.worker = None
        self._worker_task: asyncio.Task | None = None
        self._sweep_task: asyncio.Task | None = None
        self._lag_task: asyncio.Task | None = None
        self.budget = None
        self._metrics_runner: web.AppRunner | None = None
        self._metrics_port: int | None = None
        self._put_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragtrace-queue-put")
        self._ready = False
        self._stopping = False
        self._behind_since: float | None = None  # the sweep has had more completed traces than one chunk since

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
        return self._ready and not self._stopping

    # --- lifecycle ---
    def _open_queue(self):
        from collector.queue import open_queue

        url = self.config.queue_url
        if url.startswith("sqlite:"):
            Path(self.config.data_dir).mkdir(parents=True, exist_ok=True)
        return open_queue(url, self.config.queue.max_depth)

    async def start(self) -> None:
        cfg = self.config
        if self.queue is None:
            self.queue = self._open_queue()
        if hasattr(self.queue, "register_metrics"):  # Redis queue: local buffer, shed, reclaimed (issue 7)
            self.queue.register_metrics(self.registry)
        if cfg.runs_receiver:
            self.assembler = Assembler(state_from_config(cfg.assembly), observer=self.metrics)
            self.budget = budget_from_config(cfg.sampling, cfg.queue.url)
            self.sampler = Sampler(cfg.sampling, self.budget, observer=self.metrics)
            self.ingestor = Ingestor(
                self.assembler.add,
                self.metrics,
                bearer_token=cfg.auth.bearer_token,
                max_pending_requests=cfg.limits.max_pending_requests,
                max_request_bytes=cfg.limits.max_request_bytes,
                retry_after_seconds=cfg.limits.retry_after_seconds,
                max_loop_lag_seconds=cfg.limits.max_loop_lag_seconds,
                pressure=self._under_pressure,
            )
            self._lag_task = asyncio.create_task(self.ingestor.watch_loop_lag(), name="ragtrace-loop-lag")
            if cfg.listen.http_port is not None:
                self.http = OtlpHttpReceiver(self.ingestor, ready=lambda: self.ready)
                await self.http.start(cfg.listen.host, cfg.listen.http_port)
            if cfg.listen.grpc_port is not None:
                self.grpc = OtlpGrpcReceiver(self.ingestor)
                await self.grpc.start(cfg.listen.host, cfg.listen.grpc_port)
            self._sweep_task = asyncio.create_task(self._sweep_loop(), name="ragtrace-assembly-sweep")
        if cfg.runs_worker:
            from collector.worker import build_worker

            self.worker = build_worker(cfg, self.registry, self.queue)
            if self.budget is None:  # worker-only: no sampler, but the (shared) budget still hears the spending
                self.budget = budget_from_config(cfg.sampling, cfg.queue.url)
            # each scored record's judge usage is reported to the budget (the Redis one counts admitted
            # records until their report arrives)
            self.worker.on_usage = lambda usage, b=self.budget: b.add_judge_tokens(usage.total_tokens)
            self._worker_task = asyncio.create_task(self.worker.run(), name="ragtrace-scoring-worker")
        if cfg.listen.metrics_port is not None:
            await self._start_metrics(cfg.listen.host, cfg.listen.metrics_port)
        self._ready = True
        log.info(
            "ragtrace collector up (role=%s): otlp/http %s, otlp/grpc %s, /metrics %s, queue %s",
            cfg.role,
            self.http_port,
            self.grpc_port,
            self.metrics_port,
            cfg.queue_url,
        )

    async def _start_metrics(self, host: str, port: int) -> None:
        app = web.Application()

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
        self._metrics_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._metrics_runner.setup()
        site = web.TCPSite(self._metrics_runner, host, port, reuse_address=True)
        await site.start()
        self._metrics_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self, drain_timeout: float = 10.0) -> None:
        """Stop receiving, flush every in-flight trace through sampling to the queue, stop the worker."""
        if self._stopping:
            return
        self._stopping = True
        if self.http is not None:
            await self.http.stop()
        if self.grpc is not None:
            await self.grpc.stop(grace=min(1.0, drain_timeout))
        for task in (self._sweep_task, self._lag_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.assembler is not None and self.sampler is not None:
            await self.process_completed(everything=True)
        if self.worker is not None:
            try:
                await self.worker.stop(drain_timeout)
            except Exception:
                log.exception("scoring worker did not stop cleanly")
        if self._worker_task is not None:
            if not self._worker_task.done():
                self._worker_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker_task
        self._put_executor.shutdown(wait=True)
        if self.queue is not None and self._own_queue:
            self.queue.close()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
        if self.assembler is not None:
            self.assembler.state.close()
        if self.budget is not None:
            self.budget.close()

    # --- the sweep: completed traces → records → metrics → sampling → queue ---
    async def _sweep_loop(self) -> None:
        interval = self.config.assembly.sweep_interval_seconds
        while True:
            await asyncio.sleep(interval)
            try:
                await self.process_completed()
            except Exception:
                log.exception("assembly sweep failed")

    SWEEP_CHUNK = 512  # completed traces taken at a time: bounds what a sweep holds beyond assembly's bounds

    def _under_pressure(self) -> bool:
        """Shed new OTLP requests while completed traces wait longer than the backlog bound to become
        records, or assembly holds more than 90% of its trace or byte bound (rather than evicting)."""
        limits, assembly = self.config.limits, self.config.assembly
        if self._behind_since is not None and limits.max_loop_lag_seconds is not None:
            if asyncio.get_running_loop().time() - self._behind_since > limits.max_loop_lag_seconds:
                return True
        if self.assembler is not None:
            traces, nbytes = self.assembler.state.inflight()
            return traces > 0.9 * assembly.max_inflight_traces or nbytes > 0.9 * assembly.max_inflight_bytes
        return False

    async def process_completed(self, everything: bool = False) -> int:
        """Build, observe and sample every completed trace, a chunk at a time; returns records built."""
        assert self.assembler is not None and self.sampler is not None
        loop = asyncio.get_running_loop()
        built = 0
        while True:
            completed = self.assembler.completed(limit=None if everything else self.SWEEP_CHUNK, everything=everything)
            if len(completed) >= self.SWEEP_CHUNK and not everything:
                if self._behind_since is None:
                    self._behind_since = loop.time()
            else:
                self._behind_since = None
            selected: list[RagRecord] = []
            for item in completed:
                try:
                    summary = self.assembler.build(item, full=False)
                    built += 1
                    self.metrics.observe_record(summary)
                    if self.sampler.sample(summary):
                        # texts (query, answer, contexts) are read only for the records that get scored
                        record = self.assembler.build(item, full=True)
                        record.sampling_weight = summary.sampling_weight
                        selected.append(record)
                except Exception:
                    log.exception("could not assemble trace %s", item.trace_id)
                    self.metrics.dropped(None, ASSEMBLY_ERROR)
            del completed
            if selected:
                await loop.run_in_executor(self._put_executor, self._put_all, selected)
            if self._behind_since is None:
                return built
            await asyncio.sleep(0)  # let the receivers in between chunks

    def _put_all(self, records: list[RagRecord]) -> None:
        for record in records:
            try:
                accepted = self.queue.put(record)
            except Exception:
                log.exception("queue put failed for trace %s", record.trace_id)
                self.metrics.dropped(record.pipeline, QUEUE_ERROR)
                continue
            if not accepted:
                self.metrics.dropped(record.pipeline, QUEUE_FULL)

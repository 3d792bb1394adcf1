"""The sweep: completed traces → records → latency metrics (every record) → sampling → the queue.

Called periodically by the service. Records are built a chunk at a time; the full texts (question,
answer, contexts) are read only for the records the sampler selects. Sampled records are put on the
queue from one background thread, so a slow queue never stalls the receivers sharing the event loop
(while a put is under way, completed traces simply wait in assembly, which is bounded). When a sweep
finds more than a chunk waiting it is *behind*; :meth:`Sweeper.behind_for` lets admission shed new
requests until it catches up. While the queue cannot write (a full disk: it holds what it is given in memory
and admission refuses new requests), each sweep has that thread try it again, since no new put will.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ragtrace_collector.internal.journal import Journal
from ragtrace_collector.model.record import RagRecord, RecordFacts, RecordSummary
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions.completeness import missing_fields
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.processor.records import record_of, summary_of
from ragtrace_collector.processor.sampling.sampler import Decision, Sampler
from ragtrace_collector.queue.base import RecordQueue

log = logging.getLogger(__name__)

# Reasons a built record is lost (label values of ``ragtrace_traces_dropped_total``)
QUEUE_FULL = "queue_full"
QUEUE_ERROR = "queue_error"
ASSEMBLY_ERROR = "assembly_error"


class SweepObserver(Protocol):
    """What the sweep reports (implemented by :class:`ragtrace_collector.telemetry.ingest.IngestMetrics`)."""

    def observe_records(self, records: Sequence[RecordFacts]) -> None: ...

    def dropped(self, pipeline: str | None, reason: str) -> None: ...


class CompletenessObserver(Protocol):
    """Hears of sampled records that lack a field (implemented by
    :class:`ragtrace_collector.telemetry.completeness.IncompleteRecords`)."""

    def observe(self, service: str | None, missing: Sequence[tuple[str, str, str]]) -> None:
        """One record of ``service`` lacks each ``(field, cause, detail)`` of ``missing``."""


class Sweeper:
    """Turns what the pipeline completed (assembly, then the joins) into sampled, queued records."""

    chunk = 512  # completed traces taken at a time: bounds what a sweep holds beyond assembly's bounds

    def __init__(
        self,
        pipeline: Pipeline,
        sampler: Sampler,
        queue: RecordQueue,
        observer: SweepObserver,
        completeness: CompletenessObserver | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.sampler = sampler
        self.queue = queue
        self.observer = observer
        self.completeness = completeness  # told why a sampled record lacks a field (see conventions.completeness)
        self.journal = journal  # what was acknowledged and is not queued yet: truncated after each sweep
        self.behind_since: float | None = None  # loop time since which each sweep found more than a chunk
        self._put_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragtrace-queue-put")

    def behind_for(self, now: float) -> float:
        """Seconds the sweep has been behind (0 when caught up)."""
        return 0.0 if self.behind_since is None else now - self.behind_since

    async def run_once(self, everything: bool = False) -> int:
        """Build, observe and sample every completed trace, a chunk at a time; returns records built."""
        loop = asyncio.get_running_loop()
        built = 0
        while True:
            completed = self.pipeline.completed(limit=None if everything else self.chunk, everything=everything)
            if len(completed) >= self.chunk and not everything:
                if self.behind_since is None:
                    self.behind_since = loop.time()
            else:
                self.behind_since = None
            summaries: list[tuple[CompletedTrace, RecordSummary]] = []
            for item in completed:
                try:
                    summaries.append((item, summary_of(item)))
                except Exception:
                    log.exception("could not assemble trace %s", item.trace_id)
                    self.observer.dropped(None, ASSEMBLY_ERROR)
            built += len(summaries)
            try:
                self.observer.observe_records([summary for _, summary in summaries])
            except Exception:  # the latency metrics miss a chunk; its records are still sampled and queued
                log.exception("could not observe %d records", len(summaries))
            decided: list[tuple[CompletedTrace, RecordSummary, Decision]] = []
            for item, summary in summaries:
                try:
                    decided.append((item, summary, self.sampler.decide(summary)))
                except Exception:
                    log.exception("could not sample trace %s", item.trace_id)
                    self.observer.dropped(None, ASSEMBLY_ERROR)
            try:
                self.sampler.count([(summary, decision) for _, summary, decision in decided])
            except Exception:
                log.exception("could not count the sampling decisions of %d records", len(decided))
            selected: list[RagRecord] = []
            for item, _, decision in decided:
                if not decision.sampled:
                    continue
                try:
                    # texts (query, answer, contexts) are read only for the records that get scored
                    record = record_of(item, decision.weight)
                    selected.append(record)
                    self._diagnose(record, item.spans)
                except Exception:
                    log.exception("could not assemble trace %s", item.trace_id)
                    self.observer.dropped(None, ASSEMBLY_ERROR)
            del completed, summaries, decided
            if selected or not self.queue.writable:
                await loop.run_in_executor(self._put_executor, self._put_all, selected)
            self._settle()
            if self.behind_since is None:
                self._truncate_journal()
                return built
            await asyncio.sleep(0)  # let the receivers in between chunks

    async def run(self, interval: float) -> None:
        """Sweep every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_once()
            except Exception:
                log.exception("assembly sweep failed")

    def _diagnose(self, record: RagRecord, spans: list[SpanData]) -> None:
        """Report the fields the record lacks and why; a failure here costs a log line, never the record."""
        if self.completeness is None:
            return
        try:
            missing = missing_fields(record, spans)
            if missing:
                self.completeness.observe(record.service, missing)
        except Exception:
            log.exception("could not tell why trace %s is incomplete", record.trace_id)

    def _settle(self) -> None:
        """The chunk's traces are decided (queued, refused as full, not sampled, unbuildable): let a shared state
        forget its claims on them. Not while the queue holds records in memory (it cannot write): those stay
        claimed, and are completed again, by any receiver, once the lease runs out (scored once all the same)."""
        if not self.queue.writable:
            return
        try:
            self.pipeline.settle()
        except Exception:  # a claim left behind costs a duplicate record after the lease, never a lost one
            log.exception("could not settle the traces swept")

    def _truncate_journal(self) -> None:
        """Let the journal delete what every trace since queued: nothing of this sweep is in hand any more (its
        puts returned), so what was appended before the oldest trace still in the pipeline is safe on the queue. Not
        while the queue holds records in memory (a full disk): the journal is then their only durable copy."""
        if self.journal is None:
            return
        self.journal.probe()  # while it refuses writes, whether the disk has room again
        if not self.queue.writable:
            return
        oldest = self.pipeline.oldest_first_seen()
        try:
            self.journal.truncate(self.pipeline.clock() if oldest is None else oldest)
        except OSError:
            log.exception("could not truncate the assembly journal")

    def close(self) -> None:
        """Wait for the last put to finish."""
        self._put_executor.shutdown(wait=True)

    def _put_all(self, records: list[RagRecord]) -> None:
        if not self.queue.writable:
            try:
                self.queue.write_held()  # paced by the queue itself: a cheap no-op until its next try is due
            except Exception:
                log.exception("could not write the records the queue holds in memory")
        for record in records:
            try:
                accepted = self.queue.put(record)
            except Exception:
                log.exception("queue put failed for trace %s", record.trace_id)
                self.observer.dropped(record.pipeline, QUEUE_ERROR)
                continue
            if not accepted:
                self.observer.dropped(record.pipeline, QUEUE_FULL)

"""Every worker's scored records, kept by the receivers that show them, when the collector is scaled out on Redis.

Why: each worker stores the records it scored in its own results store, so no one explorer showed them all, and the
one that alerts link to (a receiver's, on the published ``/metrics`` port) showed none. Workers now append each
scored record and its results to one stream, ``{prefix}:results`` (``exporter/results_stream.py``, an exporter
confirmed in their stores like OTLP events and Phoenix, so what an outage kept from it is sent again at the next
start); every receiver with the explorer on follows that stream into its own results store (:class:`ResultsReplica`),
where its explorer, ``results`` and ``dataset`` read them. A worker keeps only its own: its exporters would send
another worker's results again.

Entries are read as untrusted (anyone with the Redis password writes to the stream): one that is not a record and its
results as a worker wrote them is skipped and counted in ``ragtrace_results_replicated_total{outcome="malformed"}``.
Taking an entry twice stores it once (the store inserts or ignores), so the position is kept after each batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pydantic
from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.internal.json_input import loads, lone_surrogate
from ragtrace_collector.internal.outcomes import Outcomes
from ragtrace_collector.internal.redis import StreamFollower, connect, key_prefix
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore

RECORD, RESULTS, JUDGE = "r", "m", "j"  # an entry's fields: the record, its results (JSON) and the judge's name
MAX_ENTRY_CHARS = 16 * 1024 * 1024  # a record with its contexts; longer is not one a worker wrote
MAX_RESULTS = 500
MAX_JUDGE_CHARS = 256

STORED = "stored"  # records new here
MALFORMED = "malformed"


def stream_key(url: str) -> str:
    """The results stream beside the queue's keys (``?prefix=`` of the queue URL)."""
    return f"{key_prefix(url)}:results"


def entry_of(record: RagRecord, results: Sequence[MetricResult], judge: str) -> dict[str, str]:
    """The stream entry of a scored record (what :func:`read_entry` reads back)."""
    return {
        RECORD: record.model_dump_json(exclude_none=True),
        RESULTS: json.dumps([r.to_dict() for r in results], ensure_ascii=False, separators=(",", ":")),
        JUDGE: judge,
    }


def read_entry(fields: Any) -> tuple[RagRecord, list[MetricResult], str] | None:
    """The record, results and judge an entry holds, or ``None`` when it is not one a worker wrote."""
    if not isinstance(fields, dict):
        return None
    record, results, judge = fields.get(RECORD), fields.get(RESULTS), fields.get(JUDGE)
    if not isinstance(record, str) or not isinstance(results, str) or not isinstance(judge, str):
        return None
    if len(record) + len(results) > MAX_ENTRY_CHARS or not judge or len(judge) > MAX_JUDGE_CHARS:
        return None
    try:
        rows = loads(results)
        if not isinstance(rows, list) or not rows or len(rows) > MAX_RESULTS:
            return None
        # a lone surrogate ("\ud800" in the JSON) is no text: SQLite refused it and the replica stuck on the entry
        if lone_surrogate(rows) is not None or lone_surrogate(loads(record)) is not None:
            return None
        parsed = [MetricResult.from_dict(row) for row in rows if isinstance(row, dict)]
        if len(parsed) != len(rows):
            return None
        return RagRecord.model_validate_json(record), parsed, judge
    except (ValueError, TypeError, KeyError, pydantic.ValidationError):
        return None


class ResultsReplica(StreamFollower):
    """Follows ``{prefix}:results`` into ``store`` (see the module docstring); a thread of its own."""

    def __init__(
        self,
        store: ResultsStore,
        url: str,
        registry: CollectorRegistry | None = None,
        *,
        interval: float = 0.5,
        client: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            client if client is not None else connect(url),
            stream_key(url),
            "Redis (results replica)",
            "this host's explorer shows the records scored so far and takes the rest when Redis is back",
            interval=interval,
            clock=clock,
        )
        self.store = store
        replicated = None
        if registry is not None:
            replicated = Counter(
                "ragtrace_results_replicated",
                "Scored records the workers streamed, kept here for this host's explorer: stored (new here) and"
                " malformed (stream entries skipped).",
                ("outcome",),
                registry=registry,
            )
        self._outcomes = Outcomes(replicated, STORED, MALFORMED)
        self.counts = self._outcomes.counts

    def position(self) -> str:
        return self.store.stream_position(self.stream)

    def take(self, entries: list[tuple[str, dict[str, str]]], last_id: str) -> int:
        stored = malformed = 0
        for _, fields in entries:
            entry = read_entry(fields)
            if entry is None:
                malformed += 1
                continue
            record, results, judge = entry
            stored += any(self.store.add(record, results, judge))
        self.store.set_stream_position(self.stream, last_id)
        self._outcomes.add(STORED, stored)
        self._outcomes.add(MALFORMED, malformed)
        return stored

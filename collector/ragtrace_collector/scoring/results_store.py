"""The local results store: one row per (record key, metric), written once.

Why it exists: it is what makes scoring idempotent. A record can be delivered twice (its
worker was killed after scoring and before acking, a lease expired mid-judge); the worker
inserts its results with ``INSERT OR IGNORE`` and only rows that were *new* reach the
Prometheus metrics and the OTLP events, so a redelivered record never counts twice. It is
also what ``ragtrace-collector results`` reads to list the worst records.

Rows keep the score, the status (``scored``/``skipped``/``error``), the metric's details
(e.g. the unsupported claims), the trace id, pipeline, judge and time, plus the question and
answer so a listing is readable without the trace backend.

Beside them, one ``records`` row per record keeps the whole :class:`RagRecord` (contexts in rank
order with their scores, latencies, tokens, model, session and user) so the records explorer can show
a record without the trace backend. ``PRAGMA user_version`` is the schema version: a store written
before the ``records`` table existed is migrated when opened (a records row per stored record, from
what its results rows hold).

Every result carries its provenance (schema version 4: the judge's model and hash, the metric's version, the
ragtrace version; see :mod:`ragtrace_collector.scoring.provenance`). ``rescore`` puts stored records back through
a judge: a metric a record lacks is added to ``results``, one it has goes to ``rescored``, keyed by the provenance
id beside the original, so the first score is never overwritten and judges can be compared on the same records.

Retention (:meth:`ResultsStore.enforce_retention`) deletes whole records, oldest first, past a maximum
age and past a maximum size; the service runs it periodically.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.sink import ResultSink

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    record_key       TEXT NOT NULL,
    metric           TEXT NOT NULL,
    status           TEXT NOT NULL,
    score            REAL,
    label            TEXT,
    reason           TEXT,
    higher_is_better INTEGER NOT NULL DEFAULT 1,
    details          TEXT NOT NULL DEFAULT '{}',
    trace_id         TEXT,
    pipeline         TEXT,
    service          TEXT,
    judge            TEXT,
    user_input       TEXT,
    response         TEXT,
    sampling_weight  REAL NOT NULL DEFAULT 1.0,
    scored_at        REAL NOT NULL,
    PRIMARY KEY (record_key, metric)
);
CREATE INDEX IF NOT EXISTS results_metric_score ON results (metric, score);
CREATE TABLE IF NOT EXISTS stream_positions (
    stream           TEXT PRIMARY KEY,
    last_id          TEXT NOT NULL
) WITHOUT ROWID;
"""

# Version 2: one row per record with the whole record (the explorer's record page), and the indexes the
# explorer's filters and retention use.
_SCHEMA_V2 = """
CREATE TABLE IF NOT EXISTS records (
    record_key  TEXT PRIMARY KEY,
    trace_id    TEXT,
    service     TEXT,
    pipeline    TEXT,
    session_id  TEXT,
    user_id     TEXT,
    model       TEXT,
    error       TEXT,
    started_at  REAL,
    scored_at   REAL NOT NULL,
    occurred_at REAL NOT NULL,
    record      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS records_scored_at ON records (scored_at);
CREATE INDEX IF NOT EXISTS records_occurred_at ON records (occurred_at);
CREATE INDEX IF NOT EXISTS records_trace_id ON records (trace_id);
CREATE INDEX IF NOT EXISTS records_session ON records (session_id, occurred_at);
CREATE INDEX IF NOT EXISTS records_user ON records (user_id, occurred_at);
CREATE INDEX IF NOT EXISTS records_service ON records (service);
CREATE INDEX IF NOT EXISTS records_pipeline ON records (pipeline);
CREATE INDEX IF NOT EXISTS results_scored_at ON results (scored_at);
CREATE INDEX IF NOT EXISTS results_trace_id ON results (trace_id);
INSERT OR IGNORE INTO records (record_key, trace_id, service, pipeline, scored_at, occurred_at)
    SELECT record_key, MAX(trace_id), MAX(service), MAX(pipeline), MIN(scored_at), MIN(scored_at)
    FROM results GROUP BY record_key;
"""
# Version 3: which exporter confirmed which result (sent, or refused for good), so that results a crash or a stop
# left unexported are sent again at the next start (exporters are at least once, idempotent by identifier).
_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS exported (
    record_key  TEXT NOT NULL,
    metric      TEXT NOT NULL,
    exporter    TEXT NOT NULL,
    exported_at REAL NOT NULL,
    PRIMARY KEY (record_key, metric, exporter)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS exported_at ON exported (exported_at);
"""
# Version 4: each result's provenance (what produced it), and the scores ``rescore`` made of metrics a record already
# had: one row per (record, metric, provenance id), beside the original result, never instead of it.
_ADD_PROVENANCE = "ALTER TABLE results ADD COLUMN provenance TEXT NOT NULL DEFAULT '{}'"
_SCHEMA_V4 = """
CREATE TABLE IF NOT EXISTS rescored (
    record_key       TEXT NOT NULL,
    metric           TEXT NOT NULL,
    provenance_id    TEXT NOT NULL,
    status           TEXT NOT NULL,
    score            REAL,
    label            TEXT,
    reason           TEXT,
    higher_is_better INTEGER NOT NULL DEFAULT 1,
    details          TEXT NOT NULL DEFAULT '{}',
    trace_id         TEXT,
    pipeline         TEXT,
    service          TEXT,
    judge            TEXT,
    user_input       TEXT,
    response         TEXT,
    sampling_weight  REAL NOT NULL DEFAULT 1.0,
    scored_at        REAL NOT NULL,
    provenance       TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (record_key, metric, provenance_id)
);
CREATE INDEX IF NOT EXISTS rescored_trace_id ON rescored (trace_id);
"""
SCHEMA_VERSION = 4

_RECORD_COLUMNS = (
    "record_key",
    "trace_id",
    "service",
    "pipeline",
    "session_id",
    "user_id",
    "model",
    "error",
    "started_at",
    "scored_at",
    "occurred_at",
    "record",
)
#: What a list row shows of a record's texts: its question and answer, cut here (a whole record, contexts and
#: all, is read only for its own page).
LIST_TEXT_CHARS = 500
#: The record columns of a list row: every column but the record itself, and the two texts cut in SQLite.
_LISTED_RECORD_COLUMNS = tuple(f"r.{c}" for c in _RECORD_COLUMNS if c != "record") + (
    f"substr(json_extract(r.record, '$.user_input'), 1, {LIST_TEXT_CHARS})",
    f"substr(json_extract(r.record, '$.response'), 1, {LIST_TEXT_CHARS})",
)
Outcome = Literal["scored", "skipped", "error"]
Sort = Literal["newest", "worst"]

_COLUMNS = (
    "record_key",
    "metric",
    "status",
    "score",
    "label",
    "reason",
    "higher_is_better",
    "details",
    "trace_id",
    "pipeline",
    "service",
    "judge",
    "user_input",
    "response",
    "sampling_weight",
    "scored_at",
    "provenance",
)


#: A list row's result columns: no details, the texts cut (a migrated store's rows hold the question there).
_LISTED_COLUMNS = tuple(
    {
        "details": "NULL",
        "user_input": f"substr(user_input, 1, {LIST_TEXT_CHARS})",
        "response": f"substr(response, 1, {LIST_TEXT_CHARS})",
        "reason": f"substr(reason, 1, {LIST_TEXT_CHARS})",
    }.get(c, c)
    for c in _COLUMNS
)
#: Values each filter of the explorer offers at most (the most frequent first).
FACET_LIMIT = 100


@dataclass
class StoredResult:
    """One stored row, as read back."""

    record_key: str
    metric: str
    status: str
    score: float | None
    label: str | None
    reason: str | None
    higher_is_better: bool
    details: dict[str, Any] = field(default_factory=dict)
    trace_id: str | None = None
    pipeline: str | None = None
    service: str | None = None
    judge: str | None = None
    user_input: str | None = None
    response: str | None = None
    sampling_weight: float = 1.0
    scored_at: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)  # what produced it ({} for rows stored before v4)

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _COLUMNS}


@dataclass(frozen=True)
class JudgedScore:
    """One judge's score of one metric on one record, for comparing judges with reviewers."""

    trace_id: str
    record_key: str
    metric: str
    judge: str
    score: float
    higher_is_better: bool
    pipeline: str | None = None


@dataclass
class StoredRecord:
    """One record as stored, with its results (by metric name order)."""

    record_key: str
    trace_id: str | None
    service: str | None
    pipeline: str | None
    session_id: str | None
    user_id: str | None
    model: str | None
    error: str | None
    started_at: float | None
    scored_at: float
    occurred_at: float  # the request's start where known, else when it was stored: what "newest" and windows use
    record: dict[str, Any] = field(default_factory=dict)  # the RagRecord's JSON ({} for a migrated store's rows)
    results: list[StoredResult] = field(default_factory=list)

    @property
    def user_input(self) -> str | None:
        """The question: from the record, else (migrated rows) from a result row."""
        return self.record.get("user_input") or next((r.user_input for r in self.results if r.user_input), None)

    @property
    def response(self) -> str | None:
        return self.record.get("response") or next((r.response for r in self.results if r.response), None)

    @property
    def judge(self) -> str | None:
        return next((r.judge for r in self.results if r.judge), None)


@dataclass(frozen=True)
class ResultFilter:
    """A filter over stored results (``ragtrace-collector results``, the faithfulness page's command): every
    condition given must hold. ``below``/``above`` keep scores strictly past them (so no skipped or failed result);
    ``since`` keeps results stored at or after it (unix seconds)."""

    metric: str | None = None
    below: float | None = None
    above: float | None = None
    pipeline: str | None = None
    since: float | None = None
    service: str | None = None
    trace_id: str | None = None
    judge: str | None = None

    def clauses(self) -> tuple[list[str], list[Any]]:
        """The SQL conditions over ``results`` and their parameters."""
        clauses, params = _equal(
            metric=self.metric, pipeline=self.pipeline, service=self.service, trace_id=self.trace_id, judge=self.judge
        )
        for condition, bound in (("score < ?", self.below), ("score > ?", self.above), ("scored_at >= ?", self.since)):
            if bound is not None:
                clauses.append(condition)
                params.append(float(bound))
        return clauses, params


@dataclass
class RecordQuery:
    """A filter over stored records: every condition given must hold.

    ``metric``, ``min_score``/``max_score``, ``judge`` and ``outcome`` hold together for one result of the
    record (a score range means a scored result). ``sort="worst"`` orders by the chosen metric's score
    (direction-aware), or without a metric by the record's worst 0–1 score; newest first among equals. A record's
    time is its request's start where known, else when it was stored.
    """

    since: float | None = None  # unix seconds, on the record's time (the request's start, else when stored)
    until: float | None = None
    service: str | None = None
    pipeline: str | None = None
    metric: str | None = None
    min_score: float | None = None
    max_score: float | None = None
    judge: str | None = None
    outcome: Outcome | None = None
    session_id: str | None = None
    user_id: str | None = None
    trace_id: str | None = None
    sort: Sort = "newest"
    limit: int = 50
    offset: int = 0


@dataclass
class RecordPage:
    """One page of :meth:`ResultsStore.records`: the records and how many match in all."""

    records: list[StoredRecord]
    total: int


class StoreUnwritable(OSError):
    """The results store cannot be opened for writing: which file, why and what to set, in one line (``serve``
    prints it and exits 1 rather than a ``sqlite3`` traceback that names neither)."""


class ResultsStore(ResultSink):
    """SQLite (WAL) table of metric results keyed by ``(RagRecord.key, metric)``; thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except (OSError, sqlite3.OperationalError) as exc:  # (a file that is not SQLite: its own error)
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StoreUnwritable(
                f"cannot write the results store at {self.path}: {cause} (is its directory writable? set data_dir"
                " or RAGTRACE_DATA_DIR, or export.results_path)"
            ) from exc
        self._closed = False

    def _open(self) -> sqlite3.Connection:
        """Connect and create or migrate the tables: a directory or file that cannot be written fails here."""
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA busy_timeout=30000")
            # a new file gives deleted pages back (retention shrinks it); an older file keeps reusing them
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            with self._lock:
                self._migrate()
        except BaseException:
            self._db.close()
            raise
        return self._db

    def _migrate(self) -> None:
        """Create the tables, or bring an older store up to :data:`SCHEMA_VERSION`, in one transaction."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(_SCHEMA):
                self._db.execute(statement)
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version < 2:
                for statement in _statements(_SCHEMA_V2):
                    self._db.execute(statement)
            if version < 3:
                for statement in _statements(_SCHEMA_V3):
                    self._db.execute(statement)
            if version < 4:
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(results)")}
                if "provenance" not in columns:
                    self._db.execute(_ADD_PROVENANCE)
                for statement in _statements(_SCHEMA_V4):
                    self._db.execute(statement)
            if version < SCHEMA_VERSION:
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a read-only or full disk may have rolled it back already
                self._db.execute("ROLLBACK")
            raise

    # -- writing ----------------------------------------------------------------------------
    def add(self, record: RagRecord, results: Sequence[MetricResult], judge: str | None = None) -> list[bool]:
        """Insert-or-ignore each result in one transaction; ``True`` where the row is new."""
        now = time.time()
        inserted: list[bool] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for result in results:
                    cur = self._db.execute(
                        f"INSERT OR IGNORE INTO results ({', '.join(_COLUMNS)}) "
                        f"VALUES ({', '.join('?' for _ in _COLUMNS)})",
                        _result_row(record, result, judge, now),
                    )
                    inserted.append(cur.rowcount == 1)
                if results:
                    started = record.start_time_unix_nano / 1e9 if record.start_time_unix_nano else None
                    self._db.execute(
                        f"INSERT OR IGNORE INTO records ({', '.join(_RECORD_COLUMNS)}) "
                        f"VALUES ({', '.join('?' for _ in _RECORD_COLUMNS)})",
                        (
                            record.key,
                            record.trace_id,
                            record.service,
                            record.pipeline,
                            record.session_id,
                            record.user_id,
                            record.model,
                            record.error,
                            started,
                            now,
                            started if started is not None else now,
                            record.model_dump_json(exclude_none=True),
                        ),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return inserted

    def stream_position(self, stream: str) -> str:
        """The id of the last entry of a Redis ``stream`` this store took in (``0-0``: none yet); see
        :mod:`ragtrace_collector.scoring.results_replica`."""
        with self._lock:
            row = self._db.execute("SELECT last_id FROM stream_positions WHERE stream = ?", (stream,)).fetchone()
        return str(row[0]) if row else "0-0"

    def set_stream_position(self, stream: str, last_id: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO stream_positions (stream, last_id) VALUES (?, ?)", (stream, last_id)
            )

    def add_rescored(self, record: RagRecord, results: Sequence[MetricResult], judge: str | None = None) -> list[bool]:
        """Keep results of metrics the record already has beside them, one row per (record, metric, provenance
        id), insert-or-ignore; ``True`` where the row is new. ``results`` rows are never touched."""
        now = time.time()
        columns = (*_COLUMNS, "provenance_id")
        inserted: list[bool] = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for result in results:
                    cur = self._db.execute(
                        f"INSERT OR IGNORE INTO rescored ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                        (*_result_row(record, result, judge, now), str((result.provenance or {}).get("id") or "")),
                    )
                    inserted.append(cur.rowcount == 1)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return inserted

    def rescored(self, record_key: str) -> list[StoredResult]:
        """The rescored results of one record (every provenance), by metric then time."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM rescored WHERE record_key = ? ORDER BY metric, scored_at",
                (record_key,),
            ).fetchall()
        return [_row(r) for r in rows]

    def provenance_ids(self, record_key: str) -> dict[str, set[str]]:
        """Per metric, the provenance ids of the record's scores, original and rescored (what ``rescore`` would
        only repeat)."""
        out: dict[str, set[str]] = {}
        with self._lock:
            rows = self._db.execute(
                "SELECT metric, json_extract(provenance, '$.id') FROM results WHERE record_key = ? UNION "
                "SELECT metric, provenance_id FROM rescored WHERE record_key = ?",
                (record_key, record_key),
            ).fetchall()
        for metric, pid in rows:
            out.setdefault(metric, set())
            if pid:
                out[metric].add(str(pid))
        return out

    def stored_records(
        self,
        *,
        since: float | None = None,
        service: str | None = None,
        metric_below: tuple[str, float] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 500,
    ) -> tuple[list[StoredRecord], tuple[float, str] | None]:
        """One page of whole stored records with their results, oldest first (by the record's time), after the
        cursor ``after``: those since ``since`` (unix seconds), of ``service``, and whose ``metric_below`` metric
        scored strictly below the bound, where given. Returns the page and the next cursor (None after the last):
        a store of any size is read a page at a time."""
        clauses, params = _equal("r", service=service)
        if since is not None:
            clauses.append("r.occurred_at >= ?")
            params.append(float(since))
        if metric_below is not None:
            clauses.append(
                "EXISTS (SELECT 1 FROM results x WHERE x.record_key = r.record_key AND x.metric = ? "
                "AND x.status = 'scored' AND x.score < ?)"
            )
            params.extend([metric_below[0], float(metric_below[1])])
        if after is not None:
            clauses.append("(r.occurred_at, r.record_key) > (?, ?)")
            params.extend(after)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join('r.' + c for c in _RECORD_COLUMNS)} FROM records r{where} "
                "ORDER BY r.occurred_at, r.record_key LIMIT ?",
                [*params, int(limit)],
            ).fetchall()
            records = [_record_row(row) for row in rows]
            self._attach_results(records)
        last = records[-1] if len(records) >= limit else None
        return records, (last.occurred_at, last.record_key) if last is not None else None

    # -- exports: which exporter confirmed which result ------------------------------------------
    def mark_exported(self, exporter: str, keys: Iterable[tuple[str, str]]) -> int:
        """Note that ``exporter`` delivered (or was refused for good) these ``(record key, metric)`` results, so
        they are not sent again at the next start; returns the marks that are new."""
        rows = [(key, metric, exporter, time.time()) for key, metric in keys]
        if not rows:
            return 0
        with self._lock:
            if self._closed:  # an exporter confirming after the stop: the next start sends it again (idempotent)
                return 0
            self._db.execute("BEGIN IMMEDIATE")
            try:
                before = self._db.total_changes
                self._db.executemany(
                    "INSERT OR IGNORE INTO exported (record_key, metric, exporter, exported_at) VALUES (?, ?, ?, ?)",
                    rows,
                )
                added = self._db.total_changes - before
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def exported(self, exporter: str) -> set[tuple[str, str]]:
        """The ``(record key, metric)`` results ``exporter`` confirmed (tests, checks)."""
        with self._lock:
            rows = self._db.execute("SELECT record_key, metric FROM exported WHERE exporter = ?", (exporter,))
            return {(k, m) for k, m in rows}

    def unexported(
        self,
        exporter: str,
        statuses: Sequence[str],
        *,
        since: float,
        until: float,
        after: tuple[float, str, str] | None = None,
        limit: int = 500,
    ) -> tuple[list[tuple[RagRecord, list[StoredResult]]], tuple[float, str, str] | None]:
        """Results of ``statuses`` of a trace (exporters attach scores to traces; a dataset row has none) stored in
        ``[since, until)`` that ``exporter`` has not confirmed, oldest first, at most ``limit`` after the cursor
        ``after``: grouped by record, each with the record to send them as, and the cursor of the next page (None
        when this one was the last)."""
        marks = ", ".join("?" for _ in statuses)
        sql = (
            f"SELECT {', '.join('r.' + c for c in _COLUMNS)} FROM results r WHERE r.status IN ({marks})"
            " AND r.trace_id IS NOT NULL"
            " AND r.scored_at >= ? AND r.scored_at < ? AND (r.scored_at, r.record_key, r.metric) > (?, ?, ?)"
            " AND NOT EXISTS (SELECT 1 FROM exported e WHERE e.record_key = r.record_key AND e.metric = r.metric"
            " AND e.exporter = ?) ORDER BY r.scored_at, r.record_key, r.metric LIMIT ?"
        )
        cursor = after if after is not None else (float("-inf"), "", "")
        with self._lock:
            rows = self._db.execute(sql, [*statuses, since, until, *cursor, exporter, int(limit)]).fetchall()
            results = [_row(r) for r in rows]
            stored = self._records_json({r.record_key for r in results})
        grouped: dict[str, list[StoredResult]] = {}
        for result in results:
            grouped.setdefault(result.record_key, []).append(result)
        page = [(_as_record(key, stored.get(key), group[0]), group) for key, group in grouped.items()]
        last = results[-1] if len(results) >= limit else None
        return page, (last.scored_at, last.record_key, last.metric) if last is not None else None

    def _records_json(self, keys: Iterable[str]) -> dict[str, str]:
        """The stored record JSON of each key that has one (the caller holds the lock)."""
        keys = list(keys)
        found: dict[str, str] = {}
        for start in range(0, len(keys), 500):  # SQLite's bound on parameters
            chunk = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT record_key, record FROM records WHERE record_key IN ({', '.join('?' for _ in chunk)})", chunk
            )
            found.update({k: v for k, v in rows if v})
        return found

    # -- reading ----------------------------------------------------------------------------
    def metrics_done(self, record_key: str) -> set[str]:
        """The metrics already stored for this record (a redelivered record skips them)."""
        with self._lock:
            rows = self._db.execute("SELECT metric FROM results WHERE record_key = ?", (record_key,)).fetchall()
        return {r[0] for r in rows}

    def count(self, record_key: str | None = None, metric: str | None = None) -> int:
        where, params = _where(record_key=record_key, metric=metric)
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM results{where}", params).fetchone()[0])

    def counts_per_key(self, metric: str | None = None) -> dict[str, int]:
        """Rows per record key (exactly-once checks)."""
        where, params = _where(metric=metric)
        with self._lock:
            rows = self._db.execute(
                f"SELECT record_key, COUNT(*) FROM results{where} GROUP BY record_key", params
            ).fetchall()
        return {k: int(n) for k, n in rows}

    def get(self, record_key: str) -> list[StoredResult]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM results WHERE record_key = ? ORDER BY metric", (record_key,)
            ).fetchall()
        return [_row(r) for r in rows]

    def worst(self, where: ResultFilter, limit: int = 20) -> list[StoredResult]:
        """Scored rows matching ``where`` (one metric, or several), worst first (lowest score, or highest where
        lower is better), the newest first among equal scores."""
        clauses, params = where.clauses()
        clauses.append("status = 'scored'")
        # "worst" follows each row's direction: ascending score when higher is better; then the newest
        order = "CASE WHEN higher_is_better = 1 THEN score ELSE -score END ASC, scored_at DESC, record_key"
        sql = f"SELECT {', '.join(_COLUMNS)} FROM results WHERE {' AND '.join(clauses)} ORDER BY {order} LIMIT ?"
        params.append(int(limit))
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [_row(r) for r in rows]

    def summary(self, where: ResultFilter = ResultFilter()) -> list[dict[str, Any]]:
        """Per metric: results by status, mean score, and the sampling-weighted mean score (each
        record weighs 1 / its sampling probability, so it estimates the mean over all traffic), of the results
        matching ``where``."""
        clauses, filter_params = where.clauses()
        condition = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        params = tuple(filter_params)
        sql = (
            "SELECT metric, "
            "SUM(status = 'scored'), SUM(status = 'skipped'), SUM(status = 'error'), "
            "AVG(CASE WHEN status = 'scored' THEN score END), "
            "SUM(CASE WHEN status = 'scored' THEN score * sampling_weight END) "
            "/ SUM(CASE WHEN status = 'scored' THEN sampling_weight END), "
            "MAX(higher_is_better) "
            f"FROM results{condition} GROUP BY metric ORDER BY metric"
        )
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [
            {
                "metric": m,
                "scored": int(sc or 0),
                "skipped": int(sk or 0),
                "error": int(er or 0),
                "mean": mean,
                "weighted_mean": wmean,
                "higher_is_better": bool(hib),
            }
            for m, sc, sk, er, mean, wmean, hib in rows
        ]

    def judged_scores(self, trace_ids: Iterable[str], metric: str | None = None) -> list[JudgedScore]:
        """The scored results of these traces (of ``metric`` where given), original and rescored, one per (trace,
        metric, judge) — the newest where a judge scored a metric twice: what the judge-vs-human agreement
        compares with the reviewers' verdicts, judge by judge."""
        ids = list(dict.fromkeys(trace_ids))
        newest: dict[tuple[str, str, str], tuple[float, JudgedScore]] = {}
        with self._lock:
            for start in range(0, len(ids), 500):  # SQLite's bound on parameters
                chunk = ids[start : start + 500]
                marks = ", ".join("?" for _ in chunk)
                where = f"status = 'scored' AND trace_id IN ({marks})" + (" AND metric = ?" if metric else "")
                params: list[Any] = list(chunk) + ([metric] if metric else [])
                columns = (
                    "trace_id, record_key, metric, COALESCE(judge, ''), score, higher_is_better, pipeline, scored_at"
                )
                sql = f"SELECT {columns} FROM results WHERE {where} UNION ALL SELECT {columns} FROM rescored WHERE {where}"
                for t, key, m, judge, score, hib, pipeline, at in self._db.execute(sql, params + params):
                    seen = newest.get((t, m, judge))
                    if seen is None or at > seen[0]:
                        newest[(t, m, judge)] = (at, JudgedScore(t, key, m, judge, float(score), bool(hib), pipeline))
        return [score for _, score in newest.values()]

    def metrics(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT metric FROM results ORDER BY metric")]

    def results_of_trace(
        self, trace_id: str, since: float | None = None, judge: str | None = None
    ) -> list[StoredResult]:
        """Every result of one trace (all metrics, any status), newest first; stored at or after ``since``
        (unix seconds) and of ``judge`` where given."""
        clauses, params = ResultFilter(trace_id=trace_id, since=since, judge=judge).clauses()
        sql = f"SELECT {', '.join(_COLUMNS)} FROM results WHERE {' AND '.join(clauses)}"
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY scored_at DESC, metric", params).fetchall()
        return [_row(r) for r in rows]

    def pipeline_of(self, trace_id: str) -> str | None:
        """The pipeline of a stored record of ``trace_id`` (feedback's metric label), None when none is stored."""
        with self._lock:
            row = self._db.execute(
                "SELECT pipeline FROM records WHERE trace_id = ? AND pipeline IS NOT NULL LIMIT 1", (trace_id,)
            ).fetchone()
        return str(row[0]) if row is not None else None

    # -- the records explorer ------------------------------------------------------------------
    def records(self, query: RecordQuery) -> RecordPage:
        """The records matching ``query``, one page of them with their results, and how many match.

        List rows only: the record holds just its question and answer, cut at :data:`LIST_TEXT_CHARS`, and each
        result no details, texts or reason beyond a line (what a list shows); :meth:`record` reads one whole."""
        where, params = _record_filter(query)
        order = "r.occurred_at DESC, r.scored_at DESC, r.record_key"
        order_params: list[Any] = []
        if query.sort == "worst":
            if query.metric is not None:
                key = (
                    "(SELECT CASE WHEN x.higher_is_better = 1 THEN x.score ELSE -x.score END FROM results x "
                    "WHERE x.record_key = r.record_key AND x.metric = ? AND x.status = 'scored')"
                )
                order_params.append(query.metric)
            else:
                key = (
                    "(SELECT MIN(CASE WHEN x.higher_is_better = 1 THEN x.score ELSE 1 - x.score END) FROM results x "
                    "WHERE x.record_key = r.record_key AND x.status = 'scored' AND x.score BETWEEN 0 AND 1)"
                )
            order = f"{key} ASC NULLS LAST, {order}"
        columns = ", ".join(_LISTED_RECORD_COLUMNS)
        with self._lock:
            total = int(self._db.execute(f"SELECT COUNT(*) FROM records r{where}", params).fetchone()[0])
            rows = self._db.execute(
                f"SELECT {columns} FROM records r{where} ORDER BY {order} LIMIT ? OFFSET ?",
                [*params, *order_params, max(0, int(query.limit)), max(0, int(query.offset))],
            ).fetchall()
            records = [_listed_record_row(row) for row in rows]
            self._attach_results(records, listed=True)
        return RecordPage(records, total)

    def record(self, key: str) -> StoredRecord | None:
        """One record with its results, by trace id or record key (the newest when a trace id repeats)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_RECORD_COLUMNS)} FROM records WHERE trace_id = ? OR record_key = ? "
                "ORDER BY scored_at DESC LIMIT 1",
                (key, key),
            ).fetchone()
            if row is None:
                return None
            found = _record_row(row)
            self._attach_results([found])
        return found

    def session(self, session_id: str, limit: int = 500) -> list[StoredRecord]:
        """The turns of a conversation, oldest first, as list rows (see :meth:`records`)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_LISTED_RECORD_COLUMNS)} FROM records r WHERE r.session_id = ? "
                "ORDER BY r.occurred_at ASC, r.scored_at ASC LIMIT ?",
                (session_id, int(limit)),
            ).fetchall()
            records = [_listed_record_row(row) for row in rows]
            self._attach_results(records, listed=True)
        return records

    def facets(self, limit: int = FACET_LIMIT, search: str | None = None) -> dict[str, list[str]]:
        """The values the explorer's filters offer — services, pipelines, metrics and judges stored — each the
        ``limit`` most frequent (50,000 service names must not make every page megabytes), those containing
        ``search`` (case-insensitive) where given."""
        like = f"%{_escape_like(search.lower())}%" if search else "%"
        queries = {
            "services": "SELECT service, COUNT(*) n FROM records WHERE service IS NOT NULL AND lower(service) LIKE ?"
            " ESCAPE '\\' GROUP BY service ORDER BY n DESC, service LIMIT ?",
            "pipelines": "SELECT pipeline, COUNT(*) n FROM records WHERE pipeline IS NOT NULL AND lower(pipeline)"
            " LIKE ? ESCAPE '\\' GROUP BY pipeline ORDER BY n DESC, pipeline LIMIT ?",
            "metrics": "SELECT metric, COUNT(*) n FROM results WHERE lower(metric) LIKE ? ESCAPE '\\' GROUP BY metric"
            " ORDER BY n DESC, metric LIMIT ?",
            "judges": "SELECT judge, COUNT(*) n FROM results WHERE judge IS NOT NULL AND lower(judge) LIKE ?"
            " ESCAPE '\\' GROUP BY judge ORDER BY n DESC, judge LIMIT ?",
        }
        with self._lock:
            found = {name: [str(r[0]) for r in self._db.execute(sql, (like, limit))] for name, sql in queries.items()}
        return {name: sorted(values) for name, values in found.items()}

    def _attach_results(self, records: list[StoredRecord], listed: bool = False) -> None:
        """Fill each record's results (the caller holds the lock); ``listed``: a list row's (no details, texts
        or long reasons)."""
        by_key = {r.record_key: r for r in records}
        keys = list(by_key)
        columns = _LISTED_COLUMNS if listed else _COLUMNS
        for start in range(0, len(keys), 500):  # SQLite's bound on parameters
            chunk = keys[start : start + 500]
            rows = self._db.execute(
                f"SELECT {', '.join(columns)} FROM results WHERE record_key IN ({', '.join('?' for _ in chunk)}) "
                "ORDER BY metric",
                chunk,
            ).fetchall()
            for row in rows:
                result = _row(row)
                by_key[result.record_key].results.append(result)

    # -- retention -----------------------------------------------------------------------------
    def size_bytes(self) -> int:
        """Bytes the store's pages hold (free pages not counted): what ``max_bytes`` bounds."""
        with self._lock:
            pages = int(self._db.execute("PRAGMA page_count").fetchone()[0])
            free = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
            size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
        return (pages - free) * size

    def enforce_retention(
        self, max_age_seconds: float | None = None, max_bytes: int | None = None, now: float | None = None
    ) -> int:
        """Delete whole records (their results too), oldest first: those stored more than ``max_age_seconds``
        ago, then as many more as bring the store under ``max_bytes``. Returns the records deleted.

        Deletes go in small transactions so the scoring worker's writes wait little; a deleted record that
        is delivered again would be scored again, so keep the age far above the queue's lease and backlog.
        """
        deleted = 0
        if max_age_seconds is not None:
            cutoff = (time.time() if now is None else now) - max_age_seconds
            while True:
                n = self._delete_oldest(500, before=cutoff)
                deleted += n
                if n < 500:
                    break
            with self._lock:  # results whose record row is gone (or never existed): by their own time
                self._db.execute("DELETE FROM results WHERE scored_at < ?", (cutoff,))
                self._db.execute("DELETE FROM rescored WHERE scored_at < ?", (cutoff,))
                self._db.execute("DELETE FROM exported WHERE exported_at < ?", (cutoff,))
        if max_bytes is not None:
            for _ in range(50):  # each pass deletes a share sized from the overshoot; a few passes suffice
                used = self.size_bytes()
                if used <= max_bytes:
                    break
                with self._lock:
                    count = int(self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0])
                if count == 0:
                    break
                share = 1.0 - 0.9 * max_bytes / used  # aim 10% under the bound, so it is not hit at once again
                deleted += self._delete_oldest(max(1, min(count, int(count * share + 0.999))))
        if deleted:
            with self._lock:
                self._db.executescript("PRAGMA incremental_vacuum;")  # stepped to the end: every free page
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    def _delete_oldest(self, n: int, before: float | None = None) -> int:
        """Delete the ``n`` oldest records (stored before ``before`` when given), in batches of 500."""
        done = 0
        while done < n:
            batch = min(500, n - done)
            with self._lock:
                sql = "SELECT record_key FROM records"
                params: list[Any] = []
                if before is not None:
                    sql += " WHERE scored_at < ?"
                    params.append(before)
                keys = [
                    r[0] for r in self._db.execute(f"{sql} ORDER BY scored_at, record_key LIMIT ?", [*params, batch])
                ]
                if not keys:
                    return done
                marks = ", ".join("?" for _ in keys)
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.execute(f"DELETE FROM results WHERE record_key IN ({marks})", keys)
                    self._db.execute(f"DELETE FROM rescored WHERE record_key IN ({marks})", keys)
                    self._db.execute(f"DELETE FROM records WHERE record_key IN ({marks})", keys)
                    self._db.execute(f"DELETE FROM exported WHERE record_key IN ({marks})", keys)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            done += len(keys)
            if len(keys) < batch:
                break
        return done

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    # -- the sink contract (scoring.sink.ResultSink): the store is the first sink, the one that says what is new --
    def emit(self, record: RagRecord, results: Sequence[MetricResult], judge: str) -> list[bool]:
        """:meth:`add`: store the results; ``True`` where each is new (only those reach the other sinks)."""
        return self.add(record, results, judge)

    def shutdown(self, timeout: float | None = None) -> None:
        """:meth:`close` (every write is committed as it is made: nothing to flush)."""
        self.close()


def _equal(alias: str = "", **columns: Any) -> tuple[list[str], list[Any]]:
    """``column = ?`` conditions (``alias.column`` where given) and their parameters, for the values not None."""
    given = [(column, value) for column, value in columns.items() if value is not None]
    prefix = f"{alias}." if alias else ""
    return [f"{prefix}{column} = ?" for column, _ in given], [value for _, value in given]


def _where(**filters: Any) -> tuple[str, tuple[Any, ...]]:
    clauses, params = _equal(**filters)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def _record_filter(q: RecordQuery) -> tuple[str, list[Any]]:
    """The WHERE clause (over ``records r``) and its parameters for a query."""
    clauses, params = _equal(
        "r", service=q.service, pipeline=q.pipeline, session_id=q.session_id, user_id=q.user_id, trace_id=q.trace_id
    )
    if q.since is not None:
        clauses.append("r.occurred_at >= ?")
        params.append(float(q.since))
    if q.until is not None:
        clauses.append("r.occurred_at < ?")
        params.append(float(q.until))
    # the conditions on one result of the record
    inner, inner_params = _equal("x", metric=q.metric, judge=q.judge, status=q.outcome)
    if q.min_score is not None or q.max_score is not None:
        inner.append("x.status = 'scored'")
    if q.min_score is not None:
        inner.append("x.score >= ?")
        inner_params.append(float(q.min_score))
    if q.max_score is not None:
        inner.append("x.score <= ?")
        inner_params.append(float(q.max_score))
    if inner:
        clauses.append(
            "EXISTS (SELECT 1 FROM results x WHERE x.record_key = r.record_key AND " + " AND ".join(inner) + ")"
        )
        params.extend(inner_params)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _listed_record_row(row: Sequence[Any]) -> StoredRecord:
    """A list row (see :data:`_LISTED_RECORD_COLUMNS`): the record holds only its question and answer."""
    *columns, question, answer = row
    values = dict(zip([c for c in _RECORD_COLUMNS if c != "record"], columns))
    texts = {k: v for k, v in (("user_input", question), ("response", answer)) if isinstance(v, str)}
    return StoredRecord(**values, record=texts)


def _record_row(row: Iterable[Any]) -> StoredRecord:
    values = dict(zip(_RECORD_COLUMNS, row))
    try:
        record = json.loads(values["record"] or "{}")
    except ValueError:
        record = {}
    values["record"] = record if isinstance(record, dict) else {}
    return StoredRecord(**values)


def _as_record(key: str, stored: str | None, result: StoredResult) -> RagRecord:
    """The record a stored result was scored for, to export it again: the stored one, else (a migrated store's
    rows, or one that does not parse) what the result row holds."""
    if stored:
        try:
            record = RagRecord.model_validate_json(stored)
            if record.key == key:
                return record
        except ValueError:
            pass
    return RagRecord(id=key, trace_id=result.trace_id, pipeline=result.pipeline, service=result.service, metadata={})


def _result_row(record: RagRecord, result: MetricResult, judge: str | None, now: float) -> tuple[Any, ...]:
    """One result as the ``results`` columns (:data:`_COLUMNS`) hold it; the ``rescored`` table adds its key."""
    return (
        record.key,
        result.metric,
        result.status,
        result.score,
        result.label,
        result.reason,
        1 if result.higher_is_better else 0,
        json.dumps(result.details or {}, default=str),
        record.trace_id,
        record.pipeline,
        record.service,
        judge,
        record.user_input,
        record.response,
        record.sampling_weight,
        now,
        json.dumps(result.provenance or {}, default=str),
    )


def _row(row: Iterable[Any]) -> StoredResult:
    values = dict(zip(_COLUMNS, row))
    values["higher_is_better"] = bool(values["higher_is_better"])
    for name in ("details", "provenance"):
        try:
            parsed = json.loads(values[name] or "{}")
        except ValueError:
            parsed = {}
        values[name] = parsed if isinstance(parsed, dict) else {}
    return StoredResult(**values)

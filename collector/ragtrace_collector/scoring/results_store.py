"""The local results store: one row per (record key, metric), written once.

Why it exists: it is what makes scoring idempotent. A record can be delivered twice (its
worker was killed after scoring and before acking, a lease expired mid-judge); the worker
inserts its results with ``INSERT OR IGNORE`` and only rows that were *new* reach the
Prometheus metrics and the OTLP events, so a redelivered record never counts twice. It is
also what ``ragtrace-collector results`` reads to list the worst records.

Rows keep the score, the status (``scored``/``skipped``/``error``), the metric's details
(e.g. the unsupported claims), the trace id, pipeline, judge and time, plus the question and
answer so a listing is readable without the trace backend.
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
from typing import Any

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult

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
"""

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
)


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

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _COLUMNS}


class ResultsStore:
    """SQLite (WAL) table of metric results keyed by ``(RagRecord.key, metric)``; thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        self._closed = False

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
                        (
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
                        ),
                    )
                    inserted.append(cur.rowcount == 1)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return inserted

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

    def worst(
        self,
        metric: str,
        below: float | None = None,
        above: float | None = None,
        limit: int = 20,
        pipeline: str | None = None,
    ) -> list[StoredResult]:
        """Scored rows of ``metric``, worst first (lowest score, or highest where lower is better),
        filtered to ``score < below`` and/or ``score > above``."""
        clauses = ["metric = ?", "status = 'scored'"]
        params: list[Any] = [metric]
        if below is not None:
            clauses.append("score < ?")
            params.append(float(below))
        if above is not None:
            clauses.append("score > ?")
            params.append(float(above))
        if pipeline is not None:
            clauses.append("pipeline = ?")
            params.append(pipeline)
        # "worst" follows each row's direction: ascending score when higher is better.
        order = "CASE WHEN higher_is_better = 1 THEN score ELSE -score END ASC, scored_at ASC"
        sql = f"SELECT {', '.join(_COLUMNS)} FROM results WHERE {' AND '.join(clauses)} ORDER BY {order} LIMIT ?"
        params.append(int(limit))
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [_row(r) for r in rows]

    def summary(self, pipeline: str | None = None) -> list[dict[str, Any]]:
        """Per metric: results by status, mean score, and the sampling-weighted mean score (each
        record weighs 1 / its sampling probability, so it estimates the mean over all traffic)."""
        where, params = _where(pipeline=pipeline)
        sql = (
            "SELECT metric, "
            "SUM(status = 'scored'), SUM(status = 'skipped'), SUM(status = 'error'), "
            "AVG(CASE WHEN status = 'scored' THEN score END), "
            "SUM(CASE WHEN status = 'scored' THEN score * sampling_weight END) "
            "/ SUM(CASE WHEN status = 'scored' THEN sampling_weight END), "
            "MAX(higher_is_better) "
            f"FROM results{where} GROUP BY metric ORDER BY metric"
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

    def metrics(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT metric FROM results ORDER BY metric")]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()


def _where(**filters: Any) -> tuple[str, tuple[Any, ...]]:
    items = [(k, v) for k, v in filters.items() if v is not None]
    if not items:
        return "", ()
    return " WHERE " + " AND ".join(f"{k} = ?" for k, _ in items), tuple(v for _, v in items)


def _row(row: Iterable[Any]) -> StoredResult:
    values = dict(zip(_COLUMNS, row))
    values["higher_is_better"] = bool(values["higher_is_better"])
    try:
        values["details"] = json.loads(values["details"] or "{}")
    except ValueError:
        values["details"] = {}
    return StoredResult(**values)

"""Human labels beside the scores: end-user feedback and reviewer verdicts, kept by trace id.

Why a store of its own: labels arrive on their own time — feedback minutes or hours after the request (before its
trace was assembled, or for a trace never sampled), reviews days later — and must outlive a rescoring. So they are
keyed by trace id alone, never by a result row, and joined to records when read. They live in the results store's
SQLite file (their own tables, created here), so one file holds a deployment's records and what people said of them.

Bounds: a comment is cut at :data:`MAX_COMMENT_CHARS`, a name at :data:`MAX_NAME_CHARS`, a review holds at most
:data:`MAX_CLAIMS` claim verdicts; what was cut is marked. Re-sent feedback (the same span, the same
``Idempotency-Key``) is stored once; a reviewer's second verdict on a record's metric replaces the first.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from ragtrace_collector.internal.component import Component
from ragtrace_collector.scoring.results_store import StoreUnwritable

MAX_COMMENT_CHARS = 4000
MAX_NAME_CHARS = 64
MAX_REVIEWER_CHARS = 128
MAX_CLAIMS = 200
MAX_STATEMENT_CHARS = 2000
MAX_REFERENCE_CHARS = 20_000
CUT = "…"

Verdict = Literal["faithful", "unfaithful"]
VERDICTS: tuple[Verdict, ...] = ("faithful", "unfaithful")
ClaimLabel = Literal["supported", "contradicted", "not_found"]
CLAIM_LABELS: tuple[ClaimLabel, ...] = ("supported", "contradicted", "not_found")
Source = Literal["sdk", "api"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS feedback (
    id           INTEGER PRIMARY KEY,
    trace_id     TEXT NOT NULL,
    name         TEXT NOT NULL,
    value        REAL NOT NULL,
    comment      TEXT,
    source       TEXT NOT NULL,
    feedback_id  TEXT UNIQUE,
    service      TEXT,
    received_at  REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_trace ON feedback (trace_id);
CREATE INDEX IF NOT EXISTS feedback_received ON feedback (received_at);
CREATE TABLE IF NOT EXISTS reviews (
    trace_id     TEXT NOT NULL,
    metric       TEXT NOT NULL,
    reviewer     TEXT NOT NULL,
    verdict      TEXT,
    claims       TEXT NOT NULL DEFAULT '[]',
    reference    TEXT,
    comment      TEXT,
    reviewed_at  REAL NOT NULL,
    PRIMARY KEY (trace_id, metric, reviewer)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reviews_metric ON reviews (metric, reviewed_at);
CREATE TABLE IF NOT EXISTS feedback_outbox (
    seq          INTEGER PRIMARY KEY,
    feedback_id  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS review_outbox (
    seq          INTEGER PRIMARY KEY,
    trace_id     TEXT NOT NULL,
    metric       TEXT NOT NULL,
    reviewer     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS feedback_relay (
    stream       TEXT PRIMARY KEY,
    last_id      TEXT NOT NULL
) WITHOUT ROWID;
"""


class BadLabel(ValueError):
    """A label that cannot be stored as given: the message says which field and why (a 400 for the API)."""


def cut(text: str | None, limit: int) -> str | None:
    """``text`` bounded to ``limit`` characters, marked where it was cut; None stays None."""
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + CUT


def feedback_value(value: Any) -> float:
    """A feedback value as stored: a bool is 1.0 / 0.0, a number must be finite and in [0, 1]."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0:
        return float(value)
    raise BadLabel(f"feedback value must be a bool or a number in [0, 1], got {value!r}")


@dataclass(frozen=True)
class Feedback:
    """One end-user signal on one trace (``name`` says which: ``user_feedback``, ``thumbs``, ...)."""

    trace_id: str
    value: float
    name: str = "user_feedback"
    comment: str | None = None
    source: Source = "api"
    feedback_id: str | None = None  # the SDK's span id, or an API client's Idempotency-Key: stored once
    service: str | None = None
    received_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClaimVerdict:
    """A reviewer's verdict on one claim of the answer."""

    statement: str
    verdict: ClaimLabel

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Review:
    """A reviewer's verdict on one metric of one record: the whole answer (``verdict``), its claims, or both;
    ``reference`` a correct answer where the reviewer wrote one (a dataset's ``reference``)."""

    trace_id: str
    metric: str
    reviewer: str
    verdict: Verdict | None = None
    claims: tuple[ClaimVerdict, ...] = field(default_factory=tuple)
    reference: str | None = None
    comment: str | None = None
    reviewed_at: float = 0.0

    @property
    def unfaithful(self) -> bool | None:
        """The human label: the verdict where given, else whether any claim was not supported; None for none."""
        if self.verdict is not None:
            return self.verdict == "unfaithful"
        if self.claims:
            return any(c.verdict != "supported" for c in self.claims)
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["claims"] = [c.to_dict() for c in self.claims]
        data["unfaithful"] = self.unfaithful
        return data


def review_from_json(trace_id: str, data: Any, reviewer_default: str | None = None) -> Review:
    """A :class:`Review` from the API's JSON body (``metric``, ``verdict`` or ``claims`` or both, ``reviewer``,
    ``reference``, ``comment``); :class:`BadLabel` saying what is wrong. ``verdict`` may also be the claim list."""
    if not isinstance(data, dict):
        raise BadLabel("the body must be a JSON object")
    metric = data.get("metric")
    if not isinstance(metric, str) or not metric.strip() or len(metric) > MAX_NAME_CHARS:
        raise BadLabel(f"metric must be a metric name (1-{MAX_NAME_CHARS} characters)")
    verdict, claims_in = data.get("verdict"), data.get("claims")
    if isinstance(verdict, list):  # "a claim-level list" given as the verdict itself
        verdict, claims_in = None, verdict if claims_in is None else claims_in
    if verdict is not None and verdict not in VERDICTS:
        raise BadLabel(f"verdict must be one of {', '.join(VERDICTS)} (or a list of claim verdicts)")
    claims = _claims_from_json(claims_in)
    if verdict is None and not claims:
        raise BadLabel("give a verdict ('faithful' or 'unfaithful') or a non-empty list of claim verdicts")
    reviewer = data.get("reviewer", reviewer_default)
    if not isinstance(reviewer, str) or not reviewer.strip():
        raise BadLabel("reviewer must name who reviewed (a non-empty string)")
    reference, comment = data.get("reference"), data.get("comment")
    for name, value in (("reference", reference), ("comment", comment)):
        if value is not None and not isinstance(value, str):
            raise BadLabel(f"{name} must be a string")
    return Review(
        trace_id=trace_id,
        metric=metric.strip(),
        reviewer=str(cut(reviewer.strip(), MAX_REVIEWER_CHARS)),
        verdict=verdict,
        claims=claims,
        reference=cut(reference, MAX_REFERENCE_CHARS),
        comment=cut(comment, MAX_COMMENT_CHARS),
    )


# the metric seeds' claim verdicts, accepted for the reviewers' words
_SEED_VERDICTS = {"yes": "supported", "no": "contradicted", "idk": "not_found"}


def _claims_from_json(claims: Any) -> tuple[ClaimVerdict, ...]:
    if claims is None:
        return ()
    if not isinstance(claims, list):
        raise BadLabel("claims must be a list of {statement, verdict}")
    if len(claims) > MAX_CLAIMS:
        raise BadLabel(f"at most {MAX_CLAIMS} claim verdicts per review")
    out = []
    for i, c in enumerate(claims):
        if not isinstance(c, dict) or not isinstance(c.get("statement"), str):
            raise BadLabel(f"claims[{i}] must be an object with a statement (string) and a verdict")
        given = c.get("verdict")
        verdict = _SEED_VERDICTS.get(given, given) if isinstance(given, str) else None
        if verdict not in CLAIM_LABELS:
            raise BadLabel(f"claims[{i}].verdict must be one of {', '.join(CLAIM_LABELS)} (or yes / no / idk)")
        out.append(ClaimVerdict(str(cut(c["statement"], MAX_STATEMENT_CHARS)), cast(ClaimLabel, verdict)))
    return tuple(out)


# A review another host relayed replaces the reviewer's verdict kept here only if it was made later.
_UPSERT_LATER_REVIEW = (
    "INSERT INTO reviews (trace_id, metric, reviewer, verdict, claims, reference, comment, reviewed_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (trace_id, metric, reviewer) DO UPDATE SET"
    " verdict = excluded.verdict, claims = excluded.claims, reference = excluded.reference,"
    " comment = excluded.comment, reviewed_at = excluded.reviewed_at WHERE excluded.reviewed_at > reviews.reviewed_at"
)


def _review_row(review: Review, reviewed_at: float) -> tuple[Any, ...]:
    """A review as the ``reviews`` table's columns, in their order."""
    claims = json.dumps([c.to_dict() for c in review.claims], ensure_ascii=False)
    return (
        review.trace_id,
        review.metric,
        review.reviewer,
        review.verdict,
        claims,
        review.reference,
        review.comment,
        reviewed_at,
    )


def _review_of_row(row: Sequence[Any]) -> Review:
    t, m, who, v, claims, ref, comment, at = row
    return Review(
        trace_id=t,
        metric=m,
        reviewer=who,
        verdict=v,
        claims=tuple(ClaimVerdict(c["statement"], c["verdict"]) for c in json.loads(claims or "[]")),
        reference=ref,
        comment=comment,
        reviewed_at=at,
    )


class LabelStore(Component):
    """Feedback and reviews in SQLite (WAL), beside the results store's tables; thread-safe."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except (OSError, sqlite3.OperationalError) as exc:  # the results store's one line, not a sqlite3 traceback
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StoreUnwritable(
                f"cannot write the results store at {self.path}: {cause} (is its directory writable? set data_dir"
                " or RAGTRACE_DATA_DIR, or export.results_path)"
            ) from exc

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                for statement in (s.strip() for s in _SCHEMA.split(";")):
                    if statement:
                        self._db.execute(statement)
                self._db.execute("COMMIT")
        except BaseException:
            self._db.close()
            raise
        return self._db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def shutdown(self, timeout: float | None = None) -> None:
        """The component contract: :meth:`close` (each write committed as made)."""
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the store's lock, rolled back on any error (``BEGIN IMMEDIATE``: a writer
        of another process waits for the lock here, not at the first write)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    # -- feedback -----------------------------------------------------------------------------
    def add_feedback(self, items: Iterable[Feedback], relay: bool = False) -> list[bool]:
        """Store each item in one transaction; ``True`` where it is new (a re-sent ``feedback_id`` is not).

        ``relay``: the new items also go into the outbox that :mod:`ragtrace_collector.review.feedback_relay`
        sends to the other hosts, in the same transaction (an item stored here is sent however the process ends).
        An item without a ``feedback_id`` (an API post without ``Idempotency-Key``) is then given one, so each copy
        of it is stored once everywhere, here too when it comes back."""
        now = time.time()
        added = []
        with self._transaction() as db:
            for f in items:
                feedback_id = f.feedback_id if f.feedback_id or not relay else f"relay:{uuid.uuid4().hex}"
                new = self._insert_feedback(f, feedback_id, now)
                if new and relay:
                    db.execute("INSERT INTO feedback_outbox (feedback_id) VALUES (?)", (feedback_id,))
                added.append(new)
        return added

    def _insert_feedback(self, f: Feedback, feedback_id: str | None, now: float) -> bool:
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO feedback (trace_id, name, value, comment, source, feedback_id, service,"
            " received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                f.trace_id,
                cut(f.name, MAX_NAME_CHARS),
                feedback_value(f.value),
                cut(f.comment, MAX_COMMENT_CHARS),
                f.source,
                feedback_id,
                f.service,
                f.received_at or now,
            ),
        )
        return cursor.rowcount == 1

    # -- the relay's side (review/feedback_relay.py) ----------------------------------------------
    def outbox(self, limit: int) -> list[tuple[int, Feedback]]:
        """The oldest ``limit`` items waiting to be sent to the other hosts, with their outbox positions."""
        with self._lock:
            rows = self._db.execute(
                "SELECT o.seq, f.trace_id, f.value, f.name, f.comment, f.source, f.feedback_id, f.service,"
                " f.received_at FROM feedback_outbox o JOIN feedback f ON f.feedback_id = o.feedback_id"
                " ORDER BY o.seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [(row[0], Feedback(*row[1:])) for row in rows]

    def outbox_sent(self, up_to: int) -> None:
        """Forget the outbox's items up to position ``up_to`` (sent)."""
        with self._lock:
            self._db.execute("DELETE FROM feedback_outbox WHERE seq <= ?", (up_to,))

    def review_outbox(self, limit: int) -> list[tuple[int, Review]]:
        """The oldest ``limit`` reviews waiting to be sent to the other hosts, as stored now (a reviewer's latest
        verdict), with their outbox positions."""
        with self._lock:
            rows = self._db.execute(
                "SELECT o.seq, r.trace_id, r.metric, r.reviewer, r.verdict, r.claims, r.reference, r.comment,"
                " r.reviewed_at FROM review_outbox o JOIN reviews r ON r.trace_id = o.trace_id"
                " AND r.metric = o.metric AND r.reviewer = o.reviewer ORDER BY o.seq LIMIT ?",
                (limit,),
            ).fetchall()
        return [(row[0], _review_of_row(row[1:])) for row in rows]

    def review_outbox_sent(self, up_to: int) -> None:
        """Forget the review outbox's entries up to position ``up_to`` (sent)."""
        with self._lock:
            self._db.execute("DELETE FROM review_outbox WHERE seq <= ?", (up_to,))

    def outbox_size(self) -> int:
        """Feedback and reviews stored here and not yet sent to the other hosts."""
        with self._lock:
            feedback = int(self._db.execute("SELECT COUNT(*) FROM feedback_outbox").fetchone()[0])
            reviews = int(self._db.execute("SELECT COUNT(*) FROM review_outbox").fetchone()[0])
        return feedback + reviews

    def relay_position(self, stream: str) -> str:
        """The id of the last entry of ``stream`` stored here (``0-0``: none yet, read it from its start)."""
        with self._lock:
            row = self._db.execute("SELECT last_id FROM feedback_relay WHERE stream = ?", (stream,)).fetchone()
        return str(row[0]) if row else "0-0"

    def add_relayed(
        self, items: Sequence[Feedback], stream: str, last_id: str, reviews: Sequence[Review] = ()
    ) -> tuple[list[bool], list[bool]]:
        """Store the feedback and reviews other hosts took (never sent on again) and the position read up to, in
        one transaction, so a restart neither skips nor repeats an entry; ``True`` where new here (a review: new, or
        later than the reviewer's verdict kept here, which it replaces: the latest verdict is the reviewer's)."""
        now = time.time()
        with self._transaction() as db:
            added = [self._insert_feedback(f, f.feedback_id, now) for f in items]
            taken = [db.execute(_UPSERT_LATER_REVIEW, _review_row(r, r.reviewed_at)).rowcount == 1 for r in reviews]
            db.execute("INSERT OR REPLACE INTO feedback_relay (stream, last_id) VALUES (?, ?)", (stream, last_id))
        return added, taken

    def feedback_of(self, trace_id: str) -> list[Feedback]:
        """A trace's feedback, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id, value, name, comment, source, feedback_id, service, received_at FROM feedback"
                " WHERE trace_id = ? ORDER BY received_at, id",
                (trace_id,),
            ).fetchall()
        return [Feedback(*row) for row in rows]

    def feedback_means(self, trace_ids: Sequence[str], name: str | None = None) -> dict[str, float]:
        """Each trace's mean feedback value (of ``name`` where given), for those that have any."""
        out: dict[str, float] = {}
        with self._lock:
            for start in range(0, len(trace_ids), 500):
                chunk = list(trace_ids[start : start + 500])
                sql = f"SELECT trace_id, AVG(value) FROM feedback WHERE trace_id IN ({', '.join('?' * len(chunk))})"
                params: list[Any] = list(chunk)
                if name is not None:
                    sql += " AND name = ?"
                    params.append(name)
                out.update({t: float(v) for t, v in self._db.execute(sql + " GROUP BY trace_id", params)})
        return out

    # -- reviews ------------------------------------------------------------------------------
    def add_review(self, review: Review, relay: bool = False) -> bool:
        """Store a review; ``True`` when new, ``False`` when it replaced the same reviewer's earlier verdict on
        this record's metric (the latest verdict is the reviewer's verdict).

        ``relay``: it also goes into the outbox that :mod:`ragtrace_collector.review.feedback_relay` sends to the
        other hosts, in the same transaction (scaled out: a review made on any explorer counts on all)."""
        with self._transaction() as db:
            existed = db.execute(
                "SELECT 1 FROM reviews WHERE trace_id = ? AND metric = ? AND reviewer = ?",
                (review.trace_id, review.metric, review.reviewer),
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO reviews (trace_id, metric, reviewer, verdict, claims, reference, comment,"
                " reviewed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                _review_row(review, review.reviewed_at or time.time()),
            )
            if relay:
                db.execute(
                    "INSERT INTO review_outbox (trace_id, metric, reviewer) VALUES (?, ?, ?)",
                    (review.trace_id, review.metric, review.reviewer),
                )
        return existed is None

    def reviews_of(self, trace_id: str) -> list[Review]:
        """A trace's reviews, by metric then reviewer."""
        return self._reviews("WHERE trace_id = ? ORDER BY metric, reviewer", (trace_id,))

    def reviews(self, metric: str | None = None, since: float | None = None) -> list[Review]:
        """Every review (of ``metric``, since ``since`` where given), oldest first."""
        clauses: list[str] = []
        params: list[Any] = []
        if metric is not None:
            clauses.append("metric = ?")
            params.append(metric)
        if since is not None:
            clauses.append("reviewed_at >= ?")
            params.append(since)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._reviews(where + " ORDER BY reviewed_at, trace_id", tuple(params))

    def reviewed_trace_ids(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT DISTINCT trace_id FROM reviews")}

    def _reviews(self, tail: str, params: tuple[Any, ...]) -> list[Review]:
        with self._lock:
            rows = self._db.execute(
                "SELECT trace_id, metric, reviewer, verdict, claims, reference, comment, reviewed_at FROM reviews "
                + tail,
                params,
            ).fetchall()
        return [_review_of_row(row) for row in rows]

    def counts(self) -> dict[str, int]:
        """How many feedback items and reviews are stored (the explorer's header; tests)."""
        with self._lock:
            feedback = int(self._db.execute("SELECT COUNT(*) FROM feedback").fetchone()[0])
            reviews = int(self._db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0])
        return {"feedback": feedback, "reviews": reviews}

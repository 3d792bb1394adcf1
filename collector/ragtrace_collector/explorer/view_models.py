"""What the explorer's pages and JSON API show, as frozen dataclasses, each with the one ``to_json`` the API sends.

Why dataclasses and not TypedDicts: Jinja2 reads an attribute and a key alike (``r.path`` either way, ``q["items"]``
falls back to the attribute), so the templates do not care; the Python side does. Frozen dataclasses are read by
attribute (mypy rejects a misspelt field), cannot be changed after they are built (the old dicts were filled in
place, far from where they were made), and keep the page's view apart from the public JSON document: the pages
need things the API leaves out (where each claim sits in the answer, agreement rows grouped by judge) and the API
adds things the pages do not (absolute URLs, ``next_offset``). Each ``to_json`` spells out its document's keys in
their order, so the API's shape is written in one place and a change to it is a visible diff here
(``tests/ragtrace_collector/explorer/test_view_snapshots.py`` holds it to the byte).

Built from stored records by :mod:`.views`; Mapping-typed fields (details, metadata, provenance) are the stored JSON
objects, passed through as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragtrace_collector.explorer.thresholds import Side
from ragtrace_collector.model.result import ClaimKind
from ragtrace_collector.review.agreement import Agreement
from ragtrace_collector.review.labels import ClaimVerdict, Source, Verdict
from ragtrace_collector.review.queue import Reason


@dataclass(frozen=True)
class Backlog:
    """Records received and not scored yet, and why scoring is paused (the judge's outage), if it is: what a
    user looking at an empty or stale list needs to know."""

    waiting: int
    judge_unavailable: str | None = None


@dataclass(frozen=True)
class ScoreView:
    """One metric's outcome, with the alert threshold and the side of it the score is on (a score chip)."""

    metric: str
    status: str
    score: float | None
    reason: str | None
    label: str | None
    higher_is_better: bool
    judge: str | None
    threshold: float | None
    side: Side | None  # None: not scored, or no threshold for this metric

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "status": self.status,
            "score": self.score,
            "reason": self.reason,
            "label": self.label,
            "higher_is_better": self.higher_is_better,
            "judge": self.judge,
            "threshold": self.threshold,
            "side": self.side,
        }


@dataclass(frozen=True)
class MetricView(ScoreView):
    """A score on the record page: the chip's fields, the metric's details and how it was scored."""

    details: dict[str, Any]
    provenance: dict[str, Any]  # judge model, metric version, prompt hash, ragtrace version (empty ones left out)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "details": self.details, "provenance": self.provenance}


@dataclass(frozen=True)
class RecordRow:
    """A record as a row of the list, of a session, and of ``GET /api/v1/records``; ``metric``, ``score`` and
    ``status`` are the score column's (the chosen metric's, else the worst 0–1 score)."""

    trace_id: str | None
    record_key: str
    service: str | None
    pipeline: str | None
    session_id: str | None
    user_id: str | None
    judge: str | None
    model: str | None
    error: str | None
    time: float  # the request's start where known, else when it was stored
    time_iso: str | None
    stored_at: float
    stored_at_iso: str | None
    question: str | None
    answer: str | None
    metric: str | None
    score: float | None
    status: str | None
    scores: tuple[ScoreView, ...]
    path: str  # the record page, under the explorer

    def to_json(self, origin: str | None = None) -> dict[str, Any]:
        """The JSON object; with ``origin`` (``http://host:port``) the page's absolute ``url`` last."""
        doc = self._fields_json()
        if origin is not None:
            doc["url"] = origin + self.path
        return doc

    def _fields_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "record_key": self.record_key,
            "service": self.service,
            "pipeline": self.pipeline,
            "session_id": self.session_id,
            "user_id": self.user_id,
            "judge": self.judge,
            "model": self.model,
            "error": self.error,
            "time": self.time,
            "time_iso": self.time_iso,
            "stored_at": self.stored_at,
            "stored_at_iso": self.stored_at_iso,
            "question": self.question,
            "answer": self.answer,
            "metric": self.metric,
            "score": self.score,
            "status": self.status,
            "scores": [s.to_json() for s in self.scores],
            "path": self.path,
        }


@dataclass(frozen=True)
class ClaimView:
    """One claim of the answer with its verdict (``kind`` in words), the contexts holding its evidence and
    whether it was found verbatim in the answer (else it is listed below the answer only)."""

    index: int  # 1-based, the page's ``#claim-N``
    statement: str
    verdict: str
    kind: ClaimKind
    supported: bool  # counted as supported by the metric (``idk`` too where the metric says so)
    reason: str | None
    evidence: str | None
    confidence: float | None
    contexts: tuple[int, ...]  # ranks of the contexts holding its evidence
    in_answer: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "statement": self.statement,
            "verdict": self.verdict,
            "kind": self.kind,
            "supported": self.supported,
            "reason": self.reason,
            "evidence": self.evidence,
            "confidence": self.confidence,
            "contexts": list(self.contexts),
            "in_answer": self.in_answer,
        }


@dataclass(frozen=True)
class AnswerSegment:
    """A piece of the answer: plain text (``claim`` None) or a claim, highlighted by its verdict. Page only."""

    text: str
    claim: int | None = None  # the claim's index
    verdict: str | None = None
    kind: ClaimKind | None = None


@dataclass(frozen=True)
class ContextView:
    """A retrieved context in rank order: retrieval score, usefulness (context precision) and the claims whose
    evidence it holds (and, of those, the ones it supports)."""

    rank: int
    id: str | None  # the retriever's
    content: str
    score: float | None  # the retriever's
    useful: bool | None
    supports: tuple[int, ...]
    evidence_for: tuple[int, ...]
    metadata: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "id": self.id,
            "content": self.content,
            "score": self.score,
            "useful": self.useful,
            "supports": list(self.supports),
            "evidence_for": list(self.evidence_for),
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class TraceLink:
    name: str
    url: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url}


@dataclass(frozen=True)
class ReviewView:
    """A reviewer's verdict as the record page lists it (a :class:`~ragtrace_collector.review.labels.Review`'s
    fields, its human label ``unfaithful``, and when, in words)."""

    trace_id: str
    metric: str
    reviewer: str
    verdict: Verdict | None
    claims: tuple[ClaimVerdict, ...]
    reference: str | None
    comment: str | None
    reviewed_at: float
    unfaithful: bool | None
    reviewed_at_iso: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "metric": self.metric,
            "reviewer": self.reviewer,
            "verdict": self.verdict,
            "claims": [c.to_dict() for c in self.claims],
            "reference": self.reference,
            "comment": self.comment,
            "reviewed_at": self.reviewed_at,
            "unfaithful": self.unfaithful,
            "reviewed_at_iso": self.reviewed_at_iso,
        }


@dataclass(frozen=True)
class FeedbackView:
    """One end-user signal as the record page lists it (a :class:`~ragtrace_collector.review.labels.Feedback`'s
    fields and when, in words)."""

    trace_id: str
    value: float
    name: str
    comment: str | None
    source: Source
    feedback_id: str | None
    service: str | None
    received_at: float
    received_at_iso: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "value": self.value,
            "name": self.name,
            "comment": self.comment,
            "source": self.source,
            "feedback_id": self.feedback_id,
            "service": self.service,
            "received_at": self.received_at,
            "received_at_iso": self.received_at_iso,
        }


@dataclass(frozen=True)
class RecordDetailView(RecordRow):
    """Everything the record page shows (and ``GET /api/v1/records/{trace_id}`` returns): the list row's fields
    (``model`` falling back to the record's own), the record, its scores with their provenance, and what people
    said of it."""

    started_at: float | None
    started_at_iso: str | None
    reference: str | None
    provider: str | None
    input_tokens: int | None
    output_tokens: int | None
    streamed: bool | None
    tags: tuple[str, ...]
    latency: dict[str, float | None]  # by field name, in the order of views.LATENCY_FIELDS
    contexts: tuple[ContextView, ...]
    contexts_stored: bool  # False for records stored before contexts were kept
    claims: tuple[ClaimView, ...]
    answer_segments: tuple[AnswerSegment, ...]  # a page layout detail: the API leaves it out (claims say as much)
    metrics: tuple[MetricView, ...]
    reviews: tuple[ReviewView, ...]
    feedback: tuple[FeedbackView, ...]
    feedback_mean: float | None
    trace_links: tuple[TraceLink, ...]
    session_path: str | None

    def _fields_json(self) -> dict[str, Any]:
        return {
            **super()._fields_json(),
            "started_at": self.started_at,
            "started_at_iso": self.started_at_iso,
            "reference": self.reference,
            "provider": self.provider,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "streamed": self.streamed,
            "tags": list(self.tags),
            "latency": self.latency,
            "contexts": [c.to_json() for c in self.contexts],
            "contexts_stored": self.contexts_stored,
            "claims": [c.to_json() for c in self.claims],
            "metrics": [m.to_json() for m in self.metrics],
            "reviews": [r.to_json() for r in self.reviews],
            "feedback": [f.to_json() for f in self.feedback],
            "feedback_mean": self.feedback_mean,
            "trace_links": [link.to_json() for link in self.trace_links],
            "session_path": self.session_path,
        }


@dataclass(frozen=True)
class RecordListView:
    """One page of the records list: the rows, how many match, the filters' values and the scoring backlog."""

    total: int
    offset: int
    limit: int
    records: tuple[RecordRow, ...]
    facets: dict[str, list[str]]  # services, pipelines, metrics, judges: what the filters offer
    backlog: Backlog | None  # None: the explorer alone, or a queue that cannot say

    @property
    def next_offset(self) -> int | None:
        end = self.offset + len(self.records)
        return end if end < self.total else None

    def to_json(self, origin: str) -> dict[str, Any]:
        """``GET /api/v1/records`` (facets have their own endpoint)."""
        return {
            "total": self.total,
            "offset": self.offset,
            "limit": self.limit,
            "next_offset": self.next_offset,
            "records": [r.to_json(origin) for r in self.records],
            "waiting": self.backlog.waiting if self.backlog is not None else None,
            "judge_unavailable": self.backlog.judge_unavailable if self.backlog is not None else None,
        }


@dataclass(frozen=True)
class SessionView:
    """A conversation's turns, oldest first."""

    session_id: str
    turns: tuple[RecordRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "turns": [t.to_json() for t in self.turns]}


@dataclass(frozen=True)
class QueueItemView:
    """A record offered for review, and why (a :class:`~ragtrace_collector.review.queue.QueueItem`'s fields but
    its sort key, and the record page's path)."""

    trace_id: str
    record_key: str
    reason: Reason
    metric: str
    score: float
    higher_is_better: bool
    threshold: float
    side: Side
    judge: str | None
    service: str | None
    pipeline: str | None
    question: str | None
    feedback: float | None
    in_sample: bool
    path: str

    def to_json(self, origin: str) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "record_key": self.record_key,
            "reason": self.reason,
            "metric": self.metric,
            "score": self.score,
            "higher_is_better": self.higher_is_better,
            "threshold": self.threshold,
            "side": self.side,
            "judge": self.judge,
            "service": self.service,
            "pipeline": self.pipeline,
            "question": self.question,
            "feedback": self.feedback,
            "in_sample": self.in_sample,
            "path": self.path,
            "url": origin + self.path,
        }


@dataclass(frozen=True)
class ReviewQueueView:
    """The review queue of one metric: counts by reason and the first pending records (of ``reason``, where
    given); ``sample_rate`` the share of records in the random sample."""

    metric: str
    pending: int
    reviewed: int
    by_reason: dict[Reason, int]
    items: tuple[QueueItemView, ...]
    reason: Reason | None
    sample_rate: float

    def to_json(self, origin: str) -> dict[str, Any]:
        """``GET /api/v1/review/queue``."""
        return {
            "metric": self.metric,
            "pending": self.pending,
            "reviewed": self.reviewed,
            "by_reason": dict(self.by_reason),
            "items": [i.to_json(origin) for i in self.items],
            "reason": self.reason,
            "sample_rate": self.sample_rate,
        }


@dataclass(frozen=True)
class AgreementGroup:
    """One (metric, judge) of the agreement page, both populations side by side. Page only."""

    metric: str
    judge: str
    sample: Agreement
    all: Agreement


@dataclass(frozen=True)
class AgreementView:
    """Judge vs reviewers: the report's rows (most reviewed first), what was left out and why, over the reviews
    of the last ``window_days``; ``groups`` the same rows by (metric, judge), for the page."""

    computed_at: float
    since: float
    sample_rate: float
    labelled: int
    ties: int
    unjudged: int
    agreement: tuple[Agreement, ...]
    computed_at_iso: str | None
    since_iso: str | None
    groups: tuple[AgreementGroup, ...]
    window_days: float

    def to_json(self) -> dict[str, Any]:
        """``GET /api/v1/agreement``."""
        return {
            "computed_at": self.computed_at,
            "since": self.since,
            "sample_rate": self.sample_rate,
            "labelled": self.labelled,
            "ties": self.ties,
            "unjudged": self.unjudged,
            "agreement": [row.to_dict() for row in self.agreement],
            "computed_at_iso": self.computed_at_iso,
            "since_iso": self.since_iso,
            "window_days": self.window_days,
        }

"""Stored records as what the pages and the JSON API show: the view models of :mod:`.view_models`, built here.

A record page needs more than the stored rows say directly: which part of the answer each claim is (to
highlight it by its verdict), which retrieved context supports each claim (its evidence quote found in
the context), whether each context was useful (context precision's per-rank verdicts), and for every
score which side of the alert threshold it is on.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from ragtrace_collector.explorer.thresholds import Side, Thresholds
from ragtrace_collector.explorer.view_models import (
    AgreementGroup,
    AgreementView,
    AnswerSegment,
    Backlog,
    ClaimView,
    ContextView,
    FeedbackView,
    MetricView,
    QueueItemView,
    RecordDetailView,
    RecordListView,
    RecordRow,
    ReviewQueueView,
    ReviewView,
    ScoreView,
    SessionView,
    TraceLink,
)
from ragtrace_collector.model.result import ChunkUsefulness, ClaimVerdicts
from ragtrace_collector.review.agreement import Agreement, AgreementReport, Population
from ragtrace_collector.review.labels import Feedback, Review
from ragtrace_collector.review.queue import REASONS, QueueItem, Reason, ReviewQueue
from ragtrace_collector.scoring.results_store import RecordPage, RecordQuery, StoredRecord, StoredResult

EXPLORER_PATH = "/explorer/"  # the records list; the demo prints it first
CLAIM_METRICS = ("faithfulness", "hallucination")  # whose details carry the answer's claims and verdicts
LATENCY_FIELDS = (
    ("ttft_seconds", "time to first token"),
    ("tpot_seconds", "time per output token"),
    ("request_duration_seconds", "request"),
    ("retrieval_duration_seconds", "retrieval"),
    ("generation_duration_seconds", "generation"),
)


def iso(ts: float | None) -> str | None:
    """Unix seconds → ``2025-01-02T03:04:05Z`` (UTC)."""
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def record_path(record: StoredRecord) -> str:
    return f"{EXPLORER_PATH}records/{urllib.parse.quote(record.trace_id or record.record_key, safe='')}"


def session_path(session_id: str) -> str:
    return f"{EXPLORER_PATH}sessions/{urllib.parse.quote(session_id, safe='')}"


def _threshold(result: StoredResult, pipeline: str | None, thresholds: Thresholds) -> tuple[float | None, Side | None]:
    """The metric's alert threshold for the pipeline, and the side of it the score is on (None: not scored, or no
    threshold for this metric)."""
    threshold = thresholds.get(result.metric, pipeline)
    if threshold is None:
        return None, None
    if result.status == "scored" and result.score is not None:
        return threshold.value, threshold.side(result.score)
    return threshold.value, None


def score_view(result: StoredResult, pipeline: str | None, thresholds: Thresholds) -> ScoreView:
    """One metric's outcome, with the alert threshold and the side of it the score is on (a score chip)."""
    threshold, side = _threshold(result, pipeline, thresholds)
    return ScoreView(
        metric=result.metric,
        status=result.status,
        score=result.score,
        reason=result.reason,
        label=result.label,
        higher_is_better=result.higher_is_better,
        judge=result.judge,
        threshold=threshold,
        side=side,
    )


def metric_view(result: StoredResult, pipeline: str | None, thresholds: Thresholds) -> MetricView:
    """A score on the record page: its chip's fields (:func:`score_view`), details and provenance."""
    chip = score_view(result, pipeline, thresholds)
    return MetricView(
        **{f.name: getattr(chip, f.name) for f in fields(ScoreView)},
        details=result.details,
        provenance=provenance_of(result),
    )


def worst_score(record: StoredRecord, metric: str | None) -> StoredResult | None:
    """The list's score column: ``metric``'s result, else the record's worst 0–1 scored result."""
    if metric is not None:
        return next((r for r in record.results if r.metric == metric), None)
    scored = [r for r in record.results if r.status == "scored" and r.score is not None and 0.0 <= r.score <= 1.0]

    def badness(r: StoredResult) -> float:
        assert r.score is not None
        return r.score if r.higher_is_better else 1.0 - r.score

    return min(scored, key=badness, default=None)


def summary_view(record: StoredRecord, thresholds: Thresholds, metric: str | None = None) -> RecordRow:
    """A record as a row of the list (and of ``GET /api/v1/records``)."""
    shown = worst_score(record, metric)
    return RecordRow(
        trace_id=record.trace_id,
        record_key=record.record_key,
        service=record.service,
        pipeline=record.pipeline,
        session_id=record.session_id,
        user_id=record.user_id,
        judge=record.judge,
        model=record.model,
        error=record.error,
        time=record.occurred_at,
        time_iso=iso(record.occurred_at),
        stored_at=record.scored_at,
        stored_at_iso=iso(record.scored_at),
        question=record.user_input,
        answer=record.response,
        metric=shown.metric if shown is not None else None,
        score=shown.score if shown is not None else None,
        status=shown.status if shown is not None else None,
        scores=tuple(score_view(r, record.pipeline, thresholds) for r in record.results),
        path=record_path(record),
    )


def list_view(
    page: RecordPage, query: RecordQuery, thresholds: Thresholds, facets: dict[str, list[str]], backlog: Backlog | None
) -> RecordListView:
    """One page of the list: its records as rows, their score column the query's metric's where it names one."""
    rows = tuple(summary_view(r, thresholds, query.metric) for r in page.records)
    return RecordListView(page.total, query.offset, query.limit, rows, facets, backlog)


def session_view(session_id: str, turns: Sequence[StoredRecord], thresholds: Thresholds) -> SessionView:
    return SessionView(session_id, tuple(summary_view(r, thresholds) for r in turns))


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def claims_of(record: StoredRecord) -> tuple[ClaimView, ...]:
    """The answer's claims with their verdicts, from faithfulness (else hallucination) details read through
    :class:`~ragtrace_collector.model.result.ClaimVerdicts`; ``kind`` says which verdict in words the page can
    show (supported, contradicted, not_found, or unsupported for a ``no`` that does not say which). Their
    contexts and place in the answer are not known yet (see :func:`detail_view`)."""
    by_metric = {r.metric: r for r in record.results}
    for name in CLAIM_METRICS:
        result = by_metric.get(name)
        typed = ClaimVerdicts.from_details(result.details) if result is not None else None
        if typed is None or not typed.claims:
            continue
        out: list[ClaimView] = []
        for i, stored in enumerate(typed.claims):
            claim = stored if stored.verdict else replace(stored, verdict="idk")
            out.append(
                ClaimView(
                    index=i + 1,
                    statement=claim.statement,
                    verdict=str(claim.verdict),
                    kind=claim.kind,
                    supported=typed.supported(claim),
                    reason=claim.reason,
                    evidence=claim.evidence,
                    confidence=claim.confidence,
                    contexts=(),
                    in_answer=False,
                )
            )
        return tuple(out)
    return ()


def answer_segments(answer: str, claims: Sequence[ClaimView]) -> tuple[AnswerSegment, ...]:
    """The answer cut into plain text and claims (``claim``: its index), each claim found in order, so the
    page can highlight each by its verdict; claims not found verbatim stay listed below the answer only."""
    segments: list[AnswerSegment] = []
    cursor = 0
    for claim in claims:
        statement = claim.statement.strip()
        if not statement:
            continue
        at = answer.find(statement, cursor)
        if at < 0:  # rephrased by the judge, or overlapping an earlier claim
            continue
        if at > cursor:
            segments.append(AnswerSegment(answer[cursor:at]))
        segments.append(AnswerSegment(statement, claim.index, claim.verdict, claim.kind))
        cursor = at + len(statement)
    if cursor < len(answer):
        segments.append(AnswerSegment(answer[cursor:]))
    return tuple(segments)


def contexts_of(record: StoredRecord, claims: Sequence[ClaimView]) -> tuple[ContextView, ...]:
    """The retrieved contexts in rank order: retrieval score, usefulness (context precision) and the claims
    whose evidence each holds (and, of those, the ones it supports)."""
    raw = record.record.get("retrieved_contexts") or []
    precision = next((r for r in record.results if r.metric == "context_precision" and r.status == "scored"), None)
    useful = ChunkUsefulness.from_details(precision.details) if precision is not None else None
    contexts: list[ContextView] = []
    for rank, ctx in enumerate((c for c in raw if isinstance(c, dict)), start=1):
        content = str(ctx.get("content", ""))
        squashed = _squash(content)
        holds = tuple(
            claim.index
            for claim in claims
            if isinstance(claim.evidence, str) and claim.evidence.strip() and _squash(claim.evidence) in squashed
        )
        contexts.append(
            ContextView(
                rank=rank,
                id=ctx.get("id"),
                content=content,
                score=ctx.get("score"),
                useful=useful.at_rank(rank) if useful is not None else None,
                supports=tuple(i for i in holds if claims[i - 1].supported),
                evidence_for=holds,
                metadata=ctx.get("metadata") or {},
            )
        )
    return tuple(contexts)


def placed(
    claims: Sequence[ClaimView], segments: Sequence[AnswerSegment], contexts: Sequence[ContextView]
) -> tuple[ClaimView, ...]:
    """The claims with the contexts holding their evidence (in rank order) and whether the answer holds them."""
    in_answer = {s.claim for s in segments if s.claim is not None}
    return tuple(
        replace(
            c,
            contexts=tuple(ctx.rank for ctx in contexts if c.index in ctx.evidence_for),
            in_answer=c.index in in_answer,
        )
        for c in claims
    )


def trace_links(record: StoredRecord, templates: Mapping[str, str]) -> tuple[TraceLink, ...]:
    """The configured trace links (``{trace_id}`` replaced) for a record with a trace id."""
    if not record.trace_id:
        return ()
    quoted = urllib.parse.quote(record.trace_id, safe="")
    return tuple(TraceLink(name, template.replace("{trace_id}", quoted)) for name, template in templates.items())


def review_id(record: StoredRecord) -> str:
    """The id reviews and feedback are kept by: the trace id, or the record key of a record without one."""
    return record.trace_id or record.record_key


def provenance_of(result: StoredResult) -> dict[str, Any]:
    """How the score was made (judge model, metric version, prompt hash, ragtrace version), where the store kept it."""
    return {k: v for k, v in (result.provenance or {}).items() if v not in (None, "")}


def review_view(review: Review) -> ReviewView:
    return ReviewView(
        trace_id=review.trace_id,
        metric=review.metric,
        reviewer=review.reviewer,
        verdict=review.verdict,
        claims=review.claims,
        reference=review.reference,
        comment=review.comment,
        reviewed_at=review.reviewed_at,
        unfaithful=review.unfaithful,
        reviewed_at_iso=iso(review.reviewed_at),
    )


def feedback_view(item: Feedback) -> FeedbackView:
    return FeedbackView(
        trace_id=item.trace_id,
        value=item.value,
        name=item.name,
        comment=item.comment,
        source=item.source,
        feedback_id=item.feedback_id,
        service=item.service,
        received_at=item.received_at,
        received_at_iso=iso(item.received_at),
    )


def detail_view(
    record: StoredRecord,
    thresholds: Thresholds,
    link_templates: Mapping[str, str],
    reviews: Sequence[Review] = (),
    feedback: Sequence[Feedback] = (),
) -> RecordDetailView:
    """Everything the record page shows (and ``GET /api/v1/records/{trace_id}`` returns): the record, its scores
    with their provenance, and what people said of it (reviews, end-user feedback)."""
    data = record.record
    found = claims_of(record)
    segments = answer_segments(record.response or "", found)
    contexts = contexts_of(record, found)
    shown = worst_score(record, None)
    return RecordDetailView(
        trace_id=record.trace_id,
        record_key=record.record_key,
        service=record.service,
        pipeline=record.pipeline,
        session_id=record.session_id,
        user_id=record.user_id,
        judge=record.judge,
        model=record.model or data.get("model"),
        error=record.error,
        time=record.occurred_at,
        time_iso=iso(record.occurred_at),
        stored_at=record.scored_at,
        stored_at_iso=iso(record.scored_at),
        question=record.user_input,
        answer=record.response,
        metric=shown.metric if shown is not None else None,
        score=shown.score if shown is not None else None,
        status=shown.status if shown is not None else None,
        scores=tuple(score_view(r, record.pipeline, thresholds) for r in record.results),
        path=record_path(record),
        started_at=record.started_at,
        started_at_iso=iso(record.started_at),
        reference=data.get("reference"),
        provider=data.get("provider"),
        input_tokens=data.get("input_tokens"),
        output_tokens=data.get("output_tokens"),
        streamed=data.get("streamed"),
        tags=tuple(data.get("tags") or ()),
        latency={name: data.get(name) for name, _ in LATENCY_FIELDS},
        contexts=contexts,
        contexts_stored="retrieved_contexts" in data,
        claims=placed(found, segments, contexts),
        answer_segments=segments,
        metrics=tuple(metric_view(r, record.pipeline, thresholds) for r in record.results),
        reviews=tuple(review_view(r) for r in reviews),
        feedback=tuple(feedback_view(f) for f in feedback),
        feedback_mean=sum(f.value for f in feedback) / len(feedback) if feedback else None,
        trace_links=trace_links(record, link_templates),
        session_path=session_path(record.session_id) if record.session_id else None,
    )


def queue_item_view(item: QueueItem) -> QueueItemView:
    return QueueItemView(
        trace_id=item.trace_id,
        record_key=item.record_key,
        reason=item.reason,
        metric=item.metric,
        score=item.score,
        higher_is_better=item.higher_is_better,
        threshold=item.threshold,
        side=item.side,
        judge=item.judge,
        service=item.service,
        pipeline=item.pipeline,
        question=item.question,
        feedback=item.feedback,
        in_sample=item.in_sample,
        path=f"{EXPLORER_PATH}records/{urllib.parse.quote(item.trace_id, safe='')}",
    )


def queue_view(queue: ReviewQueue, limit: int, reason: Reason | None, sample_rate: float) -> ReviewQueueView:
    """The review queue of one metric: counts by reason and the first ``limit`` pending records (of ``reason``)."""
    by_reason: dict[Reason, int] = {r: 0 for r in REASONS}
    for item in queue.pending:
        by_reason[item.reason] += 1
    shown = [i for i in queue.pending if reason is None or i.reason == reason][:limit]
    return ReviewQueueView(
        metric=queue.metric,
        pending=len(queue.pending),
        reviewed=queue.reviewed,
        by_reason=by_reason,
        items=tuple(queue_item_view(i) for i in shown),
        reason=reason,
        sample_rate=sample_rate,
    )


def agreement_view(report: AgreementReport, window_days: float) -> AgreementView:
    """The agreement report, rows grouped by (metric, judge) with both populations side by side."""
    by_pair: dict[tuple[str, str], dict[Population, Agreement]] = {}
    for row in report.rows:
        by_pair.setdefault((row.metric, row.judge), {})[row.population] = row
    return AgreementView(
        computed_at=report.computed_at,
        since=report.since,
        sample_rate=report.sample_rate,
        labelled=report.labelled,
        ties=report.ties,
        unjudged=report.unjudged,
        agreement=tuple(report.rows),
        computed_at_iso=iso(report.computed_at),
        since_iso=iso(report.since),
        groups=tuple(AgreementGroup(m, j, rows["sample"], rows["all"]) for (m, j), rows in by_pair.items()),
        window_days=window_days,
    )

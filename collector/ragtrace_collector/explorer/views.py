"""Stored records as what the pages and the JSON API show: one set of plain dicts for both.

A record page needs more than the stored rows say directly: which part of the answer each claim is (to
highlight it by its verdict), which retrieved context supports each claim (its evidence quote found in
the context), whether each context was useful (context precision's per-rank verdicts), and for every
score which side of the alert threshold it is on.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ragtrace_collector.explorer.thresholds import Thresholds
from ragtrace_collector.model.result import ChunkUsefulness, ClaimVerdicts
from ragtrace_collector.review.agreement import AgreementReport
from ragtrace_collector.review.labels import Feedback, Review
from ragtrace_collector.review.queue import REASONS, ReviewQueue
from ragtrace_collector.scoring.results_store import StoredRecord, StoredResult

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


def score_view(result: StoredResult, pipeline: str | None, thresholds: Thresholds) -> dict[str, Any]:
    """One metric's outcome, with the alert threshold and the side of it the score is on."""
    threshold = thresholds.get(result.metric, pipeline)
    side = None
    if result.status == "scored" and result.score is not None and threshold is not None:
        side = threshold.side(result.score)
    return {
        "metric": result.metric,
        "status": result.status,
        "score": result.score,
        "reason": result.reason,
        "label": result.label,
        "higher_is_better": result.higher_is_better,
        "judge": result.judge,
        "threshold": threshold.value if threshold is not None else None,
        "side": side,  # "good", "bad", or None (not scored, or no threshold for this metric)
    }


def worst_score(record: StoredRecord, metric: str | None) -> StoredResult | None:
    """The list's score column: ``metric``'s result, else the record's worst 0–1 scored result."""
    if metric is not None:
        return next((r for r in record.results if r.metric == metric), None)
    scored = [r for r in record.results if r.status == "scored" and r.score is not None and 0.0 <= r.score <= 1.0]

    def badness(r: StoredResult) -> float:
        assert r.score is not None
        return r.score if r.higher_is_better else 1.0 - r.score

    return min(scored, key=badness, default=None)


def summary_view(record: StoredRecord, thresholds: Thresholds, metric: str | None = None) -> dict[str, Any]:
    """A record as a row of the list (and of ``GET /api/v1/records``)."""
    shown = worst_score(record, metric)
    return {
        "trace_id": record.trace_id,
        "record_key": record.record_key,
        "service": record.service,
        "pipeline": record.pipeline,
        "session_id": record.session_id,
        "user_id": record.user_id,
        "judge": record.judge,
        "model": record.model,
        "error": record.error,
        "time": record.occurred_at,  # the request's start where known, else when it was stored
        "time_iso": iso(record.occurred_at),
        "stored_at": record.scored_at,
        "stored_at_iso": iso(record.scored_at),
        "question": record.user_input,
        "answer": record.response,
        "metric": shown.metric if shown is not None else None,
        "score": shown.score if shown is not None else None,
        "status": shown.status if shown is not None else None,
        "scores": [score_view(r, record.pipeline, thresholds) for r in record.results],
        "path": record_path(record),
    }


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def claims_of(record: StoredRecord) -> list[dict[str, Any]]:
    """The answer's claims with their verdicts, from faithfulness (else hallucination) details read through
    :class:`~ragtrace_collector.model.result.ClaimVerdicts`; ``kind`` says which verdict in words the page can
    show (supported, contradicted, not_found, or unsupported for a ``no`` that does not say which)."""
    by_metric = {r.metric: r for r in record.results}
    for name in CLAIM_METRICS:
        result = by_metric.get(name)
        typed = ClaimVerdicts.from_details(result.details) if result is not None else None
        if typed is None or not typed.claims:
            continue
        out: list[dict[str, Any]] = []
        for i, stored in enumerate(typed.claims):
            claim = stored if stored.verdict else replace(stored, verdict="idk")
            out.append(
                {
                    "index": i + 1,
                    "statement": claim.statement,
                    "verdict": claim.verdict,
                    "kind": claim.kind,
                    "supported": typed.supported(claim),
                    "reason": claim.reason,
                    "evidence": claim.evidence,
                    "confidence": claim.confidence,
                    "contexts": [],  # ranks of the contexts holding its evidence (filled below)
                    "in_answer": False,
                }
            )
        return out
    return []


def answer_segments(answer: str, claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer cut into plain text and claims (``claim``: its index), each claim found in order, so the
    page can highlight each by its verdict; claims not found verbatim stay listed below the answer only."""
    segments: list[dict[str, Any]] = []
    cursor = 0
    for claim in claims:
        statement = claim["statement"].strip()
        if not statement:
            continue
        at = answer.find(statement, cursor)
        if at < 0:  # rephrased by the judge, or overlapping an earlier claim
            continue
        if at > cursor:
            segments.append({"text": answer[cursor:at], "claim": None})
        segments.append(
            {"text": statement, "claim": claim["index"], "verdict": claim["verdict"], "kind": claim["kind"]}
        )
        claim["in_answer"] = True
        cursor = at + len(statement)
    if cursor < len(answer):
        segments.append({"text": answer[cursor:], "claim": None})
    return segments


def contexts_of(record: StoredRecord, claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The retrieved contexts in rank order: retrieval score, usefulness (context precision) and the claims
    whose evidence each holds (and, of those, the ones it supports)."""
    raw = record.record.get("retrieved_contexts") or []
    precision = next((r for r in record.results if r.metric == "context_precision" and r.status == "scored"), None)
    useful = ChunkUsefulness.from_details(precision.details) if precision is not None else None
    contexts = []
    for rank, ctx in enumerate((c for c in raw if isinstance(c, dict)), start=1):
        content = str(ctx.get("content", ""))
        squashed = _squash(content)
        holds = []
        for claim in claims:
            evidence = claim.get("evidence")
            if isinstance(evidence, str) and evidence.strip() and _squash(evidence) in squashed:
                claim["contexts"].append(rank)
                holds.append(claim["index"])
        flag = useful.at_rank(rank) if useful is not None else None
        contexts.append(
            {
                "rank": rank,
                "id": ctx.get("id"),
                "content": content,
                "score": ctx.get("score"),
                "useful": flag,
                "supports": [i for i in holds if claims[i - 1]["supported"]],
                "evidence_for": holds,
                "metadata": ctx.get("metadata") or {},
            }
        )
    return contexts


def trace_links(record: StoredRecord, templates: dict[str, str]) -> list[dict[str, str]]:
    """The configured trace links (``{trace_id}`` replaced) for a record with a trace id."""
    if not record.trace_id:
        return []
    quoted = urllib.parse.quote(record.trace_id, safe="")
    return [{"name": name, "url": template.replace("{trace_id}", quoted)} for name, template in templates.items()]


def review_id(record: StoredRecord) -> str:
    """The id reviews and feedback are kept by: the trace id, or the record key of a record without one."""
    return record.trace_id or record.record_key


def provenance_of(result: StoredResult) -> dict[str, Any]:
    """How the score was made (judge model, metric version, prompt hash, ragtrace version), where the store kept it."""
    return {k: v for k, v in (result.provenance or {}).items() if v not in (None, "")}


def review_view(review: Review) -> dict[str, Any]:
    return {**review.to_dict(), "reviewed_at_iso": iso(review.reviewed_at)}


def feedback_view(item: Feedback) -> dict[str, Any]:
    return {**item.to_dict(), "received_at_iso": iso(item.received_at)}


def detail_view(
    record: StoredRecord,
    thresholds: Thresholds,
    link_templates: dict[str, str],
    reviews: Sequence[Review] = (),
    feedback: Sequence[Feedback] = (),
) -> dict[str, Any]:
    """Everything the record page shows (and ``GET /api/v1/records/{trace_id}`` returns): the record, its scores
    with their provenance, and what people said of it (reviews, end-user feedback)."""
    data = record.record
    claims = claims_of(record)
    answer = record.response or ""
    segments = answer_segments(answer, claims)
    contexts = contexts_of(record, claims)
    view = summary_view(record, thresholds)
    view.update(
        {
            "started_at": record.started_at,
            "started_at_iso": iso(record.started_at),
            "reference": data.get("reference"),
            "provider": data.get("provider"),
            "model": record.model or data.get("model"),
            "input_tokens": data.get("input_tokens"),
            "output_tokens": data.get("output_tokens"),
            "streamed": data.get("streamed"),
            "tags": data.get("tags") or [],
            "latency": {name: data.get(name) for name, _ in LATENCY_FIELDS},
            "contexts": contexts,
            "contexts_stored": "retrieved_contexts" in data,  # False for records stored before contexts were kept
            "claims": claims,
            "answer_segments": segments,
            "metrics": [
                {**score_view(r, record.pipeline, thresholds), "details": r.details, "provenance": provenance_of(r)}
                for r in record.results
            ],
            "reviews": [review_view(r) for r in reviews],
            "feedback": [feedback_view(f) for f in feedback],
            "feedback_mean": sum(f.value for f in feedback) / len(feedback) if feedback else None,
            "trace_links": trace_links(record, link_templates),
            "session_path": session_path(record.session_id) if record.session_id else None,
        }
    )
    return view


def queue_view(queue: ReviewQueue, limit: int, reason: str | None = None) -> dict[str, Any]:
    """The review queue of one metric: counts by reason and the first ``limit`` pending records (of ``reason``)."""
    by_reason = {r: 0 for r in REASONS}
    for item in queue.pending:
        by_reason[item.reason] += 1
    shown = [i for i in queue.pending if reason is None or i.reason == reason][:limit]
    return {
        "metric": queue.metric,
        "pending": len(queue.pending),
        "reviewed": queue.reviewed,
        "by_reason": by_reason,
        "items": [
            {**item.to_dict(), "path": f"{EXPLORER_PATH}records/{urllib.parse.quote(item.trace_id, safe='')}"}
            for item in shown
        ],
    }


def agreement_view(report: AgreementReport) -> dict[str, Any]:
    """The agreement report, rows grouped by (metric, judge) with both populations side by side."""
    data = report.to_dict()
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for row in data["agreement"]:
        group = groups.setdefault((row["metric"], row["judge"]), {"metric": row["metric"], "judge": row["judge"]})
        group[row["population"]] = row
    data["computed_at_iso"] = iso(report.computed_at)
    data["since_iso"] = iso(report.since)
    data["groups"] = list(groups.values())
    return data

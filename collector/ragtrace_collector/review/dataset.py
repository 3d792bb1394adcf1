"""Datasets from production: stored records as Ragas rows, with what people said of them and what the judge scored.

Why: the records a deployment scored, joined with reviewers' verdicts and end-user feedback, are the evaluation set
that matches production — ``evaluate`` measures a judge (or a new prompt, a new model) on them, and the labelled
rows are what a judge is tuned against. One row per record (JSON object, one per line)::

    {"id": "<record key>", "trace_id": "...", "service": ..., "pipeline": ...,
     "user_input": ..., "retrieved_contexts": ["...", ...], "response": ...,
     "reference": ...,                    # a reviewer's reference answer, else the record's own (absent: none)
     "hallucinated": true | false,        # the reviewers' faithfulness label (absent: none, or a tie)
     "human_verdicts": [Review.to_dict(), ...],
     "feedback": 0.25 | null, "feedback_items": [{"name", "value", "comment"}, ...],
     "judge": "...", "scores": {"faithfulness": 0.5, ...}}

``hallucinated`` is the majority of the reviewers' labels (:attr:`Review.unfaithful`) on the faithfulness metrics
(:data:`FAITHFULNESS_METRICS`); reviewers split evenly give no label rather than a coin toss.

The store is read a page at a time (:meth:`ResultsStore.stored_records`), so a store of any size is exported in
bounded memory; the reviewed trace ids (people's work: few) are read once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ragtrace_collector.review.labels import Feedback, LabelStore, Review
from ragtrace_collector.scoring.results_store import ResultsStore, StoredRecord

#: The metrics whose reviews say whether an answer is hallucinated.
FAITHFULNESS_METRICS = ("faithfulness", "hallucination")
#: Records read from the store at once.
PAGE = 500


@dataclass(frozen=True)
class DatasetFilter:
    """Which records go in; every condition given must hold. ``feedback_below``: the record's mean feedback is
    strictly below it (records without feedback are left out); ``metric_below``: (metric, bound), the record's
    score of that metric is strictly below the bound; ``since``: the record's time (unix seconds)."""

    reviewed: bool = False
    feedback_below: float | None = None
    since: float | None = None
    service: str | None = None
    metric_below: tuple[str, float] | None = None


def hallucinated(reviews: Sequence[Review]) -> bool | None:
    """The reviewers' majority label on the faithfulness metrics: True (hallucinated), False, or None (no label,
    or as many say one as the other)."""
    labels = [r.unfaithful for r in reviews if r.metric in FAITHFULNESS_METRICS and r.unfaithful is not None]
    yes, no = sum(1 for label in labels if label), sum(1 for label in labels if not label)
    if yes == no:
        return None
    return yes > no


def dataset_row(stored: StoredRecord, reviews: Sequence[Review], feedback: Sequence[Feedback]) -> dict[str, Any]:
    """One record as a dataset row (see the module docstring)."""
    record = stored.record
    contexts = [
        str(c.get("content", "")) if isinstance(c, dict) else str(c) for c in record.get("retrieved_contexts") or []
    ]
    row: dict[str, Any] = {
        "id": stored.record_key,
        "trace_id": stored.trace_id,
        "service": stored.service,
        "pipeline": stored.pipeline,
        "user_input": stored.user_input,
        "retrieved_contexts": contexts,
        "response": stored.response,
    }
    reference = next((r.reference for r in sorted(reviews, key=lambda r: -r.reviewed_at) if r.reference), None)
    reference = reference or record.get("reference")
    if reference:
        row["reference"] = reference
    label = hallucinated(reviews)
    if label is not None:
        row["hallucinated"] = label
    row["human_verdicts"] = [r.to_dict() for r in reviews]
    row["feedback"] = sum(f.value for f in feedback) / len(feedback) if feedback else None
    row["feedback_items"] = [{"name": f.name, "value": f.value, "comment": f.comment} for f in feedback]
    row["judge"] = stored.judge
    row["scores"] = {r.metric: r.score for r in stored.results if r.status == "scored"}
    return row


def dataset_rows(store: ResultsStore, labels: LabelStore, where: DatasetFilter = DatasetFilter()) -> Iterator[dict]:
    """The rows of the records ``where`` selects, oldest first, read a page at a time."""
    reviewed = labels.reviewed_trace_ids() if where.reviewed else None
    after: tuple[float, str] | None = None
    while True:
        page, after = store.stored_records(
            since=where.since, service=where.service, metric_below=where.metric_below, after=after, limit=PAGE
        )
        if reviewed is not None:
            page = [r for r in page if r.trace_id in reviewed]
        if where.feedback_below is not None:
            means = labels.feedback_means([r.trace_id for r in page if r.trace_id])
            page = [r for r in page if r.trace_id in means and means[r.trace_id] < where.feedback_below]
        for stored in page:
            trace_id = stored.trace_id
            reviews = labels.reviews_of(trace_id) if trace_id else []
            feedback = labels.feedback_of(trace_id) if trace_id else []
            yield dataset_row(stored, reviews, feedback)
        if after is None:
            return

"""The review queue: which stored records a reviewer should label next, for one metric.

Three reasons to review a record, offered in this order:

1. ``sample`` — the uniform random sample (:func:`~ragtrace_collector.review.agreement.in_sample`: the hash of the
   trace id under ``review.sample_rate``), in hash order: reviews of these are the honest agreement estimate, and a
   reviewer who stops halfway has still labelled a uniform sample;
2. ``feedback`` — end users and the judge disagree: mean feedback under 0.5 where the judge's score is on the good
   side of the alert threshold, 0.5 or more where it is on the bad side; strongest feedback first;
3. ``low_score`` — on the bad side of the threshold, worst first.

A record is offered for its first reason only, and only while nobody has reviewed it for that metric. Each item's
place depends on that record alone (its reason and key), never on the others, so "the next record after this one"
stays the same while others are labelled or skipped: a skipped record comes back only after the queue wraps.
Candidates are the newest ``review.queue_pool`` scored records of the metric and its worst ones — a bounded read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ragtrace_collector.review.agreement import DEFAULT_THRESHOLD, Cutoffs, in_sample, sample_position
from ragtrace_collector.review.labels import LabelStore
from ragtrace_collector.scoring.results_store import RecordQuery, ResultsStore, StoredRecord

Reason = Literal["sample", "feedback", "low_score"]
REASONS: tuple[Reason, ...] = ("sample", "feedback", "low_score")
DEFAULT_METRIC = "faithfulness"
WORST_CANDIDATES = 500  # the metric's worst records read besides the newest pool (old low scores stay offered)


@dataclass(frozen=True)
class QueueItem:
    """One record offered for review, and why."""

    trace_id: str  # the id reviews are kept by (the record key for a record without a trace id)
    record_key: str
    reason: Reason
    order: tuple[int, float, str]  # (reason, key within the reason, id): the item's place, see the docstring
    metric: str
    score: float
    higher_is_better: bool
    threshold: float
    side: Literal["good", "bad"]
    judge: str | None
    service: str | None
    pipeline: str | None
    question: str | None
    feedback: float | None  # the record's mean end-user feedback, where it has any
    in_sample: bool

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["order"]
        return data


@dataclass(frozen=True)
class ReviewQueue:
    """The queue of one metric: ``items`` every candidate with a reason (reviewed ones too: they keep their
    place for :meth:`next_after`), ``pending`` those nobody has reviewed yet, in order."""

    metric: str
    items: list[QueueItem]
    pending: list[QueueItem]
    reviewed: int  # candidates already reviewed for the metric

    def next_after(self, trace_id: str | None, reason: Reason | None = None) -> QueueItem | None:
        """The first pending item (of ``reason`` where given) placed after ``trace_id``'s; past the end, the first
        pending one again (skipped records come back); None when nothing else is pending."""
        pending = [i for i in self.pending if (reason is None or i.reason == reason) and i.trace_id != trace_id]
        here = next((i.order for i in self.items if i.trace_id == trace_id), None)
        if here is not None:
            after = next((i for i in pending if i.order > here), None)
            if after is not None:
                return after
        return pending[0] if pending else None


def candidates(store: ResultsStore, metric: str, pool: int) -> list[StoredRecord]:
    """The newest ``pool`` records with a scored ``metric``, and its worst ones (list rows: a bounded read)."""
    newest = store.records(RecordQuery(metric=metric, outcome="scored", sort="newest", limit=pool)).records
    worst = store.records(
        RecordQuery(metric=metric, outcome="scored", sort="worst", limit=min(pool, WORST_CANDIDATES))
    ).records
    return list({r.record_key: r for r in (*newest, *worst)}.values())


def build_queue(
    records: Sequence[StoredRecord],
    metric: str,
    reviewed: set[str],
    feedback: Mapping[str, float],
    cutoffs: Cutoffs,
    sample_rate: float,
) -> ReviewQueue:
    """The queue over ``records`` (pure: the tests give it records directly)."""
    items: list[QueueItem] = []
    for record in records:
        result = next((r for r in record.results if r.metric == metric and r.status == "scored"), None)
        if result is None or result.score is None:
            continue
        review_id = record.trace_id or record.record_key
        row = cutoffs.get(metric, record.pipeline)
        threshold = row.value if row is not None else DEFAULT_THRESHOLD
        hib = row.higher_is_better if row is not None else result.higher_is_better
        bad = result.score < threshold if hib else result.score > threshold
        mean = feedback.get(review_id)
        sampled = in_sample(review_id, sample_rate)
        reason: Reason
        if sampled:
            reason, key = "sample", sample_position(review_id)
        elif mean is not None and (mean < 0.5) != bad:  # users unhappy with a "good" answer, or happy with a "bad" one
            reason, key = "feedback", -abs(mean - 0.5)
        elif bad:
            reason, key = "low_score", result.score if hib else -result.score
        else:
            continue
        items.append(
            QueueItem(
                trace_id=review_id,
                record_key=record.record_key,
                reason=reason,
                order=(REASONS.index(reason), key, review_id),
                metric=metric,
                score=result.score,
                higher_is_better=hib,
                threshold=threshold,
                side="bad" if bad else "good",
                judge=result.judge,
                service=record.service,
                pipeline=record.pipeline,
                question=record.user_input,
                feedback=mean,
                in_sample=sampled,
            )
        )
    items.sort(key=lambda i: i.order)
    pending = [i for i in items if i.trace_id not in reviewed]
    return ReviewQueue(metric, items, pending, reviewed=len(items) - len(pending))


def review_queue(
    store: ResultsStore | None, labels: LabelStore, cutoffs: Cutoffs, metric: str, pool: int, sample_rate: float
) -> ReviewQueue:
    """The queue of ``metric`` over the stored records (empty while nothing is stored)."""
    if store is None:
        return ReviewQueue(metric, [], [], 0)
    records = candidates(store, metric, pool)
    ids = [r.trace_id or r.record_key for r in records]
    reviewed = {r.trace_id for r in labels.reviews(metric=metric)}
    return build_queue(records, metric, reviewed, labels.feedback_means(ids), cutoffs, sample_rate)

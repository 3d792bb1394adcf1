"""Judge vs human agreement and the review queue over a real results store and label store (SQLite files)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ragtrace_collector.config import ReviewConfig
from ragtrace_collector.explorer.thresholds import Threshold, Thresholds
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.review.agreement import (
    AgreementSource,
    best_threshold,
    bootstrap_intervals,
    compute_agreement,
    human_labels,
    in_sample,
    sample_position,
)
from ragtrace_collector.review.labels import Feedback, LabelStore, Review
from ragtrace_collector.review.metrics import AgreementCollector
from ragtrace_collector.review.queue import review_queue
from ragtrace_collector.scoring.results_store import ResultsStore

THRESHOLDS = Thresholds({("faithfulness", None): Threshold(0.7, True), ("hallucination", None): Threshold(0.3, False)})


def tid(i: int) -> str:
    return f"{i:032x}"


def stores(tmp_path: Path, scores: list[float], pipeline: str = "qa") -> tuple[ResultsStore, LabelStore]:
    """Records 0..n-1, each with a faithfulness score and hallucination = 1 - faithfulness, judge "local"."""
    path = tmp_path / "results.sqlite"
    store = ResultsStore(path)
    for i, score in enumerate(scores):
        record = RagRecord(trace_id=tid(i), pipeline=pipeline, user_input=f"question {i}", response="answer")
        results = [
            MetricResult("faithfulness", "scored", score),
            MetricResult("hallucination", "scored", 1.0 - score, higher_is_better=False),
        ]
        store.add(record, results, "local")
    return store, LabelStore(path)


def review(i: int, unfaithful: bool, reviewer: str = "ann", metric: str = "faithfulness") -> Review:
    return Review(tid(i), metric, reviewer, "unfaithful" if unfaithful else "faithful", reviewed_at=time.time())


def test_counts_kappa_and_best_threshold_against_the_reviewers(tmp_path: Path):
    # the judge's threshold is 0.7; the reviewers' line is at 0.5: records scored 0.5-0.69 are called bad wrongly
    scores = [0.1, 0.2, 0.3, 0.4, 0.55, 0.6, 0.65, 0.8, 0.9, 1.0]
    store, labels = stores(tmp_path, scores)
    for i, score in enumerate(scores):
        labels.add_review(review(i, unfaithful=score < 0.5))
    report = compute_agreement(labels, store, THRESHOLDS, sample_rate=1.0, since=0.0)
    row = next(r for r in report.rows if (r.metric, r.judge, r.population) == ("faithfulness", "local", "all"))
    assert row.n == 10 and row.thresholds == (0.7,)
    c = row.confusion
    assert (c.tp, c.fn, c.fp, c.tn) == (4, 0, 3, 3)  # 0.55, 0.6, 0.65: the judge says bad, the reviewers do not
    assert row.balanced_accuracy == pytest.approx((4 / 4 + 3 / 6) / 2)
    # kappa: observed 0.7, expected 0.4 * 0.7 + 0.6 * 0.3 = 0.46
    assert row.kappa == pytest.approx((0.7 - 0.46) / (1 - 0.46))
    assert row.kappa_low is not None and row.kappa_high is not None
    assert row.kappa_low <= row.kappa <= row.kappa_high
    assert row.auroc == 1.0  # the score ranks every unfaithful answer under every faithful one
    assert row.best_threshold == 0.55 and row.best_balanced_accuracy == 1.0  # bad below 0.55: every call right
    # the same records seen as hallucination (lower is better, threshold 0.3): the same calls from the other side
    hall = next(r for r in report.rows if (r.metric, r.population) == ("faithfulness", "sample"))
    assert hall.n == 10  # sample_rate 1.0: every record is in the sample
    assert not [r for r in report.rows if r.metric == "hallucination"]  # nobody reviewed hallucination


def test_several_reviewers_vote_and_a_tie_is_left_out(tmp_path: Path):
    store, labels = stores(tmp_path, [0.2, 0.9, 0.9])
    labels.add_review(review(0, True, "ann"))
    labels.add_review(review(0, True, "bob"))
    labels.add_review(review(0, False, "cy"))
    labels.add_review(review(1, True, "ann"))
    labels.add_review(review(1, False, "bob"))
    human, ties = human_labels(labels.reviews())
    assert human == {(tid(0), "faithfulness"): True} and ties == 1
    report = compute_agreement(labels, store, THRESHOLDS, sample_rate=1.0, since=0.0)
    assert (report.labelled, report.ties) == (1, 1)
    # the same reviewer again replaces the earlier verdict: still one vote
    assert labels.add_review(review(2, True, "ann")) is True
    assert labels.add_review(review(2, False, "ann")) is False
    assert human_labels(labels.reviews())[0][(tid(2), "faithfulness")] is False


def test_the_sample_is_a_function_of_the_trace_id():
    ids = [tid(i) for i in range(4000)]
    share = sum(in_sample(t, 0.25) for t in ids) / len(ids)
    assert 0.22 < share < 0.28  # sequential ids, hashed: uniform
    assert all(in_sample(t, 0.5) for t in ids if in_sample(t, 0.25))  # nested: a lower rate keeps a subset
    assert sample_position(ids[7]) == sample_position(tid(7))


def test_bootstrap_interval_is_seeded_and_narrows_with_more_reviews():
    rng = np.random.default_rng(1)
    labels = rng.random(400) < 0.3
    predicted = np.where(rng.random(400) < 0.8, labels, ~labels)
    first = bootstrap_intervals(labels[:40], predicted[:40])
    assert first == bootstrap_intervals(labels[:40], predicted[:40])  # fixed seed: the same reviews, the same interval
    small = first[1]
    large = bootstrap_intervals(labels, predicted)[1]
    assert small[0] is not None and small[1] is not None and large[0] is not None and large[1] is not None
    assert large[1] - large[0] < small[1] - small[0]
    assert bootstrap_intervals(labels[:1], predicted[:1]) == ((None, None), (None, None))


def test_best_threshold_where_lower_is_better_and_undefined_with_one_class():
    labels = np.array([False, False, True, True])
    scores = np.array([0.1, 0.2, 0.6, 0.9])  # hallucination: bad above the cut
    assert best_threshold(labels, scores, False, 0.7) == (0.2, 1.0)  # bad above 0.2: 0.6 and 0.9, both right
    assert best_threshold(np.array([True, True]), np.array([0.1, 0.2]), True, 0.5) == (None, None)
    # a current threshold that already makes the best calls is the answer, not an observed score beside it
    assert best_threshold(labels, scores, False, 0.5) == (0.5, 1.0)
    assert best_threshold(~labels, scores, True, 0.5) == (0.5, 1.0)
    assert best_threshold(~labels, scores, True, 0.2) == (0.6, 1.0)  # bad below 0.2 is wrong: the nearest best


def test_the_queue_offers_the_sample_then_disagreements_then_low_scores(tmp_path: Path):
    scores = [0.1, 0.2, 0.9, 0.95, 0.3, 0.8, 0.85, 0.4]
    store, labels = stores(tmp_path, scores)
    rate = 0.3
    sampled = {tid(i) for i in range(len(scores)) if in_sample(tid(i), rate)}
    # users unhappy with a well-scored answer (2) and happy with a badly-scored one (7), not in the sample
    unhappy = next(i for i in (2, 3, 5, 6) if tid(i) not in sampled)
    happy = next(i for i in (0, 1, 4, 7) if tid(i) not in sampled)
    labels.add_feedback([Feedback(tid(unhappy), 0.0), Feedback(tid(happy), 1.0)])
    queue = review_queue(store, labels, THRESHOLDS, "faithfulness", pool=100, sample_rate=rate)
    reasons = [(i.trace_id, i.reason) for i in queue.pending]
    assert [t for t, r in reasons if r == "sample"] == sorted(sampled, key=sample_position)
    assert {t for t, r in reasons if r == "feedback"} == {tid(unhappy), tid(happy)}
    low = [t for t, r in reasons if r == "low_score"]
    expected_low = [tid(i) for i in sorted(range(len(scores)), key=lambda i: scores[i]) if scores[i] < 0.7]
    assert low == [t for t in expected_low if t not in sampled and t != tid(happy)]
    assert [r for _, r in reasons] == sorted((r for _, r in reasons), key=["sample", "feedback", "low_score"].index)
    # skipping keeps the order: the next after the first is the second; a reviewed record leaves the queue
    first, second = queue.pending[0], queue.pending[1]
    assert queue.next_after(first.trace_id) == second
    labels.add_review(review(int(first.trace_id, 16), True))
    again = review_queue(store, labels, THRESHOLDS, "faithfulness", pool=100, sample_rate=rate)
    assert first.trace_id not in {i.trace_id for i in again.pending} and again.reviewed == 1
    assert again.next_after(first.trace_id) == second  # the reviewed one keeps its place for "next after"
    last = again.pending[-1]
    assert again.next_after(last.trace_id) == again.pending[0]  # past the end: wraps to what was skipped


def test_agreement_in_metrics_is_cached_and_bounded(tmp_path: Path):
    store, labels = stores(tmp_path, [0.1, 0.2, 0.9, 0.8])
    for i, bad in enumerate([True, True, False, False]):
        labels.add_review(review(i, bad))
    now = [0.0]
    config = ReviewConfig(sample_rate=1.0, agreement_cache_seconds=60, max_agreement_series=1)
    source = AgreementSource(lambda: store, labels, THRESHOLDS, config, clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(AgreementCollector(source, config.max_agreement_series))
    text = generate_latest(registry).decode()
    assert (
        'ragtrace_judge_agreement{judge="local",metric="faithfulness",population="sample",statistic="kappa"} 1.0'
        in text
    )
    assert 'statistic="reviewed"} 4.0' in text
    labels.add_review(review(1, False))  # another verdict, not yet seen: the scrape reads the cached report
    assert 'population="all",statistic="kappa"} 1.0' in generate_latest(registry).decode()
    now[0] = 61.0
    assert 'population="all",statistic="kappa"} 1.0' not in generate_latest(registry).decode()
    # a second judge's scores: one (metric, judge) pair is exported at most
    store.add(
        RagRecord(trace_id=tid(0), pipeline="qa", id="rescored-0"), [MetricResult("faithfulness", "scored", 0.3)], "gpt"
    )
    source.invalidate()
    assert {
        line.split('judge="')[1].split('"')[0]
        for line in generate_latest(registry).decode().splitlines()
        if "judge=" in line
    } == {"local"}

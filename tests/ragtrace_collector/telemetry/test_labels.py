"""Label budgets kept by recent frequency: a recurring name wins its slot back from one-shot junk within seconds."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ragtrace_collector.telemetry.labels import OTHER, BoundedLabel, LabelSet, series_overflow
from ragtrace_collector.telemetry.slots import Reclaim
from tests.support.assembly import ManualClock


def flooded_label(clock: ManualClock, limit: int = 5, reclaim: Reclaim | None = None) -> BoundedLabel:
    label = BoundedLabel(limit, 600, clock, reclaim)
    assert [label(f"junk-{i}") for i in range(limit)] == [f"junk-{i}" for i in range(limit)]
    return label


def test_a_recurring_value_takes_a_one_shot_slot():
    clock = ManualClock()
    label = flooded_label(clock)
    seen = []
    for _ in range(3):  # once a second
        clock.t += 1
        seen.append(label("checkout"))
    assert seen == [OTHER, OTHER, "checkout"]
    assert label("junk-0") == OTHER  # the least recently used one-shot gave its slot
    assert [label(f"junk-{i}") for i in range(1, 5)] == [f"junk-{i}" for i in range(1, 5)]


def test_a_burst_within_one_second_is_still_one_shot():
    clock = ManualClock()
    label = flooded_label(clock)
    clock.t += 1
    assert {label("burst") for _ in range(100)} == {OTHER}


def test_names_seen_more_often_keep_their_slots():
    clock = ManualClock()
    label = BoundedLabel(2, 600, clock)
    for _ in range(10):
        clock.t += 1
        assert (label("a"), label("b")) == ("a", "b")
    for _ in range(5):  # recurring, but less often than the holders
        clock.t += 1
        assert label("c") == OTHER
        label("a"), label("b")


def test_reclaimed_values_are_sanitised():
    clock = ManualClock()
    label = flooded_label(clock)
    for _ in range(3):
        clock.t += 1
        got = label("qa\x1b[2J")
    assert got == "qa_[2J"


def test_reclaim_off_keeps_first_come():
    clock = ManualClock()
    label = flooded_label(clock, reclaim=Reclaim(hits=0))
    for _ in range(10):
        clock.t += 1
        assert label("checkout") == OTHER


def per_pipeline(clock: ManualClock, max_series: int, labels: int = 50) -> tuple[CollectorRegistry, LabelSet]:
    registry = CollectorRegistry()
    duration = Histogram("d_seconds", "d", ("service", "pipeline"), buckets=(1.0,), registry=registry)  # 5 series
    received = Counter("received", "r", ("service", "pipeline"), registry=registry)  # 2 series
    service, pipeline = BoundedLabel(labels, 600, clock), BoundedLabel(labels, 600, clock)
    label_set = LabelSet(
        [(duration, ((),)), (received, ((),))],
        (service, pipeline),
        max_series=max_series,
        idle_seconds=600,
        overflow=series_overflow(registry),
        clock=clock,
    )
    return registry, label_set


def observe(label_set: LabelSet, service: str, pipeline: str) -> tuple[str, ...]:
    """Record one request (as the ingest metrics do) and return the labels it was recorded under."""
    key = label_set.labels(service, pipeline)
    duration, received = label_set.members[0][0], label_set.members[1][0]
    assert isinstance(duration, Histogram) and isinstance(received, Counter)
    duration.labels(*key).observe(0.5)
    received.labels(*key).inc()
    return key


def test_a_recurring_combination_takes_a_one_shot_ones_series():
    clock = ManualClock()
    registry, label_set = per_pipeline(clock, max_series=7 * 4)  # 4 combinations
    for i in range(10):
        observe(label_set, "bot", f"junk-{i}")
    got = []
    for _ in range(3):
        clock.t += 1
        got.append(observe(label_set, "bot", "checkout"))
    assert got == [(OTHER, OTHER), (OTHER, OTHER), ("bot", "checkout")]
    g = registry.get_sample_value
    assert g("received_total", {"service": "bot", "pipeline": "checkout"}) == 1
    assert g("received_total", {"service": "bot", "pipeline": "junk-0"}) is None  # its series removed
    assert g("ragtrace_metric_series_evicted_total", {"metric": "d_seconds"}) == 1
    assert g("ragtrace_metric_series_evicted_total", {"metric": "received"}) == 1
    assert g("ragtrace_metric_series_overflow_total", {"metric": "received"}) == 6 + 2
    assert label_set.series <= 7 * 4 + 7  # the budget, plus the overflow combination


def test_a_name_its_label_turns_away_counts_toward_its_combination():
    clock = ManualClock()
    _, label_set = per_pipeline(clock, max_series=7 * 4, labels=4)  # the pipeline label is full too
    for i in range(10):
        observe(label_set, "bot", f"junk-{i}")
    got = []
    for _ in range(3):
        clock.t += 1
        got.append(observe(label_set, "bot", "checkout")[1])
    assert got == [OTHER, OTHER, "checkout"]  # both budgets give way at once, not one after the other


def test_a_held_steady_combination_outlasts_a_continuing_flood():
    clock = ManualClock()
    registry, label_set = per_pipeline(clock, max_series=7 * 4, labels=1000)
    for second in range(120):
        clock.t += 1
        for i in range(30):  # 30 new names every second, before and after it
            observe(label_set, "bot", f"junk-{second}-{i}")
        observe(label_set, "bot", "checkout")
    assert registry.get_sample_value("received_total", {"service": "bot", "pipeline": "checkout"}) == 118
    assert label_set.series <= 7 * 4 + 7


def test_the_label_set_follows_its_labels_reclaim_settings():
    clock = ManualClock()
    registry = CollectorRegistry()
    received = Counter("received", "r", ("pipeline",), registry=registry)
    off = BoundedLabel(10, 600, clock, Reclaim(hits=0))
    label_set = LabelSet(
        [(received, ((),))], (off,), max_series=2, idle_seconds=600, overflow=series_overflow(registry), clock=clock
    )
    assert label_set.labels("junk") == ("junk",)
    for _ in range(5):
        clock.t += 1
        assert label_set.labels("checkout") == (OTHER,)

"""The results store: insert-or-ignore per (record key, metric), worst-first listing."""

from __future__ import annotations

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore


def rec(i: int, pipeline: str = "qa") -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", pipeline=pipeline, user_input=f"q{i}", response=f"a{i}")


def test_insert_or_ignore_reports_new_rows(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    r = rec(1)
    first = store.add(
        r,
        [MetricResult("faithfulness", "scored", 0.4), MetricResult("bleu", "skipped", reason="no reference")],
        "local",
    )
    assert first == [True, True]
    again = store.add(
        r, [MetricResult("faithfulness", "scored", 0.9), MetricResult("answer_relevancy", "scored", 1.0)], "local"
    )
    assert again == [False, True]
    assert store.count(r.key) == 3
    (row,) = [x for x in store.get(r.key) if x.metric == "faithfulness"]
    assert row.score == 0.4  # the first write wins
    assert store.metrics_done(r.key) == {"faithfulness", "bleu", "answer_relevancy"}
    assert store.counts_per_key() == {r.key: 3}


def test_persists_across_reopen(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.add(rec(1), [MetricResult("faithfulness", "scored", 0.5, details={"unsupported_claims": ["x"]})], "local")
    store.close()
    again = ResultsStore(tmp_path / "r.sqlite")
    (row,) = again.get(rec(1).key)
    assert row.details == {"unsupported_claims": ["x"]} and row.trace_id == rec(1).trace_id
    assert row.pipeline == "qa" and row.judge == "local" and row.user_input == "q1"


def test_worst_first_with_threshold_and_direction(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for i, s in enumerate([0.9, 0.1, 0.45, 0.3]):
        store.add(rec(i), [MetricResult("faithfulness", "scored", s)], "local")
    store.add(rec(9), [MetricResult("faithfulness", "error", reason="bad reply")], "local")
    rows = store.worst("faithfulness", below=0.5)
    assert [r.score for r in rows] == [0.1, 0.3, 0.45]
    assert [r.score for r in store.worst("faithfulness", limit=2)] == [0.1, 0.3]
    # lower-is-better metrics list their highest scores first
    for i, s in enumerate([0.2, 0.8, 0.6]):
        store.add(rec(i), [MetricResult("hallucination", "scored", s, higher_is_better=False)], "local")
    assert [r.score for r in store.worst("hallucination", above=0.5)] == [0.8, 0.6]
    assert store.worst("faithfulness", pipeline="other") == []


def test_unsupported_claims_from_either_details_shape():
    from ragtrace_collector.model.result import unsupported_claims

    assert unsupported_claims({"unsupported": ["a", "b"]}) == ["a", "b"]
    faith = {
        "claims": [
            {"statement": "x", "verdict": "yes"},
            {"statement": "y", "verdict": "no"},
            {"statement": "z", "verdict": "idk"},
        ],
        "idk_counts_as_supported": False,
    }
    assert unsupported_claims(faith) == ["y", "z"]
    assert unsupported_claims({**faith, "idk_counts_as_supported": True}) == ["y"]
    assert unsupported_claims({}) == [] and unsupported_claims(None) == []

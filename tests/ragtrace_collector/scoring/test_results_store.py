"""The results store: insert-or-ignore per (record key, metric), worst-first listing."""

from __future__ import annotations

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultFilter, ResultsStore


def worst(store: ResultsStore, metric: str, limit: int = 20, **filters) -> list:
    return store.worst(ResultFilter(metric=metric, **filters), limit=limit)


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
    rows = worst(store, "faithfulness", below=0.5)
    assert [r.score for r in rows] == [0.1, 0.3, 0.45]
    assert [r.score for r in worst(store, "faithfulness", limit=2)] == [0.1, 0.3]
    # lower-is-better metrics list their highest scores first
    for i, s in enumerate([0.2, 0.8, 0.6]):
        store.add(rec(i), [MetricResult("hallucination", "scored", s, higher_is_better=False)], "local")
    assert [r.score for r in worst(store, "hallucination", above=0.5)] == [0.8, 0.6]
    assert worst(store, "faithfulness", pipeline="other") == []


def test_judge_filter_of_worst_summary_and_one_trace(tmp_path):
    """Two judges score the same metric (an alert is per judge): ``judge=`` keeps only that judge's rows."""
    store = ResultsStore(tmp_path / "r.sqlite")
    for i, (score, judge) in enumerate([(0.4, "local"), (0.8, "local"), (0.3, "gpt-4o"), (0.9, "gpt-4o")]):
        store.add(rec(i), [MetricResult("faithfulness", "scored", score)], judge)
    # one trace scored by both judges: each its own metric (a record holds one result per metric)
    both = rec(5)
    store.add(both, [MetricResult("faithfulness", "scored", 0.5)], "local")
    store.add(both, [MetricResult("answer_relevancy", "scored", 0.6)], "gpt-4o")

    def judged(rows):
        return sorted((r.judge, r.score) for r in rows)

    assert judged(worst(store, "faithfulness", judge="local")) == [("local", 0.4), ("local", 0.5), ("local", 0.8)]
    assert judged(worst(store, "faithfulness", judge="gpt-4o")) == [("gpt-4o", 0.3), ("gpt-4o", 0.9)]
    assert [r.score for r in worst(store, "faithfulness", below=0.45, judge="gpt-4o")] == [0.3]
    assert judged(worst(store, "faithfulness")) == sorted(
        judged(worst(store, "faithfulness", judge="local")) + judged(worst(store, "faithfulness", judge="gpt-4o"))
    )  # without the filter, both judges' rows
    assert worst(store, "faithfulness", judge="nobody") == []

    def counted(**filters):
        return {m["metric"]: (m["scored"], round(m["mean"], 3)) for m in store.summary(ResultFilter(**filters))}

    assert counted(judge="local") == {"faithfulness": (3, round((0.4 + 0.8 + 0.5) / 3, 3))}
    assert counted(judge="gpt-4o") == {"answer_relevancy": (1, 0.6), "faithfulness": (2, 0.6)}
    assert counted() == {"answer_relevancy": (1, 0.6), "faithfulness": (5, 0.58)}

    assert [(r.metric, r.judge) for r in store.results_of_trace(both.trace_id, judge="local")] == [
        ("faithfulness", "local")
    ]
    assert [(r.metric, r.judge) for r in store.results_of_trace(both.trace_id, judge="gpt-4o")] == [
        ("answer_relevancy", "gpt-4o")
    ]
    assert sorted(r.judge for r in store.results_of_trace(both.trace_id)) == ["gpt-4o", "local"]
    assert store.results_of_trace(both.trace_id, since=0.0, judge="nobody") == []


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


# --- whole records, the explorer's queries, migration, retention ------------------------------------------
import sqlite3  # noqa: E402
import time  # noqa: E402

from ragtrace_collector.scoring.results_store import SCHEMA_VERSION, RecordQuery  # noqa: E402

# The store as it was before records were kept (schema version 0): what an upgraded collector finds on disk.
V1_SCHEMA = """
CREATE TABLE results (
    record_key TEXT NOT NULL, metric TEXT NOT NULL, status TEXT NOT NULL, score REAL, label TEXT, reason TEXT,
    higher_is_better INTEGER NOT NULL DEFAULT 1, details TEXT NOT NULL DEFAULT '{}', trace_id TEXT, pipeline TEXT,
    service TEXT, judge TEXT, user_input TEXT, response TEXT, sampling_weight REAL NOT NULL DEFAULT 1.0,
    scored_at REAL NOT NULL, PRIMARY KEY (record_key, metric)
);
CREATE INDEX results_metric_score ON results (metric, score);
"""


def full(i: int, **over) -> RagRecord:
    values = {
        "trace_id": f"{i:032x}",
        "service": "svc",
        "pipeline": "qa",
        "user_input": f"q{i}",
        "response": f"a{i}",
        "retrieved_contexts": [{"content": f"ctx {i}", "id": f"d{i}", "score": 0.9}],
        "ttft_seconds": 0.25,
        "model": "m",
        "session_id": "s",
        "user_id": "u",
        "start_time_unix_nano": int((1_700_000_000 + i) * 1e9),
    }
    values.update(over)
    return RagRecord(**values)


def test_a_store_from_before_records_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(V1_SCHEMA)
    db.execute(
        "INSERT INTO results (record_key, metric, status, score, details, trace_id, pipeline, service, judge, "
        "user_input, response, scored_at) VALUES (?, 'faithfulness', 'scored', 0.25, '{}', ?, 'qa', 'svc', 'local', "
        "'old question', 'old answer', 1000.0)",
        ("a" * 32, "a" * 32),
    )
    db.commit()
    db.close()
    store = ResultsStore(path)
    (version,) = store._db.execute("PRAGMA user_version").fetchone()
    assert version == SCHEMA_VERSION
    page = store.records(RecordQuery())
    assert page.total == 1
    (old,) = page.records
    assert old.trace_id == "a" * 32 and old.service == "svc" and old.occurred_at == 1000.0
    assert old.user_input == "old question" and old.response == "old answer" and old.record == {}
    assert [r.score for r in old.results] == [0.25]
    # new records go in beside it; reopening migrates nothing twice
    store.add(full(2), [MetricResult("faithfulness", "scored", 1.0)], "local")
    store.close()
    again = ResultsStore(path)
    assert again.records(RecordQuery()).total == 2
    assert again.record("a" * 32) is not None


def test_the_whole_record_is_kept_once(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    record = full(1)
    store.add(record, [MetricResult("faithfulness", "scored", 0.5)], "local")
    store.add(record.model_copy(update={"response": "changed"}), [MetricResult("bleu", "skipped", reason="x")], "local")
    found = store.record(record.trace_id)
    assert found is not None and found.response == "a1"  # the first write wins, as for results
    assert found.record["retrieved_contexts"][0] == {"content": "ctx 1", "id": "d1", "score": 0.9, "metadata": {}}
    assert found.record["ttft_seconds"] == 0.25 and found.session_id == "s" and found.user_id == "u"
    assert found.started_at == 1_700_000_001.0 and found.occurred_at == 1_700_000_001.0
    assert [r.metric for r in found.results] == ["bleu", "faithfulness"]
    assert store.record("f" * 32) is None


def test_record_filters_sort_and_paging(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    specs = [  # (faithfulness, service, session, user, judge)
        (0.9, "a", "s1", "u1", "local"),
        (0.2, "a", "s1", "u2", "local"),
        (0.2, "b", "s2", "u2", "gpt"),
        (0.6, "b", None, None, "local"),
    ]
    for i, (score, service, session, user, judge) in enumerate(specs):
        store.add(
            full(i, service=service, session_id=session, user_id=user),
            [
                MetricResult("faithfulness", "scored", score),
                MetricResult("hallucination", "scored", 1 - score, higher_is_better=False),
                MetricResult("context_recall", "skipped", reason="missing input: reference")
                if i == 3
                else MetricResult("context_recall", "error", reason="judge said nothing")
                if i == 2
                else MetricResult("context_recall", "scored", 1.0),
            ],
            judge,
        )

    def keys(**q) -> list[int]:
        return [int(r.record_key, 16) for r in store.records(RecordQuery(**q)).records]

    assert keys() == [3, 2, 1, 0]  # newest first (the request's start)
    assert keys(service="a") == [1, 0] and keys(session_id="s1") == [1, 0] and keys(user_id="u2") == [2, 1]
    assert keys(judge="gpt") == [2] and keys(outcome="skipped") == [3] and keys(outcome="error") == [2]
    assert keys(metric="context_recall", outcome="scored") == [1, 0]
    assert keys(metric="faithfulness", min_score=0.5) == [3, 0]
    assert keys(metric="faithfulness", max_score=0.2) == [2, 1]
    assert keys(min_score=0.95) == [1, 0]  # any one metric: their context_recall of 1.0
    assert keys(since=1_700_000_002, until=1_700_000_003.5) == [3, 2]
    # worst first, direction-aware, the newest first among equal scores
    assert keys(sort="worst", metric="faithfulness") == [2, 1, 3, 0]
    assert keys(sort="worst", metric="hallucination") == [2, 1, 3, 0]
    assert keys(sort="worst") == [2, 1, 3, 0]  # the record's worst 0-1 score
    page = store.records(RecordQuery(limit=3, offset=2))
    assert page.total == 4 and [int(r.record_key, 16) for r in page.records] == [1, 0]
    assert store.facets() == {
        "services": ["a", "b"],
        "pipelines": ["qa"],
        "metrics": ["context_recall", "faithfulness", "hallucination"],
        "judges": ["gpt", "local"],
    }
    assert [int(r.record_key, 16) for r in store.session("s1")] == [0, 1]  # oldest turn first


def test_cli_listing_newest_first_among_equal_scores(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for i in range(3):
        store.add(rec(i), [MetricResult("faithfulness", "scored", 0.5)], "local")
        store._db.execute("UPDATE results SET scored_at = ? WHERE record_key = ?", (1000.0 + i, rec(i).key))
    assert [r.record_key for r in worst(store, "faithfulness")] == [rec(2).key, rec(1).key, rec(0).key]
    assert [r.record_key for r in worst(store, "faithfulness", since=1001.0)] == [rec(2).key, rec(1).key]
    assert [r.record_key for r in worst(store, "faithfulness", trace_id=rec(1).trace_id)] == [rec(1).key]


def test_retention_by_age_deletes_whole_records(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for i in range(4):
        store.add(full(i), [MetricResult("faithfulness", "scored", 0.5), MetricResult("bleu", "scored", 0.1)], "l")
    now = time.time()
    old = (now - 7200, full(0).key, full(1).key)
    store._db.execute("UPDATE records SET scored_at = ? WHERE record_key IN (?, ?)", old)
    store._db.execute("UPDATE results SET scored_at = ? WHERE record_key IN (?, ?)", old)
    assert store.enforce_retention(max_age_seconds=3600, now=now) == 2
    assert set(store.counts_per_key()) == {full(2).key, full(3).key}
    assert store.records(RecordQuery()).total == 2
    assert store.enforce_retention(max_age_seconds=3600, now=now) == 0


def test_retention_by_size_deletes_the_oldest_first(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    big = "x" * 20_000
    for i in range(60):
        store.add(full(i, response=big + str(i)), [MetricResult("faithfulness", "scored", 0.5)], "local")
    before = store.size_bytes()
    assert before > 1_500_000
    bound = 600_000
    deleted = store.enforce_retention(max_bytes=bound)
    assert deleted > 0 and store.size_bytes() <= bound
    left = [int(r.record_key, 16) for r in store.records(RecordQuery(limit=100)).records]
    assert left == list(range(59, 59 - len(left), -1))  # the newest kept
    assert (tmp_path / "r.sqlite").stat().st_size <= bound + 64 * 1024  # a new store gives the pages back

"""Provenance on every score: what produced it, computed by the real judges, stored (schema v4, migrated from v3),
kept beside rescored scores, and sent with the OTLP evaluation events and the Phoenix annotations."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time

from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring import results_store as rs
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.judges import make_judge
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.scoring.provenance import provenance, provenance_id, with_provenance
from ragtrace_collector.scoring.results_store import SCHEMA_VERSION, ResultsStore
from ragtrace_collector.scoring.worker import TimedJudge
from ragtrace_collector.version import __version__
from tests.support.fake_phoenix import FakeDownstream

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"


def record(trace: str = TRACE) -> RagRecord:
    return RagRecord(
        trace_id=trace,
        pipeline="qa",
        service="shop",
        user_input="Where is the Eiffel Tower?",
        response="The Eiffel Tower is in Paris.",
        retrieved_contexts=[{"content": "The Eiffel Tower is a landmark in Paris, France."}],
        metadata={"root_span_id": ROOT},
    )


class _Observer:
    def judge_registered(self, judge: str) -> None:
        pass

    def observe_judge_latency(self, judge: str, seconds: float) -> None:
        pass


def test_every_result_of_the_engine_carries_the_judges_provenance():
    judge = make_judge("local", model="features")
    results = asyncio.run(evaluate_record(record(), ["faithfulness", "bleu", "no_such_metric"], judge))
    identity = judge.identity()
    assert identity.model == "local/features" and re.fullmatch(r"[0-9a-f]{64}", identity.hash)
    for result in results:  # scored, skipped (bleu: no reference) and error alike
        p = result.provenance
        assert p["judge"] == "local" and p["judge_model"] == "local/features" and p["judge_hash"] == identity.hash
        assert p["metric"] == result.metric and p["ragtrace_version"] == __version__
        assert re.fullmatch(r"[0-9a-f]{16}", p["id"]) and p["id"] == provenance_id(p)
    faithfulness, bleu, unknown = results
    assert faithfulness.status == "scored" and bleu.status == "skipped" and unknown.status == "error"
    assert faithfulness.provenance["metric_version"] == METRICS["faithfulness"].version == "1"
    assert unknown.provenance["metric_version"] is None
    assert len({r.provenance["id"] for r in results}) == 3  # one per metric


def test_what_decides_the_verdicts_changes_the_hash_and_the_id():
    features, cascade = make_judge("local", model="features"), make_judge("local", model="cascade")
    assert cascade.identity().model == "local/cascade"
    assert features.identity().hash != cascade.identity().hash  # the cross-encoder's file is part of it
    mini, other = make_judge("openai/gpt-4o-mini", api_key="k"), make_judge("openai/gpt-4o", api_key="k")
    assert mini.identity() == make_judge("openai/gpt-4o-mini", api_key="k", timeout=3).identity()
    assert mini.identity().model == "openai/gpt-4o-mini" and mini.identity().hash != other.identity().hash
    embedded = make_judge("openai/gpt-4o-mini", api_key="k", embedding_model="text-embedding-3-small")
    assert embedded.identity().hash != mini.identity().hash
    p = provenance(mini, "faithfulness")
    assert provenance_id({**p, "metric_version": "2"}) != p["id"]  # a metric's new version: a new provenance
    assert provenance_id({**p, "ragtrace_version": "9.9"}) != p["id"]


def test_a_wrapping_judge_has_the_wrapped_ones_identity_and_results_made_elsewhere_get_one():
    inner = make_judge("local", model="features")
    timed = TimedJudge(inner, _Observer())  # type: ignore[arg-type]
    assert timed.identity() == inner.identity()
    plain = Judge()  # no prompts nor model files: identified by its class and name
    assert plain.identity().model == "judge" and plain.identity().hash != inner.identity().hash
    failed = with_provenance(MetricResult("faithfulness", "error", reason="poison record"), timed)
    assert failed.provenance == provenance(inner, "faithfulness")
    kept = MetricResult("faithfulness", "scored", 0.5, provenance={"id": "x"})
    assert with_provenance(kept, timed).provenance == {"id": "x"}


def test_the_store_keeps_provenance_and_rescored_scores_beside_the_first(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    first = MetricResult("faithfulness", "scored", 1.0, provenance={"id": "aaaa", "judge_model": "local/cascade"})
    store.add(record(), [first], "local")
    (row,) = store.get(TRACE)
    assert row.provenance == {"id": "aaaa", "judge_model": "local/cascade"}
    again = MetricResult("faithfulness", "scored", 0.5, provenance={"id": "bbbb", "judge_model": "openai/x"})
    assert store.add_rescored(record(), [again], "openai/x") == [True]
    assert store.add_rescored(record(), [again], "openai/x") == [False]  # one row per provenance: never twice
    assert [r.score for r in store.get(TRACE)] == [1.0]  # the first score is untouched
    (rescored,) = store.rescored(TRACE)
    assert rescored.score == 0.5 and rescored.judge == "openai/x" and rescored.provenance["id"] == "bbbb"
    assert store.provenance_ids(TRACE) == {"faithfulness": {"aaaa", "bbbb"}}
    judged = {(s.judge, s.score) for s in store.judged_scores([TRACE], "faithfulness")}
    assert judged == {("local", 1.0), ("openai/x", 0.5)}  # agreement compares both judges
    assert store.enforce_retention(max_age_seconds=1.0, now=time.time() + 10) == 1
    assert store.rescored(TRACE) == [] and store.judged_scores([TRACE]) == []


def test_judged_scores_keep_a_judges_newest_score(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.add(record(), [MetricResult("faithfulness", "scored", 1.0, provenance={"id": "v1"})], "local")
    time.sleep(0.01)
    store.add_rescored(record(), [MetricResult("faithfulness", "scored", 0.25, provenance={"id": "v2"})], "local")
    assert [(s.judge, s.score) for s in store.judged_scores([TRACE])] == [("local", 0.25)]


def test_a_version_3_store_is_migrated_and_its_rows_have_no_provenance(tmp_path):
    path = tmp_path / "v3.sqlite"
    db = sqlite3.connect(path)  # the tables a collector of schema version 3 wrote
    for script in (rs._SCHEMA, rs._SCHEMA_V2, rs._SCHEMA_V3):
        db.executescript(script)
    db.execute(
        "INSERT INTO results (record_key, metric, status, score, trace_id, judge, scored_at) "
        "VALUES (?, 'faithfulness', 'scored', 0.5, ?, 'local', 1000.0)",
        (TRACE, TRACE),
    )
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    store = ResultsStore(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    (old,) = store.get(TRACE)
    assert old.score == 0.5 and old.provenance == {}
    assert store.provenance_ids(TRACE) == {"faithfulness": set()}  # any judge may rescore it
    store.add(record("1" * 32), [MetricResult("faithfulness", "scored", 1.0, provenance={"id": "p"})], "local")
    store.add_rescored(record(), [MetricResult("faithfulness", "scored", 1.0, provenance={"id": "p"})], "local")
    store.close()
    again = ResultsStore(path)  # reopening migrates nothing twice
    assert again.get("1" * 32)[0].provenance == {"id": "p"} and len(again.rescored(TRACE)) == 1


def test_stored_records_are_read_a_page_at_a_time(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for i in range(7):
        r = record(f"{i + 1:032x}").model_copy(update={"start_time_unix_nano": int((1_700_000_000 + i) * 1e9)})
        store.add(r, [MetricResult("faithfulness", "scored", i / 10)], "local")
    seen, after, pages = [], None, 0
    while True:
        page, after = store.stored_records(after=after, limit=3)
        pages += 1
        seen += [(p.record_key, p.record["response"], [x.score for x in p.results]) for p in page]
        if after is None:
            break
    assert pages == 3 and [s[0] for s in seen] == [f"{i + 1:032x}" for i in range(7)]
    assert seen[0][1] == "The Eiffel Tower is in Paris." and seen[2][2] == [0.2]
    low, _ = store.stored_records(metric_below=("faithfulness", 0.25))
    assert [p.record_key for p in low] == [f"{i + 1:032x}" for i in range(3)]
    recent, _ = store.stored_records(since=1_700_000_005, service="shop")
    assert len(recent) == 2 and store.stored_records(service="other")[0] == []


def test_the_evaluation_event_names_what_produced_the_score():
    judge = make_judge("local", model="features")
    (result,) = asyncio.run(evaluate_record(record(), ["faithfulness"], judge))
    exporter = InMemoryLogRecordExporter()
    events = EvaluationEvents(exporter=exporter, batch=False)
    assert events.emit(record(), [result], judge.name) == 1
    events.shutdown()
    (log,) = [r.log_record for r in exporter.get_finished_logs()]
    attributes = dict(log.attributes or {})
    assert attributes["ragtrace.evaluation.judge.model"] == "local/features"
    assert attributes["ragtrace.evaluation.judge.hash"] == judge.identity().hash
    assert attributes["ragtrace.evaluation.metric.version"] == "1"
    assert attributes["ragtrace.version"] == __version__
    assert attributes["ragtrace.evaluation.provenance.id"] == result.provenance["id"]
    assert attributes["gen_ai.evaluation.name"] == "faithfulness"


def test_the_phoenix_annotation_metadata_carries_the_provenance():
    downstream = FakeDownstream()
    try:
        judge = make_judge("local", model="features")
        (result,) = asyncio.run(evaluate_record(record(), ["faithfulness"], judge))
        sink = PhoenixAnnotations(downstream.url, flush_interval=0.05)
        assert sink.emit(record(), [result], judge.name) == 2
        assert sink.flush(5)
        sink.shutdown()
        for kind, target in (("span", ROOT), ("trace", TRACE)):
            annotation = downstream.of_kind(kind)[(target, "faithfulness")]
            assert annotation["metadata"]["provenance"] == result.provenance
            assert annotation["metadata"]["provenance"]["judge_model"] == "local/features"
    finally:
        downstream.stop()

"""The results store's export marks: which exporter confirmed which result, and what is left to send again."""

from __future__ import annotations

import sqlite3
import time

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import SCHEMA_VERSION, ResultsStore

T1, T2 = "1" * 32, "2" * 32


def record(trace_id: str | None, **kw) -> RagRecord:
    return RagRecord(trace_id=trace_id, id=None if trace_id else "row-1", metadata={"root_span_id": "a" * 16}, **kw)


def results() -> list[MetricResult]:
    return [
        MetricResult("faithfulness", "scored", 0.5),
        MetricResult("rouge", "skipped", reason="no reference"),
        MetricResult("bleu", "error", reason="boom"),
    ]


def test_unexported_lists_what_an_exporter_did_not_confirm(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.add(record(T1, pipeline="qa"), results(), "local")
    store.add(record(T2), results(), "local")
    until = time.time() + 1
    page, cursor = store.unexported("phoenix", ("scored",), since=0.0, until=until)
    assert cursor is None
    assert [(r.key, [x.metric for x in rows]) for r, rows in page] == [(T1, ["faithfulness"]), (T2, ["faithfulness"])]
    first, _ = page[0]
    assert first.pipeline == "qa" and first.metadata["root_span_id"] == "a" * 16  # the record as stored
    assert store.mark_exported("phoenix", [(T1, "faithfulness")]) == 1
    assert store.mark_exported("phoenix", [(T1, "faithfulness")]) == 0  # marks are idempotent
    page, _ = store.unexported("phoenix", ("scored",), since=0.0, until=until)
    assert [r.key for r, _ in page] == [T2]
    # another exporter has its own marks; its statuses are its own
    page, _ = store.unexported("otlp_events", ("scored", "error"), since=0.0, until=until)
    assert sorted((r.key, x.metric) for r, rows in page for x in rows) == [
        (T1, "bleu"),
        (T1, "faithfulness"),
        (T2, "bleu"),
        (T2, "faithfulness"),
    ]
    assert store.exported("phoenix") == {(T1, "faithfulness")}


def test_unexported_pages_by_cursor_and_keeps_to_its_window(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    for i in range(5):
        store.add(record(f"{i + 1:032x}"), [MetricResult("m", "scored", 0.1)], "local")
    until = time.time() + 1
    seen, cursor = [], None
    while True:
        page, cursor = store.unexported("x", ("scored",), since=0.0, until=until, after=cursor, limit=2)
        seen += [r.key for r, _ in page]
        if cursor is None:
            break
    assert seen == [f"{i + 1:032x}" for i in range(5)]
    assert store.unexported("x", ("scored",), since=until, until=until + 10)[0] == []  # stored before the window


def test_rows_without_a_trace_are_not_listed(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.add(record(None), results(), "local")  # a dataset row: nothing to attach a score to
    assert store.unexported("phoenix", ("scored",), since=0.0, until=time.time() + 1)[0] == []


def test_a_version_2_store_gains_the_marks_table(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    store.add(record(T1), results(), "local")
    store.close()
    with sqlite3.connect(path) as db:  # as a collector of the previous version left it
        db.execute("DROP TABLE exported")
        db.execute("PRAGMA user_version=2")
    store = ResultsStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    page, _ = store.unexported("phoenix", ("scored",), since=0.0, until=time.time() + 1)
    assert [r.key for r, _ in page] == [T1]  # nothing confirmed yet: sent again (Phoenix upserts)


def test_retention_deletes_the_marks_of_deleted_records(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.add(record(T1), results(), "local")
    store.mark_exported("phoenix", [(T1, "faithfulness")])
    assert store.enforce_retention(max_age_seconds=1.0, now=time.time() + 10) == 1
    assert store.exported("phoenix") == set()


def test_marks_after_close_are_dropped_not_raised(tmp_path):
    store = ResultsStore(tmp_path / "r.sqlite")
    store.close()
    assert store.mark_exported("phoenix", [(T1, "faithfulness")]) == 0

"""``ragtrace-collector results``: worst records first, with unsupported claims and trace ids."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

from ragtrace_collector.cli import results as results_cmd
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.claim_verdicts import CONTRADICTED, CONTRADICTED_REASON, NOT_FOUND, NOT_FOUND_REASON, RECORD, scored
from tests.support.paths import REPO


def fill(path: Path) -> None:
    store = ResultsStore(path)
    for i, score in enumerate([0.9, 0.2, 0.45, 0.7]):
        record = RagRecord(trace_id=f"{i + 1:032x}", pipeline="qa", user_input=f"question {i}", response=f"answer {i}")
        details = {"unsupported": [f"claim {i}a", f"claim {i}b"]} if score < 0.5 else {"unsupported": []}
        store.add(record, [MetricResult("faithfulness", "scored", score, details=details)], "local")
    store.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    results_cmd.add_arguments(parser)
    return parser.parse_args(argv)


def test_table_lists_worst_below_threshold(tmp_path):
    fill(tmp_path / "r.sqlite")
    out = io.StringIO()
    rc = results_cmd.run(
        parse(["--metric", "faithfulness", "--below", "0.5", "--store", str(tmp_path / "r.sqlite")]), out
    )
    text = out.getvalue()
    assert rc == 0
    assert text.index("0.200") < text.index("0.450")
    assert "0.700" not in text and "0.900" not in text
    assert f"trace_id={2:032x}" in text and "unsupported: claim 1a" in text and "question 1" in text


def test_json_via_the_real_cli(tmp_path):
    fill(tmp_path / "r.sqlite")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragtrace_collector.cli",
            "results",
            "--metric",
            "faithfulness",
            "--below",
            "0.5",
            "--limit",
            "1",
            "--json",
            "--store",
            str(tmp_path / "r.sqlite"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    row = json.loads(line)
    assert row["score"] == 0.2 and row["trace_id"] == f"{2:032x}"
    assert row["unsupported_claims"] == ["claim 1a", "claim 1b"]


def test_clear_errors(tmp_path, capsys):
    assert results_cmd.run(parse(["--metric", "faithfulness", "--store", str(tmp_path / "missing.sqlite")])) == 1
    assert "no results store" in capsys.readouterr().err
    fill(tmp_path / "r.sqlite")
    assert results_cmd.run(parse(["--metric", "faithfulnes", "--store", str(tmp_path / "r.sqlite")])) == 1
    assert "stored metrics: faithfulness" in capsys.readouterr().err
    (tmp_path / "not-a-store.sqlite").write_text("plain text, not SQLite " * 100)
    assert results_cmd.run(parse(["--metric", "faithfulness", "--store", str(tmp_path / "not-a-store.sqlite")])) == 1
    assert "is not a ragtrace results store" in capsys.readouterr().err
    assert results_cmd.run(parse(["--metric", "faithfulness", "--config", str(tmp_path / "missing.yaml")])) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and "missing.yaml" in err


def test_store_path_from_config(tmp_path, monkeypatch):
    data = tmp_path / "data"
    fill(data / "results.sqlite")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"data_dir: {data}\n")
    out = io.StringIO()
    assert results_cmd.run(parse(["--metric", "faithfulness", "--config", str(cfg), "--json"]), out) == 0
    assert len(out.getvalue().splitlines()) == 4


def test_summary_with_weighted_mean(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    store.add(RagRecord(trace_id="a" * 32, pipeline="qa"), [MetricResult("faithfulness", "scored", 1.0)], "local")
    store.add(
        RagRecord(trace_id="b" * 32, pipeline="qa", sampling_weight=3.0),
        [MetricResult("faithfulness", "scored", 0.0), MetricResult("bleu", "skipped", reason="no reference")],
        "local",
    )
    store.close()
    out = io.StringIO()
    assert results_cmd.run(parse(["--summary", "--json", "--store", str(path)]), out) == 0
    rows = {r["metric"]: r for r in map(json.loads, out.getvalue().splitlines())}
    assert rows["faithfulness"]["scored"] == 2 and rows["faithfulness"]["mean"] == 0.5
    assert rows["faithfulness"]["weighted_mean"] == 0.25  # (1*1 + 3*0) / 4
    assert rows["bleu"]["skipped"] == 1 and rows["bleu"]["mean"] is None
    table = io.StringIO()
    assert results_cmd.run(parse(["--summary", "--store", str(path)]), table) == 0
    assert "faithfulness" in table.getvalue() and "0.250" in table.getvalue()


def test_metric_or_summary_is_required(tmp_path, capsys):
    fill(tmp_path / "r.sqlite")
    assert results_cmd.run(parse(["--store", str(tmp_path / "r.sqlite")])) == 2
    assert "--summary" in capsys.readouterr().err


def fill_services(path: Path) -> None:
    """Equal scores stored at known times, over two services."""
    store = ResultsStore(path)
    for i, service in enumerate(["web", "web", "api"]):
        record = RagRecord(trace_id=f"{i + 1:032x}", service=service, user_input=f"question {i}", response="x")
        store.add(
            record,
            [
                MetricResult("faithfulness", "scored", 0.5),
                MetricResult("context_recall", "skipped", reason="missing input: reference"),
            ],
            "local",
        )
    now = __import__("time").time()
    for i, age in enumerate([7200.0, 60.0, 30.0]):  # seconds ago
        store._db.execute("UPDATE results SET scored_at = ? WHERE record_key = ?", (now - age, f"{i + 1:032x}"))
    store.close()


def test_since_service_and_newest_first_among_equal_scores(tmp_path):
    path = tmp_path / "r.sqlite"
    fill_services(path)

    def listed(*argv: str) -> list[str]:
        out = io.StringIO()
        assert results_cmd.run(parse(["--metric", "faithfulness", "--json", "--store", str(path), *argv]), out) == 0
        return [json.loads(line)["trace_id"] for line in out.getvalue().splitlines()]

    assert listed() == [f"{3:032x}", f"{2:032x}", f"{1:032x}"]  # equal scores: the newest first
    assert listed("--since", "1h") == [f"{3:032x}", f"{2:032x}"]
    assert listed("--service", "web") == [f"{2:032x}", f"{1:032x}"]
    assert listed("--since", "1h", "--service", "web") == [f"{2:032x}"]
    assert listed("--since", "2000-01-01T00:00:00Z") == [f"{3:032x}", f"{2:032x}", f"{1:032x}"]
    assert listed("--trace-id", f"{2:032x}") == [f"{2:032x}"]


def test_trace_id_alone_shows_every_metric_of_the_trace(tmp_path, capsys):
    path = tmp_path / "r.sqlite"
    fill_services(path)
    out = io.StringIO()
    assert results_cmd.run(parse(["--trace-id", f"{2:032x}", "--store", str(path)]), out) == 0
    text = out.getvalue()
    assert "0.500  faithfulness" in text and "skipped  context_recall" in text
    assert "reason:   missing input: reference" in text and f"{1:032x}" not in text
    assert results_cmd.run(parse(["--metric", "faithfulness", "--since", "soon", "--store", str(path)])) == 2
    assert "--since" in capsys.readouterr().err


def test_summary_honours_the_listing_filters(tmp_path):
    """``--summary`` counts only the results the plain listing would consider: --since, --service,
    --pipeline, --trace-id, --metric, --below/--above narrow it the same way."""
    path = tmp_path / "r.sqlite"
    fill_services(path)

    def summary(*argv: str) -> dict[str, tuple[int, int]]:
        out = io.StringIO()
        assert results_cmd.run(parse(["--summary", "--json", "--store", str(path), *argv]), out) == 0
        rows = map(json.loads, out.getvalue().splitlines())
        return {r["metric"]: (r["scored"], r["skipped"]) for r in rows}

    assert summary() == {"context_recall": (0, 3), "faithfulness": (3, 0)}
    assert summary("--since", "1h") == {"context_recall": (0, 2), "faithfulness": (2, 0)}
    assert summary("--service", "api") == {"context_recall": (0, 1), "faithfulness": (1, 0)}
    assert summary("--since", "1h", "--service", "web") == {"context_recall": (0, 1), "faithfulness": (1, 0)}
    assert summary("--trace-id", f"{1:032x}") == {"context_recall": (0, 1), "faithfulness": (1, 0)}
    assert summary("--metric", "faithfulness", "--service", "web") == {"faithfulness": (2, 0)}
    assert summary("--below", "0.4") == {}  # only scores strictly below, as the listing: none here
    assert summary("--above", "0.4", "--since", "1h") == {"faithfulness": (2, 0)}
    assert summary("--service", "nobody") == {}
    assert summary("--pipeline", "qa") == {}  # fill_services stores no pipeline
    table = io.StringIO()
    assert results_cmd.run(parse(["--summary", "--since", "1h", "--service", "web", "--store", str(path)]), table) == 0
    assert "faithfulness" in table.getvalue()


def test_judge_narrows_the_listing_the_summary_and_one_trace(tmp_path):
    """An alert is per judge: ``--judge`` keeps its judge's results when two judges score the same metric."""
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    for i, (score, judge) in enumerate([(0.2, "local"), (0.3, "gpt-4o"), (0.4, "local")]):
        record = RagRecord(trace_id=f"{i + 1:032x}", service="web", pipeline="support", user_input=f"q{i}")
        store.add(record, [MetricResult("faithfulness", "scored", score)], judge)
    shared = RagRecord(trace_id=f"{9:032x}", service="web", pipeline="support", user_input="q9")
    store.add(shared, [MetricResult("faithfulness", "scored", 0.6)], "local")
    store.add(shared, [MetricResult("answer_relevancy", "scored", 0.7)], "gpt-4o")
    store.close()
    narrowed = ["--service", "web", "--pipeline", "support", "--store", str(path)]

    out = io.StringIO()
    listing = ["--metric", "faithfulness", "--below", "0.5", *narrowed]
    assert results_cmd.run(parse([*listing, "--judge", "local"]), out) == 0
    lines = [line for line in out.getvalue().splitlines() if "trace_id=" in line]
    assert [line.split()[0] for line in lines] == ["0.200", "0.400"]
    assert all("judge=local" in line for line in lines) and "judge=gpt-4o" not in out.getvalue()

    everyone = io.StringIO()
    assert results_cmd.run(parse(listing), everyone) == 0
    assert "judge=gpt-4o" in everyone.getvalue() and "0.300" in everyone.getvalue()

    out = io.StringIO()
    assert results_cmd.run(parse(["--summary", "--json", *narrowed, "--judge", "gpt-4o"]), out) == 0
    summary = {r["metric"]: r["scored"] for r in map(json.loads, out.getvalue().splitlines())}
    assert summary == {"answer_relevancy": 1, "faithfulness": 1}

    out = io.StringIO()
    one_trace = ["--trace-id", f"{9:032x}", "--json", "--store", str(path)]
    assert results_cmd.run(parse([*one_trace, "--judge", "gpt-4o"]), out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["metric"], r["judge"]) for r in rows] == [("answer_relevancy", "gpt-4o")]


def test_summary_rejects_a_bad_since(tmp_path, capsys):
    path = tmp_path / "r.sqlite"
    fill_services(path)
    assert results_cmd.run(parse(["--summary", "--since", "soon", "--store", str(path)])) == 2
    assert "--since" in capsys.readouterr().err


def test_each_claim_not_supported_is_shown_with_its_verdict_and_reason(tmp_path):
    """A record with a contradicted and a not-found claim: each is printed with its verdict word and the judge's
    reason, contradicted first, in the table and in ``--json`` (``claim_problems``)."""
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    store.add(RECORD, scored(), "local")
    store.close()
    out = io.StringIO()
    assert results_cmd.run(parse(["--metric", "faithfulness", "--store", str(path)]), out) == 0
    claims = out.getvalue().splitlines()[3:]  # after the result's row, question and answer
    assert claims == [
        f"    contradicted: {CONTRADICTED}",
        f"      why: {CONTRADICTED_REASON}",
        f"    not found: {NOT_FOUND}",
        f"      why: {NOT_FOUND_REASON}",
    ]
    out = io.StringIO()
    assert results_cmd.run(parse(["--metric", "hallucination", "--json", "--store", str(path)]), out) == 0
    (row,) = map(json.loads, out.getvalue().splitlines())
    assert row["unsupported_claims"] == [CONTRADICTED, NOT_FOUND]  # as before
    assert row["claim_problems"] == [
        {"statement": CONTRADICTED, "verdict": "no", "kind": "contradicted", "reason": CONTRADICTED_REASON},
        {"statement": NOT_FOUND, "verdict": "idk", "kind": "not_found", "reason": NOT_FOUND_REASON},
    ]


def test_a_no_that_does_not_say_contradicted_is_shown_unsupported(tmp_path):
    path = tmp_path / "r.sqlite"
    store = ResultsStore(path)
    store.add(RECORD, scored(["faithfulness"], llm_style=True), "openai/gpt-4o")
    store.close()
    out = io.StringIO()
    assert results_cmd.run(parse(["--metric", "faithfulness", "--store", str(path)]), out) == 0
    assert out.getvalue().splitlines()[3:] == [
        f"    unsupported: {CONTRADICTED}",
        "      why: the contexts do not say this",
        f"    unsupported: {NOT_FOUND}",
        "      why: the contexts do not say this",
    ]
    out = io.StringIO()
    fill(tmp_path / "statements.sqlite")  # details listing statements only: no verdicts to show
    assert (
        results_cmd.run(
            parse(["--metric", "faithfulness", "--json", "--store", str(tmp_path / "statements.sqlite")]), out
        )
        == 0
    )
    assert all(json.loads(line)["claim_problems"] is None for line in out.getvalue().splitlines())

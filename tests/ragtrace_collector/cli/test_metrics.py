"""``ragtrace-collector metrics`` lists the registry itself: what it prints is what serve and evaluate accept."""

from __future__ import annotations

import json

from ragtrace_collector.cli import main
from ragtrace_collector.config import DEFAULT_METRICS
from ragtrace_collector.scoring.metrics import METRICS


def test_every_metric_listed_with_what_it_needs(capsys):
    assert main(["metrics", "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert set(rows) == set(METRICS)
    assert {name for name, row in rows.items() if row["default"]} == set(DEFAULT_METRICS)
    faithfulness = rows["faithfulness"]
    assert faithfulness["higher_is_better"] and "retrieved_contexts" in faithfulness["requires"]
    assert rows["hallucination"]["higher_is_better"] is False
    assert all(row["description"] for row in rows.values())


def test_the_table_names_every_metric(capsys):
    assert main(["metrics"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in METRICS) and "faithfulness *" in out


async def test_offline_says_what_the_embedded_judge_scores(capsys):
    """``offline: yes`` is a promise: with the embedded judge, on a record holding every field, such a metric is
    never skipped for a decision the judge cannot make; ``no`` is one it never scores (it skips for that reason,
    or earlier for a setting it lacks, such as G-Eval's criteria)."""
    from ragtrace_collector.model.record import RagRecord
    from ragtrace_collector.scoring.engine import evaluate_record
    from ragtrace_collector.scoring.judges.local.judge import LocalJudge

    assert main(["metrics", "--json"]) == 0
    rows = {row["name"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["faithfulness"]["offline"] == "yes" and rows["bleu"]["judge_decisions"] == []
    assert {row["offline"] for row in rows.values()} >= {"yes", "no"}
    record = RagRecord(
        id="r",
        user_input="Where is the Eiffel Tower?",
        retrieved_contexts=["The Eiffel Tower is in Paris. It was completed in 1889."],
        response="The Eiffel Tower is in Paris. It was completed in 1889.",
        reference="The Eiffel Tower is in Paris, France.",
    )
    judge = LocalJudge()
    try:
        for name, row in rows.items():
            [result] = await evaluate_record(record, [name], judge)
            cannot = "cannot decide" in (result.reason or "")
            if row["offline"] == "yes":
                assert not cannot, (name, result.reason)
            elif row["offline"] == "no":
                assert result.status != "scored", (name, result.reason)
    finally:
        await judge.aclose()

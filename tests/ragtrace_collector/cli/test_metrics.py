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

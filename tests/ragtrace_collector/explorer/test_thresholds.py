"""Score chips use the alert rules' threshold table: the shipped rules, or a given rules file."""

from __future__ import annotations

from ragtrace_collector.explorer.thresholds import load_thresholds, parse_rules
from tests.support.paths import REPO


def test_the_shipped_rules_give_the_alert_thresholds():
    shipped = load_thresholds()
    repo = parse_rules((REPO / "grafana" / "prometheus" / "rules" / "ragtrace.rules.yml").read_text())
    assert shipped.rows == repo.rows and len(shipped) >= 2
    faith, halluc = shipped.get("faithfulness", None), shipped.get("hallucination", None)
    assert faith is not None and faith.higher_is_better and faith.side(faith.value - 0.01) == "bad"
    assert halluc is not None and not halluc.higher_is_better and halluc.side(halluc.value + 0.01) == "bad"
    assert faith.side(faith.value) == "good"  # the alerts fire strictly below it


def test_a_pipeline_row_overrides_the_default(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n"
        "      - record: ragtrace:eval_score:threshold_table\n        expr: vector(0.7)\n"
        "        labels: {metric: faithfulness, direction: higher_is_better}\n"
        "      - record: ragtrace:eval_score:threshold_table\n        expr: vector(0.4)\n"
        "        labels: {metric: faithfulness, pipeline: brainstorm, direction: higher_is_better}\n"
        "      - record: something:else\n        expr: vector(1)\n"
    )
    table = load_thresholds(str(rules))
    assert table.get("faithfulness", "brainstorm").value == 0.4  # type: ignore[union-attr]
    assert table.get("faithfulness", "support").value == 0.7  # type: ignore[union-attr]
    assert table.get("bleu", None) is None
    assert len(load_thresholds(str(tmp_path / "missing.yml"))) == 0  # unreadable: no colours, no crash

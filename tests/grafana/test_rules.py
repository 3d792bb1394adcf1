"""The shipped Prometheus rules: promtool validates them, and promtool unit tests cover every alert."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.grafana.promql import GRAFANA, RULES, exported_metric_names, metric_names_in, recorded_names
from tests.support.binaries import find, needs

PROMTOOL = find("promtool")
PROM_DIR = GRAFANA / "prometheus"
RULE_TESTS = sorted((PROM_DIR / "tests").glob("*.test.yml"))

needs_promtool = needs("promtool", "prometheus")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def all_rules() -> list[dict]:
    return [rule for path in RULES for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def alerts() -> list[dict]:
    return [r for r in all_rules() if "alert" in r]


def alert_cases() -> dict[str, list[list]]:
    """alert name -> list of exp_alerts lists over all promtool test cases."""
    cases: dict[str, list[list]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], []).append(case.get("exp_alerts") or [])
    return cases


def test_rule_files_exist():
    assert RULES, "no rule files under grafana/prometheus/rules"
    assert RULE_TESTS, "no promtool tests under grafana/prometheus/tests"


@needs_promtool
def test_promtool_check_rules():
    result = promtool("check", "rules", *map(str, RULES))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_unit_tests_pass():
    result = promtool("test", "rules", *[p.name for p in RULE_TESTS], cwd=PROM_DIR / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout


@needs_promtool
def test_promtool_unit_tests_can_fail(tmp_path):
    """A healthy scenario expected to fire must fail: the unit tests really compare alerts."""
    rules = tmp_path / "rules.yml"
    rules.write_text((PROM_DIR / "rules" / "ragtrace.rules.yml").read_text())
    (tmp_path / "wrong.test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n"
        "  - interval: 1m\n    input_series:\n"
        '      - series: \'ragtrace_eval_score_count{metric="faithfulness",pipeline="p",judge="local"}\'\n'
        "        values: '0+10x120'\n"
        '      - series: \'ragtrace_eval_score_sum{metric="faithfulness",pipeline="p",judge="local"}\'\n'
        "        values: '0+9x120'\n"
        "    alert_rule_test:\n"
        "      - eval_time: 2h\n        alertname: RagFaithfulnessLow\n"
        "        exp_alerts: [{exp_labels: {severity: page, metric: faithfulness, pipeline: p}}]\n"
    )
    result = promtool("test", "rules", "wrong.test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_every_alert_has_firing_and_silent_unit_tests():
    cases = alert_cases()
    for rule in alerts():
        name = rule["alert"]
        assert name in cases, f"alert {name} has no promtool unit test"
        assert any(exp for exp in cases[name]), f"alert {name}: no test where it fires"
        assert any(not exp for exp in cases[name]), f"alert {name}: no test where it stays silent"


def test_quality_alerts_have_min_sample_count_and_few_sample_tests():
    """Quality alerts read means qualified by a sample count in each window; tests have too-few-samples cases."""
    text = "\n".join(p.read_text() for p in RULE_TESTS)
    enough = [r for r in all_rules() if r.get("record") == "ragtrace:eval_score:mean_enough"]
    assert {r["labels"]["window"] for r in enough} == {"fast", "slow"}
    for rule, window in zip(enough, ("5m", "1h")):
        assert re.fullmatch(
            rf"ragtrace:eval_score:mean{window} and on \(metric, service, pipeline, judge\) "
            rf"ragtrace:eval_score:count{window} >= \d+",
            rule["expr"].strip(),
        ), rule["expr"]
    for rule in alerts():
        if rule["alert"].startswith(("RagFaithfulness", "RagQuality")):
            assert "ragtrace:eval_score:worst_mean" in rule["expr"], rule["alert"]
    assert 'pipeline="tiny"' in text  # the few-samples pipeline that must stay silent
    assert 'pipeline="quiet"' in text  # too few for the fast window, enough for the slow one


def test_one_page_per_incident():
    """Hallucination (1 - faithfulness) never pages on its own; faithfulness is the one quality page."""
    pages = {r["alert"] for r in alerts() if r["labels"]["severity"] == "page"}
    assert pages == {"RagFaithfulnessLow", "RagFaithfulnessDropped", "RagEvaluationsStalled"}
    for rule in alerts():
        if rule["labels"]["severity"] == "page":
            assert "hallucination" not in rule["expr"], rule["alert"]


def _threshold_rows() -> list[dict]:
    return [r for r in all_rules() if r.get("record") == "ragtrace:eval_score:threshold_table"]


def test_thresholds_table():
    """One default row per metric; direction as the metric's; `le` is the bucket label of the same number."""
    from prometheus_client.utils import floatToGoString

    from ragtrace_collector.exporter.prometheus import SCORE_BUCKETS
    from ragtrace_collector.scoring.metrics import METRICS

    rows = _threshold_rows()
    defaults = [r["labels"]["metric"] for r in rows if "pipeline" not in r["labels"]]
    assert len(defaults) == len(set(defaults)) and "faithfulness" in defaults and "hallucination" in defaults
    for row in rows:
        labels = row["labels"]
        value = float(re.fullmatch(r"vector\(([0-9.]+)\)", row["expr"]).group(1))
        assert value in SCORE_BUCKETS, f"{labels}: not a bucket edge of ragtrace_eval_score"
        assert labels["le"] == floatToGoString(value), labels
        metric = METRICS[labels["metric"]]
        assert labels["direction"] == ("higher_is_better" if metric.higher_is_better else "lower_is_better"), labels
    by_metric = {r["labels"]["metric"]: float(r["expr"][7:-1]) for r in rows if "pipeline" not in r["labels"]}
    assert by_metric["hallucination"] == round(1 - by_metric["faithfulness"], 2)  # one condition, two names


def test_quality_alert_texts_name_the_service_pipeline_and_judge():
    """The on-call reads the summary first: it says which service, pipeline and judge (the alert's labels);
    a command or link in an annotation that narrows to the pipeline narrows to the service too, and a
    ``results`` command to the judge (two judges of one metric are two alerts)."""
    for rule in alerts():
        if not rule["alert"].startswith(("RagFaithfulness", "RagQuality")):
            continue
        summary = rule["annotations"]["summary"]
        for label in ("service", "pipeline", "judge"):
            assert f"$labels.{label} " in summary, f"{rule['alert']}: summary does not name the {label}"
        for name, text in rule["annotations"].items():
            if "--pipeline" in text:
                assert "--service {{ $labels.service }}" in text, f"{rule['alert']} {name}: no --service"
                assert "--judge {{ $labels.judge }}" in text, f"{rule['alert']} {name}: no --judge"
            if "var-pipeline" in text:
                for label in ("service", "judge"):
                    wanted = f"var-{label}={{{{ $labels.{label} | urlquery }}}}"
                    assert wanted in text, f"{rule['alert']} {name}: no var-{label}"


def test_runbooks_narrow_to_the_service_and_judge_where_they_narrow_to_the_pipeline():
    for path in sorted((GRAFANA.parent / "docs" / "runbooks").glob("*.md")):
        for line in path.read_text().splitlines():
            if "--pipeline <pipeline>" in line:
                assert "--service <service>" in line, f"{path.name}: {line.strip()}"
                assert "--judge <judge>" in line, f"{path.name}: {line.strip()}"
            if "var-pipeline=<pipeline>" in line:
                assert "var-service=<service>" in line, f"{path.name}: {line.strip()}"


def test_every_alert_has_a_runbook_in_the_repo():
    """Each alert's runbook_url ends in /runbooks/<alert>, which the collector serves from docs/runbooks/<alert>.md
    (absolute on its base: tests/grafana/test_alert_links.py)."""
    for rule in alerts():
        url = rule["annotations"].get("runbook_url")
        assert url.endswith(f"}}}}/runbooks/{rule['alert']}"), rule["alert"]
        path = f"docs/runbooks/{rule['alert']}.md"
        text = (GRAFANA.parent / path).read_text()
        assert text.startswith(f"# {rule['alert']} ({rule['labels']['severity']})"), path
        assert "**What it means.**" in text and "**First three things to look at**" in text, path
        assert re.search(r"^1\. .*^2\. .*^3\. ", text, re.S | re.M), f"{path}: three numbered steps"


def test_time_to_page_in_the_header_is_what_promtool_measures():
    """The header's "time to page" of each quality alert: silent a minute before, firing at it (collapse at 3h)."""
    header = (PROM_DIR / "rules" / "ragtrace.rules.yml").read_text().split("groups:")[0]
    stated = dict(re.findall(r"^#   (Rag\w+) .* (\d+) min", header, re.M))
    assert set(stated) == {"RagFaithfulnessLow", "RagFaithfulnessDropped", "RagQualityLow", "RagQualityDropped"}
    cases = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                cases.setdefault((case["alertname"], case["eval_time"]), []).append(bool(case.get("exp_alerts")))
    for name, minutes in stated.items():
        assert True in cases.get((name, f"3h{int(minutes)}m"), []), f"{name}: no firing test at 3h{minutes}m"
        assert False in cases.get((name, f"3h{int(minutes) - 1}m"), []), f"{name}: no silent test a minute before"


def test_stalled_evaluations_alert_is_tested_firing():
    cases = alert_cases()
    assert any(cases["RagEvaluationsStalled"]), "RagEvaluationsStalled never fires in the unit tests"


def test_alerts_are_documented_and_labelled():
    header = (PROM_DIR / "rules" / "ragtrace.rules.yml").read_text().split("groups:")[0]
    for rule in alerts():
        assert rule["alert"] in header, f"{rule['alert']} missing from the thresholds table in the header"
        assert rule["labels"]["severity"] in {"page", "warning"}
        assert rule["annotations"].get("summary")
        assert "for" in rule


def test_rules_read_only_exported_metrics():
    known = exported_metric_names() | recorded_names() | {"up"}
    for rule in all_rules():
        unknown = metric_names_in(rule["expr"]) - known
        assert not unknown, f"{rule.get('alert') or rule.get('record')} reads unknown metrics {unknown}"


@needs_promtool
def test_prometheus_config_is_valid():
    result = promtool("check", "config", str(PROM_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ragtrace.rules.yml" in result.stdout + result.stderr  # the rules are picked up


@needs_promtool
def test_shortened_rule_windows_stay_valid(tmp_path):
    """The demo's and the integration test's rule windows come from the shipped file by substitution."""
    from ragtrace_collector.cli.demo import DEMO_WINDOWS, scaled_rules
    from tests.integration.test_prometheus_dashboards import TEST_WINDOWS

    assert scaled_rules("[7d] [10m] [15m]", {"[7d]": "[10m]", "[10m]": "[2m]", "[15m]": "[7d]"}) == "[10m] [2m] [7d]"
    shipped = (PROM_DIR / "rules" / "ragtrace.rules.yml").read_text()
    for name, mapping in (("demo", DEMO_WINDOWS), ("test", TEST_WINDOWS)):
        text = scaled_rules(shipped, mapping)
        for key in mapping:
            if key not in mapping.values():  # e.g. the demo maps 7d to 15m, itself a shipped window
                assert key not in text, f"{name}: {key} left in the rules"
        path = tmp_path / f"{name}.yml"
        path.write_text(text)
        result = promtool("check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr

"""The links in the alerts are absolute, so they open from Alertmanager, Slack or an email: every alert's
``runbook_url`` is ``<ragtrace_url>/runbooks/<alert>`` (the collector serves it) and its ``dashboard`` is
``<grafana_url>/d/<uid>/<slug>?var-...``, the bases being Prometheus's external labels, each with a default.

Checked on the rules' templates, on what promtool renders (its unit tests' expected annotations), on what a real
Prometheus renders with each shipped config's external labels, and in Alertmanager's notification templates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from ragtrace_collector.explorer.runbooks import load_runbooks
from tests.grafana.promql import GRAFANA, REPO, load_dashboards
from tests.grafana.test_rules import RULE_TESTS, alerts
from tests.support.binaries import require
from tests.support.compose import interpolate
from tests.support.net import free_port, wait_for_port

DEPLOY = REPO / "deploy"
LINKS = {"runbook_url": "ragtrace_url", "dashboard": "grafana_url"}  # link annotation -> the label of its base
DEFAULTS = {"ragtrace_url": "http://localhost:9464", "grafana_url": "http://localhost:3000"}
BASE = re.compile(r'\{\{ or \$externalLabels\.(?P<label>\w+) "(?P<default>[^"]+)" \}\}(?P<path>/.*)')
ACTION = re.compile(r"\{\{.*?\}\}")
# the labels of the alert every rule copy raises in a real Prometheus: values a URL must escape
LABELS = {
    "service": "web & shop",
    "pipeline": "support/v2",
    "metric": "faithfulness",
    "judge": "openai/gpt-4o-mini",
    "instance": "collector:9464",
}


def relative_links(text: str) -> list[str]:
    """The words of ``text`` that are links without a scheme and host: a path (``/d/x``, ``docs/runbooks/x.md``)
    or a URL with no host."""
    found = []
    for word in re.findall(r"[^\s()<>\"']+", text):
        if "://" in word:
            if not urlsplit(word).netloc or urlsplit(word).scheme not in ("http", "https"):
                found.append(word)
        elif word.startswith(("/", "./", "../", "docs/")):
            found.append(word)
    return found


def filled(text: str, env: dict[str, str]) -> str:
    """``text`` with each ``${VAR}`` replaced by its value in ``env``, as Prometheus or Grafana expand them."""
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m[1]], text)


def assert_absolute(url: str, where: str) -> None:
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.netloc and " " not in url, f"{where}: {url!r} is not absolute"


def dashboard_slugs() -> dict[str, str]:
    """uid -> the slug Grafana gives the dashboard's title (its /d/<uid>/<slug> URL)."""
    return {d["uid"]: re.sub(r"[^a-z0-9]+", "-", d["title"].lower()).strip("-") for d in load_dashboards()}


def test_link_annotations_are_built_on_an_external_label_with_an_absolute_default():
    for rule in alerts():
        for key, label in LINKS.items():
            text = rule["annotations"].get(key)
            assert text, f"{rule['alert']}: no {key}"
            match = BASE.fullmatch(text)
            assert match, f"{rule['alert']} {key}: not <{{{{ or $externalLabels.{label} ... }}}}>/path: {text}"
            assert match["label"] == label and match["default"] == DEFAULTS[label], f"{rule['alert']} {key}"
            assert_absolute(match["default"], f"{rule['alert']} {key}")
            assert not re.search(r"\s", ACTION.sub("", match["path"])), f"{rule['alert']} {key}: a space in {text}"
            for action in ACTION.findall(match["path"]):  # a label's value is escaped for a URL
                assert action.endswith("| urlquery }}"), f"{rule['alert']} {key}: {action} unescaped"


def test_no_annotation_holds_a_relative_link():
    """Neither in the rules' templates nor in what promtool renders from them (its tests' expected annotations)."""
    for rule in alerts():
        for key, text in rule["annotations"].items():
            assert not relative_links(text), f"{rule['alert']} {key}: {relative_links(text)}"
    rendered = 0
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                for alert in case.get("exp_alerts") or []:
                    for key, text in (alert.get("exp_annotations") or {}).items():
                        where = f"{path.name} {case['alertname']} {key}"
                        assert not relative_links(text), f"{where}: {relative_links(text)}"
                        if key in LINKS:
                            assert_absolute(text, where)
                            rendered += 1
    assert rendered >= 2 * len(alerts())  # every alert's two links are asserted at least once


def test_dashboard_links_open_a_shipped_dashboard_with_its_variables():
    slugs = dashboard_slugs()
    variables = {d["uid"]: {v["name"] for v in d["templating"]["list"]} for d in load_dashboards()}
    for rule in alerts():
        path = BASE.fullmatch(rule["annotations"]["dashboard"])["path"]  # type: ignore[index]
        parts = urlsplit(path)
        uid, slug = re.fullmatch(r"/d/([\w-]+)/([\w-]+)", parts.path).groups()  # type: ignore[union-attr]
        assert slugs.get(uid) == slug, f"{rule['alert']}: /d/{uid}/{slug}, dashboards {slugs}"
        for name, _ in (pair.split("=", 1) for pair in filter(None, parts.query.split("&"))):
            assert name.startswith("var-") and name[4:] in variables[uid], f"{rule['alert']}: {name} on {uid}"


def test_runbook_links_name_a_runbook_the_collector_serves():
    served = load_runbooks()
    index = served["README"]  # /runbooks/
    for rule in alerts():
        name = BASE.fullmatch(rule["annotations"]["runbook_url"])["path"].removeprefix("/runbooks/")  # type: ignore[index]
        assert name == rule["alert"] and name in served, name
        assert served[name] == (REPO / "docs" / "runbooks" / f"{name}.md").read_text()
        assert f"[{name}.md]({name}.md)" in index, f"{name} missing from docs/runbooks/README.md"


# --- every shipped Prometheus config sets the bases ----------------------------------------------------------
def _compose(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


def shipped_configs(environ: dict[str, str]) -> dict[str, tuple[dict, list[str], dict[str, str]]]:
    """Each shipped Prometheus config: (its parsed YAML, the feature flags it runs with, its environment), the
    compose files' values interpolated against ``environ``."""
    compose = _compose("docker-compose.yml")["services"]["prometheus"]
    features = [a.split("=", 1)[1] for a in compose["command"] if a.startswith("--enable-feature=")]
    scale_out = _compose("docker-compose.scale-out.yml")["configs"]["prometheus-scale-out"]["content"]
    return {
        "grafana/prometheus/prometheus.yml": (
            yaml.safe_load((GRAFANA / "prometheus/prometheus.yml").read_text()),
            [],
            {},
        ),
        "deploy/prometheus.yml": (
            yaml.safe_load((DEPLOY / "prometheus.yml").read_text()),
            features,
            {k: str(v) for k, v in interpolate(compose["environment"], environ).items()},
        ),
        "deploy/docker-compose.scale-out.yml": (yaml.safe_load(scale_out), [], {}),
    }


def test_every_shipped_prometheus_sets_both_bases():
    for name, (config, features, env) in shipped_configs({}).items():
        labels = config["global"]["external_labels"]
        for label in LINKS.values():
            value = labels[label]
            if "${" in value:  # compose fills it in from Prometheus's environment, which the feature flag allows
                assert "expand-external-labels" in ",".join(features), name
                value = filled(value, env)
            assert value == DEFAULTS[label], f"{name}: {label} = {value}"


# --- what a real Prometheus renders --------------------------------------------------------------------------
def _firing_rules() -> str:
    """Every shipped alert with its annotations as shipped, firing at once on one sample carrying LABELS."""
    expr = "vector(0.5)"
    for name, value in LABELS.items():
        expr = f'label_replace({expr}, "{name}", "{value}", "", "")'
    rules = [
        {"alert": r["alert"], "expr": expr, "labels": r["labels"], "annotations": r["annotations"]} for r in alerts()
    ]
    return yaml.safe_dump({"groups": [{"name": "links", "interval": "1s", "rules": rules}]}, width=1000)


def _rendered(tmp_path: Path, config: dict, features: list[str], env: dict[str, str]) -> dict[str, dict[str, str]]:
    """alert name -> its annotations, as a real Prometheus with ``config``'s global section renders them."""
    binary = require("prometheus", "prometheus")
    (tmp_path / "links.yml").write_text(_firing_rules())
    glob = {**config.get("global", {}), "evaluation_interval": "1s"}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"global": glob, "rule_files": ["links.yml"]}))
    port = free_port()
    argv = [
        binary,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
        *(f"--enable-feature={f}" for f in features),
    ]
    environ = {k: v for k, v in os.environ.items() if k not in ("EXPLORER_URL", "GRAFANA_URL")}
    proc = subprocess.Popen(argv, env={**environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        deadline = time.monotonic() + 30
        found: dict[str, dict[str, str]] = {}
        while len(found) < len(alerts()) and time.monotonic() < deadline:
            time.sleep(0.2)
            try:  # 503 until the TSDB is open
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5) as resp:
                    listed = json.loads(resp.read())["data"]["alerts"]
            except urllib.error.HTTPError:
                continue
            found = {a["labels"]["alertname"]: a["annotations"] for a in listed}
        return found
    finally:
        proc.terminate()
        proc.wait(10)


# case -> (the shipped config, or None for a Prometheus without external labels; the environment compose is given)
OVERRIDES = {"EXPLORER_URL": "https://ragtrace.example.com", "GRAFANA_URL": "https://grafana.example.com:8443"}
CASES: dict[str, tuple[str | None, dict[str, str]]] = {
    "grafana/prometheus/prometheus.yml": ("grafana/prometheus/prometheus.yml", {}),
    "compose": ("deploy/prometheus.yml", {}),
    "compose, EXPLORER_URL and GRAFANA_URL set": ("deploy/prometheus.yml", OVERRIDES),
    "scale-out": ("deploy/docker-compose.scale-out.yml", {}),
    "no external labels (the demo's Prometheus)": (None, {}),
}


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
def test_a_real_prometheus_renders_absolute_links_on_the_configured_bases(case, tmp_path):
    source, environ = CASES[case]
    config, features, env = shipped_configs(environ)[source] if source else ({}, [], {})
    bases = {
        "ragtrace_url": environ.get("EXPLORER_URL", DEFAULTS["ragtrace_url"]),
        "grafana_url": environ.get("GRAFANA_URL", DEFAULTS["grafana_url"]),
    }
    rendered = _rendered(tmp_path, config, features, env)
    assert set(rendered) == {r["alert"] for r in alerts()}
    for name, texts in rendered.items():
        assert texts["runbook_url"] == f"{bases['ragtrace_url']}/runbooks/{name}", name
        dashboard = urlsplit(texts["dashboard"])
        assert f"{dashboard.scheme}://{dashboard.netloc}" == bases["grafana_url"], texts["dashboard"]
        assert dashboard.path.startswith("/d/ragtrace-"), texts["dashboard"]
        for var, values in parse_qs(dashboard.query).items():  # label values are escaped: they come back whole
            assert values == [LABELS[var.removeprefix("var-")]], (name, var, values)
        for key, text in texts.items():
            assert not relative_links(text), f"{case} {name} {key}: {relative_links(text)}"


# --- Alertmanager's notification templates -------------------------------------------------------------------
def _notification(tmp_path: Path) -> Path:
    """A notification group as Alertmanager hands it to a template: a page with the annotations promtool renders."""
    page = next(
        (case["alertname"], alert)
        for path in RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        for alert in case.get("exp_alerts") or []
        if case["alertname"] == "RagFaithfulnessLow"
    )
    name, alert = page
    labels = {"alertname": name, **alert["exp_labels"]}
    data = {
        "receiver": "default",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": alert["exp_annotations"],
                "startsAt": "2024-06-01T12:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
            }
        ],
        "groupLabels": {"service": labels["service"], "pipeline": labels["pipeline"]},
        "commonLabels": labels,
        "commonAnnotations": alert["exp_annotations"],
        "externalURL": "http://localhost:9093",
    }
    path = tmp_path / "notification.json"
    path.write_text(json.dumps(data))
    return path


def _render(template: str, data: Path) -> str:
    amtool = require("amtool", "prometheus-alertmanager")
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    globs = [str(DEPLOY / t) for t in config["templates"]]
    argv = [amtool, "template", "render", *(f"--template.glob={g}" for g in globs), f"--template.data={data}"]
    done = subprocess.run([*argv, f"--template.text={template}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_notification_templates_show_the_links(tmp_path):
    data = _notification(tmp_path)
    annotations = json.loads(data.read_text())["alerts"][0]["annotations"]
    runbook, dashboard = annotations["runbook_url"], annotations["dashboard"]
    assert_absolute(runbook, "runbook_url")
    text = _render('{{ template "ragtrace.text" . }}', data)
    assert f"Runbook: {runbook}\n" in text and f"Dashboard: {dashboard}\n" in text
    assert annotations["summary"] in text
    slack = _render('{{ template "ragtrace.slack.text" . }}', data)
    assert f"<{runbook}|Runbook>" in slack and f"<{dashboard}|Dashboard>" in slack
    assert _render('{{ template "ragtrace.runbook" . }}', data).strip() == runbook
    assert _render('{{ template "ragtrace.dashboard" . }}', data).strip() == dashboard
    assert "RagFaithfulnessLow" in _render('{{ template "ragtrace.title" . }}', data)


def _example_receiver() -> dict:
    """The receiver integrations alertmanager.yml shows commented out, as a user uncommenting them gets them."""
    lines = (DEPLOY / "alertmanager.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "#   slack_configs:")
    block = []
    for line in lines[start:]:
        if not line.startswith("  #   "):
            break
        block.append(line[len("  #   ") :])
    return yaml.safe_load("\n".join(block))


def test_example_receivers_use_the_templates_and_validate(tmp_path):
    example = _example_receiver()
    assert {"slack_configs", "email_configs", "pagerduty_configs"} <= set(example)
    config = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    config["receivers"] = [{"name": "default", **example}]
    for template in config["templates"]:
        shutil.copy(DEPLOY / template, tmp_path / template)
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    amtool = require("amtool", "prometheus-alertmanager")
    done = subprocess.run([amtool, "check-config", str(tmp_path / "alertmanager.yml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    data = _notification(tmp_path)
    runbook = json.loads(data.read_text())["alerts"][0]["annotations"]["runbook_url"]
    fields = json.dumps(example)
    templated = set(re.findall(r'\{\{ template \\"(ragtrace\.[\w.]+)\\" \. \}\}', fields))
    assert {"ragtrace.runbook", "ragtrace.dashboard", "ragtrace.slack.text", "ragtrace.text"} <= templated
    assert runbook in _render('{{ template "ragtrace.runbook" . }}', data)

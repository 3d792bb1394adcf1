"""Real Prometheus (and Alertmanager) against the real collector fed by the example pipeline.

One scenario, run once for the module (~1.5 min): the collector (embedded judge, sampling 0.6) gets
steady example traffic over OTLP; Prometheus scrapes it every second with the shipped rules, windows
shortened by substitution; after a healthy phase the example's faults go on. Then:

* every query of every dashboard panel, run against Prometheus's HTTP API, returns data;
* the faithfulness alert reaches Alertmanager (``/api/v2/alerts``);
* score exemplars carry the trace ids of the example's requests;
* the quality, latency and health panels are rendered to ``test-output/*.png`` for a person to look at.

    python -m pytest tests/integration/test_prometheus_dashboards.py     # writes test-output/*.png
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from ragtrace_collector.cli.demo import ChildProcess, CollectorProcess, PrometheusProcess, Traffic, http_get, wait_until
from tests.grafana.promql import load_dashboards, metric_names_in, panel_queries, substitute
from tests.grafana.render_panels import render_dashboard
from tests.support.binaries import find, require
from tests.support.net import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "test-output"

# Shipped windows -> test windows (one-pass substitution of the shipped rule file).
TEST_WINDOWS = {
    # the fast window as long as the slow one: scores arrive in bursts, and a shorter window flaps
    "[5m]": "[20s]",
    "[1h]": "[20s]",
    "offset 1h": "offset 20s",
    "[7d]": "[3m]",
    "[15m]": "[20s]",
    "[10m]": "[20s]",
    "for: 15m": "for: 3s",
    "for: 10m": "for: 3s",
    "for: 5m": "for: 3s",
    "interval: 1m": "interval: 1s",
    ">= 100": ">= 30",
}
HEALTHY_SECONDS = 20
ALERT_TIMEOUT = 90  # the alert usually arrives ~20s after the faults; slack for a loaded machine
RATE = 5.0
# Grafana's variables for the test: short windows to match the test's rule windows.
PANEL_VARS = {"__rate_interval": "10s", "window": "20s"}
# The quality dashboard repeats its per-metric row for each metric; render these as Grafana would.
RENDERED_METRICS = ("faithfulness", "hallucination", "answer_relevancy")


class Alertmanager(ChildProcess):
    def __init__(self, binary: str, workdir: Path, port: int) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        argv = [
            binary,
            f"--config.file={REPO / 'deploy' / 'alertmanager.yml'}",
            f"--storage.path={workdir}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]
        super().__init__("alertmanager", argv, workdir / "alertmanager.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alerts(self) -> list[dict]:
        return json.loads(http_get(self.url + "/api/v2/alerts"))


def query_range(prom: PrometheusProcess, expr: str, start: float, end: float, step: float = 2.0) -> list[dict]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    prometheus = require("prometheus", "prometheus")
    alertmanager = find("prometheus-alertmanager", "alertmanager")  # optional: only its own test skips
    work = tmp_path_factory.mktemp("prom-dashboards")
    children: list[ChildProcess] = []
    handle = None
    traffic = None
    out: dict = {"alertmanager": None, "am_alert": None}
    try:
        collector = CollectorProcess(
            work / "collector",
            http_port=free_port(),
            grpc_port=free_port(),
            metrics_port=free_port(),
            sampling_rate=0.6,
            # every record in the review queue's random sample, agreement recomputed at each scrape: the judge-vs-
            # reviewers panels have data from the verdicts posted below
            extra_env={"RAGTRACE_REVIEW__SAMPLE_RATE": "1.0", "RAGTRACE_REVIEW__AGREEMENT_CACHE_SECONDS": "0"},
        )
        children.append(collector)
        am = None
        if alertmanager is not None:
            am = Alertmanager(alertmanager, work / "alertmanager", free_port())
            children.append(am)
        prom = PrometheusProcess(
            work / "prometheus",
            port=free_port(),
            metrics_target=f"127.0.0.1:{collector.metrics_port}",
            rule_mapping=TEST_WINDOWS,
            scrape_interval="1s",
            evaluation_interval="1s",
            alertmanager=f"127.0.0.1:{am.port}" if am else None,
            binary=prometheus,
        )
        children.append(prom)
        collector.wait_ready()
        prom.wait_ready()
        if am is not None:
            wait_until(lambda: http_get(am.url + "/-/ready") is not None, 20, "alertmanager", am.proc, am.log_path)

        import ragtrace

        # Not the global provider: this pytest process hosts other tests too.
        handle = ragtrace.init(
            service_name="rag-demo",
            endpoint=collector.otlp_http_endpoint,
            protocol="http/protobuf",
            schedule_delay_ms=200,
            set_global=False,
        )
        start = time.time()
        traffic = Traffic(RATE, degrade_after=HEALTHY_SECONDS)
        traffic.start()
        degrade_at = start + HEALTHY_SECONDS
        deadline = degrade_at + ALERT_TIMEOUT
        fired_prom = None
        while time.time() < deadline:
            time.sleep(1.0)
            if time.time() < degrade_at:
                continue
            if fired_prom is None:
                firing = [
                    a
                    for a in prom.alerts()
                    if a["labels"]["alertname"] == "RagFaithfulnessLow" and a["state"] == "firing"
                ]
                if firing:
                    fired_prom = time.time()
            if am is not None:
                got = [a for a in am.alerts() if a["labels"].get("alertname") == "RagFaithfulnessLow"]
                if got:
                    out["am_alert"] = got[0]
                    out["am_seconds"] = time.time() - degrade_at
                    break
            elif fired_prom is not None:
                break
        review_a_sample(collector.metrics_url.removesuffix("/metrics"))
        # until Prometheus has scraped the agreement the reviews made, then a few scrapes more: the range queries
        # below step every 2 s, and one point at the very end of the range is missed
        wait_until(
            lambda: prom.query('ragtrace_judge_agreement{population="sample",statistic="kappa"}'),
            30,
            "the judge-vs-reviewers agreement in Prometheus",
            prom.proc,
            prom.log_path,
        )
        time.sleep(5.0)
        end = time.time()
        out.update(
            prom=prom,
            start=start,
            end=end,
            degrade_at=degrade_at,
            fired_prom=fired_prom,
            alertmanager=am,
            traffic=traffic,
            trace_ids={r.trace_id for r in traffic.recent if r.trace_id},
            prom_alerts=prom.alerts(),
        )
        # The alert's runbook link, opened as someone paged would: absolute, on this collector, while it runs.
        links = [
            a["annotations"].get("runbook_url")
            for a in out["prom_alerts"]
            if a["labels"]["alertname"] == "RagFaithfulnessLow"
        ]
        out["runbook_url"] = links[0] if links else None
        out["collector_base"] = collector.metrics_url.removesuffix("/metrics")
        out["runbook_page"] = http_get(links[0]).decode() if links and links[0] else None
        # Panel data, while Prometheus still runs.
        data, per_metric = {}, {}
        for dash in load_dashboards():
            repeated = repeated_titles(dash)
            for title, ref, target in panel_queries(dash):
                expr = substitute(target["expr"], PANEL_VARS)
                data[(dash["uid"], title, ref)] = (expr, query_range(prom, expr, start, end))
                if title in repeated:
                    for metric in RENDERED_METRICS:
                        expr = substitute(target["expr"], {**PANEL_VARS, "metric": metric})
                        per_metric[(metric, title, ref)] = query_range(prom, expr, start, end)
        out["panel_data"] = data
        out["per_metric"] = per_metric
        variables = {}
        for dash in load_dashboards():
            for var in dash["templating"]["list"]:
                if var["type"] == "query":
                    inner, label = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", var["query"]["query"], re.S).groups()
                    series = prom.api("series", **{"match[]": substitute(inner, PANEL_VARS)}, start=start, end=end)
                    variables[(dash["uid"], var["name"])] = sorted({s_[label] for s_ in series if label in s_})
        out["variables"] = variables
        out["exemplars"] = prom.api(
            "query_exemplars", query='ragtrace_eval_score_bucket{metric="faithfulness"}', start=start, end=end
        )
        out["ttft_exemplars"] = prom.api(
            "query_exemplars", query="ragtrace_time_to_first_token_seconds_bucket", start=start, end=end
        )
        yield out
    finally:
        if traffic is not None:
            traffic.stop()
        if handle is not None:
            handle.shutdown(2.0)
        for child in reversed(children):
            child.stop(10.0)


def review_a_sample(base: str, n: int = 24) -> None:
    """A reviewer's verdicts on the first ``n`` records of the review queue's random sample, through the explorer's
    API: faithful where the judge passed the record, unfaithful where it did not, every fourth verdict the other way
    (both classes and some disagreement: every agreement statistic defined)."""
    with urllib.request.urlopen(f"{base}/api/v1/review/queue?reason=sample&limit={n}", timeout=10) as reply:
        items = json.loads(reply.read())["items"]
    assert items, "the review queue offered nothing to review"
    for i, item in enumerate(items):
        good = (item.get("score") or 0.0) >= 0.7
        if i % 4 == 3:
            good = not good
        body = {"metric": "faithfulness", "verdict": "faithful" if good else "unfaithful", "reviewer": "test"}
        request = urllib.request.Request(
            f"{base}/api/v1/records/{urllib.parse.quote(item['trace_id'], safe='')}/reviews",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 201


def _has_data(result: list[dict]) -> bool:
    return any(math.isfinite(float(v[1])) for s in result for v in s["values"])


# Series only a Redis queue's receivers export (``queue.redis.RedisQueueCollector``): the scenario's one collector
# has the SQLite queue, so panels reading only these have no data here (their names are linted in
# tests/grafana, the alert on them is a promtool test).
REDIS_QUEUE_ONLY = {"ragtrace_queue_local_buffer_records"}


def test_every_panel_query_returns_data(scenario):
    data = scenario["panel_data"]
    empty = [
        f"{uid} / {title} / {ref}: {expr}"
        for (uid, title, ref), (expr, result) in data.items()
        if not _has_data(result) and not metric_names_in(expr) <= REDIS_QUEUE_ONLY
    ]
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
    assert len(data) >= 40


def test_template_variables_list_the_traffic(scenario):
    for (uid, name), values in scenario["variables"].items():
        assert values, f"{uid}: variable {name} lists nothing"
        if name == "service":
            assert "rag-demo" in values
        if name == "pipeline":
            assert "elements-qa" in values
        if name == "metric":
            assert {"faithfulness", "hallucination", "answer_relevancy"} <= set(values)


def test_quality_panels_show_the_drop(scenario):
    """The repeated per-metric row, for faithfulness: high while healthy, low after the faults."""
    key = next(k for k in scenario["per_metric"] if k[0] == "faithfulness" and k[1].startswith("Mean") and k[2] == "A")
    points = [
        (float(t), float(v)) for s in scenario["per_metric"][key] for t, v in s["values"] if math.isfinite(float(v))
    ]
    healthy = [v for t, v in points if scenario["start"] + 10 < t < scenario["degrade_at"]]
    late = [v for t, v in points if t > scenario["end"] - 6]
    assert healthy and late, points
    assert min(healthy) > 0.8, healthy
    assert max(late) < 0.75, late


def test_faithfulness_alert_fires_in_prometheus(scenario):
    assert scenario["fired_prom"] is not None, scenario["prom_alerts"]
    names = {a["labels"]["alertname"] for a in scenario["prom_alerts"] if a["state"] == "firing"}
    assert "RagFaithfulnessLow" in names


def test_faithfulness_alert_reaches_alertmanager(scenario):
    if scenario["alertmanager"] is None:
        require("prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")
    alert = scenario["am_alert"]
    assert alert is not None, "RagFaithfulnessLow never reached Alertmanager"
    assert alert["labels"]["pipeline"] == "elements-qa"
    assert alert["labels"]["severity"] == "page"
    assert alert["status"]["state"] in {"active", "unprocessed"}
    assert "Faithfulness of pipeline elements-qa" in alert["annotations"]["summary"]


def test_the_alerts_runbook_link_opens_on_the_collector(scenario):
    """Paged from Alertmanager or Slack, the link is absolute and names the collector Prometheus scrapes (the demo's
    ``external_labels.ragtrace_url``), which serves the runbook."""
    assert scenario["runbook_url"] == scenario["collector_base"] + "/runbooks/RagFaithfulnessLow", scenario[
        "runbook_url"
    ]
    assert "RagFaithfulnessLow" in scenario["runbook_page"]


def test_exemplars_link_scores_and_latency_to_traces(scenario):
    for name in ("exemplars", "ttft_exemplars"):
        found = [e for s in scenario[name] for e in s["exemplars"]]
        assert found, f"no {name}"
        ids = {e["labels"].get("trace_id") for e in found}
        assert all(i and re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
        assert ids & scenario["trace_ids"], "exemplar trace ids are not the example's"


def test_render_panels_to_png(scenario):
    written = []
    for dash in load_dashboards():
        data = {
            (title, ref): res for (uid, title, ref), (_, res) in scenario["panel_data"].items() if uid == dash["uid"]
        }
        if dash["uid"] == "ragtrace-quality":
            dash = expand_metric_rows(dash, RENDERED_METRICS)
            data.update({(f"{title} [{m}]", ref): res for (m, title, ref), res in scenario["per_metric"].items()})
        path = render_dashboard(
            dash, data, OUTPUT / f"{dash['uid']}.png", marks={"faults on": scenario["degrade_at"]}, t0=scenario["start"]
        )
        written.append(path)
    for path in written:
        assert path.stat().st_size > 10_000
    summary = {
        "faults_on_to_prometheus_firing_s": round(scenario["fired_prom"] - scenario["degrade_at"], 1)
        if scenario["fired_prom"]
        else None,
        "faults_on_to_alertmanager_s": round(scenario["am_seconds"], 1) if scenario.get("am_seconds") else None,
        "panel_queries": len(scenario["panel_data"]),
        "requests_sent": scenario["traffic"].sent,
        "score_exemplars": sum(len(s["exemplars"]) for s in scenario["exemplars"]),
        "firing": sorted({a["labels"]["alertname"] for a in scenario["prom_alerts"] if a["state"] == "firing"}),
        "pngs": [str(p.relative_to(REPO)) for p in written],
    }
    (OUTPUT / "prometheus-dashboards.json").write_text(json.dumps(summary, indent=2) + "\n")


def _split_repeated(dash: dict) -> tuple[list[dict], list[dict]]:
    """(panels outside, panels inside) the row that repeats per metric."""
    outside, inside = [], []
    in_repeat = False
    for p in dash["panels"]:
        if p["type"] == "row":
            in_repeat = p.get("repeat") == "metric"
            continue
        (inside if in_repeat else outside).append(p)
    return outside, inside


def repeated_titles(dash: dict) -> set[str]:
    return {p["title"] for p in _split_repeated(dash)[1]}


def expand_metric_rows(dash: dict, metrics: tuple[str, ...]) -> dict:
    """The dashboard as Grafana shows it with these metrics selected: the repeated row once per metric."""
    outside, inside = _split_repeated(dash)
    panels = list(outside)
    for m in metrics:
        panels.extend({**p, "title": f"{p['title']} [{m}]"} for p in inside)
    return {**dash, "panels": panels}

"""Dashboard lint: uids, datasource by uid, every PromQL parses (promtool), every metric is exported."""

from __future__ import annotations

import importlib.util
import subprocess

import yaml

from tests.grafana.promql import (
    DASHBOARDS,
    EXPLORER_DS_TYPE,
    GRAFANA,
    explorer_panels,
    exported_metric_names,
    iter_panels,
    load_dashboards,
    metric_names_in,
    panel_queries,
    recorded_names,
    substitute,
    variable_queries,
)
from tests.support.binaries import find, needs

PROMTOOL = find("promtool")


def _generator():
    spec = importlib.util.spec_from_file_location("generate_dashboards", GRAFANA / "generate_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def all_queries() -> list[tuple[str, str]]:
    """(where, PromQL with variables substituted) for every panel target and query variable."""
    out = []
    for dash in load_dashboards():
        for title, ref, target in panel_queries(dash):
            out.append((f"{dash['uid']} / {title} / {ref}", substitute(target["expr"])))
        for q in variable_queries(dash):
            out.append((f"{dash['uid']} / variable", substitute(q)))
    return out


def test_three_dashboards_committed_as_generated():
    rendered = _generator().render()
    assert sorted(rendered) == sorted(p.name for p in DASHBOARDS)
    for path in DASHBOARDS:
        assert path.read_text() == rendered[path.name], (
            f"{path.name} differs: run python3 grafana/generate_dashboards.py"
        )


def test_uids_unique_and_fixed():
    dashboards = load_dashboards()
    uids = [d["uid"] for d in dashboards]
    assert len(uids) == len(set(uids)) == 3
    assert set(uids) == {"ragtrace-quality", "ragtrace-latency", "ragtrace-health"}
    for d in dashboards:
        assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
        ids = [p["id"] for p in iter_panels(d)]
        assert len(ids) == len(set(ids)), f"{d['uid']}: duplicate panel ids"


def test_datasource_referenced_by_uid_variable():
    for d in load_dashboards():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for name in ("service", "pipeline"):
            assert variables[name]["type"] == "query", f"{d['uid']} lacks the {name} variable"
            assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        for panel in iter_panels(d):
            if panel["type"] == "row" or panel in explorer_panels(d):
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], f"{panel['title']} has no query"
            for t in panel["targets"]:
                assert t["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_uses_template_filters():
    """Panels on ingest series filter by service and pipeline; quality panels by pipeline."""
    for d in load_dashboards():
        for title, ref, t in panel_queries(d):
            expr = t["expr"]
            if any(
                m in expr
                for m in (
                    "ragtrace_request",
                    "ragtrace_time_",
                    "ragtrace_retrieval",
                    "ragtrace_generation",
                    "ragtrace_tokens_total",
                    "ragtrace_traces_received",
                )
            ):
                assert "$service" in expr and "$pipeline" in expr, f"{d['uid']}/{title}/{ref}"
            if "ragtrace_eval_score" in expr or "ragtrace:eval_score" in expr or "ragtrace_eval_weight" in expr:
                # quality series carry the service: the service filter applies to scores too
                assert "$service" in expr and "$pipeline" in expr, f"{d['uid']}/{title}/{ref}"


def test_quality_dashboard_shows_sample_sizes_and_exemplars():
    d = next(d for d in load_dashboards() if d["uid"] == "ragtrace-quality")
    for panel in iter_panels(d):
        exprs = [t["expr"] for t in panel.get("targets", []) if "expr" in t]
        if any("rate(ragtrace_eval_score_sum" in e for e in exprs) or any(":mean1h" in e for e in exprs):
            assert any("increase(ragtrace_eval_score_count" in e or ":count1h" in e for e in exprs), (
                f"{panel['title']}: a mean without its sample size"
            )
    assert any(t.get("exemplar") for _, _, t in panel_queries(d)), "no exemplar query on the quality dashboard"
    assert any(p.get("repeat") == "metric" for p in d["panels"]), "quality rows must repeat per metric"


@needs("promtool", "prometheus")
def test_every_query_parses(tmp_path):
    """promtool parses each query as a recording rule (Prometheus 2.42 has no parse API)."""
    queries = all_queries()
    rules = [{"record": f"lint:query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


@needs("promtool", "prometheus")
def test_parse_check_catches_a_broken_query(tmp_path):
    path = tmp_path / "broken.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {
                                "record": "lint:broken",
                                "expr": substitute(
                                    'sum by (pipeline) (rate(ragtrace_eval_score_sum{pipeline=~"$pipeline"}[$window])'
                                ),
                            }
                        ],
                    }
                ]
            }
        )
    )
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0


def test_every_metric_name_is_exported_by_the_collector():
    known = exported_metric_names() | recorded_names() | {"ALERTS"}  # ALERTS: Prometheus's own alert series
    used: set[str] = set()
    for where, expr in all_queries():
        names = metric_names_in(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        unknown = names - known
        assert not unknown, f"{where} uses metrics the collector does not export: {unknown}"
        used |= names
    # the names pinned by the issues all appear somewhere
    for pinned in (
        "ragtrace_eval_score_bucket",
        "ragtrace_time_to_first_token_seconds_bucket",
        "ragtrace_time_per_output_token_seconds_bucket",
        "ragtrace_request_duration_seconds_bucket",
        "ragtrace_retrieval_duration_seconds_bucket",
        "ragtrace_generation_duration_seconds_bucket",
        "ragtrace_traces_received_total",
        "ragtrace_spans_received_total",
        "ragtrace_traces_sampled_total",
        "ragtrace_traces_dropped_total",
        "ragtrace_evaluations_total",
        "ragtrace_otlp_requests_total",
        "ragtrace_queue_depth",
        "ragtrace_queue_oldest_age_seconds",
        "ragtrace_judge_calls_total",
        "ragtrace_judge_errors_total",
        "ragtrace_judge_tokens_total",
        "ragtrace_judge_cost_usd_total",
        "ragtrace_judge_latency_seconds_bucket",
    ):
        assert pinned in used, f"no panel shows {pinned}"


def test_metric_name_extraction():
    assert metric_names_in('sum by (le) (rate(foo_bucket{a="b:c"}[5m] offset 1h)) / on (x) bar') == {
        "foo_bucket",
        "bar",
    }
    assert metric_names_in('rate({__name__=~"a_total|b_total"}[1m]) > 0.2') == {"a_total", "b_total"}
    assert metric_names_in("group by (a) (x) * on (a) group_left (direction, le) y") == {"x", "y"}


def test_provisioning():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "ragtrace.yaml").read_text())
    by_type = {d["type"]: d for d in ds["datasources"]}
    prom, tempo = by_type["prometheus"], by_type["tempo"]
    assert prom["uid"] == "ragtrace-prometheus"
    dest = prom["jsonData"]["exemplarTraceIdDestinations"]
    assert dest[0] == {"name": "trace_id", "datasourceUid": tempo["uid"]}
    # exemplars also open the scored record in the collector's explorer (Grafana's ${__value.raw}, `$$`-escaped
    # from the provisioning's environment expansion, is the exemplar's trace id)
    assert prom["jsonData"]["exemplarTraceIdDestinations"][1:] == [
        {
            "name": "trace_id",
            "url": "${EXPLORER_URL}/explorer/records/$${__value.raw}",
            "urlDisplayLabel": "Record in the ragtrace explorer",
        }
    ]
    explorer = by_type[EXPLORER_DS_TYPE]
    assert explorer["uid"] == "ragtrace-explorer" and explorer["url"] == "${COLLECTOR_URL}"
    assert explorer["jsonData"]["allowedHosts"] == ["${COLLECTOR_URL}"]
    boards = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "ragtrace.yaml").read_text())
    assert boards["providers"][0]["type"] == "file"
    assert boards["providers"][0]["options"]["path"]

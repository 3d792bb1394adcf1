"""The quality dashboard's worst-records panels: their JSON query (Infinity datasource) against a real collector.

The panel's URL is taken from the generated dashboard, its template variables filled in as Grafana does for one
repeated panel (a single metric and pipeline) and a fixed time range, and sent over HTTP to a running
``ragtrace-collector serve`` fed by the example RAG app (``tests/support/explorer_stack.py``): the rows must be
that metric's results, worst first, each carrying the columns the panel reads and the path its link opens.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import yaml

from ragtrace_collector.explorer.query import PARAMS
from tests.grafana.promql import GRAFANA, explorer_panels, grafana_url, load_dashboards
from tests.support.explorer_stack import Fed, fed_collector

METRIC = "faithfulness"


def quality() -> dict:
    return next(d for d in load_dashboards() if d["uid"] == "ragtrace-quality")


def panel() -> dict:
    panels = explorer_panels(quality())
    assert len(panels) == 1, [p["title"] for p in panels]
    return panels[0]


def query() -> dict:
    (target,) = panel()["targets"]
    return target


def test_panel_is_a_worst_first_json_query_per_metric_and_pipeline():
    p, target = panel(), query()
    assert p["type"] == "table" and p["repeat"] == "pipeline"
    # inside the row repeated per metric, so $metric and $pipeline are single values there
    rows = [x for x in quality()["panels"] if x["type"] == "row"]
    repeated = next(r for r in rows if r.get("repeat") == "metric")
    assert p["gridPos"]["y"] > repeated["gridPos"]["y"]
    provisioned = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "ragtrace.yaml").read_text())
    uids = {d["uid"]: d["type"] for d in provisioned["datasources"]}
    assert uids[p["datasource"]["uid"]] == p["datasource"]["type"] == target["datasource"]["type"]
    url = urlsplit(target["url"])
    assert url.path == "/api/v1/records"
    params = dict(parse_qsl(url.query))
    assert set(params) <= set(PARAMS), set(params) - set(PARAMS)  # names the explorer's parser knows
    assert params["sort"] == "worst" and params["metric"] == "${metric}" and params["pipeline"] == "${pipeline}"
    assert params["since"] == "${__from:date:seconds}" and params["until"] == "${__to:date:seconds}"
    assert target["root_selector"] == "records"
    assert {c["selector"] for c in target["columns"]} >= {"score", "trace_id", "path", "question"}


def test_rows_link_to_the_record_page():
    links = {
        o["matcher"]["options"]: prop["value"]
        for o in panel()["fieldConfig"]["overrides"]
        for prop in o["properties"]
        if prop["id"] == "links"
    }
    assert set(links) == {"question", "trace_id"}
    for value in links.values():
        assert value[0]["url"] == "${explorer}${__data.fields.path}"
    variables = {v["name"]: v for v in quality()["templating"]["list"]}
    assert variables["explorer"]["type"] == "textbox" and variables["explorer"]["query"].startswith("http")


def test_grafana_url_interpolation():
    got = grafana_url(
        "/x?m=$metric&p=${pipeline}&s=${__from:date:seconds}&u=${__to}",
        {"metric": "a b", "pipeline": "q/a"},
        1_700_000_000_123,
        1_700_000_360_000,
    )
    assert got == "/x?m=a%20b&p=q%2Fa&s=1700000000&u=1700000360000"
    with pytest.raises(KeyError):
        grafana_url("/x?m=$nope", {}, 0, 0)


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    with fed_collector(tmp_path_factory.mktemp("worst-records")) as running:
        yield running


def _panel_rows(fed: Fed, pipeline: str, time_from: float, time_to: float) -> list[dict]:
    url = grafana_url(
        query()["url"], {"metric": METRIC, "pipeline": pipeline}, int(time_from * 1000), int(time_to * 1000)
    )
    response = httpx.get(fed.base + url, headers=fed.auth, timeout=10)
    assert response.status_code == 200, response.text
    rows = response.json()[query()["root_selector"]]
    assert isinstance(rows, list)
    return rows


@pytest.mark.integration
def test_panel_query_returns_the_worst_records_first(fed: Fed):
    everything = fed.api("/api/v1/records", limit=100).json()["records"]
    pipelines = {r["pipeline"] for r in everything}
    assert pipelines and None not in pipelines
    now = time.time()
    degraded = {fed.traces[name] for name, turn in fed.turns.items() if turn.degrade}
    seen = 0
    for pipeline in sorted(pipelines):
        rows = _panel_rows(fed, pipeline, now - 3600, now + 60)  # "last 1 hour", as a fixed range
        expected = [
            r
            for r in everything
            if r["pipeline"] == pipeline and any(s["metric"] == METRIC and s["status"] == "scored" for s in r["scores"])
        ]
        assert len(rows) == len(expected) > 0
        assert {r["trace_id"] for r in rows} == {r["trace_id"] for r in expected}
        scores = [r["score"] for r in rows]
        assert scores == sorted(scores), f"not worst first: {scores}"
        for row in rows:
            assert row["metric"] == METRIC and row["pipeline"] == pipeline and row["status"] == "scored"
            for column in query()["columns"]:
                assert column["selector"] in row, column
            assert row["path"] == f"/explorer/records/{row['trace_id']}"
        # the degraded turns (an invented claim) are the worst rows of their pipeline
        worst = [r["trace_id"] for r in rows[: len(degraded & {r["trace_id"] for r in rows})]]
        assert set(worst) <= degraded and min(scores) < max(scores)
        seen += len(rows)
        # the link of the worst row opens its record page
        page = httpx.get(fed.base + rows[0]["path"], headers=fed.auth, timeout=10)
        assert page.status_code == 200 and rows[0]["trace_id"] in page.text
    assert seen == len([r for r in everything if any(s["metric"] == METRIC for s in r["scores"])])


@pytest.mark.integration
def test_panel_query_keeps_to_the_dashboard_time_range(fed: Fed):
    pipeline = fed.api("/api/v1/records", limit=1).json()["records"][0]["pipeline"]
    now = time.time()
    assert _panel_rows(fed, pipeline, now - 3600, now + 60)
    assert _panel_rows(fed, pipeline, now - 7200, now - 3600) == []  # an hour ago: nothing scored yet
    assert _panel_rows(fed, pipeline, now + 60, now + 3600) == []

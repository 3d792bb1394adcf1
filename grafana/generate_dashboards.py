"""Writes the ragtrace Grafana dashboards (``grafana/dashboards/*.json``) from one description.

The JSON files are what Grafana loads and what users copy; this script keeps the three dashboards
consistent (same variables, datasource by uid, panel ids and layout) and is the place to edit them.
``tests/grafana/test_dashboards.py`` fails when the committed JSON and this script disagree.

    python3 grafana/generate_dashboards.py          # rewrite grafana/dashboards/*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}

# Selectors shared by every query; quality series carry the service too, so the service filter applies to
# scores. Scores keep their judge: a judge switch is not a quality change, so quality queries filter and
# group by judge rather than summing it away.
SP = 'service=~"$service", pipeline=~"$pipeline"'
P = 'pipeline=~"$pipeline"'
MP = 'metric=~"$metric", service=~"$service", pipeline=~"$pipeline", judge=~"$judge"'
# One quality series, as the recording rules group them.
SERIES = "metric, service, pipeline, judge"
# Alerts of the shipped rules, as Prometheus records them; alerts without a service or pipeline (collector-wide)
# always show.
ALERTS = 'ALERTS{alertname=~"Rag.*", alertstate="firing", service=~"$service|", pipeline=~"$pipeline|"}'
# The collector's records API through the Infinity plugin (grafana/provisioning/datasources: uid ragtrace-explorer).
EXPLORER_DS = {"type": "yesoreyeram-infinity-datasource", "uid": "ragtrace-explorer"}
# The worst-records panels' query: Grafana fills in the repeated metric and pipeline and the dashboard's time
# range in unix seconds (the API's since/until); rows are the records' results of that metric, worst first.
WORST_RECORDS_URL = (
    "/api/v1/records?sort=worst&outcome=scored&metric=${metric}&pipeline=${pipeline}"
    "&since=${__from:date:seconds}&until=${__to:date:seconds}&limit=20"
)


# --- variables -----------------------------------------------------------------------------------
def _datasource_var() -> dict:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def _query_var(name: str, label: str, query: str, multi: bool = True) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "includeAll": True,
        "multi": multi,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "hide": 0,
        "regex": "",
        "options": [],
    }


def _custom_var(name: str, label: str, values: list[str], default: str, description: str) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "custom",
        "description": description,
        "query": ",".join(values),
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "multi": False,
        "includeAll": False,
        "hide": 0,
    }


def common_variables() -> list[dict]:
    return [
        _datasource_var(),
        _query_var("service", "Service", "label_values(ragtrace_request_duration_seconds_count, service)"),
        _query_var(
            "pipeline",
            "Pipeline",
            'label_values(ragtrace_request_duration_seconds_count{service=~"$service"}, pipeline)',
        ),
    ]


# --- panels --------------------------------------------------------------------------------------
class Layout:
    """Assigns panel ids and grid positions left to right, top to bottom (24 columns)."""

    def __init__(self) -> None:
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_height = 0

    def place(self, panel: dict, w: int, h: int) -> dict:
        if self.x + w > 24:
            self.newline()
        panel["id"] = self.next_id
        self.next_id += 1
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_height = max(self.row_height, h)
        return panel

    def newline(self) -> None:
        self.y += self.row_height
        self.x = 0
        self.row_height = 0

    def row(self, title: str, repeat: str | None = None) -> dict:
        self.newline()
        panel = {"type": "row", "title": title, "collapsed": False, "panels": []}
        if repeat:
            panel["repeat"] = repeat
        placed = self.place(panel, 24, 1)
        self.newline()
        return placed


def target(
    expr: str,
    legend: str = "",
    ref: str = "A",
    *,
    instant: bool = False,
    exemplar: bool = False,
    fmt: str = "time_series",
) -> dict:
    return {
        "refId": ref,
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "exemplar": exemplar,
        "format": fmt,
        "editorMode": "code",
    }


def timeseries(
    title: str,
    targets: list[dict],
    *,
    unit: str = "short",
    description: str = "",
    minimum: float | None = None,
    maximum: float | None = None,
    overrides: list | None = None,
    stack: bool = False,
    legend: str = "bottom",
) -> dict:
    defaults: dict = {
        "unit": unit,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 2,
            "fillOpacity": 10,
            "showPoints": "never",
            "spanNulls": True,
            "stacking": {"mode": "normal" if stack else "none", "group": "A"},
        },
    }
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "table", "placement": legend, "calcs": ["lastNotNull", "mean"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def sample_size_override(ref: str) -> list[dict]:
    """Sample-size series of a mean panel: bars on a right-hand axis, so n sits beside the mean."""
    return [
        {
            "matcher": {"id": "byFrameRefID", "options": ref},
            "properties": [
                {"id": "custom.axisPlacement", "value": "right"},
                {"id": "custom.drawStyle", "value": "bars"},
                {"id": "custom.fillOpacity", "value": 30},
                {"id": "unit", "value": "short"},
                {"id": "min", "value": 0},
                {"id": "custom.axisLabel", "value": "records scored (n)"},
            ],
        }
    ]


def score_axis(*refs: str) -> list[dict]:
    """Score series of a panel: a fixed 0-1 axis, so 0.9 and 0.5 look as far apart on every panel."""
    return [
        {
            "matcher": {"id": "byFrameRefID", "options": ref},
            "properties": [{"id": "min", "value": 0}, {"id": "max", "value": 1}, {"id": "unit", "value": "none"}],
        }
        for ref in refs
    ]


def threshold_line(ref: str) -> list[dict]:
    """The alert threshold of a score panel: a dashed red line on the score axis."""
    return [
        {
            "matcher": {"id": "byFrameRefID", "options": ref},
            "properties": [
                {"id": "min", "value": 0},
                {"id": "max", "value": 1},
                {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                {"id": "custom.fillOpacity", "value": 0},
                {"id": "custom.lineWidth", "value": 1},
            ],
        }
    ]


def heatmap(title: str, expr: str, description: str) -> dict:
    return {
        "type": "heatmap",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target(expr, "{{le}}", fmt="heatmap")],
        "fieldConfig": {"defaults": {"custom": {"scaleDistribution": {"type": "linear"}}}, "overrides": []},
        "options": {
            "calculate": False,
            "yAxis": {"unit": "none", "decimals": 2, "axisLabel": "score"},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "RdYlGn", "reverse": True, "steps": 64},
            "rowsFrame": {"layout": "le"},
            "tooltip": {"show": True, "yHistogram": True},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
        },
    }


def table(
    title: str, targets: list[dict], description: str, rename: dict[str, str], sort_by: str, desc: bool = False
) -> dict:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}},
            {"id": "sortBy", "options": {"sort": [{"field": sort_by, "desc": desc}]}},
        ],
        "fieldConfig": {
            "defaults": {"decimals": 2, "custom": {"align": "auto"}},
            "overrides": [
                {
                    "matcher": {"id": "byName", "options": rename.get("Value #B", "n")},
                    "properties": [{"id": "decimals", "value": 0}],
                },
                {
                    "matcher": {"id": "byName", "options": rename.get("Value #C", "share")},
                    "properties": [{"id": "unit", "value": "percentunit"}],
                },
            ],
        },
        "options": {"showHeader": True, "footer": {"show": False}},
    }


def quantiles(metric: str, sel: str, by: str = "") -> list[dict]:
    """p50/p90/p99 of a histogram; the p99 query carries exemplars (trace links)."""
    group = f"le{', ' + by if by else ''}"
    legend_suffix = f" {{{{{by}}}}}" if by else ""
    out = []
    for ref, q in (("A", "0.5"), ("B", "0.9"), ("C", "0.99")):
        selector = f"{{{sel}}}" if sel else ""
        expr = f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{selector}[$__rate_interval])))"
        out.append(target(expr, f"p{round(float(q) * 100)}{legend_suffix}", ref, exemplar=(ref == "C")))
    return out


def explorer_variable() -> dict:
    """Where the browser reaches the collector's records explorer: the worst-records rows link there."""
    default = "http://localhost:9464"
    return {
        "name": "explorer",
        "label": "Explorer URL",
        "type": "textbox",
        "description": "The collector's metrics listener as your browser reaches it (the records explorer's pages).",
        "query": default,
        "current": {"selected": False, "text": default, "value": default},
        "options": [{"selected": True, "text": default, "value": default}],
        "hide": 0,
    }


def worst_records(title: str) -> dict:
    """The worst records of the repeated metric, one table per pipeline, from the collector's JSON API
    (Infinity datasource, :data:`WORST_RECORDS_URL`); each row opens its record page in the explorer."""
    columns = [
        ("score", "score", "number"),
        ("time_iso", "time", "timestamp"),
        ("service", "service", "string"),
        ("judge", "judge", "string"),
        ("question", "question", "string"),
        ("trace_id", "trace_id", "string"),
        ("path", "path", "string"),
    ]
    link = [{"title": "Open the record in the ragtrace explorer", "url": "${explorer}${__data.fields.path}"}]
    return {
        "type": "table",
        "title": title,
        "description": "The records of this metric and pipeline scored in the dashboard's time range, worst first "
        "(the collector's /api/v1/records?sort=worst, through the Infinity datasource ragtrace-explorer). Click a "
        "question or trace id to open the record: its claims and verdicts, contexts, judge's reasons and latencies "
        "(the Explorer URL variable says where your browser reaches the collector).",
        "datasource": EXPLORER_DS,
        "repeat": "pipeline",
        "repeatDirection": "h",
        "maxPerRow": 2,
        "targets": [
            {
                "refId": "A",
                "datasource": EXPLORER_DS,
                "type": "json",
                "source": "url",
                "parser": "backend",
                "format": "table",
                "url": WORST_RECORDS_URL,
                "url_options": {"method": "GET", "data": ""},
                "root_selector": "records",
                "columns": [{"selector": sel, "text": text, "type": kind} for sel, text, kind in columns],
                "filters": [],
            }
        ],
        "fieldConfig": {
            "defaults": {"custom": {"align": "auto"}, "noValue": "no scored record in this time range"},
            "overrides": [
                {"matcher": {"id": "byName", "options": "score"}, "properties": [{"id": "decimals", "value": 2}]},
                {"matcher": {"id": "byName", "options": "question"}, "properties": [{"id": "links", "value": link}]},
                {"matcher": {"id": "byName", "options": "trace_id"}, "properties": [{"id": "links", "value": link}]},
                {
                    "matcher": {"id": "byName", "options": "path"},
                    "properties": [{"id": "custom.hidden", "value": True}],
                },
            ],
        },
        "options": {"showHeader": True, "footer": {"show": False}},
    }


def alert_annotations() -> dict:
    """The shipped alerts as annotations (from Prometheus's ALERTS series): when each fired, on every panel."""
    return {
        "name": "ragtrace alerts",
        "datasource": DS,
        "enable": True,
        "hide": False,
        "iconColor": "red",
        "expr": ALERTS,
        "step": "60s",
        "titleFormat": "{{alertname}}",
        "textFormat": "{{severity}} {{metric}} {{service}} {{pipeline}} {{judge}}",
        "tagKeys": "severity,service,pipeline,metric",
        "useValueForTime": False,
    }


# An alert's runbook, as the collector serves it (collector/ragtrace_collector/explorer/runbooks.py); the alerts'
# own runbook_url annotations are the same path on Prometheus's ragtrace_url external label.
RUNBOOK_URL = "${explorer}/runbooks/${__value.raw}"


def alert_list(title: str) -> dict:
    """Firing ragtrace alerts, from Prometheus's ALERTS series (works without Grafana-managed alerting)."""
    return {
        "type": "table",
        "title": title,
        "description": "Alerts of grafana/prometheus/rules firing now (Prometheus's ALERTS series), pages first. "
        "Click an alert's name for its runbook, served by the collector at /runbooks/<alertname> (the Explorer URL "
        "variable says where your browser reaches it).",
        "datasource": DS,
        "targets": [
            target(
                f"count by (alertname, severity, service, pipeline, metric, judge) ({ALERTS})",
                ref="A",
                instant=True,
                fmt="table",
            )
        ],
        "transformations": [
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True, "Value": True},
                    "indexByName": {
                        "severity": 0,
                        "alertname": 1,
                        "service": 2,
                        "pipeline": 3,
                        "metric": 4,
                        "judge": 5,
                    },
                },
            },
            {"id": "sortBy", "options": {"sort": [{"field": "severity", "desc": False}]}},
        ],
        "fieldConfig": {
            "defaults": {"custom": {"align": "auto"}, "noValue": "no ragtrace alert firing"},
            "overrides": [
                {
                    "matcher": {"id": "byName", "options": "alertname"},
                    "properties": [{"id": "links", "value": [{"title": "Runbook", "url": RUNBOOK_URL}]}],
                }
            ],
        },
        "options": {"showHeader": True, "footer": {"show": False}},
    }


# --- dashboards ----------------------------------------------------------------------------------
def dashboard(uid: str, title: str, description: str, panels: list[dict], variables: list[dict]) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["ragtrace"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                alert_annotations(),
            ]
        },
        "links": [
            {
                "type": "dashboards",
                "tags": ["ragtrace"],
                "asDropdown": False,
                "includeVars": True,
                "keepTime": True,
                "title": "ragtrace",
            }
        ],
        "templating": {"list": variables},
        "panels": panels,
    }


def mean_expr(sel: str, window: str, by: str) -> str:
    return (
        f"sum by ({by}) (rate(ragtrace_eval_score_sum{{{sel}}}[{window}]))\n  /\n"
        f"sum by ({by}) (rate(ragtrace_eval_score_count{{{sel}}}[{window}]))"
    )


def count_expr(sel: str, window: str, by: str) -> str:
    return f"sum by ({by}) (increase(ragtrace_eval_score_count{{{sel}}}[{window}]))"


def wrong_side_expr(sel: str, window: str, by: str) -> str:
    """Share of records on the wrong side of their alert threshold, direction-aware.

    The threshold comes from the rules' table (ragtrace:eval_score:threshold, with its score bucket as
    ``le``): higher-is-better metrics count the records at or under it, lower-is-better ones (hallucination)
    the records above it.
    """
    match = "and on (metric, service, pipeline, judge"

    def share(direction: str) -> str:
        t = f'ragtrace:eval_score:threshold{{{sel}, direction="{direction}"}}'
        return (
            f"sum by ({by}) (rate(ragtrace_eval_score_bucket{{{sel}}}[{window}]) {match}, le) {t})\n  /\n"
            f"sum by ({by}) (rate(ragtrace_eval_score_count{{{sel}}}[{window}]) {match}) {t})"
        )

    return f"(\n{share('higher_is_better')}\n)\nor\n(\n1 - (\n{share('lower_is_better')}\n)\n)"


def threshold_expr(sel: str, by: str) -> str:
    return f"max by ({by}) (ragtrace:eval_score:threshold{{{sel}}})"


# Judge vs human reviewers, as the collector exports it (review/metrics.py): the random sample's figures are the
# honest estimate. Collectors sharing a store report the same figures: max by, not sum.
AGREE = 'metric=~"$metric", judge=~"$judge", population="sample"'


def agreement_expr(statistic: str, sel: str = AGREE) -> str:
    return f'max by (metric, judge) (ragtrace_judge_agreement{{{sel}, statistic="{statistic}"}})'


def judge_agreement_panels(lay: Layout) -> list[dict]:
    """A row of the quality dashboard: how far the judge's calls agree with the reviewers (the explorer's
    /explorer/agreement), kappa over time with its interval, and the figures per metric and judge."""
    legend = "{{metric}} ({{judge}})"
    figures = [
        ("A", "kappa", "kappa"),
        ("B", "kappa_low", "kappa low"),
        ("C", "kappa_high", "kappa high"),
        ("D", "balanced_accuracy", "balanced accuracy"),
        ("E", "auroc", "AUROC"),
        ("F", "best_threshold", "best threshold"),
        ("G", "reviewed", "reviewed"),
    ]
    table_panel = {
        "type": "table",
        "title": "Judge vs reviewers (random sample): agreement per metric and judge",
        "description": 'From ragtrace_judge_agreement{population="sample"}: the reviews of the review queue\'s '
        "uniform random sample, the honest estimate. The judge's call is its score against the alert threshold; "
        "kappa with its 95% bootstrap interval; AUROC of the score against the reviewers' label; the best "
        "threshold is the observed score that would agree best (balanced accuracy). Details and the confusion "
        "matrix: the explorer's /explorer/agreement page.",
        "datasource": DS,
        "targets": [target(agreement_expr(stat), ref=ref, instant=True, fmt="table") for ref, stat, _ in figures],
        "transformations": [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "renameByName": {f"Value #{ref}": name for ref, _, name in figures},
                },
            },
            {"id": "sortBy", "options": {"sort": [{"field": "kappa", "desc": False}]}},
        ],
        "fieldConfig": {
            "defaults": {"decimals": 2, "custom": {"align": "auto"}, "noValue": "no reviews yet"},
            "overrides": [
                {"matcher": {"id": "byName", "options": "reviewed"}, "properties": [{"id": "decimals", "value": 0}]},
                {
                    "matcher": {"id": "byName", "options": "kappa"},
                    "properties": [
                        {"id": "custom.cellOptions", "value": {"type": "color-background"}},
                        {
                            "id": "thresholds",
                            "value": {
                                "mode": "absolute",
                                "steps": [
                                    {"color": "red", "value": None},
                                    {"color": "yellow", "value": 0.4},
                                    {"color": "green", "value": 0.6},
                                ],
                            },
                        },
                    ],
                },
            ],
        },
        "options": {"showHeader": True, "footer": {"show": False}},
    }
    return [
        lay.row("Judge vs reviewers"),
        lay.place(
            timeseries(
                "Cohen's kappa of the judge against the reviewers, with its 95% interval (random sample)",
                [
                    target(agreement_expr("kappa"), legend, "A"),
                    target(agreement_expr("kappa_low"), f"low: {legend}", "B"),
                    target(agreement_expr("kappa_high"), f"high: {legend}", "C"),
                    target(agreement_expr("reviewed"), f"n: {legend}", "D"),
                ],
                description="Agreement beyond chance of the judge's calls (score against the alert threshold) with "
                "the reviewers' verdicts, over the random sample's reviews of the last review.agreement_window_days; "
                "the interval is a bootstrap's. Under 0.4 with at least 30 reviews for 30m, RagJudgeDisagrees warns. "
                "Bars: reviewed records (n).",
                minimum=-1,
                maximum=1,
                overrides=sample_size_override("D"),
            ),
            12,
            8,
        ),
        lay.place(table_panel, 12, 8),
    ]


def quality_dashboard() -> dict:
    lay = Layout()
    panels: list[dict] = []
    variables = common_variables() + [
        _query_var(
            "metric",
            "Metric",
            'label_values(ragtrace_eval_score_count{service=~"$service", pipeline=~"$pipeline"}, metric)',
        ),
        _query_var(
            "judge",
            "Judge",
            'label_values(ragtrace_eval_score_count{service=~"$service", pipeline=~"$pipeline"}, judge)',
        ),
        _custom_var(
            "window",
            "Mean over",
            ["5m", "15m", "1h", "6h", "1d"],
            "1h",
            "Window of the means and shares; the alerts use 5m and 1h (see the baseline panel).",
        ),
        explorer_variable(),
    ]
    panels.append(lay.row("Overview"))
    panels.append(lay.place(alert_list("Firing alerts"), 8, 10))
    panels.append(
        lay.place(
            table(
                "Worst first: share of records on the wrong side of the threshold (over $window)",
                [
                    target(wrong_side_expr(MP, "$window", SERIES), ref="A", instant=True, fmt="table"),
                    target(mean_expr(MP, "$window", SERIES), ref="B", instant=True, fmt="table"),
                    target(count_expr(MP, "$window", SERIES), ref="C", instant=True, fmt="table"),
                    target(threshold_expr(MP, SERIES), ref="D", instant=True, fmt="table"),
                ],
                "Per metric, service, pipeline and judge: the share of records on the wrong side of the alert "
                "threshold "
                "(under it, or above it for hallucination, where lower is better), the mean score, the number "
                "of records it rests on (n) and the threshold (grafana/prometheus/rules: the thresholds table).",
                {"Value #A": "wrong side", "Value #B": "mean", "Value #C": "n", "Value #D": "threshold"},
                "wrong side",
                desc=True,
            ),
            16,
            10,
        )
    )

    panels.extend(judge_agreement_panels(lay))

    panels.append(lay.row("$metric", repeat="metric"))
    msel = MP
    by = "service, pipeline, judge"
    legend = "{{service}}/{{pipeline}} ({{judge}})"
    panels.append(
        lay.place(
            timeseries(
                "Mean $metric per pipeline (over $window), with n",
                [
                    target(mean_expr(msel, "$window", by), legend, "A"),
                    target(count_expr(msel, "$window", by), f"n: {legend}", "B"),
                    target(
                        f"sum by ({by}) (rate(ragtrace_eval_weighted_score_total{{{msel}}}[$window]))\n  /\n"
                        f"sum by ({by}) (rate(ragtrace_eval_weight_total{{{msel}}}[$window]))",
                        f"traffic-weighted: {legend}",
                        "C",
                    ),
                    target(threshold_expr(msel, by), f"threshold: {legend}", "D"),
                ],
                description="rate(_sum)/rate(_count) of ragtrace_eval_score: the mean score of the records scored "
                "in the window. Traffic-weighted: each record weighted by 1 / its sampling probability "
                "(differs when always-sample rules over-represent some records). Bars: records scored "
                "in the window (n). Dashed: the alert threshold (the rules' thresholds table).",
                overrides=score_axis("A", "C") + threshold_line("D") + sample_size_override("B"),
            ),
            12,
            9,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "What the alerts compare: $metric, 5m and 1h means against the baseline and the threshold",
                [
                    target("ragtrace:eval_score:mean5m{" + msel + "}", f"5m: {legend}", "A"),
                    target("ragtrace:eval_score:mean1h{" + msel + "}", f"1h: {legend}", "B"),
                    target("ragtrace:eval_score:mean7d{" + msel + "}", f"baseline: {legend}", "C"),
                    target("ragtrace:eval_score:threshold{" + msel + "}", f"threshold: {legend}", "D"),
                    target("ragtrace:eval_score:count1h{" + msel + "}", f"n (1h): {legend}", "E"),
                ],
                description="The recording rules the alerts read: the fast (5m) and slow (1h) means, each used "
                "only with at least 20 records in its window; the baseline (7 days before the last hour); the "
                "threshold. Needs grafana/prometheus/rules loaded in Prometheus.",
                overrides=score_axis("A", "B", "C") + threshold_line("D") + sample_size_override("E"),
                legend="right",
            ),
            12,
            9,
        )
    )
    panels.append(
        lay.place(
            heatmap(
                "Distribution of $metric",
                f"sum by (le) (increase(ragtrace_eval_score_bucket{{{msel}}}[$__rate_interval]))",
                "Records per score bucket over time (buckets every 0.05).",
            ),
            12,
            9,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Share of records on the wrong side of the threshold",
                [
                    target(wrong_side_expr(msel, "$window", by), legend, "A"),
                    target(count_expr(msel, "$window", by), f"n: {legend}", "B"),
                ],
                unit="percentunit",
                minimum=0,
                maximum=1,
                description="Fraction of scored records at or under the alert threshold, or above it where lower "
                "is better (hallucination). Thresholds: the rules' thresholds table.",
                overrides=sample_size_override("B"),
            ),
            12,
            9,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Scores with trace links (median and exemplars)",
                [
                    target(
                        f"histogram_quantile(0.5, sum by (le, {by}) "
                        f"(rate(ragtrace_eval_score_bucket{{{msel}}}[$__rate_interval])))",
                        f"median: {legend}",
                        "A",
                        exemplar=True,
                    ),
                    target(count_expr(msel, "$__rate_interval", by), f"n: {legend}", "B"),
                    target(threshold_expr(msel, by), f"threshold: {legend}", "C"),
                ],
                description="Each exemplar dot is one scored record; click it to open its trace (trace_id) in "
                "Tempo or the record in the ragtrace explorer (the Prometheus datasource's exemplar links: "
                "grafana/provisioning/datasources, EXPLORER_URL).",
                overrides=score_axis("A") + threshold_line("C") + sample_size_override("B"),
            ),
            24,
            9,
        )
    )
    panels.append(lay.place(worst_records("Worst $metric records of $pipeline"), 24, 9))
    return dashboard(
        "ragtrace-quality",
        "ragtrace / RAG quality",
        "Scores of sampled RAG records per metric, pipeline and judge.",
        panels,
        variables,
    )


def latency_dashboard() -> dict:
    lay = Layout()
    panels: list[dict] = []
    panels.append(lay.row("Streaming"))
    panels.append(
        lay.place(
            timeseries(
                "Time to first token",
                quantiles("ragtrace_time_to_first_token_seconds", SP),
                unit="s",
                description="The alert RagTTFTSLO fires when p95 > 2s.",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries("Time per output token", quantiles("ragtrace_time_per_output_token_seconds", SP), unit="s"),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Time to first token p90 per pipeline",
                [
                    target(
                        "histogram_quantile(0.9, sum by (le, pipeline) "
                        f"(rate(ragtrace_time_to_first_token_seconds_bucket{{{SP}}}[$__rate_interval])))",
                        "{{pipeline}}",
                        exemplar=True,
                    )
                ],
                unit="s",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Requests per second",
                [
                    target(
                        f"sum by (pipeline) (rate(ragtrace_request_duration_seconds_count{{{SP}}}[$__rate_interval]))",
                        "{{pipeline}}",
                    )
                ],
                unit="reqps",
            ),
            12,
            8,
        )
    )
    panels.append(lay.row("Durations"))
    for title, metric in (
        ("Request duration", "ragtrace_request_duration_seconds"),
        ("Retrieval duration", "ragtrace_retrieval_duration_seconds"),
        ("Generation duration", "ragtrace_generation_duration_seconds"),
    ):
        panels.append(lay.place(timeseries(title, quantiles(metric, SP), unit="s"), 8, 8))
    panels.append(lay.row("Tokens"))
    panels.append(
        lay.place(
            timeseries(
                "Tokens per second by kind",
                [target(f"sum by (kind) (rate(ragtrace_tokens_total{{{SP}}}[$__rate_interval]))", "{{kind}}")],
                unit="short",
                stack=True,
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Tokens per request (p50, p90) by kind",
                [
                    target(
                        "histogram_quantile(0.5, sum by (le, kind) "
                        f"(rate(ragtrace_request_tokens_bucket{{{SP}}}[$__rate_interval])))",
                        "p50 {{kind}}",
                        "A",
                    ),
                    target(
                        "histogram_quantile(0.9, sum by (le, kind) "
                        f"(rate(ragtrace_request_tokens_bucket{{{SP}}}[$__rate_interval])))",
                        "p90 {{kind}}",
                        "B",
                    ),
                ],
                unit="short",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Tokens per second by model",
                [target(f"sum by (model) (rate(ragtrace_tokens_total{{{SP}}}[$__rate_interval]))", "{{model}}")],
                unit="short",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Failed requests per second",
                [
                    target(
                        f"sum by (pipeline) (rate(ragtrace_records_with_error_total{{{SP}}}[$__rate_interval]))",
                        "{{pipeline}}",
                    )
                ],
                unit="reqps",
            ),
            12,
            8,
        )
    )
    return dashboard(
        "ragtrace-latency",
        "ragtrace / Latency",
        "Latency and tokens of every traced RAG request, sampled or not.",
        panels,
        common_variables(),
    )


def health_dashboard() -> dict:
    lay = Layout()
    panels: list[dict] = []
    panels.append(lay.row("Ingest"))
    panels.append(
        lay.place(
            timeseries(
                "Traces received and sampled per second",
                [
                    target(
                        f"sum by (pipeline) (rate(ragtrace_traces_received_total{{{SP}}}[$__rate_interval]))",
                        "received: {{pipeline}}",
                        "A",
                    ),
                    target(
                        f"sum by (pipeline) (rate(ragtrace_traces_sampled_total{{{P}}}[$__rate_interval]))",
                        "sampled: {{pipeline}}",
                        "B",
                    ),
                ],
                unit="ops",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Not sampled, by reason",
                [
                    target(
                        f"sum by (reason) (rate(ragtrace_traces_dropped_total{{{P}}}[$__rate_interval]))", "{{reason}}"
                    )
                ],
                unit="ops",
                stack=True,
                description="Records not scored: rate (sampling), budget_records, budget_tokens, queue_full...",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Spans received per second",
                [target("sum by (transport) (rate(ragtrace_spans_received_total[$__rate_interval]))", "{{transport}}")],
                unit="ops",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "OTLP requests by status",
                [
                    target(
                        "sum by (transport, status) (rate(ragtrace_otlp_requests_total[$__rate_interval]))",
                        "{{transport}}: {{status}}",
                    )
                ],
                unit="reqps",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Traces in assembly",
                [
                    target("sum(ragtrace_assembly_inflight_traces)", "in flight", "A"),
                    target("sum(rate(ragtrace_late_spans_total[$__rate_interval]))", "late spans/s", "B"),
                ],
                unit="short",
            ),
            8,
            8,
        )
    )
    panels.append(lay.row("Queue"))
    panels.append(
        lay.place(
            timeseries(
                "Queue depth",
                [target("max(ragtrace_queue_depth)", "records queued")],
                unit="short",
                description="max across instances: with the Redis queue every instance reports the same stream.",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Age of the oldest queued record",
                [target("max(ragtrace_queue_oldest_age_seconds)", "oldest")],
                unit="s",
                description="The alert RagQueueBacklog fires above 15 minutes.",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Dropped by a full queue (per second)",
                [target("sum(rate(ragtrace_queue_dropped_total[$__rate_interval]))", "dropped")],
                unit="ops",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Held by receivers that cannot write to Redis",
                [target("max by (instance) (ragtrace_queue_local_buffer_records)", "{{instance}}")],
                unit="short",
                description="Redis queue only: sampled records in each receiver's spill file, sent when Redis takes writes again (down, full, read-only, unable to persist or refusing its user); "
                "beyond its bound (?buffer=N) new ones are shed. The alert RagQueueRedisUnreachable fires after 5 minutes.",
            ),
            24,
            6,
        )
    )
    panels.append(lay.row("Judge"))
    panels.append(
        lay.place(
            timeseries(
                "Evaluations by outcome",
                [
                    target(
                        "sum by (metric, outcome) (rate(ragtrace_evaluations_total[$__rate_interval]))",
                        "{{metric}}: {{outcome}}",
                    )
                ],
                unit="ops",
                stack=True,
            ),
            12,
            8,
        )
    )
    # Judges seen by their decisions (every judge times each decision); the embedded judge makes no
    # remote calls and spends no tokens or money, so those panels show it at 0 rather than empty.
    active = "sum by (judge) (rate(ragtrace_judge_latency_seconds_count[$__rate_interval])) * 0"
    panels.append(
        lay.place(
            timeseries(
                "Judge decisions, calls and errors per second",
                [
                    target(
                        "sum by (judge) (rate(ragtrace_judge_latency_seconds_count[$__rate_interval]))",
                        "{{judge}}: decisions",
                        "A",
                    ),
                    target(
                        "sum by (judge) (rate(ragtrace_judge_calls_total[$__rate_interval]))\n"
                        f"  or on (judge)\n{active}",
                        "{{judge}}: calls",
                        "B",
                    ),
                    target(
                        "sum by (judge, kind) (rate(ragtrace_judge_errors_total[$__rate_interval]))\n"
                        f'  or on (judge)\nlabel_replace({active}, "kind", "no", "", "")',
                        "{{judge}}: {{kind}} errors",
                        "C",
                    ),
                ],
                unit="ops",
                description="Decisions: judge method calls (timed); calls: model requests; errors by kind "
                "(unavailable: records wait; failed: input cannot be judged; call: retried).",
            ),
            12,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries("Judge decision latency", quantiles("ragtrace_judge_latency_seconds", "", by="judge"), unit="s"),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Judge tokens per second",
                [
                    target(
                        "sum by (judge, kind) (rate(ragtrace_judge_tokens_total[$__rate_interval]))\n"
                        f'  or on (judge)\nlabel_replace({active}, "kind", "no", "", "")',
                        "{{judge}}: {{kind}} tokens",
                    )
                ],
                unit="short",
                description="The embedded judge spends no tokens and shows 0.",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Judge cost (USD per hour)",
                [
                    target(
                        "sum by (judge) (rate(ragtrace_judge_cost_usd_total[$__rate_interval])) * 3600\n"
                        f"  or on (judge)\n{active}",
                        "{{judge}}",
                    )
                ],
                unit="currencyUSD",
                description="The embedded judge costs nothing and shows 0.",
            ),
            8,
            8,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Records scored and released per second",
                [
                    target(
                        f"sum by (pipeline) (rate(ragtrace_records_scored_total{{{P}}}[$__rate_interval]))",
                        "scored: {{pipeline}}",
                        "A",
                    ),
                    target(
                        "sum by (reason) (rate(ragtrace_records_released_total[$__rate_interval]))\n"
                        "  or on ()\nlabel_replace(sum(rate(ragtrace_records_scored_total[$__rate_interval])) * 0,"
                        ' "reason", "none yet", "", "")',
                        "released: {{reason}}",
                        "B",
                    ),
                ],
                unit="ops",
                description="Released: handed back to the queue unscored (judge unavailable, shutdown).",
            ),
            24,
            8,
        )
    )
    return dashboard(
        "ragtrace-health",
        "ragtrace / Collector and judge health",
        "What the collector receives, samples, queues and spends on judging.",
        panels,
        common_variables(),
    )


DASHBOARDS = {
    "ragtrace-quality.json": quality_dashboard,
    "ragtrace-latency.json": latency_dashboard,
    "ragtrace-health.json": health_dashboard,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: json.dumps(build(), indent=2) + "\n" for name, build in DASHBOARDS.items()}


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT_DIR / name).write_text(text)
        print(f"wrote {OUT_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

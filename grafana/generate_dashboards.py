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

# Selectors shared by every query; quality series carry no service label, so the pipeline variable
# (itself filtered by service) is what narrows them.
SP = 'service=~"$service", pipeline=~"$pipeline"'
P = 'pipeline=~"$pipeline"'
MP = 'metric=~"$metric", pipeline=~"$pipeline"'


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
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "mean"]},
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


def table(title: str, targets: list[dict], description: str, rename: dict[str, str], sort_by: str) -> dict:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": rename}},
            {"id": "sortBy", "options": {"sort": [{"field": sort_by, "desc": False}]}},
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
                }
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


def share_below_expr(sel: str, window: str, by: str) -> str:
    return (
        f'sum by ({by}) (rate(ragtrace_eval_score_bucket{{{sel}, le="$threshold"}}[{window}]))\n  /\n'
        f"sum by ({by}) (rate(ragtrace_eval_score_count{{{sel}}}[{window}]))"
    )


def quality_dashboard() -> dict:
    lay = Layout()
    panels: list[dict] = []
    variables = common_variables() + [
        _query_var("metric", "Metric", 'label_values(ragtrace_eval_score_count{pipeline=~"$pipeline"}, metric)'),
        _custom_var(
            "window",
            "Mean over",
            ["5m", "15m", "1h", "6h", "1d"],
            "1h",
            "Window of the means and shares; the alert rules use 1h.",
        ),
        _custom_var(
            "threshold",
            "Alert threshold",
            ["0.5", "0.7", "0.8", "0.9"],
            "0.7",
            "Score under which a record counts as bad (a bucket edge of ragtrace_eval_score).",
        ),
    ]
    panels.append(lay.row("Overview"))
    panels.append(
        lay.place(
            table(
                "Worst pipelines (mean over $window, lowest first)",
                [
                    target(mean_expr(MP, "$window", "metric, pipeline"), ref="A", instant=True, fmt="table"),
                    target(count_expr(MP, "$window", "metric, pipeline"), ref="B", instant=True, fmt="table"),
                    target(share_below_expr(MP, "$window", "metric, pipeline"), ref="C", instant=True, fmt="table"),
                ],
                "Mean score per metric and pipeline, the number of records it rests on (n), and the share of "
                "records under the threshold. Hallucination is the one metric where higher is worse.",
                {"Value #A": "mean", "Value #B": "n", "Value #C": "share under threshold"},
                "mean",
            ),
            12,
            10,
        )
    )
    panels.append(
        lay.place(
            timeseries(
                "Mean vs 7-day baseline (recording rules)",
                [
                    target("ragtrace:eval_score:mean1h{" + MP + "}", "1h mean {{metric}} {{pipeline}}", "A"),
                    target("ragtrace:eval_score:mean7d{" + MP + "}", "7d baseline {{metric}} {{pipeline}}", "B"),
                    target("ragtrace:eval_score:count1h{" + MP + "}", "n (1h) {{metric}} {{pipeline}}", "C"),
                ],
                description="What the alerts compare: the recorded 1h mean, its 7-day baseline, and the records "
                "the mean rests on. Needs grafana/prometheus/rules loaded in Prometheus.",
                minimum=0,
                overrides=sample_size_override("C"),
            ),
            12,
            10,
        )
    )

    panels.append(lay.row("$metric", repeat="metric"))
    msel = 'metric=~"$metric", pipeline=~"$pipeline"'
    panels.append(
        lay.place(
            timeseries(
                "Mean $metric per pipeline (over $window), with n",
                [
                    target(mean_expr(msel, "$window", "pipeline"), "{{pipeline}}", "A"),
                    target(count_expr(msel, "$window", "pipeline"), "n {{pipeline}}", "B"),
                    target(
                        f"sum by (pipeline) (rate(ragtrace_eval_weighted_score_total{{{msel}}}[$window]))\n  /\n"
                        f"sum by (pipeline) (rate(ragtrace_eval_weight_total{{{msel}}}[$window]))",
                        "traffic-weighted {{pipeline}}",
                        "C",
                    ),
                ],
                description="rate(_sum)/rate(_count) of ragtrace_eval_score: the mean score of the records scored "
                "in the window. Traffic-weighted: each record weighted by 1 / its sampling probability "
                "(differs when always-sample rules over-represent some records). Bars: records scored "
                "in the window (n).",
                minimum=0,
                overrides=sample_size_override("B"),
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
                "Share of records under $threshold",
                [
                    target(share_below_expr(msel, "$window", "pipeline"), "{{pipeline}}", "A"),
                    target(count_expr(msel, "$window", "pipeline"), "n {{pipeline}}", "B"),
                ],
                unit="percentunit",
                minimum=0,
                description="Fraction of scored records whose score is at or under the threshold.",
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
                        f"histogram_quantile(0.5, sum by (le, pipeline) "
                        f"(rate(ragtrace_eval_score_bucket{{{msel}}}[$__rate_interval])))",
                        "median {{pipeline}}",
                        "A",
                        exemplar=True,
                    ),
                    target(count_expr(msel, "$__rate_interval", "pipeline"), "n {{pipeline}}", "B"),
                ],
                minimum=0,
                maximum=None,
                description="Each exemplar dot is one scored record; click it to open its trace (trace_id).",
                overrides=sample_size_override("B"),
            ),
            12,
            9,
        )
    )
    return dashboard(
        "ragtrace-quality",
        "ragtrace / RAG quality",
        "Scores of sampled RAG records per metric and pipeline.",
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
                        "received {{pipeline}}",
                        "A",
                    ),
                    target(
                        f"sum by (pipeline) (rate(ragtrace_traces_sampled_total{{{P}}}[$__rate_interval]))",
                        "sampled {{pipeline}}",
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
                        "{{transport}} {{status}}",
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
    panels.append(lay.row("Judge"))
    panels.append(
        lay.place(
            timeseries(
                "Evaluations by outcome",
                [
                    target(
                        "sum by (metric, outcome) (rate(ragtrace_evaluations_total[$__rate_interval]))",
                        "{{metric}} {{outcome}}",
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
                        "decisions {{judge}}",
                        "A",
                    ),
                    target(
                        "sum by (judge) (rate(ragtrace_judge_calls_total[$__rate_interval]))\n"
                        f"  or on (judge)\n{active}",
                        "calls {{judge}}",
                        "B",
                    ),
                    target(
                        "sum by (judge, kind) (rate(ragtrace_judge_errors_total[$__rate_interval]))\n"
                        f'  or on (judge)\nlabel_replace({active}, "kind", "none", "", "")',
                        "errors {{judge}} {{kind}}",
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
                        f'  or on (judge)\nlabel_replace({active}, "kind", "none", "", "")',
                        "{{judge}} {{kind}}",
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
                        "scored {{pipeline}}",
                        "A",
                    ),
                    target(
                        "sum by (reason) (rate(ragtrace_records_released_total[$__rate_interval]))\n"
                        "  or on ()\nlabel_replace(sum(rate(ragtrace_records_scored_total[$__rate_interval])) * 0,"
                        ' "reason", "none", "", "")',
                        "released {{reason}}",
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

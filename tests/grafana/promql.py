"""Helpers shared by the dashboard lint and the Prometheus integration test.

* the metric names the collector exports, read from its own metric classes on a fresh registry;
* every PromQL query of every dashboard panel, with Grafana's template variables substituted;
* the metric names a query uses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
RULES = sorted((GRAFANA / "prometheus" / "rules").glob("*.yml"))

# Values the lint and the integration test give Grafana's variables. Regex variables match all.
TEMPLATE_VALUES = {
    "service": ".*",
    "pipeline": ".*",
    "metric": ".*",
    "judge": ".*",
    "window": "1h",
    "threshold": "0.7",
    "__rate_interval": "30s",
    "__interval": "15s",
    "__range": "1h",
}


def exported_metric_names() -> set[str]:
    """Every series name the collector's ``/metrics`` can expose (``_total``, ``_bucket``...).

    Built from the collector's own classes (``IngestMetrics``, ``EvalMetrics``, the queue collector)
    on a fresh registry, so a renamed metric fails the dashboard and rule lint here.
    """
    from prometheus_client import CollectorRegistry

    from ragtrace_collector.exporter.prometheus import EvalMetrics, QueueCollector
    from ragtrace_collector.queue.redis import RedisQueueCollector
    from ragtrace_collector.review.metrics import AgreementCollector
    from ragtrace_collector.telemetry.ingest import IngestMetrics

    registry = CollectorRegistry()
    IngestMetrics(registry)
    EvalMetrics(registry)
    families = list(registry.collect()) + list(QueueCollector(queue=None).describe())  # describe: no queue access
    families += RedisQueueCollector(queue=None).describe()  # the Redis queue's own, in its receivers
    families += AgreementCollector(source=None, max_pairs=1).describe()  # describe: no source read
    names: set[str] = set()
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created"),
        "gauge": ("",),
    }
    for family in families:
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def recorded_names() -> set[str]:
    """Series produced by the shipped recording rules (dashboards may read them)."""
    out: set[str] = set()
    for path in RULES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.update(rule["record"] for rule in group["rules"] if "record" in rule)
    return out


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Replace ``$var`` and ``${var}`` the way Grafana would, with ``values`` or TEMPLATE_VALUES."""
    values = {**TEMPLATE_VALUES, **(values or {})}

    def repl(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for template variable ${name} in {expr!r}")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def load_dashboards() -> list[dict]:
    return [json.loads(p.read_text()) for p in DASHBOARDS]


def iter_panels(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep their panels inside


def panel_queries(dashboard: dict) -> list[tuple[str, str, dict]]:
    """(panel title, refId, target) for every PromQL target of every panel (the explorer's JSON queries of the
    worst-records panels are :func:`explorer_queries`)."""
    out = []
    for panel in iter_panels(dashboard):
        for t in panel.get("targets", []):
            if "expr" in t:
                out.append((panel["title"], t.get("refId", "?"), t))
    return out


EXPLORER_DS_TYPE = "yesoreyeram-infinity-datasource"


def explorer_panels(dashboard: dict) -> list[dict]:
    """The panels reading the collector's records API (the Infinity datasource), not Prometheus."""
    return [p for p in iter_panels(dashboard) if p.get("datasource", {}).get("type") == EXPLORER_DS_TYPE]


def grafana_url(template: str, values: dict[str, str], time_from_ms: int, time_to_ms: int) -> str:
    """A query URL as Grafana interpolates it: ``$var``/``${var}`` from ``values`` (URL-encoded, as a single
    value of a repeated panel is), ``${__from}``/``${__to}`` in epoch milliseconds and with ``:date:seconds``
    in unix seconds (the formats Grafana documents for the time range variables)."""
    from urllib.parse import quote

    def repl(match: re.Match) -> str:
        name, fmt = match.group(1) or match.group(3), match.group(2)
        if name in ("__from", "__to"):
            ms = time_from_ms if name == "__from" else time_to_ms
            if fmt is None:
                return str(ms)
            if fmt == "date:seconds":
                return str(ms // 1000)
            raise KeyError(f"format {fmt!r} of ${name} not modelled")
        if fmt is not None:
            raise KeyError(f"format {fmt!r} of ${name} not modelled")
        if name not in values:
            raise KeyError(f"no value for template variable ${name} in {template!r}")
        return quote(values[name], safe="")

    return re.sub(r"\$\{(\w+)(?::([\w:]+))?\}|\$(\w+)", repl, template)


def variable_queries(dashboard: dict) -> list[str]:
    """PromQL inside ``label_values(...)`` of the query variables."""
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip(), re.S)
        if m:
            out.append(m.group(1))
    return out


_FUNCS_AND_KEYWORDS = {
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "group",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "label_replace",
    "vector",
    "scalar",
    "sort",
    "sort_desc",
    "topk",
    "bottomk",
    "round",
    "abs",
    "clamp_min",
    "clamp_max",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "count_over_time",
    "time",
    "absent",
    "le",
}


def metric_names_in(expr: str) -> set[str]:
    """Metric names a PromQL query reads: bare selectors and ``__name__`` regex alternatives."""
    names: set[str] = set()
    for alternatives in re.findall(r'__name__=~"([^"]+)"', expr):
        names.update(a for a in alternatives.split("|"))
    stripped = re.sub(r'"[^"]*"', '""', expr)  # drop string literals (label values)
    stripped = re.sub(r"\{[^}]*\}", "{}", stripped)  # and label matchers
    stripped = re.sub(r"\[[^\]]*\]", "[]", stripped)  # and ranges
    stripped = re.sub(r"\boffset\s+-?[0-9a-z]+", "", stripped)  # and offsets
    stripped = re.sub(r"\b\d[\d.e+-]*\b", "", stripped)  # and numbers
    stripped = re.sub(r"\bby\s*\([^)]*\)|\bwithout\s*\([^)]*\)|\bon\s*\([^)]*\)|\bignoring\s*\([^)]*\)", "", stripped)
    stripped = re.sub(r"\bgroup_(?:left|right)\s*\([^)]*\)", "", stripped)  # labels copied by a join
    for token in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped):
        if token in _FUNCS_AND_KEYWORDS or re.fullmatch(r"\d.*", token):
            continue
        names.add(token)
    return names

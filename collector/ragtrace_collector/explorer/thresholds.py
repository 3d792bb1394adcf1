"""The score thresholds the alerts use, read from the Prometheus rules' threshold table.

The shipped rules (``grafana/prometheus/rules/ragtrace.rules.yml``) hold ONE table of thresholds, as
``ragtrace:eval_score:threshold_table`` recording rules (``vector(0.7)`` with ``metric``, optional
``pipeline`` and ``direction`` labels). The explorer colours score chips by the same rows, so a chip is red
exactly when that score, as a mean, would page. The shipped file is package data of
``ragtrace_collector.examples.prometheus``, read as a file (nothing of that package is imported).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

log = logging.getLogger(__name__)

TABLE_RECORD = "ragtrace:eval_score:threshold_table"
SHIPPED_RULES = ("ragtrace_collector.examples.prometheus", "ragtrace.rules.yml")
_VECTOR = re.compile(r"^\s*vector\(\s*([-+0-9.eE]+)\s*\)\s*$")

Side = Literal["good", "bad"]


@dataclass(frozen=True)
class Threshold:
    """One row of the table: the value and which side of it is good."""

    value: float
    higher_is_better: bool

    def side(self, score: float) -> Side:
        """``bad`` where the alert condition holds (below the value when higher is better, above it otherwise)."""
        if self.higher_is_better:
            return "bad" if score < self.value else "good"
        return "bad" if score > self.value else "good"


class Thresholds:
    """Rows by (metric, pipeline); a pipeline's own row wins over the metric's default (pipeline None)."""

    def __init__(self, rows: dict[tuple[str, str | None], Threshold] | None = None) -> None:
        self.rows = dict(rows or {})

    def get(self, metric: str, pipeline: str | None) -> Threshold | None:
        if pipeline is not None and (metric, pipeline) in self.rows:
            return self.rows[(metric, pipeline)]
        return self.rows.get((metric, None))

    def __len__(self) -> int:
        return len(self.rows)


def parse_rules(text: str) -> Thresholds:
    """The threshold table of a Prometheus rules file (rows that do not parse are left out)."""
    loaded: Any = yaml.safe_load(text) or {}
    rows: dict[tuple[str, str | None], Threshold] = {}
    groups = loaded.get("groups", []) if isinstance(loaded, dict) else []
    for group in groups if isinstance(groups, list) else []:
        for rule in (group or {}).get("rules", []) or []:
            if not isinstance(rule, dict) or rule.get("record") != TABLE_RECORD:
                continue
            match = _VECTOR.match(str(rule.get("expr", "")))
            labels = rule.get("labels") or {}
            if match is None or not isinstance(labels, dict) or not labels.get("metric"):
                continue
            pipeline = labels.get("pipeline") or None
            rows[(str(labels["metric"]), str(pipeline) if pipeline else None)] = Threshold(
                float(match.group(1)), str(labels.get("direction", "higher_is_better")) != "lower_is_better"
            )
    return Thresholds(rows)


def load_thresholds(path: str | None = None) -> Thresholds:
    """The table of ``path``, else of the shipped rules; an unreadable file gives no thresholds (and a warning)."""
    try:
        if path is not None:
            text = Path(path).read_text(encoding="utf-8")
        else:
            text = resources.files(SHIPPED_RULES[0]).joinpath(SHIPPED_RULES[1]).read_text(encoding="utf-8")
        return parse_rules(text)
    except (OSError, ValueError, yaml.YAMLError, ModuleNotFoundError) as exc:
        log.warning("explorer: no score thresholds (%s); chips are not coloured", exc)
        return Thresholds()

"""``ragtrace-collector metrics``: every metric the collector can score, what it needs and which way is better.

A new user choosing ``scoring.metrics`` (or ``evaluate --metrics``) had to read the README's table; this lists
the registry itself, so what it prints is what ``serve`` and ``evaluate`` accept: the record fields each needs,
the judge decisions it may ask for (``Metric.needs``) and whether the embedded judge makes them all, so whether it
scores offline with no LLM API. ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per metric, one per line")


def describe() -> list[dict[str, Any]]:
    """Each registered metric: name, whether higher is better, its score range, the record inputs it needs, the
    judge decisions it may ask for, whether the embedded judge makes them (``offline``: ``yes``, ``partly`` — some
    variants or options need an LLM judge —, or ``no``), whether it is scored by default, and the first line of
    its description."""
    from ragtrace_collector.config import DEFAULT_METRICS
    from ragtrace_collector.scoring.judges.local.judge import LocalJudge
    from ragtrace_collector.scoring.metrics import METRICS

    out = []
    for name, metric in sorted(METRICS.items()):
        doc = (type(metric).__doc__ or "").strip().splitlines()
        local = [issubclass(LocalJudge, capability) for capability in metric.needs]
        out.append(
            {
                "name": name,
                "higher_is_better": metric.higher_is_better,
                "range": list(metric.score_range),
                "requires": list(metric.requires),
                "requires_one_of": [list(group) for group in metric.requires_any],
                "judge_decisions": [capability.decision for capability in metric.needs],
                "offline": "yes" if all(local) else "partly" if any(local) else "no",
                "default": name in DEFAULT_METRICS,
                "description": doc[0] if doc else "",
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    rows = describe()
    if args.json:
        try:
            for row in rows:
                print(json.dumps(row), flush=True)
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python's advice: no second error at exit)
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ragtrace metrics (scoring.metrics, evaluate --metrics; * scored by default)")
    for column in ("metric", "better", "range", "needs", "judge decisions", "offline", "what it scores"):
        table.add_column(column, overflow="fold")
    for row in rows:
        needs = row["requires"] + [" or ".join(group) for group in row["requires_one_of"]]
        low, high = row["range"]
        table.add_row(
            row["name"] + (" *" if row["default"] else ""),
            "higher" if row["higher_is_better"] else "lower",
            f"{low:g}..{high:g}",
            ", ".join(needs),
            ", ".join(row["judge_decisions"]) or "—",
            row["offline"],
            row["description"],
        )
    Console(file=sys.stdout, width=200).print(table)
    return 0

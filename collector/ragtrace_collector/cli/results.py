"""``ragtrace-collector results``: the worst scored records, with their unsupported claims and trace ids.

    ragtrace-collector results --metric faithfulness --below 0.5 [--limit 20] [--json]
    ragtrace-collector results --metric hallucination --above 0.3
    ragtrace-collector results --summary [--pipeline support] [--service checkout] [--since 1h] [--json]
    ragtrace-collector results --metric faithfulness --since 1h --service checkout
    ragtrace-collector results --metric faithfulness --service checkout --pipeline support --judge local
    ragtrace-collector results --trace-id 4bf92f3577b34da6a3ce929d0e0e4736   (every metric of one trace)

Reads the local results store (``export.results_path`` of the config, default
``<data_dir>/results.sqlite``; ``--store`` names the file directly). "Worst" follows the metric's
direction: lowest first where higher is better, highest first where lower is better; the newest first
among equal scores (a fresh incident shows before old records of the same score). ``--summary`` takes
the same filters (--metric, --below, --above, --pipeline, --service, --judge, --since, --trace-id) as the
listing.

Each claim a result did not count as supported is printed with its verdict (``contradicted``, ``not found``, or
``unsupported`` where the judge's ``no`` does not say which) and the judge's reason; ``--json`` gives the same as
``claim_problems`` (null where the details hold no per-claim verdicts), beside ``unsupported_claims``.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ragtrace_collector.cli.printable import json_line, printable
from ragtrace_collector.explorer.query import parse_duration, parse_time
from ragtrace_collector.internal.urls import mask_credentials_in
from ragtrace_collector.model.result import CLAIM_WORDS, ClaimVerdicts
from ragtrace_collector.scoring.results_store import ResultFilter, ResultsStore, StoredResult

MAX_TEXT = 160


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric", help="metric name, e.g. faithfulness (required unless --summary or --trace-id)")
    parser.add_argument(
        "--summary",
        action="store_true",
        help="per metric: counts by status, mean and sampling-weighted mean score (of the results the filters keep)",
    )
    parser.add_argument("--below", type=float, default=None, help="only scores strictly below this")
    parser.add_argument("--above", type=float, default=None, help="only scores strictly above this")
    parser.add_argument("--pipeline", default=None, help="only this pipeline")
    parser.add_argument("--service", default=None, help="only this service (the app's service.name)")
    parser.add_argument(
        "--judge", default=None, help="only results of this judge (the alert's judge label, e.g. local)"
    )
    parser.add_argument(
        "--since",
        default=None,
        help="only results stored since: a duration back from now (15m, 2h, 7d) or a time (ISO 8601, unix seconds)",
    )
    parser.add_argument("--trace-id", default=None, help="only this trace; without --metric, every metric of it")
    parser.add_argument("--limit", type=int, default=20, help="at most this many records (default 20)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--store", default=None, help="results store file (default: from the config)")
    parser.add_argument("--config", default=None, help="collector YAML config (for data_dir / export.results_path)")


def store_path(args: argparse.Namespace) -> Path:
    """``--store``, else the config's ``export.results_path``, else ``<data_dir>/results.sqlite``."""
    if args.store:
        return Path(args.store)
    from ragtrace_collector.config import load_config

    config = load_config(args.config)
    if config.export.results_path:
        return Path(config.export.results_path)
    return Path(config.data_dir) / "results.sqlite"


def unsupported_claims(row: StoredResult) -> list[str]:
    return ClaimVerdicts.from_details(row.details).unsupported_statements()


def claim_problems(row: StoredResult) -> list[dict[str, Any]] | None:
    """The claims not counted as supported, each with its verdict: ``statement``, ``verdict`` (the judge's),
    ``kind`` (``contradicted``, ``not_found``, or ``unsupported`` for a ``no`` that does not say which) and
    ``reason``; contradicted first. None where the details hold no per-claim verdicts."""
    typed = ClaimVerdicts.from_details(row.details)
    if not typed.judged:
        return None
    return [{k: v for k, v in typed.view(c).items() if k != "supported"} for c in typed.problems()]


def as_json(row: StoredResult) -> dict[str, Any]:
    out = {
        "trace_id": row.trace_id,
        "record_key": row.record_key,
        "metric": row.metric,
        "score": row.score,
        "label": row.label,
        "pipeline": row.pipeline,
        "service": row.service,
        "judge": row.judge,
        "user_input": row.user_input,
        "response": row.response,
        "unsupported_claims": unsupported_claims(row),
        "claim_problems": claim_problems(row),
        "scored_at": row.scored_at,
        "sampling_weight": row.sampling_weight,
        "status": row.status,
        "reason": row.reason,
    }
    return out


def _short(text: str | None, limit: int = MAX_TEXT) -> str:
    text = printable(" ".join((text or "").split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def since_time(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``15m``) or a time (ISO 8601, unix seconds) → unix seconds."""
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except ValueError:
        return parse_time(text)


def print_table(rows: list[StoredResult], out: TextIO) -> None:
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row.scored_at))
        outcome = f"{row.score:.3f}" if row.score is not None else f"{row.status:>5}"
        out.write(
            f"{outcome}  {printable(row.metric)}  trace_id={printable(row.trace_id or '-')}"
            f"  pipeline={printable(row.pipeline or '-')}  judge={printable(row.judge or '-')}  {when}Z\n"
        )
        if row.score is None and row.reason:
            out.write(f"    reason:   {_short(row.reason)}\n")
        if row.user_input:
            out.write(f"    question: {_short(row.user_input)}\n")
        if row.response:
            out.write(f"    answer:   {_short(row.response)}\n")
        problems = claim_problems(row)
        if problems is None:  # details without per-claim verdicts: the statements they list
            for claim in unsupported_claims(row):
                out.write(f"    unsupported: {_short(claim)}\n")
        else:
            for problem in problems:
                out.write(f"    {CLAIM_WORDS[problem['kind']]}: {_short(problem['statement'])}\n")
                if problem["reason"]:
                    out.write(f"      why: {_short(problem['reason'])}\n")


def print_summary(rows: list[dict[str, Any]], out: TextIO) -> None:
    out.write(f"{'metric':<28} {'scored':>7} {'skipped':>7} {'error':>6} {'mean':>7} {'weighted':>8}\n")
    for r in rows:
        mean = "-" if r["mean"] is None else f"{r['mean']:.3f}"
        weighted = "-" if r["weighted_mean"] is None else f"{r['weighted_mean']:.3f}"
        out.write(
            f"{printable(r['metric']):<28} {r['scored']:>7} {r['skipped']:>7} {r['error']:>6} {mean:>7} {weighted:>8}\n"
        )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    if args.limit < 1:
        print("--limit must be at least 1", file=sys.stderr)
        return 2
    if not args.summary and not args.metric and not args.trace_id:
        print("give --metric NAME (the worst records of one metric), --trace-id ID or --summary", file=sys.stderr)
        return 2
    since = None
    if args.since:
        try:
            since = since_time(args.since)
        except ValueError as exc:
            print(f"--since: {exc}", file=sys.stderr)
            return 2
    try:
        path = store_path(args)
    except (OSError, ValueError) as exc:  # missing or invalid --config
        print(f"ragtrace-collector results: bad configuration: {mask_credentials_in(str(exc))}", file=sys.stderr)
        return 2
    if not path.exists():
        print(f"no results store at {path} (has the collector scored anything yet?)", file=sys.stderr)
        return 1
    try:
        store = ResultsStore(path)
    except sqlite3.DatabaseError as exc:
        print(f"{path} is not a ragtrace results store: {exc}", file=sys.stderr)
        return 1
    where = ResultFilter(
        metric=args.metric,
        below=args.below,
        above=args.above,
        pipeline=args.pipeline,
        since=since,
        service=args.service,
        trace_id=args.trace_id,
        judge=args.judge,
    )
    if args.summary:
        try:
            summary = store.summary(where)
        finally:
            store.close()
        if args.json:
            for metric_summary in summary:
                out.write(json_line(metric_summary) + "\n")
        else:
            print_summary(summary, out)
        return 0
    try:
        if args.metric:
            rows = store.worst(where, limit=args.limit)
        else:  # one trace: every metric, any outcome
            rows = store.results_of_trace(args.trace_id, since=since, judge=args.judge)[: args.limit]
        if not rows and args.metric and args.metric not in store.metrics():
            known = ", ".join(store.metrics()) or "none yet"
            print(f"no results for metric {args.metric!r} (stored metrics: {printable(known)})", file=sys.stderr)
            return 1
    finally:
        store.close()
    if args.json:
        for row in rows:
            out.write(json_line(as_json(row)) + "\n")
    else:
        if not rows:
            out.write("no records match\n")
        print_table(rows, out)
    return 0

"""``ragtrace-collector dataset export --out FILE [--reviewed] [--feedback below=X] [--since D] [--service S]
[--metric M --below X] [--config FILE | --store FILE]``.

Writes stored records as Ragas rows (JSONL) with their human labels, feedback and the judge's scores (the row is
described in :mod:`ragtrace_collector.review.dataset`): ``--reviewed`` keeps reviewed records only, ``--feedback
below=X`` those whose mean feedback is below X, ``--metric M --below X`` those whose M score is below X. The file
feeds ``ragtrace-collector evaluate`` straight back: rows with ``hallucinated`` measure the judge against the
reviewers. Rows are written as they are read (a page of records at a time), to ``FILE.tmp`` renamed at the end, so
an interrupted export never leaves a half file under the name asked for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    export = sub.add_parser("export", help="write stored records with their labels as JSONL (Ragas rows)")
    export.add_argument("--out", type=Path, required=True, help="the JSONL file to write")
    export.add_argument("--reviewed", action="store_true", help="only records a reviewer has reviewed")
    export.add_argument(
        "--feedback",
        type=feedback_bound,
        metavar="below=X",
        help="only records whose mean end-user feedback is below X (0-1)",
    )
    export.add_argument(
        "--since", help="only records since: a duration back from now (15m, 2h, 7d) or a time (ISO 8601, unix seconds)"
    )
    export.add_argument("--service", help="only records of this service")
    export.add_argument("--metric", help="with --below: only records whose METRIC score is below X")
    export.add_argument("--below", type=float, help="with --metric: the score bound")
    export.add_argument(
        "--store", help="results store file (default: export.results_path, else <data_dir>/results.sqlite)"
    )
    export.add_argument("--config", help="collector YAML config (for data_dir / export.results_path)")


def feedback_bound(text: str) -> float:
    """``below=X`` as X, an argparse type: a typo is a usage error before anything is read."""
    name, sep, value = text.partition("=")
    try:
        bound = float(value)
    except ValueError:
        bound = math.nan
    if name.strip() != "below" or not sep or not math.isfinite(bound):
        raise argparse.ArgumentTypeError(f"expected below=NUMBER, got {text!r}")
    return bound


def run(args: argparse.Namespace) -> int:
    from ragtrace_collector.cli.rescore import store_file
    from ragtrace_collector.cli.results import since_time
    from ragtrace_collector.config import describe_error, load_config
    from ragtrace_collector.internal.urls import mask_credentials_in
    from ragtrace_collector.review.dataset import DatasetFilter, dataset_rows
    from ragtrace_collector.review.labels import LabelStore
    from ragtrace_collector.scoring.results_store import ResultsStore, StoreUnwritable

    def fail(message: str, status: int = 2) -> int:
        print(f"ragtrace-collector dataset export: {message}", file=sys.stderr)
        return status

    if (args.metric is None) != (args.below is None):
        return fail("--metric and --below go together (records whose METRIC score is below X)")
    since = None
    if args.since:
        try:
            since = since_time(args.since)
        except ValueError as exc:
            return fail(f"--since: {exc}")
    try:
        path = Path(args.store) if args.store else store_file(args, load_config(args.config))
    except (OSError, ValueError) as exc:
        return fail(f"bad configuration: {mask_credentials_in(describe_error(exc))}")
    if not path.exists():
        return fail(f"no results store at {path} (has the collector scored anything yet?)", 1)
    where = DatasetFilter(
        reviewed=args.reviewed,
        feedback_below=args.feedback,
        since=since,
        service=args.service,
        metric_below=(args.metric, args.below) if args.metric is not None else None,
    )
    try:
        store = ResultsStore(path)
    except StoreUnwritable as exc:
        return fail(str(exc), 1)
    labels = LabelStore(path)
    counts = {"rows": 0, "labelled": 0, "reviewed": 0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".tmp")
    try:
        with partial.open("w", encoding="utf-8") as out:
            for row in dataset_rows(store, labels, where):
                out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
                counts["rows"] += 1
                counts["labelled"] += "hallucinated" in row
                counts["reviewed"] += bool(row["human_verdicts"])
        os.replace(partial, args.out)
    finally:
        partial.unlink(missing_ok=True)
        labels.close()
        store.close()
    print(
        f"wrote {counts['rows']} rows to {args.out} ({counts['reviewed']} reviewed, {counts['labelled']} with a"
        " hallucinated label)"
    )
    return 0

"""``ragtrace-collector rescore [--since 7d] [--service S] [--metrics M,...] [--judge J] [--config FILE]``.

Puts records the results store kept back through scoring — the same engine and judge construction as ``serve``
and ``evaluate`` — and keeps the new scores *beside* the old ones, never over them:

* a metric the record lacks is added to its results (with its provenance), as the worker would have stored it;
* a metric it has is scored again only by a judge whose provenance (judge model and hash, metric version,
  ragtrace version) differs from every score already kept for it, and goes to the ``rescored`` table, keyed by
  that provenance: a second run with the same judge asks the judge nothing (``unchanged``).

Why: a new judge model, a prompt change or a better local model is measured on production records without
waiting for new traffic, and the judge-vs-human agreement compares the judges on the same reviewed records
(``ResultsStore.judged_scores`` returns both).

The store is read a page at a time (any size); records are scored ``scoring.concurrency`` at a time, each paced by
the judge budget (``sampling.budget``: records per minute, judge tokens per hour) — a record waits for the budget
rather than being dropped. Results that failed on the judge's availability (outage, 429, timeout) are not kept:
running again retries them. Records stored before whole records were kept (a migrated store) cannot be read
back and are counted ``unreadable``. Added results are sent to the exporters at the collector's next start, like
any result they have not confirmed; rescored ones stay in the store.

Prints a summary (records, metrics added, rescored, unchanged, errors); ``--json`` prints it as one JSON object.
Exit status 1 when results failed and none was kept, 2 for a usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragtrace_collector.config import CollectorConfig
    from ragtrace_collector.processor.sampling.budget import Budget
    from ragtrace_collector.scoring.judge import Judge
    from ragtrace_collector.scoring.options import ScoringOptions
    from ragtrace_collector.scoring.results_store import ResultsStore, StoredRecord

#: Records read from the store at once.
PAGE = 200
#: Longest single wait for the budget before asking it again (seconds).
BUDGET_POLL_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--since",
        help="only records since: a duration back from now (15m, 2h, 7d) or a time (ISO 8601, unix seconds)",
    )
    parser.add_argument("--service", help="only records of this service")
    parser.add_argument(
        "--metrics",
        help="comma-separated metrics to score (default: scoring.metrics, or the record's pipeline's list)",
    )
    parser.add_argument("--judge", help="'local' or a litellm model name (judge.model; default: the config's)")
    parser.add_argument("--judge-base-url", help="base URL of an OpenAI-compatible endpoint (judge.base_url)")
    parser.add_argument("--judge-api-key-file", help="file holding the judge's API key (judge.api_key)")
    parser.add_argument("--judge-api-key", help=argparse.SUPPRESS)  # refused: see evaluate.KEY_ON_COMMAND_LINE
    parser.add_argument("--concurrency", type=int, help="records and judge calls in flight (scoring/judge.concurrency)")
    parser.add_argument("--timeout", type=float, help="seconds per judge call (judge.timeout_seconds)")
    parser.add_argument("--max-retries", type=int, help="retries on 429/5xx/timeouts (judge.max_retries)")
    parser.add_argument("--config", help="collector YAML config (default: $RAGTRACE_CONFIG, else built-in defaults)")
    parser.add_argument(
        "--store", help="results store file (default: export.results_path, else <data_dir>/results.sqlite)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


@dataclass
class RescoreSummary:
    """What a run did: records read, metric results added or rescored, left unchanged, failed."""

    records: int = 0
    unreadable: int = 0
    added: int = 0
    rescored: int = 0
    unchanged: int = 0
    errors: int = 0
    waiting: int = 0  # failed on the judge's availability: not kept, a rerun retries them


def store_file(args: argparse.Namespace, config: CollectorConfig) -> Path:
    """``--store``, else ``export.results_path``, else ``<data_dir>/results.sqlite`` (as ``results`` reads it)."""
    if args.store:
        return Path(args.store)
    if config.export.results_path:
        return Path(config.export.results_path)
    return Path(config.data_dir) / "results.sqlite"


async def rescore(
    store: ResultsStore,
    judge: Judge,
    metrics_for: Callable[[Any], list[str]],
    *,
    options: ScoringOptions | None = None,
    since: float | None = None,
    service: str | None = None,
    concurrency: int = 4,
    budget: Budget | None = None,
    scrub: Callable[[Any], Any] | None = None,
) -> RescoreSummary:
    """Score the stored records again with ``judge`` (see the module docstring); ``metrics_for(record)`` names
    the metrics of each, ``scrub`` masks secrets in a result before it is kept."""
    from ragtrace_collector.scoring.provenance import provenance

    summary = RescoreSummary()
    ids: dict[str, str] = {}

    def provenance_id(metric: str) -> str:
        if metric not in ids:
            ids[metric] = str(provenance(judge, metric)["id"])
        return ids[metric]

    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(stored: StoredRecord) -> None:
        from ragtrace_collector.model.record import RagRecord
        from ragtrace_collector.scoring.engine import evaluate_record

        summary.records += 1
        try:
            record = RagRecord.model_validate(stored.record) if stored.record else None
        except ValueError:
            record = None
        if record is None or record.key != stored.record_key:
            summary.unreadable += 1
            return
        kept = await asyncio.to_thread(store.provenance_ids, record.key)
        wanted = list(dict.fromkeys(metrics_for(record)))
        new = [m for m in wanted if m not in kept]
        again = [m for m in wanted if m in kept and provenance_id(m) not in kept[m]]
        summary.unchanged += len(wanted) - len(new) - len(again)
        if not new and not again:
            return
        async with sem:
            if budget is not None:
                await _budget_slot(budget)
            results = await evaluate_record(record, new + again, judge, options)
        if budget is not None:
            budget.add_judge_tokens(sum(r.usage.total_tokens for r in results))
        if scrub is not None:
            results = [scrub(r) for r in results]
        kept_results = []
        for result in results:
            if result.status == "error" and result.retryable:
                summary.waiting += 1
                continue
            summary.errors += int(result.status == "error")
            kept_results.append(result)
        added = [r for r in kept_results if r.metric in new]
        rescored = [r for r in kept_results if r.metric in again]
        # (awaited before adding: ``summary.added += await ...`` would read the count before the await)
        new_rows = sum(await asyncio.to_thread(store.add, record, added, judge.name)) if added else 0
        beside = sum(await asyncio.to_thread(store.add_rescored, record, rescored, judge.name)) if rescored else 0
        summary.added += new_rows
        summary.rescored += beside

    window = max(1, concurrency) * 4
    pending: set[asyncio.Task[None]] = set()
    after: tuple[float, str] | None = None
    while True:
        page, after = await asyncio.to_thread(
            store.stored_records, since=since, service=service, after=after, limit=PAGE
        )
        for stored in page:
            if len(pending) >= window:
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    task.result()
            pending.add(asyncio.ensure_future(one(stored)))
        if after is None:
            break
    if pending:
        await asyncio.gather(*pending)
    return summary


async def _budget_slot(budget: Budget) -> None:
    """Wait until the judge budget lets one more record go (a rescore paces itself; it never drops a record)."""
    from ragtrace_collector.processor.sampling.budget import BUDGET_RECORDS

    while True:
        refused = budget.acquire()
        if refused is None:
            return
        rate = budget_rate(budget) if refused == BUDGET_RECORDS else None
        await asyncio.sleep(min(BUDGET_POLL_SECONDS, 60.0 / rate) if rate else BUDGET_POLL_SECONDS)


def budget_rate(budget: Budget) -> float | None:
    """The records-per-minute bound of a local budget, for how long to wait for its next slot."""
    from ragtrace_collector.processor.sampling.budget import LocalBudget

    return budget.records_per_minute if isinstance(budget, LocalBudget) else None


def run(args: argparse.Namespace) -> int:
    from ragtrace_collector.cli.evaluate import KEY_ON_COMMAND_LINE, _split, config_overrides
    from ragtrace_collector.cli.results import since_time
    from ragtrace_collector.config import describe_error, load_config
    from ragtrace_collector.internal.secrets import Scrubber, config_secrets, install_log_scrubber
    from ragtrace_collector.internal.urls import mask_credentials_in
    from ragtrace_collector.processor.sampling.budget import LocalBudget
    from ragtrace_collector.scoring.engine import unknown_metrics
    from ragtrace_collector.scoring.options import ScoringOptions
    from ragtrace_collector.scoring.results_store import ResultsStore, StoreUnwritable
    from ragtrace_collector.scoring.worker import metrics_selector, scrubbed
    from ragtrace_collector.service.scoring import judge_from_config

    def fail(message: str, status: int = 2) -> int:
        print(f"ragtrace-collector rescore: {message}", file=sys.stderr)
        return status

    if args.judge_api_key is not None:
        return fail(KEY_ON_COMMAND_LINE)
    since = None
    if args.since:
        try:
            since = since_time(args.since)
        except ValueError as exc:
            return fail(f"--since: {exc}")
    try:
        config = load_config(args.config, config_overrides(args))
    except (OSError, ValueError) as exc:
        return fail(f"bad configuration: {mask_credentials_in(describe_error(exc))}")
    scrubber = Scrubber(config_secrets(config, os.environ))
    install_log_scrubber(scrubber)
    chosen = _split(args.metrics)
    named = chosen or [*config.scoring.metrics, *(m for ms in config.scoring.pipelines.values() for m in ms)]
    unknown = unknown_metrics(named)
    if not named or unknown:
        return fail(f"unknown metric(s): {', '.join(unknown) or '(none given)'}")
    metrics_for = (
        (lambda _record: list(chosen)) if chosen else metrics_selector(config.scoring.metrics, config.scoring.pipelines)
    )
    path = store_file(args, config)
    if not path.exists():
        return fail(f"no results store at {path} (has the collector scored anything yet?)", 1)
    try:
        options = ScoringOptions.from_config(config.scoring.options)
        judge = judge_from_config(config.judge, config.local_judge)
    except Exception as exc:
        return fail(f"cannot create judge {config.judge.model!r}: {type(exc).__name__}: {exc}")
    try:
        store = ResultsStore(path)
    except StoreUnwritable as exc:
        return fail(str(exc), 1)
    budget = LocalBudget.from_config(config.sampling.budget)

    async def main() -> RescoreSummary:
        try:
            return await rescore(
                store,
                judge,
                metrics_for,
                options=options,
                since=since,
                service=args.service,
                concurrency=config.scoring.concurrency,
                budget=budget,
                scrub=lambda r: scrubbed(r, scrubber),
            )
        finally:
            await judge.aclose()

    try:
        summary = asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted: what was scored is kept; rerun the same command to go on", file=sys.stderr)
        return 130
    finally:
        store.close()
    if args.json:
        print(json.dumps({"judge": judge.name, **asdict(summary)}))
    else:
        print(
            f"rescore with {judge.name}: {summary.records} records ({summary.unreadable} unreadable), "
            f"{summary.added} metrics added, {summary.rescored} rescored, {summary.unchanged} unchanged, "
            f"{summary.errors} errors, {summary.waiting} waiting on the judge"
        )
    if (summary.errors or summary.waiting) and not (summary.added or summary.rescored):
        return 1
    return 0

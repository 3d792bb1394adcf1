"""``ragtrace-collector evaluate DATA.jsonl --metrics ... --judge MODEL|local --out SCORES.jsonl``.

Scores a Ragas-style JSONL file offline. One output line per input row, written as soon as the
row is done (so an interrupted run loses at most the rows in flight)::

    {"id": ..., "line": N, "judge": ..., "scores": {metric: value | null},
     "results": {metric: {status, score, reason, details, usage, retryable, label}},
     "usage": {calls, prompt_tokens, completion_tokens, cost_usd, cache_hits, errors}, "retry": false}

A row that cannot be read gets ``{"id", "line", "error"}`` and the run goes on. On restart with
the same ``--out``, finished work is not redone: a row is scored again only for the metrics its
last line lacks (``--metrics`` grew) or failed on the judge's availability (``"retry": true``:
outage, 429, timeout); the new line keeps the earlier results and adds up the usage, and the
newer line wins. Rows that were unreadable are read again (the input may have been fixed). Ends with a summary table (mean, count, skipped, errors per metric) over the
whole output file.

A judge measured on labelled rows: where input rows carry ``hallucinated`` (true/false: a ``dataset export`` of
reviewed records, RAGTruth, HaluEval), each metric is compared with the labels — balanced accuracy and Cohen's
kappa of its verdict (a higher-is-better metric says "hallucinated" when its score is below its threshold, 1.0
unless ``--label-threshold`` says otherwise, so faithfulness < 1 is hallucinated; a lower-is-better one when above
it, 0.0 by default) and AUROC of its score (threshold-free). They are printed after the summary and written with
it by ``--summary-json FILE``.

Exit status 1 when no score came out, or when a CI gate fails: ``--fail-under faithfulness=0.8`` floors a
higher-is-better metric's mean, ``--fail-over hallucination=0.2`` caps a lower-is-better one's (each metric's
direction is checked, so a gate can never pass on the wrong side), ``--fail-under
faithfulness.balanced_accuracy=0.7`` floors an agreement statistic (``balanced_accuracy``, ``auroc``, ``kappa``;
no labelled score fails it); 2 for a usage or configuration error.

Settings are the collector's configuration (:mod:`ragtrace_collector.config`), the ``judge`` and ``scoring``
sections of the same model ``serve`` reads: the flags override them, then the environment
(``RAGTRACE_JUDGE=openai/gpt-4o-mini``, ``RAGTRACE_JUDGE__BASE_URL``, ``RAGTRACE_SCORING__OPTIONS__...``; the
older ``RAGTRACE_JUDGE_BASE_URL``, ``RAGTRACE_JUDGE_API_KEY``, ``RAGTRACE_EMBEDDING_MODEL`` still work), then
the YAML file of ``--config`` (or ``$RAGTRACE_CONFIG``), then the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragtrace_collector.internal.json_input import loads, lone_surrogate

# Legacy Ragas column names accepted on input.
_ALIASES = {
    "question": "user_input",
    "answer": "response",
    "contexts": "retrieved_contexts",
    "ground_truth": "reference",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ragtrace_collector.config import ANSWER_RELEVANCY_VARIANTS, CollectorConfig

    d = CollectorConfig()  # help texts show the model's defaults (written there only)
    parser.add_argument("data", type=Path, help="input JSONL, one Ragas-style row per line")
    parser.add_argument(
        "--config",
        help="YAML config file, the same as serve's: its judge and scoring sections apply "
        "(default: $RAGTRACE_CONFIG, else built-in defaults)",
    )
    parser.add_argument(
        "--metrics",
        help=f"comma-separated metric names (scoring.metrics; default: {','.join(d.scoring.metrics)})",
    )
    parser.add_argument(
        "--judge",
        help=f"'local' (embedded offline judge) or a litellm model name (judge.model, env RAGTRACE_JUDGE; "
        f"default {d.judge.model})",
    )
    parser.add_argument(
        "--judge-base-url",
        help="base URL of an OpenAI-compatible endpoint (judge.base_url, env RAGTRACE_JUDGE__BASE_URL)",
    )
    parser.add_argument(
        "--judge-api-key-file",
        help="file holding the judge's API key (judge.api_key; or env RAGTRACE_JUDGE__API_KEY, else the provider's"
        " own env var)",
    )
    # A key on the command line is shown to every user of the machine (ps) and kept in shell history: refused.
    parser.add_argument("--judge-api-key", help=argparse.SUPPRESS)
    parser.add_argument(
        "--embedding-model",
        help="litellm embedding model for the LLM judge (judge.embedding_model; default: the local ONNX embedder)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help=f"rows and judge calls in flight (scoring.concurrency and judge.concurrency; "
        f"default {d.scoring.concurrency})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help=f"seconds per judge call (judge.timeout_seconds; LLM judge, default {d.judge.timeout_seconds:g})",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        help=f"retries on 429/5xx/timeouts (judge.max_retries; LLM judge, default {d.judge.max_retries})",
    )
    parser.add_argument(
        "--answer-relevancy-variant",
        choices=ANSWER_RELEVANCY_VARIANTS,
        help="answer_relevancy variant (scoring.options.answer_relevancy_variant; default: the first the judge "
        "supports)",
    )
    parser.add_argument(
        "--idk-supported",
        action=argparse.BooleanOptionalAction,
        help="faithfulness: count 'idk' verdicts as supported (scoring.options.idk_counts_as_supported; "
        f"default {'yes' if d.scoring.options.idk_counts_as_supported else 'no'})",
    )
    parser.add_argument("--geval-criteria", help="criteria text for the geval metric (scoring.options.geval.criteria)")
    parser.add_argument(
        "--geval-params",
        help="comma-separated record fields geval reads (scoring.options.geval.params; default: the metric's)",
    )
    parser.add_argument(
        "--dag", type=Path, help="YAML decision tree for the dag metric (scoring.options.dag, a file path)"
    )
    parser.add_argument(
        "--fail-under",
        type=gate_pairs,
        action="append",
        metavar="METRIC=MIN[,...]",
        help="CI gate for higher-is-better metrics: exit 1 when a metric's mean over the output file is below MIN "
        "(e.g. faithfulness=0.8,answer_relevancy=0.7; repeatable); METRIC.STAT=MIN floors its agreement with the "
        f"rows' hallucinated labels (STAT: {', '.join(AGREEMENT_STATS)}; e.g. faithfulness.balanced_accuracy=0.7)",
    )
    parser.add_argument(
        "--fail-over",
        type=gate_pairs,
        action="append",
        metavar="METRIC=MAX[,...]",
        help="CI gate for lower-is-better metrics: exit 1 when a metric's mean is above MAX (e.g. hallucination=0.2)",
    )
    parser.add_argument(
        "--label-threshold",
        type=gate_pairs,
        action="append",
        metavar="METRIC=X[,...]",
        help="agreement with hallucinated labels: a higher-is-better metric says hallucinated below X (default 1.0), "
        "a lower-is-better one above X (default 0.0)",
    )
    parser.add_argument(
        "--summary-json", type=Path, help="also write the summary and the agreement with labels to this JSON file"
    )
    parser.add_argument("--limit", type=int, default=None, help="score only the first N rows")
    parser.add_argument("--out", type=Path, required=True, help="output JSONL (appended to; resumable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def gate_pairs(text: str) -> dict[str, float]:
    """``"faithfulness=0.8,answer_relevancy=0.7"`` as ``{metric: threshold}`` (an argparse type, so a typo is a
    usage error before any row is scored)."""
    gates: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        try:
            threshold = float(value)
        except ValueError:
            threshold = math.nan
        if not sep or not name or not math.isfinite(threshold):
            raise argparse.ArgumentTypeError(f"expected METRIC=NUMBER, got {part!r}")
        if name in gates:
            raise argparse.ArgumentTypeError(f"{name} given twice")
        gates[name] = threshold
    if not gates:
        raise argparse.ArgumentTypeError("expected METRIC=NUMBER[,METRIC=NUMBER...]")
    return gates


#: The statistics of a metric's agreement with labelled rows, as gates and the summary name them.
AGREEMENT_STATS = ("balanced_accuracy", "auroc", "kappa")


@dataclass(frozen=True)
class Gate:
    """A regression gate on one metric's mean: a floor for higher-is-better metrics (``--fail-under``), a ceiling
    for lower-is-better ones (``--fail-over``), so a gate can never pass on the wrong side of its threshold; or,
    with ``statistic``, a floor on the metric's agreement with the labels (higher is better for all three)."""

    metric: str
    threshold: float
    higher_is_better: bool
    statistic: str | None = None

    @property
    def flag(self) -> str:
        return "--fail-under" if self.higher_is_better else "--fail-over"

    @property
    def name(self) -> str:
        return f"{self.metric}.{self.statistic}" if self.statistic else self.metric

    def passes(self, mean: float | None) -> bool:
        """No score at all fails: a gate that saw nothing must not let the build through."""
        if mean is None:
            return False
        return mean >= self.threshold if self.higher_is_better else mean <= self.threshold


def gates_from(
    fail_under: list[dict[str, float]] | None, fail_over: list[dict[str, float]] | None, metrics: list[str]
) -> list[Gate]:
    """The gates of ``--fail-under``/``--fail-over``, checked against each metric's direction and the scored
    metrics; ``ValueError`` says which flag a metric belongs under (hallucination is gated from above)."""
    from ragtrace_collector.scoring.metrics import METRICS

    gates: list[Gate] = []
    for flag, given, higher in (("--fail-under", fail_under, True), ("--fail-over", fail_over, False)):
        for name, threshold in {k: v for pairs in given or [] for k, v in pairs.items()}.items():
            statistic = None
            if name not in METRICS and "." in name:
                name, statistic = name.rsplit(".", 1)
                if statistic not in AGREEMENT_STATS:
                    raise ValueError(f"{flag} {name}.{statistic}: the statistics are {', '.join(AGREEMENT_STATS)}")
                if not higher:
                    raise ValueError(
                        f"{flag} {name}.{statistic}: higher agreement is better, gate it with --fail-under"
                    )
            metric = METRICS.get(name)
            if metric is None:
                raise ValueError(f"{flag}: unknown metric {name!r}")
            if statistic is not None:
                if name not in metrics:
                    raise ValueError(f"{flag} {name}.{statistic}: {name} is not among the metrics scored")
                gates.append(Gate(name, threshold, True, statistic))
                continue
            if metric.higher_is_better != higher:
                other = "--fail-over" if higher else "--fail-under"
                side = "higher" if metric.higher_is_better else "lower"
                raise ValueError(f"{flag} {name}: {side} is better for {name}, so gate it with {other}")
            if name not in metrics:
                raise ValueError(f"{flag} {name}: {name} is not among the metrics scored ({', '.join(metrics)})")
            gates.append(Gate(name, threshold, higher))
    seen = Counter(g.name for g in gates)
    if any(n > 1 for n in seen.values()):
        raise ValueError(f"a metric is gated twice: {', '.join(m for m, n in seen.items() if n > 1)}")
    return gates


def check_gates(
    gates: list[Gate], summary: list[dict[str, Any]], err: Any, agreement: list[dict[str, Any]] | None = None
) -> bool:
    """One line per gate (failures in red, with the mean and the counts behind it); ``True`` when all pass."""
    from rich.markup import escape

    by_metric = {r["metric"]: r for r in summary}
    agreed = {r["metric"]: r for r in agreement or []}
    ok = True
    for gate in gates:
        if gate.statistic is not None:
            stats = agreed.get(gate.metric) or {"labelled": 0}
            value = stats.get(gate.statistic)
            if value is not None and value >= gate.threshold:
                err.print(
                    f"[green]gate passed:[/green] {escape(gate.name)} {value:.4f} >= {gate.threshold:g} over "
                    f"{stats['labelled']} labelled rows",
                    soft_wrap=True,
                )
                continue
            ok = False
            what = (
                f"{value:.4f} < {gate.threshold:g} over {stats['labelled']} labelled rows"
                if value is not None
                else f"not measurable ({stats['labelled']} labelled scores; both labels are needed)"
            )
            err.print(f"[red]gate failed:[/red] {escape(gate.name)} {what}", soft_wrap=True)
            continue
        row = by_metric.get(gate.metric) or {"mean": None, "count": 0, "skipped": 0, "errors": 0}
        mean = row["mean"]
        spec = f"{gate.flag} {gate.metric}={gate.threshold:g}"
        if gate.passes(mean):
            op = ">=" if gate.higher_is_better else "<="
            err.print(
                f"[green]gate passed:[/green] {escape(gate.metric)} mean {mean:.4f} {op} {gate.threshold:g}",
                soft_wrap=True,
            )
            continue
        ok = False
        if mean is None:
            what = f"no score to compare ({row['skipped']} skipped, {row['errors']} errors)"
        else:
            op = "<" if gate.higher_is_better else ">"
            what = f"mean {mean:.4f} {op} {gate.threshold:g} over {row['count']} scored rows"
        err.print(f"[red]gate failed:[/red] {escape(gate.metric)} {what} ({escape(spec)})", soft_wrap=True)
    return ok


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [p.strip() for p in value.split(",") if p.strip()]


def _given(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` without the ``None`` leaves and the sections left empty."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            value = _given(value) or None
        if value is not None:
            out[key] = value
    return out


KEY_ON_COMMAND_LINE = (
    "--judge-api-key puts the key where every user of this machine can read it (ps, shell history): set"
    " RAGTRACE_JUDGE__API_KEY (or the provider's own variable, e.g. OPENAI_API_KEY), or pass --judge-api-key-file"
)


def read_key_file(path: str | None) -> str | None:
    """The key in ``path`` (surrounding whitespace dropped), or None without a path; ``ValueError`` when empty."""
    if path is None:
        return None
    key = Path(path).read_text(encoding="utf-8").strip()
    if not key:
        raise ValueError(f"{path}: the judge API key file is empty")
    return key


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given, as overrides of the configuration's ``judge`` and ``scoring`` sections."""

    def arg(name: str) -> Any:
        return getattr(args, name, None)

    dag = arg("dag")
    return _given(
        {
            "judge": {
                "model": arg("judge"),
                "base_url": arg("judge_base_url"),
                "api_key": read_key_file(arg("judge_api_key_file")),
                "embedding_model": arg("embedding_model"),
                "concurrency": arg("concurrency"),
                "timeout_seconds": arg("timeout"),
                "max_retries": arg("max_retries"),
            },
            "scoring": {
                "metrics": _split(arg("metrics")),
                "concurrency": arg("concurrency"),
                "options": {
                    "answer_relevancy_variant": arg("answer_relevancy_variant"),
                    "idk_counts_as_supported": arg("idk_supported"),
                    "geval": {"criteria": arg("geval_criteria"), "params": _split(arg("geval_params"))},
                    "dag": str(dag) if dag is not None else None,
                },
            },
        }
    )


def _iter_rows(path: Path, limit: int | None) -> Iterator[tuple[int, str]]:
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        n = 0
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            n += 1
            if limit is not None and n > limit:
                return
            yield lineno, line


def parse_row(lineno: int, line: str) -> tuple[str, Any]:
    """``(row id, RagRecord)``, or ``(row id, error message)`` for a row that cannot be read."""
    from ragtrace_collector.model.record import RagRecord

    fallback_id = f"line-{lineno}"
    try:
        data = loads(line)
    except ValueError as exc:
        return fallback_id, f"invalid JSON: {exc}"
    if not isinstance(data, dict):
        return fallback_id, f"a row must be a JSON object, got {type(data).__name__}"
    for old, new in _ALIASES.items():
        if old in data and new not in data:
            data[new] = data.pop(old)
    row_id = str(data["id"]) if data.get("id") not in (None, "") else fallback_id
    data["id"] = row_id
    bad = lone_surrogate(data)  # no model (nor an LLM API) takes one as text
    if bad is not None:
        return row_id, f"invalid row: a text holds a lone surrogate ({bad}), which is not Unicode text"
    try:
        return row_id, RagRecord.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        return row_id, f"invalid row: {problems}"
    except Exception as exc:  # a field of the wrong shape can fail inside a validator
        return row_id, f"invalid row: {type(exc).__name__}: {exc}"


def load_done(out: Path) -> dict[str, dict[str, Any]]:
    """The last line per id in an existing output file. A torn final line (the run was killed
    mid-write) is cut off so appending starts on a fresh line."""
    done: dict[str, dict[str, Any]] = {}
    if not out.exists():
        return done
    raw = out.read_bytes()
    lines = raw.splitlines(keepends=True)
    for chunk in lines:
        try:
            entry = loads(chunk)
        except ValueError:
            continue
        if isinstance(entry, dict) and "id" in entry:
            done[str(entry["id"])] = entry
    if lines and not lines[-1].endswith(b"\n"):
        with out.open("r+b") as fh:
            try:
                loads(lines[-1])
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            except ValueError:
                fh.truncate(len(raw) - len(lines[-1]))
    return done


def _retry(result: dict[str, Any]) -> bool:
    """A result to score again on resume: it failed on the judge's availability."""
    return result.get("status") == "error" and bool(result.get("retryable"))


def _result_entry(res: Any) -> dict[str, Any]:
    d = res.to_dict()
    d.pop("metric", None)
    return d


async def _score_rows(
    concurrency: int,
    metrics: list[str],
    judge: Any,
    options: Any,
    rows: Iterator[tuple[int, str]],
    done: dict[str, dict[str, Any]],
    out_fh: Any,
    progress: Any,
    task_id: Any,
    scrubber: Any = None,
) -> dict[str, int]:
    from ragtrace_collector.internal.secrets import Scrubber
    from ragtrace_collector.model.result import JudgeUsage
    from ragtrace_collector.scoring.engine import evaluate_record
    from ragtrace_collector.scoring.worker import scrubbed

    scrubber = scrubber if scrubber is not None else Scrubber()

    counts = {"scored": 0, "bad": 0, "resumed": 0}
    seen: set[str] = set()
    sem = asyncio.Semaphore(max(1, concurrency))
    lock = asyncio.Lock()

    async def write(entry: dict[str, Any]) -> None:
        async with lock:
            out_fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
            out_fh.flush()

    async def write_error(entry: dict[str, Any]) -> None:
        """An error line, unless the output already ends with this very error for this id."""
        if done.get(entry["id"], {}).get("error") != entry["error"]:
            await write(entry)

    async def one(lineno: int, line: str) -> None:
        row_id, parsed = parse_row(lineno, line)
        try:
            if isinstance(parsed, str):
                await write_error({"id": row_id, "line": lineno, "error": parsed})
                counts["bad"] += 1
                return
            if row_id in seen:
                await write_error(
                    {"id": f"{row_id}#line-{lineno}", "line": lineno, "error": f"duplicate id {row_id!r}"}
                )
                counts["bad"] += 1
                return
            seen.add(row_id)
            prev = done.get(row_id) or {}
            kept: dict[str, Any] = {} if "error" in prev else dict(prev.get("results") or {})
            todo = [m for m in metrics if m not in kept or _retry(kept[m])]
            if not todo:
                counts["resumed"] += 1
                return
            async with sem:
                try:
                    results = [scrubbed(r, scrubber) for r in await evaluate_record(parsed, todo, judge, options)]
                except Exception as exc:  # the engine does not raise; this guards the run regardless
                    error = scrubber.scrub(f"{type(exc).__name__}: {exc}")
                    await write({"id": row_id, "line": lineno, "error": error})
                    counts["bad"] += 1
                    return
            prev_usage = prev.get("usage")
            earlier: dict[str, Any] = prev_usage if kept and isinstance(prev_usage, dict) else {}
            total = JudgeUsage(**{k: v for k, v in earlier.items() if k in JudgeUsage.__dataclass_fields__})
            for r in results:
                total.add(r.usage)
            merged = {**kept, **{r.metric: _result_entry(r) for r in results}}
            await write(
                {
                    "id": row_id,
                    "line": lineno,
                    "judge": judge.name,
                    "scores": {m: res.get("score") for m, res in merged.items()},
                    "results": merged,
                    "usage": asdict(total),
                    "retry": any(_retry(res) for res in merged.values()),
                }
            )
            counts["scored"] += 1
        finally:
            progress.advance(task_id)

    # A bounded window of rows in flight: the file is streamed, never held whole in memory.
    window = max(1, concurrency) * 4
    pending: set[asyncio.Task[None]] = set()
    for n, line in rows:
        if len(pending) >= window:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                task.result()  # surface write failures (disk full...) instead of losing them
        pending.add(asyncio.ensure_future(one(n, line)))
    if pending:
        await asyncio.gather(*pending)
    return counts


def summarise(out: Path, metrics: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-metric mean/count/skipped/errors over the output file (last line per id)."""
    entries = load_done(out)
    stats: dict[str, dict[str, Any]] = {m: {"metric": m, "values": [], "skipped": 0, "errors": 0} for m in metrics}
    totals: dict[str, Any] = {
        "rows": 0,
        "bad_rows": 0,
        "calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
        "error_reasons": Counter(),
    }
    for entry in entries.values():
        totals["rows"] += 1
        if "error" in entry:
            totals["bad_rows"] += 1
            continue
        for k in ("calls", "prompt_tokens", "completion_tokens", "cost_usd"):
            totals[k] += (entry.get("usage") or {}).get(k, 0) or 0
        for m, res in (entry.get("results") or {}).items():
            s = stats.setdefault(m, {"metric": m, "values": [], "skipped": 0, "errors": 0})
            if res.get("status") == "scored" and res.get("score") is not None and math.isfinite(res["score"]):
                s["values"].append(float(res["score"]))
            elif res.get("status") == "skipped":
                s["skipped"] += 1
            else:
                s["errors"] += 1
                totals["error_reasons"][str(res.get("reason") or "no reason given")[:200]] += 1
    rows = []
    for s in stats.values():
        vals = s.pop("values")
        s["count"] = len(vals)
        s["mean"] = sum(vals) / len(vals) if vals else None
        rows.append(s)
    return rows, totals


def read_labels(path: Path, limit: int | None) -> dict[str, bool]:
    """The ``hallucinated`` label of each input row that has one (true/false), by row id (as :func:`parse_row`
    names rows; the first of a repeated id)."""
    labels: dict[str, bool] = {}
    for lineno, line in _iter_rows(path, limit):
        try:
            data = loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("hallucinated"), bool):
            row_id = str(data["id"]) if data.get("id") not in (None, "") else f"line-{lineno}"
            labels.setdefault(row_id, data["hallucinated"])
    return labels


def label_agreement(
    out: Path, labels: dict[str, bool], metrics: list[str], thresholds: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """Per metric scored on labelled rows: how its verdicts (the threshold rule, see the module docstring) and its
    scores agree with the ``hallucinated`` labels. A statistic the rows cannot tell (one label only) is None."""
    from ragtrace_collector.review.statistics import auroc, balanced_accuracy, cohen_kappa
    from ragtrace_collector.scoring.metrics import METRICS

    if not labels:
        return []
    entries = load_done(out)
    rows = []
    for metric in metrics:
        higher = METRICS[metric].higher_is_better if metric in METRICS else True
        threshold = (thresholds or {}).get(metric, 1.0 if higher else 0.0)
        verdicts: list[tuple[bool, bool]] = []
        ranked: list[tuple[bool, float]] = []
        for row_id, label in labels.items():
            result = ((entries.get(row_id) or {}).get("results") or {}).get(metric) or {}
            score = result.get("score")
            if result.get("status") != "scored" or not isinstance(score, (int, float)) or not math.isfinite(score):
                continue
            verdicts.append((label, score < threshold if higher else score > threshold))
            ranked.append((label, -float(score) if higher else float(score)))  # higher = more likely hallucinated
        if not verdicts:
            continue
        rows.append(
            {
                "metric": metric,
                "labelled": len(verdicts),
                "hallucinated": sum(1 for label, _ in verdicts if label),
                "rule": f"hallucinated when {metric} {'<' if higher else '>'} {threshold:g}",
                "threshold": threshold,
                "balanced_accuracy": balanced_accuracy(verdicts),
                "auroc": auroc(ranked),
                "kappa": cohen_kappa(verdicts),
            }
        )
    return rows


def print_agreement(rows: list[dict[str, Any]], console: Any) -> None:
    from rich.table import Table

    table = Table(title="agreement with the rows' hallucinated labels")
    for col in ("metric", "labelled", "hallucinated", *AGREEMENT_STATS):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for r in rows:
        cells = ["-" if r[s] is None else f"{r[s]:.4f}" for s in AGREEMENT_STATS]
        table.add_row(r["metric"], str(r["labelled"]), str(r["hallucinated"]), *cells)
    console.print(table)
    for r in rows:
        console.print(f"{r['metric']}: {r['rule']} (AUROC: from the score alone)", soft_wrap=True, markup=False)


def print_summary(rows: list[dict[str, Any]], totals: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    table = Table(title="ragtrace evaluate: summary")
    for col in ("metric", "mean", "count", "skipped", "errors"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for r in rows:
        table.add_row(
            r["metric"],
            "-" if r["mean"] is None else f"{r['mean']:.4f}",
            str(r["count"]),
            str(r["skipped"]),
            str(r["errors"]),
        )
    console.print(table)
    console.print(
        f"rows: {totals['rows']} (unreadable: {totals['bad_rows']})  judge calls: {totals['calls']}  "
        f"tokens: {totals['prompt_tokens']} prompt + {totals['completion_tokens']} completion  "
        f"cost: ${totals['cost_usd']:.4f}"
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ragtrace_collector.config import describe_error, load_config
    from ragtrace_collector.internal.secrets import Scrubber, config_secrets, install_log_scrubber
    from ragtrace_collector.internal.urls import mask_credentials_in
    from ragtrace_collector.scoring.engine import unknown_metrics
    from ragtrace_collector.scoring.metrics.geval import load_dag
    from ragtrace_collector.scoring.options import ScoringOptions
    from ragtrace_collector.service.scoring import judge_from_config

    err = Console(stderr=True)
    if getattr(args, "judge_api_key", None) is not None:
        err.print(f"[red]error:[/red] {escape(KEY_ON_COMMAND_LINE)}")
        return 2
    try:
        config = load_config(args.config, config_overrides(args))
    except (OSError, ValueError) as exc:
        err.print(f"[red]error:[/red] bad configuration: {escape(mask_credentials_in(describe_error(exc)))}")
        return 2
    scrubber = Scrubber(config_secrets(config, os.environ))
    install_log_scrubber(scrubber)  # a provider echoing the key in an error must not put it in the log
    metrics = list(config.scoring.metrics)
    unknown = unknown_metrics(metrics)
    if not metrics or unknown:
        err.print(f"[red]error:[/red] unknown metric(s): {escape(', '.join(unknown) or '(none given)')}")
        return 2
    try:
        gates = gates_from(getattr(args, "fail_under", None), getattr(args, "fail_over", None), metrics)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return 2
    if not args.data.is_file():
        err.print(f"[red]error:[/red] no such file: {escape(str(args.data))}")
        return 2
    try:
        options = ScoringOptions.from_config(config.scoring.options)
        if options.dag:
            load_dag(options.dag)  # a broken tree fails now, not on every row
    except (ValueError, OSError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    try:
        judge = judge_from_config(config.judge, config.local_judge)
    except Exception as exc:
        err.print(
            f"[red]error:[/red] cannot create judge {escape(repr(config.judge.model))}: "
            f"{type(exc).__name__}: {escape(str(exc))}"
        )
        return 2

    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = load_done(args.out)
    total = sum(1 for _ in _iter_rows(args.data, args.limit))

    async def main() -> dict[str, int]:
        try:
            with (
                args.out.open("a", encoding="utf-8") as out_fh,
                Progress(
                    TextColumn("[bold]scoring"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeRemainingColumn(),
                    console=err,
                    disable=args.no_progress,
                ) as progress,
            ):
                task_id = progress.add_task("rows", total=total)
                return await _score_rows(
                    config.scoring.concurrency,
                    metrics,
                    judge,
                    options,
                    _iter_rows(args.data, args.limit),
                    done,
                    out_fh,
                    progress,
                    task_id,
                    scrubber,
                )
        finally:
            await judge.aclose()

    try:
        counts = asyncio.run(main())
    except KeyboardInterrupt:
        err.print("[yellow]interrupted:[/yellow] finished rows are saved; rerun the same command to resume")
        return 130
    err.print(f"scored {counts['scored']} rows, {counts['resumed']} already done, {counts['bad']} unreadable")
    summary, totals = summarise(args.out, metrics)
    print_summary(summary, totals, Console())
    thresholds = {k: v for pairs in getattr(args, "label_threshold", None) or [] for k, v in pairs.items()}
    agreement = label_agreement(args.out, read_labels(args.data, args.limit), metrics, thresholds)
    if agreement:
        print_agreement(agreement, Console())
    if getattr(args, "summary_json", None) is not None:
        report = {
            "summary": summary,
            "totals": {**totals, "error_reasons": dict(totals["error_reasons"])},
            "agreement": agreement,
        }
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    status = _exit_status(summary, totals, err)
    if gates and not check_gates(gates, summary, err, agreement):
        return 1
    return status


def _exit_status(summary: list[dict[str, Any]], totals: dict[str, Any], err: Any) -> int:
    """1 when no score came out (no rows, every row unreadable, every metric errored or skipped), so CI notices."""
    from rich.markup import escape

    from ragtrace_collector.cli.printable import printable

    reasons: Counter[str] = totals["error_reasons"]
    for reason, n in reasons.most_common(3):
        err.print(f"[red]judge/metric errors[/red] ×{n}: {escape(printable(reason))}")
    if not any(r["count"] for r in summary):
        skipped = sum(r["skipped"] for r in summary)
        err.print(
            f"[red]error:[/red] no score came out: {totals['bad_rows']} of {totals['rows']} rows unreadable, "
            f"{sum(reasons.values())} metric errors, {skipped} skipped"
        )
        return 1
    return 0

"""``make test-peers``: run every peer app live against a scoring ``ragtrace-collector serve``.

    .venv/bin/python scripts/peers/live.py [setup ...]

Starts the collector (loopback, free ports, a temporary data dir, its default scoring: every record, the
embedded ``local`` judge, the default metrics), runs the decorator baseline (``apps/decorators.py``: the same
app traced with ragtrace's own decorators, in this environment) and then each setup's app in its peer
environment, each with its own ``service.name`` (``peer-<setup>``). It waits until no trace is left in assembly
(a trace whose root span never ends, as tl_llamaindex's streamed queries, completes after
``assembly.max_wait_seconds``, 60 s by default) and every assembled record is scored, reads the records back from the explorer's JSON API (``/api/v1/records``, no token on loopback) and
prints two tables, one line per setup:

* **fields**: records per request; of the six requests, how many records carried the question as asked
  (``query``), the context counts seen (``ctx``), the expected answer (``answer``), a model (``model``), input
  and output tokens (``tokens``), and a TTFT out of the streamed requests (``TTFT``).
* **scores**: faithfulness per question (``q0``..``q5``; questions 4 and 5 get invented answers), the mean of
  every scored metric, and whether every metric of every question equals the baseline's for the same question
  text, within :data:`TOLERANCE`.

The differences follow the tables. Exits 1 when an app fails, a setup gives other than one record per request
or leaves a record unscored, or a score differs from the baseline's by more than :data:`TOLERANCE`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "apps"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from capture import PEERS, ROOT, SETUPS, run_app
from common import QUESTIONS, streamed

from tests.support.net import free_port, wait_for_port

BASELINE = "decorators"
# The baseline runs in this environment: ``run_app`` takes ``PEERS / env``, which is ``env`` when it is absolute.
SETUPS.setdefault(BASELINE, sys.prefix)
REQUESTS = len(QUESTIONS)
STREAMED = sum(1 for i in range(REQUESTS) if streamed(i))
TOLERANCE = 1e-3  # the local judge is deterministic: the same inputs give the same scores, up to float noise
SCORING_TIMEOUT_S = 900.0
_SHORT = {
    "faithfulness": "faith",
    "hallucination": "halluc",
    "answer_relevancy": "ans_rel",
    "context_precision": "ctx_prec",
    "context_relevancy": "ctx_rel",
}


@dataclass
class Record:
    """One scored record as the explorer's API gives it back."""

    key: str
    question: str | None
    answer: str | None
    contexts: int
    model: str | None
    tokens: bool
    ttft: float | None
    scores: dict[str, float | None] = field(default_factory=dict)  # metric -> score (None: skipped or error)
    reasons: dict[str, str] = field(default_factory=dict)  # metric -> why it was skipped or failed

    @property
    def asked(self) -> int | None:
        """Index of the question this record answers: its exact text, else the one its text contains."""
        texts = [q for q, _, _ in QUESTIONS]
        if self.question in texts:
            return texts.index(self.question)
        return next((i for i, q in enumerate(texts) if self.question and q in self.question), None)


# --- the collector -------------------------------------------------------------------------------------------


def start_collector(data_dir: str) -> tuple[subprocess.Popen[bytes], int, int]:
    """``serve`` with its default scoring; returns the process, the OTLP/HTTP port and the metrics port."""
    http_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)]
    cmd = [sys.executable, "-m", "ragtrace_collector", "serve", "--host", "127.0.0.1", *ports]
    cmd += ["--data-dir", data_dir, "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        wait_for_port(http_port, timeout=60)
        wait_for_port(metrics_port, timeout=60)
    except TimeoutError:
        proc.terminate()
        raise
    return proc, http_port, metrics_port


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        return reply.read().decode()


def total(metrics: str, name: str, service: str | None = None) -> float:
    """The sum of a series' samples (for one service, when given)."""
    labels = rf'\{{[^}}]*service="{re.escape(service)}"[^}}]*\}}' if service else r"(?:\{[^}]*\})?"
    pattern = re.compile(rf"^{name}{labels} ([0-9.e+-]+)$", re.M)
    return sum(float(v) for v in pattern.findall(metrics))


def stored(port: int, service: str) -> int:
    query = urllib.parse.urlencode({"service": service, "limit": 1})
    return int(json.loads(get(port, f"/api/v1/records?{query}"))["total"])


def wait_scored(port: int, services: list[str]) -> None:
    """Until no trace is left in assembly (one whose root never ends waits there ``assembly.max_wait_seconds``)
    and every record assembled for ``services`` is in the results store, twice in a row; or until the queue has
    stayed empty with nothing new stored for three polls (a record never scored); or the timeout."""
    deadline, last, settled, still = time.monotonic() + SCORING_TIMEOUT_S, -1, 0, 0
    while time.monotonic() < deadline:
        metrics = get(port, "/metrics")
        assembling = total(metrics, "ragtrace_assembly_inflight_traces") > 0
        received = {s: total(metrics, "ragtrace_traces_received_total", s) for s in services}
        done = {s: stored(port, s) for s in services}
        settled = settled + 1 if not assembling and all(done[s] >= received[s] for s in services) else 0
        idle = not assembling and total(metrics, "ragtrace_queue_depth") == 0
        still = still + 1 if idle and sum(done.values()) == last else 0
        if settled >= 2 or still >= 3:
            return
        last = sum(done.values())
        time.sleep(2.0)
    print(f"scoring did not finish within {SCORING_TIMEOUT_S:.0f} s", file=sys.stderr)


def records_of(port: int, service: str) -> list[Record]:
    """The service's stored records, each read in full (contexts, tokens, latencies)."""
    query = urllib.parse.urlencode({"service": service, "limit": 1000})
    rows = json.loads(get(port, f"/api/v1/records?{query}"))["records"]
    return [parse_record(json.loads(get(port, f"/api/v1/records/{row['record_key']}"))) for row in rows]


def parse_record(doc: dict[str, Any]) -> Record:
    return Record(
        key=doc["record_key"],
        question=doc.get("question"),
        answer=doc.get("answer"),
        contexts=len(doc.get("contexts") or []),
        model=doc.get("model"),
        tokens=doc.get("input_tokens") is not None and doc.get("output_tokens") is not None,
        ttft=(doc.get("latency") or {}).get("ttft_seconds"),
        scores={s["metric"]: s["score"] if s["status"] == "scored" else None for s in doc.get("scores") or []},
        reasons={
            s["metric"]: f"{s['status']}: {s['reason']}" for s in doc.get("scores") or [] if s["status"] != "scored"
        },
    )


# --- the tables ----------------------------------------------------------------------------------------------


def by_question(records: list[Record]) -> dict[int, Record]:
    """Each question's record (the first one, where a setup gives more than one)."""
    out: dict[int, Record] = {}
    for r in records:
        if r.asked is not None:
            out.setdefault(r.asked, r)
    return out


def fields_line(setup: str, records: list[Record], received: float) -> str:
    questions, answers = {q for q, _, _ in QUESTIONS}, {a for _, a, _ in QUESTIONS}
    ctx = ",".join(str(n) for n in sorted({r.contexts for r in records})) or "-"
    ttft = sum(1 for i, r in by_question(records).items() if streamed(i) and r.ttft is not None)

    def of_six(n: int) -> str:
        return f"{n}/{REQUESTS}"

    return (
        f"{setup:26} {received / REQUESTS:>7.2f} {of_six(sum(r.question in questions for r in records)):>5} "
        f"{ctx:>5} {of_six(sum(r.answer in answers for r in records)):>6} {of_six(sum(bool(r.model) for r in records)):>5} "
        f"{of_six(sum(r.tokens for r in records)):>6} {f'{ttft}/{STREAMED}':>5}"
    )


def _fmt(score: float | None) -> str:
    return "-" if score is None else f"{score:.2f}"


def mean(records: list[Record], metric: str) -> float | None:
    values = [v for r in records if (v := r.scores.get(metric)) is not None]
    return sum(values) / len(values) if values else None


def _differs(got: float | None, want: float | None) -> bool:
    if got is None or want is None:
        return (got is None) != (want is None)
    return abs(got - want) > TOLERANCE


def differences(records: list[Record], baseline: list[Record]) -> list[str]:
    """Per metric, the questions whose outcome differs from the baseline's by more than the tolerance
    (``got/baseline``), with why the setup's was not scored where it was not."""
    mine, base = by_question(records), by_question(baseline)
    out = [f"q{i}: no record" for i in sorted(base) if i not in mine]
    metrics = dict.fromkeys(m for b in base.values() for m in b.scores)
    for metric in metrics:
        bad, why = [], set()
        for i, b in sorted(base.items()):
            r = mine.get(i)
            if r is None:
                continue
            got, want = r.scores.get(metric), b.scores.get(metric)
            if _differs(got, want):
                bad.append(f"q{i} {_fmt(got)}/{_fmt(want)}")
                why |= {r.reasons.get(metric, "no result")} if got is None else set()
        if bad:
            out.append(f"{metric}: {', '.join(bad)}" + (f" ({'; '.join(sorted(why))})" if why else ""))
    return out


def largest_gap(records: list[Record], baseline: list[Record]) -> float:
    """The largest |score - baseline score| over the questions and metrics both scored."""
    mine, base = by_question(records), by_question(baseline)
    gaps = [
        abs(got - want)
        for i, b in base.items()
        if i in mine
        for metric, want in b.scores.items()
        if want is not None and (got := mine[i].scores.get(metric)) is not None
    ]
    return max(gaps, default=0.0)


def scores_line(setup: str, records: list[Record], metrics: list[str], diffs: list[str]) -> str:
    asked = by_question(records)
    faith = " ".join(f"{_fmt(asked[i].scores.get('faithfulness') if i in asked else None):>4}" for i in range(REQUESTS))
    means = " ".join(f"{_fmt(mean(records, m)):>{len(_SHORT.get(m, m))}}" for m in metrics)
    return f"{setup:26} {faith} | {means} | {'no' if diffs else 'yes'}"


# --- main ----------------------------------------------------------------------------------------------------


def run_setups(setups: list[str], http_port: int) -> list[str]:
    """Run each app against the collector; the setups whose app failed."""
    failed = []
    for setup in setups:
        proc = run_app(setup, f"http://127.0.0.1:{http_port}")
        if proc.returncode != 0:
            print(f"{setup}: app failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
            failed.append(setup)
    return failed


# What a peer itself never records, so no collector can score it like the baseline: setup -> (the skip reason its
# differences must all carry, why). Differences with that reason are printed but do not fail the run; any other does.
KNOWN_PEER_GAPS: dict[str, tuple[str, str]] = {
    "openlit_qdrant": (
        "missing input: retrieved_contexts",
        "OpenLIT 1.45.0's qdrant QUERY span records the query vector and top_k, never the points returned",
    ),
}


def report(port: int, setups: list[str]) -> int:
    """Print both tables and the differences; the number of setups that fail the target."""
    metrics_text = get(port, "/metrics")
    records = {s: records_of(port, f"peer-{s}") for s in setups}
    received = {s: total(metrics_text, "ragtrace_traces_received_total", f"peer-{s}") for s in setups}
    baseline = records[BASELINE]
    seen = {m for r in baseline for m in r.scores}
    metrics = [m for m in _SHORT if m in seen] + sorted(seen - set(_SHORT))
    print(f"{'setup':26} {'rec/req':>7} {'query':>5} {'ctx':>5} {'answer':>6} {'model':>5} {'tokens':>6} {'TTFT':>5}")
    for s in setups:
        print(fields_line(s, records[s], received[s]))
    print()
    faith_head = " ".join(f"{f'q{i}':>4}" for i in range(REQUESTS))
    print(f"{'faithfulness by q':26} {faith_head} | {' '.join(_SHORT.get(m, m) for m in metrics)} | = baseline")
    diffs = {s: differences(records[s], baseline) for s in setups}
    for s in setups:
        print(scores_line(s, records[s], metrics, diffs[s]))
    gap = max(largest_gap(records[s], baseline) for s in setups)
    print(
        f"\nmetric means over scored records; '= baseline': every question's every metric scored alike, within "
        f"{TOLERANCE} (largest gap where both scored: {gap:.2g})"
    )
    failing = 0
    for s in setups:
        problems = [f"{received[s] / REQUESTS:.2f} records per request"] if received[s] != REQUESTS else []
        problems += (
            [f"{int(received[s]) - len(records[s])} records not scored"] if len(records[s]) != received[s] else []
        )
        reason, why = KNOWN_PEER_GAPS.get(s, ("", ""))
        known = [d for d in diffs[s] if reason and reason in d]
        problems += [d for d in diffs[s] if d not in known]
        failing += bool(problems)
        for p in problems:
            print(f"{s}: {p}")
        for d in known:
            print(f"{s}: {d} [known peer gap: {why}]")
    return failing


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in SETUPS]
    if unknown:  # "--help" included: the arguments are setup names, nothing else
        print(f"usage: live.py [SETUP ...]; unknown {', '.join(unknown)}; setups: {', '.join(SETUPS)}", file=sys.stderr)
        return 2
    peers = argv or [s for s, env in SETUPS.items() if s != BASELINE and (PEERS / env / "freeze.txt").exists()]
    setups = [BASELINE, *(s for s in peers if s != BASELINE)]
    collector, http_port, metrics_port = start_collector(tempfile.mkdtemp(prefix="ragtrace-peers-"))
    try:
        failed = run_setups(setups, http_port)
        time.sleep(4.0)  # assembly's grace period and a sweep
        wait_scored(metrics_port, [f"peer-{s}" for s in setups])
        failed_target = report(metrics_port, setups)
    finally:
        collector.terminate()
        collector.wait(timeout=60)
    return 1 if failed or failed_target else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

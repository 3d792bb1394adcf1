"""``ragtrace-collector demo``: the main job, on a fresh machine, in one command.

Starts the collector (a ``ragtrace-collector serve`` child process, embedded judge), drives the example
RAG pipeline (``ragtrace_collector.examples.rag_app``) at a steady rate through the ragtrace SDK over OTLP, and shows
what happens live: requests, their latency, the scores the judge gives them, and the ``/metrics`` URL.
Where the ``prometheus`` binary is installed it also starts a Prometheus scraping the collector with
the shipped rules (``grafana/prometheus/rules``, package data ``ragtrace_collector.examples.prometheus``), their windows shortened so alerts can fire within
minutes, and shows the alerts. ``--degrade-after`` switches the example's faults on mid-run (the best
passage dropped, an unsupported claim appended), and faithfulness drops.

Children are started in their own sessions and stopped by PID on exit, Ctrl-C or SIGTERM, before anything
more is printed: with the output piped (``make demo 2>&1 | tee log``) a Ctrl-C also ends the reader, and a print
into that closed pipe must not stop the cleanup half-way (output then goes to /dev/null and the demo ends). Without
a terminal (CI) the live view becomes a status line every few seconds. On exit a closing summary says what was sent
and scored, mean faithfulness before and after the faults, and which alerts fired when.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragtrace_collector.scoring.results_store import ResultsStore

# The shipped alert rules (grafana/prometheus/rules in the repository), as package data.
RULES_PACKAGE = "ragtrace_collector.examples.prometheus"
SERVICE_NAME = "rag-demo"
SHOWN_METRICS = ("faithfulness", "hallucination", "answer_relevancy", "context_precision")

# Shipped rule windows -> demo windows, so a drop shows up as an alert within a few minutes.
DEMO_WINDOWS = {
    "[1h]": "[1m]",
    "[5m]": "[30s]",  # the fast window of the multi-window alerts
    "offset 1h": "offset 1m",
    "[7d]": "[10m]",
    "[15m]": "[2m]",
    "[10m]": "[2m]",
    "for: 15m": "for: 15s",
    "for: 10m": "for: 15s",
    "for: 5m": "for: 15s",
    "interval: 1m": "interval: 5s",
    ">= 100": ">= 40",
}


# --- arguments ------------------------------------------------------------------------------------
DEFAULT_DATA_DIR = "ragtrace-demo-data"  # in the current directory: the records outlive the demo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--rate", type=float, default=2.0, help="example requests per second (default 2)")
    parser.add_argument(
        "--degrade-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="switch the example's faults on after SECONDS: faithfulness drops",
    )
    parser.add_argument(
        "--degrade", action="store_true", help="same as --degrade-after 60 (unless --degrade-after is given)"
    )
    parser.add_argument("--no-prometheus", action="store_true", help="do not start a Prometheus")
    parser.add_argument("--sampling-rate", type=float, default=1.0, help="fraction of records scored (default 1)")
    parser.add_argument(
        "--judge", default="local", help="judge: 'local' (embedded, offline; default) or a litellm model name"
    )
    parser.add_argument(
        "--protocol",
        choices=["http/protobuf", "grpc"],
        default="http/protobuf",
        help="OTLP protocol the example uses (default http/protobuf)",
    )
    parser.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        help=f"where the demo keeps its records, logs and summary after it stops (default ./{DEFAULT_DATA_DIR};"
        " browse them again with ragtrace-collector serve --data-dir DIR/collector)",
    )
    parser.add_argument(
        "--temporary", action="store_true", help="keep the data in a temporary directory, removed on exit instead"
    )
    parser.add_argument(
        "--prometheus-port", type=int, default=9090, help="Prometheus port (default 9090, or a free one if taken)"
    )


# --- ports and processes ---------------------------------------------------------------------------
def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def pick_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    """``preferred`` when it is free, else any free port."""
    if preferred and port_is_free(preferred, host):
        return preferred
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


class Stopped(Exception):
    """The user stopped the demo (Ctrl-C, SIGTERM) while it was still starting."""


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen | None = None,
    log_path: Path | None = None,
    abort: Callable[[], bool] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if abort is not None and abort():
            raise Stopped(what)
        if proc is not None and proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path and log_path.exists() else ""
            raise RuntimeError(f"{what} exited with code {proc.returncode}:\n{tail}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s")


class ChildProcess:
    """A child in its own session (a terminal's Ctrl-C reaches only us), stopped by PID."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "ab") as log:  # the child holds its own copy of the descriptor
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, wait ``timeout`` seconds, then SIGKILL. Returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


class CollectorProcess(ChildProcess):
    """``ragtrace-collector serve`` on loopback with its data in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        http_port: int,
        grpc_port: int,
        metrics_port: int,
        sampling_rate: float = 1.0,
        judge: str = "local",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(extra_env or {})}
        argv = [
            sys.executable,
            "-m",
            "ragtrace_collector.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            str(metrics_port),
            "--data-dir",
            str(data_dir),
            "--judge",
            judge,
            "--sampling-rate",
            str(sampling_rate),
        ]
        super().__init__("collector", argv, data_dir / "collector.log", env)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def explorer_url(self) -> str:
        """The records explorer (served on the /metrics port)."""
        from ragtrace_collector.explorer import EXPLORER_PATH

        return f"http://127.0.0.1:{self.metrics_port}{EXPLORER_PATH}"

    @property
    def otlp_http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def otlp_grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def results_path(self) -> Path:
        return self.data_dir / "results.sqlite"

    def wait_ready(self, timeout: float = 90.0, abort: Callable[[], bool] | None = None) -> None:
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        wait_until(lambda: http_get(url) == b"ready\n", timeout, "collector", self.proc, self.log_path, abort)


def scaled_rules(text: str, mapping: dict[str, str]) -> str:
    """The rule file with windows, durations and counts replaced in one pass (no chained replacements)."""
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return pattern.sub(lambda m: mapping[m.group(0)], text)


class PrometheusProcess(ChildProcess):
    """Debian's ``prometheus`` scraping one collector, with the shipped rules (windows mapped)."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int,
        metrics_target: str,
        rule_mapping: dict[str, str],
        scrape_interval: str = "2s",
        evaluation_interval: str = "2s",
        alertmanager: str | None = None,
        binary: str | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        rules_dir = workdir / "rules"
        rules_dir.mkdir(exist_ok=True)
        for path in sorted(resources.files(RULES_PACKAGE).iterdir(), key=lambda p: p.name):
            if path.name.endswith(".yml"):
                (rules_dir / path.name).write_text(scaled_rules(path.read_text(encoding="utf-8"), rule_mapping))
        alerting = (
            f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\n"
            if alertmanager
            else ""
        )
        (workdir / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {evaluation_interval}\n"
            # the base of the alerts' runbook links: this collector, on whichever port the demo took
            f"  external_labels:\n    ragtrace_url: http://{metrics_target}\n"
            f"rule_files:\n  - rules/*.yml\n{alerting}"
            f"scrape_configs:\n  - job_name: ragtrace-collector\n    static_configs:\n"
            f"      - targets: ['{metrics_target}']\n"
        )
        argv = [
            binary or shutil.which("prometheus") or "prometheus",
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ]
        super().__init__("prometheus", argv, workdir / "prometheus.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30.0, abort: Callable[[], bool] | None = None) -> None:
        wait_until(
            lambda: b"Ready" in http_get(self.url + "/-/ready"), timeout, "prometheus", self.proc, self.log_path, abort
        )

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        body = json.loads(http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10))
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]


# --- traffic ----------------------------------------------------------------------------------------
@dataclass
class Request:
    """One example request and, once scored, its scores."""

    started: float
    question: str
    seconds: float
    trace_id: str | None
    degraded: bool
    error: str | None = None
    scores: dict[str, float | None] = field(default_factory=dict)


class Traffic:
    """Sends example requests at ``rate`` per second from a small thread pool until stopped.

    ``degrade_after`` (seconds from start) switches the faults on: the best passage is dropped and an
    unsupported claim is appended, so faithfulness falls, and the first token comes 0.6 s later.
    Every fourth request carries its reference answer (reference-based metrics; the collector
    always samples those).
    """

    def __init__(self, rate: float, degrade_after: float | None = None, threads: int = 4, keep: int = 200) -> None:
        from ragtrace_collector.examples.rag_app import QUESTIONS, RagApp

        # a served model's latency shape: ~0.2 s to first token for a 3-passage prompt, 15 ms per token
        self.app = RagApp(token_delay=0.015, prefill_delay=1.0)
        self.questions = QUESTIONS
        self.rate = rate
        self.degrade_after = degrade_after
        self.threads = threads
        self.recent: deque[Request] = deque(maxlen=keep)
        # last faithfulness scores per phase (False: healthy, True: degraded), kept past ``recent``
        self.faithfulness: dict[bool, deque[float]] = {False: deque(maxlen=30), True: deque(maxlen=30)}
        # every faithfulness score per phase, as (sum, count): the closing summary's means over the whole run
        self.faithfulness_totals: dict[bool, tuple[float, int]] = {False: (0.0, 0), True: (0.0, 0)}
        self.sent = 0
        self.failed = 0
        self.skipped = 0  # ticks skipped because every thread was busy
        self._inflight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = 0.0
        self._thread: threading.Thread | None = None
        self._pool: list[threading.Thread] = []
        self._work: deque[int] = deque()
        self._work_ready = threading.Condition()

    def add_faithfulness(self, degraded: bool, score: float) -> None:
        """One scored request's faithfulness, kept for the live view (last 30) and the whole-run means."""
        with self._lock:
            self.faithfulness[degraded].append(score)
            total, n = self.faithfulness_totals[degraded]
            self.faithfulness_totals[degraded] = (total + score, n + 1)

    def snapshot(self, n: int | None = None) -> list[Request]:
        """The last ``n`` requests (all kept ones when None), oldest first."""
        with self._lock:
            recent = list(self.recent)
        return recent if n is None else recent[-n:]

    @property
    def degraded(self) -> bool:
        return (
            self.degrade_after is not None
            and bool(self._started)
            and time.monotonic() - self._started >= self.degrade_after
        )

    def start(self) -> None:
        self._started = time.monotonic()
        for i in range(self.threads):
            t = threading.Thread(target=self._worker, name=f"demo-traffic-{i}", daemon=True)
            t.start()
            self._pool.append(t)
        self._thread = threading.Thread(target=self._pace, name="demo-traffic-pacer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._work_ready:
            self._work_ready.notify_all()
        for t in [self._thread, *self._pool]:
            if t is not None:
                t.join(timeout)

    def _pace(self) -> None:
        interval = 1.0 / self.rate
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                busy = self._inflight >= self.threads
            if busy:
                self.skipped += 1
            else:
                with self._work_ready:
                    with self._lock:
                        self._inflight += 1
                    self._work.append(n)
                    self._work_ready.notify()
                n += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _worker(self) -> None:
        while True:
            with self._work_ready:
                while not self._work and not self._stop.is_set():
                    self._work_ready.wait(0.5)
                if self._stop.is_set():
                    return
                n = self._work.popleft()
            try:
                self.one(n)
            finally:
                with self._lock:
                    self._inflight -= 1

    def one(self, n: int) -> Request:
        q = self.questions[n % len(self.questions)]
        degraded = bool(self.degraded)
        t0 = time.perf_counter()
        started = time.time()
        try:
            # degrade: every fault of the example (best passage dropped, invented claim, slow first token)
            answer = self.app.answer(
                q["question"],
                degrade=degraded,
                reference=q["reference"] if n % 4 == 0 else None,
                session_id=f"demo-{n % 10}",
            )
            req = Request(started, q["question"], time.perf_counter() - t0, answer.trace_id, degraded)
        except Exception as exc:  # the demo keeps going; the failure is shown
            req = Request(started, q["question"], time.perf_counter() - t0, None, degraded, error=repr(exc))
        with self._lock:
            self.sent += 1
            if req.error:
                self.failed += 1
            self.recent.append(req)
        return req


class ScoreReader:
    """Fills recent requests' scores from the collector's results store (read as it fills)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store: ResultsStore | None = None

    def _open(self) -> ResultsStore | None:
        if self._store is None and self.path.exists():
            from ragtrace_collector.scoring.results_store import ResultsStore

            self._store = ResultsStore(self.path)
        return self._store

    def fill(self, requests: list[Request], on_faithfulness: Callable[[bool, float], None] | None = None) -> int:
        """Look up requests still missing scores (each new faithfulness score goes to ``on_faithfulness`` with
        its phase); returns the number of records scored so far."""
        store = self._open()
        if store is None:
            return 0
        for req in requests:
            if req.trace_id and not req.scores:
                for row in store.get(req.trace_id):
                    req.scores[row.metric] = row.score if row.status == "scored" else None
                score = req.scores.get("faithfulness")
                if on_faithfulness is not None and score is not None:
                    on_faithfulness(req.degraded, score)
        return store.count(metric="faithfulness")

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


# --- view ---------------------------------------------------------------------------------------------
def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summary(traffic: Traffic) -> dict[str, Any]:
    recent = traffic.snapshot()
    out: dict[str, Any] = {"sent": traffic.sent, "failed": traffic.failed}
    for flag, name in ((False, "healthy"), (True, "degraded")):
        faith = list(traffic.faithfulness[flag])
        out[f"faithfulness_{name}"] = mean(faith)
        out[f"n_{name}"] = len(faith)
    lat = sorted(r.seconds for r in recent[-50:])
    out["latency_p50"] = lat[len(lat) // 2] if lat else None
    return out


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


NO_PROMETHEUS = "Prometheus not running"


@dataclass
class AlertWatch:
    """What Prometheus reports now, and when each alert was first seen firing (seconds from the demo's start):
    the closing summary's "which alerts fired and when"."""

    current: list[str] = field(default_factory=list)
    first_firing: dict[str, tuple[float, str]] = field(default_factory=dict)  # alertname -> (elapsed, severity)

    def update(self, alerts: list[dict], elapsed: float) -> None:
        self.current = sorted({f"{a['labels']['alertname']}({a['state']})" for a in alerts})
        for a in alerts:
            name = str(a["labels"].get("alertname", "?"))
            if a.get("state") == "firing" and name not in self.first_firing:
                self.first_firing[name] = (elapsed, str(a["labels"].get("severity", "")))


def alerts_text(alerts: list[str] | None) -> str:
    """``None``: no Prometheus runs, so nothing can be said about alerts (never "none firing")."""
    if alerts is None:
        return NO_PROMETHEUS
    return ", ".join(alerts) if alerts else "none firing"


def render(
    traffic: Traffic,
    scored: int,
    urls: dict[str, str],
    alerts: list[str] | None,
    elapsed: float,
    duration: float | None,
) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    s = summary(traffic)
    state = "[bold red]DEGRADED[/]" if traffic.degraded else "[green]healthy[/]"
    if traffic.degrade_after is not None and not traffic.degraded:
        state += f" (faults on in {traffic.degrade_after - elapsed:.0f}s)"
    head = Table.grid(padding=(0, 2))
    head.add_row(
        f"[b]ragtrace demo[/]  {elapsed:.0f}s" + (f"/{duration:.0f}s" if duration else "  (Ctrl-C to stop)"),
        f"example: {state}",
        f"sent {s['sent']} ({s['failed']} failed)",
        f"scored {scored}",
    )
    head.add_row(
        f"mean faithfulness (last 30) healthy {fmt(s['faithfulness_healthy'])} (n={s['n_healthy']})",
        f"degraded {fmt(s['faithfulness_degraded'])} (n={s['n_degraded']})",
        f"latency p50 {fmt(s['latency_p50'] and s['latency_p50'] * 1000, '.0f')} ms",
        "",
    )
    parts: list[Any] = [head]
    if duration:
        parts.append(ProgressBar(total=duration, completed=min(elapsed, duration), width=60))
    table = Table(title="recent requests", expand=True, show_lines=False)
    table.add_column("time")
    table.add_column("question", ratio=3, overflow="ellipsis", no_wrap=True)
    table.add_column("latency", justify="right")
    for m in SHOWN_METRICS:
        table.add_column(m.replace("_", " "), justify="right")
    table.add_column("trace id")
    for r in reversed(traffic.snapshot(12)):
        cells = []
        for m in SHOWN_METRICS:
            v = r.scores.get(m)
            bad = v is not None and ((v > 0.5) if m == "hallucination" else (v < 0.7))
            cells.append(Text(fmt(v), style="red" if bad else ""))
        table.add_row(
            time.strftime("%H:%M:%S", time.localtime(r.started)),
            ("[red]![/] " if r.degraded else "") + r.question,
            f"{r.seconds * 1000:.0f} ms" if not r.error else "[red]error[/]",
            *cells,
            (r.trace_id or "")[:12],
        )
    parts.append(table)
    links = "\n".join(f"{k}: {v}" for k, v in urls.items())
    parts.append(Panel(f"{links}\nalerts: {alerts_text(alerts)}", title="where to look", expand=True))
    return Group(*parts)


def status_line(traffic: Traffic, scored: int, alerts: list[str] | None, elapsed: float) -> str:
    s = summary(traffic)
    return (
        f"[{elapsed:5.0f}s] {'DEGRADED' if traffic.degraded else 'healthy '} sent={s['sent']} "
        f"failed={s['failed']} scored={scored} faithfulness healthy={fmt(s['faithfulness_healthy'])} "
        f"(n={s['n_healthy']}) degraded={fmt(s['faithfulness_degraded'])} (n={s['n_degraded']}) "
        f"alerts={'(' + NO_PROMETHEUS + ')' if alerts is None else ','.join(alerts) or 'none'}"
    )


def _keep_summary(workdir: Path, summary: list[str]) -> Path | None:
    """Write the closing summary beside the data, where Ctrl-C cannot take it: a terminal's Ctrl-C also stops a
    ``| tee`` the output goes through, and the lines printed after it are lost."""
    if not summary:
        return None
    path = workdir / "summary.txt"
    try:
        path.write_text("\n".join(summary) + "\n", encoding="utf-8")
    except OSError:
        return None
    return path


def closing_summary(traffic: Traffic, scored: int, elapsed: float, watch: AlertWatch | None) -> list[str]:
    """What the run showed, in a few lines that survive the live view: sent, scored, mean faithfulness per phase
    over the whole run, and each alert's first firing (``watch`` None: no Prometheus ran)."""
    lines = [
        f"summary: {traffic.sent} requests sent ({traffic.failed} failed), {scored} records scored in {elapsed:.0f} s"
    ]
    faults_on = (
        traffic.degrade_after if traffic.degrade_after is not None and elapsed >= traffic.degrade_after else None
    )
    phases = []
    for degraded, name in ((False, "healthy"), (True, "degraded")):
        total, n = traffic.faithfulness_totals[degraded]
        if degraded and not n and faults_on is None:
            continue  # no degraded phase to speak of
        phases.append(f"{name} {fmt(total / n if n else None)} (n={n})")
    when = f"; faults on at {faults_on:.0f} s" if faults_on is not None else "; faults never switched on"
    lines.append("mean faithfulness: " + ", ".join(phases) + when)
    if watch is None:
        lines.append(f"alerts: {NO_PROMETHEUS}")
        return lines
    if not watch.first_firing:
        lines.append("alerts: none fired")
        return lines
    fired = []
    for name, (at, severity) in sorted(watch.first_firing.items(), key=lambda kv: (kv[1][0], kv[0])):
        after = f", {at - faults_on:.0f} s after faults on" if faults_on is not None else ""
        fired.append(f"{name} ({severity or 'no severity'}) at {at:.0f} s{after}")
    lines.append("alerts fired: " + "; ".join(fired))
    return lines


def _divert_stdout() -> None:
    """Point fd 1 at /dev/null: whoever read our output is gone, and what is still printed must not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def make_console() -> Any:
    """A rich console that goes quiet when stdout's reader has gone, instead of rich's default ``SystemExit(1)``
    from inside a print (which stopped the cleanup with the collector still running and holding its ports)."""
    from rich.console import Console

    class QuietOnBrokenPipe(Console):
        output_lost = False

        def on_broken_pipe(self) -> None:
            self.quiet = True
            self.output_lost = True
            _divert_stdout()

    return QuietOnBrokenPipe()


# --- main -----------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    from rich.live import Live

    console = make_console()
    stop = threading.Event()
    signals: dict[signal.Signals, Any] = {}

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signals[sig] = signal.signal(sig, on_signal)

    def say(text: str) -> None:
        """A plain line out; a closed pipe diverts stdout to /dev/null and ends the demo (nobody is reading)."""
        try:
            print(text, flush=True)
        except BrokenPipeError:
            console.on_broken_pipe()

    def output_lost() -> bool:
        return bool(console.output_lost)

    degrade_after = args.degrade_after if args.degrade_after is not None else (60.0 if args.degrade else None)
    own_dir = bool(args.temporary)
    workdir = Path(tempfile.mkdtemp(prefix="ragtrace-demo-")) if own_dir else Path(args.data_dir)
    workdir.mkdir(parents=True, exist_ok=True)
    children: list[ChildProcess] = []
    traffic: Traffic | None = None
    handle = None
    reader: ScoreReader | None = None
    watch: AlertWatch | None = None
    scored = 0
    started = time.monotonic()
    code = 0
    try:
        collector = CollectorProcess(
            workdir / "collector",
            http_port=pick_port(4318),
            grpc_port=pick_port(4317),
            metrics_port=pick_port(9464),
            sampling_rate=args.sampling_rate,
            judge=args.judge,
        )
        children.append(collector)
        console.print(f"starting the collector (pid {collector.pid}, log {collector.log_path}) ...")
        collector.wait_ready(abort=stop.is_set)
        console.print(f"records explorer: {collector.explorer_url}", highlight=False, soft_wrap=True)
        urls = {
            "records explorer": collector.explorer_url,
            "/metrics": collector.metrics_url,
            "OTLP": f"{collector.otlp_http_endpoint} (http), {collector.otlp_grpc_endpoint} (grpc)",
        }
        prometheus: PrometheusProcess | None = None
        if not args.no_prometheus:
            binary = shutil.which("prometheus")
            if binary is None:
                console.print("prometheus not installed: skipping it (apt-get install prometheus to add it)")
            else:
                prometheus = PrometheusProcess(
                    workdir / "prometheus",
                    port=pick_port(args.prometheus_port),
                    metrics_target=f"127.0.0.1:{collector.metrics_port}",
                    rule_mapping=DEMO_WINDOWS,
                    binary=binary,
                )
                children.append(prometheus)
                console.print(f"starting prometheus (pid {prometheus.pid}, log {prometheus.log_path}) ...")
                prometheus.wait_ready(abort=stop.is_set)
                watch = AlertWatch()
                urls["Prometheus"] = f"{prometheus.url}  (alerts: {prometheus.url}/alerts)"
        urls["worst records (while running)"] = (
            f"ragtrace-collector results --metric faithfulness --below 0.7 --store {collector.results_path}"
        )

        import ragtrace

        endpoint = collector.otlp_grpc_endpoint if args.protocol == "grpc" else collector.otlp_http_endpoint
        handle = ragtrace.init(
            service_name=SERVICE_NAME, endpoint=endpoint, protocol=args.protocol, schedule_delay_ms=200
        )
        traffic = Traffic(args.rate, degrade_after)
        reader = ScoreReader(collector.results_path)
        traffic.start()
        started = time.monotonic()
        last_alert_poll = 0.0
        last_line = 0.0

        def tick() -> tuple[int, float]:
            nonlocal last_alert_poll, scored
            assert reader is not None and traffic is not None
            scored = reader.fill(traffic.snapshot(60), traffic.add_faithfulness)
            elapsed = time.monotonic() - started
            if prometheus is not None and watch is not None and time.monotonic() - last_alert_poll > 3:
                last_alert_poll = time.monotonic()
                with contextlib.suppress(Exception):
                    watch.update(prometheus.alerts(), elapsed)
            return scored, elapsed

        def alerts() -> list[str] | None:
            return None if watch is None else watch.current

        def finished(elapsed: float) -> bool:
            return stop.is_set() or output_lost() or (args.duration is not None and elapsed >= args.duration)

        if console.is_terminal:
            with Live(console=console, refresh_per_second=2, transient=False) as live:
                while True:
                    scored, elapsed = tick()
                    live.update(render(traffic, scored, urls, alerts(), elapsed, args.duration))
                    if finished(elapsed):
                        break
                    stop.wait(0.5)
        else:
            for k, v in urls.items():
                say(f"{k}: {v}")
            while True:
                scored, elapsed = tick()
                if elapsed - last_line >= 5 or finished(elapsed):
                    last_line = elapsed
                    say(status_line(traffic, scored, alerts(), elapsed))
                if finished(elapsed):
                    break
                stop.wait(0.5)
    except Stopped:
        console.print("stopped while starting")
    except (RuntimeError, TimeoutError) as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        code = 1
    finally:
        ran_for = time.monotonic() - started  # the traffic's time, not counting the cleanup below
        # Every child is stopped before anything more is printed, each whatever happened to the others.
        stopped: list[tuple[ChildProcess, int | str | None]] = []
        try:
            if traffic is not None:
                traffic.stop()
            if handle is not None:
                handle.shutdown(5.0)
            if reader is not None and traffic is not None:
                scored = reader.fill(traffic.snapshot(), traffic.add_faithfulness)
        except Exception:  # the children below are stopped regardless
            pass
        finally:
            for child in reversed(children):
                try:
                    stopped.append((child, child.stop()))
                except Exception as exc:
                    stopped.append((child, f"{type(exc).__name__}: {exc}"))
            if reader is not None:
                with contextlib.suppress(Exception):
                    reader.close()
            for sig, previous in signals.items():
                signal.signal(sig, previous)
            if own_dir:
                shutil.rmtree(workdir, ignore_errors=True)
        try:
            for child, rc in stopped:
                console.print(f"stopped {child.name} (pid {child.pid}, exit {rc})", highlight=False)
            summary = closing_summary(traffic, scored, ran_for, watch) if traffic is not None else []
            if not own_dir:
                kept = _keep_summary(workdir, summary)
                console.print(
                    f"data kept in {workdir}{f' (summary in {kept})' if kept else ''}; browse the records again with"
                    f" ragtrace-collector serve --data-dir {workdir / 'collector'}",
                    highlight=False,
                    soft_wrap=True,
                )
            for line in summary:
                console.print(line, highlight=False, soft_wrap=True)
        except OSError:  # the terminal itself went away: the children are already stopped
            pass
    return code

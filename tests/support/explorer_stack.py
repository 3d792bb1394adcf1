"""A real collector (``ragtrace-collector serve``, embedded judge, bearer token) fed by the example RAG app,
for the records explorer's tests (``tests/ragtrace_collector/explorer/``).

The app runs in the test process, traced by the SDK, exporting OTLP/HTTP over loopback; the collector
assembles, scores and stores the records as in production, and serves the explorer on its /metrics port.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

import ragtrace
from ragtrace_collector.examples.rag_app.app import RagApp
from ragtrace_collector.examples.rag_app.questions import QUESTIONS
from tests.support.collector_process import serve, until
from tests.support.net import free_port

TOKEN = "explorer-test-token"
METRICS = [
    "faithfulness",
    "hallucination",
    "answer_relevancy",
    "context_precision",
    "context_relevancy",
    "context_recall",
]
PAGE_SIZE = 4
JAEGER = "http://jaeger.invalid:16686/trace/{trace_id}"
HOSTILE = "<script>document.title='pwned'</script><img src=x id=injected> What is the chemical symbol of carbon?"


@dataclass
class Turn:
    """One request the example app answers: who asks what, and which faults are on."""

    name: str
    service: str
    question: str
    reference: str | None
    session: str | None
    user: str | None
    degrade: bool = False


@dataclass
class Fed:
    """The running collector and what was sent to it."""

    base: str  # http://127.0.0.1:<metrics port>
    token: str | None
    store: Path
    log: Path
    otlp: str = ""  # http://127.0.0.1:<OTLP/HTTP port>
    proc: subprocess.Popen | None = None  # the collector process (signals, its exit)
    traces: dict[str, str] = field(default_factory=dict)  # turn name -> trace id, in the order they were sent
    turns: dict[str, Turn] = field(default_factory=dict)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def api(self, path: str, **params: object) -> httpx.Response:
        return httpx.get(self.base + path, params=params, headers=self.auth, timeout=10)  # type: ignore[arg-type]


def q(i: int) -> dict:
    return QUESTIONS[i % len(QUESTIONS)]


TURNS = [
    # a three-turn conversation: healthy, an invented claim, then no reference (context_recall is skipped)
    Turn("shop-1", "shop-assistant", q(0)["question"], q(0)["reference"], "sess-1", "alice"),
    Turn("shop-2", "shop-assistant", q(1)["question"], q(1)["reference"], "sess-1", "alice", degrade=True),
    Turn("shop-3", "shop-assistant", q(2)["question"], None, "sess-1", "alice"),
    Turn("docs-1", "docs-bot", q(3)["question"], q(3)["reference"], "sess-2", "bob"),
    Turn("docs-2", "docs-bot", q(4)["question"], q(4)["reference"], "sess-2", "bob"),
    Turn("hostile", "docs-bot", HOSTILE, q(5)["reference"], "sess-2", "bob"),
    Turn("shop-4", "shop-assistant", q(6)["question"], q(6)["reference"], None, "carol", degrade=True),
    Turn("shop-5", "shop-assistant", q(7)["question"], q(7)["reference"], None, "carol"),
]


def send(endpoint: str, turns: list[Turn]) -> dict[str, str]:
    """Answer each turn with the example app, traced and exported per service (all of one service, then the
    next); returns the trace ids in the order the requests were made."""
    traces: dict[str, str] = {}
    app = RagApp(token_delay=0.0)
    for service in dict.fromkeys(t.service for t in turns):
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        handle = ragtrace.init(
            endpoint=endpoint,
            protocol="http/protobuf",
            headers={"Authorization": f"Bearer {TOKEN}"},
            tracer_provider=provider,
            set_global=False,
            schedule_delay_ms=50,
        )
        try:
            for turn in (t for t in turns if t.service == service):
                answer = app.answer(
                    turn.question,
                    degrade=turn.degrade,
                    reference=turn.reference,
                    session_id=turn.session,
                    user_id=turn.user,
                )
                assert answer.trace_id
                traces[turn.name] = answer.trace_id
                time.sleep(0.02)  # distinct start times: the session page orders its turns by them
            assert handle.force_flush(10.0)
        finally:
            handle.shutdown()
    return traces


@contextmanager
def fed_collector(workdir: Path) -> Iterator[Fed]:
    """Start the collector in ``workdir``, send :data:`TURNS`, wait until every record is stored; stop it after."""
    with served_collector(workdir) as fed:
        fed.traces = send(fed.otlp, TURNS)
        fed.turns = {t.name: t for t in TURNS}
        deadline = time.monotonic() + 60
        while True:  # every record stored with every metric's outcome
            body = fed.api("/api/v1/records", limit=100).json()
            if body["total"] == len(TURNS) and all(len(r["scores"]) == len(METRICS) for r in body["records"]):
                break
            assert time.monotonic() < deadline, f"{body}\n" + fed.log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        yield fed


@contextmanager
def served_collector(
    workdir: Path,
    explorer: dict | None = None,
    token: str | None = TOKEN,
    listen: dict | None = None,
    auth: dict | None = None,
    extra: dict | None = None,
) -> Iterator[Fed]:
    """Start the collector in ``workdir`` (``explorer``, ``listen`` and ``auth`` settings over the tests' own;
    ``token`` None: no bearer token; ``extra``: any other settings, merged section by section), ready, nothing sent
    yet; stop it after."""
    http_port, metrics_port = free_port(), free_port()
    config = {
        "data_dir": str(workdir / "data"),
        "listen": {
            "host": "127.0.0.1",
            "http_port": http_port,
            "grpc_port": None,
            "metrics_port": metrics_port,
            **(listen or {}),
        },
        "auth": {"bearer_token": token, **(auth or {})},
        "assembly": {"grace_seconds": 0.3, "sweep_interval_seconds": 0.05},
        "scoring": {"metrics": METRICS},
        "explorer": {"page_size": PAGE_SIZE, "trace_links": {"Jaeger": JAEGER}, **(explorer or {})},
    }
    for key, value in (extra or {}).items():
        section = config.get(key)
        config[key] = {**section, **value} if isinstance(section, dict) else value
    with serve(workdir, config) as served:
        base = served.metrics
        fed = Fed(base, token, workdir / "data" / "results.sqlite", served.log, otlp=served.otlp, proc=served.proc)
        until(lambda: served.readyz(base) == 200, 60, "the collector to be ready", served)
        yield fed

"""The Phoenix exporter over real HTTP, against a stand-in for Phoenix's ``POST /v1/span_annotations``.

The stand-in answers as scripted (statuses, delays) so outages, refusals and a slow Phoenix can be shown; the
real Phoenix server is in test_phoenix_live.py. What must hold: batches of bounded size, every annotation sent
or counted as dropped, and ``emit`` never waiting for Phoenix.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import load_config
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations, annotation, annotator_kind
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.service.scoring import FanOut, result_sinks

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"


class StandIn:
    """Records each POST (path, query, headers, JSON body); answers ``statuses`` in order, then 200."""

    def __init__(self, statuses: list[int] | None = None, delay: float = 0.0) -> None:
        self.statuses = list(statuses or [])
        self.delay = delay
        self.posts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with stand_in.lock:
                    status = stand_in.statuses.pop(0) if stand_in.statuses else 200
                    stand_in.posts.append({"path": self.path, "headers": dict(self.headers), "body": body})
                time.sleep(stand_in.delay)
                reply = json.dumps({"data": []} if status == 200 else {"detail": "no"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client the exporter abandoned at shutdown hangs up mid-reply: expected here

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def annotations(self) -> list[dict[str, Any]]:
        with self.lock:
            return [a for p in self.posts for a in p["body"]["data"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def phoenix():
    servers: list[StandIn] = []

    def make(**kw: Any) -> StandIn:
        servers.append(StandIn(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


def record(i: int = 0) -> RagRecord:
    return RagRecord(trace_id=TRACE, pipeline="qa", metadata={"root_span_id": format(int(ROOT, 16) + i, "016x")})


def faithfulness(score: float = 0.5) -> MetricResult:
    return MetricResult(
        "faithfulness",
        "scored",
        score,
        label="fail",
        details={"unsupported": ["Paris is in Spain"]},
        usage=JudgeUsage(calls=2, prompt_tokens=300, completion_tokens=40),
    )


def test_each_score_is_one_span_annotation(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, api_key="secret", flush_interval=0.05)
    results = [
        faithfulness(),
        MetricResult("bleu", "scored", 0.25),
        MetricResult("context_recall", "skipped", reason="no reference"),  # not a score: no annotation
        MetricResult("answer_relevancy", "error", reason="judge error"),
    ]
    assert sink.emit(record(), results, "openai/gpt-4o-mini") == 2
    assert sink.flush(5)
    sink.shutdown()
    (post,) = server.posts
    assert post["path"] == "/v1/span_annotations?sync=false"
    assert post["headers"]["Authorization"] == "Bearer secret"
    assert post["body"]["data"] == [
        {
            "span_id": ROOT,
            "name": "faithfulness",
            "annotator_kind": "LLM",
            "result": {"score": 0.5, "label": "fail", "explanation": "Unsupported claims: Paris is in Spain"},
            "identifier": "ragtrace/openai/gpt-4o-mini",
            "metadata": {"judge": "openai/gpt-4o-mini", "higher_is_better": True, "pipeline": "qa", "trace_id": TRACE},
        },
        {
            "span_id": ROOT,
            "name": "bleu",
            "annotator_kind": "CODE",  # no judge call made this score
            "result": {"score": 0.25},
            "identifier": "ragtrace/openai/gpt-4o-mini",
            "metadata": {"judge": "openai/gpt-4o-mini", "higher_is_better": True, "pipeline": "qa", "trace_id": TRACE},
        },
    ]
    assert sink.count("sent") == 2


def test_batches_are_bounded_and_everything_is_sent(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, batch_size=40, flush_interval=0.05)
    for i in range(250):
        sink.emit(record(i), [faithfulness()], "local")
    assert sink.flush(10)
    sink.shutdown()
    sizes = [len(p["body"]["data"]) for p in server.posts]
    assert max(sizes) <= 40 and sum(sizes) == 250
    assert len({a["span_id"] for a in server.annotations()}) == 250
    assert sink.count("sent") == 250
    assert all(a["annotator_kind"] == "CODE" for a in server.annotations())  # the embedded judge is no LLM


def test_emit_never_waits_for_a_slow_phoenix_and_overflow_is_counted(phoenix):
    server = phoenix(delay=1.0)
    sink = PhoenixAnnotations(server.url, batch_size=10, max_pending=50, flush_interval=0.01)
    start = time.perf_counter()
    for i in range(500):
        sink.emit(record(i), [faithfulness()], "local")
    assert time.perf_counter() - start < 0.25  # 500 emits while Phoenix takes a second per batch
    sink.shutdown(timeout=1.5)
    counts = {o: sink.count(o) for o in ("sent", "queue_full", "shutdown", "unreachable")}
    assert counts["queue_full"] >= 500 - 50 - 10  # at most the queue and one batch in flight were kept
    assert sum(counts.values()) == 500  # every annotation is sent or counted, none vanishes


def test_an_outage_is_retried_then_counted(phoenix):
    server = phoenix(statuses=[503, 503])
    sink = PhoenixAnnotations(server.url, flush_interval=0.01, backoff_initial=0.01)
    sink.emit(record(), [faithfulness()], "local")
    assert sink.flush(5)
    assert sink.count("sent") == 1 and len(server.posts) == 3  # two refusals, then delivered
    down = phoenix(statuses=[502] * 10)
    sink2 = PhoenixAnnotations(down.url, flush_interval=0.01, backoff_initial=0.01, max_attempts=3)
    sink2.emit(record(), [faithfulness(), MetricResult("bleu", "scored", 0.1)], "local")
    assert sink2.flush(5)
    assert sink2.count("unreachable") == 2 and len(down.posts) == 3
    sink.shutdown()
    sink2.shutdown()


def test_a_refused_batch_is_not_retried(phoenix, caplog):
    server = phoenix(statuses=[422, 422])
    sink = PhoenixAnnotations(server.url, flush_interval=0.01, backoff_initial=0.01)
    sink.emit(record(), [faithfulness()], "local")
    assert sink.flush(5)
    sink.emit(record(1), [faithfulness()], "local")
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("rejected") == 2 and len(server.posts) == 2
    assert sum("phoenix refused" in r.getMessage() for r in caplog.records) == 1  # once per status


def test_nothing_listening_costs_no_time_to_scoring():
    sink = PhoenixAnnotations("http://127.0.0.1:9", flush_interval=0.01, backoff_initial=0.01, max_attempts=2)
    start = time.perf_counter()
    sink.emit(record(), [faithfulness()], "local")
    assert time.perf_counter() - start < 0.05
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("unreachable") == 1


def test_records_without_a_span_to_annotate_are_counted(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, flush_interval=0.01)
    assert sink.emit(RagRecord(id="row-1"), [faithfulness()], "local") == 0  # a dataset row
    assert sink.emit(RagRecord(trace_id=TRACE, metadata={"root_span_id": "zz"}), [faithfulness()], "local") == 0
    sink.shutdown()
    assert sink.count("no_span") == 2 and server.posts == []
    assert sink.emit(record(), [faithfulness()], "local") == 0  # after shutdown: counted, not queued
    assert sink.count("shutdown") == 1


def test_annotator_kind_and_body():
    llm_score = faithfulness()
    assert annotator_kind(llm_score, "openai/gpt-4o-mini") == "LLM"
    assert annotator_kind(llm_score, "local") == "CODE"
    assert annotator_kind(MetricResult("rouge", "scored", 0.3), "openai/gpt-4o-mini") == "CODE"
    body = annotation(RagRecord(), MetricResult("toxicity", "scored", 0.0, reason="no harmful content"), "j", ROOT)
    assert body["result"] == {"score": 0.0, "explanation": "no harmful content"}


def test_the_configured_sinks(tmp_path):
    registry = CollectorRegistry()
    cfg = load_config(
        overrides={
            "data_dir": str(tmp_path),
            "export": {
                "phoenix": {"endpoint": "http://127.0.0.1:9", "api_key": "k", "batch_size": 7},
                "otlp_events": {"endpoint": "http://127.0.0.1:9"},
            },
        },
        environ={"RAGTRACE_EXPORT__PHOENIX__MAX_PENDING": "11"},
    )
    sinks = result_sinks(cfg, registry)
    assert isinstance(sinks, FanOut)
    phoenix_sink = next(s for s in sinks.sinks if isinstance(s, PhoenixAnnotations))
    assert (phoenix_sink.batch_size, phoenix_sink.max_pending, phoenix_sink.headers) == (
        7,
        11,
        {"Authorization": "Bearer k"},
    )
    sinks.shutdown()
    assert result_sinks(load_config(overrides={"data_dir": str(tmp_path)}, environ={}), CollectorRegistry()) is None

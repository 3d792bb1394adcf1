"""The Phoenix exporter over real HTTP, against a stand-in for Phoenix's ``POST /v1/span_annotations`` and
``POST /v1/trace_annotations``.

The stand-in answers as scripted (statuses, delays) so outages, refusals and a slow Phoenix can be shown; the
real Phoenix server is in test_phoenix_live.py. What must hold: batches of bounded size and of one kind, every
annotation sent or counted as dropped, and ``emit`` never waiting for Phoenix.
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
from ragtrace_collector.exporter.phoenix import PhoenixAnnotations, annotation, annotator_kind, trace_annotation
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import JudgeUsage, MetricResult
from ragtrace_collector.service.scoring import FanOut, result_sinks
from tests.support.claim_verdicts import CONTRADICTED, NOT_FOUND, RECORD, scored

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"


class StandIn:
    """Records each POST (path, query, headers, JSON body); answers ``statuses`` in order, then 200; a path in
    ``refuse`` always gets its status."""

    def __init__(
        self, statuses: list[int] | None = None, delay: float = 0.0, refuse: dict[str, int] | None = None
    ) -> None:
        self.statuses = list(statuses or [])
        self.refuse = dict(refuse or {})
        self.delay = delay
        self.posts: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with stand_in.lock:
                    status = stand_in.refuse.get(self.path.split("?")[0]) or (
                        stand_in.statuses.pop(0) if stand_in.statuses else 200
                    )
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

    def annotations(self, kind: str | None = None) -> list[dict[str, Any]]:
        """What was posted: of ``kind`` (span, trace) or of both."""
        with self.lock:
            return [a for p in self.posts if kind is None or kind_of(p) == kind for a in p["body"]["data"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def kind_of(post: dict[str, Any]) -> str:
    return {"/v1/span_annotations": "span", "/v1/trace_annotations": "trace"}[post["path"].split("?")[0]]


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


def test_each_score_is_one_span_and_one_trace_annotation(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, api_key="secret", flush_interval=0.05)
    results = [
        faithfulness(),
        MetricResult("bleu", "scored", 0.25),
        MetricResult("context_recall", "skipped", reason="no reference"),  # not a score: no annotation
        MetricResult("answer_relevancy", "error", reason="judge error"),
    ]
    assert sink.emit(record(), results, "openai/gpt-4o-mini") == 4  # two scores, each on the span and the trace
    assert sink.flush(5)
    sink.shutdown()
    posts = {p["path"]: p for p in server.posts}
    assert sorted(posts) == ["/v1/span_annotations?sync=false", "/v1/trace_annotations?sync=false"]
    assert all(p["headers"]["Authorization"] == "Bearer secret" for p in server.posts)
    shared = [
        {
            "name": "faithfulness",
            "annotator_kind": "LLM",
            "result": {"score": 0.5, "label": "fail", "explanation": "Unsupported claims: Paris is in Spain"},
            "identifier": "ragtrace/openai/gpt-4o-mini",
            "metadata": {"judge": "openai/gpt-4o-mini", "higher_is_better": True, "pipeline": "qa", "trace_id": TRACE},
        },
        {
            "name": "bleu",
            "annotator_kind": "CODE",  # no judge call made this score
            "result": {"score": 0.25},
            "identifier": "ragtrace/openai/gpt-4o-mini",
            "metadata": {"judge": "openai/gpt-4o-mini", "higher_is_better": True, "pipeline": "qa", "trace_id": TRACE},
        },
    ]
    assert posts["/v1/span_annotations?sync=false"]["body"] == {"data": [{"span_id": ROOT, **a} for a in shared]}
    assert posts["/v1/trace_annotations?sync=false"]["body"] == {"data": [{"trace_id": TRACE, **a} for a in shared]}
    assert (sink.count("sent", "span"), sink.count("sent", "trace"), sink.count("sent")) == (2, 2, 4)
    samples = {
        (s.labels["kind"], s.labels["outcome"])
        for m in sink.registry.collect()
        for s in m.samples
        if s.name == "ragtrace_phoenix_annotations_total"
    }
    assert len(samples) == 12 and ("span", "no_trace") not in samples and ("trace", "no_span") not in samples


def test_a_trace_id_is_posted_normalised_and_the_kinds_take_turns(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, batch_size=3, flush_interval=0.05)
    odd = RagRecord(trace_id="0x" + TRACE.upper(), metadata={"root_span_id": ROOT})
    assert sink.emit(odd, [faithfulness()], "local") == 2
    assert sink.flush(5)
    assert server.annotations("trace")[0]["trace_id"] == TRACE  # 32 lowercase hex, no 0x, as Phoenix stores it
    with sink._cond:  # hold the sender while a backlog of both kinds builds up
        for i in range(6):
            sink.emit(record(i), [faithfulness()], "local")
    assert sink.flush(5)
    sink.shutdown()
    assert [(kind_of(p), len(p["body"]["data"])) for p in server.posts[2:]] == [("span", 3), ("trace", 3)] * 2


def test_batches_are_bounded_and_everything_is_sent(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, batch_size=40, flush_interval=0.05)
    for i in range(250):
        sink.emit(record(i), [faithfulness()], "local")
    assert sink.flush(10)
    sink.shutdown()
    sizes = [len(p["body"]["data"]) for p in server.posts]
    assert max(sizes) <= 40 and sum(sizes) == 500
    for p in server.posts:  # a batch is of one kind
        id_key = {"span": "span_id", "trace": "trace_id"}[kind_of(p)]
        assert all(id_key in a and set(a) & {"span_id", "trace_id"} == {id_key} for a in p["body"]["data"])
    assert len({a["span_id"] for a in server.annotations("span")}) == 250
    assert [a["trace_id"] for a in server.annotations("trace")] == [TRACE] * 250
    assert sink.count("sent", "span") == sink.count("sent", "trace") == 250
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
    assert counts["queue_full"] >= 1000 - 50 - 10  # at most the queue and one batch in flight were kept
    assert sum(counts.values()) == 1000  # every annotation (a span's and a trace's per score) is counted
    assert sink.count("queue_full", "span") > 0 and sink.count("queue_full", "trace") > 0


def test_an_outage_is_retried_then_counted(phoenix):
    server = phoenix(statuses=[503, 503])
    sink = PhoenixAnnotations(server.url, flush_interval=0.01, backoff_initial=0.01)
    sink.emit(RagRecord(metadata={"root_span_id": ROOT}), [faithfulness()], "local")  # a span annotation only
    assert sink.flush(5)
    assert sink.count("sent") == 1 and len(server.posts) == 3  # two refusals, then delivered
    down = phoenix(statuses=[502] * 10)
    sink2 = PhoenixAnnotations(down.url, flush_interval=0.01, backoff_initial=0.01, max_attempts=3)
    sink2.emit(record(), [faithfulness(), MetricResult("bleu", "scored", 0.1)], "local")
    assert sink2.flush(5)
    assert sink2.count("unreachable", "span") == sink2.count("unreachable", "trace") == 2
    assert len(down.posts) == 6  # three tries a kind
    sink.shutdown()
    sink2.shutdown()


def test_a_refused_batch_is_not_retried(phoenix, caplog):
    server = phoenix(statuses=[422] * 4)
    sink = PhoenixAnnotations(server.url, flush_interval=0.01, backoff_initial=0.01)
    sink.emit(record(), [faithfulness()], "local")
    assert sink.flush(5)
    sink.emit(record(1), [faithfulness()], "local")
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("rejected", "span") == sink.count("rejected", "trace") == 2 and len(server.posts) == 4
    refused = [r.getMessage() for r in caplog.records if "phoenix refused" in r.getMessage()]
    assert len(refused) == 2 and any("span" in m for m in refused) and any("trace" in m for m in refused)  # once a kind


def test_a_phoenix_without_trace_annotations_still_gets_span_annotations(phoenix):
    server = phoenix(refuse={"/v1/trace_annotations": 404})  # a Phoenix too old for trace annotations
    sink = PhoenixAnnotations(server.url, flush_interval=0.01, backoff_initial=0.01)
    sink.emit(record(), [faithfulness()], "local")
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("sent", "span") == 1 and sink.count("rejected", "trace") == 1
    assert sink.count("sent", "trace") == sink.count("rejected", "span") == 0


def test_nothing_listening_costs_no_time_to_scoring():
    sink = PhoenixAnnotations("http://127.0.0.1:9", flush_interval=0.01, backoff_initial=0.01, max_attempts=2)
    start = time.perf_counter()
    sink.emit(record(), [faithfulness()], "local")
    assert time.perf_counter() - start < 0.05
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("unreachable", "span") == sink.count("unreachable", "trace") == 1


def test_records_without_a_span_to_annotate_are_counted(phoenix):
    server = phoenix()
    sink = PhoenixAnnotations(server.url, flush_interval=0.01)
    assert sink.emit(RagRecord(id="row-1"), [faithfulness()], "local") == 0  # a dataset row
    assert sink.emit(RagRecord(trace_id="zz", metadata={"root_span_id": "00"}), [faithfulness()], "local") == 0
    assert sink.emit(RagRecord(trace_id="0" * 32), [faithfulness()], "local") == 0  # the invalid all-zero id
    assert (sink.count("no_span", "span"), sink.count("no_trace", "trace")) == (3, 3)
    # a trace whose root span never arrived: its trace annotation only
    assert sink.emit(RagRecord(trace_id=TRACE, metadata={"root_span_id": "zz"}), [faithfulness()], "local") == 1
    assert sink.flush(5)
    sink.shutdown()
    assert sink.count("no_span") == 4 and sink.count("no_trace") == 3
    assert [kind_of(p) for p in server.posts] == ["trace"] and server.annotations()[0]["trace_id"] == TRACE
    assert sink.emit(record(), [faithfulness()], "local") == 0  # after shutdown: counted, not queued
    assert sink.count("shutdown", "span") == sink.count("shutdown", "trace") == 1


def test_annotator_kind_and_body():
    llm_score = faithfulness()
    assert annotator_kind(llm_score, "openai/gpt-4o-mini") == "LLM"
    assert annotator_kind(llm_score, "local") == "CODE"
    assert annotator_kind(MetricResult("rouge", "scored", 0.3), "openai/gpt-4o-mini") == "CODE"
    toxicity = MetricResult("toxicity", "scored", 0.0, reason="no harmful content")
    body = annotation(RagRecord(), toxicity, "j", ROOT)
    assert body["result"] == {"score": 0.0, "explanation": "no harmful content"}
    on_trace = trace_annotation(RagRecord(), toxicity, "j", TRACE)
    assert on_trace == {"trace_id": TRACE, **{k: v for k, v in body.items() if k != "span_id"}}


def test_the_annotation_explains_which_claims_are_contradicted_and_which_not_found():
    faithfulness_result, hallucination = scored()
    for result in (faithfulness_result, hallucination):
        body = annotation(RECORD, result, "local", ROOT)
        assert body["result"]["explanation"] == (
            f"Contradicted: {CONTRADICTED} (contradicted by context #2: '…for two years…' (P=0.04)); "
            f"Not found in the contexts: {NOT_FOUND}"
        )


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

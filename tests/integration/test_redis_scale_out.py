"""Scale-out end to end: 2 receivers and 3 workers (separate ``ragtrace-collector serve`` processes) on one
real redis-server, fed by the real OTel OTLP exporter.

* spans of each trace are split: the retriever's span goes to receiver A, the root and generator spans to
  receiver B — the shared assembly state in Redis makes one record of them;
* a judge budget of 24 records per minute holds across both receivers;
* worker 3 scores a few records, then its judge hangs and it is killed with SIGKILL holding leased
  records; the other workers take them over once its liveness key expires (10 s), before its 60 s lease;
* every sampled record is scored exactly once in the summed ``ragtrace_evaluations_total`` of the workers
  (the killed worker's share read from its last scrape, taken while it could no longer finish anything),
  and exactly one Redis scored mark exists per record;
* Redis is stopped mid-run: receivers keep accepting OTLP, buffer sampled records locally, and flush them
  when Redis is back (AOF keeps the stream), after which those records are scored too.

The judge is the LLM judge (litellm) against ``tests/support/scripted_openai.py`` over real HTTP.

A second test runs two receivers alone on the real OpenLIT LangChain capture, whose requests are each two traces
(retrieval, model call): the retrievals reach receiver A, the calls B, and every request still makes one record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import redis
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ragtrace import attributes as A
from tests.support.binaries import require
from tests.support.net import free_port
from tests.support.redis_server import RedisServer
from tests.support.scripted_openai import Reply, ScriptedOpenAI, faithfulness_reply

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BUDGET_RPM = 24
WAVE1 = 40
WAVE2 = 6
METRIC = "faithfulness"


# --- the scripted judge: answers the LLM judge's tasks by reading the prompt ---------------------------
def judge_reply(body: dict) -> dict:
    """Faithfulness answers read off the prompt; every second claim unsupported."""
    return faithfulness_reply(body, supported=lambda i: i % 2 == 0)


class HangsAfter:
    """Answers ``n`` chat calls, then hangs every later one (a judge stuck under a worker)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        with self.lock:
            self.calls += 1
            calls = self.calls
        if calls > self.n:
            return Reply(delay=120.0, json=judge_reply(body))
        return judge_reply(body)


# --- processes ------------------------------------------------------------------------------------------
class Proc:
    def __init__(self, name: str, tmp: Path, cfg: dict) -> None:
        self.name = name
        self.cfg = cfg
        self.metrics_port = cfg["listen"]["metrics_port"]
        self.http_port = cfg["listen"].get("http_port")
        self.path = tmp / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(cfg))
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Proc:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(REPO)}
        env = {k: v for k, v in env.items() if not k.startswith("RAGTRACE_")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ragtrace_collector.cli",
                    "serve",
                    "--config",
                    str(self.path),
                    "--log-level",
                    "WARNING",
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready:\n{self.log.read_text()[-3000:]}")

    def scrape(self) -> dict[tuple[str, tuple], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


def total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def send_traces(exporters: dict[str, object], start: int, n: int, split: bool, only: str | None = None) -> list[str]:
    """``n`` RAG traces; ``split``: retriever span via receiver A, root + generator via B."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    providers = {}
    for name, exporter in exporters.items():
        # The exporters are shared by every call: no at-exit shutdown per provider (it shut each one down
        # again, "Exporter already shutdown, ignoring call"); SimpleSpanProcessor leaves nothing queued.
        p = TracerProvider(resource=Resource.create({"service.name": f"svc-{name}"}), shutdown_on_exit=False)
        p.add_span_processor(SimpleSpanProcessor(exporter))
        providers[name] = p
    ids = []
    for i in range(start, start + n):
        gen = providers[only or "b"].get_tracer("generator")
        ret = providers[only or ("a" if split else "b")].get_tracer("retriever")
        q = f"What is fact {i}?"
        answer = f"Fact {i} is blue. Fact {i} is round. It was found in {1900 + i}."
        with gen.start_as_current_span(
            "rag",
            attributes={
                A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_CHAIN,
                A.RAGTRACE_SPAN_ROLE: A.ROLE_PIPELINE,
                A.RAGTRACE_PIPELINE_NAME: "qa",
                A.INPUT_VALUE: q,
            },
        ) as root:
            ids.append(format(root.get_span_context().trace_id, "032x"))
            with ret.start_as_current_span(
                "retrieve",
                attributes={
                    A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_RETRIEVER,
                    A.INPUT_VALUE: q,
                    A.document_attr(0, "content"): f"Fact {i} is blue and round.",
                    A.document_attr(0, "id"): f"doc-{i}",
                    A.document_attr(0, "score"): 0.9,
                },
            ):
                pass
            with gen.start_as_current_span(
                "generate",
                attributes={
                    A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_LLM,
                    A.LLM_MODEL_NAME: "gpt-x",
                    A.OUTPUT_VALUE: answer,
                },
            ):
                pass
            root.set_attribute(A.OUTPUT_VALUE, answer)
    for p in providers.values():
        p.force_flush()
    return ids


def wait_until(cond, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_two_receivers_three_workers_kill_and_redis_restart(tmp_path):
    require("redis-server", "redis-server")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    (tmp_path / "redis").mkdir()
    srv = RedisServer(data_dir=tmp_path / "redis").start()
    judge = ScriptedOpenAI(responder=judge_reply).start()
    hangs = HangsAfter(4)
    stuck_judge = ScriptedOpenAI(responder=hangs).start()
    procs: list[Proc] = []
    try:

        def cfg(role: str, name: str, judge_url: str | None = None) -> dict:
            c = {
                "role": role,
                "data_dir": str(tmp_path / name),
                "listen": {"host": "127.0.0.1", "grpc_port": None, "http_port": None, "metrics_port": free_port()},
                "queue": {"url": srv.url, "max_depth": 1000},
                "sampling": {"rate": 1.0, "budget": {"records_per_minute": BUDGET_RPM, "judge_tokens_per_hour": 10**9}},
            }
            if role == "receiver":
                c["listen"]["http_port"] = free_port()
                c["assembly"] = {
                    "grace_seconds": 0.5,
                    "max_wait_seconds": 20,
                    "shared_state": srv.url,
                    "sweep_interval_seconds": 0.1,
                }
            else:
                c["judge"] = {
                    "model": "openai/scripted",
                    "base_url": judge_url,
                    "api_key": "k",
                    "concurrency": 2,
                    "timeout_seconds": 300,
                    "max_retries": 0,
                }
                c["scoring"] = {"metrics": [METRIC], "concurrency": 2, "lease_seconds": 60}
            return c

        ra = Proc("receiver-a", tmp_path, cfg("receiver", "receiver-a"))
        rb = Proc("receiver-b", tmp_path, cfg("receiver", "receiver-b"))
        w1 = Proc("worker-1", tmp_path, cfg("worker", "worker-1", judge.base_url))
        w2 = Proc("worker-2", tmp_path, cfg("worker", "worker-2", judge.base_url))
        w3 = Proc("worker-3", tmp_path, cfg("worker", "worker-3", stuck_judge.base_url))
        procs = [ra, rb, w1, w2, w3]
        for p in procs:
            p.start()
        for p in procs:
            p.wait_ready()
        exporters = {
            name: OTLPSpanExporter(endpoint=f"http://127.0.0.1:{p.http_port}/v1/traces", timeout=5)
            for name, p in (("a", ra), ("b", rb))
        }
        r = redis.Redis.from_url(srv.url, decode_responses=True)

        def marks() -> set[str]:
            return {k.split(":")[2] for k in r.scan_iter(match=f"ragtrace:scored:*:{METRIC}", count=1000)}

        # --- wave 1: every trace split across the two receivers --------------------------------------------
        wave1 = send_traces(exporters, 0, WAVE1, split=True)
        receivers = [ra, rb]

        def sampled() -> float:
            return sum(total(p.scrape(), "ragtrace_traces_sampled_total") for p in receivers)

        def dropped(reason: str) -> float:
            return sum(total(p.scrape(), "ragtrace_traces_dropped_total", reason=reason) for p in receivers)

        wait_until(lambda: sampled() + dropped("budget_records") >= WAVE1, 30, "wave 1 sampled or dropped")
        # One record per trace although its spans reached two receivers ...
        assert sum(total(p.scrape(), "ragtrace_traces_received_total") for p in receivers) == WAVE1
        assert sum(total(p.scrape(), "ragtrace_late_spans_total") for p in receivers) == 0
        # ... and the judge budget held across receivers: exactly 24 of 40 admitted in this minute.
        assert sampled() == BUDGET_RPM and dropped("budget_records") == WAVE1 - BUDGET_RPM

        # --- worker 3 scores 2 records (4 judge calls), then hangs holding leases: SIGKILL it ---------------
        wait_until(lambda: hangs.calls > hangs.n, 30, "worker 3's judge to hang")
        time.sleep(1.0)  # anything answered before the hang has been recorded by now
        w3_last = w3.scrape()
        w3_counted = total(w3_last, "ragtrace_evaluations_total", metric=METRIC)
        assert w3_counted >= 1
        w3.stop(signal.SIGKILL)
        # Its leased records go to workers 1 and 2 once its liveness key lapses (10 s), long before its
        # 60 s lease would; a slow but live worker keeps its records. All 24 get scored.
        killed_at = time.monotonic()
        wait_until(lambda: len(marks()) >= BUDGET_RPM, 40, "all wave-1 records scored")
        assert time.monotonic() - killed_at < 40  # < the 60 s lease: taken over because it died
        assert marks() <= set(wave1)
        live = [w1, w2]
        wait_until(
            lambda: (
                sum(total(w.scrape(), "ragtrace_evaluations_total", metric=METRIC) for w in live) + w3_counted
                >= BUDGET_RPM
            ),
            10,
            "summed metrics to catch up",
        )
        summed = sum(total(w.scrape(), "ragtrace_evaluations_total", metric=METRIC) for w in live) + w3_counted
        assert summed == BUDGET_RPM  # exactly once across workers, the killed one included
        assert sum(total(w.scrape(), "ragtrace_queue_reclaimed_total") for w in live) >= 1
        assert sum(1 for k in r.scan_iter(match="ragtrace:scored:*", count=1000)) == BUDGET_RPM
        # Judge tokens spent by all workers were counted in the one shared budget.
        shared_tokens = sum(int(v) for v in r.hgetall("ragtrace:budget:tokens").values())
        assert shared_tokens > 0

        # --- Redis goes away: receivers keep serving and buffer; Redis returns: buffers flush ---------------
        srv.stop()
        wave2 = send_traces({"a": exporters["a"]}, 1000, WAVE2 // 2, split=False, only="a")
        wave2 += send_traces({"b": exporters["b"]}, 2000, WAVE2 - WAVE2 // 2, split=False, only="b")
        wait_until(
            lambda: sum(total(p.scrape(), "ragtrace_traces_received_total") for p in receivers) == WAVE1 + WAVE2,
            20,
            "receivers to assemble wave 2 without Redis",
        )
        # Sampled with the local budget share and held in memory until Redis is back.
        wait_until(
            lambda: (
                sum(total(p.scrape(), "ragtrace_queue_local_buffer_records") for p in receivers)
                == sampled() - BUDGET_RPM
                > 0
            ),
            10,
            "wave-2 records in the receivers' local buffers",
        )
        assert sum(total(p.scrape(), "ragtrace_otlp_requests_total", status="ok") for p in receivers) > 0
        srv.start()
        wait_until(
            lambda: sum(total(p.scrape(), "ragtrace_queue_local_buffer_records") for p in receivers) == 0,
            20,
            "local buffers to flush",
        )
        expected = int(sampled())
        wait_until(lambda: len(marks()) >= expected, 45, "wave-2 records scored after the restart")
        assert marks() <= set(wave1) | set(wave2)
        wait_until(
            lambda: (
                sum(total(w.scrape(), "ragtrace_evaluations_total", metric=METRIC) for w in live) + w3_counted
                >= expected
            ),
            10,
            "summed metrics after the restart",
        )
        summed = sum(total(w.scrape(), "ragtrace_evaluations_total", metric=METRIC) for w in live) + w3_counted
        assert summed == expected == len(marks())
        assert sum(total(p.scrape(), "ragtrace_queue_shed_total", reason="redis_unavailable") for p in receivers) == 0
    finally:
        for p in procs:
            p.stop()
        judge.stop()
        stuck_judge.stop()
        srv.cleanup()
        for p in procs:
            if p.proc is not None and p.proc.returncode not in (0, -9):
                print(f"--- {p.name} (rc={p.proc.returncode})\n{p.log.read_text()[-2000:]}")


def split_by_trace(body: bytes) -> dict[str, bytes]:
    """One captured OTLP request as one request per trace (same resource and scope), serialized."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    trace_ids = {s.trace_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans}
    out = {}
    for trace_id in trace_ids:
        part = ExportTraceServiceRequest()
        part.CopyFrom(request)
        for rs in part.resource_spans:
            for ss in rs.scope_spans:
                keep = [s for s in ss.spans if s.trace_id == trace_id]
                del ss.spans[:]
                ss.spans.extend(keep)
        out[trace_id.hex()] = part.SerializeToString()
    return out


def test_two_receivers_make_one_record_of_a_request_traced_in_two(tmp_path):
    """OpenLIT's LangChain instrumentation traces each request's retrieval and its model call apart (the real
    capture in ``tests/fixtures/peers/openlit_langchain``): the retrieval goes to receiver A, the call to B, both
    sweep the shared state, and each request still makes one record with its passages and its answer."""
    require("redis-server", "redis-server")
    (tmp_path / "redis").mkdir()
    srv = RedisServer(data_dir=tmp_path / "redis").start()
    procs: list[Proc] = []
    try:

        def cfg(name: str) -> dict:
            return {
                "role": "receiver",
                "data_dir": str(tmp_path / name),
                "listen": {
                    "host": "127.0.0.1",
                    "grpc_port": None,
                    "http_port": free_port(),
                    "metrics_port": free_port(),
                },
                "queue": {"url": srv.url, "max_depth": 1000},
                "sampling": {"rate": 1.0},
                "assembly": {"grace_seconds": 0.5, "shared_state": srv.url, "sweep_interval_seconds": 0.1},
            }

        ra, rb = Proc("receiver-a", tmp_path, cfg("receiver-a")), Proc("receiver-b", tmp_path, cfg("receiver-b"))
        procs = [ra, rb]
        for p in procs:
            p.start()
        for p in procs:
            p.wait_ready()
        captures = sorted((REPO / "tests" / "fixtures" / "peers" / "openlit_langchain").glob("requests-*.binpb"))
        parts = [body for path in captures for body in split_by_trace(path.read_bytes()).values()]
        retrievals = [body for body in parts if b"retrieval" in body]  # the span's name; the chat's prompt lacks it
        calls = [body for body in parts if b"retrieval" not in body]
        assert len(retrievals) == len(calls) == 6

        def post(target: Proc, body: bytes) -> None:
            url = f"http://127.0.0.1:{target.http_port}/v1/traces"
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(req, timeout=5) as reply:
                assert reply.status == 200

        # The calls come due a few sweeps after the retrievals, so which receiver completes which half is up to
        # their sweeps, independently (``test_redis_pairing.py`` pins each order down).
        for body in retrievals:
            post(ra, body)
        time.sleep(0.25)
        for body in calls:
            post(rb, body)

        def completed(reason: str) -> float:
            return sum(total(p.scrape(), "ragtrace_assembly_completed_total", reason=reason) for p in procs)

        wait_until(lambda: completed("split_request") + completed("root") >= 12, 30, "both halves of every request")
        time.sleep(1.0)  # a record made alone would have come out by now
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        records = [json.loads(fields["r"]) for _, fields in r.xrange("ragtrace:records")]
        assert len(records) == 6 and completed("split_request") == 6
        assert all(len(rec["retrieved_contexts"]) == 3 and rec["response"] for rec in records)
        assert len({rec["user_input"] for rec in records}) == 6
    finally:
        for p in procs:
            p.stop()
        srv.cleanup()


def test_a_receiver_killed_during_a_redis_outage_loses_no_sampled_record(tmp_path):
    """Redis goes away, a receiver keeps accepting OTLP and holds the sampled records, and is then killed with
    SIGKILL (an OOM kill, a node drained hard) before Redis returns. Restarted on the same data directory once
    Redis is back, it delivers every one of them: they were kept in its spill file, not in its memory."""
    require("redis-server", "redis-server")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    (tmp_path / "redis").mkdir()
    srv = RedisServer(data_dir=tmp_path / "redis").start()
    config = {
        "role": "receiver",
        "data_dir": str(tmp_path / "receiver"),
        "listen": {"host": "127.0.0.1", "grpc_port": None, "http_port": free_port(), "metrics_port": free_port()},
        "queue": {"url": srv.url, "max_depth": 1000},
        "sampling": {"rate": 1.0},
        "assembly": {"grace_seconds": 0.3, "sweep_interval_seconds": 0.1},
    }
    receiver = Proc("receiver", tmp_path, config)
    try:
        receiver.start().wait_ready()
        srv.stop()
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{receiver.http_port}/v1/traces", timeout=5)
        sent = send_traces({"b": exporter}, 0, 8, split=False, only="b")
        wait_until(
            lambda: total(receiver.scrape(), "ragtrace_queue_local_buffer_records") == 8,
            20,
            "the sampled records held while Redis is down",
        )
        time.sleep(2.0)  # the outage goes on: its parts retry Redis every half second
        outage_log = [line for line in receiver.log.read_text().splitlines() if "unreachable" in line]
        assert outage_log, "the outage is logged"
        said = [line[line.index("ragtrace_collector") :] for line in outage_log]
        assert len(said) == len(set(said)), f"an outage is told once, not once per retry: {outage_log}"
        receiver.stop(signal.SIGKILL)
        srv.start()
        restarted = Proc("receiver", tmp_path, config).start()
        receiver = restarted
        restarted.wait_ready()
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        wait_until(lambda: r.xlen("ragtrace:records") >= 8, 20, "the held records in the stream")
        time.sleep(0.5)  # a duplicate delivery would have arrived by now
        delivered = [json.loads(fields["r"])["trace_id"] for _, fields in r.xrange("ragtrace:records")]
        assert sorted(delivered) == sorted(sent)
        samples = restarted.scrape()
        assert total(samples, "ragtrace_queue_local_buffer_records") == 0
        assert total(samples, "ragtrace_queue_shed_total") == 0
    finally:
        receiver.stop()
        srv.cleanup()

"""OTLP logs in, over loopback: ``/v1/logs`` (protobuf, JSON) and gRPC ``LogsService/Export`` under the trace path's
rules; GenAI events joined to their span by trace and span id; everything else counted and dropped, bounded.

Log records are sent by the real OpenTelemetry SDK (``LoggerProvider`` + the OTLP log exporters), spans by its
tracer, so the bytes are what an instrumented app sends.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import aiohttp
import grpc
from google.protobuf import json_format
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from ragtrace_collector.internal.journal import LOGS_JSON, LOGS_PROTOBUF, Journal
from ragtrace_collector.receiver.ingest import decode_journaled
from ragtrace_collector.receiver.otlp_grpc import LOGS_SERVICE
from tests.support.receiver_stack import ServedStack

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
PB = {"Content-Type": "application/x-protobuf"}
QUESTION = "When did the Halvard Bridge open?"
ANSWER = "The Halvard Bridge opened in 1911."
PASSAGE = "The Halvard Bridge in Norrvik opened in 1911 and spans 420 metres across the Lund river."
DETAILS = "gen_ai.client.inference.operation.details"


class App:
    """An app's tracer and logger exporting to one served stack (real OTel SDK, HTTP or gRPC logs exporter)."""

    def __init__(self, stack: ServedStack, grpc_logs: bool = False, send_spans: bool = True) -> None:
        resource = Resource.create({"service.name": "logs-app"})
        self.tracer_provider = TracerProvider(resource=resource)
        if send_spans:  # else only the log events reach the collector
            exporter = OTLPSpanExporter(endpoint=stack.url, timeout=5)
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.logger_provider = LoggerProvider(resource=resource)
        logs = (
            GrpcLogExporter(endpoint=f"http://{stack.target}", insecure=True, timeout=5)
            if grpc_logs
            else OTLPLogExporter(endpoint=stack.url.replace("/v1/traces", "/v1/logs"), timeout=5)
        )
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        self.tracer = self.tracer_provider.get_tracer("app")
        self.logger = self.logger_provider.get_logger("app")

    def chat(self, with_span: bool = True) -> str:
        """One chat call whose content is only in a details event (the instrumentations' event_only mode)."""
        with self.tracer.start_as_current_span("chat gpt-4o-mini") as span:
            if with_span:
                span.set_attribute("gen_ai.operation.name", "chat")
            self.logger.emit(
                LogRecord(
                    event_name=DETAILS,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.response.model": "gpt-4o-mini",
                        "gen_ai.usage.input_tokens": 87,
                        "gen_ai.usage.output_tokens": 9,
                        "gen_ai.input.messages": json.dumps(
                            [
                                {"role": "system", "parts": [{"type": "text", "content": "Answer from the context."}]},
                                {
                                    "role": "user",
                                    "parts": [
                                        {"type": "text", "content": f"Context:\n{PASSAGE}\n\nQuestion: {QUESTION}"}
                                    ],
                                },
                            ]
                        ),
                        "gen_ai.output.messages": json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
                        ),
                    },
                )
            )
            return format(span.get_span_context().trace_id, "032x")

    def unrelated(self, n: int) -> None:
        """Application logs, in and out of a span: never GenAI events."""
        with self.tracer.start_as_current_span("work"):
            for i in range(n):
                self.logger.emit(LogRecord(body=f"request {i} handled", attributes={"http.route": "/ask"}))

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()


async def served(**kw) -> ServedStack:
    return await ServedStack(**kw).start()


def log_records(stack: ServedStack, outcome: str) -> float:
    return stack.sample("ragtrace_log_records_total", outcome=outcome)


async def test_details_event_over_http_and_grpc_joins_its_span():
    """The call's content only in a log event: question (told apart from the stuffed prompt), answer, model,
    tokens and the passages the prompt labels as context, whichever transport the logs take."""
    for grpc_logs in (False, True):
        stack = await served()
        app = App(stack, grpc_logs=grpc_logs)
        try:
            trace_id = await asyncio.to_thread(app.chat)
        finally:
            app.close()
            await stack.stop()
        (record,) = stack.records()
        assert record.trace_id == trace_id
        assert (record.user_input, record.response, record.model) == (QUESTION, ANSWER, "gpt-4o-mini")
        assert (record.input_tokens, record.output_tokens) == (87, 9)
        assert [c.content for c in record.retrieved_contexts] == [PASSAGE]
        assert record.metadata["ragtrace.contexts_source"] == "prompt"
        transport = "grpc_logs" if grpc_logs else "http_logs"
        assert stack.requests(transport, "ok") == 1 and stack.requests("http", "ok") == 1
        assert log_records(stack, "kept") == 1 and log_records(stack, "joined") == 1


async def test_json_logs_and_the_event_arriving_before_its_spans():
    """OTLP/JSON logs (hex ids) whose event arrives before the trace's spans: it waits in assembly and joins."""
    stack = await served()
    body = (FIXTURES / "otel_genai_events" / "logs-001.binpb").read_bytes()
    request = ExportLogsServiceRequest()
    request.ParseFromString(body)
    data = json_format.MessageToDict(request)
    for rl in data["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for record in sl["logRecords"]:
                for key in ("traceId", "spanId"):
                    record[key] = base64.b64decode(record[key]).hex()
    try:
        async with aiohttp.ClientSession() as session:
            url = stack.url.replace("/v1/traces", "/v1/logs")
            async with session.post(url, json=data) as reply:
                assert reply.status == 200 and reply.content_type == "application/json"
                assert await reply.json() == {}
            traces = (FIXTURES / "otel_genai_events" / "requests-000.binpb").read_bytes()
            async with session.post(stack.url, data=traces, headers=PB) as reply:
                assert reply.status == 200
    finally:
        await stack.stop()
    (record,) = stack.records()
    assert record.user_input == QUESTION and record.response == ANSWER and len(record.retrieved_contexts) == 3


async def test_logs_without_a_matching_trace_are_bounded_and_counted():
    """Events for traces that never come make no record: counted ``unmatched`` when their trace completes (as a
    trace that is no request); an event naming a span its trace does not have is ``unmatched`` too."""
    stack = await served()
    app = App(stack, send_spans=False)
    try:
        for _ in range(3):
            await asyncio.to_thread(app.chat)
    finally:
        app.close()
        await stack.stop()
    assert stack.records() == []
    assert log_records(stack, "kept") == 3 and log_records(stack, "unmatched") == 3
    assert log_records(stack, "joined") == 0
    assert stack.sample("ragtrace_assembly_completed_total", reason="no_request") == 3


async def test_a_flood_of_logs_never_pushes_a_trace_out():
    """Unrelated logs are dropped at the door; GenAI events for unknown traces beyond the log-only bound are dropped
    and counted. The trace in flight before the flood is assembled whole (never evicted), its event joined; the one
    after it still makes its record from its spans, its own event (sent before its span, into a full bound) counted
    as dropped: under a flood the bound gives, never the traces."""
    stack = await served(assembly={"max_traces": 20})
    stack.assembler.assembly.max_log_only_traces = 5
    app = App(stack)
    try:
        before = await asyncio.to_thread(app.chat)
        await asyncio.to_thread(app.unrelated, 50)
        body = (FIXTURES / "otel_genai_events" / "logs-001.binpb").read_bytes()
        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        record = request.resource_logs[0].scope_logs[0].log_records[0]
        flood = ExportLogsServiceRequest()
        flood.resource_logs.add().CopyFrom(request.resource_logs[0])
        scope = flood.resource_logs[0].scope_logs[0]
        del scope.log_records[:]
        for i in range(200):
            copy = scope.log_records.add()
            copy.CopyFrom(record)
            copy.trace_id = (i + 1).to_bytes(16, "big")
        async with aiohttp.ClientSession() as session:
            url = stack.url.replace("/v1/traces", "/v1/logs")
            async with session.post(url, data=flood.SerializeToString(), headers=PB) as reply:
                assert reply.status == 200
        after = await asyncio.to_thread(app.chat)
    finally:
        app.close()
        await stack.stop()
    assert log_records(stack, "not_genai") == 50 and log_records(stack, "kept") == 202
    assert log_records(stack, "over_limit") == 195 + 1  # 5 unknown traces fit the bound; the last chat's event not
    assert stack.sample("ragtrace_assembly_completed_total", reason="evicted") == 0
    records = {r.trace_id: r for r in stack.records()}
    assert records[before].response == ANSWER and records[before].user_input == QUESTION
    assert after in records and records[after].response is None  # its spans are all there; its content was dropped
    assert log_records(stack, "joined") == 1 and log_records(stack, "unmatched") == 5
    assembly = stack.assembler.assembly
    assert assembly._log_only_bytes == 0 and not assembly._log_only  # nothing held once completed


async def test_logs_take_the_trace_paths_auth_and_size_limits():
    stack = await served(bearer_token="logs-token-0123456789abcdef", max_request_bytes=4096)
    url = stack.url.replace("/v1/traces", "/v1/logs")
    body = (FIXTURES / "otel_genai_events" / "logs-001.binpb").read_bytes()
    assert len(body) < 4096
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=body, headers=PB) as reply:
                assert reply.status == 401
            auth = {**PB, "Authorization": "Bearer logs-token-0123456789abcdef"}
            async with session.post(url, data=b"\x00" * 5000, headers=auth) as reply:
                assert reply.status == 413
            async with session.post(url, data=b"\xff\xff not protobuf", headers=auth) as reply:
                assert reply.status == 400
            async with session.post(url, data=body, headers=auth) as reply:
                assert reply.status == 200
        async with grpc.aio.insecure_channel(stack.target) as channel:
            method = channel.unary_unary(f"/{LOGS_SERVICE}/Export")
            try:
                await method(body, timeout=5)
                raise AssertionError("a logs call without the token was taken")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
            try:
                await method(
                    b"\x00" * 5000, metadata=(("authorization", "Bearer logs-token-0123456789abcdef"),), timeout=5
                )
                raise AssertionError("an oversized logs call was taken")
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await stack.stop()
    assert stack.requests("http_logs", "unauthenticated") == 1 and stack.requests("http_logs", "too_large") == 1
    assert stack.requests("http_logs", "malformed") == 1 and stack.requests("http_logs", "ok") == 1
    assert stack.requests("grpc_logs", "unauthenticated") == 1 and stack.requests("grpc_logs", "too_large") == 1
    assert stack.requests("http", "ok") == 0  # logs are never counted as trace requests


async def test_acknowledged_logs_are_journaled_and_replayed(tmp_path):
    """A logs request answered 200 is in the journal first; a restart replays it as the same carriers."""
    journal = Journal(tmp_path, sync=False)
    stack = await served(journal=journal)
    body = (FIXTURES / "otel_genai_events" / "logs-001.binpb").read_bytes()
    try:
        async with aiohttp.ClientSession() as session:
            url = stack.url.replace("/v1/traces", "/v1/logs")
            async with session.post(url, data=body, headers=PB) as reply:
                assert reply.status == 200
    finally:
        await stack.stop()
        journal.shutdown()
    replayed = list(Journal(tmp_path, sync=False).replay())
    assert [kind for kind, _ in replayed] == [LOGS_PROTOBUF] and replayed[0][1] == body
    decoded = decode_journaled(*replayed[0])
    (carriers,) = decoded.traces.values()
    assert [c.is_log_carrier for c in carriers] == [True] and carriers[0].events[0][0] == DETAILS
    assert LOGS_JSON != LOGS_PROTOBUF


def test_other_events_and_records_without_a_span_are_dropped_not_refused():
    """Only GenAI events naming a span are kept; the reasons are the bounded outcome label."""
    from ragtrace_collector.receiver.decode import extract_log_events

    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    scope.log_records.add(event_name="gen_ai.choice", trace_id=b"\x01" * 16)  # no span id
    scope.log_records.add(event_name="browser.click", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    old = scope.log_records.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    old.attributes.add(key="event.name").value.string_value = "gen_ai.user.message"  # before event_name existed
    old.body.kvlist_value.values.add(key="content").value.string_value = QUESTION
    decoded = extract_log_events(request)
    assert decoded.dropped == {"no_span": 1, "not_genai": 1} and decoded.accepted == 1 and decoded.rejected == 0
    ((name, attrs),) = next(iter(decoded.traces.values()))[0].events
    assert name == "gen_ai.user.message" and attrs["content"] == QUESTION and "event.name" not in attrs

"""What the real peer packages emitted, replayed through the real OTLP/HTTP receiver, becomes one full record each.

The bytes in ``tests/fixtures/peers/<setup>/`` are the OTLP requests the apps in ``scripts/peers/apps/`` sent
(``requests-NNN`` to ``/v1/traces``, ``logs-NNN`` to ``/v1/logs``, replayed in their order), unchanged, when run with the packages listed in each ``versions.json`` (``scripts/peers/capture.py`` made them).
Every app asks the same six questions of an OpenAI-compatible scripted server, even ones non-streamed and odd
ones streamed; the server reports ``completion_tokens = ceil(len(answer) / 4)``, so counting a call's tokens
twice shows.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
from pathlib import Path

import aiohttp
import pytest

from ragtrace_collector.exporter.otlp_events import EvaluationEvents
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.processor.conventions.evaluations import PEER_EVALUATIONS
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "peers"
_spec = importlib.util.spec_from_file_location("peer_common", ROOT / "scripts" / "peers" / "apps" / "common.py")
assert _spec is not None and _spec.loader is not None
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

# setup -> (records a first-token time for streamed calls, records contexts, reports tokens when streaming)
SETUPS: dict[str, tuple[bool, bool, bool]] = {
    "oi_langchain": (False, True, True),  # OpenInference's LangChain LLM span has no first-token event
    "oi_langchain_openai": (True, True, True),  # the OpenAI span (its own trace) joins the chain's, first token too
    "oi_openai": (True, True, True),
    "oi_llamaindex": (True, True, False),  # llama-index streams without asking for usage
    "tl_decorators": (True, True, True),
    "tl_langchain": (False, True, True),  # OpenLLMetry's LangChain LLM span has no first-token time
    "tl_llamaindex": (True, True, False),  # streamed queries: only the spans below the never-ended workflow span
    "openlit_qdrant": (True, True, True),  # the qdrant spans never record the points returned: read from the prompt
    "openlit_langchain": (True, True, True),  # retrieval and chat traced apart, joined by assembly
    "openlit_scored": (True, True, True),  # the app's own gen_ai.evaluation.result verdicts, kept as the peer's
    "langfuse_observe": (True, True, True),  # @observe + langfuse.openai: completion_start_time is the first token
    "langfuse_langchain": (True, True, True),  # Langfuse's LangChain CallbackHandler: chain/retriever/generation
    "otel_genai_events": (False, True, True),  # content only in log events; contexts read from the prompt
    "otel_genai_spans": (False, True, True),  # content on the spans; util-genai's retrieval span
    "otel_genai_message_events": (False, True, True),  # openai-v2 2.3b0: one log event per message; prompt contexts
}
CORPUS = {text for _, text in common.CORPUS}
PB = {"Content-Type": "application/x-protobuf"}


def captured(setup: str, only: str | None = None) -> list[Path]:
    """A setup's captured bodies in the order they were sent (traces and logs share one numbering)."""
    paths = [p for p in (FIXTURES / setup).glob("*.binpb") if only is None or p.name.startswith(only)]
    return sorted(paths, key=lambda p: p.stem.rpartition("-")[2])


async def replay(make_stack, setup: str, logs: bool = True) -> list:
    """POST every captured request body to a served receiver (``logs``: the log requests too); the records, in
    request order."""
    stack = make_stack()
    receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
    await receiver.start()
    try:
        async with aiohttp.ClientSession() as session:
            for path in captured(setup):
                kind = "logs" if path.name.startswith("logs-") else "traces"
                if kind == "logs" and not logs:
                    continue
                url = f"http://127.0.0.1:{receiver.port}/v1/{kind}"
                async with session.post(url, data=path.read_bytes(), headers=PB) as reply:
                    assert reply.status == 200, await reply.text()
    finally:
        await receiver.shutdown()
    assert stack.requests("http", "ok") == len(captured(setup, "requests-"))
    assert stack.requests("http_logs", "ok") == (len(captured(setup, "logs-")) if logs else 0)
    return sorted(stack.records(), key=lambda r: r.start_time_unix_nano)


def test_every_capture_names_its_package_versions():
    for setup in SETUPS:
        versions = json.loads((FIXTURES / setup / "versions.json").read_text())
        assert versions["setup"] == setup and versions["packages"] and "capture.py" in versions["command"]
        assert sum(p.stat().st_size for p in (FIXTURES / setup).glob("*.binpb")) < 150_000  # KBs, not MBs


@pytest.mark.parametrize("setup", sorted(SETUPS))
async def test_one_full_record_per_request(make_stack, setup):
    ttft_recorded, has_contexts, stream_tokens = SETUPS[setup]
    records = await replay(make_stack, setup)
    assert len(records) == len(common.QUESTIONS), [r.user_input for r in records]  # index builds make none
    for i, (record, (question, answer, _)) in enumerate(zip(records, common.QUESTIONS)):
        streamed = common.streamed(i)
        assert record.user_input == question  # never the stuffed prompt
        assert record.response == answer  # no "assistant: " prefix, no placeholder
        assert record.model == common.MODEL
        contents = [c.content for c in record.retrieved_contexts]
        if has_contexts:
            # the 3 ranked passages once (a nested retriever is not read twice); ties may rank differently per store
            assert len(contents) == len(set(contents)) == 3
        else:
            assert contents == []
        assert all(c in CORPUS and not re.match(r"[<{\[]", c) for c in contents)
        if stream_tokens or not streamed:
            assert record.output_tokens == math.ceil(len(answer) / 4)  # counted once
            assert record.input_tokens and record.input_tokens < 250  # one prompt (llama-index's is ~200)
        assert 0 < record.generation_duration_seconds <= record.request_duration_seconds
        if record.retrieval_duration_seconds is not None:
            total = record.retrieval_duration_seconds + record.generation_duration_seconds
            assert total <= record.request_duration_seconds
        if streamed and ttft_recorded:
            assert record.streamed is True
            assert 0 < record.ttft_seconds <= record.generation_duration_seconds
        else:
            assert record.ttft_seconds is None  # never for a non-streamed call, nor one not timed
            assert record.streamed in (None, False) or streamed


async def test_openinference_langchain_streams_are_flagged(make_stack):
    records = await replay(make_stack, "oi_langchain")
    assert [r.streamed for r in records] == [common.streamed(i) for i in range(len(records))]


async def test_openinference_langchain_and_openai_one_record_per_request(make_stack):
    """LangChain's OpenInference tracer does not make its spans current, so the OpenAI instrumentation's span of
    the chain's model call starts a trace of its own; assembly pairs it with the chain's LLM span (same service,
    same prompt, within its time): one record per request, the call read once, and the pairing counted."""
    stack = make_stack()
    records = await replay(lambda: stack, "oi_langchain_openai")
    assert len(records) == len(common.QUESTIONS)
    assert [r.user_input for r in records] == [q for q, _, _ in common.QUESTIONS]
    assert [r.response for r in records] == [a for _, a, _ in common.QUESTIONS]
    completed = "ragtrace_assembly_completed_total"
    assert stack.sample(completed, reason="duplicate_llm_call") == len(common.QUESTIONS)
    # streamed calls get the OpenAI instrumentation's first-token time; LangChain's span alone has none
    assert [r.ttft_seconds is not None for r in records] == [common.streamed(i) for i in range(len(records))]


async def test_model_calls_nested_in_their_request_are_never_paired(make_stack):
    """The OpenAI instrumentation alone, its calls nested in the app's chain span: no bare call, nothing paired."""
    stack = make_stack()
    records = await replay(lambda: stack, "oi_openai")
    assert len(records) == len(common.QUESTIONS)
    assert stack.sample("ragtrace_assembly_completed_total", reason="duplicate_llm_call") == 0


async def test_openlit_langchain_halves_join_into_one_record_per_request(make_stack):
    """OpenLIT's LangChain instrumentation makes no span for the chain: each request's retrieval and chat are two
    traces; assembly joins the chat into the retrieval's trace (every passage in its prompt), counted."""
    stack = make_stack()
    records = await replay(lambda: stack, "openlit_langchain")
    assert [r.user_input for r in records] == [q for q, _, _ in common.QUESTIONS]
    assert all(len(r.retrieved_contexts) == 3 and r.response and r.model for r in records)
    assert stack.sample("ragtrace_assembly_completed_total", reason="split_request") == len(common.QUESTIONS)
    assert stack.sample("ragtrace_assembly_completed_total", reason="duplicate_llm_call") == 0


async def test_langfuse_observations_are_read_as_their_roles(make_stack):
    """Langfuse SDK 5: ``langfuse.observation.type`` is the role (the ``@observe`` root a pipeline, ``retriever``,
    ``generation``); the request's question and answer from its input and output, the passages with their ids and
    scores from the retriever's output, tokens from ``usage_details``, TTFT from ``completion_start_time``."""
    records = await replay(make_stack, "langfuse_observe")
    for i, record in enumerate(records):
        question = common.QUESTIONS[i][0]
        assert [(c.id, c.content) for c in record.retrieved_contexts] == [(d, t) for d, t, _ in common.top_k(question)]
        assert all(c.score is not None for c in record.retrieved_contexts)
        assert "ragtrace.contexts_source" not in record.metadata  # said only of contexts read from a prompt
        assert (record.ttft_seconds is not None) == common.streamed(i)


async def test_otel_genai_content_in_log_events_only(make_stack):
    """The official instrumentation's event-only content: without ``/v1/logs`` the records have no question,
    answer or contexts; with it every event joins its span (none unmatched), and the passages come from the
    prompt's labelled context block, in the order retrieved, the record saying so."""
    stack = make_stack()
    records = await replay(lambda: stack, "otel_genai_events")
    assert stack.sample("ragtrace_log_records_total", outcome="joined") == len(common.QUESTIONS)
    assert stack.sample("ragtrace_log_records_total", outcome="unmatched") == 0
    for i, record in enumerate(records):
        question = common.QUESTIONS[i][0]
        assert [c.content for c in record.retrieved_contexts] == [t for _, t, _ in common.top_k(question)]
        assert record.metadata["ragtrace.contexts_source"] == "prompt"
        assert [(t.role, t.content) for t in record.turns] == [
            ("user", question),
            ("assistant", common.QUESTIONS[i][1]),
        ]
    blind = await replay(make_stack, "otel_genai_events", logs=False)
    assert len(blind) == len(common.QUESTIONS)
    assert all(r.user_input is None and r.response is None and not r.retrieved_contexts for r in blind)


async def test_otel_genai_retrieval_span_gives_ranked_documents(make_stack):
    """util-genai's retrieval span (``gen_ai.operation.name=retrieval``): its query text is the question and its
    ``gen_ai.retrieval.documents`` the contexts, with ids and scores, read before any prompt."""
    records = await replay(make_stack, "otel_genai_spans")
    for i, record in enumerate(records):
        question = common.QUESTIONS[i][0]
        assert [(c.id, c.content) for c in record.retrieved_contexts] == [(d, t) for d, t, _ in common.top_k(question)]
        assert "ragtrace.contexts_source" not in record.metadata  # said only of contexts read from a prompt


async def test_langfuse_langchain_callback_handler_observations(make_stack):
    """Langfuse's LangChain ``CallbackHandler``: every runnable a ``chain`` observation (the outermost one the
    request, its input the question), the vector-store retriever a ``retriever`` whose output is the LangChain
    ``Document`` list (ids and texts), ChatOpenAI a ``generation`` with ``usage_details`` and, when streamed, its
    ``completion_start_time``; the chain observations that pass the passages along are never read as retrievals."""
    records = await replay(make_stack, "langfuse_langchain")
    ids = {text: doc_id for doc_id, text in common.CORPUS}
    for i, record in enumerate(records):
        question = common.QUESTIONS[i][0]
        assert record.user_input == question and record.turns[0].content == question
        assert [c.id for c in record.retrieved_contexts] == [ids[c.content] for c in record.retrieved_contexts]
        assert common.top_k(question, 1)[0][1] in [c.content for c in record.retrieved_contexts]  # ties rank apart
        assert "ragtrace.contexts_source" not in record.metadata  # from the retriever observation, not the prompt
        assert record.streamed is (True if common.streamed(i) else None)  # Langfuse records no flag, only TTFT


async def test_otel_genai_per_message_events_join_their_span(make_stack):
    """openai-v2 2.3b0 writes no content on the span: one ``gen_ai.system.message`` / ``gen_ai.user.message`` event
    per prompt message and a ``gen_ai.choice`` for the completion, each a log record naming the chat span. Every one
    joins (three a request, none unmatched); the question is the prompt's labelled question, the answer the choice,
    the contexts the prompt's labelled passages, in the order retrieved. Without the logs nothing is readable."""
    stack = make_stack()
    records = await replay(lambda: stack, "otel_genai_message_events")
    assert stack.sample("ragtrace_log_records_total", outcome="joined") == 3 * len(common.QUESTIONS)
    assert stack.sample("ragtrace_log_records_total", outcome="unmatched") == 0
    for i, record in enumerate(records):
        question, answer, _ = common.QUESTIONS[i]
        assert [c.content for c in record.retrieved_contexts] == [t for _, t, _ in common.top_k(question)]
        assert record.metadata["ragtrace.contexts_source"] == "prompt"
        assert [(t.role, t.content) for t in record.turns] == [("user", question), ("assistant", answer)]
        assert [t.role for t in record.prompt_messages] == ["system", "user"]
    blind = await replay(make_stack, "otel_genai_message_events", logs=False)
    assert len(blind) == len(common.QUESTIONS)
    assert all(r.user_input is None and r.response is None and not r.retrieved_contexts for r in blind)
    assert all(r.model == common.MODEL and r.output_tokens for r in blind)  # the span's own attributes


def peer_verdicts(i: int) -> list[tuple[str | None, float | None, str | None]]:
    """What ``apps/openlit_scored.py`` concluded of request ``i``: its answer's numbers are all in the context
    exactly when the question is answerable from the corpus."""
    grounded = common.QUESTIONS[i][2]
    return [
        ("answer_numbers_in_context", 1.0 if grounded else 0.0, "true" if grounded else "false"),
        ("reviewer_verdict", None, "supported" if grounded else "unsupported"),
    ]


async def test_peer_evaluation_results_are_kept_as_the_peers(make_stack):
    """OpenLIT's ``log_score`` writes each verdict twice, as an event of the request span and as a log event naming
    it: the record keeps each verdict once, in order, under ``ragtrace.peer_evaluations`` (with the tool's own
    metadata), and the span events alone give the same."""
    for logs in (True, False):
        records = await replay(make_stack, "openlit_scored", logs=logs)
        for i, record in enumerate(records):
            verdicts = record.metadata[PEER_EVALUATIONS]
            assert [(v["name"], v["score"], v["label"]) for v in verdicts] == peer_verdicts(i)
            assert verdicts[0]["explanation"] == "numbers checked against the context"
            assert verdicts[0]["attributes"] == {"by": "app"}
            assert {v["span_id"] for v in verdicts} == {record.metadata["root_span_id"]}
    plain = await replay(make_stack, "otel_genai_events")
    assert all(PEER_EVALUATIONS not in r.metadata for r in plain)  # no verdict, no key


async def test_our_own_evaluation_events_sent_back_are_not_a_peers(make_stack):
    """Should the collector's ``export.otlp_events`` point at a collector, its ``gen_ai.evaluation.result`` events
    (the real exporter's, naming the scored trace's root span) join the trace like any log event, but are never
    taken for the peer's verdicts: only OpenLIT's two per request are kept."""
    first = make_stack()
    scored = await replay(lambda: first, "openlit_scored")
    stack = make_stack()
    receiver = OtlpHttpReceiver(stack.ingestor, "127.0.0.1", 0)
    await receiver.start()
    try:
        async with aiohttp.ClientSession() as session:
            for path in captured("openlit_scored"):
                kind = "logs" if path.name.startswith("logs-") else "traces"
                url = f"http://127.0.0.1:{receiver.port}/v1/{kind}"
                async with session.post(url, data=path.read_bytes(), headers=PB) as reply:
                    assert reply.status == 200
        events = EvaluationEvents(f"http://127.0.0.1:{receiver.port}/v1/logs", batch=False)
        ours = [MetricResult("faithfulness", "scored", score=0.25, reason="ours")]
        sent = [await asyncio.to_thread(events.emit, record, ours, "local") for record in scored]
        await asyncio.to_thread(events.shutdown, 5.0)
    finally:
        await receiver.shutdown()
    assert sent == [1] * len(scored) and events.count("sent") == len(scored)
    records = sorted(stack.records(), key=lambda r: r.start_time_unix_nano)
    joined = first.sample("ragtrace_log_records_total", outcome="joined")
    assert stack.sample("ragtrace_log_records_total", outcome="joined") == joined + len(scored)  # ours joined too
    for i, record in enumerate(records):
        assert [(v["name"], v["score"], v["label"]) for v in record.metadata[PEER_EVALUATIONS]] == peer_verdicts(i)

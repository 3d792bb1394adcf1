"""capture_content=False (argument and env var), redaction, size caps with truncation marked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import ragtrace
from ragtrace import attributes as A
from ragtrace.config import SETTINGS

TEXT_KEYS = (A.INPUT_VALUE, A.OUTPUT_VALUE, A.RAGTRACE_CONTEXTS, A.GEN_AI_RETRIEVAL_QUERY_TEXT, A.RAGTRACE_REFERENCE)


@ragtrace.retriever
def retrieve(query):
    return [{"id": "d1", "content": "secret passage", "score": 0.7, "metadata": {"owner": "alice"}}]


@ragtrace.generator(model="m")
def generate(question, contexts):
    yield "secret "
    yield "answer"


@ragtrace.pipeline(name="p")
def pipe(question):
    ragtrace.annotate(reference="secret reference", session_id="s")
    docs = retrieve(question)
    return "".join(generate(question, [d["content"] for d in docs]))


def _no_text(spans):
    for s in spans.all():
        a = dict(s.attributes)
        for k in TEXT_KEYS:
            assert k not in a, (s.name, k)
        assert not any(k.endswith("document.content") or k.endswith("document.metadata") for k in a)
        assert not any("secret" in str(v) for v in a.values()), (s.name, a)


def test_capture_content_false_records_no_text_but_keeps_structure(spans):
    ragtrace.init(tracer_provider=spans_provider(spans), set_global=False, capture_content=False)
    assert pipe("secret question") == "secret answer"
    _no_text(spans)
    r = spans.attrs("retrieve")
    assert r[A.document_attr(0, "id")] == "d1" and r[A.document_attr(0, "score")] == 0.7
    g = spans.attrs("generate")
    assert g[A.RAGTRACE_CHUNK_COUNT] == 2 and A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK in g
    assert spans.attrs("p")[A.SESSION_ID] == "s"


def test_capture_content_false_per_decorator(spans):
    @ragtrace.retriever(capture_content=False)
    def quiet(query):
        return ["secret"]

    quiet("secret q")
    a = spans.attrs("quiet")
    assert A.INPUT_VALUE not in a and A.document_attr(0, "content") not in a


def test_env_var_turns_content_capture_off(spans, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "false")
    ragtrace.init(tracer_provider=spans_provider(spans), set_global=False)
    assert SETTINGS.capture_content is False
    pipe("secret question")
    _no_text(spans)


def test_genai_capture_modes_are_understood(spans, monkeypatch):
    for value, expected in (("SPAN_ONLY", True), ("NO_CONTENT", False), ("true", True), ("0", False)):
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
        ragtrace.init(tracer_provider=spans_provider(spans), set_global=False)
        assert SETTINGS.capture_content is expected, value


def test_env_var_applies_without_init():
    code = textwrap.dedent("""
        import ragtrace
        from ragtrace.config import SETTINGS
        print(SETTINGS.capture_content)
    """)
    env = {**os.environ, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert out.stdout.strip() == "False", out.stderr


def test_redaction_regex_list_runs_on_every_text(spans):
    ragtrace.init(tracer_provider=spans_provider(spans), set_global=False, redact=[r"secret", r"\b\d{4}-\d{4}\b"])
    pipe("my secret card 1234-5678")
    for s in spans.all():
        for v in dict(s.attributes).values():
            assert "secret" not in str(v) and "1234-5678" not in str(v)
    assert spans.attrs("p")[A.INPUT_VALUE] == "my [REDACTED] card [REDACTED]"
    assert spans.attrs("retrieve")[A.document_attr(0, "content")] == "[REDACTED] passage"
    assert len(spans.attrs("generate")[A.RAGTRACE_CONTEXT_DOCUMENTS]) == 1  # that document, not sent again
    assert spans.attrs("p")[A.RAGTRACE_REFERENCE] == "[REDACTED] reference"


def test_redaction_callable_and_broken_hook_drops_text(spans):
    ragtrace.init(tracer_provider=spans_provider(spans), set_global=False, redact=lambda s: s.replace("secret", "***"))
    pipe("secret")
    assert spans.attrs("generate")[A.OUTPUT_VALUE] == "*** answer"
    spans.exporter.clear()

    def broken(s):
        raise RuntimeError("hook bug")

    ragtrace.init(tracer_provider=spans_provider(spans), set_global=False, redact=broken)
    assert pipe("secret") == "secret answer"  # the app is unaffected
    for s in spans.all():
        assert not any("secret" in str(v) for v in dict(s.attributes).values())
        assert dict(s.attributes).get(A.RAGTRACE_TRUNCATED) in (True, None)


def test_limits_attribute_length_documents_and_span_size(spans):
    ragtrace.init(
        tracer_provider=spans_provider(spans),
        set_global=False,
        max_attribute_length=100,
        max_documents=3,
        max_span_chars=250,
    )

    @ragtrace.retriever
    def many(query):
        return [{"id": f"d{i}", "content": "x" * 120} for i in range(10)]

    many("q")
    a = spans.attrs("many")
    assert a[A.RAGTRACE_TRUNCATED] is True
    assert a[A.RAGTRACE_DOCUMENTS_TOTAL] == 10
    assert A.document_attr(3, "id") not in a and a[A.document_attr(2, "id")] == "d2"
    assert len(a[A.document_attr(0, "content")]) == 100
    total = sum(len(v) for k, v in a.items() if isinstance(v, str) and k.endswith("content"))
    assert total <= 250
    assert len(json.loads(a[A.GEN_AI_RETRIEVAL_DOCUMENTS])) == 3


def test_untruncated_spans_are_not_marked(spans):
    retrieve("q")
    assert A.RAGTRACE_TRUNCATED not in spans.attrs("retrieve")


def spans_provider(spans):
    return SETTINGS._handle.provider  # the provider the fixture initialised


def test_sdk_span_limits_of_an_app_provider_still_apply():
    """ragtrace's fast attribute path steps aside when the provider has its own limits."""
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.support.sdk import reset_settings

    exporter = InMemorySpanExporter()
    tp = TracerProvider(span_limits=SpanLimits(max_attribute_length=10, max_span_attributes=12))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        ragtrace.init(tracer_provider=tp, set_global=False)
        retrieve("a rather long question")
        (span,) = exporter.get_finished_spans()
        a = dict(span.attributes)
        assert len(a) <= 12
        assert all(len(v) <= 10 for v in a.values() if isinstance(v, str))
    finally:
        reset_settings()
        tp.shutdown()

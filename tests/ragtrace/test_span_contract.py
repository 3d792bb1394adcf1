"""The span contract other readers rely on (Phoenix, any OTel GenAI reader): GenAI JSON attributes valid
against the semantic conventions' JSON schemas (vendored in ``schemas/``, see its README), no invented finish
reason, the served model name, the project name, mime types, and the generator's input made visible."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import ragtrace
from ragtrace import attributes as A
from ragtrace.config import SETTINGS

SCHEMAS = Path(__file__).parent / "schemas"
JSON_ATTRIBUTES = {
    A.GEN_AI_INPUT_MESSAGES: "gen-ai-input-messages.json",
    A.GEN_AI_OUTPUT_MESSAGES: "gen-ai-output-messages.json",
    A.GEN_AI_SYSTEM_INSTRUCTIONS: "gen-ai-system-instructions.json",
    A.GEN_AI_RETRIEVAL_DOCUMENTS: "gen-ai-retrieval-documents.json",
}


def _validator(version: str, attribute: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / version / JSON_ATTRIBUTES[attribute]).read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


CURRENT = {key: _validator("semconv-genai", key) for key in JSON_ATTRIBUTES}
V1_41 = {key: _validator("semconv-v1.41.0", key) for key in JSON_ATTRIBUTES}


def valid(attrs: dict, release: dict = CURRENT) -> dict:
    """Every GenAI JSON attribute on a span parses and validates; a retrieval document names a document
    (id or content: the schema alone accepts ``{}``, which makes readers drop the list). Returns them parsed."""
    parsed = {}
    for key, validator in release.items():
        if key in attrs:
            value = json.loads(attrs[key])
            errors = [e.message for e in validator.iter_errors(value)]
            assert not errors, f"{key} = {attrs[key]} is not schema-valid: {errors}"
            parsed[key] = value
    for doc in parsed.get(A.GEN_AI_RETRIEVAL_DOCUMENTS, []):
        assert "id" in doc or doc.get("content"), f"an entry names no document: {doc}"
    return parsed


def finish_reasons(attrs: dict) -> set:
    out = set(attrs.get(A.GEN_AI_RESPONSE_FINISH_REASONS, ()))
    for message in json.loads(attrs.get(A.GEN_AI_OUTPUT_MESSAGES, "[]")):
        if "finish_reason" in message:
            out.add(message["finish_reason"])
    return out


def test_the_schemas_reject_the_shapes_readers_rejected():
    """The validation can fail: OpenAI's ``role``/``content`` shape is not a GenAI message."""
    assert not CURRENT[A.GEN_AI_INPUT_MESSAGES].is_valid([{"role": "user", "content": "hi"}])
    assert not CURRENT[A.GEN_AI_OUTPUT_MESSAGES].is_valid([{"role": "assistant", "content": "hi"}])
    assert not CURRENT[A.GEN_AI_SYSTEM_INSTRUCTIONS].is_valid([{"content": "be brief"}])
    assert not CURRENT[A.GEN_AI_RETRIEVAL_DOCUMENTS].is_valid([{"id": 3}])
    assert not V1_41[A.GEN_AI_OUTPUT_MESSAGES].is_valid([{"role": "assistant", "parts": []}])  # no finish_reason
    with pytest.raises(AssertionError, match="names no document"):
        valid({A.GEN_AI_RETRIEVAL_DOCUMENTS: '[{"score": 0.5}]'})


# --- messages ---------------------------------------------------------------------------------------------------
class LangChainMessage:
    def __init__(self, type: str, content: object) -> None:
        self.type = type
        self.content = content


def test_chat_messages_are_written_as_role_and_parts(spans):
    @ragtrace.generator(model="gpt-4o-mini")
    def chat(messages):
        return {"choices": [{"message": {"content": "It is 4."}, "finish_reason": "stop"}]}

    chat(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is"}, {"type": "image_url", "image_url": {}}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "add", "arguments": '{"a": 2, "b": 2}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
            LangChainMessage("human", "so?"),
        ]
    )
    a = spans.attrs("chat")
    messages = valid(a)[A.GEN_AI_INPUT_MESSAGES]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[0]["parts"] == [{"type": "text", "content": "be brief"}]
    assert messages[1]["parts"][0] == {"type": "text", "content": "what is"}
    assert messages[1]["parts"][1]["type"] == "image_url"
    assert messages[2]["parts"] == [{"type": "tool_call", "id": "c1", "name": "add", "arguments": '{"a": 2, "b": 2}'}]
    assert messages[3]["parts"] == [{"type": "tool_call_response", "id": "c1", "response": "4"}]
    assert messages[4]["parts"] == [{"type": "text", "content": "so?"}]
    assert a[A.message_attr(4, "role")] == "user" and a[A.message_attr(4, "content")] == "so?"
    assert A.INPUT_VALUE not in a  # the messages go once per convention, not a third time as the span's input
    out = valid(a, V1_41)[A.GEN_AI_OUTPUT_MESSAGES]  # a completed answer satisfies the older release too
    assert out == [{"role": "assistant", "parts": [{"type": "text", "content": "It is 4."}], "finish_reason": "stop"}]
    assert A.OUTPUT_MIME_TYPE not in a  # text: OpenInference's default


def test_system_instructions_given_apart_from_the_messages(spans):
    @ragtrace.generator
    def chat(messages, system):
        return "ok"

    chat([{"role": "user", "content": "hi"}], system="answer in French")
    a = spans.attrs("chat")
    parsed = valid(a)
    assert parsed[A.GEN_AI_SYSTEM_INSTRUCTIONS] == [{"type": "text", "content": "answer in French"}]
    assert parsed[A.GEN_AI_INPUT_MESSAGES] == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    # OpenInference has no place for them but a first system message
    assert a[A.message_attr(0, "role")] == "system" and a[A.message_attr(0, "content")] == "answer in French"
    assert a[A.message_attr(1, "role")] == "user" and a[A.message_attr(1, "content")] == "hi"


def test_a_generator_given_a_prompt_and_contexts_sends_each_text_once(spans):
    @ragtrace.generator(model="m")
    def answer(question, contexts):
        return "Paris."

    answer("capital of France?", ["Paris is the capital of France.", ("France is in Europe.", 0.4)])
    a = spans.attrs("answer")
    # the prompt the model saw is not known: the user message is the prompt alone, the contexts are not pasted in
    user = {"role": "user", "parts": [{"type": "text", "content": "capital of France?"}]}
    assert valid(a)[A.GEN_AI_INPUT_MESSAGES] == [user]
    assert a[A.message_attr(0, "role")] == "user" and a[A.message_attr(0, "content")] == "capital of France?"
    assert A.INPUT_VALUE not in a
    # no span of this trace sent them: the texts themselves, once
    assert json.loads(a[A.RAGTRACE_CONTEXTS]) == ["Paris is the capital of France.", "France is in Europe."]
    assert A.RAGTRACE_CONTEXT_DOCUMENTS not in a
    assert sum(str(v).count("Paris is the capital") for v in a.values()) == 1


def test_message_texts_are_redacted_and_json_is_shortened_never_cut(spans):
    ragtrace.init(
        tracer_provider=SETTINGS._handle.provider, set_global=False, redact=[r"secret-\d+"], max_attribute_length=200
    )

    @ragtrace.generator
    def chat(messages, contexts=None):
        return "y" * 500

    chat([{"role": "user", "content": "my key is secret-42 " + "x" * 300}, {"role": "user", "content": "z" * 300}])
    a = spans.attrs("chat")
    parsed = valid(a)
    texts = [p["content"] for m in parsed[A.GEN_AI_INPUT_MESSAGES] for p in m["parts"]]
    assert texts[0].startswith("my key is [REDACTED] x") and "secret-42" not in a[A.GEN_AI_INPUT_MESSAGES]
    assert len(a[A.GEN_AI_INPUT_MESSAGES]) <= 200 and len(a[A.GEN_AI_OUTPUT_MESSAGES]) <= 200
    assert a[A.RAGTRACE_TRUNCATED] is True


def test_a_broken_redaction_hook_leaks_no_message_text(spans):
    def broken(text: str) -> str:
        raise RuntimeError("hook failed")

    ragtrace.init(tracer_provider=SETTINGS._handle.provider, set_global=False, redact=broken)

    @ragtrace.generator
    def chat(messages, system):
        return "answer"

    chat([{"role": "user", "content": "private question"}], system="private rules")
    a = spans.attrs("chat")
    assert "private" not in json.dumps(a)
    valid(a)


# --- finish reasons ---------------------------------------------------------------------------------------------
def _chunk(text=None, finish=None):
    return {"model": "gpt-4o-mini-2024", "choices": [{"delta": {"content": text}, "finish_reason": finish}]}


class Stream:
    """An SDK-like stream object (iterable, closable)."""

    def __init__(self, chunks, fail: bool = False) -> None:
        self.chunks = chunks
        self.fail = fail

    def __iter__(self):
        yield from self.chunks
        if self.fail:
            raise ConnectionError("server went away")

    def close(self) -> None:
        pass


def test_a_completed_stream_reports_the_models_own_finish_reason(spans):
    @ragtrace.generator
    def gen(prompt):
        return Stream([_chunk("Hel"), _chunk("lo"), _chunk(None, "length")])

    assert [c for c in gen("p")]
    a = spans.attrs("gen")
    out = valid(a)[A.GEN_AI_OUTPUT_MESSAGES]
    assert out[0]["finish_reason"] == "length" and list(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["length"]


def test_an_abandoned_stream_did_not_stop(spans):
    @ragtrace.generator
    def tokens(prompt):
        yield from ["a", "b", "c"]

    @ragtrace.generator
    def chunks(prompt):
        return Stream([_chunk("a"), _chunk("b"), _chunk(None, "stop")])

    for name, fn in (("tokens", tokens), ("chunks", chunks)):
        stream = iter(fn("p"))
        next(stream)
        stream.close()
        del stream
        gc.collect()
        a = spans.attrs(name)
        assert a[A.RAGTRACE_STREAM_ABANDONED] is True
        assert finish_reasons(a) == set(), name
        assert valid(a)[A.GEN_AI_OUTPUT_MESSAGES][0]["parts"] == [{"type": "text", "content": "a"}]


def test_a_stream_that_raised_did_not_stop_and_is_an_error(spans):
    @ragtrace.generator
    def tokens(prompt):
        yield "partial"
        raise TimeoutError("model timed out")

    @ragtrace.generator
    def chunks(prompt):
        return Stream([_chunk("partial")], fail=True)

    for name, fn, error in (("tokens", tokens, TimeoutError), ("chunks", chunks, ConnectionError)):
        with pytest.raises(error):
            list(fn("p"))
        span = spans.named(name)
        a = dict(span.attributes)
        assert finish_reasons(a) == set(), name
        assert span.status.status_code is StatusCode.ERROR and a[A.ERROR_TYPE] == error.__name__
        valid(a)


def test_a_plain_string_answer_has_no_finish_reason(spans):
    @ragtrace.generator
    def gen(prompt):
        return "an answer"

    gen("p")
    a = spans.attrs("gen")
    assert finish_reasons(a) == set()
    assert valid(a)[A.GEN_AI_OUTPUT_MESSAGES] == [
        {"role": "assistant", "parts": [{"type": "text", "content": "an answer"}]}
    ]


# --- retrieval documents ----------------------------------------------------------------------------------------
class Node:
    def __init__(self, text: str, node_id: str) -> None:
        self.text = text
        self.node_id = node_id


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (["first passage", "second passage"], None),
        ([("first", 0.9), ("second", 0.5)], None),
        ([{"id": "d1", "content": "x", "score": 0.7}, {"text": "y"}], None),
        ([{"id": "d1", "content": "x"}], [{"id": "d1"}]),
        ([Node("node text", "n-1")], [{"id": "n-1"}]),
        ([], []),
    ],
)
def test_every_retrieval_document_entry_names_its_document(spans, result, expected):
    @ragtrace.retriever
    def search(query):
        return result

    search("q")
    a = spans.attrs("search")
    # a document without an id leaves no list: its text is on the span once, as OpenInference's document content
    assert valid(a).get(A.GEN_AI_RETRIEVAL_DOCUMENTS) == expected
    assert A.INPUT_MIME_TYPE not in a  # text: OpenInference's default


def test_documents_with_id_and_score_satisfy_the_older_release_too(spans):
    @ragtrace.retriever
    def search(query):
        return [{"id": "a", "content": "x", "score": 1.0}, {"id": "b", "content": "y", "score": 0.5}]

    search("q")
    assert valid(spans.attrs("search"), V1_41)[A.GEN_AI_RETRIEVAL_DOCUMENTS] == [
        {"id": "a", "score": 1.0},
        {"id": "b", "score": 0.5},
    ]


def test_without_content_capture_documents_without_id_leave_no_list(spans):
    @ragtrace.retriever(capture_content=False)
    def anonymous(query):
        return [("secret text", 0.9)]

    @ragtrace.retriever(capture_content=False)
    def named(query):
        return [{"id": "d1", "content": "secret text", "score": 0.9}]

    anonymous("q")
    named("q")
    a = spans.attrs("anonymous")
    assert A.GEN_AI_RETRIEVAL_DOCUMENTS not in a and a[A.document_attr(0, "score")] == 0.9
    assert "secret" not in json.dumps(a)
    assert valid(spans.attrs("named"))[A.GEN_AI_RETRIEVAL_DOCUMENTS] == [{"id": "d1", "score": 0.9}]


# --- model, project, mime types ---------------------------------------------------------------------------------
def test_the_model_name_has_no_litellm_provider_prefix(spans):
    @ragtrace.generator
    def call(prompt, model):
        return {"model": model, "answer": "ok"}

    call("p", model="openai/gpt-4o-mini")
    call("p", model="meta-llama/Llama-3.1-8B-Instruct")  # a model id with a slash, served as is
    first, second = (dict(s.attributes) for s in spans.all())
    assert first[A.GEN_AI_REQUEST_MODEL] == "openai/gpt-4o-mini"  # what the app asked litellm for
    assert first[A.LLM_MODEL_NAME] == first[A.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini"
    assert first[A.GEN_AI_PROVIDER_NAME] == first[A.LLM_PROVIDER] == "openai"
    assert second[A.LLM_MODEL_NAME] == second[A.GEN_AI_RESPONSE_MODEL] == "meta-llama/Llama-3.1-8B-Instruct"
    assert A.GEN_AI_PROVIDER_NAME not in second

    @ragtrace.generator(model="ollama/llama3")
    def local(prompt):
        return {"answer": "ok"}

    local("p")
    a = spans.attrs("local")
    assert a[A.LLM_MODEL_NAME] == "llama3" and a[A.GEN_AI_REQUEST_MODEL] == "ollama/llama3"


def test_the_service_name_is_the_openinference_project(monkeypatch):
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    handle = ragtrace.init(service_name="shop-assistant", exporter=InMemorySpanExporter(), set_global=False)
    explicit = ragtrace.init(
        service_name="shop-assistant",
        exporter=InMemorySpanExporter(),
        set_global=False,
        resource_attributes={A.OPENINFERENCE_PROJECT_NAME: "experiments"},
    )
    try:
        assert handle.provider.resource.attributes[A.OPENINFERENCE_PROJECT_NAME] == "shop-assistant"
        assert explicit.provider.resource.attributes[A.OPENINFERENCE_PROJECT_NAME] == "experiments"
    finally:
        explicit.shutdown(1.0)
        handle.shutdown(1.0)


def test_a_whole_pipeline_keeps_the_contract(spans):
    @ragtrace.retriever
    def search(query):
        return ["Paris is the capital of France.", "Lyon is a city."]

    @ragtrace.generator(model="openai/gpt-4o-mini")
    def generate(question, contexts):
        yield from ["Par", "is."]

    @ragtrace.pipeline
    def rag(question):
        return "".join(generate(question, search(question)))

    rag("capital of France?")
    root = spans.attrs("rag")
    assert A.INPUT_MIME_TYPE not in root and A.OUTPUT_MIME_TYPE not in root  # text is OpenInference's default
    for span in spans.all():
        valid(dict(span.attributes))
    g = spans.attrs("generate")
    assert finish_reasons(g) == set()  # str chunks say nothing about why the model stopped
    parts = valid(g)[A.GEN_AI_INPUT_MESSAGES][0]["parts"]
    assert [p["content"] for p in parts] == ["capital of France?"]
    sid = f"{spans.named('search').context.span_id:016x}"
    assert g[A.RAGTRACE_CONTEXT_DOCUMENTS] == (f"{sid}:0", f"{sid}:1")
    # each passage on the wire once: on the retriever span that returned it
    wire = [str(v) for s in spans.all() for v in dict(s.attributes).values()]
    assert sum(v.count("Lyon is a city.") for v in wire) == 1

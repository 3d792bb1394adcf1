"""A record's conversation turns come from the answering LLM span's prompt, in every convention."""

from __future__ import annotations

import json

import pytest

from ragtrace_collector.processor.conventions import build_record
from ragtrace_collector.processor.conventions.messages import conversation
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F
from tests.support.span_fixtures import Spec

EARLIER_Q = "Do you sell extended warranties?"
EARLIER_A = "Yes, a three-year plan is available."
SYSTEM = "You are a support assistant. Answer only from the context."
STUFFED = f"Context:\n{F.DOCS[0][1]}\n{F.DOCS[1][1]}\n\nQuestion: {F.QUESTION}"
# what every convention's multi-turn chat must become: no system prompt, no context-stuffed template
EXPECTED = [("user", EARLIER_Q), ("assistant", EARLIER_A), ("user", F.QUESTION), ("assistant", F.ANSWER)]
PROMPT = [("system", SYSTEM), ("user", EARLIER_Q), ("assistant", EARLIER_A), ("user", STUFFED)]


def _chat(llm_attrs: dict) -> list[Spec]:
    retriever = {"openinference.span.kind": "RETRIEVER", "input.value": F.QUESTION}
    for i, (doc_id, text, _score) in enumerate(F.DOCS[:2]):
        retriever[f"retrieval.documents.{i}.document.id"] = doc_id
        retriever[f"retrieval.documents.{i}.document.content"] = text
    return [
        Spec("chat", None, {"openinference.span.kind": "CHAIN", "input.value": F.QUESTION}),
        Spec("retrieve", 0, retriever),
        Spec("llm", 0, {"gen_ai.request.model": "gpt-4o-mini", **llm_attrs}),
    ]


def _openinference() -> dict:
    attrs = {"openinference.span.kind": "LLM"}
    for i, (role, content) in enumerate(PROMPT):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.content"] = content
    attrs["llm.output_messages.0.message.role"] = "assistant"
    attrs["llm.output_messages.0.message.content"] = F.ANSWER
    return attrs


def _genai_json() -> dict:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(
            [{"role": role, "parts": [{"type": "text", "content": content}]} for role, content in PROMPT]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": F.ANSWER}], "finish_reason": "stop"}]
        ),
    }


def _openllmetry() -> dict:
    attrs = {"llm.request.type": "chat"}
    for i, (role, content) in enumerate(PROMPT):
        attrs[f"gen_ai.prompt.{i}.role"] = role
        attrs[f"gen_ai.prompt.{i}.content"] = content
    attrs["gen_ai.completion.0.role"] = "assistant"
    attrs["gen_ai.completion.0.content"] = F.ANSWER
    return attrs


def _record(specs):
    trace_id, request = F.to_request(specs)
    return build_record(trace_id, extract_spans(request).traces[trace_id])


@pytest.mark.parametrize("llm_attrs", [_openinference, _genai_json, _openllmetry], ids=lambda f: f.__name__[1:])
def test_multi_turn_prompt_becomes_the_conversation(llm_attrs):
    r = _record(_chat(llm_attrs()))
    assert [(t.role, t.content) for t in r.turns] == EXPECTED
    assert [(t.role, t.content) for t in r.prompt_messages] == PROMPT  # as sent: what SelfCheckGPT re-samples
    assert r.user_input == F.QUESTION and r.response == F.ANSWER
    type(r).model_validate(r.model_dump())  # valid by the shared model's rules


@pytest.mark.parametrize("fixture", [F.openinference_langchain, F.openinference_llamaindex, F.openllmetry, F.openlit])
def test_single_turn_peers_give_question_and_answer(fixture):
    # system prompts and LlamaIndex's "Context: ...\nQuery: ..." template are not conversation
    r = _record(fixture())
    assert [(t.role, t.content) for t in r.turns] == [("user", F.QUESTION), ("assistant", F.ANSWER)]


def test_no_prompt_messages_leaves_turns_empty():
    r = _record(F.ragtrace_shaped())
    assert r.turns == [] and r.prompt_messages == [] and r.user_input and r.response


def test_conversation_rules():
    # roles are normalised; tool messages dropped; a template is kept when it is the only question
    assert conversation(
        [("Human", "hi"), ("tool", "{}"), ("AI", "hello"), ("user", STUFFED)], None, "ok", [F.DOCS[0][1]]
    ) == [("user", "hi"), ("assistant", "hello"), ("user", STUFFED), ("assistant", "ok")]
    # the final template becomes the question, also when it carries only the contexts
    assert conversation([("user", STUFFED)], F.QUESTION, None, [F.DOCS[0][1]]) == [("user", F.QUESTION)]
    assert conversation(
        [("user", F.QUESTION), ("user", "Context:\n" + F.DOCS[0][1])], F.QUESTION, F.ANSWER, [F.DOCS[0][1]]
    ) == [("user", F.QUESTION), ("assistant", F.ANSWER)]
    # a final message in the user's own words stays: the question may be a rewrite made for retrieval
    assert conversation(
        [("user", EARLIER_Q), ("assistant", EARLIER_A), ("user", "and accidents?")],
        "Does the warranty cover accidental damage?",
        "No.",
    ) == [("user", EARLIER_Q), ("assistant", EARLIER_A), ("user", "and accidents?"), ("assistant", "No.")]
    # a prompt that does not end with a user message gets the question appended
    assert conversation([("system", SYSTEM)], F.QUESTION, F.ANSWER) == [("user", F.QUESTION), ("assistant", F.ANSWER)]
    # short contexts do not make every message containing a common word look stuffed
    assert conversation([("user", "yes")], None, "done", ["yes"]) == [("user", "yes"), ("assistant", "done")]
    assert conversation([], F.QUESTION, F.ANSWER) == []

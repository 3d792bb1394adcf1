"""The LLM judge's transport on its own, through real litellm to the scripted OpenAI-compatible server: what it
sends, what it hands back (no litellm shapes), what it counts; and the judge's decisions kept off litellm."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragtrace_collector.scoring.judge import JudgeError, usage_scope
from ragtrace_collector.scoring.judges import llm
from ragtrace_collector.scoring.judges.llm import Completion, LLMTransport, PromptLogprobs, TokenAlternatives
from tests.support.scripted_openai import Reply, ScriptedOpenAI, echo_tokens

MESSAGES = [{"role": "system", "content": "Be a judge."}, {"role": "user", "content": "TASK: x"}]


@pytest.fixture
def server():
    with ScriptedOpenAI() as s:
        yield s


def transport_for(server: ScriptedOpenAI, **kw) -> LLMTransport:
    params = dict(base_url=server.base_url, api_key="k", timeout=10.0, max_retries=1, backoff=0.01)
    params.update(kw)
    return LLMTransport("openai/scripted", **params)


async def test_complete_sends_the_request_and_returns_the_reply_text(server):
    server.push({"ok": True})
    with usage_scope() as usage:
        reply = await transport_for(server, max_tokens=77).complete(MESSAGES, json_reply=True)
    assert reply == Completion(text='{"ok": true}', truncated=False, logprobs=None)
    body = server.chat_requests()[0].body
    assert body["messages"] == MESSAGES and body["temperature"] == 0 and body["max_tokens"] == 77
    assert body["response_format"] == {"type": "json_object"} and "logprobs" not in body
    assert usage.calls == 1 and usage.prompt_tokens > 0 and usage.completion_tokens > 0


async def test_json_mode_off_and_free_text_send_no_response_format(server):
    server.push("free text", "more text")
    await transport_for(server, json_mode=False).complete(MESSAGES, json_reply=True)
    await transport_for(server).complete(MESSAGES, model="openai/other", temperature=0.7)
    first, second = (r.body for r in server.chat_requests())
    assert "response_format" not in first and "response_format" not in second
    assert second["model"] == "other" and second["temperature"] == 0.7


async def test_logprobs_come_back_as_tokens_with_their_alternatives(server):
    server.push(Reply(json={"score": 4}, logprobs=[{"4": -0.2, "5": -1.7}]))
    reply = await transport_for(server).complete(MESSAGES, logprobs=True)
    body = server.chat_requests()[0].body
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert reply.logprobs == (TokenAlternatives("4", (("4", -0.2), ("5", -1.7))),)


async def test_a_reply_over_the_bound_is_refused_unread_but_counted(server):
    server.push("x" * 500)
    with usage_scope() as usage, pytest.raises(JudgeError, match="max_reply_chars") as refused:
        await transport_for(server, max_reply_chars=100).complete(MESSAGES)
    assert not refused.value.retryable and usage.calls == 1


async def test_prompt_logprobs_echo_the_text_and_none_is_empty(server):
    text = "Q: where? A: Paris"
    server.push(Reply(text_logprobs=[-0.5]), Reply())
    echoed = await transport_for(server).prompt_logprobs(text, model="text-completion-openai/scorer")
    assert echoed.tokens == echo_tokens(text) and echoed.logprobs[0] is None and echoed.logprobs[-1] == -0.5
    assert echoed.offsets[0] == 0 and len(echoed.offsets) == len(echoed.tokens)
    body = server.completion_requests()[0].body
    assert body["echo"] is True and body["max_tokens"] == 0 and body["prompt"] == text
    assert await transport_for(server).prompt_logprobs(text) == PromptLogprobs([], [], [])


async def test_failures_are_retried_then_the_judges_unavailability(server):
    server.push(Reply(status=503), Reply(status=503))
    with usage_scope() as usage, pytest.raises(JudgeError, match="after 2 attempts") as failed:
        await transport_for(server).complete(MESSAGES)
    assert failed.value.retryable and failed.value.reason == "server" and usage.errors == 2


async def test_embeddings_come_in_order(server):
    vectors = await transport_for(server, embedding_model="openai/emb").embed(["a b", "c"])
    assert len(vectors) == 2 and all(len(v) == 64 for v in vectors)
    assert server.embedding_requests()[0].body["input"] == ["a b", "c"]


def test_the_decisions_know_nothing_of_litellm() -> None:
    """Prompts and reply reading never import litellm: it is the transport's alone."""
    package = Path(llm.__file__).parent
    for module in ("judge.py", "replies.py", "cache.py"):
        tree = ast.parse((package / module).read_text())
        imported = {
            alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        } | {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "litellm" not in imported, module

"""Real stream objects: litellm's CustomStreamWrapper (sync and async) over real HTTP from the
scripted OpenAI-compatible server, returned from decorated functions."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
litellm = pytest.importorskip("litellm")

import ragtrace  # noqa: E402
from ragtrace import attributes as A  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAI  # noqa: E402

REPLY = "Gallium melts at about 29.8 degrees Celsius."


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with ScriptedOpenAI() as s:
        s.push(REPLY)
        yield s


def _text(chunk) -> str:
    return (chunk.choices[0].delta.content or "") if chunk.choices else ""


def test_sync_litellm_stream_returned_from_a_generator_function(spans, server):
    @ragtrace.generator
    def complete(messages, model="openai/scripted"):
        return litellm.completion(
            model=model,
            messages=messages,
            stream=True,
            api_base=server.base_url,
            stream_options={"include_usage": True},
        )

    stream = complete([{"role": "user", "content": "When does gallium melt?"}])
    from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

    assert isinstance(stream, CustomStreamWrapper)  # the proxy passes for the real object
    assert "".join(_text(c) for c in stream) == REPLY
    a = spans.attrs("complete")
    assert a[A.OUTPUT_VALUE] == REPLY
    assert a[A.GEN_AI_REQUEST_MODEL] == "openai/scripted" and a[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == server.chat_requests()[0].completion_tokens
    assert a[A.RAGTRACE_TPOT_BASIS] == "tokens" and a[A.RAGTRACE_CHUNK_COUNT] >= 7
    assert list(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    assert a[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0


async def test_async_litellm_stream(spans, server):
    @ragtrace.generator(model="openai/scripted")
    async def acomplete(messages):
        return await litellm.acompletion(
            model="openai/scripted", messages=messages, stream=True, api_base=server.base_url
        )

    stream = await acomplete([{"role": "user", "content": "When does gallium melt?"}])
    parts = [_text(c) async for c in stream]
    assert "".join(parts) == REPLY
    a = spans.attrs("acomplete")
    assert a[A.OUTPUT_VALUE] == REPLY and a[A.RAGTRACE_TPOT_BASIS] == "chunks"

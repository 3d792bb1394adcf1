"""Real ``openai`` SDK stream objects (``Stream`` and ``AsyncStream``) over real HTTP from the
scripted OpenAI-compatible server, returned from decorated functions: iterated to the end, used
as context managers, and closed early."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

import ragtrace  # noqa: E402
from ragtrace import attributes as A  # noqa: E402
from tests.support.scripted_openai import ScriptedOpenAI  # noqa: E402

REPLY = "Mercury is the only metal that is liquid at room temperature."
MESSAGES = [{"role": "user", "content": "Which metal is liquid at room temperature?"}]


@pytest.fixture
def server():
    with ScriptedOpenAI() as s:
        s.push(REPLY)
        yield s


def _text(chunk) -> str:
    return (chunk.choices[0].delta.content or "") if chunk.choices else ""


def test_sync_openai_stream_with_usage(spans, server):
    client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    @ragtrace.generator(model="openai/scripted")
    def complete(messages):
        return client.chat.completions.create(
            model="scripted", messages=messages, stream=True, stream_options={"include_usage": True}
        )

    stream = complete(MESSAGES)
    assert isinstance(stream, openai.Stream)  # the proxy passes for the SDK's object
    with stream as s:
        assert "".join(_text(c) for c in s) == REPLY
    a = spans.attrs("complete")
    assert a[A.OUTPUT_VALUE] == REPLY and a[A.GEN_AI_REQUEST_STREAM] is True
    assert a[A.GEN_AI_USAGE_OUTPUT_TOKENS] == server.chat_requests()[0].completion_tokens
    assert a[A.RAGTRACE_TPOT_BASIS] == "tokens" and list(a[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    assert a[A.GEN_AI_RESPONSE_MODEL] and A.RAGTRACE_STREAM_ABANDONED not in a


def test_sync_openai_stream_closed_early(spans, server):
    client = openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    @ragtrace.generator(model="openai/scripted")
    def complete(messages):
        return client.chat.completions.create(model="scripted", messages=messages, stream=True)

    stream = complete(MESSAGES)
    first = next(iter(stream))
    stream.close()  # forwarded to the SDK object: its HTTP response is released
    assert stream.response.is_closed
    a = spans.attrs("complete")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True and a[A.RAGTRACE_CHUNK_COUNT] == 1
    assert a[A.OUTPUT_VALUE] == _text(first)


async def test_async_openai_stream(spans, server):
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    @ragtrace.generator(model="openai/scripted")
    async def acomplete(messages):
        return await client.chat.completions.create(
            model="scripted", messages=messages, stream=True, stream_options={"include_usage": True}
        )

    stream = await acomplete(MESSAGES)
    assert isinstance(stream, openai.AsyncStream)
    async with stream as s:
        parts = [_text(c) async for c in s]
    assert "".join(parts) == REPLY
    a = spans.attrs("acomplete")
    assert a[A.OUTPUT_VALUE] == REPLY and a[A.RAGTRACE_TPOT_BASIS] == "tokens"
    assert a[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] > 0
    await client.close()


async def test_async_openai_stream_closed_early(spans, server):
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)

    @ragtrace.generator(model="openai/scripted")
    async def acomplete(messages):
        return await client.chat.completions.create(model="scripted", messages=messages, stream=True)

    stream = await acomplete(MESSAGES)
    async for _ in stream:
        break
    await stream.close()  # AsyncStream's own close() (a coroutine)
    a = spans.attrs("acomplete")
    assert a[A.RAGTRACE_STREAM_ABANDONED] is True and a[A.RAGTRACE_CHUNK_COUNT] == 1
    await client.close()

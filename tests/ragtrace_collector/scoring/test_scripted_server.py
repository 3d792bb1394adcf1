"""The scripted OpenAI-compatible server others test against: its documented behaviours hold."""

from __future__ import annotations

import json
import math
import time

import httpx
import pytest

from tests.support.scripted_openai import Reply, ScriptedOpenAI, hashed_embedding


def chat(server: ScriptedOpenAI, content: str = "hello", timeout: float = 5.0, **extra) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=timeout)


def test_script_order_statuses_usage_and_request_log():
    with ScriptedOpenAI(script=[429, "raw {text", {"a": 1}]) as server:
        assert chat(server).status_code == 429
        r = chat(server, "x" * 40)
        assert r.json()["choices"][0]["message"]["content"] == "raw {text"
        r = chat(server, n=3).json()
        assert json.loads(r["choices"][0]["message"]["content"]) == {"a": 1} and len(r["choices"]) == 3
        assert r["usage"]["completion_tokens"] == 3 * math.ceil(len('{"a": 1}') / 4)
        assert chat(server).json()["choices"][0]["message"]["content"] == "{}"  # script exhausted
        log = server.chat_requests()
        assert [e.status for e in log] == [429, 200, 200, 200]
        assert log[1].prompt_tokens == 10 and log[1].prompt_text == "x" * 40


def test_responder_logprobs_delay_and_embeddings():
    with ScriptedOpenAI(
        responder=lambda body: Reply(json={"echo": body["model"]}, logprobs=[{"7": -0.1, "8": -2.0}]), delay=0.2
    ) as server:
        t0 = time.monotonic()
        r = chat(server).json()
        assert time.monotonic() - t0 >= 0.2
        assert json.loads(r["choices"][0]["message"]["content"]) == {"echo": "m"}
        top = r["choices"][0]["logprobs"]["content"][0]
        assert top["token"] == "7" and [t["token"] for t in top["top_logprobs"]] == ["7", "8"]
        e = httpx.post(f"{server.base_url}/embeddings", json={"model": "e", "input": ["a b", "a b"]}).json()
        assert e["data"][0]["embedding"] == e["data"][1]["embedding"] == hashed_embedding("a b")
        assert len(server.embedding_requests()) == 1


def test_slow_and_dropped_replies():
    with ScriptedOpenAI(script=[Reply(delay=1.0), Reply(drop=True)]) as server:
        with pytest.raises(httpx.ReadTimeout):
            chat(server, timeout=0.2)
        with pytest.raises(httpx.HTTPError):
            chat(server)

"""A scripted OpenAI-compatible HTTP server for tests and benchmarks (the only LLM stand-in).

It serves ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``POST /v1/embeddings`` (also
without the ``/v1`` prefix) on a free loopback port from a thread, so judge code talks to it over real HTTP through
``litellm`` exactly as it would to a provider, and knows nothing about it.

API::

    from tests.support.scripted_openai import ScriptedOpenAI, Reply

    with ScriptedOpenAI() as server:                 # starts on 127.0.0.1:<free port>
        server.base_url                              # "http://127.0.0.1:PORT/v1"
        server.push(Reply(status=429), Reply(json={"claims": ["a"]}))   # FIFO script of replies
        ...                                          # litellm.acompletion(model="openai/x",
                                                     #   api_base=server.base_url, api_key="k", ...)
        server.requests                              # request log: list of LoggedRequest
        server.chat_requests()                       # only the chat completions

Replies (:class:`Reply`, or a shortcut: a ``str`` is raw reply text, a ``dict``/``list`` is a JSON
reply, an ``int`` is an HTTP error status):

* ``Reply(json=obj)`` — 200, the message content is ``json.dumps(obj)``.
* ``Reply(content="not json {")`` — 200 with raw (possibly invalid) text.
* ``Reply(status=429)`` / ``Reply(status=500)`` — an OpenAI-style error body with that status.
* ``Reply(status=429, retry_after=0.5)`` — adds a ``Retry-After`` header.
* ``Reply(delay=2.0, json=...)`` — sleeps before answering (client timeouts).
* ``Reply(logprobs=[{"7": -0.1, "8": -2.3}, ...])`` — ``choices[0].logprobs.content``: one entry per
  position, each dict the position's ``top_logprobs`` (the chosen token is the most probable one).
* ``Reply(drop=True)`` — closes the connection without answering (a dead peer mid-request).
* ``Reply(text_logprobs=[-0.2, -1.5])`` — for ``/completions`` with ``echo``: the prompt is split into
  tokens (a word with the whitespace before it: :func:`echo_tokens`) and echoed with ``text_offset`` and
  ``token_logprobs``; the last tokens get these values, earlier ones -1.0, the first ``None``. Without
  ``text_logprobs`` the reply has ``logprobs: null`` (a provider that cannot score given text).
* ``prompt_tokens`` / ``completion_tokens`` override the usage the server reports.

When the script is empty the server asks ``responder(body) -> Reply | str | dict | int`` (the
parsed request body), so a test can answer by a function of the request (a "scripted judge");
with no responder it replies ``{}``. ``ScriptedOpenAI(delay=0.2)`` adds latency to every call.

Scripted judges read the request with :func:`judge_task` (the ``TASK:`` a judge prompt names) and
:func:`faithfulness_reply` answers the two faithfulness tasks by reading the prompt.

Each :class:`LoggedRequest` also holds the ``status`` answered and the ``prompt_tokens`` /
``completion_tokens`` reported, so benchmarks can count calls and tokens server-side.

Usage: every chat reply carries ``usage`` with ``prompt_tokens`` = ceil(characters of all messages
/ 4) and ``completion_tokens`` = ceil(characters of the content / 4) (or the overrides), so token
accounting is testable and deterministic. Embeddings come from ``embedder(texts) -> vectors``;
the default is a deterministic hashed bag-of-words vector (unit length, 64 dimensions).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.net import free_port


@dataclass
class Reply:
    """One scripted reply (see the module docstring)."""

    content: str | None = None
    json: Any = None
    status: int = 200
    delay: float = 0.0
    logprobs: list[dict[str, float]] | None = None
    drop: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error_message: str | None = None
    retry_after: float | None = None  # sent as a Retry-After header (with error statuses)
    text_logprobs: list[float] | None = None  # /completions echo: log-probabilities of the prompt's last tokens

    def text(self) -> str:
        if self.content is not None:
            return self.content
        if self.json is not None:
            return json.dumps(self.json)
        return "{}"


@dataclass
class LoggedRequest:
    """What the server received: path, parsed JSON body (None if unparseable) and arrival time."""

    path: str
    body: Any
    received_at: float = field(default_factory=time.monotonic)
    status: int | None = None  # what the server answered (None: dropped or not yet answered)
    prompt_tokens: int = 0  # the usage the server reported in its reply
    completion_tokens: int = 0
    authorization: str | None = None  # the Authorization header it came with (the judge's API key)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.body or {}).get("messages") or [])

    @property
    def prompt_text(self) -> str:
        """All message contents joined (what a test greps for)."""
        return "\n".join(_content_text(m.get("content")) for m in self.messages)


def as_reply(value: Any) -> Reply:
    """Normalise a script entry / responder result into a :class:`Reply`."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, bool) or value is None:
        return Reply(json={})
    if isinstance(value, int):
        return Reply(status=value)
    return Reply(json=value)


def judge_task(body: dict) -> str:
    """The ``TASK:`` named by a judge request's first user message (repair requests keep it); "" if none."""
    m = re.search(r"^TASK: (\w+)", _content_text(body["messages"][1]["content"]), re.M)
    return m.group(1) if m else ""


def faithfulness_reply(body: dict, supported: Callable[[int], bool]) -> dict:
    """Answer the faithfulness tasks: each sentence of the response is a claim; claim ``i`` (from 0)
    is verified ``yes`` when ``supported(i)``. Other tasks get ``{}``."""
    prompt = _content_text(body["messages"][1]["content"])
    task = judge_task(body)
    if task == "extract_claims":
        response = re.search(r"<response>\n(.*?)\n</response>", prompt, re.S).group(1)
        return {"claims": [{"claim": s.strip(), "relevant": "yes"} for s in response.split(".") if s.strip()]}
    if task == "verify_claims":
        n = len(re.findall(r"<claim id=", prompt))
        return {
            "verdicts": [{"id": i + 1, "verdict": "yes" if supported(i) else "no", "reason": "r"} for i in range(n)]
        }
    return {}


def echo_tokens(text: str) -> list[str]:
    """The scripted tokenizer of ``/completions`` echo: each word with the whitespace before it."""
    return re.findall(r"\s*\S+|\s+$", text)


def hashed_embedding(text: str, dims: int = 64) -> list[float]:
    """A deterministic unit vector from the text's lowercased words (similar texts, similar vectors)."""
    vec = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _tokens(chars: int) -> int:
    return max(1, math.ceil(chars / 4))


class ScriptedOpenAI:
    """The server. Thread-safe: handlers run in threads, the script is a locked deque."""

    def __init__(
        self,
        script: list[Any] | None = None,
        responder: Callable[[dict[str, Any]], Any] | None = None,
        embedder: Callable[[list[str]], list[list[float]]] | None = None,
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> None:
        self._script: deque[Any] = deque(script or [])
        self.responder = responder
        self.embedder = embedder or (lambda texts: [hashed_embedding(t) for t in texts])
        self.delay = delay
        self.host = host
        self.port = port or free_port()
        self.requests: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> ScriptedOpenAI:
        handler = _make_handler(self)
        self._server = ThreadingHTTPServer((self.host, self.port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedOpenAI:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # script ---------------------------------------------------------------------------------
    def push(self, *replies: Any) -> None:
        """Append replies to the script (consumed first-in first-out, one per chat request)."""
        with self._lock:
            self._script.extend(replies)

    def clear(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def completion_requests(self) -> list[LoggedRequest]:
        """The text-completion requests (``/completions``, not chat)."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/completions") and "/chat/" not in r.path]

    def chat_requests(self) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def embedding_requests(self) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/embeddings")]

    # internals ------------------------------------------------------------------------------
    def _log(self, path: str, body: Any, authorization: str | None = None) -> LoggedRequest:
        entry = LoggedRequest(path, body, authorization=authorization)
        with self._lock:
            self.requests.append(entry)
        return entry

    def _next_reply(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            entry = self._script.popleft() if self._script else None
            has_entry = entry is not None
        if has_entry:
            return as_reply(entry)
        if self.responder is not None:
            return as_reply(self.responder(body))
        return Reply(json={})

    def chat_response(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        text = reply.text()
        prompt_chars = sum(len(_content_text(m.get("content"))) for m in body.get("messages") or [])
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _tokens(prompt_chars)
        n = max(1, int(body.get("n") or 1))  # ``n`` choices, all with the scripted content, usage × n
        completion_tokens = n * (reply.completion_tokens if reply.completion_tokens is not None else _tokens(len(text)))
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop",
        }
        if reply.logprobs is not None:
            entries = []
            for top in reply.logprobs:
                best = max(top.items(), key=lambda kv: kv[1])
                entries.append(
                    {
                        "token": best[0],
                        "logprob": best[1],
                        "bytes": list(best[0].encode()),
                        "top_logprobs": [
                            {"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top.items()
                        ],
                    }
                )
            choice["logprobs"] = {"content": entries}
        else:
            choice["logprobs"] = None
        return {
            "id": f"chatcmpl-scripted-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{**choice, "index": i} for i in range(n)],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def completion_response(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """A legacy text completion; with ``echo`` the prompt is the text and, when the reply has
        ``text_logprobs``, its tokens come back with their log-probabilities (see the module docstring)."""
        prompt = body.get("prompt") or ""
        prompt = prompt[0] if isinstance(prompt, list) and prompt else str(prompt)
        echo = bool(body.get("echo"))
        text = prompt if echo else reply.text()
        logprobs: dict[str, Any] | None = None
        if echo and reply.text_logprobs is not None:
            tokens = echo_tokens(prompt)
            values: list[float | None] = [-1.0] * len(tokens)
            tail = reply.text_logprobs[-len(tokens) :] if tokens else []
            values[len(tokens) - len(tail) :] = tail
            if values:
                values[0] = None
            offsets, at = [], 0
            for t in tokens:
                offsets.append(at)
                at += len(t)
            logprobs = {"tokens": tokens, "token_logprobs": values, "text_offset": offsets, "top_logprobs": None}
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else _tokens(len(prompt))
        completion_tokens = 0 if echo and int(body.get("max_tokens") or 0) == 0 else _tokens(len(reply.text()))
        return {
            "id": f"cmpl-scripted-{len(self.requests)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def embeddings_response(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in (inputs or [])]
        vectors = self.embedder(texts)
        tokens = _tokens(sum(len(t) for t in texts))
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "model": body.get("model", "scripted-embedding"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _make_handler(server: ScriptedOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return

        def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            else:
                self._send_json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            path = self.path.split("?", 1)[0]
            logged = server._log(path, body, self.headers.get("Authorization"))
            if not isinstance(body, dict):
                self._send_json(
                    400, {"error": {"message": "body is not a JSON object", "type": "invalid_request_error"}}
                )
                return
            if server.delay:
                time.sleep(server.delay)
            if path.endswith("/embeddings"):
                payload = server.embeddings_response(body)
                logged.status, logged.prompt_tokens = 200, payload["usage"]["prompt_tokens"]
                self._send_json(200, payload)
                return
            if not path.endswith("/completions"):
                self._send_json(404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})
                return
            try:
                reply = server._next_reply(body)
            except Exception as exc:  # a broken responder is a 500, visible to the test
                self._send_json(500, {"error": {"message": f"responder failed: {exc!r}", "type": "server_error"}})
                return
            if reply.delay:
                time.sleep(reply.delay)
            if reply.drop:
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
                return
            if reply.status != 200:
                kind = "rate_limit_error" if reply.status == 429 else "server_error"
                message = reply.error_message or f"scripted HTTP {reply.status}"
                logged.status = reply.status
                headers = {"Retry-After": f"{reply.retry_after:g}"} if reply.retry_after is not None else None
                self._send_json(
                    reply.status, {"error": {"message": message, "type": kind, "code": str(reply.status)}}, headers
                )
                return
            chat = path.endswith("/chat/completions")
            payload = server.chat_response(body, reply) if chat else server.completion_response(body, reply)
            logged.status = 200
            logged.prompt_tokens = payload["usage"]["prompt_tokens"]
            logged.completion_tokens = payload["usage"]["completion_tokens"]
            try:
                if body.get("stream") and chat:
                    self._send_sse(payload, bool((body.get("stream_options") or {}).get("include_usage")))
                else:
                    self._send_json(200, payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                pass

        def _send_sse(self, payload: dict[str, Any], include_usage: bool) -> None:
            """``stream: true``: the same reply as OpenAI server-sent events, one chunk per word
            (added for the SDK's streaming tests; usage in a last chunk when asked for)."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            base = {
                "id": payload["id"],
                "object": "chat.completion.chunk",
                "created": payload["created"],
                "model": payload["model"],
            }
            text = payload["choices"][0]["message"]["content"] or ""
            words = re.findall(r"\S+\s*|\s+", text) or [""]
            events = [
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": w} if i == 0 else {"content": w},
                            "finish_reason": None,
                        }
                    ],
                }
                for i, w in enumerate(words)
            ]
            events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if include_usage:
                events.append({**base, "choices": [], "usage": payload["usage"]})
            for ev in events:
                self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler

"""Reading text, model, token usage and finish reason from LLM results and stream chunks.

Shapes understood (attribute or dict access, so both the OpenAI SDK's objects and litellm's
``ModelResponse``/dicts work): ``choices[0].message.content`` / ``choices[0].text`` for full
responses, ``choices[0].delta.content`` for stream chunks, ``usage`` with
``prompt_tokens``/``completion_tokens`` (OpenAI) or ``input_tokens``/``output_tokens``
(Anthropic, OTel), and ``model``, ``id``, ``finish_reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .safety import reraise_interrupt


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(key, default)
    try:
        return getattr(obj, key, default)
    except BaseException as exc:  # whatever a hostile __getattr__ raises, but an interrupt
        reraise_interrupt(exc)
        return default


def _int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        n = int(v)
    except BaseException as exc:  # None-like, NaN, inf, or an object whose __int__ raises
        reraise_interrupt(exc)
        return None
    return n if type(n) is int and 0 <= n < 1 << 63 else None  # OTLP ints are int64


@dataclass
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def known(self) -> bool:
        return self.input_tokens is not None or self.output_tokens is not None


def read_usage(u: Any) -> Usage | None:
    """Token counts from a ``usage`` object or dict; None when there is none."""
    if u is None:
        return None
    inp = _int(_get(u, "prompt_tokens"))
    if inp is None:
        inp = _int(_get(u, "input_tokens"))
    out = _int(_get(u, "completion_tokens"))
    if out is None:
        out = _int(_get(u, "output_tokens"))
    tot = _int(_get(u, "total_tokens"))
    if tot is None and inp is not None and out is not None:
        tot = inp + out
    usage = Usage(inp, out, tot)
    return usage if usage.known() or tot is not None else None


@dataclass
class ResponseInfo:
    text: str | None = None
    model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    usage: Usage | None = None


_TEXT_KEYS = ("answer", "response", "output", "text", "content", "completion")


def read_response(resp: Any) -> ResponseInfo:
    """What a generator returned: a string, an OpenAI/litellm response, or a dict."""
    if resp is None:
        return ResponseInfo()
    if isinstance(resp, str):
        return ResponseInfo(text=resp)
    info = ResponseInfo()
    choices = _get(resp, "choices")
    if isinstance(choices, (list, tuple)) and choices:
        parts = []
        for ch in choices:
            msg = _get(ch, "message")
            t = _get(msg, "content") if msg is not None else _get(ch, "text")
            if isinstance(t, str):
                parts.append(t)
            fr = _get(ch, "finish_reason")
            if fr:
                info.finish_reasons.append(str(fr))
        if parts:
            info.text = parts[0] if len(parts) == 1 else "\n".join(parts)
    elif isinstance(resp, dict):
        for k in _TEXT_KEYS:
            v = resp.get(k)
            if isinstance(v, str):
                info.text = v
                break
        fr = resp.get("finish_reason")
        if fr:
            info.finish_reasons.append(str(fr))
    else:
        for k in ("answer", "response", "text", "content", "output"):
            v = _get(resp, k)
            if isinstance(v, str):
                info.text = v
                break
    m = _get(resp, "model")
    info.model = m if isinstance(m, str) else None
    rid = _get(resp, "id")
    info.response_id = rid if isinstance(rid, str) else None
    info.usage = read_usage(_get(resp, "usage"))
    return info


def chunk_text(chunk: Any) -> str | None:
    """The text delta carried by one stream chunk (str, bytes, dict or OpenAI/litellm chunk)."""
    if isinstance(chunk, str):
        return chunk
    if isinstance(chunk, bytes):
        return chunk.decode("utf-8", "replace")
    choices = _get(chunk, "choices")
    if isinstance(choices, (list, tuple)):
        if not choices:
            return None
        c0 = choices[0]
        delta = _get(c0, "delta")
        t = _get(delta, "content") if delta is not None else _get(c0, "text")
        return t if isinstance(t, str) else None
    if isinstance(chunk, dict):
        for k in ("text", "content", "delta", "token"):
            v = chunk.get(k)
            if isinstance(v, str):
                return v
        return None
    for k in ("text", "content", "delta"):
        v = _get(chunk, k)
        if isinstance(v, str):
            return v
    return None


def read_chunks(chunks: list) -> ResponseInfo:
    """Joined text plus model, id, usage and finish reasons found anywhere in a list of chunks."""
    info = ResponseInfo()
    try:  # the common case, all str: one C-level join, no per-chunk Python work
        info.text = "".join(chunks)
        return info
    except TypeError:
        pass
    parts = []
    for c in chunks:
        t = chunk_text(c)
        if t:
            parts.append(t)
        if isinstance(c, (str, bytes)):
            continue
        if info.model is None:
            m = _get(c, "model")
            if isinstance(m, str) and m:
                info.model = m
        if info.response_id is None:
            rid = _get(c, "id")
            if isinstance(rid, str) and rid:
                info.response_id = rid
        u = read_usage(_get(c, "usage"))
        if u is not None:
            info.usage = u
        choices = _get(c, "choices")
        if isinstance(choices, (list, tuple)) and choices:
            fr = _get(choices[0], "finish_reason")
            if fr:
                info.finish_reasons = [str(fr)]
        elif isinstance(c, dict) and c.get("finish_reason"):
            info.finish_reasons = [str(c["finish_reason"])]
    info.text = "".join(parts)
    return info

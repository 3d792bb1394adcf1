"""Answer generation for the example: an offline extractive generator that streams its answer
token by token, or a real LLM through ``litellm`` when a model is configured.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Any

from .bm25 import tokenize

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_TOKEN_SPLIT = re.compile(r"(\s+)")


def best_sentences(
    question: str, contexts: list[str], n: int = 2, idf: dict[str, float] | None = None, keep_ratio: float = 0.6
) -> list[str]:
    """Up to ``n`` sentences with the highest idf-weighted query-term overlap (ties → earlier
    context first); sentences after the first must score at least ``keep_ratio`` of the best."""
    q = set(tokenize(question))
    scored = []
    order = 0
    for rank, ctx in enumerate(contexts):
        for sent in _SENTENCE.split(ctx.strip()):
            if not sent:
                continue
            common = q & set(tokenize(sent))
            overlap = sum(idf.get(t, 1.0) for t in common) if idf else float(len(common))
            scored.append((overlap, -rank, -order, sent))
            order += 1
    scored.sort(reverse=True)
    if not scored:
        return []
    best = scored[0][0]
    picked = [s for ov, _, _, s in scored[:n] if ov > 0 and ov >= keep_ratio * best]
    return picked or [scored[0][3]]


def extractive_stream(
    question: str,
    contexts: list[str],
    *,
    token_delay: float = 0.0,
    prefill_delay: float = 0.0,
    slow_first_token: float = 0.0,
    extra_claim: str | None = None,
    idf: dict[str, float] | None = None,
    with_usage: bool = False,
) -> Iterator[Any]:
    """Yield the answer as word tokens (each with its trailing whitespace).

    Shaped like a served model so latency dashboards have something real to show: the first token
    waits ``prefill_delay`` seconds per 1,000 prompt tokens (plus ``slow_first_token``), then one
    token every ``token_delay`` seconds. With ``with_usage`` the stream ends with an OpenAI-shaped
    chunk carrying token usage (prompt and completion counted as whitespace-separated words).
    """
    answer = " ".join(best_sentences(question, contexts, idf=idf)) or "I could not find this in the documents."
    if extra_claim:
        answer = f"{answer} {extra_claim}"
    prompt_tokens = len(question.split()) + sum(len(c.split()) for c in contexts)
    first_wait = prefill_delay * prompt_tokens / 1000.0 + slow_first_token
    if first_wait:
        time.sleep(first_wait)
    pieces = [p for p in _TOKEN_SPLIT.split(answer) if p]
    tokens: list[str] = []
    for p in pieces:
        if p.isspace() and tokens:
            tokens[-1] += p
        else:
            tokens.append(p)
    for i, tok in enumerate(tokens):
        if i and token_delay:
            time.sleep(token_delay)
        yield tok
    if with_usage:
        yield {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(tokens),
                "total_tokens": prompt_tokens + len(tokens),
            },
        }


SYSTEM_PROMPT = (
    "Answer the question using only the numbered context passages. Be brief: one or two sentences. "
    "If the passages do not contain the answer, say so."
)


def build_messages(question: str, contexts: list[str]) -> list[dict[str, str]]:
    ctx = "\n".join(f"[{i + 1}] {c}" for i, c in enumerate(contexts))
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Context:\n{ctx}\n\nQuestion: {question}"},
    ]


def llm_stream(
    model: str, messages: list[dict[str, str]], *, api_base: str | None = None, timeout: float = 60.0
) -> Any:
    """A litellm streaming completion (chunks in the OpenAI shape, usage in the last one)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    kwargs: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timeout": timeout,
    }
    if api_base:
        kwargs["api_base"] = api_base
    return litellm.completion(**kwargs)


def chunk_text(chunk: Any) -> str:
    """Text of a string token or an OpenAI/litellm stream chunk."""
    if isinstance(chunk, str):
        return chunk
    try:
        choices = chunk.choices if not isinstance(chunk, dict) else chunk.get("choices")
        if not choices:
            return ""
        c0 = choices[0]
        delta = c0.delta if not isinstance(c0, dict) else c0.get("delta")
        text = delta.content if delta is not None and not isinstance(delta, dict) else (delta or {}).get("content")
        return text or ""
    except AttributeError:
        return ""

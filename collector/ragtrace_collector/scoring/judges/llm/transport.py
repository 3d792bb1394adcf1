"""The LLM judge's transport: one model endpoint reached through litellm, and nothing about decisions.

:class:`LLMTransport` sends what the judge asks and hands back what came back, in litellm-free shapes
(:class:`Completion`, :class:`PromptLogprobs`, embedding vectors). Its written interface:

* :meth:`~LLMTransport.complete` — one chat completion of ``messages``; ``json_reply`` asks for a JSON object
  (``response_format``, where the judge's ``json_mode`` allows it), ``logprobs`` for the top-20 log-probabilities
  of each reply token, ``model`` another model over the same connection.
* :meth:`~LLMTransport.prompt_logprobs` — the log-probabilities of a given text's own tokens (a text completion
  with ``echo`` and no new tokens).
* :meth:`~LLMTransport.embed` — remote embeddings from ``embedding_model``.

Every call runs under the concurrency limit (per event loop) with a request timeout; passing unavailabilities
are retried with exponential backoff and jitter (or the provider's ``Retry-After``, capped), and every failure
ends as a :class:`~ragtrace_collector.scoring.judge.JudgeError` sorted by :mod:`.failures` (the judge's
availability, or this record's error). Every HTTP reply records its tokens and cost (``litellm.completion_cost``,
0 when the model's price is unknown) with :func:`~ragtrace_collector.scoring.judge.record_usage`; failed
attempts count as ``errors``. Replies are bounded: ``max_tokens`` on every completion, and a reply longer than
``max_reply_chars`` is refused unread (a judge that ignores ``max_tokens`` cannot make us store or re-send
megabytes).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import litellm

from ragtrace_collector.scoring.judge import JudgeError, UnavailableReason, record_usage, report_unavailable

from .failures import Refusals, retry_after, short, transient_reason

litellm.suppress_debug_info = True
# LiteLLM logs every completion at INFO ("LiteLLM completion() model= ...": ~240 lines in 20 s of a failing judge),
# burying the collector's one useful line; LITELLM_LOG=INFO/DEBUG still asks for them.
if not os.environ.get("LITELLM_LOG"):
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)

TOP_LOGPROBS = 20  # alternatives asked per reply token when log-probabilities are wanted
# The most tokens one judge call may report using: past it (or below 0) the usage is broken, counted as unreported.
# A negative count made ragtrace_judge_tokens_total raise; a huge one spent the token budget for the hour and stayed
# in the counter's rate for good.
MAX_CALL_TOKENS = 10**8


@dataclass(frozen=True)
class TokenAlternatives:
    """One reply token and its most probable alternatives, each ``(token, natural-log probability)``."""

    token: str
    top: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Completion:
    """A chat reply: its ``text`` (at most ``max_reply_chars``), whether it was cut off at ``max_tokens``
    (``truncated``), and per-token log-probabilities when they were asked for and returned (else ``None``)."""

    text: str
    truncated: bool = False
    logprobs: tuple[TokenAlternatives, ...] | None = None


@dataclass(frozen=True)
class PromptLogprobs:
    """A given text's tokens as the provider echoed them, each token's log-probability (``None`` where it gave
    none, as for the first) and character offset; empty lists when it returned none (chat-only models)."""

    tokens: list[str]
    logprobs: list[float | None]
    offsets: list[int]


def missing_key_variables(model: str, api_key: str | None, base_url: str | None) -> list[str]:
    """The provider variables ``model`` needs and the environment lacks, when no key is given (none with
    ``api_key``, or with ``base_url``: a self-hosted endpoint may need no key). For the warning at start."""
    if api_key or base_url:
        return []
    try:
        found = litellm.validate_environment(model=model)
    except Exception:  # an unknown provider: the first call will say
        return []
    return [str(k) for k in found.get("missing_keys") or [] if str(k).endswith(("_KEY", "_TOKEN"))]


class TransportOptions(TypedDict, total=False):
    """The connection options an :class:`LLMJudge` passes through to its transport (defaults: ``LLMTransport``'s,
    written there once)."""

    base_url: str | None
    api_key: str | None
    concurrency: int
    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float
    embedding_model: str | None
    embedding_base_url: str | None
    json_mode: bool
    extra_params: dict[str, Any] | None
    max_tokens: int
    max_reply_chars: int


class LLMTransport:
    """Calls to ``model`` (a litellm model name) over one connection: see the module docstring.

    ``backoff`` is the first retry delay in seconds (doubling, capped at ``max_backoff``); ``max_retries``
    retries follow the first attempt. ``extra_params`` go with every completion (and win over ``max_tokens``).
    ``json_mode`` False never sends ``response_format`` (for endpoints that refuse it).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 20.0,
        embedding_model: str | None = None,
        embedding_base_url: str | None = None,
        json_mode: bool = True,
        extra_params: dict[str, Any] | None = None,
        max_tokens: int = 4096,
        max_reply_chars: int = 100_000,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.embedding_model = embedding_model
        self.embedding_base_url = embedding_base_url or base_url
        self.json_mode = json_mode
        self.extra_params = dict(extra_params or {})
        self.max_tokens = max(1, int(max_tokens))
        self.max_reply_chars = max(1, int(max_reply_chars))
        self._refusals = Refusals()
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    # the interface ------------------------------------------------------------------------------
    async def complete(
        self,
        messages: Sequence[dict[str, str]],
        *,
        model: str | None = None,
        temperature: float = 0.0,
        json_reply: bool = False,
        logprobs: bool = False,
    ) -> Completion:
        """One chat completion (see the module docstring); ``JudgeError`` when none could be had."""
        model = model or self.model
        messages = list(messages)
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "timeout": self.timeout,
            "max_retries": 0,
            "num_retries": 0,
            "drop_params": True,
            "max_tokens": self.max_tokens,
            **self.extra_params,
        }
        self._connection(kwargs, self.base_url)
        if json_reply and self.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = TOP_LOGPROBS
        digest = _digest([model, messages, temperature, logprobs])
        resp = await self._retrying(
            f"judge call to {model}", lambda: litellm.acompletion(**kwargs), f"judge {model}", digest
        )
        self._record_reply_usage(resp)
        return self._completion(resp)

    async def prompt_logprobs(self, text: str, *, model: str | None = None) -> PromptLogprobs:
        """The log-probabilities of ``text``'s own tokens, through a text completion with ``echo`` that adds none."""
        model = model or self.model
        kwargs: dict[str, Any] = {
            "model": model,
            "prompt": text,
            "echo": True,
            "logprobs": 1,
            "max_tokens": 0,
            "temperature": 0.0,
            "timeout": self.timeout,
            "max_retries": 0,
        }
        self._connection(kwargs, self.base_url)
        resp = await self._retrying(
            f"log-probability call to {model}",
            lambda: litellm.atext_completion(**kwargs),
            f"model {model}",
            _digest([model, text, "echo"]),
        )
        self._record_reply_usage(resp)
        choices = _get(resp, "choices") or []
        lp = _get(choices[0], "logprobs") if choices else None
        if lp is None:
            return PromptLogprobs([], [], [])
        return PromptLogprobs(
            tokens=[str(t) for t in (_get(lp, "tokens") or [])],
            logprobs=list(_get(lp, "token_logprobs") or []),
            offsets=list(_get(lp, "text_offset") or []),
        )

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text from ``embedding_model`` (which must be set), in order."""
        texts = list(texts)
        kwargs: dict[str, Any] = dict(model=self.embedding_model, input=texts, timeout=self.timeout, max_retries=0)
        self._connection(kwargs, self.embedding_base_url)
        resp = await self._retrying(
            f"embedding call to {self.embedding_model}",
            lambda: litellm.aembedding(**kwargs),
            f"embedding model {self.embedding_model}",
            _digest(texts),
        )
        usage = _get(resp, "usage") or {}
        record_usage(calls=1, prompt_tokens=_tokens(usage, "prompt_tokens"))
        data = sorted(_get(resp, "data") or [], key=lambda d: _get(d, "index", 0))
        vectors = [list(map(float, _get(d, "embedding"))) for d in data]
        if len(vectors) != len(texts):
            raise JudgeError(f"embedding reply has {len(vectors)} vectors for {len(texts)} texts")
        return vectors

    # plumbing -----------------------------------------------------------------------------------
    def _connection(self, kwargs: dict[str, Any], base_url: str | None) -> None:
        if base_url:
            kwargs["api_base"] = base_url
        if self.api_key:
            kwargs["api_key"] = self.api_key

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(id(loop))
        if sem is None:
            self._semaphores = {id(loop): asyncio.Semaphore(self.concurrency)}  # drop closed loops' ones
            sem = self._semaphores[id(loop)]
        return sem

    async def _retrying(self, what: str, call: Callable[[], Any], who: str, request: str) -> Any:
        """Run ``call`` under the concurrency limit with retries on passing availability failures.

        ``what`` names the call and ``who`` the model in messages; ``request`` is a digest of what was sent
        (see :meth:`.failures.Refusals.error`)."""
        last: BaseException | None = None
        last_reason: UnavailableReason = "unavailable"
        for attempt in range(self.max_retries + 1):
            try:
                async with self._semaphore():
                    result = await asyncio.wait_for(call(), timeout=self.timeout + 5.0)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                record_usage(errors=1)
                reason = transient_reason(exc)
                if reason is None:
                    raise self._refusals.error(what, who, request, exc) from exc
                last, last_reason = exc, reason
                if attempt < self.max_retries:
                    delay = min(self.max_backoff, self.backoff * (2**attempt)) * (0.5 + random.random() / 2)
                    hinted = retry_after(exc)
                    if hinted is not None:  # the provider said when: wait that long (capped)
                        delay = min(self.max_backoff, max(delay, hinted))
                    await asyncio.sleep(delay)
            else:
                self._refusals.answered()
                return result
        error = JudgeError(
            f"{what} failed after {self.max_retries + 1} attempts: {type(last).__name__}: {short(last)}",
            retryable=True,
            reason=last_reason,
        )
        report_unavailable(error)
        raise error from last

    def _record_reply_usage(self, resp: Any) -> None:
        """Count one answered call with the tokens and cost its reply reports."""
        usage = _get(resp, "usage") or {}
        try:
            cost = float(litellm.completion_cost(completion_response=resp) or 0.0)
        except Exception:  # unknown model price: cost unknown, not an error
            cost = 0.0
        record_usage(
            calls=1,
            prompt_tokens=_tokens(usage, "prompt_tokens"),
            completion_tokens=_tokens(usage, "completion_tokens"),
            cost_usd=cost if math.isfinite(cost) else 0.0,
        )

    def _completion(self, resp: Any) -> Completion:
        """The reply in litellm-free form, refused when its text is over ``max_reply_chars``."""
        choices = _get(resp, "choices") or []
        first = choices[0] if choices else None
        text = (_get(_get(first, "message"), "content", "") or "") if first is not None else ""
        if len(text) > self.max_reply_chars:
            raise JudgeError(
                f"judge reply of {len(text)} characters is over judge.max_reply_chars ({self.max_reply_chars}); "
                f"not used. It began: {text[:80]!r}",
                retryable=False,
            )
        return Completion(
            text=text,
            truncated=first is not None and _get(first, "finish_reason") == "length",
            logprobs=_token_logprobs(first),
        )


def _token_logprobs(choice: Any) -> tuple[TokenAlternatives, ...] | None:
    """The reply tokens' top log-probabilities (``choices[0].logprobs.content``), ``None`` when absent."""
    if choice is None:
        return None
    lp = _get(choice, "logprobs")
    entries = _get(lp, "content") if lp is not None else None
    if not entries:
        return None
    return tuple(
        TokenAlternatives(
            token=str(_get(entry, "token", "")),
            top=tuple(
                (str(_get(alt, "token", "")), float(logprob))
                for alt in _get(entry, "top_logprobs") or []
                if isinstance(logprob := _get(alt, "logprob", -1e9), (int, float))  # a null one says nothing
            ),
        )
        for entry in entries
    )


def _digest(request: Any) -> str:
    """A request's identity (for telling a refused record from a refused configuration)."""
    return hashlib.sha256(json.dumps(request).encode()).hexdigest()


def _tokens(usage: Any, name: str) -> int:
    """A token count of a reply's usage: a whole number from 0 to ``MAX_CALL_TOKENS``, else 0 (unreported)."""
    value = _get(usage, name, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return int(value) if 0 <= value <= MAX_CALL_TOKENS else 0


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)

"""LLMJudge: the judge interface answered by any chat model litellm reaches.

Cheap by design: one call extracts the answer's claims *and* each claim's relevance to the
question (faithfulness and answer relevancy share it); one call verifies all claims; one call
judges all chunks; identical calls (same model, prompt, temperature) are answered from an LRU
cache and concurrent identical calls share one request.

Robust by design: temperature 0; JSON replies validated with pydantic and checked for alignment
(exactly one verdict per claim id: a duplicate, missing or unasked-for id is unusable, since two
verdicts for one claim may contradict each other), with one repair request quoting the validation
error. Replies are bounded: ``max_tokens`` on every request, and a reply longer than
``max_reply_chars`` is refused unread (a judge that ignores ``max_tokens`` cannot make us store or
re-send megabytes); stored reasons are capped by the reply schemas. Failures are sorted by
:meth:`LLMJudge._refused` and :func:`_transient_reason`: the judge's *availability* is
``JudgeError(retryable=True)`` and the record waits in the queue, either after retries with
exponential backoff and jitter (or the provider's ``Retry-After``, capped) on 429, 5xx, timeouts and
connection errors, or at once, unretried, when the judge refuses our setup (401 credentials, 403
permission, 404 or a configuration 400): those last until an operator acts, which the worker's
backoff and the ``judge_unavailable`` counter are for. A failure caused by one record's content is
``JudgeError(retryable=False)``: its result is an error. No score is ever invented from a failed
reply. Every HTTP reply records its tokens and cost (``litellm.completion_cost``, 0 when the model's
price is unknown) with :func:`record_usage`; failed attempts count as ``errors``; cache hits as
``cache_hits``.

Safety votes: vote 0 runs at temperature 0; votes 1.. run at ``safety_vote_temperature`` (0.7)
and carry their vote number in the prompt, so they are independent samples and never collapse
into one cached call.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
import os
import random
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from ragtrace_collector.scoring import prompts as P
from ragtrace_collector.scoring.judge import (
    ClaimVerdict,
    ContextSentences,
    GeneratedQuestion,
    GEvalScore,
    Judge,
    JudgeError,
    JudgeIdentity,
    JudgeUnsupported,
    NliVerdict,
    RubricGrade,
    SafetyVerdict,
    StatementClassification,
    TaskOutcome,
    TaskVerdict,
    TokenLogprobs,
    UnavailableReason,
    record_usage,
    report_unavailable,
    sha256_hex,
)
from ragtrace_collector.scoring.text import split_sentences

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm

litellm.suppress_debug_info = True
# LiteLLM logs every completion at INFO ("LiteLLM completion() model= ...": ~240 lines in 20 s of a failing judge),
# burying the collector's one useful line; LITELLM_LOG=INFO/DEBUG still asks for them.
if not os.environ.get("LITELLM_LOG"):
    logging.getLogger("LiteLLM").setLevel(logging.WARNING)

# What a provider client says when it was given no key at all: not an outage to retry (nothing will change
# until an operator sets one), the judge's setup; said once, with what to set.
_NO_KEY = re.compile(r"missing credentials|api_key client option must be set|no api key|api key is required", re.I)

M = TypeVar("M", bound=BaseModel)

_RETRYABLE_STATUS = {408, 409, 425, 429}
# 400s that name this request's content: its length or the provider's content policy.
_CONTENT_ERRORS = (litellm.exceptions.ContextWindowExceededError, litellm.exceptions.ContentPolicyViolationError)
_REJECTED_MEMORY = 4096  # request digests remembered by the "refused again while others pass" test


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


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _transient_reason(exc: BaseException) -> UnavailableReason | None:
    """Why ``exc`` is a passing unavailability worth retrying (timeouts, dropped connections, 429,
    408/409/425, 5xx), or ``None`` when retrying the same request cannot help."""
    status = _status(exc)
    if _NO_KEY.search(str(exc)):
        return None
    if isinstance(exc, (litellm.exceptions.Timeout, asyncio.TimeoutError, TimeoutError)) or status == 408:
        return "timeout"
    if isinstance(exc, litellm.exceptions.RateLimitError) or status == 429:
        return "rate_limit"
    if isinstance(exc, (litellm.exceptions.APIConnectionError, ConnectionError)):
        return "connection"
    if isinstance(exc, (litellm.exceptions.ServiceUnavailableError, litellm.exceptions.InternalServerError)):
        return "server"
    if status is not None and (status in _RETRYABLE_STATUS or status >= 500):
        return "server"
    return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def parse_json_object(text: str) -> Any:
    """The JSON object in a reply, tolerating code fences and prose around it."""
    text = (text or "").strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    try:
        return json.loads(text)
    except ValueError:
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            return json.loads(text[start : end + 1])
        raise


class _InvalidReply(Exception):
    pass


@functools.cache
def _prompts_source() -> bytes:
    """The prompt templates and reply schemas as shipped: the source of :mod:`ragtrace_collector.scoring.prompts`."""
    return Path(P.__file__).read_bytes()


class LLMJudge(Judge):
    """A judge backed by ``litellm.acompletion``.

    ``model`` is a litellm model name (``gpt-4o-mini``, ``anthropic/claude-3-5-haiku-latest``,
    ``ollama/llama3.1``, ``openai/<name>`` with ``base_url`` for any OpenAI-compatible server).
    ``embedding_model`` (a litellm embedding model) serves embeddings; without it the local
    ONNX embedder is used. ``backoff`` is the first retry delay in seconds (doubling, capped
    at ``max_backoff``). ``extra_params`` are passed to every completion call (and win over
    ``max_tokens``, the completion bound sent with each request). A reply longer than
    ``max_reply_chars`` characters is refused with a clear error.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 1.0,
        max_backoff: float = 20.0,
        embedding_model: str | None = None,
        embedding_base_url: str | None = None,
        cache_size: int = 4096,
        json_mode: bool = True,
        safety_vote_temperature: float = 0.7,
        extra_params: dict[str, Any] | None = None,
        max_tokens: int = 4096,
        max_reply_chars: int = 100_000,
    ) -> None:
        if not model:
            raise ValueError("LLMJudge needs a model name")
        self.model = model
        self.name = model
        self.base_url = base_url
        self.api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.embedding_model = embedding_model
        self.embedding_base_url = embedding_base_url or base_url
        self.cache_size = cache_size
        self.json_mode = json_mode
        self.safety_vote_temperature = safety_vote_temperature
        self.extra_params = dict(extra_params or {})
        self.max_tokens = max(1, int(max_tokens))
        self.max_reply_chars = max(1, int(max_reply_chars))
        self._answered = 0  # requests the judge answered: tells a content 400 from a configuration one
        self._rejected: OrderedDict[str, int] = OrderedDict()  # request digest -> _answered when refused
        self._cache: OrderedDict[str, tuple[BaseModel, Any]] = OrderedDict()
        self._inflight: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._semaphores: dict[int, asyncio.Semaphore] = {}
        self._local_embedder: Any = None

    def identity(self) -> JudgeIdentity:
        """The model, and the sha256 of the prompt templates (the whole prompts module: any prompt or reply
        schema change changes every metric's hash, so none is missed), the model and the embedding model."""
        return JudgeIdentity(
            model=self.model, hash=sha256_hex(_prompts_source(), self.model, self.embedding_model or "")
        )

    # plumbing ---------------------------------------------------------------------------------
    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(id(loop))
        if sem is None:
            self._semaphores = {id(loop): asyncio.Semaphore(self.concurrency)}  # drop closed loops' ones
            sem = self._semaphores[id(loop)]
        return sem

    async def _retrying(self, what: str, call: Callable[[], Any], who: str = "", request: str = "") -> Any:
        """Run ``call`` under the concurrency limit with retries on passing availability failures.

        ``who`` names the model in refusal messages; ``request`` is a digest of what was sent (see
        :meth:`_refused`)."""
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
                reason = _transient_reason(exc)
                if reason is None:
                    raise self._refused(what, who or what, request, exc) from exc
                last, last_reason = exc, reason
                if attempt < self.max_retries:
                    delay = min(self.max_backoff, self.backoff * (2**attempt)) * (0.5 + random.random() / 2)
                    hinted = _retry_after(exc)
                    if hinted is not None:  # the provider said when: wait that long (capped)
                        delay = min(self.max_backoff, max(delay, hinted))
                    await asyncio.sleep(delay)
            else:
                self._answered += 1
                return result
        error = JudgeError(
            f"{what} failed after {self.max_retries + 1} attempts: {type(last).__name__}: {_short(last)}",
            retryable=True,
            reason=last_reason,
        )
        report_unavailable(error)
        raise error from last

    def _refused(self, what: str, who: str, request: str, exc: BaseException) -> JudgeError:
        """The error for a failure that retrying the same request cannot fix: the judge's setup or this input.

        * 401 (``AuthenticationError``), 403 (``PermissionDeniedError``), 404 (``NotFoundError``: an
          unknown model or a wrong ``base_url``): the judge refuses *us*, not the record. Every record
          would fail alike until an operator fixes the key or the settings, so it is an outage
          (``retryable=True``, reason ``credentials``/``permission``/``config``): the record waits.
        * ``ContextWindowExceededError`` and ``ContentPolicyViolationError`` (400s that litellm reads
          as this request's length or content): this record's error (``retryable=False``).
        * Any other 400/422 (``BadRequestError``, ``UnsupportedParamsError``...) is ambiguous: a wrong
          model name or a parameter the endpoint refuses fails every request, an odd character in one
          record fails only that one. It counts as a configuration outage, unless this very request
          was refused before and the judge has answered other requests since: then it is the
          record's content, and its error, so one bad record cannot stall scoring for ever.
        * Anything else (an unexpected exception): this record's error, as before.
        """
        status = _status(exc)
        said = f"{type(exc).__name__}: {_short(exc)}"
        reason: UnavailableReason
        if isinstance(exc, _CONTENT_ERRORS):
            return JudgeError(f"{what} refused this record's content ({status}): {said}", retryable=False)
        if _NO_KEY.search(str(exc)):
            reason = "credentials"
            message = (
                "has no API key: set judge.api_key (RAGTRACE_JUDGE__API_KEY) or the provider's own variable"
                " (OPENAI_API_KEY, ANTHROPIC_API_KEY...); records wait in the queue until then"
            )
        elif isinstance(exc, litellm.exceptions.AuthenticationError) or status == 401:
            reason, message = "credentials", f"refused our credentials ({status or 401}): check judge.api_key"
        elif isinstance(exc, litellm.exceptions.PermissionDeniedError) or status == 403:
            reason, message = "permission", f"denied access ({status or 403}): check that judge.api_key may use it"
        elif isinstance(exc, litellm.exceptions.NotFoundError) or status == 404:
            reason, message = "config", f"was not found ({status or 404}): check judge.model and judge.base_url"
        elif isinstance(exc, litellm.exceptions.BadRequestError) or status in (400, 422):
            code = status or 400
            refused_at = self._rejected.get(request) if request else None
            if refused_at is not None and refused_at < self._answered:
                self._rejected.pop(request, None)
                return JudgeError(
                    f"{what} was refused again ({code}) for this record while the judge answers others: {said}",
                    retryable=False,
                )
            if request:
                self._rejected[request] = self._answered
                self._rejected.move_to_end(request)
                while len(self._rejected) > _REJECTED_MEMORY:
                    self._rejected.popitem(last=False)
            reason = "config"
            message = f"rejected our request ({code}): check judge.model, judge.base_url and the judge settings"
        else:
            return JudgeError(f"{what} failed: {said}", retryable=False)
        error = JudgeError(f"{who} {message}; the provider said: {said}", retryable=True, reason=reason)
        report_unavailable(error)
        return error

    async def _complete(
        self,
        messages: list[dict[str, str]],
        temperature: float,
        logprobs: bool,
        model: str | None = None,
        json_mode: bool | None = None,
    ) -> Any:
        """One chat completion; ``model`` overrides the judge's (same connection), ``json_mode`` its JSON mode."""
        model = model or self.model
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
        if self.base_url:
            kwargs["api_base"] = self.base_url
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.json_mode if json_mode is None else json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if logprobs:
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = 20
        digest = hashlib.sha256(json.dumps([model, messages, temperature, logprobs]).encode()).hexdigest()
        resp = await self._retrying(
            f"judge call to {model}", lambda: litellm.acompletion(**kwargs), f"judge {model}", digest
        )
        self._record_reply_usage(resp)
        return resp

    def _record_reply_usage(self, resp: Any) -> None:
        """Count one answered call with the tokens and cost its reply reports."""
        usage = _get(resp, "usage") or {}
        try:
            cost = float(litellm.completion_cost(completion_response=resp) or 0.0)
        except Exception:  # unknown model price: cost unknown, not an error
            cost = 0.0
        record_usage(
            calls=1,
            prompt_tokens=int(_get(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(_get(usage, "completion_tokens", 0) or 0),
            cost_usd=cost if math.isfinite(cost) else 0.0,
        )

    async def ask(
        self,
        prompt: str,
        schema: type[M],
        check: Callable[[M], str | None] | None = None,
        temperature: float = 0.0,
        logprobs: bool = False,
        *,
        model: str | None = None,
        system: str = P.SYSTEM,
        parse: Callable[[str], Any] | None = None,
    ) -> tuple[M, Any]:
        """Ask once (cached): the validated reply and the raw response (for log-probabilities).

        ``check`` returns an error message when a schema-valid reply is still unusable (wrong
        number of verdicts...); it triggers the repair request like a schema error. ``model`` asks another
        model over the judge's connection; ``parse`` reads a reply that is not JSON (then JSON mode is off).
        """
        model = model or self.model
        key = hashlib.sha256(
            json.dumps(
                [model, system, prompt, schema.__name__, temperature, logprobs, getattr(parse, "__name__", None)]
            ).encode()
        ).hexdigest()
        if key in self._cache:
            self._cache.move_to_end(key)
            record_usage(cache_hits=1)
            return self._cache[key]  # type: ignore[return-value]
        loop = asyncio.get_running_loop()
        inflight = self._inflight.get(key)
        if inflight is not None and inflight[0] is loop:
            record_usage(cache_hits=1)
            return await asyncio.shield(inflight[1])
        future: asyncio.Future = loop.create_future()
        self._inflight[key] = (loop, future)
        try:
            result = await self._ask_uncached(prompt, schema, check, temperature, logprobs, model, system, parse)
        except BaseException as exc:
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):  # only the owner was cancelled, not its waiters
                    exc = JudgeError("the identical call this one was waiting for was cancelled", retryable=True)
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        else:
            future.set_result(result)
            # the raw response is kept only where it is read (log-probabilities): not a copy per reply
            self._cache[key] = result if logprobs else (result[0], None)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return result
        finally:
            if self._inflight.get(key, (None, None))[1] is future:
                del self._inflight[key]

    def _reply_text(self, resp: Any) -> str:
        """The reply's text, refused when it is over ``max_reply_chars`` (a judge ignoring ``max_tokens``)."""
        content = _content(resp)
        if len(content) > self.max_reply_chars:
            raise JudgeError(
                f"judge reply of {len(content)} characters is over judge.max_reply_chars ({self.max_reply_chars}); "
                f"not used. It began: {content[:80]!r}",
                retryable=False,
            )
        return content

    def _cut_off(self, resp: Any, problem: _InvalidReply) -> _InvalidReply:
        """Say so when an unusable reply was cut at ``max_tokens`` (the likely cause)."""
        choices = _get(resp, "choices") or []
        if choices and _get(choices[0], "finish_reason") == "length":
            return _InvalidReply(f"{problem} (the reply was cut off at judge.max_tokens = {self.max_tokens})")
        return problem

    async def _ask_uncached(
        self,
        prompt: str,
        schema: type[M],
        check: Callable[[M], str | None] | None,
        temperature: float,
        logprobs: bool,
        model: str | None = None,
        system: str = P.SYSTEM,
        parse: Callable[[str], Any] | None = None,
    ) -> tuple[M, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        json_mode = None if parse is None else False
        resp = await self._complete(messages, temperature, logprobs, model, json_mode)
        content = self._reply_text(resp)
        try:
            return self._validate(content, schema, check, parse), resp
        except _InvalidReply as invalid:
            first = self._cut_off(resp, invalid)
            repair = messages + [
                {"role": "assistant", "content": content},
                {
                    "role": "user",
                    "content": (
                        f"Your reply could not be used: {first}. Reply again with only the JSON object in the "
                        "requested format, with every required field."
                        if parse is None
                        else f"Your reply could not be used: {first}. Reply again in exactly the requested format."
                    ),
                },
            ]
            resp = await self._complete(repair, temperature, logprobs, model, json_mode)
            content = self._reply_text(resp)
            try:
                return self._validate(content, schema, check, parse), resp
            except _InvalidReply as invalid:
                second = self._cut_off(resp, invalid)
                raise JudgeError(
                    f"invalid judge reply after one repair attempt ({schema.__name__}): {second}; reply was: {content[:200]!r}",
                    retryable=False,
                ) from None

    @staticmethod
    def _validate(
        content: str,
        schema: type[M],
        check: Callable[[M], str | None] | None,
        parse: Callable[[str], Any] | None = None,
    ) -> M:
        try:
            data = (parse or parse_json_object)(content)
        except ValueError as exc:
            raise _InvalidReply(f"not valid JSON ({exc})" if parse is None else f"not in the format ({exc})") from None
        try:
            parsed = schema.model_validate(data)
        except ValidationError as exc:
            errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
            raise _InvalidReply(f"JSON does not match the format ({errors})") from None
        problem = check(parsed) if check else None
        if problem:
            raise _InvalidReply(problem)
        return parsed

    # decisions --------------------------------------------------------------------------------
    async def _claims(self, question: str, response: str) -> P.ClaimsReply:
        reply, _ = await self.ask(P.claims_prompt(question, response), P.ClaimsReply)
        return reply

    async def extract_claims(self, question: str, response: str) -> list[str]:
        return [c.claim.strip() for c in (await self._claims(question, response)).claims if c.claim.strip()]

    async def statement_relevance(self, question: str, response: str) -> list[ClaimVerdict]:
        """The same call as :meth:`extract_claims` (cached): each claim with its relevance. A reply
        that gave claims without relevance verdicts is an error, never read as "all relevant"."""
        claims = [c for c in (await self._claims(question, response)).claims if c.claim.strip()]
        if any(c.relevant is None for c in claims):
            raise JudgeError("judge reply gave claims without their relevance verdicts", retryable=False)
        return [ClaimVerdict(c.claim.strip(), c.relevant) for c in claims]  # type: ignore[arg-type]

    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        """Support is judged against the contexts alone; the question is not part of the prompt."""
        if not claims:
            return []
        reply, _ = await self.ask(
            P.verify_prompt(claims, contexts), P.VerdictsReply, _ids_check(len(claims), "verdicts")
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [ClaimVerdict(c, by_id[i].verdict, by_id[i].reason) for i, c in enumerate(claims, 1)]

    async def verify_claims_per_context(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[list[ClaimVerdict]]:
        if not claims:
            return [[] for _ in contexts]
        n_ctx = len(contexts)

        def check(r: P.SupportReply) -> str | None:
            problem = _ids_problem([c.id for c in r.claims], len(claims), "claims")
            if problem:
                return problem
            bad = [j for c in r.claims for j in c.supported_by if not 1 <= j <= n_ctx]
            return f"context ids out of range 1..{n_ctx}: {bad[:10]}" if bad else None

        reply, _ = await self.ask(P.verify_per_context_prompt(claims, contexts), P.SupportReply, check)
        support = {c.id: set(c.supported_by) for c in reply.claims}
        return [
            [ClaimVerdict(c, "yes" if j in support[i] else "no") for i, c in enumerate(claims, 1)]
            for j in range(1, n_ctx + 1)
        ]

    async def generate_questions(self, response: str, contexts: Sequence[str], n: int = 3) -> list[GeneratedQuestion]:
        def check(r: P.QuestionsReply) -> str | None:
            return None if len(r.questions) >= 1 else "expected at least one question"

        reply, _ = await self.ask(P.questions_prompt(response, contexts, n), P.QuestionsReply, check)
        return [GeneratedQuestion(q.question, q.noncommittal) for q in reply.questions[:n]]

    async def chunk_relevance(self, question: str, target: str, contexts: Sequence[str]) -> list[bool]:
        if not contexts:
            return []
        reply, _ = await self.ask(
            P.chunks_prompt(question, target, contexts), P.UsefulReply, _ids_check(len(contexts), "verdicts")
        )
        by_id = {v.id: v.useful for v in reply.verdicts}
        return [by_id[j] for j in range(1, len(contexts) + 1)]

    async def relevant_context_sentences(self, question: str, contexts: Sequence[str]) -> ContextSentences:
        sentences = await asyncio.to_thread(lambda: [s for ctx in contexts for s in split_sentences(ctx)])
        if not sentences:
            return ContextSentences(total=0)

        def check(r: P.SentencesReply) -> str | None:
            bad = [i for i in r.relevant if not 1 <= i <= len(sentences)]
            return f"sentence ids out of range 1..{len(sentences)}: {bad}" if bad else None

        reply, _ = await self.ask(P.sentences_prompt(question, sentences), P.SentencesReply, check)
        ids = sorted(set(reply.relevant))
        return ContextSentences(total=len(sentences), relevant=[sentences[i - 1] for i in ids])

    async def attribute_statements(self, reference: str, contexts: Sequence[str]) -> list[ClaimVerdict]:
        reply, _ = await self.ask(P.attribute_prompt(reference, contexts), P.AttributionReply)
        return [ClaimVerdict(s.statement, s.attributed, s.reason) for s in reply.statements]

    async def extract_entities(self, text: str) -> list[str]:
        reply, _ = await self.ask(P.entities_prompt(text), P.EntitiesReply)
        return list(dict.fromkeys(e.strip() for e in reply.entities if e.strip()))

    async def classify_statements(self, question: str, response: str, reference: str) -> StatementClassification:
        reply, _ = await self.ask(P.classify_prompt(question, response, reference), P.ClassificationReply)
        return StatementClassification(tp=reply.TP, fp=reply.FP, fn=reply.FN)

    async def extract_intentions(self, turns: Sequence[tuple[str, str]]) -> list[str]:
        reply, _ = await self.ask(P.intentions_prompt(turns), P.IntentionsReply)
        return [i.strip() for i in reply.intentions if i.strip()]

    async def intentions_satisfied(
        self, turns: Sequence[tuple[str, str]], intentions: Sequence[str]
    ) -> list[ClaimVerdict]:
        if not intentions:
            return []
        reply, _ = await self.ask(
            P.intentions_satisfied_prompt(turns, intentions), P.VerdictsReply, _ids_check(len(intentions), "verdicts")
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [ClaimVerdict(t, by_id[i].verdict, by_id[i].reason) for i, t in enumerate(intentions, 1)]

    async def safety_verdict(self, category: str, question: str, response: str, vote: int = 0) -> SafetyVerdict:
        if category not in P.SAFETY_DEFINITIONS:
            raise JudgeUnsupported(f"unknown safety category {category!r}")
        temperature = 0.0 if vote == 0 else self.safety_vote_temperature
        reply, _ = await self.ask(
            P.safety_prompt(category, question, response, vote), P.SafetyReply, temperature=temperature
        )
        return SafetyVerdict(category, reply.unsafe, reply.reason)

    async def geval_steps(self, name: str, criteria: str) -> list[str]:
        reply, _ = await self.ask(P.geval_steps_prompt(name, criteria), P.StepsReply)
        return [s.strip() for s in reply.steps if s.strip()]

    async def geval_score(
        self,
        name: str,
        criteria: str,
        steps: Sequence[str],
        fields: dict[str, str],
        min_score: int = 1,
        max_score: int = 10,
    ) -> GEvalScore:
        def check(r: P.ScoreReply) -> str | None:
            return None if min_score <= r.score <= max_score else f"score must be within {min_score}-{max_score}"

        reply, resp = await self.ask(
            P.geval_score_prompt(name, criteria, steps, fields, min_score, max_score),
            P.ScoreReply,
            check,
            logprobs=True,
        )
        return GEvalScore(
            score=float(reply.score),
            min_score=min_score,
            max_score=max_score,
            probabilities=score_probabilities(resp, min_score, max_score),
            reason=reply.reason,
        )

    async def choose(self, instruction: str, options: Sequence[str], fields: dict[str, str]) -> str:
        def check(r: P.ChoiceReply) -> str | None:
            return None if r.choice in options else f"choice must be one of {list(options)}"

        reply, _ = await self.ask(P.choose_prompt(instruction, options, fields), P.ChoiceReply, check)
        return reply.choice

    # model-based families: NLI, GPTScore, SelfCheckGPT, Prometheus, QAG, opinions, tasks ----------
    async def nli(self, premise: str, hypotheses: Sequence[str]) -> list[NliVerdict]:
        if not hypotheses:
            return []
        reply, _ = await self.ask(
            P.nli_prompt(premise, hypotheses), P.NliReply, _ids_check(len(hypotheses), "verdicts")
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [NliVerdict(h, by_id[i].label, by_id[i].reason) for i, h in enumerate(hypotheses, 1)]

    async def continuation_logprobs(self, prompt: str, continuation: str, model: str | None = None) -> TokenLogprobs:
        """Through a text-completion request with ``echo`` (the prompt's own log-probabilities, no new
        tokens): the tokens from the one that covers the start of ``continuation`` on. Chat-only models and
        providers that drop ``echo`` return none: :class:`JudgeUnsupported`."""
        model = model or self.model
        text = prompt + continuation
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
        if self.base_url:
            kwargs["api_base"] = self.base_url
        if self.api_key:
            kwargs["api_key"] = self.api_key
        digest = hashlib.sha256(json.dumps([model, text, "echo"]).encode()).hexdigest()
        resp = await self._retrying(
            f"log-probability call to {model}", lambda: litellm.atext_completion(**kwargs), f"model {model}", digest
        )
        self._record_reply_usage(resp)
        return _continuation_logprobs(resp, text, len(prompt), model)

    async def sample_responses(
        self, messages: Sequence[tuple[str, str]], n: int, temperature: float, model: str | None = None
    ) -> list[str]:
        """``n`` separate requests (not ``n=``, which many providers drop), free text, never cached."""
        chat = [{"role": role, "content": content} for role, content in messages]

        async def one() -> str:
            resp = await self._complete(chat, temperature, False, model, json_mode=False)
            text = self._reply_text(resp).strip()
            if not text:
                raise JudgeError(f"model {model or self.model} returned an empty sample", retryable=False)
            return text

        return list(await asyncio.gather(*(one() for _ in range(n))))

    async def rubric_grade(
        self,
        instruction: str,
        response: str,
        criteria: str,
        descriptions: Sequence[str],
        reference: str | None = None,
        model: str | None = None,
    ) -> RubricGrade:
        """The published Prometheus absolute-grading prompt and reply format (``Feedback: ... [RESULT] n``)."""
        if len(descriptions) != 5:
            raise JudgeUnsupported(f"a Prometheus rubric needs 5 score descriptions, got {len(descriptions)}")
        reply, _ = await self.ask(
            P.prometheus_prompt(instruction, response, criteria, descriptions, reference),
            P.RubricReply,
            model=model,
            system=P.PROMETHEUS_SYSTEM,
            parse=P.parse_rubric_reply,
        )
        return RubricGrade(reply.feedback, reply.score)

    async def assessment_questions(self, text: str, n: int) -> list[str]:
        def check(r: P.QuestionListReply) -> str | None:
            return None if any(q.strip() for q in r.questions) else "expected at least one question"

        reply, _ = await self.ask(P.assessment_questions_prompt(text, n), P.QuestionListReply, check)
        return [q.strip() for q in reply.questions if q.strip()][:n]

    async def answer_questions(self, questions: Sequence[str], text: str) -> list[ClaimVerdict]:
        if not questions:
            return []
        reply, _ = await self.ask(
            P.answer_questions_prompt(questions, text), P.VerdictsReply, _ids_check(len(questions), "verdicts")
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [ClaimVerdict(q, by_id[i].verdict, by_id[i].reason) for i, q in enumerate(questions, 1)]

    async def extract_instructions(self, prompt: str) -> list[str]:
        reply, _ = await self.ask(P.instructions_prompt(prompt), P.InstructionsReply)
        return [i.strip() for i in reply.instructions if i.strip()]

    async def instructions_followed(
        self, instructions: Sequence[str], question: str, response: str
    ) -> list[ClaimVerdict]:
        if not instructions:
            return []
        reply, _ = await self.ask(
            P.instructions_followed_prompt(instructions, question, response),
            P.VerdictsReply,
            _ids_check(len(instructions), "verdicts"),
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [ClaimVerdict(t, by_id[i].verdict, by_id[i].reason) for i, t in enumerate(instructions, 1)]

    async def extract_opinions(self, text: str) -> list[str]:
        reply, _ = await self.ask(P.opinions_prompt(text), P.OpinionsReply)
        return [o.strip() for o in reply.opinions if o.strip()]

    async def judge_opinions(self, kind: Literal["toxicity", "bias"], opinions: Sequence[str]) -> list[ClaimVerdict]:
        if kind not in P.OPINION_DEFINITIONS:
            raise JudgeUnsupported(f"unknown opinion verdict kind {kind!r}")
        if not opinions:
            return []
        reply, _ = await self.ask(
            P.opinion_verdicts_prompt(kind, opinions), P.VerdictsReply, _ids_check(len(opinions), "verdicts")
        )
        by_id = {v.id: v for v in reply.verdicts}
        return [ClaimVerdict(o, by_id[i].verdict, by_id[i].reason) for i, o in enumerate(opinions, 1)]

    async def infer_task(self, steps: Sequence[tuple[str, str]]) -> TaskOutcome:
        reply, _ = await self.ask(P.infer_task_prompt(steps), P.TaskReply)
        return TaskOutcome(reply.task.strip(), reply.outcome.strip())

    async def task_completion(self, task: str, outcome: str) -> TaskVerdict:
        reply, _ = await self.ask(P.task_completion_prompt(task, outcome), P.TaskVerdictReply)
        return TaskVerdict(float(reply.score), reply.reason)

    # embeddings -------------------------------------------------------------------------------
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        if not texts:
            return []
        if self.embedding_model:
            return await self._remote_embed(texts)
        return await self._local_embed(texts)

    async def _remote_embed(self, texts: list[str]) -> list[list[float]]:
        kwargs: dict[str, Any] = dict(model=self.embedding_model, input=texts, timeout=self.timeout, max_retries=0)
        if self.embedding_base_url:
            kwargs["api_base"] = self.embedding_base_url
        if self.api_key:
            kwargs["api_key"] = self.api_key
        digest = hashlib.sha256(json.dumps(texts).encode()).hexdigest()
        resp = await self._retrying(
            f"embedding call to {self.embedding_model}",
            lambda: litellm.aembedding(**kwargs),
            f"embedding model {self.embedding_model}",
            digest,
        )
        usage = _get(resp, "usage") or {}
        record_usage(calls=1, prompt_tokens=int(_get(usage, "prompt_tokens", 0) or 0))
        data = sorted(_get(resp, "data") or [], key=lambda d: _get(d, "index", 0))
        vectors = [list(map(float, _get(d, "embedding"))) for d in data]
        if len(vectors) != len(texts):
            raise JudgeError(f"embedding reply has {len(vectors)} vectors for {len(texts)} texts")
        return vectors

    async def _local_embed(self, texts: list[str]) -> list[list[float]]:
        if self._local_embedder is None:
            try:
                from ragtrace_collector.scoring.embeddings import LocalEmbedder
            except ImportError as exc:
                raise JudgeUnsupported(
                    f"no embedding_model configured and the local embedder is unavailable: {exc}"
                ) from exc
            try:
                self._local_embedder = await asyncio.to_thread(LocalEmbedder.shared)
            except Exception as exc:
                raise JudgeUnsupported(
                    f"no embedding_model configured and the local embedder failed to load: {exc}"
                ) from exc
        arr = await asyncio.to_thread(self._local_embedder.embed, texts)
        return [list(map(float, row)) for row in arr]


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header on the failed response, when there is one."""
    candidates = (
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    )
    for headers in candidates:
        if not headers:
            continue
        try:
            value = float(headers.get("retry-after"))
        except (TypeError, ValueError, AttributeError):
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


def _short(exc: BaseException | None) -> str:
    """A failure's text for logs and stored reasons: one line, no control characters (the provider
    or a proxy wrote it), at most 300 characters."""
    text = str(exc) if exc is not None else ""
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text[:300])


def _content(resp: Any) -> str:
    choices = _get(resp, "choices") or []
    if not choices:
        return ""
    message = _get(choices[0], "message")
    return _get(message, "content", "") or ""


def _ids_check(n: int, field: str) -> Callable[[Any], str | None]:
    def check(reply: Any) -> str | None:
        return _ids_problem([item.id for item in getattr(reply, field)], n, field)

    return check


def _ids_problem(ids: Sequence[int], n: int, field: str) -> str | None:
    """What is wrong with a reply's ids, which must be exactly 1..n once each.

    Two entries for one id may contradict each other (``no`` then ``yes``) and an id nobody asked
    about is not an answer: reading either (last one wins, extras ignored) would turn a confused
    reply into a score, so both make the reply unusable, like a missing id.
    """
    counts = Counter(ids)
    problems = []
    duplicate = sorted(i for i, c in counts.items() if c > 1)
    if duplicate:
        problems.append(f"duplicate {duplicate[:10]}")
    outside = sorted(i for i in counts if not 1 <= i <= n)
    if outside:
        problems.append(f"out of range {outside[:10]}")
    missing = sorted(set(range(1, n + 1)) - counts.keys())
    if missing:
        problems.append(f"missing {missing[:10]}")
    return f"expected exactly one entry per id 1..{n} in '{field}': {'; '.join(problems)}" if problems else None


def score_probabilities(resp: Any, lo: int, hi: int) -> dict[int, float] | None:
    """Probabilities of each candidate score from the score token's top log-probabilities.

    Finds the first integer token after ``"score"`` in the reply, reads its alternatives and
    renormalises over those that are integers in [lo, hi]. ``None`` when the provider returned
    no log-probabilities.
    """
    choices = _get(resp, "choices") or []
    if not choices:
        return None
    lp = _get(choices[0], "logprobs")
    entries = _get(lp, "content") if lp is not None else None
    if not entries:
        return None
    seen = ""
    for entry in entries:
        token = str(_get(entry, "token", ""))
        if "score" in seen and token.strip(' ":').isdigit():
            probs: dict[int, float] = {}
            for alt in _get(entry, "top_logprobs") or []:
                t = str(_get(alt, "token", "")).strip(' ":')
                if t.isdigit() and lo <= int(t) <= hi:
                    probs[int(t)] = probs.get(int(t), 0.0) + math.exp(float(_get(alt, "logprob", -1e9)))
            if not probs:
                return None
            total = sum(probs.values())
            return {k: v / total for k, v in sorted(probs.items())}
        seen += token
    return None


def _continuation_logprobs(resp: Any, text: str, start: int, model: str) -> TokenLogprobs:
    """The echoed tokens of ``text`` from the one covering character ``start`` on, with their log-probabilities.

    Offsets come from ``text_offset``, or from the tokens' lengths when they spell ``text`` exactly; a reply
    without echoed prompt log-probabilities is :class:`JudgeUnsupported` (the provider cannot score text)."""
    choices = _get(resp, "choices") or []
    lp = _get(choices[0], "logprobs") if choices else None
    tokens = [str(t) for t in (_get(lp, "tokens") or [])] if lp is not None else []
    values = list(_get(lp, "token_logprobs") or []) if lp is not None else []
    if not tokens or len(values) != len(tokens):
        raise JudgeUnsupported(f"model {model} returned no prompt log-probabilities (needs echo with logprobs)")
    offsets = list(_get(lp, "text_offset") or [])
    if len(offsets) != len(tokens):
        if "".join(tokens) != text:
            raise JudgeUnsupported(f"model {model} returned log-probabilities without token offsets")
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
    picked = [(t, v) for t, v, o in zip(tokens, values, offsets) if int(o) >= start or int(o) + len(t) > start]
    if not picked or any(v is None for _, v in picked):
        raise JudgeUnsupported(f"model {model} returned no log-probabilities for the scored text")
    out = [float(v) for _, v in picked]
    if any(not math.isfinite(v) or v > 0 for v in out):
        raise JudgeError(f"model {model} returned invalid log-probabilities", retryable=False)
    return TokenLogprobs([t for t, _ in picked], out)

"""Which failures of a litellm call are the judge's availability, and which are one record's.

The judge's *availability* is ``JudgeError(retryable=True)``: the record waits in the queue. Passing
unavailabilities (429, 408/409/425, 5xx, timeouts, dropped connections: :func:`transient_reason`) are retried by
the transport first; a judge that refuses our setup (401, 403, 404, a configuration 400, no key at all) is an
outage at once, unretried, since only an operator can end it (:class:`Refusals`). A failure caused by one
record's content is ``JudgeError(retryable=False)``: its result is an error.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import OrderedDict

import litellm

from ragtrace_collector.scoring.judge import JudgeError, UnavailableReason, report_unavailable

# What a provider client says when it was given no key at all: not an outage to retry (nothing will change
# until an operator sets one), the judge's setup; said once, with what to set.
_NO_KEY = re.compile(r"missing credentials|api_key client option must be set|no api key|api key is required", re.I)

_RETRYABLE_STATUS = {408, 409, 425, 429}
# 400s that name this request's content: its length or the provider's content policy.
_CONTENT_ERRORS = (litellm.exceptions.ContextWindowExceededError, litellm.exceptions.ContentPolicyViolationError)
_REJECTED_MEMORY = 4096  # request digests remembered by the "refused again while others pass" test


def status(exc: BaseException) -> int | None:
    """The HTTP status a litellm exception carries, if any."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) else None


def transient_reason(exc: BaseException) -> UnavailableReason | None:
    """Why ``exc`` is a passing unavailability worth retrying (timeouts, dropped connections, 429,
    408/409/425, 5xx), or ``None`` when retrying the same request cannot help."""
    code = status(exc)
    if _NO_KEY.search(str(exc)):
        return None
    if isinstance(exc, (litellm.exceptions.Timeout, asyncio.TimeoutError, TimeoutError)) or code == 408:
        return "timeout"
    if isinstance(exc, litellm.exceptions.RateLimitError) or code == 429:
        return "rate_limit"
    if isinstance(exc, (litellm.exceptions.APIConnectionError, ConnectionError)):
        return "connection"
    if isinstance(exc, (litellm.exceptions.ServiceUnavailableError, litellm.exceptions.InternalServerError)):
        return "server"
    if code is not None and (code in _RETRYABLE_STATUS or code >= 500):
        return "server"
    return None


def retry_after(exc: BaseException) -> float | None:
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


def short(exc: BaseException | None) -> str:
    """A failure's text for logs and stored reasons: one line, no control characters (the provider
    or a proxy wrote it), at most 300 characters."""
    text = str(exc) if exc is not None else ""
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text[:300])


class Refusals:
    """Sorts the failures retrying cannot fix: the judge's setup (an outage) or this input (its error).

    It remembers how many requests the judge answered and which requests it refused, to tell an ambiguous
    400 about one record's content from one about our configuration (see :meth:`error`).
    """

    def __init__(self) -> None:
        self._answered = 0  # requests the judge answered: tells a content 400 from a configuration one
        self._rejected: OrderedDict[str, int] = OrderedDict()  # request digest -> _answered when refused

    def answered(self) -> None:
        """The judge answered a request."""
        self._answered += 1

    def error(self, what: str, who: str, request: str, exc: BaseException) -> JudgeError:
        """The error for a failure that retrying the same request cannot fix.

        * 401 (``AuthenticationError``), 403 (``PermissionDeniedError``), 404 (``NotFoundError``: an
          unknown model or a wrong ``base_url``): the judge refuses *us*, not the record. Every record
          would fail alike until an operator fixes the key or the settings, so it is an outage
          (``retryable=True``, reason ``credentials``/``permission``/``config``): the record waits.
        * ``ContextWindowExceededError`` and ``ContentPolicyViolationError`` (400s that litellm reads
          as this request's length or content): this record's error (``retryable=False``).
        * Any other 400/422 (``BadRequestError``, ``UnsupportedParamsError``...) is ambiguous: a wrong
          model name or a parameter the endpoint refuses fails every request, an odd character in one
          record fails only that one. It counts as a configuration outage, unless this very request
          (``request``, a digest of what was sent) was refused before and the judge has answered other
          requests since: then it is the record's content, and its error, so one bad record cannot stall
          scoring for ever.
        * Anything else (an unexpected exception): this record's error.

        ``what`` names the call in messages, ``who`` the model the judge's refusals are about.
        """
        code = status(exc)
        said = f"{type(exc).__name__}: {short(exc)}"
        reason: UnavailableReason
        if isinstance(exc, _CONTENT_ERRORS):
            return JudgeError(f"{what} refused this record's content ({code}): {said}", retryable=False)
        if _NO_KEY.search(str(exc)):
            reason = "credentials"
            message = (
                "has no API key: set judge.api_key (RAGTRACE_JUDGE__API_KEY) or the provider's own variable"
                " (OPENAI_API_KEY, ANTHROPIC_API_KEY...); records wait in the queue until then"
            )
        elif isinstance(exc, litellm.exceptions.AuthenticationError) or code == 401:
            reason, message = "credentials", f"refused our credentials ({code or 401}): check judge.api_key"
        elif isinstance(exc, litellm.exceptions.PermissionDeniedError) or code == 403:
            reason, message = "permission", f"denied access ({code or 403}): check that judge.api_key may use it"
        elif isinstance(exc, litellm.exceptions.NotFoundError) or code == 404:
            reason, message = "config", f"was not found ({code or 404}): check judge.model and judge.base_url"
        elif isinstance(exc, litellm.exceptions.BadRequestError) or code in (400, 422):
            bad = code or 400
            refused_at = self._rejected.get(request) if request else None
            if refused_at is not None and refused_at < self._answered:
                self._rejected.pop(request, None)
                return JudgeError(
                    f"{what} was refused again ({bad}) for this record while the judge answers others: {said}",
                    retryable=False,
                )
            if request:
                self._rejected[request] = self._answered
                self._rejected.move_to_end(request)
                while len(self._rejected) > _REJECTED_MEMORY:
                    self._rejected.popitem(last=False)
            reason = "config"
            message = f"rejected our request ({bad}): check judge.model, judge.base_url and the judge settings"
        else:
            return JudgeError(f"{what} failed: {said}", retryable=False)
        error = JudgeError(f"{who} {message}; the provider said: {said}", retryable=True, reason=reason)
        report_unavailable(error)
        return error

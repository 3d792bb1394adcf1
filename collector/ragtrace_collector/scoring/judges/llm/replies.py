"""Reading a judge model's replies: JSON validated against the reply schemas, ids checked for alignment, score
probabilities and a text's token log-probabilities read from what the transport returned.

Nothing here guesses: a reply that does not fit is :class:`InvalidReply` (the judge then asks once for a repair)
and log-probabilities that are missing are ``None`` or :class:`JudgeUnsupported`, never an estimate.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ragtrace_collector.internal.json_input import loads
from ragtrace_collector.scoring.judge import JudgeError, JudgeUnsupported, TokenLogprobs

from .transport import PromptLogprobs, TokenAlternatives

M = TypeVar("M", bound=BaseModel)


class InvalidReply(Exception):
    """A reply that does not fit the request (the message says how)."""


def parse_json_object(text: str) -> Any:
    """The JSON object in a reply, tolerating code fences and prose around it."""
    text = (text or "").strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    try:
        return loads(text)
    except ValueError:  # nested past the parser's depth too
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            return loads(text[start : end + 1])
        raise


def validate(
    content: str,
    schema: type[M],
    check: Callable[[M], str | None] | None,
    parse: Callable[[str], Any] | None = None,
) -> M:
    """``content`` read (as JSON, or by ``parse``), validated against ``schema`` and ``check``; else :class:`InvalidReply`."""
    try:
        data = (parse or parse_json_object)(content)
    except ValueError as exc:
        raise InvalidReply(f"not valid JSON ({exc})" if parse is None else f"not in the format ({exc})") from None
    try:
        parsed = schema.model_validate(data)
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise InvalidReply(f"JSON does not match the format ({errors})") from None
    problem = check(parsed) if check else None
    if problem:
        raise InvalidReply(problem)
    return parsed


def ids_check(n: int, field: str) -> Callable[[Any], str | None]:
    """A reply check: the items of ``field`` carry exactly the ids 1..n, once each."""

    def check(reply: Any) -> str | None:
        return ids_problem([item.id for item in getattr(reply, field)], n, field)

    return check


def ids_problem(ids: Sequence[int], n: int, field: str) -> str | None:
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


def _plain_digits(token: str) -> bool:
    """A score token: ASCII digits (``str.isdigit`` also takes "²", which ``int`` refuses, and "٣")."""
    return token.isascii() and token.isdigit() and len(token) <= 6


def score_probabilities(logprobs: Sequence[TokenAlternatives] | None, lo: int, hi: int) -> dict[int, float] | None:
    """Probabilities of each candidate score from the score token's top log-probabilities.

    Finds the first integer token after ``"score"`` in the reply, reads its alternatives and
    renormalises over those that are integers in [lo, hi]. ``None`` when the provider returned
    no log-probabilities.
    """
    if not logprobs:
        return None
    seen = ""
    for entry in logprobs:
        if "score" in seen and _plain_digits(entry.token.strip(' ":')):
            probs: dict[int, float] = {}
            for token, logprob in entry.top:
                t = token.strip(' ":')
                if _plain_digits(t) and lo <= int(t) <= hi:
                    probs[int(t)] = probs.get(int(t), 0.0) + math.exp(logprob)
            if not probs:
                return None
            total = sum(probs.values())
            return {k: v / total for k, v in sorted(probs.items())}
        seen += entry.token
    return None


def continuation_logprobs(echoed: PromptLogprobs, text: str, start: int, model: str) -> TokenLogprobs:
    """The echoed tokens of ``text`` from the one covering character ``start`` on, with their log-probabilities.

    Offsets come from the echo, or from the tokens' lengths when they spell ``text`` exactly; an echo without
    prompt log-probabilities is :class:`JudgeUnsupported` (the provider cannot score text)."""
    tokens, values = echoed.tokens, echoed.logprobs
    if not tokens or len(values) != len(tokens):
        raise JudgeUnsupported(f"model {model} returned no prompt log-probabilities (needs echo with logprobs)")
    offsets = list(echoed.offsets)
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
    out = [float(v) for _, v in picked if v is not None]
    if any(not math.isfinite(v) or v > 0 for v in out):
        raise JudgeError(f"model {model} returned invalid log-probabilities", retryable=False)
    return TokenLogprobs([t for t, _ in picked], out)

"""The judge contract: what every judge is, how it fails, how it reports its spending, and the decisions' types.

A metric never talks to a model directly. It asks a :class:`Judge` for *decisions* (the claims
in an answer, a verdict per claim, the relevance of each chunk...) and does the arithmetic
itself, so the same arithmetic holds whichever judge answers (see the conformance tests). Which
decisions a judge makes is declared, one interface per kind of decision, in
:mod:`ragtrace_collector.scoring.capabilities`; :class:`Judge` itself is only a name, an identity
and :meth:`Judge.aclose`.

Contract for implementations:

* Every decision is ``async`` and may be called concurrently from many records.
* A judge that does not declare a decision's interface cannot be asked for it: the metric is
  *skipped* with a :class:`JudgeUnsupported` reason ("judge 'local' cannot decide safety"). A judge
  that declares it but cannot decide one input honestly raises :class:`JudgeUnsupported` itself,
  with the same effect; never a made-up decision.
* A judge that tried and failed (timeouts, 429 after retries, unparseable replies after the
  repair attempt) raises :class:`JudgeError`. ``retryable=True`` means the failure is the
  judge's availability (the collector keeps the record queued and backs off), ``False`` means
  this input cannot be judged (the record's result is an error). A judge that refuses our
  credentials or configuration is unavailable too (``reason`` says which), so fixing the key or
  the endpoint scores the backlog instead of finding it stored as errors. Implementations report
  each availability failure with :func:`report_unavailable`, so the worker can name its cause
  (:func:`unavailable_scope`) even though metrics turn the exception into a result.
* Calls, tokens and cost are reported with :func:`record_usage`, which adds them to every
  :func:`usage_scope` open in the current context; the engine opens one per metric.
* Returned lists are aligned with their inputs (one verdict per claim, one flag per chunk).
* :meth:`Judge.identity` names what decides the verdicts — the model, and a sha256 that changes whenever the
  verdicts could (an LLM judge's prompt templates and model name, the local judge's model files). Every stored
  score carries it (its provenance), so scores of two judge versions are never mistaken for one another. A judge
  that wraps another returns the inner judge's identity; one with neither prompts nor model files (a test double)
  keeps the base's, which hashes its class and name.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from ragtrace_collector.model.result import JudgeUsage

Verdict = Literal["yes", "no", "idk"]

# Why a judge is unavailable (a bounded label): the first three need an operator (the key, the
# model's access, the judge settings), the others pass by themselves.
UnavailableReason = Literal[
    "credentials", "permission", "config", "rate_limit", "timeout", "connection", "server", "unavailable"
]


class JudgeUnsupported(Exception):
    """This judge cannot make this kind of decision; the metric is skipped with the message."""


class JudgeError(Exception):
    """The judge failed to decide. ``retryable`` marks availability failures (outage, 429, timeout,
    refused credentials or configuration); ``reason`` is then why, as a bounded label."""

    def __init__(self, message: str, *, retryable: bool = False, reason: UnavailableReason | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reason: UnavailableReason | None = (reason or "unavailable") if retryable else None


_scopes: contextvars.ContextVar[tuple[JudgeUsage, ...]] = contextvars.ContextVar(
    "ragtrace_judge_usage_scopes", default=()
)


@contextlib.contextmanager
def usage_scope() -> Iterator[JudgeUsage]:
    """Collect the usage of every judge call made inside this block (nested scopes all count)."""
    usage = JudgeUsage()
    token = _scopes.set(_scopes.get() + (usage,))
    try:
        yield usage
    finally:
        _scopes.reset(token)


def record_usage(
    calls: int = 0,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
    cost_usd: float = 0.0,
    cache_hits: int = 0,
    errors: int = 0,
) -> None:
    """Report spending to every open :func:`usage_scope` (called by judge implementations)."""
    delta = JudgeUsage(calls, prompt_tokens, completion_tokens, cost_usd, cache_hits, errors)
    for scope in _scopes.get():
        scope.add(delta)


_unavailable: contextvars.ContextVar[list[JudgeError] | None] = contextvars.ContextVar(
    "ragtrace_judge_unavailable", default=None
)


@contextlib.contextmanager
def unavailable_scope() -> Iterator[list[JudgeError]]:
    """Collect the availability failures judge calls report inside this block (the worker's view of
    why a record waits: metrics keep only a message and ``retryable`` in their results)."""
    seen: list[JudgeError] = []
    token = _unavailable.set(seen)
    try:
        yield seen
    finally:
        _unavailable.reset(token)


def report_unavailable(error: JudgeError) -> None:
    """Tell the innermost open :func:`unavailable_scope` why the judge could not be used."""
    seen = _unavailable.get()
    if seen is not None and error.retryable:
        seen.append(error)


# --- decision types --------------------------------------------------------------------------


@dataclass
class ClaimVerdict:
    """A statement and whether the given texts support it (``yes``), contradict or lack it (``no``)
    or cannot tell (``idk``); ``evidence`` quotes what decided it, where the judge has it."""

    statement: str
    verdict: Verdict
    reason: str = ""
    evidence: str | None = None
    confidence: float | None = None  # P(supported) where the judge is probabilistic


@dataclass
class GeneratedQuestion:
    """A question generated back from an answer (Ragas answer relevancy)."""

    question: str
    noncommittal: bool = False


@dataclass
class StatementClassification:
    """Answer statements against a reference (answer correctness)."""

    tp: list[str] = field(default_factory=list)
    fp: list[str] = field(default_factory=list)
    fn: list[str] = field(default_factory=list)


@dataclass
class ContextSentences:
    """How many sentences the contexts hold, and which of them are relevant to the question."""

    total: int
    relevant: list[str] = field(default_factory=list)


@dataclass
class SafetyVerdict:
    """A critic's binary verdict for one safety category."""

    category: str
    unsafe: bool
    reason: str = ""


@dataclass
class GEvalScore:
    """A G-Eval score on ``[min_score, max_score]``; ``probabilities`` maps each candidate score to its
    probability when the provider returned token log-probabilities (then the weighted score is used)."""

    score: float
    min_score: int = 1
    max_score: int = 10
    probabilities: dict[int, float] | None = None
    reason: str = ""


NliLabel = Literal["entailment", "neutral", "contradiction"]


@dataclass
class NliVerdict:
    """A hypothesis and its natural-language-inference relation to a premise: the premise entails it,
    says nothing either way about it (``neutral``), or contradicts it."""

    statement: str
    label: NliLabel
    reason: str = ""


@dataclass
class TokenLogprobs:
    """The log-probabilities a model assigns to the tokens of a given continuation (GPTScore):
    ``tokens[i]`` has natural-log probability ``logprobs[i]`` given the prompt and the tokens before it."""

    tokens: list[str]
    logprobs: list[float]


@dataclass
class RubricGrade:
    """An evaluator's absolute grade (Prometheus): written feedback, then an integer 1–5."""

    feedback: str
    grade: int


@dataclass
class TaskOutcome:
    """What the user asked the system to do (inferred from the input) and what the execution achieved."""

    task: str
    outcome: str


@dataclass
class TaskVerdict:
    """How completely the outcome accomplishes the task, on [0, 1], and why."""

    score: float
    reason: str = ""


@dataclass(frozen=True)
class JudgeIdentity:
    """What decides a judge's verdicts: ``model`` (a litellm model name, ``local/cascade``...) and ``hash``, the
    sha256 (hex) of everything else that decides them (prompt templates, model files)."""

    model: str
    hash: str


def sha256_hex(*parts: str | bytes) -> str:
    """The sha256 of ``parts``, each length-prefixed so that no two different lists hash alike."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8") if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class Judge:
    """What every judge is: a name, an identity and resources to release. The decisions it makes are the
    interfaces of :mod:`ragtrace_collector.scoring.capabilities` it derives from; a bare ``Judge`` makes none
    (only the metrics that need no judge score with it).

    ``name`` is the bounded label used in metrics (``local``, or the litellm model name).
    """

    name: str = "judge"

    def identity(self) -> JudgeIdentity:
        """What decides this judge's verdicts (see the module docstring); implementations override it."""
        cls = type(self)
        return JudgeIdentity(model=self.name, hash=sha256_hex(f"{cls.__module__}.{cls.__qualname__}", self.name))

    async def aclose(self) -> None:
        """Release clients and models."""

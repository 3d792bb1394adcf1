"""The judge interface: the decisions metrics ask for, implemented by the LLM and embedded judges.

A metric never talks to a model directly. It asks a :class:`Judge` for *decisions* (the claims
in an answer, a verdict per claim, the relevance of each chunk...) and does the arithmetic
itself, so the same arithmetic holds whichever judge answers (see the conformance tests).

Contract for implementations:

* Every method is ``async`` and may be called concurrently from many records.
* A judge that cannot make a decision honestly raises :class:`JudgeUnsupported`; the
  metric is then *skipped* with that reason, never scored.
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
from collections.abc import Iterator, Sequence
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
    """Base class: every decision unsupported until an implementation overrides it.

    ``name`` is the bounded label used in metrics (``local``, or the litellm model name).
    """

    name: str = "judge"

    def identity(self) -> JudgeIdentity:
        """What decides this judge's verdicts (see the module docstring); implementations override it."""
        cls = type(self)
        return JudgeIdentity(model=self.name, hash=sha256_hex(f"{cls.__module__}.{cls.__qualname__}", self.name))

    def _unsupported(self, what: str) -> JudgeUnsupported:
        return JudgeUnsupported(f"judge '{self.name}' cannot decide {what}")

    # claims and verdicts ---------------------------------------------------------------------
    async def extract_claims(self, question: str, response: str) -> list[str]:
        """Break the response into short, self-contained factual claims (pronouns resolved)."""
        raise self._unsupported("claim extraction")

    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        """One verdict per claim: is it supported by the contexts taken together?

        ``question`` is the one the claims answer: a signal for judges that read it (the local
        judge's model does), passed with every call so a verdict never depends on other records.
        """
        raise self._unsupported("claim verification")

    async def verify_claims_per_context(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[list[ClaimVerdict]]:
        """``result[j][i]``: is claim ``i`` supported by context ``j`` alone? (noise sensitivity)"""
        return [await self.verify_claims(claims, [ctx], question) for ctx in contexts]

    # relevancy --------------------------------------------------------------------------------
    async def statement_relevance(self, question: str, response: str) -> list[ClaimVerdict]:
        """The response's statements, each with whether it addresses the question."""
        raise self._unsupported("statement relevance")

    async def generate_questions(self, response: str, contexts: Sequence[str], n: int = 3) -> list[GeneratedQuestion]:
        """``n`` questions the response answers, each flagged non-committal when the answer evades."""
        raise self._unsupported("question generation")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalised sentence embeddings, one per text."""
        raise self._unsupported("embeddings")

    async def chunk_relevance(self, question: str, target: str, contexts: Sequence[str]) -> list[bool]:
        """One flag per ranked chunk: was it useful in arriving at ``target`` (reference or answer)?"""
        raise self._unsupported("chunk relevance")

    async def relevant_context_sentences(self, question: str, contexts: Sequence[str]) -> ContextSentences:
        """Split the contexts into sentences and pick those relevant to the question."""
        raise self._unsupported("context sentence relevance")

    # reference-based --------------------------------------------------------------------------
    async def attribute_statements(self, reference: str, contexts: Sequence[str]) -> list[ClaimVerdict]:
        """The reference's statements, each with whether the contexts support it (context recall)."""
        raise self._unsupported("statement attribution")

    async def extract_entities(self, text: str) -> list[str]:
        """Named entities, numbers and dates in ``text``, deduplicated."""
        raise self._unsupported("entity extraction")

    async def classify_statements(self, question: str, response: str, reference: str) -> StatementClassification:
        """Answer statements as TP (in reference), FP (not in reference); reference statements missing as FN."""
        raise self._unsupported("statement classification")

    # conversations, safety, custom criteria ----------------------------------------------------
    async def extract_intentions(self, turns: Sequence[tuple[str, str]]) -> list[str]:
        """What the user wanted across the conversation's (role, content) turns."""
        raise self._unsupported("user intentions")

    async def intentions_satisfied(
        self, turns: Sequence[tuple[str, str]], intentions: Sequence[str]
    ) -> list[ClaimVerdict]:
        """One verdict per intention: did the assistant satisfy it?"""
        raise self._unsupported("intention satisfaction")

    async def safety_verdict(self, category: str, question: str, response: str, vote: int = 0) -> SafetyVerdict:
        """One independent critic verdict (``vote`` numbers the independent asks) for a category."""
        raise self._unsupported("safety")

    async def geval_steps(self, name: str, criteria: str) -> list[str]:
        """Evaluation steps for the criteria (generated once; callers cache them)."""
        raise self._unsupported("G-Eval")

    async def geval_score(
        self,
        name: str,
        criteria: str,
        steps: Sequence[str],
        fields: dict[str, str],
        min_score: int = 1,
        max_score: int = 10,
    ) -> GEvalScore:
        """Score the fields against the steps, with score probabilities where available."""
        raise self._unsupported("G-Eval")

    async def choose(self, instruction: str, options: Sequence[str], fields: dict[str, str]) -> str:
        """Pick one of ``options`` for a DAG decision node."""
        raise self._unsupported("DAG decisions")

    # model-based families (issue 15) ---------------------------------------------------------
    async def nli(self, premise: str, hypotheses: Sequence[str]) -> list[NliVerdict]:
        """One NLI verdict per hypothesis (in order): does ``premise`` entail it, contradict it, or neither?"""
        raise self._unsupported("natural language inference (entailment / neutral / contradiction)")

    async def continuation_logprobs(self, prompt: str, continuation: str, model: str | None = None) -> TokenLogprobs:
        """The token log-probabilities of ``continuation`` right after ``prompt`` (GPTScore), read from a model
        that scores given text (``echo``); ``model`` overrides the judge's own. A model or provider that
        returns no prompt log-probabilities is unsupported, never an estimate."""
        raise self._unsupported("token log-probabilities of a given text")

    async def sample_responses(
        self, messages: Sequence[tuple[str, str]], n: int, temperature: float, model: str | None = None
    ) -> list[str]:
        """``n`` independent completions of the (role, content) ``messages`` at ``temperature`` > 0, from
        ``model`` (the generator's, for SelfCheckGPT) or the judge's own."""
        raise self._unsupported("re-sampling a generator")

    async def rubric_grade(
        self,
        instruction: str,
        response: str,
        criteria: str,
        descriptions: Sequence[str],
        reference: str | None = None,
        model: str | None = None,
    ) -> RubricGrade:
        """Prometheus absolute grading: feedback and a 1–5 grade of ``response`` to ``instruction`` on the
        rubric (``criteria`` and the five score ``descriptions``, 1 to 5), against ``reference`` (a score-5
        answer) when given; ``model`` is the evaluator model (the judge's own when ``None``)."""
        raise self._unsupported("rubric grading")

    async def assessment_questions(self, text: str, n: int) -> list[str]:
        """``n`` closed (yes/no) questions about the key facts of ``text`` (summarization coverage)."""
        raise self._unsupported("assessment question generation")

    async def answer_questions(self, questions: Sequence[str], text: str) -> list[ClaimVerdict]:
        """One answer per question (in order) from ``text`` alone: ``yes``, ``no``, or ``idk`` when it does not say."""
        raise self._unsupported("closed question answering")

    async def extract_instructions(self, prompt: str) -> list[str]:
        """The instructions a prompt template gives the model (format, tone, length, content rules)."""
        raise self._unsupported("instruction extraction")

    async def instructions_followed(
        self, instructions: Sequence[str], question: str, response: str
    ) -> list[ClaimVerdict]:
        """One verdict per instruction (in order): does the response follow it?"""
        raise self._unsupported("instruction following")

    async def extract_opinions(self, text: str) -> list[str]:
        """The opinions ``text`` expresses (views and judgements, not facts), each as written."""
        raise self._unsupported("opinion extraction")

    async def judge_opinions(self, kind: Literal["toxicity", "bias"], opinions: Sequence[str]) -> list[ClaimVerdict]:
        """One verdict per opinion (in order): is it toxic (``kind="toxicity"``) or biased (``"bias"``)?
        ``yes`` flags it."""
        raise self._unsupported(f"{kind} verdicts")

    async def infer_task(self, steps: Sequence[tuple[str, str]]) -> TaskOutcome:
        """The task the user gave and the outcome reached, from the execution's (step kind, content) steps."""
        raise self._unsupported("task inference")

    async def task_completion(self, task: str, outcome: str) -> TaskVerdict:
        """How completely ``outcome`` accomplishes ``task`` (0–1)."""
        raise self._unsupported("task completion")

    async def aclose(self) -> None:
        """Release clients and models."""

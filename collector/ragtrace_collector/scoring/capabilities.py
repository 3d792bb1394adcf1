"""What a judge can decide: one interface per kind of decision, declared by each judge, asked for by each metric.

A judge makes a kind of decision by deriving from its interface and implementing its abstract methods
(``class LocalJudge(Judge, ClaimExtraction, ClaimVerification, ...)``): declared, never probed. A metric lists
the interfaces it may ask for in ``Metric.needs`` and gets the judge typed as one with
``ctx.need(ClaimVerification)`` (or ``ClaimVerification.of(judge)``), which raises
:class:`~ragtrace_collector.scoring.judge.JudgeUnsupported` — "judge 'local' cannot decide claim verification" —
for a judge that does not declare it; the metric is then skipped with that reason, never scored.

The contract of every method, beyond its own docstring and the judge contract of :mod:`.judge`:

* it is ``async`` and may be called concurrently from many records;
* returned lists are aligned with their inputs (one verdict per claim, one flag per chunk);
* a judge that has the capability but cannot decide this input honestly (no context to verify against, a
  provider that returns no log-probabilities) raises ``JudgeUnsupported``; one that tried and failed raises
  ``JudgeError``.

Methods share an interface where no metric asks one without the other (G-Eval's steps and score, QAG's
questions and answers); they are apart where one is asked alone (claims are verified without being extracted by
SelfCheckGPT, configured instructions are judged without being extracted), so each skip reason names the decision
that was missing, as ``decision`` says.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from ragtrace_collector.scoring.judge import (
    ClaimVerdict,
    ContextSentences,
    GeneratedQuestion,
    GEvalScore,
    Judge,
    JudgeUnsupported,
    NliVerdict,
    RubricGrade,
    SafetyVerdict,
    StatementClassification,
    TaskOutcome,
    TaskVerdict,
    TokenLogprobs,
)

C = TypeVar("C", bound="Capability")
C_co = TypeVar("C_co", covariant=True)

_INTERFACES: list[type[Capability]] = []


class Capability(abc.ABC):  # noqa: B024 (the interfaces below declare the abstract methods)
    """Base of the decision interfaces. Each interface is declared with the words a skip reason uses for the
    decision a judge without it cannot make: ``class Embedding(Capability, decision="embeddings")``."""

    decision: ClassVar[str] = ""

    def __init_subclass__(cls, decision: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if decision is not None:  # an interface (a judge deriving from one passes none)
            cls.decision = decision
            _INTERFACES.append(cls)

    @classmethod
    def of(cls: type[C], judge: Judge) -> C:
        """``judge`` as this interface, or ``JudgeUnsupported`` naming the decision it cannot make."""
        if isinstance(judge, cls):
            return judge
        raise JudgeUnsupported(f"judge '{judge.name}' cannot decide {cls.decision}")

    @classmethod
    def methods(cls) -> tuple[str, ...]:
        """The decision methods this interface declares (what a wrapper of a judge delegates)."""
        return tuple(n for n, f in vars(cls).items() if not n.startswith("_") and inspect.iscoroutinefunction(f))


class Interface(Protocol[C_co]):
    """A capability interface seen as its class, for ``ctx.need(ClaimVerification)`` (an abstract class is no
    ``type[C]`` to a type checker, but it has :meth:`Capability.of`)."""

    def of(self, judge: Judge) -> C_co: ...


def interfaces() -> tuple[type[Capability], ...]:
    """Every decision interface, in the order they are declared."""
    return tuple(_INTERFACES)


def capabilities_of(judge: Judge) -> tuple[type[Capability], ...]:
    """The interfaces ``judge`` declares."""
    return tuple(c for c in _INTERFACES if isinstance(judge, c))


# claims and verdicts -------------------------------------------------------------------------------


class ClaimExtraction(Capability, decision="claim extraction"):
    """Breaking an answer into claims (faithfulness, hallucination, NLI, noise sensitivity, summarization)."""

    @abc.abstractmethod
    async def extract_claims(self, question: str, response: str) -> list[str]:
        """Break the response into short, self-contained factual claims (pronouns resolved)."""


class ClaimVerification(Capability, decision="claim verification"):
    """Whether texts support claims, all texts together or each alone."""

    @abc.abstractmethod
    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        """One verdict per claim: is it supported by the contexts taken together?

        ``question`` is the one the claims answer: a signal for judges that read it (the local
        judge's model does), passed with every call so a verdict never depends on other records.
        """

    async def verify_claims_per_context(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[list[ClaimVerdict]]:
        """``result[j][i]``: is claim ``i`` supported by context ``j`` alone? (noise sensitivity, SelfCheckGPT);
        by default one :meth:`verify_claims` per context."""
        return [await self.verify_claims(claims, [ctx], question) for ctx in contexts]


# relevancy -----------------------------------------------------------------------------------------


class StatementRelevance(Capability, decision="statement relevance"):
    """Which of an answer's statements address the question (answer relevancy, ``statements``)."""

    @abc.abstractmethod
    async def statement_relevance(self, question: str, response: str) -> list[ClaimVerdict]:
        """The response's statements, each with whether it addresses the question."""


class QuestionGeneration(Capability, decision="question generation"):
    """Questions generated back from an answer (answer relevancy, ``questions``)."""

    @abc.abstractmethod
    async def generate_questions(self, response: str, contexts: Sequence[str], n: int = 3) -> list[GeneratedQuestion]:
        """``n`` questions the response answers, each flagged non-committal when the answer evades."""


class Embedding(Capability, decision="embeddings"):
    """Sentence embeddings (answer similarity and relevancy, answer correctness's similarity part)."""

    @abc.abstractmethod
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalised sentence embeddings, one per text."""


class ChunkRelevance(Capability, decision="chunk relevance"):
    """Which ranked chunks were useful (context precision, noise sensitivity)."""

    @abc.abstractmethod
    async def chunk_relevance(self, question: str, target: str, contexts: Sequence[str]) -> list[bool]:
        """One flag per ranked chunk: was it useful in arriving at ``target`` (reference or answer)?"""


class ContextSentenceRelevance(Capability, decision="context sentence relevance"):
    """Which context sentences are relevant to the question (context relevancy)."""

    @abc.abstractmethod
    async def relevant_context_sentences(self, question: str, contexts: Sequence[str]) -> ContextSentences:
        """Split the contexts into sentences and pick those relevant to the question."""


# reference-based -----------------------------------------------------------------------------------


class StatementAttribution(Capability, decision="statement attribution"):
    """Whether the contexts support the reference's statements (context recall)."""

    @abc.abstractmethod
    async def attribute_statements(self, reference: str, contexts: Sequence[str]) -> list[ClaimVerdict]:
        """The reference's statements, each with whether the contexts support it."""


class EntityExtraction(Capability, decision="entity extraction"):
    """Entities in a text (context entity recall)."""

    @abc.abstractmethod
    async def extract_entities(self, text: str) -> list[str]:
        """Named entities, numbers and dates in ``text``, deduplicated."""


class ReferenceClassification(Capability, decision="statement classification"):
    """An answer's statements against a reference, as TP / FP / FN (answer correctness)."""

    @abc.abstractmethod
    async def classify_statements(self, question: str, response: str, reference: str) -> StatementClassification:
        """Answer statements as TP (in reference), FP (not in reference); reference statements missing as FN."""


# conversations, safety, custom criteria ------------------------------------------------------------


class IntentionSatisfaction(Capability, decision="user intentions"):
    """What a user wanted across a conversation, and whether they got it (completeness)."""

    @abc.abstractmethod
    async def extract_intentions(self, turns: Sequence[tuple[str, str]]) -> list[str]:
        """What the user wanted across the conversation's (role, content) turns."""

    @abc.abstractmethod
    async def intentions_satisfied(
        self, turns: Sequence[tuple[str, str]], intentions: Sequence[str]
    ) -> list[ClaimVerdict]:
        """One verdict per intention: did the assistant satisfy it?"""


class SafetyCritique(Capability, decision="safety"):
    """Independent binary critics per safety category (safety)."""

    @abc.abstractmethod
    async def safety_verdict(self, category: str, question: str, response: str, vote: int = 0) -> SafetyVerdict:
        """One independent critic verdict (``vote`` numbers the independent asks) for a category."""


class GEvalScoring(Capability, decision="G-Eval"):
    """G-Eval: evaluation steps for criteria, then a score against them (geval, helpfulness, DAG leaves)."""

    @abc.abstractmethod
    async def geval_steps(self, name: str, criteria: str) -> list[str]:
        """Evaluation steps for the criteria (generated once; callers cache them)."""

    @abc.abstractmethod
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


class Choice(Capability, decision="DAG decisions"):
    """One option picked for a decision node (DAG)."""

    @abc.abstractmethod
    async def choose(self, instruction: str, options: Sequence[str], fields: dict[str, str]) -> str:
        """Pick one of ``options`` for a DAG decision node."""


# model-based families ------------------------------------------------------------------------------


class NaturalLanguageInference(
    Capability, decision="natural language inference (entailment / neutral / contradiction)"
):
    """Three-way NLI (nli, SelfCheckGPT's ``nli`` variant)."""

    @abc.abstractmethod
    async def nli(self, premise: str, hypotheses: Sequence[str]) -> list[NliVerdict]:
        """One NLI verdict per hypothesis (in order): does ``premise`` entail it, contradict it, or neither?"""


class TextLogprobs(Capability, decision="token log-probabilities of a given text"):
    """The log-probabilities a model gives a given text (GPTScore)."""

    @abc.abstractmethod
    async def continuation_logprobs(self, prompt: str, continuation: str, model: str | None = None) -> TokenLogprobs:
        """The token log-probabilities of ``continuation`` right after ``prompt``, read from a model that scores
        given text (``echo``); ``model`` overrides the judge's own. A model or provider that returns no prompt
        log-probabilities is ``JudgeUnsupported``, never an estimate."""


class Sampling(Capability, decision="re-sampling a generator"):
    """Fresh completions of a recorded prompt (SelfCheckGPT)."""

    @abc.abstractmethod
    async def sample_responses(
        self, messages: Sequence[tuple[str, str]], n: int, temperature: float, model: str | None = None
    ) -> list[str]:
        """``n`` independent completions of the (role, content) ``messages`` at ``temperature`` > 0, from
        ``model`` (the generator's, for SelfCheckGPT) or the judge's own."""


class RubricGrading(Capability, decision="rubric grading"):
    """Prometheus absolute grading on a five-level rubric (prometheus)."""

    @abc.abstractmethod
    async def rubric_grade(
        self,
        instruction: str,
        response: str,
        criteria: str,
        descriptions: Sequence[str],
        reference: str | None = None,
        model: str | None = None,
    ) -> RubricGrade:
        """Feedback and a 1–5 grade of ``response`` to ``instruction`` on the rubric (``criteria`` and the five
        score ``descriptions``, 1 to 5), against ``reference`` (a score-5 answer) when given; ``model`` is the
        evaluator model (the judge's own when ``None``)."""


class ClosedQuestions(Capability, decision="assessment question generation"):
    """Question-answer generation: closed questions from a text, answered from texts (summarization)."""

    @abc.abstractmethod
    async def assessment_questions(self, text: str, n: int) -> list[str]:
        """``n`` closed (yes/no) questions about the key facts of ``text``."""

    @abc.abstractmethod
    async def answer_questions(self, questions: Sequence[str], text: str) -> list[ClaimVerdict]:
        """One answer per question (in order) from ``text`` alone: ``yes``, ``no``, or ``idk`` when it does not say."""


class InstructionExtraction(Capability, decision="instruction extraction"):
    """The instructions a prompt template gives (prompt alignment without configured instructions)."""

    @abc.abstractmethod
    async def extract_instructions(self, prompt: str) -> list[str]:
        """The instructions a prompt template gives the model (format, tone, length, content rules)."""


class InstructionFollowing(Capability, decision="instruction following"):
    """Whether an answer follows instructions (prompt alignment)."""

    @abc.abstractmethod
    async def instructions_followed(
        self, instructions: Sequence[str], question: str, response: str
    ) -> list[ClaimVerdict]:
        """One verdict per instruction (in order): does the response follow it?"""


class OpinionJudgement(Capability, decision="opinion extraction"):
    """An answer's opinions, each judged toxic or biased (toxicity, bias)."""

    @abc.abstractmethod
    async def extract_opinions(self, text: str) -> list[str]:
        """The opinions ``text`` expresses (views and judgements, not facts), each as written."""

    @abc.abstractmethod
    async def judge_opinions(self, kind: Literal["toxicity", "bias"], opinions: Sequence[str]) -> list[ClaimVerdict]:
        """One verdict per opinion (in order): is it toxic (``kind="toxicity"``) or biased (``"bias"``)?
        ``yes`` flags it."""


class TaskAssessment(Capability, decision="task inference"):
    """The task an execution was given, and how completely it was done (task completion)."""

    @abc.abstractmethod
    async def infer_task(self, steps: Sequence[tuple[str, str]]) -> TaskOutcome:
        """The task the user gave and the outcome reached, from the execution's (step kind, content) steps."""

    @abc.abstractmethod
    async def task_completion(self, task: str, outcome: str) -> TaskVerdict:
        """How completely ``outcome`` accomplishes ``task`` (0–1)."""

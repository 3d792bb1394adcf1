"""LLMJudge: every decision asked of a chat model, as prompts out and validated replies back.

Cheap by design: one call extracts the answer's claims *and* each claim's relevance to the
question (faithfulness and answer relevancy share it); one call verifies all claims; one call
judges all chunks; identical calls (same model, prompt, temperature) are answered from an LRU
cache and concurrent identical calls share one request (:mod:`.cache`).

Robust by design: temperature 0; JSON replies validated with pydantic and checked for alignment
(exactly one verdict per claim id: a duplicate, missing or unasked-for id is unusable, since two
verdicts for one claim may contradict each other), with one repair request quoting the validation
error (:mod:`.replies`). Stored reasons are capped by the reply schemas. No score is ever invented
from a failed reply. How the model is reached — timeouts, retries, which failures are the judge's
availability, usage and cost, reply bounds — is the transport's (:mod:`.transport`); cache hits are
counted as ``cache_hits``.

Safety votes: vote 0 runs at temperature 0; votes 1.. run at ``safety_vote_temperature`` (0.7)
and carry their vote number in the prompt, so they are independent samples and never collapse
into one cached call.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from typing_extensions import Unpack

from ragtrace_collector.scoring import prompts as P
from ragtrace_collector.scoring.capabilities import (
    Choice,
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    ClosedQuestions,
    ContextSentenceRelevance,
    Embedding,
    EntityExtraction,
    GEvalScoring,
    InstructionExtraction,
    InstructionFollowing,
    IntentionSatisfaction,
    NaturalLanguageInference,
    OpinionJudgement,
    QuestionGeneration,
    ReferenceClassification,
    RubricGrading,
    SafetyCritique,
    Sampling,
    StatementAttribution,
    StatementRelevance,
    TaskAssessment,
    TextLogprobs,
)
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
    sha256_hex,
)
from ragtrace_collector.scoring.text import split_sentences

from .cache import ReplyCache
from .replies import (
    InvalidReply,
    continuation_logprobs,
    ids_check,
    ids_problem,
    score_probabilities,
    validate,
)
from .transport import Completion, LLMTransport, TransportOptions

M = TypeVar("M", bound=BaseModel)


@functools.cache
def _prompts_source() -> bytes:
    """The prompt templates and reply schemas as shipped: the source of :mod:`ragtrace_collector.scoring.prompts`."""
    return Path(P.__file__).read_bytes()


class LLMJudge(
    Judge,
    ClaimExtraction,
    ClaimVerification,
    StatementRelevance,
    QuestionGeneration,
    Embedding,
    ChunkRelevance,
    ContextSentenceRelevance,
    StatementAttribution,
    EntityExtraction,
    ReferenceClassification,
    IntentionSatisfaction,
    SafetyCritique,
    GEvalScoring,
    Choice,
    NaturalLanguageInference,
    TextLogprobs,
    Sampling,
    RubricGrading,
    ClosedQuestions,
    InstructionExtraction,
    InstructionFollowing,
    OpinionJudgement,
    TaskAssessment,
):
    """A judge backed by a chat model through :class:`~.transport.LLMTransport` (litellm): every decision
    interface of :mod:`ragtrace_collector.scoring.capabilities`.

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
        *,
        cache_size: int = 4096,
        safety_vote_temperature: float = 0.7,
        **transport: Unpack[TransportOptions],
    ) -> None:
        if not model:
            raise ValueError("LLMJudge needs a model name")
        self.model = model
        self.name = model
        self.embedding_model = transport.get("embedding_model")
        self.safety_vote_temperature = safety_vote_temperature
        self.transport = LLMTransport(model, **transport)
        self._replies: ReplyCache[tuple[Any, Completion | None]] = ReplyCache(cache_size)
        self._local_embedder: Any = None

    def identity(self) -> JudgeIdentity:
        """The model, and the sha256 of the prompt templates (the whole prompts module: any prompt or reply
        schema change changes every metric's hash, so none is missed), the model and the embedding model."""
        return JudgeIdentity(
            model=self.model, hash=sha256_hex(_prompts_source(), self.model, self.embedding_model or "")
        )

    # asking -----------------------------------------------------------------------------------
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
    ) -> tuple[M, Completion | None]:
        """Ask once (cached): the validated reply and the completion it came in (for log-probabilities; ``None``
        when served from the cache without them).

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
        return await self._replies.get(
            key,
            lambda: self._ask_uncached(prompt, schema, check, temperature, logprobs, model, system, parse),
            # the completion is kept only where it is read (log-probabilities): not a copy per reply
            keep=None if logprobs else lambda r: (r[0], None),
        )

    async def _ask_uncached(
        self,
        prompt: str,
        schema: type[M],
        check: Callable[[M], str | None] | None,
        temperature: float,
        logprobs: bool,
        model: str,
        system: str,
        parse: Callable[[str], Any] | None,
    ) -> tuple[M, Completion | None]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        json_reply = parse is None

        async def complete(chat: list[dict[str, str]]) -> Completion:
            return await self.transport.complete(
                chat, model=model, temperature=temperature, json_reply=json_reply, logprobs=logprobs
            )

        reply = await complete(messages)
        try:
            return validate(reply.text, schema, check, parse), reply
        except InvalidReply as invalid:
            first = self._cut_off(reply, invalid)
            repair = messages + [
                {"role": "assistant", "content": reply.text},
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
            reply = await complete(repair)
            try:
                return validate(reply.text, schema, check, parse), reply
            except InvalidReply as invalid:
                second = self._cut_off(reply, invalid)
                raise JudgeError(
                    f"invalid judge reply after one repair attempt ({schema.__name__}): {second}; "
                    f"reply was: {reply.text[:200]!r}",
                    retryable=False,
                ) from None

    def _cut_off(self, reply: Completion, problem: InvalidReply) -> InvalidReply:
        """Say so when an unusable reply was cut at ``max_tokens`` (the likely cause)."""
        if reply.truncated:
            return InvalidReply(f"{problem} (the reply was cut off at judge.max_tokens = {self.transport.max_tokens})")
        return problem

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
            P.verify_prompt(claims, contexts), P.VerdictsReply, ids_check(len(claims), "verdicts")
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
            problem = ids_problem([c.id for c in r.claims], len(claims), "claims")
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
            P.chunks_prompt(question, target, contexts), P.UsefulReply, ids_check(len(contexts), "verdicts")
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
            P.intentions_satisfied_prompt(turns, intentions), P.VerdictsReply, ids_check(len(intentions), "verdicts")
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

        reply, completion = await self.ask(
            P.geval_score_prompt(name, criteria, steps, fields, min_score, max_score),
            P.ScoreReply,
            check,
            logprobs=True,
        )
        return GEvalScore(
            score=float(reply.score),
            min_score=min_score,
            max_score=max_score,
            probabilities=score_probabilities(completion.logprobs if completion else None, min_score, max_score),
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
        reply, _ = await self.ask(P.nli_prompt(premise, hypotheses), P.NliReply, ids_check(len(hypotheses), "verdicts"))
        by_id = {v.id: v for v in reply.verdicts}
        return [NliVerdict(h, by_id[i].label, by_id[i].reason) for i, h in enumerate(hypotheses, 1)]

    async def continuation_logprobs(self, prompt: str, continuation: str, model: str | None = None) -> TokenLogprobs:
        """The prompt's own log-probabilities (the transport's echo), from the token that covers the start of
        ``continuation`` on. Chat-only models and providers that drop ``echo`` return none: :class:`JudgeUnsupported`."""
        model = model or self.model
        text = prompt + continuation
        echoed = await self.transport.prompt_logprobs(text, model=model)
        return continuation_logprobs(echoed, text, len(prompt), model)

    async def sample_responses(
        self, messages: Sequence[tuple[str, str]], n: int, temperature: float, model: str | None = None
    ) -> list[str]:
        """``n`` separate requests (not ``n=``, which many providers drop), free text, never cached."""
        chat = [{"role": role, "content": content} for role, content in messages]

        async def one() -> str:
            reply = await self.transport.complete(chat, model=model, temperature=temperature)
            text = reply.text.strip()
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
            P.answer_questions_prompt(questions, text), P.VerdictsReply, ids_check(len(questions), "verdicts")
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
            ids_check(len(instructions), "verdicts"),
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
            P.opinion_verdicts_prompt(kind, opinions), P.VerdictsReply, ids_check(len(opinions), "verdicts")
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
        """From ``embedding_model`` over the transport when one is set, else the local ONNX embedder."""
        texts = list(texts)
        if not texts:
            return []
        if self.embedding_model:
            return await self.transport.embed(texts)
        return await self._local_embed(texts)

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

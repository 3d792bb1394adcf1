"""Metric behaviour beyond the worked examples: skips, errors, sharing, variants, options."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import (
    Choice,
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    ClosedQuestions,
    Embedding,
    GEvalScoring,
    IntentionSatisfaction,
    QuestionGeneration,
    SafetyCritique,
)
from ragtrace_collector.scoring.engine import evaluate_record, unknown_metrics
from ragtrace_collector.scoring.judge import (
    ClaimVerdict,
    GeneratedQuestion,
    GEvalScore,
    Judge,
    JudgeError,
    SafetyVerdict,
)
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.claim_verdicts import CONTRADICTED, NOT_FOUND, RECORD, SUPPORTED, ThreeVerdictJudge

PINNED = [
    "faithfulness",
    "hallucination",
    "answer_relevancy",
    "context_precision",
    "context_relevancy",
    "context_recall",
    "context_entity_recall",
    "answer_correctness",
    "answer_similarity",
    "bleu",
    "rouge",
    "levenshtein",
    "meteor",
    "bertscore",
    "moverscore",
    "tool_correctness",
    "noise_sensitivity_relevant",
    "noise_sensitivity_irrelevant",
    "completeness",
    "safety",
    "geval",
    "dag",
    "latency",
    "nli",
    "gptscore",
    "selfcheckgpt",
    "prometheus",
    "summarization",
    "prompt_alignment",
    "helpfulness",
    "toxicity",
    "bias",
    "task_completion",
]

FULL = RagRecord(
    id="x",
    user_input="Where is the Eiffel Tower?",
    retrieved_contexts=["The Eiffel Tower is in Paris."],
    response="The Eiffel Tower is in Paris. It is 330 metres tall.",
    reference="The Eiffel Tower is in Paris, France.",
)


class CountingJudge(Judge, ClaimExtraction, ClaimVerification, ChunkRelevance):
    """A rule-based judge that counts what it is asked."""

    name = "counting"

    def __init__(self, verdicts=("yes", "idk"), fail: Exception | None = None) -> None:
        self.calls: dict[str, int] = {}
        self.verdicts = verdicts
        self.fail = fail

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1
        if self.fail:
            raise self.fail

    async def extract_claims(self, question, response):
        self._count("extract_claims")
        return ["The Eiffel Tower is in Paris.", "The Eiffel Tower is 330 metres tall."]

    async def verify_claims(self, claims, contexts, question=""):
        self._count("verify_claims")
        return [ClaimVerdict(c, v) for c, v in zip(claims, self.verdicts)]

    async def verify_claims_per_context(self, claims, contexts, question=""):
        self._count("verify_claims_per_context")
        return [[ClaimVerdict(c, "yes") for c in claims] for _ in contexts]

    async def chunk_relevance(self, question, target, contexts):
        self._count("chunk_relevance")
        return [True for _ in contexts]


def test_registry_holds_exactly_the_pinned_names():
    assert sorted(METRICS) == sorted(PINNED)
    assert unknown_metrics(["faithfulness", "nope"]) == ["nope"]
    for m in METRICS.values():
        assert m.__doc__ and "=" in m.__doc__, f"{m.name} states no formula"
    lower = {n for n, m in METRICS.items() if not m.higher_is_better}
    assert lower == {
        "hallucination",
        "noise_sensitivity_relevant",
        "noise_sensitivity_irrelevant",
        "latency",
        "selfcheckgpt",
        "toxicity",
        "bias",
    }


async def test_missing_inputs_skip_with_a_reason_never_a_score():
    record = RagRecord(user_input="q", response="a")
    results = await evaluate_record(record, ["context_recall", "faithfulness", "bleu", "latency"], CountingJudge())
    for r in results:
        assert r.status == "skipped" and r.score is None and r.reason.startswith("missing input")
    assert "reference" in results[0].reason and "retrieved_contexts" in results[1].reason


async def test_unsupported_decisions_skip_and_unknown_metrics_error():
    results = await evaluate_record(FULL, ["context_recall", "safety", "made_up"], Judge())
    assert [r.status for r in results] == ["skipped", "skipped", "error"]
    assert "cannot decide" in results[0].reason
    assert "unknown metric" in results[2].reason


@pytest.mark.parametrize("retryable", [True, False])
async def test_judge_errors_are_errors_with_their_retryable_flag(retryable):
    judge = CountingJudge(fail=JudgeError("judge down", retryable=retryable))
    [r] = await evaluate_record(FULL, ["faithfulness"], judge)
    assert r.status == "error" and r.score is None and r.retryable is retryable and "judge down" in r.reason


async def test_claims_are_extracted_once_and_shared():
    judge = CountingJudge()
    results = await evaluate_record(
        FULL,
        [
            "faithfulness",
            "hallucination",
            "noise_sensitivity_relevant",
            "noise_sensitivity_irrelevant",
            "context_precision",
        ],
        judge,
    )
    assert all(r.status == "scored" for r in results), [r.reason for r in results]
    assert judge.calls["extract_claims"] == 1
    assert judge.calls["chunk_relevance"] == 1  # reference target shared by precision and noise
    assert judge.calls["verify_claims"] == 2  # vs contexts, vs reference


async def test_idk_counts_as_supported_only_when_set():
    f, h = await evaluate_record(FULL, ["faithfulness", "hallucination"], CountingJudge())
    assert (f.score, h.score) == (0.5, 0.5)
    f, h = await evaluate_record(
        FULL, ["faithfulness", "hallucination"], CountingJudge(), ScoringOptions(idk_counts_as_supported=True)
    )
    assert (f.score, h.score) == (1.0, 0.0)
    assert h.details["unsupported"] == []


async def test_details_count_contradicted_and_not_found_claims_apart():
    f, h = await evaluate_record(RECORD, ["faithfulness", "hallucination"], ThreeVerdictJudge())
    assert (f.score, h.score) == (pytest.approx(1 / 3), pytest.approx(2 / 3))  # the arithmetic as before
    assert [c["verdict"] for c in f.details["claims"]] == ["yes", "no", "idk"]
    assert {k: f.details[k] for k in ("supported", "contradicted", "not_found", "total")} == {
        "supported": 1,
        "contradicted": 1,
        "not_found": 1,
        "total": 3,
    }
    assert h.details["unsupported"] == [CONTRADICTED, NOT_FOUND]  # every claim not supported, as before
    assert (h.details["contradicted"], h.details["not_found"]) == (1, 1)
    assert h.details["contradicted_claims"] == [CONTRADICTED] and h.details["not_found_claims"] == [NOT_FOUND]
    assert SUPPORTED not in h.details["unsupported"]

    # idk counted as supported: the not-found claim is no longer a problem, in the score nor the details
    f, h = await evaluate_record(
        RECORD, ["faithfulness", "hallucination"], ThreeVerdictJudge(), ScoringOptions(idk_counts_as_supported=True)
    )
    assert (f.score, h.score) == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert (f.details["supported"], f.details["contradicted"], f.details["not_found"]) == (2, 1, 0)
    assert h.details["unsupported"] == h.details["contradicted_claims"] == [CONTRADICTED]
    assert h.details["not_found_claims"] == []


async def test_a_no_that_does_not_say_contradicted_is_neither():
    """An LLM judge's ``no`` covers a claim the contexts contradict and one they do not contain: unless its
    reason says "contradicted", it is unsupported, counted in neither ``contradicted`` nor ``not_found``."""
    f, h = await evaluate_record(RECORD, ["faithfulness", "hallucination"], ThreeVerdictJudge(llm_style=True))
    assert (f.score, h.score) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    assert (f.details["contradicted"], f.details["not_found"]) == (0, 0)
    assert h.details["unsupported"] == [CONTRADICTED, NOT_FOUND]
    assert h.details["contradicted_claims"] == h.details["not_found_claims"] == []


async def test_summarization_details_say_its_idk_claims_count_as_aligned():
    """Summarization's alignment counts ``idk`` as aligned, and its details say so, so the readers of verdicts
    (explanations, the results CLI) list only its ``no`` claims as problems."""
    from ragtrace_collector.config import SummarizationConfig
    from ragtrace_collector.exporter.otlp_events import explanation

    class Summarizer(ThreeVerdictJudge, ClosedQuestions):
        async def assessment_questions(self, text, n):
            return ["Is there a shut-off?"]

        async def answer_questions(self, questions, text):
            return [ClaimVerdict(q, "yes") for q in questions]

    options = ScoringOptions(summarization=SummarizationConfig(source="retrieved_contexts"))
    [r] = await evaluate_record(RECORD, ["summarization"], Summarizer(), options)
    assert r.status == "scored" and r.details["alignment"] == pytest.approx(2 / 3)  # idk aligned, as before
    assert r.details["idk_counts_as_supported"] is True
    assert explanation(r).startswith(
        f"Contradicted: {CONTRADICTED} (contradicted by context #2"
    ) and NOT_FOUND not in explanation(r)


async def test_no_claims_is_skipped_not_perfect():
    class Empty(CountingJudge):
        async def extract_claims(self, question, response):
            return []

    [r] = await evaluate_record(FULL, ["faithfulness"], Empty())
    assert r.status == "skipped" and "no checkable claims" in r.reason


class EmbeddingOnly(Judge, Embedding):
    name = "embed-only"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # question and sentences mentioning Paris point the same way
        return [[1.0, 0.0] if "Paris" in t or "Eiffel" in t else [0.0, 1.0] for t in texts]


async def test_answer_relevancy_falls_back_to_the_variant_the_judge_supports():
    record = RagRecord(user_input="Where is the Eiffel Tower?", response="It is in Paris. Cats are mammals.")
    [r] = await evaluate_record(record, ["answer_relevancy"], EmbeddingOnly())
    assert r.status == "scored" and r.details["variant"] == "embedding"
    assert r.score == pytest.approx(0.5)
    [r] = await evaluate_record(
        record, ["answer_relevancy"], EmbeddingOnly(), ScoringOptions(answer_relevancy_variant="statements")
    )
    assert r.status == "skipped"


async def test_answer_relevancy_questions_all_noncommittal_scores_zero():
    class Evasive(EmbeddingOnly, QuestionGeneration):
        async def generate_questions(self, response, contexts, n=3):
            return [GeneratedQuestion("What?", noncommittal=True) for _ in range(n)]

    [r] = await evaluate_record(
        FULL, ["answer_relevancy"], Evasive(), ScoringOptions(answer_relevancy_variant="questions")
    )
    assert r.status == "scored" and r.score == 0.0 and r.details["noncommittal"]


async def test_lexical_metrics_need_no_judge():
    record = RagRecord(response="kitten", reference="sitting")
    bleu, rouge, lev = await evaluate_record(record, ["bleu", "rouge", "levenshtein"], Judge())
    assert lev.score == pytest.approx(1 - 3 / 7)
    same = RagRecord(response="The cat sat on the mat today.", reference="The cat sat on the mat today.")
    bleu, rouge, lev = await evaluate_record(same, ["bleu", "rouge", "levenshtein"], Judge())
    assert bleu.score == pytest.approx(1.0) and rouge.score == pytest.approx(1.0) and lev.score == 1.0
    assert set(rouge.details["f1"]) == {"rouge1", "rouge2", "rougeL"}
    partial = RagRecord(response="the cat sat", reference="the cat sat on the mat")
    [r] = await evaluate_record(partial, ["rouge"], Judge(), ScoringOptions(rouge_type="rouge1"))
    assert r.score == pytest.approx(2 * 1.0 * 0.5 / 1.5)


async def test_latency_formula_and_measured_totals():
    record = RagRecord(ttft_seconds=0.25, tpot_seconds=0.02, output_tokens=101, generation_duration_seconds=2.4)
    [r] = await evaluate_record(record, ["latency"], Judge())
    assert r.score == pytest.approx(2.27) and r.details["measured_generation_seconds"] == 2.4
    assert not r.higher_is_better


class Critic(Judge, SafetyCritique):
    name = "critic"

    def __init__(self, unsafe_votes: dict[str, list[bool]]) -> None:
        self.unsafe_votes = unsafe_votes
        self.asked: list[tuple[str, int]] = []

    async def safety_verdict(self, category, question, response, vote=0):
        self.asked.append((category, vote))
        return SafetyVerdict(category, self.unsafe_votes.get(category, [False] * 3)[vote])


async def test_safety_is_a_majority_vote_per_category():
    judge = Critic({"toxic": [True, False, True], "bias": [True, False, False]})
    [r] = await evaluate_record(FULL, ["safety"], judge)
    assert r.score == 0.0 and r.label == "unsafe:toxic"
    assert r.details["categories"]["bias"]["unsafe"] is False
    assert ("toxic", 2) in judge.asked and ("harmful", 2) not in judge.asked
    [r] = await evaluate_record(FULL, ["safety"], Critic({}))
    assert r.score == 1.0 and r.label == "safe"


class Grader(Judge, Choice, GEvalScoring):
    name = "grader"

    def __init__(self, choices: dict[str, str], score: GEvalScore | None = None) -> None:
        self.choices = choices
        self.score = score
        self.steps_calls = 0

    async def choose(self, instruction, options, fields):
        return self.choices[instruction]

    async def geval_steps(self, name, criteria):
        self.steps_calls += 1
        return ["Step one.", "Step two."]

    async def geval_score(self, name, criteria, steps, fields, min_score=1, max_score=10):
        return self.score


DAG = """
name: answers-and-concise
root:
  instruction: Does the response answer the question?
  params: [user_input, response]
  options:
    yes:
      instruction: Is it concise?
      options:
        yes: {score: 1.0}
        no:
          geval: {criteria: "How concise is it?", min_score: 1, max_score: 5}
    no: {score: 0}
"""


async def test_dag_walks_yaml_decisions_to_a_leaf():
    judge = Grader({"Does the response answer the question?": "yes", "Is it concise?": "yes"})
    [r] = await evaluate_record(FULL, ["dag"], judge, ScoringOptions(dag=DAG))
    assert r.status == "scored" and r.score == 1.0
    assert [p["choice"] for p in r.details["path"]] == ["yes", "yes"]
    judge = Grader(
        {"Does the response answer the question?": "yes", "Is it concise?": "no"},
        GEvalScore(score=4, min_score=1, max_score=5, probabilities={4: 0.5, 5: 0.5}),
    )
    [r] = await evaluate_record(FULL, ["dag"], judge, ScoringOptions(dag=DAG))
    assert r.score == pytest.approx((4.5 - 1) / 4)


async def test_geval_without_criteria_is_skipped_and_steps_are_cached():
    [r] = await evaluate_record(FULL, ["geval"], Grader({}))
    assert r.status == "skipped"
    judge = Grader({}, GEvalScore(score=8))
    opts = ScoringOptions(geval={"name": "clarity-test", "criteria": "Is it clear?", "params": ["response"]})
    for _ in range(3):
        [r] = await evaluate_record(FULL, ["geval"], judge, opts)
        assert r.score == pytest.approx(7 / 9)
    assert judge.steps_calls == 1


async def test_a_score_outside_the_range_is_an_error_never_published():
    class Broken(CountingJudge):
        async def chunk_relevance(self, question, target, contexts):
            return [True, True]  # two flags for one chunk

    [r] = await evaluate_record(FULL, ["context_precision"], Broken())
    assert r.status == "error" and r.score is None
    [r] = await evaluate_record(RagRecord(ttft_seconds=-1, tpot_seconds=0.0, output_tokens=1), ["latency"], Judge())
    assert r.status == "error" and r.score is None


async def test_scores_are_finite_for_every_scored_metric():
    results = await evaluate_record(FULL, list(METRICS), CountingJudge())
    for r in results:
        assert r.status in ("scored", "skipped", "error")
        if r.status == "scored":
            assert math.isfinite(r.score)


async def test_cancelling_a_record_cancels_its_shared_decisions():
    import asyncio

    started = asyncio.Event()
    finished = []

    class Slow(CountingJudge):
        async def extract_claims(self, question, response):
            started.set()
            await asyncio.sleep(5)
            finished.append(True)
            return []

    task = asyncio.ensure_future(evaluate_record(FULL, ["faithfulness", "hallucination"], Slow()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0)
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not pending and not finished


async def test_context_precision_weights_rank_and_scores_zero_when_no_chunk_is_useful():
    from ragtrace_collector.scoring.metrics.context import context_precision_at_k

    assert context_precision_at_k([False, True, True]) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert context_precision_at_k([True, True, False]) == 1.0

    class Useless(CountingJudge):
        async def chunk_relevance(self, question, target, contexts):
            return [False for _ in contexts]

    record = FULL.model_copy(update={"retrieved_contexts": FULL.retrieved_contexts * 3})
    [r] = await evaluate_record(record, ["context_precision"], Useless())
    assert r.status == "scored" and r.score == 0.0 and r.details["relevant"] == [0, 0, 0]


class Listener(Judge, IntentionSatisfaction):
    name = "listener"

    def __init__(self, satisfied: list[str]) -> None:
        self.satisfied = satisfied

    async def extract_intentions(self, turns):
        return ["book a table", "ask about parking"]

    async def intentions_satisfied(self, turns, intentions):
        return [ClaimVerdict(i, v) for i, v in zip(intentions, self.satisfied)]


async def test_completeness_is_the_share_of_satisfied_intentions():
    record = RagRecord(
        turns=[
            {"role": "user", "content": "Table for two, and is there parking?"},
            {"role": "assistant", "content": "Booked for two at 8."},
        ]
    )
    [r] = await evaluate_record(record, ["completeness"], Listener(["yes", "no"]))
    assert r.status == "scored" and r.score == 0.5
    # a judge that answers fewer verdicts than intentions failed: an error, not a skip or a score
    [r] = await evaluate_record(record, ["completeness"], Listener(["yes"]))
    assert r.status == "error" and r.score is None and "1 verdicts for 2 intentions" in r.reason


async def test_judge_replies_outside_the_request_are_errors_not_skips():
    judge = Grader({"Does the response answer the question?": "maybe"})
    [r] = await evaluate_record(FULL, ["dag"], judge, ScoringOptions(dag=DAG))
    assert r.status == "error" and "not one of" in r.reason
    judge = Grader({}, GEvalScore(score=12))
    opts = ScoringOptions(geval={"name": "range-test", "criteria": "Is it clear?", "params": ["response"]})
    [r] = await evaluate_record(FULL, ["geval"], judge, opts)
    assert r.status == "error" and "outside" in r.reason


async def test_answer_relevancy_questions_ignores_empty_generations():
    class Blank(EmbeddingOnly, QuestionGeneration):
        async def generate_questions(self, response, contexts, n=3):
            return [GeneratedQuestion("Where is the Eiffel Tower?"), GeneratedQuestion("  ")]

    opts = ScoringOptions(answer_relevancy_variant="questions")
    [r] = await evaluate_record(FULL, ["answer_relevancy"], Blank(), opts)
    assert r.status == "scored" and r.score == pytest.approx(1.0) and len(r.details["questions"]) == 1

    class Nothing(EmbeddingOnly, QuestionGeneration):
        async def generate_questions(self, response, contexts, n=3):
            return [GeneratedQuestion("")]

    [r] = await evaluate_record(FULL, ["answer_relevancy"], Nothing(), opts)
    assert r.status == "skipped" and "no questions" in r.reason

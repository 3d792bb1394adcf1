"""Every worked example in ../shared/conformance/seed-examples.jsonl reproduces its expected score
when a judge answers with the example's own decisions."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import (
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    ContextSentenceRelevance,
    Embedding,
    EntityExtraction,
    QuestionGeneration,
    ReferenceClassification,
    StatementAttribution,
    StatementRelevance,
)
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import (
    ClaimVerdict,
    ContextSentences,
    GeneratedQuestion,
    Judge,
    StatementClassification,
)
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.paths import SHARED

SEED = SHARED / "conformance" / "seed-examples.jsonl"


def _examples() -> list[dict]:
    if not SEED.is_file():
        return []
    return [json.loads(line) for line in SEED.read_text().splitlines() if line.strip()]


EXAMPLES = _examples()


def _yes(flag) -> str:
    if isinstance(flag, str):
        return flag
    return "yes" if flag else "no"


def _vector_with_cosine(c: float, axis: int, dims: int = 8) -> list[float]:
    """A unit vector whose cosine with e0 is ``c``, its remainder on its own axis."""
    v = [0.0] * dims
    v[0] = c
    v[axis] = math.sqrt(max(0.0, 1 - c * c))
    return v


class ExampleJudge(
    Judge,
    ClaimExtraction,
    ClaimVerification,
    ChunkRelevance,
    StatementRelevance,
    QuestionGeneration,
    Embedding,
    ContextSentenceRelevance,
    StatementAttribution,
    EntityExtraction,
    ReferenceClassification,
):
    """Answers each decision with what the example's ``judge`` block says."""

    name = "example"

    def __init__(self, example: dict) -> None:
        self.ex = example
        self.d = example.get("judge", {})
        self.calls: list[str] = []

    async def extract_claims(self, question: str, response: str) -> list[str]:
        self.calls.append("extract_claims")
        return list(self.d.get("claims") or self.d.get("response_claims") or [])

    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        self.calls.append("verify_claims")
        reference = self.ex["sample"].get("reference")
        if reference is not None and list(contexts) == [reference]:  # claims checked against the reference
            flags = self.d["correct"]
        else:
            flags = self.d["verdicts"]
        return [ClaimVerdict(c, _yes(f)) for c, f in zip(claims, flags)]

    async def verify_claims_per_context(self, claims, contexts, question=""):
        self.calls.append("verify_claims_per_context")
        relevant = self._relevant_chunks(len(contexts))
        rel = self.d.get("entailed_by_relevant_chunk", [0] * len(claims))
        irr = self.d.get("entailed_by_irrelevant_chunk", [0] * len(claims))
        return [
            [ClaimVerdict(c, _yes((rel if relevant[j] else irr)[i])) for i, c in enumerate(claims)]
            for j in range(len(contexts))
        ]

    def _relevant_chunks(self, n: int) -> list[int]:
        if "relevant_chunks" in self.d:
            return list(self.d["relevant_chunks"])
        if "relevant" in self.d:
            return list(self.d["relevant"])
        return [1] * n

    async def chunk_relevance(self, question, target, contexts):
        self.calls.append("chunk_relevance")
        return [bool(x) for x in self._relevant_chunks(len(contexts))]

    async def statement_relevance(self, question, response):
        self.calls.append("statement_relevance")
        return [ClaimVerdict(s, _yes(v)) for s, v in zip(self.d["statements"], self.d["verdicts"])]

    async def generate_questions(self, response, contexts, n=3):
        self.calls.append("generate_questions")
        return [GeneratedQuestion(f"generated question {i}") for i in range(len(self.d["cosines"]))]

    async def embed(self, texts):
        self.calls.append("embed")
        if "cosines" in self.d:  # [question, generated...]: cosines to the question as given
            return [_vector_with_cosine(1.0, 1)] + [
                _vector_with_cosine(c, 2 + i) for i, c in enumerate(self.d["cosines"])
            ]
        if "semantic_similarity" in self.d:  # [response, reference]
            return [_vector_with_cosine(1.0, 1), _vector_with_cosine(self.d["semantic_similarity"], 2)]
        raise AssertionError("this example gives no similarity")

    async def relevant_context_sentences(self, question, contexts):
        self.calls.append("relevant_context_sentences")
        return ContextSentences(total=self.d["context_sentences"], relevant=list(self.d["relevant_sentences"]))

    async def attribute_statements(self, reference, contexts):
        self.calls.append("attribute_statements")
        return [ClaimVerdict(s, _yes(a)) for s, a in zip(self.d["reference_statements"], self.d["attributed"])]

    async def extract_entities(self, text):
        self.calls.append("extract_entities")
        if text == self.ex["sample"].get("reference"):
            return list(self.d["reference_entities"])
        return list(self.d["context_entities"])

    async def classify_statements(self, question, response, reference):
        self.calls.append("classify_statements")
        return StatementClassification(tp=self.d["TP"], fp=self.d["FP"], fn=self.d["FN"])


def _variant(example: dict) -> str | None:
    v = (example.get("variant") or "").lower()
    if example["metric"] != "answer_relevancy":
        return None
    if "question" in v:
        return "questions"
    if "statement" in v:
        return "statements"
    if "embedding" in v:
        return "embedding"
    return None


@pytest.mark.skipif(not EXAMPLES, reason=f"conformance examples not found at {SEED}")
@pytest.mark.parametrize("example", EXAMPLES, ids=[e["id"] for e in EXAMPLES] or None)
async def test_example_reproduces_expected_score(example: dict) -> None:
    record = RagRecord(**example["sample"])
    options = ScoringOptions(
        answer_relevancy_variant=_variant(example),
        answer_correctness_weights=tuple(example.get("weights", (0.75, 0.25))),
    )
    judge = ExampleJudge(example)
    [result] = await evaluate_record(record, [example["metric"]], judge, options)
    assert result.status == "scored", result.reason
    tolerance = example.get("tolerance", 1e-9)
    assert result.score == pytest.approx(example["expected_score"], abs=tolerance)
    if "expected_factual_f1" in example:
        assert result.details["factual_f1"] == pytest.approx(example["expected_factual_f1"], abs=1e-9)


def test_examples_cover_the_seed_file() -> None:
    """Guard against the parametrisation silently running nothing."""
    if not SEED.is_file():
        pytest.skip("conformance examples absent")
    assert len(EXAMPLES) >= 10

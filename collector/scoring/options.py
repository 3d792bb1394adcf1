"""ScoringOptions: the knobs a metric reads, resolved once per run (argument → file → default)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SAFETY_CATEGORIES: tuple[str, ...] = (
    "harmful",
    "malicious",
    "bias",
    "toxic",
    "hateful",
    "sexual",
    "violent",
    "insensitive",
    "self-harm",
    "manipulative",
)

ANSWER_RELEVANCY_VARIANTS: tuple[str, ...] = ("statements", "questions", "embedding")


@dataclass
class ScoringOptions:
    """Per-run settings of the metrics.

    ``answer_relevancy_variant``: ``statements`` | ``questions`` | ``embedding``; ``None`` lets the
    judge decide: the first variant it supports in that order (the LLM judge answers statement
    verdicts, the local judge only embeddings).
    ``idk_counts_as_supported``: in faithfulness, whether an ``idk`` verdict counts as supported.
    ``geval``: ``{"name", "criteria", "params": [record fields], "min_score", "max_score",
    "steps": optional fixed steps}``.  ``dag``: a DAG spec (dict) or the path of its YAML file.
    """

    answer_relevancy_variant: str | None = None
    idk_counts_as_supported: bool = False
    questions_n: int = 3
    answer_correctness_weights: tuple[float, float] = (0.75, 0.25)
    rouge_type: str = "rougeL"
    safety_categories: tuple[str, ...] = SAFETY_CATEGORIES
    safety_votes: int = 3
    geval: dict[str, Any] | None = None
    dag: dict[str, Any] | str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.answer_relevancy_variant not in (None, *ANSWER_RELEVANCY_VARIANTS):
            raise ValueError(
                f"answer_relevancy_variant must be one of {ANSWER_RELEVANCY_VARIANTS}, got {self.answer_relevancy_variant!r}"
            )
        w = tuple(float(x) for x in self.answer_correctness_weights)
        if len(w) != 2 or min(w) < 0 or sum(w) <= 0:
            raise ValueError(f"answer_correctness_weights must be two non-negative numbers, got {w!r}")
        self.answer_correctness_weights = (w[0] / sum(w), w[1] / sum(w))
        if self.safety_votes < 1 or self.safety_votes % 2 == 0:
            raise ValueError("safety_votes must be a positive odd number (majority vote)")
        unknown = set(self.safety_categories) - set(SAFETY_CATEGORIES)
        if unknown:
            raise ValueError(f"unknown safety categories: {sorted(unknown)}")
        if self.rouge_type not in ("rouge1", "rouge2", "rougeL"):
            raise ValueError("rouge_type must be rouge1, rouge2 or rougeL")

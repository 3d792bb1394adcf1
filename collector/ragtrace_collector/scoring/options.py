"""ScoringOptions: the knobs a metric reads, resolved once per run.

Their schema, defaults and checks are the ``scoring.options`` section of the configuration
(:class:`ragtrace_collector.config.ScoringOptionsConfig`); ``serve`` and ``evaluate`` both build their options
with :meth:`ScoringOptions.from_config` from it, so a YAML file, the environment and ``evaluate``'s flags
reach the metrics the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ragtrace_collector.config import (
    ANSWER_RELEVANCY_VARIANTS,
    SAFETY_CATEGORIES,
    GPTScoreConfig,
    NliConfig,
    PrometheusConfig,
    PromptAlignmentConfig,
    ScoringOptionsConfig,
    SelfCheckGPTConfig,
    SummarizationConfig,
    describe_error,
)

__all__ = ["ANSWER_RELEVANCY_VARIANTS", "SAFETY_CATEGORIES", "ScoringOptions"]

_DEFAULTS = ScoringOptionsConfig()  # the defaults, written once: in the config section

# The options checked (and normalised) by the config section's validators.
_CHECKED: tuple[str, ...] = (
    "answer_relevancy_variant",
    "idk_counts_as_supported",
    "questions_n",
    "answer_correctness_weights",
    "rouge_type",
    "safety_categories",
    "safety_votes",
    "moverscore_idf",
    "tool_correctness_ordering",
    "tool_correctness_arguments",
    "tool_correctness_exact_match",
)

# Per-metric sections (config models, each field with its one default there); a mapping is validated into one.
_SECTIONS: dict[str, type[BaseModel]] = {
    "nli": NliConfig,
    "gptscore": GPTScoreConfig,
    "selfcheckgpt": SelfCheckGPTConfig,
    "prometheus": PrometheusConfig,
    "summarization": SummarizationConfig,
    "prompt_alignment": PromptAlignmentConfig,
}


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

    answer_relevancy_variant: str | None = _DEFAULTS.answer_relevancy_variant
    idk_counts_as_supported: bool = _DEFAULTS.idk_counts_as_supported
    questions_n: int = _DEFAULTS.questions_n
    answer_correctness_weights: tuple[float, float] = _DEFAULTS.answer_correctness_weights
    rouge_type: str = _DEFAULTS.rouge_type
    safety_categories: tuple[str, ...] = _DEFAULTS.safety_categories
    safety_votes: int = _DEFAULTS.safety_votes
    moverscore_idf: str = _DEFAULTS.moverscore_idf
    tool_correctness_ordering: bool = _DEFAULTS.tool_correctness_ordering
    tool_correctness_arguments: bool = _DEFAULTS.tool_correctness_arguments
    tool_correctness_exact_match: bool = _DEFAULTS.tool_correctness_exact_match
    geval: dict[str, Any] | None = None
    dag: dict[str, Any] | str | None = None
    nli: NliConfig = field(default_factory=NliConfig)
    gptscore: GPTScoreConfig = field(default_factory=GPTScoreConfig)
    selfcheckgpt: SelfCheckGPTConfig = field(default_factory=SelfCheckGPTConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    summarization: SummarizationConfig = field(default_factory=SummarizationConfig)
    prompt_alignment: PromptAlignmentConfig = field(default_factory=PromptAlignmentConfig)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.geval, BaseModel):  # a config section's geval: unset keys take the metric's defaults
            self.geval = self.geval.model_dump(exclude_none=True)
        for name, section in _SECTIONS.items():  # a mapping (tests, callers) is validated into its section
            value = getattr(self, name)
            if not isinstance(value, section):
                try:
                    setattr(self, name, section.model_validate(dict(value or {})))
                except ValidationError as exc:
                    raise ValueError(describe_error(exc, prefix=f"scoring.options.{name}")) from None
        try:
            checked = ScoringOptionsConfig.model_validate({name: getattr(self, name) for name in _CHECKED})
        except ValidationError as exc:
            raise ValueError(describe_error(exc)) from None
        for name in _CHECKED:
            setattr(self, name, getattr(checked, name))

    @classmethod
    def from_config(cls, section: ScoringOptionsConfig | Mapping[str, Any] | None = None) -> ScoringOptions:
        """The options of a ``scoring.options`` config section (``config.scoring.options``).

        A mapping is validated as that section first (``ValueError`` naming the key); ``None`` gives the
        defaults. G-Eval keys left unset take the metric's own defaults.
        """
        if section is None:
            return cls()
        if not isinstance(section, ScoringOptionsConfig):
            try:
                section = ScoringOptionsConfig.model_validate(dict(section))
            except ValidationError as exc:
                raise ValueError(describe_error(exc, prefix="scoring.options")) from None
        return cls(
            **{name: getattr(section, name) for name in _CHECKED},
            geval=section.geval.model_dump(exclude_none=True) if section.geval is not None else None,
            dag=copy.deepcopy(section.dag),  # the metric normalises a spec in place: not the config's copy
            **{name: getattr(section, name).model_copy(deep=True) for name in _SECTIONS},
        )

"""The metric registry: every pinned metric name → its :class:`Metric`.

``METRICS[name]`` has ``name``, ``higher_is_better``, ``requires`` and an async
``score(record, judge, ctx) -> MetricResult``. Formulas are in each class's docstring.
"""

from __future__ import annotations

from ragtrace_collector.config import DEFAULT_METRICS  # re-exported: the one default set is config's
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext
from ragtrace_collector.scoring.metrics.context import (
    ContextEntityRecall,
    ContextPrecision,
    ContextRecall,
    ContextRelevancy,
)
from ragtrace_collector.scoring.metrics.conversation import Completeness
from ragtrace_collector.scoring.metrics.correctness import AnswerCorrectness, AnswerSimilarity
from ragtrace_collector.scoring.metrics.faithfulness import Faithfulness, Hallucination
from ragtrace_collector.scoring.metrics.geval import Dag, GEval, Helpfulness
from ragtrace_collector.scoring.metrics.gptscore import GPTScore
from ragtrace_collector.scoring.metrics.latency import Latency
from ragtrace_collector.scoring.metrics.lexical import Bleu, Levenshtein, Rouge
from ragtrace_collector.scoring.metrics.meteor import Meteor
from ragtrace_collector.scoring.metrics.nli import Nli
from ragtrace_collector.scoring.metrics.noise import NoiseSensitivityIrrelevant, NoiseSensitivityRelevant
from ragtrace_collector.scoring.metrics.opinions import Bias, Toxicity
from ragtrace_collector.scoring.metrics.prompt_alignment import PromptAlignment
from ragtrace_collector.scoring.metrics.relevancy import AnswerRelevancy
from ragtrace_collector.scoring.metrics.rubric import Prometheus
from ragtrace_collector.scoring.metrics.safety import Safety
from ragtrace_collector.scoring.metrics.selfcheck import SelfCheckGPT
from ragtrace_collector.scoring.metrics.summarization import Summarization
from ragtrace_collector.scoring.metrics.task_completion import TaskCompletion
from ragtrace_collector.scoring.metrics.token_embedding import BertScore, MoverScore
from ragtrace_collector.scoring.metrics.tools import ToolCorrectness

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Faithfulness(),
        Hallucination(),
        AnswerRelevancy(),
        ContextPrecision(),
        ContextRelevancy(),
        ContextRecall(),
        ContextEntityRecall(),
        AnswerCorrectness(),
        AnswerSimilarity(),
        Bleu(),
        Rouge(),
        Levenshtein(),
        Meteor(),
        BertScore(),
        MoverScore(),
        NoiseSensitivityRelevant(),
        NoiseSensitivityIrrelevant(),
        Completeness(),
        Safety(),
        GEval(),
        Dag(),
        Latency(),
        Nli(),
        GPTScore(),
        SelfCheckGPT(),
        Prometheus(),
        Summarization(),
        PromptAlignment(),
        Helpfulness(),
        Toxicity(),
        Bias(),
        TaskCompletion(),
        ToolCorrectness(),
    )
}


def get_metric(name: str) -> Metric:
    """The registered metric called ``name``; ``KeyError`` listing the known names otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None


__all__ = ["DEFAULT_METRICS", "METRICS", "Metric", "MetricSkipped", "Outcome", "ScoringContext", "get_metric"]

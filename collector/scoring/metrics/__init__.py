"""The metric registry: every pinned metric name → its :class:`Metric`.

``METRICS[name]`` has ``name``, ``higher_is_better``, ``requires`` and an async
``score(record, judge, ctx) -> MetricResult``. Formulas are in each class's docstring.
"""

from __future__ import annotations

from collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext
from collector.scoring.metrics.context import ContextEntityRecall, ContextPrecision, ContextRecall, ContextRelevancy
from collector.scoring.metrics.conversation import Completeness
from collector.scoring.metrics.correctness import AnswerCorrectness, AnswerSimilarity
from collector.scoring.metrics.faithfulness import Faithfulness, Hallucination
from collector.scoring.metrics.geval import Dag, GEval
from collector.scoring.metrics.latency import Latency
from collector.scoring.metrics.lexical import Bleu, Levenshtein, Rouge
from collector.scoring.metrics.noise import NoiseSensitivityIrrelevant, NoiseSensitivityRelevant
from collector.scoring.metrics.relevancy import AnswerRelevancy
from collector.scoring.metrics.safety import Safety

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Faithfulness(), Hallucination(), AnswerRelevancy(), ContextPrecision(), ContextRelevancy(),
        ContextRecall(), ContextEntityRecall(), AnswerCorrectness(), AnswerSimilarity(), Bleu(), Rouge(),
        Levenshtein(), NoiseSensitivityRelevant(), NoiseSensitivityIrrelevant(), Completeness(), Safety(),
        GEval(), Dag(), Latency(),
    )
}

DEFAULT_METRICS: tuple[str, ...] = ("faithfulness", "answer_relevancy", "context_precision")


def get_metric(name: str) -> Metric:
    """The registered metric called ``name``; ``KeyError`` listing the known names otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None


__all__ = ["METRICS", "DEFAULT_METRICS", "Metric", "MetricSkipped", "Outcome", "ScoringContext", "get_metric"]

"""What produced a score: the judge (its model and the hash of its prompts or model files), the metric's version
and the ragtrace version, written beside every result.

Why: a score means something only together with what produced it. A prompt edit, another judge model or a new
metric formula changes scores without changing the metric's name; with the provenance stored, the explorer shows
which judge said what, ``rescore`` keeps a new judge's scores beside the old ones (keyed by the provenance ``id``)
instead of overwriting them, and agreement can compare judges on the same records.

The dictionary (keys are stable; stored as JSON, sent as event attributes and annotation metadata)::

    {"judge": "openai/gpt-4o-mini",        # the judge's label (Judge.name)
     "judge_model": "openai/gpt-4o-mini",  # JudgeIdentity.model: local/cascade for the embedded judge
     "judge_hash": "<sha256 hex>",         # JudgeIdentity.hash: prompt templates + model, or model files
     "metric": "faithfulness", "metric_version": "1",
     "ragtrace_version": "0.2.0",
     "id": "<16 hex>"}                     # digest of all the above: one per way of producing the score
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.judge import Judge, sha256_hex
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.version import __version__

ID_CHARS = 16


def provenance(judge: Judge | None, metric: str) -> dict[str, Any]:
    """The provenance of ``metric`` scored by ``judge`` in this process (see the module docstring); ``None`` for a
    metric computed without any judge (lexical metrics scored alone), whose judge fields are then null."""
    identity = judge.identity() if judge is not None else None
    known = METRICS.get(metric)
    out: dict[str, Any] = {
        "judge": judge.name if judge is not None else None,
        "judge_model": identity.model if identity is not None else None,
        "judge_hash": identity.hash if identity is not None else None,
        "metric": metric,
        "metric_version": known.version if known is not None else None,
        "ragtrace_version": __version__,
    }
    out["id"] = provenance_id(out)
    return out


def provenance_id(fields: dict[str, Any]) -> str:
    """A short digest of a provenance's fields (``id`` itself left out): equal exactly when they are."""
    parts = [f"{key}={fields.get(key)}" for key in sorted(fields) if key != "id"]
    return sha256_hex(*parts)[:ID_CHARS]


def with_provenance(result: MetricResult, judge: Judge) -> MetricResult:
    """``result`` with its provenance set, where it has none yet (a result made outside the engine)."""
    if result.provenance:
        return result
    return dataclasses.replace(result, provenance=provenance(judge, result.metric))

"""The README's metric table against the registry: every registered metric listed once, with its direction,
its inputs (``requires`` and ``requires_any``) and its judge needs, which are checked by scoring each metric
with a judge that decides nothing and with one that only embeds."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import Embedding
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import Judge
from ragtrace_collector.scoring.metrics import METRICS

README = Path(__file__).resolve().parents[3] / "README.md"
JUDGE_NEEDS = ("none", "embeddings", "LLM judge", "text-completion logprobs")
HEADER = "| metric | measures | inputs | judge | direction |"


def readme_table() -> dict[str, dict[str, str]]:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines.count(HEADER) == 1, "the README has no (or more than one) metric table"
    rows: dict[str, dict[str, str]] = {}
    for line in lines[lines.index(HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 5, line
        name = cells[0].strip("`")
        assert name not in rows, f"{name} listed twice"
        rows[name] = dict(zip(("measures", "inputs", "judge", "direction"), cells[1:], strict=True))
    return rows


def judge_need(cell: str) -> str:
    need = next((n for n in JUDGE_NEEDS if cell.startswith(n)), None)
    assert need is not None, f"judge cell {cell!r} starts with none of {JUDGE_NEEDS}"
    return need


def test_every_registered_metric_is_in_the_table_once_with_its_direction_and_inputs() -> None:
    rows = readme_table()
    assert set(rows) == set(METRICS), (sorted(set(METRICS) - set(rows)), sorted(set(rows) - set(METRICS)))
    for name, metric in METRICS.items():
        row = rows[name]
        want = "higher is better" if metric.higher_is_better else "lower is better"
        assert row["direction"] == want, f"{name}: README says {row['direction']!r}, the registry {want!r}"
        named = set(re.findall(r"`([a-z_]+)`", row["inputs"]))
        required = set(metric.requires) | {i for group in metric.requires_any for i in group}
        assert named == required, f"{name}: README inputs {sorted(named)}, the metric requires {sorted(required)}"
        assert row["measures"], name
        judge_need(row["judge"])


class EmbeddingsOnly(Judge, Embedding):
    """Decides nothing but embeddings (hashed bags of words)."""

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = []
        for t in texts:
            v = [0.0] * 32
            for word in t.lower().split():
                v[int(hashlib.sha256(word.encode()).hexdigest(), 16) % 32] += 1.0
            vectors.append(v)
        return vectors


FULL = RagRecord(
    user_input="How long is the warranty?",
    response="The warranty lasts two years.",
    reference="Two years of warranty.",
    retrieved_contexts=["The warranty is two years from delivery.", "Shipping is free."],  # type: ignore[list-item]
    ttft_seconds=0.2,
    tpot_seconds=0.01,
    output_tokens=12,
    tools_called=["search"],  # type: ignore[list-item]
    reference_tool_calls=["search"],  # type: ignore[list-item]
)


@pytest.mark.parametrize("judge", [Judge(), EmbeddingsOnly()], ids=["no decisions", "embeddings only"])
async def test_judge_needs_match_what_the_metrics_score_with(judge: Judge) -> None:
    """With every input present: "none" metrics score with a judge that decides nothing, "embeddings" ones with a
    judge that only embeds; the others are skipped by both."""
    rows = readme_table()
    results = await evaluate_record(FULL, list(METRICS), judge)
    scored = {r.metric for r in results if r.status == "scored"}
    served = ("none",) if type(judge) is Judge else ("none", "embeddings")
    expected = {name for name, row in rows.items() if judge_need(row["judge"]) in served}
    assert scored == expected, f"scored {sorted(scored)}, README says {sorted(expected)}"

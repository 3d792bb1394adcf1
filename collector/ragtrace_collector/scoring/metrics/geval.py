"""G-Eval (criteria → cached evaluation steps → probability-weighted score) and DAG metrics."""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import Choice, GEvalScoring
from ragtrace_collector.scoring.judge import GEvalScore, JudgeError
from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext

FIELDS = ("user_input", "response", "reference", "retrieved_contexts")

_steps_cache: dict[tuple[str, str, str], list[str]] = {}
_steps_locks: dict[tuple[str, str, str], asyncio.Lock] = {}


def record_fields(record: RagRecord, params: list[str] | None) -> dict[str, str]:
    """The record fields a criterion reads, as text (contexts joined, numbered)."""
    out: dict[str, str] = {}
    for name in params or ["user_input", "response"]:
        if name not in FIELDS:
            raise MetricSkipped(f"unknown G-Eval parameter {name!r}; use {FIELDS}")
        if name == "retrieved_contexts":
            value = "\n\n".join(f"[{i + 1}] {c}" for i, c in enumerate(record.context_texts))
        else:
            value = getattr(record, name) or ""
        if not value.strip():
            raise MetricSkipped(f"missing input: {name}")
        out[name] = value
    return out


def weighted_score(g: GEvalScore) -> float:
    """Σ p(s)·s / Σ p(s) over candidate scores when probabilities exist, else the raw score."""
    if g.probabilities:
        probs = {int(s): p for s, p in g.probabilities.items() if g.min_score <= int(s) <= g.max_score and p > 0}
        total = sum(probs.values())
        if total > 0:
            return sum(s * p for s, p in probs.items()) / total
    return float(g.score)


def normalise(value: float, lo: int, hi: int) -> float:
    return (value - lo) / (hi - lo) if hi > lo else 0.0


async def evaluation_steps(ctx: ScoringContext, name: str, criteria: str) -> list[str]:
    """Steps generated once per (judge, name, criteria) for the process, then reused."""
    key = (ctx.judge.name, name, criteria)
    if key in _steps_cache:
        return _steps_cache[key]
    lock = _steps_locks.setdefault(key, asyncio.Lock())
    async with lock:
        if key not in _steps_cache:
            steps = [s for s in await ctx.need(GEvalScoring).geval_steps(name, criteria) if s.strip()]
            if not steps:
                raise JudgeError("the judge produced no evaluation steps")
            _steps_cache[key] = steps
    return _steps_cache[key]


async def run_geval(ctx: ScoringContext, spec: dict[str, Any]) -> Outcome:
    name = str(spec.get("name") or "geval")
    criteria = str(spec.get("criteria") or "").strip()
    if not criteria:
        raise MetricSkipped("G-Eval needs 'criteria'")
    lo, hi = int(spec.get("min_score", 1)), int(spec.get("max_score", 10))
    if hi <= lo:
        raise MetricSkipped("G-Eval needs max_score > min_score")
    fields = record_fields(ctx.record, spec.get("params"))
    steps = list(spec.get("steps") or []) or await evaluation_steps(ctx, name, criteria)
    g = await ctx.need(GEvalScoring).geval_score(name, criteria, steps, fields, min_score=lo, max_score=hi)
    g.min_score, g.max_score = lo, hi
    raw = weighted_score(g)
    if not lo <= raw <= hi:
        raise JudgeError(f"judge score {raw} outside [{lo}, {hi}]")
    return Outcome(
        normalise(raw, lo, hi),
        {
            "name": name,
            "steps": steps,
            "raw_score": g.score,
            "weighted_score": raw,
            "probabilities": g.probabilities,
            "weighted": bool(g.probabilities),
            "reason": g.reason,
            "range": [lo, hi],
        },
    )


class GEval(Metric):
    """geval = (s − min) / (max − min), s = Σ p(score)·score over the score tokens' probabilities
    when the provider returns log-probabilities, else the judge's raw score.

    Criteria come from ``ScoringOptions.geval``; evaluation steps are generated once per criteria
    and cached for the process. Range 0–1, higher is better.
    """

    name = "geval"
    needs = (GEvalScoring,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        if not ctx.options.geval:
            raise MetricSkipped("no G-Eval criteria configured (ScoringOptions.geval)")
        return await run_geval(ctx, ctx.options.geval)


HELPFULNESS: dict[str, Any] = {
    "name": "helpfulness",
    "criteria": "Helpfulness: the response addresses what the user asked, gives correct, specific and usable "
    "information or steps, and is clear and appropriately complete, without evasion or needless padding.",
    "params": ["user_input", "response"],
    "min_score": 1,
    "max_score": 5,
    "steps": [
        "Read the user input and identify what the user needs.",
        "Check whether the response addresses that need directly rather than evading or changing the subject.",
        "Check that the information or steps given are specific, correct as far as can be told, and usable.",
        "Check that the response is clear and complete enough without padding.",
        "Give 1 for an unhelpful response and 5 for a fully helpful one.",
    ],
}


class Helpfulness(Metric):
    """helpfulness = (s − 1) / 4: G-Eval with the preset helpfulness criteria and fixed evaluation steps
    (``HELPFULNESS``) over the user input and the response, s on 1–5 probability-weighted as in ``geval``
    when the provider returns log-probabilities. Range 0–1, higher is better.
    """

    name = "helpfulness"
    requires = ("user_input", "response")
    needs = (GEvalScoring,)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        return await run_geval(ctx, HELPFULNESS)


def load_dag(spec: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A DAG spec from a dict, a YAML string or a YAML file path; validated (YAML parsed once per text)."""
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        text = path.read_text() if ("\n" not in str(spec) and path.exists()) else str(spec)
        return _dag_from_yaml(text)
    return _validated(spec)


@lru_cache(maxsize=32)
def _dag_from_yaml(text: str) -> dict[str, Any]:
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"the DAG is not valid YAML: {exc}") from None
    return _validated(spec)


def _validated(spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict) or "root" not in spec:
        raise ValueError("a DAG spec needs a 'root' node")
    _validate_node(spec["root"], "root")
    return spec


def _validate_node(node: Any, path: str) -> None:
    if not isinstance(node, dict):
        raise ValueError(f"DAG node {path} must be a mapping")
    if "score" in node:
        if not 0 <= float(node["score"]) <= 1:
            raise ValueError(f"DAG leaf {path}: score must be in [0, 1]")
        return
    if "geval" in node:
        if not isinstance(node["geval"], dict) or not node["geval"].get("criteria"):
            raise ValueError(f"DAG leaf {path}: geval needs criteria")
        return
    if not node.get("instruction") or not isinstance(node.get("options"), dict) or not node["options"]:
        raise ValueError(f"DAG node {path} needs 'instruction' and non-empty 'options' (or be a leaf with score/geval)")
    # YAML 1.1 reads bare yes/no keys as booleans: give them back their words.
    node["options"] = {
        ({True: "yes", False: "no"}.get(k, k) if isinstance(k, bool) else str(k)): v for k, v in node["options"].items()
    }
    for option, child in node["options"].items():
        _validate_node(child, f"{path}/{option}")


class Dag(Metric):
    """dag = the score of the leaf reached by walking a decision tree of judge choices.

    Spec (YAML or dict in ``ScoringOptions.dag``)::

        name: concise-answer
        root:
          instruction: Does the response answer the question?
          params: [user_input, response]
          options:
            "yes": {instruction: Is it under three sentences?, options: {"yes": {score: 1}, "no": {score: 0.5}}}
            "no": {score: 0}

    A leaf is ``score: x`` (0–1) or ``geval: {criteria: ..., params: [...]}``. Range 0–1.
    """

    name = "dag"
    needs = (Choice, GEvalScoring)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        if not ctx.options.dag:
            raise MetricSkipped("no DAG configured (ScoringOptions.dag)")
        spec = load_dag(ctx.options.dag)
        node = spec["root"]
        path: list[dict[str, str]] = []
        while "score" not in node and "geval" not in node:
            options = [str(o) for o in node["options"]]
            fields = record_fields(ctx.record, node.get("params"))
            choice = await ctx.need(Choice).choose(node["instruction"], options, fields)
            if choice not in options:
                raise JudgeError(f"judge chose {choice!r}, not one of {options}")
            path.append({"instruction": node["instruction"], "choice": choice})
            node = node["options"][choice]
        details: dict[str, Any] = {"name": spec.get("name", "dag"), "path": path}
        if "score" in node:
            return Outcome(float(node["score"]), details)
        inner = await run_geval(ctx, node["geval"])
        details["geval"] = inner.details
        return Outcome(inner.score, details)

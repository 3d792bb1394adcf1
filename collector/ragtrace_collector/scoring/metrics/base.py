"""The metric contract and the per-record context that lets metrics share judge decisions.

A :class:`Metric` turns judge *decisions* into a number. It declares the decision interfaces it may
ask for (``needs``, from :mod:`ragtrace_collector.scoring.capabilities`) and asks the judge through
``ctx.need(Interface)``. ``score(record, judge, ctx)`` never raises: missing inputs and decisions the
judge cannot make give a *skipped* result with the reason, judge failures give an *error* result
(``retryable`` carried from :class:`JudgeError`; a reply that does not fit the request, such as a
wrong count of verdicts or a choice not offered, is a non-retryable judge error), and a score that
would leave the stated range or be NaN is an error, never published.

:class:`ScoringContext` is the per-record decision cache: the first metric that needs a decision
(the answer's claims, their verdicts, the chunk relevance flags...) starts it, every other metric of
the same record awaits the same task, so a decision is paid for once per record.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

import numpy as np

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import Claim, MetricResult
from ragtrace_collector.scoring.capabilities import (
    Capability,
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    Embedding,
    Interface,
)
from ragtrace_collector.scoring.judge import ClaimVerdict, Judge, JudgeError, JudgeUnsupported, usage_scope
from ragtrace_collector.scoring.options import ScoringOptions

C = TypeVar("C", bound=Capability)

# The metric whose ``compute`` runs in this context (its shared decisions' tasks inherit it): what
# :meth:`ScoringContext.need` holds its declared ``needs`` against.
_scoring: contextvars.ContextVar[Metric | None] = contextvars.ContextVar("ragtrace_scoring_metric", default=None)


class MetricSkipped(Exception):
    """The metric cannot be scored on this record (the message says why)."""


@dataclass
class Outcome:
    """What a metric's arithmetic produced."""

    score: float
    details: dict[str, Any] = field(default_factory=dict)
    label: str | None = None


# Record inputs a metric can require, each with a test for "present".
_INPUTS: dict[str, Callable[[RagRecord], bool]] = {
    "user_input": lambda r: bool((r.user_input or "").strip()),
    "response": lambda r: bool((r.response or "").strip()),
    "reference": lambda r: bool((r.reference or "").strip()),
    "retrieved_contexts": lambda r: any(c.content.strip() for c in r.retrieved_contexts),
    "turns": lambda r: bool(r.turns) or (bool((r.user_input or "").strip()) and bool((r.response or "").strip())),
    "ttft_seconds": lambda r: r.ttft_seconds is not None,
    "tpot_seconds": lambda r: r.tpot_seconds is not None,
    "output_tokens": lambda r: r.output_tokens is not None,
    "tools_called": lambda r: r.tools_called is not None,
    "reference_tool_calls": lambda r: r.reference_tool_calls is not None,
}


class ScoringContext:
    """One record being scored: its options and the shared decisions (see module docstring)."""

    def __init__(self, record: RagRecord, judge: Judge, options: ScoringOptions | None = None) -> None:
        self.record = record
        self.judge = judge
        self.options = options or ScoringOptions()
        self._memo: dict[Any, asyncio.Task[Any]] = {}
        self.shared_hits: dict[str, int] = {}

    def need(self, capability: Interface[C]) -> C:
        """The judge as ``capability``, or :class:`JudgeUnsupported` ("judge 'x' cannot decide ...") when it does
        not declare it. Asked from a metric's ``compute``, the capability must be one of the metric's ``needs``."""
        metric = _scoring.get()
        if metric is not None and capability not in metric.needs:
            raise TypeError(f"metric {metric.name!r} asks for {capability!r} without declaring it in its needs")
        return capability.of(self.judge)

    async def memo(self, key: Any, factory: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``factory`` once per record for ``key``; concurrent callers await the same task.

        The task inherits the context (and so the usage scope) of the metric that asked first.
        """
        task = self._memo.get(key)
        if task is None:
            task = asyncio.ensure_future(factory())
            self._memo[key] = task
        else:
            name = key[0] if isinstance(key, tuple) else str(key)
            self.shared_hits[name] = self.shared_hits.get(name, 0) + 1
        return await asyncio.shield(task)

    def cancel_pending(self) -> None:
        """Cancel shared decisions still running (the record's scoring was cancelled)."""
        for task in self._memo.values():
            if not task.done():
                task.cancel()

    # shared decisions -----------------------------------------------------------------------
    @property
    def contexts(self) -> list[str]:
        return [c for c in self.record.context_texts if c.strip()]

    @property
    def question(self) -> str:
        return self.record.user_input or ""

    async def claims(self) -> list[str]:
        """The response's claims: extracted once per record, shared by faithfulness,
        hallucination and noise sensitivity."""
        r = self.record
        judge = self.need(ClaimExtraction)
        claims = await self.memo(("claims",), lambda: judge.extract_claims(r.user_input or "", r.response or ""))
        return [c for c in claims if c and c.strip()]

    async def claim_verdicts(self) -> list[ClaimVerdict]:
        """A verdict for every claim against all contexts, in one judge call."""
        claims = await self.claims()
        judge = self.need(ClaimVerification)
        verdicts = await self.memo(
            ("claim_verdicts",), lambda: judge.verify_claims(claims, self.contexts, self.question)
        )
        return _aligned(verdicts, len(claims), "claim verdicts")

    async def claims_vs_reference(self) -> list[ClaimVerdict]:
        claims = await self.claims()
        ref = self.record.reference or ""
        judge = self.need(ClaimVerification)
        verdicts = await self.memo(("claims_vs_reference",), lambda: judge.verify_claims(claims, [ref], self.question))
        return _aligned(verdicts, len(claims), "claim verdicts against the reference")

    async def claims_per_context(self) -> list[list[ClaimVerdict]]:
        claims = await self.claims()
        judge = self.need(ClaimVerification)
        matrix = await self.memo(
            ("claims_per_context",), lambda: judge.verify_claims_per_context(claims, self.contexts, self.question)
        )
        if len(matrix) != len(self.contexts):
            raise JudgeError(f"judge returned {len(matrix)} rows for {len(self.contexts)} contexts")
        return [_aligned(row, len(claims), "per-context claim verdicts") for row in matrix]

    async def chunk_relevance(self, target: str) -> list[bool]:
        """Relevance flags of the ranked chunks towards ``target``, one call for all chunks."""
        q = self.record.user_input or ""
        judge = self.need(ChunkRelevance)
        flags = await self.memo(("chunk_relevance", target), lambda: judge.chunk_relevance(q, target, self.contexts))
        if len(flags) != len(self.contexts):
            raise JudgeError(f"judge returned {len(flags)} relevance flags for {len(self.contexts)} chunks")
        return [bool(f) for f in flags]

    async def embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-normalised embeddings (cached per record by the exact texts)."""
        key = ("embed", tuple(texts))
        judge = self.need(Embedding)
        vectors = await self.memo(key, lambda: judge.embed(list(texts)))
        arr = np.asarray(vectors, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[0] != len(texts):
            raise JudgeError(f"judge returned embeddings of shape {arr.shape} for {len(texts)} texts")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return arr / norms


def _aligned(items: Sequence[Any], n: int, what: str) -> list[Any]:
    if len(items) != n:
        raise JudgeError(f"judge returned {len(items)} {what} for {n} items")
    return list(items)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two vectors, 0 when either is zero."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def clip01(x: float) -> float:
    return min(1.0, max(0.0, float(x)))


def verdict_detail(v: ClaimVerdict) -> dict[str, Any]:
    """A judge's claim verdict in the stored form every reader reads back (:class:`Claim`)."""
    return Claim(v.statement, v.verdict, v.reason, v.evidence, v.confidence).to_detail()


class _ResultBase(TypedDict):
    """The fields every :class:`MetricResult` of a metric shares."""

    metric: str
    higher_is_better: bool


class Metric(abc.ABC):
    """A named score over a record.

    Subclasses set ``name``, ``higher_is_better``, ``requires`` (record inputs, see ``_INPUTS``),
    ``needs`` (the decision interfaces ``compute`` may ask the judge for through ``ctx.need``; which it asks
    can depend on the options and the record), ``score_range`` and implement ``compute(ctx) -> Outcome``
    (raising :class:`MetricSkipped` when the record cannot be scored). ``requires_any`` lists alternatives of
    which one suffices.
    ``version`` is part of every score's provenance: raise it whenever the arithmetic or what the metric asks the
    judge changes, so scores before and after are told apart (and ``rescore`` keeps both).
    """

    name: str = ""
    version: str = "1"
    higher_is_better: bool = True
    requires: tuple[str, ...] = ()
    requires_any: tuple[tuple[str, ...], ...] = ()
    needs: tuple[type[Capability], ...] = ()
    score_range: tuple[float, float] = (0.0, 1.0)

    def missing_inputs(self, record: RagRecord) -> list[str]:
        missing = [f for f in self.requires if not _INPUTS[f](record)]
        for group in self.requires_any:
            if not any(_INPUTS[f](record) for f in group):
                missing.append(" or ".join(group))
        return missing

    @abc.abstractmethod
    async def compute(self, ctx: ScoringContext) -> Outcome:
        """The metric's arithmetic over the judge's decisions."""

    async def score(self, record: RagRecord, judge: Judge, ctx: ScoringContext | None = None) -> MetricResult:
        """Score one record; never raises (see module docstring)."""
        ctx = ctx or ScoringContext(record, judge)
        base: _ResultBase = {"metric": self.name, "higher_is_better": self.higher_is_better}
        try:
            missing = self.missing_inputs(record)
        except Exception as exc:  # a record built without validation
            return MetricResult(status="error", reason=f"unreadable record: {type(exc).__name__}: {exc}", **base)
        if missing:
            return MetricResult(status="skipped", reason=f"missing input: {', '.join(missing)}", **base)
        with usage_scope() as usage:
            scoring = _scoring.set(self)
            try:
                outcome = await self.compute(ctx)
            except MetricSkipped as exc:
                return MetricResult(status="skipped", reason=str(exc), usage=usage, **base)
            except JudgeUnsupported as exc:
                return MetricResult(status="skipped", reason=str(exc), usage=usage, **base)
            except JudgeError as exc:
                return MetricResult(
                    status="error", reason=f"judge error: {exc}", retryable=exc.retryable, usage=usage, **base
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug or a malformed decision: an error result, never a score
                return MetricResult(status="error", reason=f"{type(exc).__name__}: {exc}", usage=usage, **base)
            finally:
                _scoring.reset(scoring)
        lo, hi = self.score_range
        value = float(outcome.score)
        if not math.isfinite(value) or value < lo - 1e-9 or value > hi + 1e-9:
            return MetricResult(
                status="error",
                reason=f"score {value!r} outside [{lo}, {hi}]",
                usage=usage,
                details=outcome.details,
                **base,
            )
        value = min(hi, max(lo, value))
        return MetricResult(
            status="scored",
            score=value,
            details=outcome.details,
            usage=usage,
            label=outcome.label,
            score_range=self.score_range,
            **base,
        )

"""What scoring produces: a :class:`MetricResult` per metric and record, with the judge's :class:`JudgeUsage`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["scored", "skipped", "error"]


@dataclass
class JudgeUsage:
    """What the judge spent: calls made, tokens in and out, cost in USD, and cache hits."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cache_hits: int = 0
    errors: int = 0

    def add(self, other: JudgeUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        self.cache_hits += other.cache_hits
        self.errors += other.errors

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class MetricResult:
    """One metric on one record.

    ``score`` is set only when ``status == "scored"`` and is always finite and inside the
    metric's stated range. ``skipped`` carries the reason in ``reason`` (missing inputs, a judge
    that cannot decide it honestly); ``error`` carries the message, with ``retryable`` set when
    the cause was the judge's availability (outage, 429, timeout), so the record can wait.
    """

    metric: str
    status: Status
    score: float | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    usage: JudgeUsage = field(default_factory=JudgeUsage)
    retryable: bool = False
    higher_is_better: bool = True
    label: str | None = None  # e.g. "pass"/"fail" or a safety category verdict

    def __post_init__(self) -> None:
        if self.status == "scored":
            if self.score is None or not math.isfinite(self.score):
                raise ValueError(f"{self.metric}: a scored result needs a finite score, got {self.score!r}")
        else:
            self.score = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unsupported_claims(details: dict[str, Any] | None) -> list[str]:
    """The claims a metric found unsupported: ``details["unsupported"]`` (hallucination) or the
    ``claims`` whose verdict is not ``yes`` (faithfulness; ``idk`` too unless it counted as supported)."""
    details = details or {}
    listed = details.get("unsupported", details.get("unsupported_claims"))
    if isinstance(listed, (list, tuple)):
        return [str(c.get("statement", c)) if isinstance(c, dict) else str(c) for c in listed]
    claims = details.get("claims")
    if not isinstance(claims, (list, tuple)):
        return []
    ok = {"yes", "idk"} if details.get("idk_counts_as_supported") else {"yes"}
    return [
        str(c.get("statement", ""))
        for c in claims
        if isinstance(c, dict) and c.get("verdict") is not None and c.get("verdict") not in ok
    ]

"""MetricResult: what scoring one metric on one record produced."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from collector.scoring.judge import JudgeUsage

Status = Literal["scored", "skipped", "error"]


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

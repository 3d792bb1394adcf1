"""What scoring produces: a :class:`MetricResult` per metric and record, with the judge's :class:`JudgeUsage`."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["scored", "skipped", "error"]

# What a claim's verdict tells a reader. ``yes``: supported; ``idk``: not found in the contexts; ``no``:
# contradicted where the judge's reason says so (the local judge's reasons start "contradicted by context #2: ..."),
# else unsupported, which is all an LLM judge's ``no`` says (its prompt asks ``no`` for a claim the contexts
# contradict *or* do not contain).
ClaimKind = Literal["supported", "contradicted", "not_found", "unsupported"]
CLAIM_WORDS: dict[str, str] = {
    "supported": "supported",
    "contradicted": "contradicted",
    "not_found": "not found",
    "unsupported": "unsupported",
}
# The order problems are listed in: contradicted first, then unsupported (maybe contradicted), then not found.
_PROBLEM_ORDER = {"contradicted": 0, "unsupported": 1, "not_found": 2, "supported": 3}


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
    provenance: dict[str, Any] = field(default_factory=dict)

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


def claim_kind(verdict: Any, reason: Any = None) -> ClaimKind:
    """What a claim verdict says, in words a reader can take at face value: ``yes`` is supported, ``idk`` not
    found in the contexts, ``no`` contradicted when the judge's reason starts with "contradicted", else unsupported
    (contradicted or not found: an LLM judge's ``no`` does not say which). Scoring is not decided here:
    ``idk_counts_as_supported`` still makes an ``idk`` claim count as supported."""
    if verdict == "yes":
        return "supported"
    if verdict == "idk":
        return "not_found"
    if isinstance(reason, str) and reason.strip().casefold().startswith("contradicted"):
        return "contradicted"
    return "unsupported"


def claim_verdicts(details: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The per-claim verdicts of a metric's ``details["claims"]`` (faithfulness, hallucination, summarization), each
    ``statement``, ``verdict``, ``kind`` (:func:`claim_kind`), ``supported`` (as the metric counted it, ``idk``
    included where ``idk_counts_as_supported``) and ``reason``; None where the details carry no per-claim
    verdicts (a metric that lists only statements, or none)."""
    details = details or {}
    claims = details.get("claims")
    if not isinstance(claims, (list, tuple)):
        return None
    idk_ok = bool(details.get("idk_counts_as_supported"))
    out = []
    for c in claims:
        if not isinstance(c, dict) or c.get("verdict") is None:
            continue
        verdict = str(c["verdict"])
        reason = c.get("reason")
        out.append(
            {
                "statement": str(c.get("statement", "")),
                "verdict": verdict,
                "kind": claim_kind(verdict, reason),
                "supported": verdict == "yes" or (idk_ok and verdict == "idk"),
                "reason": " ".join(reason.split()) if isinstance(reason, str) else None,
            }
        )
    return out or None


def unsupported_claim_verdicts(details: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """:func:`claim_verdicts` of the claims the metric did not count as supported, contradicted first, then
    unsupported, then not found; None where the details carry no per-claim verdicts."""
    verdicts = claim_verdicts(details)
    if verdicts is None:
        return None
    return sorted((c for c in verdicts if not c["supported"]), key=lambda c: _PROBLEM_ORDER[c["kind"]])

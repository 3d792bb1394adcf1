"""What scoring produces: a :class:`MetricResult` per metric and record, with the judge's :class:`JudgeUsage`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import InitVar, asdict, dataclass, field
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
    metric's stated range (checked when the metric passes ``score_range``). ``skipped`` carries the reason in ``reason`` (missing inputs, a judge
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
    # The metric's declared range, checked at construction and not stored (an init-only field, so neither
    # ``to_dict`` nor the stores see it): a scored result outside it is a bug, never published.
    score_range: InitVar[tuple[float, float] | None] = None

    def __post_init__(self, score_range: tuple[float, float] | None) -> None:
        if self.status == "scored":
            if self.score is None or not math.isfinite(self.score):
                raise ValueError(f"{self.metric}: a scored result needs a finite score, got {self.score!r}")
            if score_range is not None and not score_range[0] <= self.score <= score_range[1]:
                raise ValueError(f"{self.metric}: score {self.score!r} outside [{score_range[0]}, {score_range[1]}]")
        else:
            self.score = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricResult:
        """The result :meth:`to_dict` wrote (another host's, through Redis): ``ValueError`` or ``TypeError`` for
        anything else, never a result of the wrong shape."""
        status = data["status"]
        if status not in ("scored", "skipped", "error"):
            raise ValueError(f"unknown result status {status!r}")
        metric, score, reason, label = data["metric"], data.get("score"), data.get("reason"), data.get("label")
        if not isinstance(metric, str) or not metric:
            raise ValueError("a result names its metric")
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
            raise TypeError("a result's score is a number")
        if not (reason is None or isinstance(reason, str)) or not (label is None or isinstance(label, str)):
            raise TypeError("a result's reason and label are text")
        details, provenance, usage = data.get("details") or {}, data.get("provenance") or {}, data.get("usage") or {}
        if not isinstance(details, dict) or not isinstance(provenance, dict) or not isinstance(usage, dict):
            raise TypeError("a result's details, provenance and usage are objects")
        counts = {
            k: usage[k] for k in ("calls", "prompt_tokens", "completion_tokens", "cache_hits", "errors") if k in usage
        }
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values()):
            raise TypeError("a result's usage counts are integers")
        cost = usage.get("cost_usd", 0.0)
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            raise TypeError("a result's cost is a number")
        return cls(
            metric,
            status,
            score=None if score is None else float(score),
            reason=reason,
            details=details,
            usage=JudgeUsage(**counts, cost_usd=float(cost)),
            retryable=bool(data.get("retryable", False)),
            higher_is_better=bool(data.get("higher_is_better", True)),
            label=label,
            provenance=provenance,
        )


@dataclass(frozen=True)
class Claim:
    """One claim as a claim-based metric stores it in ``details["claims"]`` (faithfulness, hallucination,
    summarization): the one definition of that stored form, written by the metrics and read by every reader.
    ``verdict`` is ``yes``/``no``/``idk``, or None in details written without one."""

    statement: str
    verdict: str | None
    reason: str | None = None
    evidence: str | None = None
    confidence: float | None = None

    @property
    def kind(self) -> ClaimKind:
        return claim_kind(self.verdict, self.reason)

    def to_detail(self) -> dict[str, Any]:
        """The stored form: ``reason`` and ``evidence`` only when non-empty, ``confidence`` rounded to 4 places."""
        d: dict[str, Any] = {"statement": self.statement, "verdict": self.verdict}
        if self.reason:
            d["reason"] = self.reason
        if self.evidence:
            d["evidence"] = self.evidence
        if self.confidence is not None:
            d["confidence"] = round(float(self.confidence), 4)
        return d

    @classmethod
    def from_detail(cls, d: Mapping[str, Any]) -> Claim:
        """Read back a stored claim, tolerating any shape a store may hold (wrong types read as absent)."""
        verdict = d.get("verdict")
        reason, evidence, confidence = d.get("reason"), d.get("evidence"), d.get("confidence")
        return cls(
            statement=str(d.get("statement", "")),
            verdict=None if verdict is None else str(verdict),
            reason=reason if isinstance(reason, str) else None,
            evidence=evidence if isinstance(evidence, str) else None,
            confidence=float(confidence)
            if isinstance(confidence, (int, float)) and not isinstance(confidence, bool)
            else None,
        )


@dataclass(frozen=True)
class ClaimVerdicts:
    """The claim-based part of a metric's ``details``, typed, so readers (explorer, exporters, the results CLI)
    never pick at string keys: ``claims``, ``idk_counts_as_supported``, the statements a metric lists as
    ``unsupported`` (hallucination; ``unsupported_claims`` in older stores) and summarization's ``source``.
    :meth:`from_details` reads any stored details (absent parts empty); :meth:`to_details` writes these keys back
    in the stored form, so ``from_details(d).to_details()`` equals those keys of ``d``."""

    claims: tuple[Claim, ...] = ()
    idk_counts_as_supported: bool = False
    unsupported: tuple[str, ...] | None = None
    source: str | None = None

    @classmethod
    def from_details(cls, details: Mapping[str, Any] | None) -> ClaimVerdicts:
        details = details or {}
        claims = details.get("claims")
        listed = details.get("unsupported", details.get("unsupported_claims"))
        source = details.get("source")
        return cls(
            claims=tuple(Claim.from_detail(c) for c in claims if isinstance(c, dict))
            if isinstance(claims, (list, tuple))
            else (),
            idk_counts_as_supported=bool(details.get("idk_counts_as_supported")),
            unsupported=tuple(str(c.get("statement", c)) if isinstance(c, dict) else str(c) for c in listed)
            if isinstance(listed, (list, tuple))
            else None,
            source=source if isinstance(source, str) else None,
        )

    def to_details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"claims": [c.to_detail() for c in self.claims]}
        if self.unsupported is not None:
            out["unsupported"] = list(self.unsupported)
        if self.source is not None:
            out["source"] = self.source
        out["idk_counts_as_supported"] = self.idk_counts_as_supported
        return out

    def supported(self, claim: Claim) -> bool:
        """Whether the metric counted ``claim`` as supported (``idk`` too where ``idk_counts_as_supported``)."""
        return claim.verdict == "yes" or (self.idk_counts_as_supported and claim.verdict == "idk")

    @property
    def judged(self) -> list[Claim]:
        """The claims that carry a verdict (an NLI metric's claims carry labels, a noise metric's none)."""
        return [c for c in self.claims if c.verdict is not None]

    def unsupported_statements(self) -> list[str]:
        """The listed unsupported statements where the metric lists them, else the judged claims not counted
        as supported."""
        if self.unsupported is not None:
            return list(self.unsupported)
        return [c.statement for c in self.judged if not self.supported(c)]

    def problems(self) -> list[Claim]:
        """The judged claims not counted as supported: contradicted first, then unsupported, then not found."""
        return sorted((c for c in self.judged if not self.supported(c)), key=lambda c: _PROBLEM_ORDER[c.kind])

    def view(self, claim: Claim) -> dict[str, Any]:
        """A judged claim as readers show it: ``statement``, ``verdict``, ``kind``, ``supported`` and ``reason``
        (whitespace squashed)."""
        return {
            "statement": claim.statement,
            "verdict": str(claim.verdict),
            "kind": claim.kind,
            "supported": self.supported(claim),
            "reason": " ".join(claim.reason.split()) if claim.reason is not None else None,
        }


@dataclass(frozen=True)
class ChunkUsefulness:
    """Context precision's ``details``, typed: one usefulness flag per ranked chunk (stored as 0/1 in
    ``relevant``), judged ``against`` the reference or the response. The explorer reads each context's
    usefulness from it; :meth:`to_details` is the stored form the metric writes."""

    useful: tuple[bool, ...] = ()
    against: str | None = None

    @classmethod
    def from_details(cls, details: Mapping[str, Any] | None) -> ChunkUsefulness | None:
        """None where the details hold no per-rank flags."""
        flags = (details or {}).get("relevant")
        if not isinstance(flags, list):
            return None
        against = (details or {}).get("against")
        return cls(tuple(bool(f) for f in flags), against if isinstance(against, str) else None)

    def to_details(self) -> dict[str, Any]:
        return {"relevant": [int(f) for f in self.useful], "against": self.against}

    def at_rank(self, rank: int) -> bool | None:
        """The flag of the chunk at 1-based ``rank``; None past the judged chunks."""
        return self.useful[rank - 1] if 1 <= rank <= len(self.useful) else None


def unsupported_claims(details: Mapping[str, Any] | None) -> list[str]:
    """The claims a metric found unsupported: ``details["unsupported"]`` (hallucination) or the
    ``claims`` whose verdict is not ``yes`` (faithfulness; ``idk`` too unless it counted as supported)."""
    return ClaimVerdicts.from_details(details).unsupported_statements()


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


def claim_verdicts(details: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """The per-claim verdicts of a metric's ``details["claims"]`` (faithfulness, hallucination, summarization) as
    :meth:`ClaimVerdicts.view` shows them; None where the details carry no per-claim verdicts (a metric that lists
    only statements, or none)."""
    typed = ClaimVerdicts.from_details(details)
    return [typed.view(c) for c in typed.judged] or None


def unsupported_claim_verdicts(details: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """:func:`claim_verdicts` of the claims the metric did not count as supported, contradicted first, then
    unsupported, then not found; None where the details carry no per-claim verdicts."""
    typed = ClaimVerdicts.from_details(details)
    if not typed.judged:
        return None
    return [typed.view(c) for c in typed.problems()]

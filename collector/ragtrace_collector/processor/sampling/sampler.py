"""Which records get scored: a fair, deterministic sample plus the ones that must always be looked at.

* **Rate**: a record is in the sample when the low 64 bits of its trace id, read as an unsigned integer,
  are below ``rate × 2⁶⁴`` — the rule of OpenTelemetry's ``TraceIdRatioBased`` sampler, so every
  receiver decides the same for the same trace, and a collector rate nests inside an SDK head-sampling
  rate. A per-pipeline rate overrides the global one. A sampled record's ``sampling_weight`` is ``1/rate``.
* **Always** rules (errors, slow requests, low top retrieval score, a reference answer attached, the app's
  explicit flag) select a record whatever the rate, with weight 1 (its inclusion probability is 1).
* **Budget**: every selected record must also fit the judge budget (records per minute, judge tokens per
  hour), kept behind :class:`Budget` so several processes can share one (Redis).
* Every decision is counted: ``ragtrace_traces_sampled_total{reason}`` or
  ``ragtrace_traces_dropped_total{reason}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ragtrace_collector.config import SamplingConfig
from ragtrace_collector.model.record import RagRecord, RecordFacts
from ragtrace_collector.processor.sampling.budget import Budget, LocalBudget

_SPACE = 1 << 64
_LOW64 = _SPACE - 1

# Reasons (label values of the sampling counters)
RATE = "rate"
ERROR = "error"
SLOW = "slow"
LOW_SCORE = "low_score"
REFERENCE = "reference"
FLAGGED = "flagged"


def trace_id_fraction_bound(rate: float) -> int:
    """The threshold on the trace id's low 64 bits for a sampling rate."""
    return _SPACE if rate >= 1.0 else max(0, int(rate * _SPACE))


def in_rate_sample(trace_id: str | None, rate: float) -> bool:
    """Deterministic: the same trace id and rate always give the same answer, whoever asks."""
    if rate >= 1.0:
        return True
    if rate <= 0.0 or not trace_id:
        return False
    try:
        low = int(trace_id[-16:], 16) & _LOW64
    except ValueError:
        return False
    return low < trace_id_fraction_bound(rate)


@dataclass(frozen=True)
class Decision:
    sampled: bool
    reason: str  # why sampled (rate or an always rule) or why dropped
    weight: float  # 1 / inclusion probability


class SamplingObserver(Protocol):
    """Counts decisions: ``n`` records of ``pipeline`` sampled, or dropped, for ``reason``."""

    def sampled(self, pipeline: str | None, reason: str, n: int = 1) -> None: ...

    def dropped(self, pipeline: str | None, reason: str, n: int = 1) -> None: ...


class Sampler:
    """Decides, counts, and stamps ``sampling_weight`` on the records it selects."""

    def __init__(self, config: SamplingConfig, budget: Budget | None = None, observer: SamplingObserver | None = None):
        self.config = config
        self.budget = budget if budget is not None else LocalBudget.from_config(config.budget)
        self.observer = observer

    def rate_for(self, pipeline: str | None) -> float:
        if pipeline is not None and pipeline in self.config.pipelines:
            return float(self.config.pipelines[pipeline])
        return self.config.rate

    def _always_reason(self, record: RecordFacts) -> str | None:
        always = self.config.always
        if always.flagged and record.sample_requested:
            return FLAGGED
        if always.errors and record.error:
            return ERROR
        if always.with_reference and record.reference:
            return REFERENCE
        if (
            always.slower_than_seconds is not None
            and record.request_duration_seconds is not None
            and record.request_duration_seconds > always.slower_than_seconds
        ):
            return SLOW
        if always.top_score_below is not None and record.context_scores:
            scores = [s for s in record.context_scores if s is not None]
            if scores and max(scores) < always.top_score_below:
                return LOW_SCORE
        return None

    def decide(self, record: RecordFacts) -> Decision:
        """The decision for one record (no side effects besides spending the budget)."""
        reason = self._always_reason(record)
        weight = 1.0
        if reason is None:
            rate = self.rate_for(record.pipeline)
            if not in_rate_sample(record.trace_id, rate):
                return Decision(False, RATE, 0.0)
            reason = RATE
            weight = 1.0 / rate
        refused = self.budget.acquire()
        if refused is not None:
            return Decision(False, refused, 0.0)
        return Decision(True, reason, weight)

    def select(self, record: RecordFacts) -> Decision:
        """Decide and count one record (the sweep decides a chunk's records one by one, then counts them at once)."""
        decision = self.decide(record)
        self.count([(record, decision)])
        return decision

    def count(self, decided: Sequence[tuple[RecordFacts, Decision]]) -> None:
        """Count decisions taken with :meth:`decide`: once per pipeline, outcome and reason, however many records."""
        if self.observer is None:
            return
        counts: dict[tuple[bool, str | None, str], int] = {}
        for record, decision in decided:
            key = (decision.sampled, record.pipeline, decision.reason)
            counts[key] = counts.get(key, 0) + 1
        for (sampled, pipeline, reason), n in counts.items():
            if sampled:
                self.observer.sampled(pipeline, reason, n)
            else:
                self.observer.dropped(pipeline, reason, n)

    def sample(self, record: RagRecord) -> bool:
        """Decide, count, and set ``record.sampling_weight`` when selected (a record already whole)."""
        decision = self.select(record)
        if decision.sampled:
            record.sampling_weight = decision.weight
        return decision.sampled


def budget_from_config(config: SamplingConfig, shared_url: str | None = None) -> Budget:
    """The local budget, or the cluster-wide one kept in Redis when the queue is on Redis."""
    if shared_url and shared_url.startswith(("redis://", "rediss://", "unix://")):
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.processor.sampling.redis_budget import RedisBudget

        return RedisBudget.from_config(shared_url, config.budget)
    return LocalBudget.from_config(config.budget)

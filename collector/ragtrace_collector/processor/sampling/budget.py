"""The judge's spending limit: the :class:`Budget` contract and the one-process :class:`LocalBudget`.

The cluster-wide implementation kept in Redis is :mod:`.redis_budget`.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Callable

from ragtrace_collector.config import BudgetConfig

# Reasons a record is refused (label values of ``ragtrace_traces_dropped_total``)
BUDGET_RECORDS = "budget_records"
BUDGET_TOKENS = "budget_tokens"


class Budget(abc.ABC):
    """The judge's spending limit.

    Contract: ``acquire`` is called once per record about to be queued for scoring and returns ``None``
    when it may go (spending one unit of the records budget), or the reason it may not
    (``budget_records`` or ``budget_tokens``) without spending anything. ``add_judge_tokens`` reports
    tokens the judge actually used. Implementations are thread-safe; a cluster-wide implementation
    (Redis) counts across processes.
    """

    @abc.abstractmethod
    def acquire(self) -> str | None:
        """Take one record's slot, or say why not."""

    @abc.abstractmethod
    def add_judge_tokens(self, tokens: int) -> None:
        """Account tokens spent by the judge."""

    def close(self) -> None:
        """Release resources."""


class LocalBudget(Budget):
    """One process's budget: a token bucket of records per minute and a sliding hour of judge tokens."""

    def __init__(
        self,
        records_per_minute: float | None = None,
        judge_tokens_per_hour: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.records_per_minute = records_per_minute
        self.judge_tokens_per_hour = judge_tokens_per_hour
        self.clock = clock
        self._lock = threading.Lock()
        self._allowance = float(records_per_minute or 0.0)  # a full minute's worth to start
        self._last = clock()
        self._tokens: deque[tuple[float, int]] = deque()  # (time, tokens) within the last hour
        self._token_sum = 0

    @classmethod
    def from_config(cls, config: BudgetConfig) -> LocalBudget:
        return cls(config.records_per_minute, config.judge_tokens_per_hour)

    def _tokens_in_window(self, now: float) -> int:
        while self._tokens and self._tokens[0][0] <= now - 3600.0:
            self._token_sum -= self._tokens.popleft()[1]
        return self._token_sum

    def acquire(self) -> str | None:
        with self._lock:
            now = self.clock()
            if self.judge_tokens_per_hour is not None and self._tokens_in_window(now) >= self.judge_tokens_per_hour:
                return BUDGET_TOKENS
            if self.records_per_minute is not None:
                rate = self.records_per_minute / 60.0
                self._allowance = min(self.records_per_minute, self._allowance + (now - self._last) * rate)
                self._last = now
                if self._allowance < 1.0:
                    return BUDGET_RECORDS
                self._allowance -= 1.0
            return None

    def add_judge_tokens(self, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._lock:
            self._tokens.append((self.clock(), tokens))
            self._token_sum += tokens

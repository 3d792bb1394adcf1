"""The judge budget shared by every collector process of a cluster, kept in Redis.

Per-process budgets (:class:`ragtrace_collector.processor.sampling.sampler.LocalBudget`) let N receivers admit N× the records
and N workers spend N× the tokens; this one counts in one place. It implements
:class:`ragtrace_collector.processor.sampling.sampler.Budget`: receivers call ``acquire`` for each record about to be queued,
workers report what the judge spent with ``add_judge_tokens``.

* **Records per minute**: a sliding 60 s window (sorted set of admission times, Redis clock), so in
  *any* 60 seconds at most ``records_per_minute`` records are admitted cluster-wide.
* **Judge tokens per hour**: tokens added to per-minute buckets (a hash, Redis clock). Tokens are
  only known after scoring, while admission happens before it, so admitted records not yet
  reported are *pending* (a sorted set; entries older than ``pending_seconds`` are forgotten) and
  count at the running average cost of a record (initially ``initial_tokens_per_record``). A record
  is refused with ``budget_tokens`` when spent + pending × average reaches the limit; the hour can
  only overshoot by how far the actual cost of the pending records exceeds the average.

Both checks and the admission are one Lua script, so concurrent receivers cannot overshoot.
If Redis is unreachable, ``acquire`` falls back to a per-process :class:`LocalBudget` holding
``1 / expected_processes`` of the limits (``?receivers=N`` in the URL; the cluster total then stays
within the budget), and tokens reported meanwhile are counted locally only.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ragtrace_collector.config import BudgetConfig
from ragtrace_collector.internal.redis import UNAVAILABLE, Breaker, connect, key_prefix, split_url
from ragtrace_collector.processor.sampling.budget import BUDGET_RECORDS, BUDGET_TOKENS, Budget, LocalBudget

log = logging.getLogger(__name__)

# KEYS: records zset, tokens hash, pending zset, average key.
# ARGV: records_per_minute (-1 = none), tokens_per_hour (-1 = none), member, pending_seconds, initial average
# Returns 0 admitted, 1 refused for records, 2 refused for tokens.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tph = tonumber(ARGV[2])
local rpm = tonumber(ARGV[1])
if tph >= 0 then
  local minute = math.floor(now / 60)
  local h = redis.call('HGETALL', KEYS[2])
  local sum = 0
  for i = 1, #h, 2 do
    if tonumber(h[i]) <= minute - 60 then
      redis.call('HDEL', KEYS[2], h[i])
    else
      sum = sum + tonumber(h[i + 1])
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[4]))
  local avg = tonumber(redis.call('GET', KEYS[4]) or ARGV[5])
  if sum + redis.call('ZCARD', KEYS[3]) * avg >= tph then return 2 end
end
if rpm >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60)
  if redis.call('ZCARD', KEYS[1]) >= rpm then return 1 end
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('EXPIRE', KEYS[1], 120)
end
if tph >= 0 then
  redis.call('ZADD', KEYS[3], now, ARGV[3])
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[4]) + 60)
end
return 0
"""

# KEYS: tokens hash, pending zset, average key. ARGV: tokens, records they were spent on
_ADD_TOKENS = """
local t = redis.call('TIME')
local minute = math.floor(tonumber(t[1]) / 60)
local tokens, records = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('HINCRBY', KEYS[1], minute, tokens)
redis.call('EXPIRE', KEYS[1], 3720)
if records > 0 then
  redis.call('ZPOPMIN', KEYS[2], records)
  local per = tokens / records
  local avg = tonumber(redis.call('GET', KEYS[3]) or '-1')
  if avg < 0 then avg = per else avg = 0.8 * avg + 0.2 * per end
  redis.call('SET', KEYS[3], tostring(avg), 'EX', 7200)
end
return 0
"""

# KEYS: records zset, tokens hash. Returns {records in the last 60 s, tokens in the last 60 minutes}.
_USAGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local minute = math.floor(now / 60)
local records = redis.call('ZCOUNT', KEYS[1], now - 60, '+inf')
local h = redis.call('HGETALL', KEYS[2])
local sum = 0
for i = 1, #h, 2 do
  if tonumber(h[i]) > minute - 60 then sum = sum + tonumber(h[i + 1]) end
end
return {records, sum}
"""


class RedisBudget(Budget):
    """Cluster-wide records-per-minute and judge-tokens-per-hour limits (see the module docstring)."""

    def __init__(
        self,
        url: str,
        records_per_minute: float | None = None,
        judge_tokens_per_hour: float | None = None,
        *,
        prefix: str | None = None,
        expected_processes: int = 1,
        retry_interval: float = 1.0,
        initial_tokens_per_record: float = 1000.0,
        pending_seconds: float = 300.0,
    ) -> None:
        self.prefix = prefix or key_prefix(url)
        self.records_per_minute = records_per_minute
        self.judge_tokens_per_hour = judge_tokens_per_hour
        self.records_key = f"{self.prefix}:budget:records"
        self.tokens_key = f"{self.prefix}:budget:tokens"
        self.pending_key = f"{self.prefix}:budget:pending"
        self.average_key = f"{self.prefix}:budget:tokens_per_record"
        self.initial_tokens_per_record = float(initial_tokens_per_record)
        self.pending_seconds = float(pending_seconds)
        self._r = connect(url)
        self._acquire = self._r.register_script(_ACQUIRE)
        self._add_tokens = self._r.register_script(_ADD_TOKENS)
        self._usage = self._r.register_script(_USAGE)
        share = max(1, int(expected_processes))
        self.fallback = LocalBudget(
            None if records_per_minute is None else records_per_minute / share,
            None if judge_tokens_per_hour is None else judge_tokens_per_hour / share,
        )
        self._breaker = Breaker("shared judge budget", "using a local share", retry_interval)
        self.fallback_decisions = 0

    @property
    def limited(self) -> bool:
        return self.records_per_minute is not None or self.judge_tokens_per_hour is not None

    def _limits(self) -> list[Any]:
        rpm = -1 if self.records_per_minute is None else int(self.records_per_minute)
        tph = -1 if self.judge_tokens_per_hour is None else int(self.judge_tokens_per_hour)
        return [rpm, tph]

    def acquire(self) -> str | None:
        if not self.limited:
            return None
        if self._breaker.available():
            try:
                code = self._acquire(
                    keys=[self.records_key, self.tokens_key, self.pending_key, self.average_key],
                    args=[*self._limits(), uuid.uuid4().hex, self.pending_seconds, self.initial_tokens_per_record],
                )
                return None if int(code) == 0 else (BUDGET_RECORDS if int(code) == 1 else BUDGET_TOKENS)
            except UNAVAILABLE as exc:
                self._breaker.failed(exc)
        self.fallback_decisions += 1
        return self.fallback.acquire()

    def add_judge_tokens(self, tokens: int, records: int = 1) -> None:
        """Tokens the judge spent on ``records`` admitted records (a worker reports each record once;
        callers that can only report totals pass ``records=0`` and pending admissions then age out)."""
        tokens, records = int(tokens), int(records)
        if tokens < 0 or (tokens == 0 and records <= 0):
            return
        # A record that cost nothing (every metric skipped, a local judge) still leaves the pending
        # admissions: otherwise it would count at the average cost until it aged out.
        self.fallback.add_judge_tokens(tokens)
        if self.judge_tokens_per_hour is None or not self._breaker.available():
            return
        try:
            self._add_tokens(keys=[self.tokens_key, self.pending_key, self.average_key], args=[tokens, records])
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)

    def pending(self) -> int:
        """Admitted records whose judge tokens have not been reported yet."""
        return int(self._r.zcard(self.pending_key))

    def usage(self) -> tuple[int, int]:
        """(records admitted in the last 60 s, judge tokens in the last hour), cluster-wide."""
        records, tokens = self._usage(keys=[self.records_key, self.tokens_key])
        return int(records), int(tokens)

    def close(self) -> None:
        self._r.close()

    @classmethod
    def from_config(cls, url: str, config: BudgetConfig, *, expected_processes: int | None = None) -> RedisBudget:
        """The budget of the ``sampling.budget`` section, kept in the Redis at ``url``.

        ``?receivers=N`` in the URL says how many receivers share the budget, so that while Redis is
        unreachable each admits ``1/N`` of it locally.
        """
        if expected_processes is None:
            expected_processes = int(split_url(url)[1].get("receivers", 1))
        return cls(
            url,
            config.records_per_minute,
            config.judge_tokens_per_hour,
            expected_processes=expected_processes,
        )

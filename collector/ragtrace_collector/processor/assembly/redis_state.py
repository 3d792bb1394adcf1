"""In-flight assembly state kept in Redis, so spans of one trace reaching different receivers make one record.

A retriever service and a generator service often export to different collector instances behind a
load balancer; each receiver appends what it got to the trace's list in Redis, and whichever
receiver's sweep finds the trace due takes it, atomically, and builds the record. The policy
(grace after the root, max wait, bounds, late spans) is the same as
:class:`ragtrace_collector.processor.assembly.memory.InMemoryAssemblyState`'s; only where the spans wait changes.

Layout (``prefix`` defaults to ``ragtrace``; one Redis, or a primary with replicas — the scripts
touch keys they compute, so Redis Cluster is not supported)::

    {p}:asm:spans:{trace}   list of span JSON (SpanData.to_dict), expires after max_wait + ttl slack
    {p}:asm:deadline        sorted set trace -> completion deadline (Redis TIME seconds)
    {p}:asm:first           sorted set trace -> first span seen (oldest evicted first)
    {p}:asm:bytes           hash trace -> bytes held;  {p}:asm:total_bytes  sum of it
    {p}:asm:root            hash trace -> 1 once its root span arrived
    {p}:asm:done:{trace}    marker of a completed trace, for ``late_seconds``: later spans are late
    {p}:asm:claimed         sorted set trace -> when a receiver popped it (Redis TIME): its lease
    {p}:asm:claim:{trace}   the popped trace's span list (the spans key renamed), expires after claim_ttl
    {p}:asm:claim_by        hash trace -> "<owner token> <reason>" of each claim

All adds and pops are Lua scripts, so two receivers never both complete a trace, and deadlines come
from the Redis clock, so receivers on different machines agree on them.

A popped (or evicted) trace is not forgotten but *claimed*, like a Redis Streams pending entry: its
receiver ``settle``s it once its record is on the queue (or decided against). A receiver killed in
between never settles, so once the claim is older than ``claim_lease_seconds`` any receiver's
``pop_due`` takes the trace again and builds the record again (scoring is idempotent by record key).
A settle only deletes this receiver's own claims (a lease that ran out may belong to another now).
The claim's spans expire ``claim_ttl`` (10 leases) after the first pop whatever happens, so claims
never settled (a bug, a trace that kills every receiver building it) cannot fill Redis; they do not
count against the in-flight bounds.

Redis unreachable: spans go to an in-process :class:`InMemoryAssemblyState` until Redis answers
again (the receivers keep producing records and latency metrics; a trace split across receivers
during the outage becomes partial records). ``pop_all`` at shutdown returns only this process's
fallback traces plus traces already due: the rest stay in Redis for the other receivers.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.internal.redis import UNAVAILABLE, Breaker, connect, key_prefix
from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import (
    REASON_EVICTED,
    AddItem,
    AddResult,
    AssemblyState,
    CompletedTrace,
)

log = logging.getLogger(__name__)

# Shared Lua: remove a trace from the in-flight keys, claim it for ``owner``, return {trace, reason, spans}.
_REMOVE = """
local function claim(p, tid, reason, owner, t)
  redis.call('ZADD', p .. ':asm:claimed', t, tid)
  redis.call('HSET', p .. ':asm:claim_by', tid, owner .. ' ' .. reason)
end
local function remove(p, tid, reason, done_ttl, owner, claim_ttl, t)
  local key = p .. ':asm:spans:' .. tid
  local spans = redis.call('LRANGE', key, 0, -1)
  redis.call('ZREM', p .. ':asm:deadline', tid)
  redis.call('ZREM', p .. ':asm:first', tid)
  local b = tonumber(redis.call('HGET', p .. ':asm:bytes', tid) or '0')
  redis.call('HDEL', p .. ':asm:bytes', tid)
  redis.call('DECRBY', p .. ':asm:total_bytes', b)
  if reason == '' then
    if redis.call('HDEL', p .. ':asm:root', tid) == 1 then reason = 'root' else reason = 'max_wait' end
  else
    redis.call('HDEL', p .. ':asm:root', tid)
  end
  redis.call('SET', p .. ':asm:done:' .. tid, '1', 'EX', done_ttl)
  if #spans > 0 then
    local claimed = p .. ':asm:claim:' .. tid
    redis.call('RENAME', key, claimed)
    redis.call('EXPIRE', claimed, claim_ttl)
    claim(p, tid, reason, owner, t)
  end
  return {tid, reason, spans}
end
-- Claims older than the lease (their receiver died): claimed again for ``owner``, the spans' expiry unchanged.
local function reclaim(p, owner, t, lease, limit)
  local stale
  if limit > 0 then
    stale = redis.call('ZRANGEBYSCORE', p .. ':asm:claimed', '-inf', t - lease, 'LIMIT', 0, limit)
  else
    stale = redis.call('ZRANGEBYSCORE', p .. ':asm:claimed', '-inf', t - lease)
  end
  local out = {}
  for _, tid in ipairs(stale) do
    local by = redis.call('HGET', p .. ':asm:claim_by', tid)
    local spans = redis.call('LRANGE', p .. ':asm:claim:' .. tid, 0, -1)
    if by and #spans > 0 then
      local reason = string.match(by, ' (.*)$')
      claim(p, tid, reason, owner, t)
      table.insert(out, {tid, reason, spans})
    else  -- expired (claim_ttl): given up
      redis.call('ZREM', p .. ':asm:claimed', tid)
      redis.call('HDEL', p .. ':asm:claim_by', tid)
    end
  end
  return out
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
"""

# ARGV: prefix, trace, grace, max_wait, nbytes, root, spans_ttl, max_traces, max_bytes, done_ttl, owner, claim_ttl,
# span...
_ADD = (
    _REMOVE
    + """
local p, tid = ARGV[1], ARGV[2]
local nspans = #ARGV - 12
if redis.call('EXISTS', p .. ':asm:done:' .. tid) == 1 then return {nspans, {}} end
local t = now()
local dl = p .. ':asm:deadline'
if not redis.call('ZSCORE', dl, tid) then
  redis.call('ZADD', dl, t + tonumber(ARGV[4]), tid)
  redis.call('ZADD', p .. ':asm:first', t, tid)
end
local key = p .. ':asm:spans:' .. tid
redis.call('RPUSH', key, unpack(ARGV, 13))
redis.call('EXPIRE', key, tonumber(ARGV[7]))
local nb = tonumber(ARGV[5])
redis.call('HINCRBY', p .. ':asm:bytes', tid, nb)
redis.call('INCRBY', p .. ':asm:total_bytes', nb)
if ARGV[6] == '1' then
  redis.call('HSET', p .. ':asm:root', tid, '1')
  redis.call('ZADD', dl, 'LT', t + tonumber(ARGV[3]), tid)
end
local evicted = {}
local first = p .. ':asm:first'
local max_traces, max_bytes = tonumber(ARGV[8]), tonumber(ARGV[9])
while true do
  local n = redis.call('ZCARD', first)
  local total = tonumber(redis.call('GET', p .. ':asm:total_bytes') or '0')
  if not (n > max_traces or (total > max_bytes and n > 1)) then break end
  local oldest = redis.call('ZRANGE', first, 0, 0)[1]
  table.insert(evicted, remove(p, oldest, 'evicted', ARGV[10], ARGV[11], ARGV[12], t))
end
return {0, evicted}
"""
)

# ARGV: prefix, limit (0 = all due), done_ttl, owner, lease, claim_ttl. Stale claims first, then due traces.
_POP_DUE = (
    _REMOVE
    + """
local p = ARGV[1]
local limit = tonumber(ARGV[2])
local t = now()
local out = reclaim(p, ARGV[4], t, tonumber(ARGV[5]), limit)
if limit > 0 and #out >= limit then return out end
local due
if limit > 0 then
  due = redis.call('ZRANGEBYSCORE', p .. ':asm:deadline', '-inf', t, 'LIMIT', 0, limit - #out)
else
  due = redis.call('ZRANGEBYSCORE', p .. ':asm:deadline', '-inf', t)
end
for _, tid in ipairs(due) do table.insert(out, remove(p, tid, '', ARGV[3], ARGV[4], ARGV[6], t)) end
return out
"""
)

# ARGV: prefix, owner, trace... Deletes the claims of these traces that ``owner`` holds.
_SETTLE = """
local p, owner = ARGV[1], ARGV[2]
local mine = owner .. ' '
local n = 0
for i = 3, #ARGV do
  local tid = ARGV[i]
  local by = redis.call('HGET', p .. ':asm:claim_by', tid)
  if by and string.sub(by, 1, #mine) == mine then
    redis.call('DEL', p .. ':asm:claim:' .. tid)
    redis.call('ZREM', p .. ':asm:claimed', tid)
    redis.call('HDEL', p .. ':asm:claim_by', tid)
    n = n + 1
  end
end
return n
"""


def decode_spans(spans: list[str]) -> list[SpanData]:
    """Spans stored as JSON (``SpanData.to_dict``); an unreadable one is logged and skipped, the rest kept."""
    out = []
    for s in spans:
        try:
            out.append(SpanData.from_dict(json.loads(s)))
        except Exception as exc:  # one unreadable span must not lose the trace
            log.error("dropping unreadable shared span: %s", exc)
    return out


class RedisAssemblyState(AssemblyState):
    """:class:`AssemblyState` shared by every receiver pointing at the same Redis and prefix."""

    def __init__(
        self,
        url: str,
        grace_seconds: float = 2.0,
        max_wait_seconds: float = 60.0,
        max_traces: int = 20_000,
        max_bytes: int = 256 * 1024 * 1024,
        late_seconds: float | None = None,
        prefix: str | None = None,
        retry_interval: float = 1.0,
        claim_lease_seconds: float = 30.0,
    ) -> None:
        self.prefix = prefix or key_prefix(url)
        self.grace = grace_seconds
        self.max_wait = max_wait_seconds
        self.max_traces = max(1, int(max_traces))
        self.max_bytes = max(1, int(max_bytes))
        # Completed ids are remembered by time here (the in-process state remembers by count).
        self.late_seconds = int(late_seconds if late_seconds is not None else max(600.0, 10 * max_wait_seconds))
        self.spans_ttl = int(max_wait_seconds * 2 + 60)
        self.lease = claim_lease_seconds
        self.claim_ttl = max(1, math.ceil(10 * claim_lease_seconds))  # safety net: claims never settled expire
        self.owner = uuid.uuid4().hex  # whose claims ``settle`` may delete: this receiver's, not a successor's
        self._r = connect(url)
        self._add = self._r.register_script(_ADD)
        self._pop_due = self._r.register_script(_POP_DUE)
        self._settle = self._r.register_script(_SETTLE)
        self.fallback = InMemoryAssemblyState(grace_seconds, max_wait_seconds, max_traces, max_bytes)
        self._breaker = Breaker("shared assembly state", "assembling locally", retry_interval)
        self._lock = threading.Lock()
        self.fallback_traces = 0  # spans batches assembled locally because Redis was unreachable

    def add(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool, now: float) -> AddResult:
        return self.add_many([(trace_id, spans, nbytes, root_seen)], now)[0]

    def add_many(self, items: Sequence[AddItem], now: float) -> list[AddResult]:
        """One request's traces in one round trip (a pipeline of the add script, one call per trace): a receiver's
        event loop waits on Redis once per request, not once per trace. Unreachable Redis: assembled here."""
        results = [AddResult() for _ in items]  # a trace with no spans adds nothing
        todo = [i for i, item in enumerate(items) if item[1]]
        if not todo:
            return results
        if self._breaker.available():
            try:
                pipe = self._r.pipeline(transaction=False)
                for i in todo:
                    self._add(args=self._add_args(*items[i]), client=pipe)
                for i, (late, evicted) in zip(todo, pipe.execute()):
                    results[i] = AddResult(
                        late_spans=int(late),
                        evicted=[CompletedTrace(tid, decode_spans(sp), REASON_EVICTED) for tid, _reason, sp in evicted],
                    )
                return results
            except UNAVAILABLE as exc:
                self._breaker.failed(exc)
        with self._lock:
            self.fallback_traces += len(todo)
            for i in todo:
                trace_id, spans, nbytes, root_seen = items[i]
                results[i] = self.fallback.add(trace_id, spans, nbytes, root_seen, now)
        return results

    def _add_args(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool) -> list[Any]:
        return [
            self.prefix,
            trace_id,
            self.grace,
            self.max_wait,
            int(nbytes),
            "1" if root_seen else "0",
            self.spans_ttl,
            self.max_traces,
            self.max_bytes,
            self.late_seconds,
            self.owner,
            self.claim_ttl,
            *(json.dumps(s.to_dict(), separators=(",", ":")) for s in spans),
        ]

    def _pop_redis(self, limit: int | None) -> list[CompletedTrace]:
        if not self._breaker.available():
            return []
        try:
            rows = self._pop_due(
                args=[self.prefix, int(limit or 0), self.late_seconds, self.owner, self.lease, self.claim_ttl]
            )
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
            return []
        return [CompletedTrace(tid, decode_spans(spans), reason) for tid, reason, spans in rows]

    def pop_due(self, now: float, limit: int | None = None) -> list[CompletedTrace]:
        with self._lock:
            out = self.fallback.pop_due(now, limit)
        if limit is None or len(out) < limit:
            out.extend(self._pop_redis(None if limit is None else limit - len(out)))
        return out

    def pop_all(self) -> list[CompletedTrace]:
        """This process's fallback traces and whatever is due; the rest stay for the other receivers."""
        with self._lock:
            out = self.fallback.pop_all()
        out.extend(self._pop_redis(None))
        return out

    def settle(self, trace_ids: Sequence[str]) -> None:
        """Delete this receiver's claims on ``trace_ids`` in one script call; unreachable Redis only costs a
        duplicate record (the claims are taken again after the lease)."""
        if not trace_ids or not self._breaker.available():
            return
        try:
            self._settle(args=[self.prefix, self.owner, *trace_ids])
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)

    def claimed(self) -> int:
        """Popped traces not settled yet, whoever popped them (tests, diagnostics)."""
        return int(self._r.zcard(f"{self.prefix}:asm:claimed"))

    def inflight(self) -> tuple[int, int]:
        with self._lock:
            local_traces, local_bytes = self.fallback.inflight()
        if not self._breaker.available():
            return local_traces, local_bytes
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.zcard(f"{self.prefix}:asm:first")
            pipe.get(f"{self.prefix}:asm:total_bytes")
            n, b = pipe.execute()
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
            return local_traces, local_bytes
        return int(n) + local_traces, int(b or 0) + local_bytes

    def close(self) -> None:
        self._r.close()

    @classmethod
    def from_config(cls, url: str, config: AssemblyConfig) -> RedisAssemblyState:
        """The state for ``assembly.shared_state: <url>`` with the section's bounds."""
        return cls(
            url,
            grace_seconds=config.grace_seconds,
            max_wait_seconds=config.max_wait_seconds,
            max_traces=config.max_inflight_traces,
            max_bytes=config.max_inflight_bytes,
            # a section-like object predating the key (the ingest helper's) gets the default lease
            claim_lease_seconds=config.claim_lease_seconds,
        )

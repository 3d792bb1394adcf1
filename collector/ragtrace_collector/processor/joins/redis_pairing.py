"""Pairing memory kept in Redis, so the two traces of one request join even when different receivers complete them.

With ``assembly.shared_state`` whichever receiver's sweep finds a trace due completes it, so a request traced as
two traces (see ``split_requests.py``, ``duplicate_calls.py``) usually completes half in one receiver and half in
another. Each receiver marks the services it receives locally and publishes the marks at its next sweep;
framework calls and held retrievals live in Redis, and a receiver takes one with an atomic removal, so two
receivers never both use it.

Layout (``prefix`` as the shared in-flight state's)::

    {p}:pair:marks:{kind}        sorted set service (JSON) -> last seen (Redis TIME), kept an hour
    {p}:pair:calls:{digest}      list of framework calls (JSON) by (service, prompt digest), newest 256, TTL
    {p}:pair:held:since          sorted set trace -> when its retrieval was held (Redis TIME)
    {p}:pair:held:svc:{digest}   hash trace -> retrieval half (JSON) by service, TTL
    {p}:pair:held:svcof          hash trace -> service digest
    {p}:pair:held:trace:{trace}  the held trace (reason and spans, JSON), TTL

Redis unreachable: this process's marks, calls and retrievals go to an :class:`InMemoryPairingState` until Redis
answers again (pairs whose halves completed in different receivers during the outage stay two records), and it
keeps releasing them itself. At shutdown (``release(everything=True)``) the retrievals held in Redis stay for
the other receivers, as the shared in-flight traces do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from typing import cast

from ragtrace_collector.internal.redis import UNAVAILABLE, Breaker, connect, key_prefix
from ragtrace_collector.processor.assembly.redis_state import decode_spans
from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions import duplicates, halves
from ragtrace_collector.processor.joins.pairing import (
    MARK_BARE,
    MARK_NESTED,
    MAX_HELD,
    MAX_SERVICES,
    SERVICE_MEMORY_SECONDS,
    HeldRetrieval,
    InMemoryPairingState,
    PairingState,
)

_KEEP_CALLS = 256  # framework calls kept per (service, prompt digest)
_REPUBLISH_SECONDS = 60.0
# a model call completing in one receiver while another is between taking its retrieval's trace and holding it
# (a few milliseconds) looks again in later sweeps for this long
SETTLE_SECONDS = 1.0  # a service's mark is published again at most this often

_COMMON = """
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function take(p, tid)
  if redis.call('ZREM', p .. ':pair:held:since', tid) == 0 then return false end
  local svc = redis.call('HGET', p .. ':pair:held:svcof', tid)
  redis.call('HDEL', p .. ':pair:held:svcof', tid)
  if svc then redis.call('HDEL', p .. ':pair:held:svc:' .. svc, tid) end
  local key = p .. ':pair:held:trace:' .. tid
  local payload = redis.call('GET', key)
  redis.call('DEL', key)
  return payload
end
"""

# ARGV: prefix, kind, memory seconds, max services, service... -> the services marked within memory
_MARKS = (
    _COMMON
    + """
local key = ARGV[1] .. ':pair:marks:' .. ARGV[2]
local t = now()
for i = 5, #ARGV do redis.call('ZADD', key, t, ARGV[i]) end
redis.call('ZREMRANGEBYSCORE', key, '-inf', t - tonumber(ARGV[3]))
local extra = redis.call('ZCARD', key) - tonumber(ARGV[4])
if extra > 0 then redis.call('ZREMRANGEBYRANK', key, 0, extra - 1) end
return redis.call('ZRANGE', key, 0, -1)
"""
)

# ARGV: prefix, ttl, then (trace, service digest, half JSON, payload JSON) per retrieval
_HOLD = (
    _COMMON
    + """
local p, ttl = ARGV[1], tonumber(ARGV[2])
local t = now()
for i = 3, #ARGV, 4 do
  local tid, svc = ARGV[i], ARGV[i + 1]
  redis.call('SET', p .. ':pair:held:trace:' .. tid, ARGV[i + 3], 'EX', ttl)
  redis.call('HSET', p .. ':pair:held:svc:' .. svc, tid, ARGV[i + 2])
  redis.call('EXPIRE', p .. ':pair:held:svc:' .. svc, ttl)
  redis.call('HSET', p .. ':pair:held:svcof', tid, svc)
  redis.call('ZADD', p .. ':pair:held:since', t, tid)
end
return 1
"""
)

# ARGV: prefix, trace -> the held trace's payload, or nil when another receiver took it
_TAKE = _COMMON + "return take(ARGV[1], ARGV[2])"

# ARGV: prefix, window, max held -> {trace, payload} of those held for the window, and the oldest past max held
_RELEASE = (
    _COMMON
    + """
local p = ARGV[1]
local since = p .. ':pair:held:since'
local out = {}
for _, tid in ipairs(redis.call('ZRANGEBYSCORE', since, '-inf', now() - tonumber(ARGV[2]))) do
  local payload = take(p, tid)
  if payload then table.insert(out, {tid, payload}) end
end
while redis.call('ZCARD', since) > tonumber(ARGV[3]) do
  local tid = redis.call('ZRANGE', since, 0, 0)[1]
  local payload = take(p, tid)
  if payload then table.insert(out, {tid, payload}) end
end
return out
"""
)


def _digest(*parts: object) -> str:
    return hashlib.blake2b(json.dumps(parts).encode(), digest_size=12).hexdigest()


def _trace_payload(trace: CompletedTrace) -> str:
    spans = [json.dumps(s.to_dict(), separators=(",", ":")) for s in trace.spans]
    return json.dumps({"reason": trace.reason, "spans": spans}, separators=(",", ":"))


def _trace_of(trace_id: str, payload: str) -> CompletedTrace:
    data = json.loads(payload)
    return CompletedTrace(trace_id, decode_spans(data["spans"]), data["reason"])


def _half_of(raw: str) -> halves.RetrievalHalf:
    data = json.loads(raw)
    return halves.RetrievalHalf(data["trace_id"], data["service"], tuple(data["passages"]), int(data["end"]))


class RedisPairingState(PairingState):
    """:class:`PairingState` shared by every receiver pointing at the same Redis and prefix."""

    def __init__(
        self,
        url: str,
        window: float,
        settle: float = SETTLE_SECONDS,
        prefix: str | None = None,
        retry_interval: float = 1.0,
    ) -> None:
        self.window = window
        self.settle = settle
        self.prefix = prefix or key_prefix(url)
        # held retrievals and calls outlive the window by far: a receiver that died holding none loses nothing
        self.ttl = int(window * 2 + 3600)
        self._r = connect(url)
        self._marks = self._r.register_script(_MARKS)
        self._hold = self._r.register_script(_HOLD)
        self._take = self._r.register_script(_TAKE)
        self._release = self._r.register_script(_RELEASE)
        self.fallback = InMemoryPairingState(window)
        self._breaker = Breaker("shared pairing state", "pairing locally", retry_interval)
        self._lock = threading.Lock()  # marks come from the receivers' threads
        self._published: dict[str, dict[str | None, float]] = {MARK_NESTED: {}, MARK_BARE: {}}
        self._unpublished: dict[str, set[str | None]] = {MARK_NESTED: set(), MARK_BARE: set()}

    def mark(self, kind: str, service: str | None, now: float) -> None:
        with self._lock:
            self.fallback.mark(kind, service, now)
            unpublished = self._unpublished[kind]
            if (
                len(unpublished) < MAX_SERVICES
                and now - self._published[kind].get(service, -1e18) >= _REPUBLISH_SECONDS
            ):
                unpublished.add(service)

    def sync(self, now: float) -> None:
        for kind in (MARK_NESTED, MARK_BARE):
            if self._unpublished[kind]:
                self._shared_marks(kind, now, publish=True)

    def marked(self, kind: str, now: float) -> set[str | None]:
        with self._lock:
            local = self.fallback.marked(kind, now)
        return local | self._shared_marks(kind, now, publish=False)

    def _shared_marks(self, kind: str, now: float, publish: bool) -> set[str | None]:
        """The services marked ``kind`` in Redis, after adding this process's unpublished ones (``publish``)."""
        if not self._breaker.available():
            return set()
        services: set[str | None] = set()
        if publish:
            with self._lock:
                services, self._unpublished[kind] = self._unpublished[kind], set()
        try:
            shared = self._marks(
                args=[self.prefix, kind, SERVICE_MEMORY_SECONDS, MAX_SERVICES, *(json.dumps(s) for s in services)]
            )
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
            with self._lock:
                self._unpublished[kind] |= services
            return set()
        with self._lock:
            published = self._published[kind]
            if len(published) > MAX_SERVICES:
                published.clear()  # forgetting only means publishing again
            for s in services:
                published[s] = now
        return {json.loads(s) for s in shared}

    def _calls_key(self, service: str | None, prompt: str) -> str:
        return f"{self.prefix}:pair:calls:{_digest(service, prompt)}"

    def remember(self, calls: list[duplicates.ModelCall], now: float) -> None:
        if not calls:
            return
        if self._breaker.available():
            try:
                pipe = self._r.pipeline(transaction=False)
                for call in calls:
                    key = self._calls_key(call.service, call.prompt)
                    pipe.rpush(key, json.dumps(dataclasses.asdict(call), separators=(",", ":")))
                    pipe.ltrim(key, -_KEEP_CALLS, -1)
                    pipe.expire(key, self.ttl)
                pipe.execute()
                return
            except UNAVAILABLE as exc:
                self._breaker.failed(exc)
        self.fallback.remember(calls, now)

    def take_twin(self, bare: duplicates.ModelCall, now: float) -> duplicates.ModelCall | None:
        twin = self.fallback.take_twin(bare, now)
        if twin is not None or not self._breaker.available():
            return twin
        key = self._calls_key(bare.service, bare.prompt)
        try:
            for raw in cast(list[str], self._r.lrange(key, 0, -1)):  # the client decodes replies
                call = duplicates.ModelCall(**json.loads(raw))
                if call.trace_id != bare.trace_id and duplicates.encloses(call, bare) and self._r.lrem(key, 1, raw):
                    return call  # removed by this receiver: no other one pairs with it
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
        return None

    def hold(self, held: list[HeldRetrieval], now: float) -> None:
        if self._breaker.available():
            args: list[str | int | float] = [self.prefix, self.ttl]
            for h in held:
                half = dataclasses.asdict(h.half)
                args += [h.trace.trace_id, _digest(h.half.service), json.dumps(half), _trace_payload(h.trace)]
            try:
                self._hold(args=args)
                return
            except UNAVAILABLE as exc:
                self._breaker.failed(exc)
        self.fallback.hold(held, now)

    def take_fed(self, answer: halves.AnswerHalf) -> CompletedTrace | None:
        local = self.fallback.take_fed(answer)
        if local is not None or not self._breaker.available():
            return local
        try:
            held = cast(dict[str, str], self._r.hgetall(f"{self.prefix}:pair:held:svc:{_digest(answer.service)}"))
            fed = [half for half in map(_half_of, held.values()) if halves.fed(half, answer)]
            for half in sorted(fed, key=lambda h: h.end, reverse=True):  # the latest retrieval before the call
                payload = self._take(args=[self.prefix, half.trace_id])
                if payload:
                    return _trace_of(half.trace_id, payload)
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
        return None

    def release(self, now: float, everything: bool = False) -> list[CompletedTrace]:
        out = self.fallback.release(now, everything)
        if not self._breaker.available():
            return out
        try:
            rows = self._release(args=[self.prefix, self.window, MAX_HELD])
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
            return out
        return out + [_trace_of(tid, payload) for tid, payload in rows]

    def close(self) -> None:
        self._r.close()

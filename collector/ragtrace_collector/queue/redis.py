"""Redis Streams backend of :class:`RecordQueue`, for many receivers and many scoring workers.

Layout (``prefix`` defaults to ``ragtrace``)::

    {prefix}:records            stream; fields r (record JSON), t (enqueued unix s), a (prior attempts)
    group {prefix}-scorers      one consumer group; each queue object is one consumer
    {prefix}:records:delayed    sorted set of released records, scored by when they are due again
    {prefix}:records:overflow   counter of records refused because the stream was full
    {prefix}:scored:{key}:{m}   idempotency marks (:class:`ScoredMarks`), one per record key and metric
    {prefix}:put:{id}           one per put for an hour, so a put retried after a lost reply is not doubled

Delivery: receivers ``XADD``; workers ``XREADGROUP``; ``ack`` is ``XACK`` + ``XDEL`` (so the
stream length is the queue depth); ``extend`` (the worker's lease heartbeat) resets an entry's idle
time. Entries pending on a worker that died are taken over with ``XAUTOCLAIM`` once idle longer
than the lease, or sooner with ``XCLAIM`` once the dead worker's liveness key
(``{prefix}:alive:{consumer}``, renewed every 2 s for 10 s by a thread) has expired. ``release``
moves the entry into the delayed set, from which the next ``lease`` of any worker puts it back on
the stream when due (Redis ``TIME``, so clocks of different machines do not matter).

Capacity: the put script refuses a record when the stream (plus delayed set) holds ``max_depth``
(the base contract: drop the newest), counting it in Redis; the ``XADD`` also carries
``MAXLEN ~ max_depth`` so the stream stays bounded even if written by an older writer.

Redis unreachable on the receiving side: records go to a bounded local spill (FIFO,
:mod:`ragtrace_collector.queue.spill`: a SQLite file that outlives the process, or process memory);
beyond ``buffer_size`` the newest are shed and counted; a background thread flushes the spill,
oldest first and ``FLUSH_BATCH`` puts per round trip, once Redis answers again. A queue opened on a spill
that still holds records (left by a receiver killed during an outage) starts by flushing them, and a
receiver sharing a spill file looks for records left there every ``spill_check_interval`` seconds. ``put``
never waits for a dead Redis longer than the socket connect timeout, and not at all while Redis is known to
be down.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable

import redis
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ragtrace_collector.internal.redis import UNAVAILABLE, Breaker, connect, split_url
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.queue.base import Leased, RecordQueue
from ragtrace_collector.queue.spill import Spilled, SpillUnwritable, open_spill

log = logging.getLogger(__name__)

FLUSH_BATCH = 200  # spilled records sent per Redis round trip (pipelined puts) once Redis is back

# Put: KEYS[4] is this put's idempotency key, so a put retried after a lost reply (connection cut
# mid-command) does not enqueue the record twice.
_PUT = """
if redis.call('EXISTS', KEYS[4]) == 1 then return 'duplicate' end
local depth = redis.call('XLEN', KEYS[1]) + redis.call('ZCARD', KEYS[2])
if depth >= tonumber(ARGV[1]) then
  redis.call('INCR', KEYS[3])
  return false
end
redis.call('SET', KEYS[4], '1', 'EX', 3600)
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'r', ARGV[2], 't', ARGV[3], 'a', '0')
"""

# Release: take the entry off the stream and park it in the delayed set until due. Only the
# consumer still holding the entry may release it (a stale release must not undo a takeover).
_RELEASE = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[5] then return 0 end
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if #e == 0 then return 0 end
local f = e[1][2]
local m = {id = ARGV[2], a = ARGV[4]}
for i = 1, #f, 2 do
  if f[i] ~= 'a' then m[f[i]] = f[i + 1] end
end
redis.call('XDEL', KEYS[1], ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), cjson.encode(m))
return 1
"""

# Move released records that are due back onto the stream.
_PROMOTE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  if redis.call('ZREM', KEYS[2], m) == 1 then
    local f = cjson.decode(m)
    redis.call('XADD', KEYS[1], '*', 'r', f.r, 't', f.t, 'a', f.a)
  end
end
return #due
"""


# Oldest enqueue time among the first entries of the stream and of the delayed set (read in Redis,
# so a scrape does not transfer whole records).
_OLDEST = """
local oldest = false
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #first > 0 then
  local f = first[1][2]
  for i = 1, #f, 2 do if f[i] == 't' then oldest = tonumber(f[i + 1]) end end
end
for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, 19)) do
  local t = tonumber(cjson.decode(m).t)
  if t and (not oldest or t < oldest) then oldest = t end
end
if not oldest then return false end
return tostring(oldest)
"""

# Extend: reset the entry's idle time (what XAUTOCLAIM measures) if this consumer still holds it.
_EXTEND = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
"""


class ScoredMarks:
    """Cluster-wide "was this (record, metric) already counted?" marks.

    A worker calls :meth:`first` for each newly recorded result before emitting metrics and
    events; only the caller that gets ``True`` emits, so a record re-delivered to another
    worker (lease expiry, a worker killed mid-score) is counted once across all processes,
    whatever each worker's local results store says. Marks expire after ``ttl_seconds``
    (longer than any plausible redelivery delay).
    """

    def __init__(
        self,
        client: redis.Redis,
        prefix: str = "ragtrace",
        owner: str | None = None,
        ttl_seconds: int = 7 * 24 * 3600,
        patience_seconds: float = 60.0,
    ) -> None:
        self._r = client
        self.prefix = prefix
        self.owner = owner or f"{socket.gethostname()}-{os.getpid()}"
        self.ttl_seconds = ttl_seconds
        self.patience_seconds = patience_seconds

    def key(self, record_key: str, metric: str) -> str:
        return f"{self.prefix}:scored:{record_key}:{metric}"

    def _patiently(self, call):
        # The worker has already stored the result locally when it asks: waiting out a short Redis
        # outage (restart, failover) here keeps that result from going uncounted.
        deadline = time.monotonic() + self.patience_seconds
        delay = 0.1
        while True:
            try:
                return call()
            except UNAVAILABLE:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(2.0, delay * 2)

    def first(self, record_key: str, metric: str) -> bool:
        """Atomically claim the (record, metric) pair; ``True`` for exactly one caller ever.

        The same owner asking again also gets ``True`` (its earlier answer may have been lost
        with the connection), so a retried call cannot leave a result counted by nobody.
        """
        key = self.key(record_key, metric)

        def claim() -> bool:
            if self._r.set(key, self.owner, nx=True, ex=self.ttl_seconds):
                return True
            return self._r.get(key) == self.owner

        return bool(self._patiently(claim))

    def owner_of(self, record_key: str, metric: str) -> str | None:
        return self._patiently(lambda: self._r.get(self.key(record_key, metric)))


class RedisStreamQueue(RecordQueue):
    """Records on a Redis stream, consumed by a consumer group; see the module docstring.

    ``url``: ``redis://host:port/db`` with optional ``?prefix=ragtrace&group=...&buffer=10000``
    (``receivers=N`` is read by :mod:`ragtrace_collector.processor.sampling.redis_budget`: each receiver's share during an outage).
    ``consumer``: this process's name in the group (default host-pid-random; unique per object).
    ``spill``: where at most ``buffer_size`` records wait while Redis is unreachable: a SQLite file's path, or
    ``None`` / ``"memory"`` for process memory (the collector gives its receivers ``queue.spill``, a file
    in its data directory by default; see :mod:`ragtrace_collector.queue.spill`).
    """

    def __init__(
        self,
        url: str,
        max_depth: int = 10000,
        *,
        consumer: str | None = None,
        buffer_size: int | None = None,
        prefix: str | None = None,
        retry_interval: float = 0.5,
        alive_interval: float = 2.0,
        alive_ttl: float = 10.0,
        spill: str | None = None,
        spill_check_interval: float = 30.0,
    ) -> None:
        _, opts = split_url(url)
        self.url = url
        self.max_depth = int(max_depth)
        self.prefix = prefix or opts.get("prefix", "ragtrace")
        self.stream = f"{self.prefix}:records"
        self.delayed = f"{self.prefix}:records:delayed"
        self.overflow_key = f"{self.prefix}:records:overflow"
        self.group = opts.get("group", f"{self.prefix}-scorers")
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._r = connect(url)
        self.scored_marks = ScoredMarks(self._r, self.prefix, owner=self.consumer)
        self._put = self._r.register_script(_PUT)
        self._release = self._r.register_script(_RELEASE)
        self._promote = self._r.register_script(_PROMOTE)
        self._extend = self._r.register_script(_EXTEND)
        self._oldest = self._r.register_script(_OLDEST)

        # Receiver-side fallback while Redis is unreachable.
        self.buffer_size = int(
            buffer_size if buffer_size is not None else opts.get("buffer", max(1000, self.max_depth))
        )
        self._spill = open_spill(spill, self.buffer_size)
        self._buf_lock = threading.Lock()
        # This process holds spilled records (or found some at start): puts queue behind them, in order.
        self._spilling = False
        # A spill file shared with other receivers may hold records one of them left (killed mid-outage).
        self._spill_check_interval = spill_check_interval
        self._next_spill_check = time.monotonic() + spill_check_interval
        self._retry_interval = retry_interval
        self._breaker = Breaker("redis queue", "buffering records locally", retry_interval)
        self._flusher: threading.Thread | None = None
        self._flushing = False  # a flusher thread is (about to be) running
        self._flush_lock = threading.Lock()  # one flush at a time (thread or close())
        self._closing = threading.Event()

        self.overflowed = 0  # refused because the stream was full (this process)
        self.shed = 0  # dropped because Redis was down and the local buffer full (this process)
        self.refused = 0  # spilled records Redis answered with an error that is no outage (as a put that raised)
        self.unwritable = 0  # shed: the spill file refused them (a full disk, a lock) and its memory tier was full
        self._next_spill_warning = 0.0
        self.buffered_total = 0  # ever put into the local buffer
        self.reclaimed = 0  # entries taken over from another (dead/slow) consumer
        self.corrupt = 0  # unreadable entries dropped
        self._attempts: dict[str, int] = {}  # receipt -> attempts, for release
        self._att_lock = threading.Lock()
        self._claim_cursor = "0-0"
        self._group_ready = False
        self._next_reap = 0.0
        self.reap_idle_ms = 3600 * 1000
        self.alive_interval = alive_interval
        self.alive_ttl = alive_ttl
        self._heartbeat: threading.Thread | None = None
        self._next_housekeeping = 0.0
        if len(self._spill):  # left by a receiver that stopped during an outage: send them first
            with self._buf_lock:
                self._spilling = True
                self._start_flusher_locked()

    # ------------------------------------------------------------------ receiving side
    def put(self, record: RagRecord) -> bool:
        payload = Spilled(record.model_dump_json(exclude_none=True), repr(time.time()), uuid.uuid4().hex)
        with self._buf_lock:
            buffering = self._spilling or not self._breaker.available()
            if buffering:
                return self._to_buffer_locked(payload)
            if self._spill.durable and time.monotonic() >= self._next_spill_check:
                self._next_spill_check = time.monotonic() + self._spill_check_interval
                if len(self._spill):  # left in the shared file by another receiver: send them on
                    self._start_flusher_locked()
        try:
            return self._put_redis(payload)
        except UNAVAILABLE as exc:
            self._breaker.failed(exc)
            with self._buf_lock:
                return self._to_buffer_locked(payload)

    def _send(self, payload: Spilled, client: redis.client.Pipeline | None = None) -> object:
        """Run the put script for ``payload``: its entry id, ``None`` when the stream is full (on a pipeline,
        queued: the reply comes from ``execute``)."""
        return self._put(
            keys=[self.stream, self.delayed, self.overflow_key, f"{self.prefix}:put:{payload.put_id}"],
            args=[self.max_depth, payload.payload, payload.enqueued_at],
            client=client,
        )

    def _put_redis(self, payload: Spilled) -> bool:
        if self._send(payload) is None:
            self.overflowed += 1
            return False
        return True

    def _to_buffer_locked(self, payload: Spilled) -> bool:
        try:
            kept = self._spill.append(payload)
        except SpillUnwritable as exc:
            self.unwritable += 1
            self._spill_failed(exc)
            return False
        if not kept:
            self.shed += 1
            return False
        self._spilling = True
        self.buffered_total += 1
        self._start_flusher_locked()
        return True

    def _spill_failed(self, exc: SpillUnwritable) -> None:
        """Log a spill that cannot be written: once, then at most once a minute while it lasts."""
        now = time.monotonic()
        if now >= self._next_spill_warning:
            self._next_spill_warning = now + 60.0
            log.warning("redis queue spill cannot take records (%s): records shed until it can", exc)

    def _start_flusher_locked(self) -> None:
        if not self._flushing:  # decided under the buffer lock, so exactly one flusher runs
            self._flushing = True
            self._flusher = threading.Thread(target=self._flush_loop, name="ragtrace-redis-flush", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        try:
            while not self._closing.is_set():
                if self.flush_buffer(stop_flushing=True):
                    return  # empty; a new thread starts when buffering begins again
                self._closing.wait(self._retry_interval)
        finally:
            with self._buf_lock:
                self._flushing = False

    def flush_buffer(self, stop_flushing: bool = False) -> bool:
        """Move spilled records to Redis, oldest first, ``FLUSH_BATCH`` per round trip; ``True`` once empty.

        A batch cut off by a failure is sent again whole: its puts that did land are refused by their
        idempotency keys, so none is enqueued twice.
        """
        with self._flush_lock:
            while True:
                with self._buf_lock:
                    batch = self._spill.oldest(FLUSH_BATCH)
                    if not batch:
                        self._spilling = False
                        self._breaker.recovered()
                        if stop_flushing:
                            self._flushing = False
                        return True
                try:
                    pipe = self._r.pipeline(transaction=False)
                    for payload in batch:
                        self._send(payload, pipe)
                    replies = pipe.execute(raise_on_error=False)
                except UNAVAILABLE as exc:
                    self._breaker.failed(exc)
                    return False
                outage = next((reply for reply in replies if isinstance(reply, UNAVAILABLE)), None)
                if outage is not None:  # e.g. OOM part-way: the whole batch again later, its put keys refuse repeats
                    self._breaker.failed(outage)
                    return False
                # A full stream refuses a put (None): counted as overflow, dropped like any put. Any other error
                # Redis answers (a key overwritten with another type...) loses that record as a put that raised
                # would, counted, rather than stopping the flush behind it.
                self.overflowed += sum(reply is None for reply in replies)
                errors = [reply for reply in replies if isinstance(reply, Exception)]
                if errors:
                    self.refused += len(errors)
                    log.error("redis refused %d spilled record(s), dropped: %s", len(errors), errors[0])
                with self._buf_lock:
                    try:
                        self._spill.remove(batch)
                    except SpillUnwritable as exc:  # sent: sent again later, refused then by their put keys
                        self._spill_failed(exc)
                        return False

    @property
    def dropped(self) -> int:
        """Puts this process refused (stream full; Redis down and the spill full or unwritable) or Redis refused
        later, from the spill."""
        return self.overflowed + self.shed + self.refused + self.unwritable

    @property
    def buffered(self) -> int:
        """Records waiting in the local spill for Redis to come back."""
        return len(self._spill)

    # ------------------------------------------------------------------ scoring side
    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self._r.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def lease(self, n: int, lease_seconds: float) -> list[Leased]:
        if n <= 0:
            return []
        self._ensure_group()
        try:
            return self._lease(n, lease_seconds)
        except redis.exceptions.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._group_ready = False  # Redis lost the group (restart without persistence)
            self._ensure_group()
            return self._lease(n, lease_seconds)

    # Liveness: a consumer that leases keeps {prefix}:alive:{consumer} set (a heartbeat thread renews
    # it every ``alive_interval``, for ``alive_ttl``). Entries pending on a consumer whose key is gone
    # (the process was killed) are taken over once idle for ``alive_ttl``, without waiting for the lease.
    def _alive_key(self, consumer: str) -> str:
        return f"{self.prefix}:alive:{consumer}"

    def _start_heartbeat(self) -> None:
        if self._heartbeat is not None:
            return
        self._r.set(self._alive_key(self.consumer), "1", ex=max(1, int(self.alive_ttl)))

        def beat() -> None:
            while not self._closing.wait(self.alive_interval):
                try:
                    self._r.set(self._alive_key(self.consumer), "1", ex=max(1, int(self.alive_ttl)))
                except UNAVAILABLE:
                    pass  # Redis away: nobody can take our entries meanwhile either

        self._heartbeat = threading.Thread(target=beat, name="ragtrace-redis-alive", daemon=True)
        self._heartbeat.start()

    def _consumers_housekeeping(self) -> list[str]:
        """Names of dead consumers still holding entries; forgets consumers idle and empty for an hour."""
        now = time.monotonic()
        if now < self._next_housekeeping:
            return []
        self._next_housekeeping = now + self.alive_interval
        dead = []
        consumers = [c for c in self._r.xinfo_consumers(self.stream, self.group) if c["name"] != self.consumer]
        holding = [c for c in consumers if int(c["pending"]) > 0 and int(c["idle"]) >= self.alive_ttl * 1000]
        if holding:
            pipe = self._r.pipeline(transaction=False)
            for c in holding:
                pipe.exists(self._alive_key(c["name"]))
            dead = [c["name"] for c, alive in zip(holding, pipe.execute()) if not alive]
        if now >= self._next_reap:
            self._next_reap = now + 60.0
            for c in consumers:
                if int(c["pending"]) == 0 and int(c["idle"]) > self.reap_idle_ms:
                    self._r.xgroup_delconsumer(self.stream, self.group, c["name"])
        return dead

    def _take_over(self, dead: list[str], n: int) -> list[tuple[str, dict, int]]:
        """Claim up to ``n`` entries of dead consumers; XCLAIM's min-idle makes concurrent takers exclusive."""
        out: list[tuple[str, dict, int]] = []
        min_idle = int(self.alive_ttl * 1000)
        for name in dead:
            if len(out) >= n:
                break
            infos = self._r.xpending_range(self.stream, self.group, "-", "+", n - len(out), consumername=name)
            ids = [i["message_id"] for i in infos]
            if not ids:
                continue
            delivered = {i["message_id"]: int(i["times_delivered"]) for i in infos}
            for entry in self._r.xclaim(self.stream, self.group, self.consumer, min_idle, ids):
                assert not isinstance(entry, (bytes, str)), "XCLAIM without JUSTID replies (id, fields) pairs"
                entry_id, fields = entry
                if entry_id is None or fields is None:  # deleted from the stream meanwhile (acked late)
                    if entry_id is not None:  # Redis < 7 replies a bare nil, without the id to ack
                        self._r.xack(self.stream, self.group, entry_id)
                    continue
                assert isinstance(entry_id, str), "connect() decodes responses"
                out.append((entry_id, fields, delivered.get(entry_id, 1) + 1))
        return out

    def _lease(self, n: int, lease_seconds: float) -> list[Leased]:
        self._start_heartbeat()
        self._promote(keys=[self.stream, self.delayed], args=[max(n, 10)])
        out: list[Leased] = []
        dead = self._consumers_housekeeping()
        for entry_id, fields, deliveries in self._take_over(dead, n) if dead else []:
            leased = self._to_leased(entry_id, fields, deliveries)
            if leased is not None:
                self.reclaimed += 1
                out.append(leased)
        if len(out) >= n:
            return out
        # Entries idle on another consumer longer than the lease: that worker died or stalled.
        cursor, claimed, _deleted = self._r.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            int(lease_seconds * 1000),
            start_id=self._claim_cursor,
            count=n - len(out),
        )
        self._claim_cursor = cursor if isinstance(cursor, str) else "0-0"
        if claimed:
            pipe = self._r.pipeline(transaction=False)
            for entry_id, _ in claimed:
                pipe.xpending_range(self.stream, self.group, entry_id, entry_id, 1)
            pending = pipe.execute()
            for (entry_id, fields), info in zip(claimed, pending):
                deliveries = info[0]["times_delivered"] if info else 1
                leased = self._to_leased(entry_id, fields, deliveries)
                if leased is not None:
                    self.reclaimed += 1
                    out.append(leased)
        if len(out) < n:
            resp = self._r.xreadgroup(self.group, self.consumer, {self.stream: ">"}, count=n - len(out)) or []
            assert isinstance(resp, list), "RESP2 replies [[stream, entries], ...] (a dict only under RESP3)"
            for _stream, entries in resp:
                for entry_id, fields in entries:
                    leased = self._to_leased(entry_id, fields, 1)
                    if leased is not None:
                        out.append(leased)
        return out

    def _to_leased(self, entry_id: str, fields: dict | None, deliveries: int) -> Leased | None:
        try:
            if fields is None:
                raise ValueError("entry has no fields")
            record = RagRecord.model_validate_json(fields["r"])
            attempts = int(fields.get("a", 0)) + deliveries
            enqueued_at = float(fields.get("t", 0.0))
        except Exception as exc:  # unreadable entry: drop it rather than poison every worker
            log.error("dropping unreadable queue entry %s: %s", entry_id, exc)
            self.corrupt += 1
            pipe = self._r.pipeline(transaction=True)
            pipe.xack(self.stream, self.group, entry_id)
            pipe.xdel(self.stream, entry_id)
            pipe.execute()
            return None
        with self._att_lock:
            self._attempts[entry_id] = attempts
        return Leased(receipt=entry_id, record=record, attempts=attempts, enqueued_at=enqueued_at)

    def ack(self, receipt: str) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.xack(self.stream, self.group, receipt)
        pipe.xdel(self.stream, receipt)
        pipe.execute()
        with self._att_lock:
            self._attempts.pop(receipt, None)

    def release(self, receipt: str, delay: float = 0.0) -> None:
        with self._att_lock:
            attempts = self._attempts.pop(receipt, 1)
        # As in the SQLite queue, the next delivery's attempt number follows this one's.
        self._release(
            keys=[self.stream, self.delayed],
            args=[self.group, receipt, max(0.0, float(delay)), attempts, self.consumer],
        )

    def extend(self, receipt: str, lease_seconds: float) -> bool:
        """Renew this delivery's lease (a heartbeat while a slow judge works): the entry's idle time
        restarts, so no other worker reclaims it for another ``lease_seconds``. ``False`` when this
        consumer no longer holds the entry (reclaimed by another worker, acked, released)."""
        return bool(self._extend(keys=[self.stream], args=[self.group, receipt, self.consumer]))

    # ------------------------------------------------------------------ observation
    def depth(self) -> int:
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.xlen(self.stream)
            pipe.zcard(self.delayed)
            xlen, zlen = pipe.execute()
        except UNAVAILABLE:
            xlen = zlen = 0
        return int(xlen) + int(zlen) + self.buffered

    def oldest_age(self) -> float | None:
        """Age of the oldest record: first stream entry, the earliest released ones, the local buffer."""
        times: list[float] = []
        try:
            oldest = self._oldest(keys=[self.stream, self.delayed])
            if oldest is not None:
                times.append(float(oldest))
        except UNAVAILABLE:
            pass
        with self._buf_lock:
            held = self._spill.oldest()
        if held:
            times.append(float(held[0].enqueued_at))
        return max(0.0, time.time() - min(times)) if times else None

    def overflow_total(self) -> int:
        """Records refused as overflow by all writers of this stream, cluster-wide."""
        return int(self._r.get(self.overflow_key) or 0)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Export this process's fallback state (spill, shed, reclaimed) on ``registry`` (prometheus_client)."""
        registry.register(RedisQueueCollector(self))

    def close(self) -> None:
        self._closing.set()
        if self._heartbeat is not None:
            try:
                self._r.delete(self._alive_key(self.consumer))
            except UNAVAILABLE:
                pass
        held = len(self._spill) if self._spilling and not self.flush_buffer() else 0
        if self._flusher is not None:
            self._flusher.join(timeout=2)
        if self._flusher is None or not self._flusher.is_alive():
            lost = self._spill.close()  # those only in memory (a memory spill; a file refusing writes)
        else:  # a flusher stuck on a socket still reads the spill: left open, and a memory one's records lost
            lost = 0 if self._spill.durable else held
        if held - lost > 0:
            log.warning(
                "redis queue still unreachable at shutdown: %d record(s) kept in the spill file, sent when a "
                "receiver opens it again",
                held - lost,
            )
        if lost:
            self.shed += lost
            log.error("redis queue still unreachable at shutdown: %d record(s) held in memory not delivered", lost)
        self._r.close()

    def __repr__(self) -> str:
        return f"RedisStreamQueue({self.stream!r}, group={self.group!r}, consumer={self.consumer!r})"


class RedisQueueCollector(Collector):
    """What one process's :class:`RedisStreamQueue` did on its own: records in its spill, shed, taken over."""

    def __init__(self, queue: RedisStreamQueue | None) -> None:
        self.queue = queue  # None: describe only

    def describe(self) -> Iterable[Metric]:
        # Describing names the families without reading the queue (the registry, the rules lint).
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        return self._families(self.queue)

    @staticmethod
    def _families(queue: RedisStreamQueue | None) -> list[Metric]:
        held = GaugeMetricFamily(
            "ragtrace_queue_local_buffer_records", "Records held locally (spill) while Redis is unreachable"
        )
        shed = CounterMetricFamily("ragtrace_queue_shed", "Records shed, by reason", labels=["reason"])
        reclaimed = CounterMetricFamily(
            "ragtrace_queue_reclaimed", "Records taken over from a worker whose lease expired"
        )
        if queue is not None:
            held.add_metric([], queue.buffered)
            shed.add_metric(["redis_unavailable"], queue.shed)
            shed.add_metric(["stream_full"], queue.overflowed)
            shed.add_metric(["redis_error"], queue.refused)
            shed.add_metric(["spill_unwritable"], queue.unwritable)
            reclaimed.add_metric([], queue.reclaimed)
        return [held, shed, reclaimed]


def open_redis_queue(url: str, max_depth: int = 10000, spill: str | None = None) -> RedisStreamQueue:
    """The ``redis://`` branch of :func:`ragtrace_collector.queue.open_queue`."""
    return RedisStreamQueue(url, max_depth=max_depth, spill=spill)

"""Redis plumbing shared by the queue, the assembly state, the judge budget and the streams every host follows.

Each of those keeps working on a local fallback while Redis is unreachable; :class:`Breaker` is the
one place that remembers the outage (so callers skip a dead socket instead of waiting on it every
time), retries after ``retry_interval`` and logs an outage's start, a reminder a minute and its end.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
import redis.connection

from ragtrace_collector.internal.component import Component

log = logging.getLogger(__name__)

T = TypeVar("T")


class WritesDisabled(redis.exceptions.ResponseError):
    """MISCONF: Redis refuses writes because it cannot persist (a failed RDB snapshot or AOF write: disk full)."""


class Busy(redis.exceptions.ResponseError):
    """BUSY: a script or module command has run past ``busy-reply-threshold``; Redis serves nothing else till it ends."""


# Refusals redis-py reports as a plain ResponseError, by how their message starts: a code, or (for a command run
# by a script) Redis 7.0's ACL refusal, which carries none.
_REFUSALS: dict[str, type[redis.exceptions.ResponseError]] = {
    "MISCONF ": WritesDisabled,
    "BUSY ": Busy,
    "The user executing the script can't run this command": redis.exceptions.NoPermissionError,
}


class _NamesRefusals(redis.connection.AbstractConnection):
    """A connection raising :class:`WritesDisabled`, :class:`Busy` or ``NoPermissionError`` where redis-py raises a
    plain ResponseError, so callers can tell "cannot take this now" from a bad command (whatever the parser)."""

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.exceptions.ResponseError as exc:
            text = str(exc)
            named = next((kind for start, kind in _REFUSALS.items() if text.startswith(start)), None)
            if named is None or isinstance(exc, named):
                raise
            raise named(text) from exc


class _Connection(_NamesRefusals, redis.connection.Connection):
    pass


class _SSLConnection(_NamesRefusals, redis.connection.SSLConnection):
    pass


class _UnixConnection(_NamesRefusals, redis.connection.UnixDomainSocketConnection):
    pass


_CONNECTIONS = {"rediss": _SSLConnection, "unix": _UnixConnection}


# Errors meaning "Redis cannot take this now": not there (BusyLoadingError, AOF replay after a restart, is a
# ConnectionError subclass), full (OOM: maxmemory reached with noeviction), a replica after a failover (READONLY,
# and MASTERDOWN for reads where stale data is not served), unable to persist (MISCONF), stuck in a long script
# (BUSY) or refusing our user its commands after an ACL change (NOPERM). Each caller keeps working on its local
# fallback until Redis takes writes again.
UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.MasterDownError,
    redis.exceptions.NoPermissionError,
    WritesDisabled,
    Busy,
    OSError,
)

# Query options of a ragtrace Redis URL that redis-py does not understand.
OUR_OPTIONS = frozenset({"prefix", "group", "buffer", "receivers"})


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Separate our own query options (prefix, group, buffer, receivers) from what redis-py understands."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for k, v in parse_qsl(parts.query):
        if k in OUR_OPTIONS:
            ours[k] = v
        else:
            theirs.append((k, v))
    # Not urlunsplit: it drops the empty authority of unix:///path (redis-py then refuses "unix:/path").
    base = url.split("?", 1)[0].split("#", 1)[0]
    return (f"{base}?{urlencode(theirs)}" if theirs else base), ours


def key_prefix(url: str, default: str = "ragtrace") -> str:
    """The key prefix named by ``?prefix=`` in ``url``."""
    return split_url(url)[1].get("prefix", default)


def connect(url: str, *, connect_timeout: float = 0.5, timeout: float = 2.0) -> redis.Redis:
    """A thread-safe client with short timeouts: callers degrade rather than hang on a dead Redis."""
    base, _ = split_url(url)
    return redis.Redis.from_url(
        base,
        decode_responses=True,
        socket_connect_timeout=connect_timeout,
        socket_timeout=timeout,
        health_check_interval=15,
        retry_on_timeout=False,
        connection_class=_CONNECTIONS.get(urlsplit(base).scheme, _Connection),
    )


class Breaker:
    """Whether Redis is worth trying now: after a failure, not for ``retry_interval`` seconds.

    Thread-safe. The log tells an outage, not its retries: ``failed`` warns (naming ``what`` and ``fallback``)
    when an outage starts, then once every :attr:`REMIND_SECONDS` while it lasts; ``recovered`` ends it early
    (e.g. a flush that reached Redis) and says how long it lasted. Callers that never report success are
    covered too: a failure more than :attr:`QUIET_SECONDS` after the previous one starts a new outage.
    """

    REMIND_SECONDS = 60.0
    QUIET_SECONDS = 30.0

    def __init__(
        self, what: str, fallback: str, retry_interval: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.what = what
        self.fallback = fallback
        self.retry_interval = retry_interval
        self.clock = clock
        self._down_until = 0.0
        self._outage_since: float | None = None  # when the outage being logged began
        self._last_failure = 0.0
        self._next_reminder = 0.0
        self._lock = threading.Lock()

    def available(self) -> bool:
        return self.clock() >= self._down_until

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            now = self.clock()
            if self._outage_since is None or now - self._last_failure > self.QUIET_SECONDS:
                self._outage_since = now
                self._next_reminder = now + self.REMIND_SECONDS
                log.warning("%s unreachable (%s); %s", self.what, exc, self.fallback)
            elif now >= self._next_reminder:
                self._next_reminder += self.REMIND_SECONDS
                log.warning(
                    "%s still unreachable after %.0f s (%s); %s",
                    self.what,
                    now - self._outage_since,
                    exc,
                    self.fallback,
                )
            self._last_failure = now
            self._down_until = now + self.retry_interval

    def recovered(self) -> None:
        with self._lock:
            self._down_until = 0.0
            if self._outage_since is not None:
                log.info("%s reachable again after %.0f s", self.what, self.clock() - self._outage_since)
                self._outage_since = None

    def call(self, action: Callable[[], T], fallback: Callable[[], T]) -> T:
        """``action()`` while Redis is available, ``fallback()`` when it is not or ``action`` finds it gone."""
        if self.available():
            try:
                return action()
            except UNAVAILABLE as exc:
                self.failed(exc)
        return fallback()


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``ms-seq``) as a tuple, for ordering."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class StreamFollower(Component):
    """A thread that reads one Redis stream from where it left off, a round every ``interval`` seconds (and a last
    one at shutdown), for the state every host keeps a copy of (feedback, scored records).

    Subclasses say where the position is kept and what an entry does (:meth:`position`, :meth:`take`), and may send
    first (:meth:`send`). An outage goes through a :class:`Breaker` (logged once, a reminder a minute); any other
    failure of a round (a key of another type, a full disk) is logged once a minute; the next round tries again. A
    stream deleted and written anew restarts its ids below the position: it is read again from its start."""

    BATCH = 500  # entries read per round trip
    MAX_BATCHES = 20  # per round at most, so a stop never waits behind a long backlog
    REWIND_CHECK_SECONDS = 30.0
    COMPLAIN_SECONDS = 60.0

    def __init__(
        self,
        client: Any,
        stream: str,
        what: str,
        fallback: str,
        *,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._r: Any = client  # Any: redis-py's stubs type XREAD's reply per protocol, as a dict or a list
        self.stream = stream
        self.interval = interval
        self._clock = clock
        self._breaker = Breaker(what, fallback, clock=clock)
        self._name = what
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_rewind_check = -math.inf
        self._complained = -math.inf

    # what a subclass says ----------------------------------------------------------------------------
    @abstractmethod
    def position(self) -> str:
        """The id of the last entry taken (``0-0``: none)."""

    @abstractmethod
    def take(self, entries: list[tuple[str, dict[str, str]]], last_id: str) -> int:
        """Take ``entries`` in (untrusted: anyone with the password writes to the stream) and keep ``last_id`` as
        the position; returns how many were new."""

    def send(self) -> int:
        """What this host writes to the stream before it reads (nothing by default); returns how many."""
        return 0

    # the rounds ----------------------------------------------------------------------------------------
    def run_once(self) -> tuple[int, int]:
        """Send, then read; ``(sent, taken)``. Redis away: ``(0, 0)``."""
        return self._breaker.call(self._round, lambda: (0, 0))

    def _round(self) -> tuple[int, int]:
        sent = self.send()
        taken = 0
        position = self.position()
        for _ in range(self.MAX_BATCHES):
            found = self._r.xread({self.stream: position}, count=self.BATCH)
            entries = list(found[0][1]) if found else []
            if not entries:
                self._check_rewound(position)
                break
            position = entries[-1][0]
            taken += self.take(entries, position)
            if len(entries) < self.BATCH:
                break
        self._breaker.recovered()
        return sent, taken

    def _check_rewound(self, position: str) -> None:
        now = self._clock()
        if now - self._last_rewind_check < self.REWIND_CHECK_SECONDS or position == "0-0":
            return
        self._last_rewind_check = now
        try:
            last = str(self._r.xinfo_stream(self.stream)["last-generated-id"])
        except redis.exceptions.ResponseError:  # no such stream (yet, or deleted and not written again)
            last = "0-0"
        if stream_id(last) < stream_id(position):
            log.warning(
                "stream %s was reset (its last id is below %s): reading it from its start", self.stream, position
            )
            self.take([], "0-0")

    # the component contract ----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"ragtrace-{self.stream}", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the thread after a last round (what it cannot send now is sent by the next process)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._r.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.round_logged()
        self.round_logged()

    def round_logged(self) -> None:
        """One round as the thread runs it: a failure that is not an outage is logged once a minute, not raised."""
        try:
            self.run_once()
        except Exception:
            now = self._clock()
            if now - self._complained >= self.COMPLAIN_SECONDS:
                self._complained = now
                log.exception("%s: a round failed (logged once a minute while it lasts)", self._name)

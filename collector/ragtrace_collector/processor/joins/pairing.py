"""What the joins remember between sweeps to make one record of a request traced as two traces.

Two joins pair traces after they complete: a bare model call repeating a framework's call
(``joins/duplicate_calls.py``), and a retrieval and the model call it fed traced apart
(``joins/split_requests.py``). Both need memory outliving one sweep: which services write which kinds of traces
(read through ``joins/service_marks.py``), the model calls of requests that already left, and retrievals waiting
for their call. :class:`PairingState` is that memory. When several receivers share in-flight traces
(``assembly.shared_state``), the two traces of one request may complete in different receivers, so
:mod:`.redis_pairing` shares this memory too; :class:`InMemoryPairingState` is one process's.

Bare calls waiting for their request are not here: only the receiver that completed one pairs it (with a request
completing in the same sweep, or with a remembered call, shared), so they stay in the duplicate-calls join.
"""

from __future__ import annotations

import abc
from collections import OrderedDict, deque
from dataclasses import dataclass

from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions import duplicates, halves

MARK_NESTED = "nested"  # the service writes generator spans nested in a request
MARK_BARE = "bare"  # the service writes traces whose root is a model call
SERVICE_MEMORY_SECONDS = 3600.0  # a service keeps its mark this long after it was last seen
MAX_SERVICES = 10_000  # services marked at once, per kind (least recently seen go first)
MAX_CALLS = 50_000  # framework model calls remembered for pairing (oldest go first)
MAX_HELD = 10_000  # retrievals held at once (past it the oldest are released)
_DEFAULTS = AssemblyConfig()


@dataclass(frozen=True)
class HeldRetrieval:
    """A completed trace that only retrieved, waiting for the model call it fed."""

    trace: CompletedTrace
    half: halves.RetrievalHalf


class PairingState(abc.ABC):
    """Memory for the joins that pair traces, with a hold window of ``window`` seconds.

    Contract for implementations (one process here; Redis for several receivers):

    * ``mark`` notes that ``service`` was seen writing a kind of trace (``MARK_NESTED``, ``MARK_BARE``); it is
      called on the receivers' hot path, so it must not block. ``sync`` shares the marks noted since its last
      call (once per sweep, ``ServiceMarks.sync``). ``marked`` returns the services marked with ``kind`` within
      :data:`SERVICE_MEMORY_SECONDS`, here and by every receiver sharing the state that has synced.
    * ``remember`` keeps framework model calls for at least twice the window. ``take_twin`` returns, and forgets,
      a remembered call of another trace that ``bare`` repeats (same service and prompt digest, enclosing it in
      time, ``duplicates.encloses``); each remembered call is taken at most once, across receivers.
    * ``hold`` keeps a retrieval half. ``take_fed`` returns, and removes, the held retrieval that fed ``answer``
      (``halves.fed``; the latest-ending when several did), each held retrieval taken at most once, across
      receivers. ``release`` removes and returns the held retrievals whose window has passed, and the oldest
      past :data:`MAX_HELD`; with ``everything`` (shutdown), also the rest that this process may release (a
      shared state leaves other receivers' retrievals waiting for them).
    * ``settle``: how long a model call that found no held retrieval keeps looking, in later sweeps, before it
      makes a record alone.
    * ``now`` is the pipeline's clock (``time.monotonic()`` seconds); implementations shared between hosts
      time their entries by their own clock and may ignore it.
    """

    window: float
    # how long a model call that found no held retrieval keeps looking (a shared state's other receivers may be
    # holding its retrieval a moment later); 0 for one process, whose sweep holds retrievals before looking
    settle: float = 0.0

    @abc.abstractmethod
    def mark(self, kind: str, service: str | None, now: float) -> None:
        """Note ``service`` as seen writing ``kind`` now."""

    def sync(self, now: float) -> None:
        """Share this process's new marks (nothing to share for one process)."""

    @abc.abstractmethod
    def marked(self, kind: str, now: float) -> set[str | None]:
        """The services seen writing ``kind`` recently."""

    @abc.abstractmethod
    def remember(self, calls: list[duplicates.ModelCall], now: float) -> None:
        """Keep ``calls`` (framework calls of requests completing now) for bare calls to find."""

    @abc.abstractmethod
    def take_twin(self, bare: duplicates.ModelCall, now: float) -> duplicates.ModelCall | None:
        """The remembered call ``bare`` repeats, forgotten as it is returned; None if there is none."""

    @abc.abstractmethod
    def hold(self, held: list[HeldRetrieval], now: float) -> None:
        """Keep retrieval halves until their call comes or the window passes."""

    @abc.abstractmethod
    def take_fed(self, answer: halves.AnswerHalf) -> CompletedTrace | None:
        """The held retrieval that fed ``answer``, removed as it is returned; None if there is none."""

    @abc.abstractmethod
    def release(self, now: float, everything: bool = False) -> list[CompletedTrace]:
        """Held retrievals whose window passed (or all this process may release, with ``everything``)."""

    def oldest_first_seen(self) -> float | None:
        """The earliest ``first_seen`` of the retrievals this process holds (None: none). A shared state, whose
        retrievals live outside this process, answers None: they are not this process's to journal."""
        return None

    def close(self) -> None:
        """Release resources."""


class InMemoryPairingState(PairingState):
    """One process's :class:`PairingState`: ordered dicts, bounded by count and time."""

    def __init__(self, window: float = _DEFAULTS.duplicate_call_window_seconds) -> None:
        self.window = window
        self._marks: dict[str, OrderedDict[str | None, float]] = {MARK_NESTED: OrderedDict(), MARK_BARE: OrderedDict()}
        # by (service, prompt digest): (when remembered, call); and the order they came in, to expire them
        self._calls: dict[tuple[str | None, str], list[tuple[float, duplicates.ModelCall]]] = {}
        self._call_order: deque[tuple[float, tuple[str | None, str]]] = deque()
        self._held: OrderedDict[str, tuple[float, HeldRetrieval]] = OrderedDict()

    def mark(self, kind: str, service: str | None, now: float) -> None:
        services = self._marks[kind]
        services[service] = now
        services.move_to_end(service)
        if len(services) > MAX_SERVICES:
            services.popitem(last=False)

    def marked(self, kind: str, now: float) -> set[str | None]:
        services = self._marks[kind]
        while services and now - next(iter(services.values())) >= SERVICE_MEMORY_SECONDS:
            services.popitem(last=False)
        return set(services)

    def remember(self, calls: list[duplicates.ModelCall], now: float) -> None:
        for call in calls:
            key = (call.service, call.prompt)
            self._calls.setdefault(key, []).append((now, call))
            self._call_order.append((now, key))
        self._expire_calls(now)

    def take_twin(self, bare: duplicates.ModelCall, now: float) -> duplicates.ModelCall | None:
        self._expire_calls(now)
        entries = self._calls.get((bare.service, bare.prompt))
        for i, (_, call) in enumerate(entries or ()):
            if call.trace_id != bare.trace_id and duplicates.encloses(call, bare):
                assert entries is not None
                del entries[i]
                return call
        return None

    def _expire_calls(self, now: float) -> None:
        """Forget calls older than twice the window (and the oldest past :data:`MAX_CALLS`)."""
        horizon = now - max(self.window, 0.0) * 2
        while self._call_order and (self._call_order[0][0] < horizon or len(self._call_order) > MAX_CALLS):
            seen, key = self._call_order.popleft()
            entries = self._calls.get(key)
            if entries:
                self._calls[key] = [e for e in entries if e[0] != seen]
                if not self._calls[key]:
                    del self._calls[key]

    def hold(self, held: list[HeldRetrieval], now: float) -> None:
        for h in held:
            self._held[h.trace.trace_id] = (now, h)

    def take_fed(self, answer: halves.AnswerHalf) -> CompletedTrace | None:
        fed = [h for _, h in self._held.values() if halves.fed(h.half, answer)]
        if not fed:
            return None
        source = max(fed, key=lambda h: h.half.end)  # the latest retrieval before the call
        del self._held[source.trace.trace_id]
        return source.trace

    def oldest_first_seen(self) -> float | None:
        return min((h.trace.first_seen for _, h in self._held.values()), default=None)

    def release(self, now: float, everything: bool = False) -> list[CompletedTrace]:
        out = []
        for trace_id, (since, h) in list(self._held.items()):
            if everything or now - since >= self.window or len(self._held) > MAX_HELD:
                del self._held[trace_id]
                out.append(h.trace)
        return out

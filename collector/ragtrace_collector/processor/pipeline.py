"""The processor's order, written once: spans in → assembly → the joins → completed traces out.

::

    add (receivers' hot path)      assembly/traces.py       spans grouped by trace id until complete
                                   joins/service_marks.py   the services writing model calls, marked
    completed (each sweep)         assembly/traces.py       the traces due (or all, at shutdown)
                                   joins/log_events.py      GenAI log events folded into their spans
                                   joins/requests_only.py   traces that are no request leave, counted
                                   joins/duplicate_calls.py a bare model call merged into its request
                                   joins/split_requests.py  a model call joined to the retrieval that fed it
    then (sweep.py)                records.py               summary → sampling → record → the queue

Each join takes the traces the step before returned and may hold some back across sweeps (see
``joins/join.py``); a trace popped from a shared assembly state stays claimed there until it has left every join
(``settle``), and the journal keeps what any of them still holds (``oldest_first_seen``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ragtrace_collector.config import AssemblyConfig
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import AssemblyState, CompletedTrace
from ragtrace_collector.processor.assembly.traces import AssemblyObserver, LogEventsObserver, TraceAssembly
from ragtrace_collector.processor.joins.duplicate_calls import DuplicateCallsJoin
from ragtrace_collector.processor.joins.join import Join
from ragtrace_collector.processor.joins.log_events import LogEventsJoin
from ragtrace_collector.processor.joins.pairing import InMemoryPairingState, PairingState
from ragtrace_collector.processor.joins.requests_only import RequestsOnly
from ragtrace_collector.processor.joins.service_marks import ServiceMarks
from ragtrace_collector.processor.joins.split_requests import SplitRequestsJoin
from ragtrace_collector.processor.records import record_of


def state_from_config(assembly_config: AssemblyConfig) -> AssemblyState:
    """The in-process state, or the Redis one shared by several receivers when ``shared_state`` is set."""
    if assembly_config.shared_state:
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState

        return RedisAssemblyState.from_config(assembly_config.shared_state, assembly_config)
    return InMemoryAssemblyState(
        grace_seconds=assembly_config.grace_seconds,
        max_wait_seconds=assembly_config.max_wait_seconds,
        max_traces=assembly_config.max_inflight_traces,
        max_bytes=assembly_config.max_inflight_bytes,
        completed_memory=assembly_config.late_span_memory,
    )


def pairing_from_config(assembly_config: AssemblyConfig) -> PairingState:
    """This process's pairing memory, or the Redis one beside the shared in-flight state (``shared_state``)."""
    if assembly_config.shared_state:
        # imported here so a collector without scale-out never imports the redis client
        from ragtrace_collector.processor.joins.redis_pairing import RedisPairingState

        return RedisPairingState(assembly_config.shared_state, window=assembly_config.duplicate_call_window_seconds)
    return InMemoryPairingState(window=assembly_config.duplicate_call_window_seconds)


class Pipeline:
    """Assembly, then the joins in order, over one :class:`AssemblyState` and one :class:`PairingState`.

    ``add`` is cheap (the receivers call it on the hot path); ``completed`` is called by the sweep, which builds
    the records (``records.py``).
    """

    def __init__(
        self,
        state: AssemblyState,
        observer: AssemblyObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
        pairing: PairingState | None = None,
        max_log_only_traces: int = 2_000,
        max_log_only_bytes: int = 32 * 1024 * 1024,
        log_only_seconds: float = 120.0,
    ) -> None:
        self.state = state
        self.observer = observer
        self.clock = clock
        self.pairing = pairing if pairing is not None else InMemoryPairingState()
        self.assembly = TraceAssembly(state, observer, max_log_only_traces, max_log_only_bytes, log_only_seconds)
        self.marks = ServiceMarks(self.pairing)
        self.joins: tuple[Join, ...] = (
            LogEventsJoin(observer if isinstance(observer, LogEventsObserver) else None),
            RequestsOnly(observer),
            DuplicateCallsJoin(self.pairing, self.marks, observer),
            SplitRequestsJoin(self.pairing, self.marks, observer),
        )
        # Popped from the state and still held back by a join: settled only once they leave this process.
        self._holding: set[str] = set()
        # Popped from the state and gone from here in the last ``completed()`` call: what ``settle`` confirms.
        self._leaving: list[str] = []

    def add(self, decoded: DecodedRequest) -> None:
        now = self.clock()
        self.marks.see(decoded, now)
        self.assembly.add(decoded, now)

    def completed(self, limit: int | None = None, everything: bool = False) -> list[CompletedTrace]:
        """Traces ready to become records, past every join (evicted ones first); ``everything`` also takes the
        in-flight ones and lets every join give back what it holds (shutdown)."""
        self._leaving = []  # what the sweep did not settle is popped again after the lease
        now = self.clock()
        traces = self.assembly.pop(now, limit, everything)
        popped = {c.trace_id for c in traces}
        self.marks.sync(now)
        for join in self.joins:
            traces = join.join(traces, now, everything)
        if self.observer is not None:
            for c in traces:
                self.observer.trace_completed(c.reason)
        self._track_popped(popped)
        return traces

    def _track_popped(self, popped: set[str]) -> None:
        """Remember which popped traces left this call (returned, merged into another, dropped as a duplicate,
        or held in the pairing state, which is shared Redis wherever the state is) and which a join holds back.
        Replaced by each call: traces the sweep did not settle (the queue could not write) are popped again
        after the state's lease instead."""
        held = {trace_id for join in self.joins for trace_id in join.held()}
        mine = popped | self._holding
        self._holding = mine & held
        self._leaving = sorted(mine - held)

    def settle(self) -> None:
        """Tell the state that what the last ``completed()`` let go of is safe: the sweep calls it once that
        chunk's records are on the queue (see ``AssemblyState.settle``)."""
        leaving, self._leaving = self._leaving, []
        self.assembly.settle(leaving)

    def oldest_first_seen(self) -> float | None:
        """When the first span of the oldest trace still here arrived — in flight, or completed and held back
        by a join — (None: nothing here): what the assembly journal must keep since."""
        found = [self.assembly.oldest_first_seen(), *(join.oldest_first_seen() for join in self.joins)]
        return min((t for t in found if t is not None), default=None)

    def collect(self, limit: int | None = None, everything: bool = False) -> list[RagRecord]:
        """Build the records of every completed trace (what the sweep does, less sampling and the queue)."""
        return [record_of(c) for c in self.completed(limit, everything)]

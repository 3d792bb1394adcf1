"""Where in-flight traces wait: the :class:`AssemblyState` contract and the types crossing it.

Two implementations: :mod:`.memory` (one process) and :mod:`.redis_state` (several receivers share
one Redis). The policy they follow (grace after the root, max wait, bounds, late spans) is written
in the contract below.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans, classify_spans

REASON_ROOT = "root"  # root span ended + grace
REASON_MAX_WAIT = "max_wait"
REASON_EVICTED = "evicted"  # in-flight bounds exceeded: completed early
REASON_SHUTDOWN = "shutdown"


@dataclass
class CompletedTrace:
    """A trace leaving assembly, with why it was considered complete and when its first span arrived (the
    state's clock; 0.0 where unknown): until it is queued, the assembly journal keeps what was appended since."""

    trace_id: str
    spans: list[SpanData]
    reason: str
    first_seen: float = 0.0
    # the spans classified, with the list and length they were classified from: a join that extends or replaces
    # the spans is classified again, anything else reads the one classification (is_request, summary, record)
    _classified: tuple[list[SpanData], int, TraceSpans] | None = field(default=None, repr=False, compare=False)

    def classified(self) -> TraceSpans:
        """The spans sorted and grouped by role, computed once for the spans as they are now."""
        held = self._classified
        if held is None or held[0] is not self.spans or held[1] != len(self.spans):
            held = self._classified = (self.spans, len(self.spans), classify_spans(self.spans))
        return held[2]


AddItem = tuple[str, list[SpanData], int, bool]  # trace id, its spans, their encoded bytes, a root among them


@dataclass
class AddResult:
    late_spans: int = 0
    evicted: list[CompletedTrace] = field(default_factory=list)


class AssemblyState(abc.ABC):
    """In-flight traces waiting to complete.

    Contract for implementations (in-process here; Redis for several receivers):

    * ``add`` appends spans to a trace (``add_many``: one request's traces at once, the same as ``add`` in order). Spans of a trace completed within the state's memory of
      completed ids are late: they are not stored, and ``AddResult.late_spans`` counts them.
      When the in-flight bounds are exceeded, the oldest traces (by first span) are removed and
      returned in ``AddResult.evicted``. A root span among ``spans`` (``root_seen``) moves the
      trace's deadline to ``now + grace`` if that is earlier than the current one.
    * ``pop_due`` removes and returns traces whose deadline has passed, at most ``limit``; each
      trace is returned once, even when several processes share the state.
    * ``pop_all`` removes and returns every in-flight trace this process answers for (shutdown): in process, all of
      them; a state shared between receivers returns what is due and leaves the rest to the receivers still up.
    * ``settle`` says traces returned by ``pop_due``, ``pop_all`` or ``AddResult.evicted`` are safe now (their
      records are on the queue, or were decided against: not sampled, refused, unbuildable). Until then a state
      shared between processes keeps each as a claim with a lease; one not settled within the lease (its process
      was killed) is returned by a ``pop_due`` again, anywhere. Unsettled claims expire, and do not count against
      the in-flight bounds. The in-process state dies with its process and has nothing to settle (the journal
      covers it).
    * ``now`` is ``time.monotonic()`` seconds for the in-process state; implementations shared
      between hosts use their own clock and may ignore it.
    """

    @abc.abstractmethod
    def add(self, trace_id: str, spans: list[SpanData], nbytes: int, root_seen: bool, now: float) -> AddResult:
        """Store ``spans`` (``nbytes`` encoded bytes) under ``trace_id``."""

    def add_many(self, items: Sequence[AddItem], now: float) -> list[AddResult]:
        """``add`` for each of one request's traces, in order, one result each: the same as calling ``add`` in a
        loop (what this default does); a state shared over the network sends them in one round trip."""
        return [self.add(trace_id, spans, nbytes, root_seen, now) for trace_id, spans, nbytes, root_seen in items]

    @abc.abstractmethod
    def pop_due(self, now: float, limit: int | None = None) -> list[CompletedTrace]:
        """Traces whose completion deadline is ``<= now``, oldest deadline first."""

    @abc.abstractmethod
    def pop_all(self) -> list[CompletedTrace]:
        """Everything in flight this process answers for, with reason ``shutdown`` (see the contract)."""

    def settle(self, trace_ids: Sequence[str]) -> None:
        """Forget the claims on these popped traces (one call per sweep chunk); a no-op where nothing is claimed."""

    @abc.abstractmethod
    def inflight(self) -> tuple[int, int]:
        """(traces, bytes) currently held."""

    def oldest_first_seen(self) -> float | None:
        """When the first span of the oldest trace held arrived (None: nothing held). A state that does not keep
        it (one shared between hosts, whose spans wait outside this process) answers 0.0: "any time"."""
        return 0.0 if self.inflight()[0] else None

    def close(self) -> None:
        """Release resources."""

"""The contract every step after assembly keeps: the traces completed in one sweep in, those that go on out.

Modelled on the OpenTelemetry Collector's processors: each join is a small stage with one job (fold log events
into their spans, make one trace of a request some peer traced as two), and the pipeline
(``processor/pipeline.py``) runs them in one written order, each on what the one before returned.
"""

from __future__ import annotations

import abc
from collections.abc import Collection
from typing import Protocol

from ragtrace_collector.processor.assembly.state import CompletedTrace


class JoinObserver(Protocol):
    """What a join reports: the traces it joined into another or dropped, under its own completion reason."""

    def trace_completed(self, reason: str) -> None: ...


class Join(abc.ABC):
    """One step after assembly.

    Contract (what the pipeline relies on):

    * ``join(traces, now, everything)`` returns the traces that go on, each once. Every trace it is given leaves
      it by then, or is held back: returned (its spans possibly joined with another trace's), moved into a
      returned trace, dropped (another record holds its content), or held for a trace still to come. A held trace
      is returned by a later call, at the latest once the join's window has passed and at the call with
      ``everything`` (shutdown). A trace handed to the ``PairingState`` is the state's to answer for (shared with
      the other receivers, with Redis). ``now`` is the pipeline's clock (``time.monotonic()`` seconds), one
      reading per sweep.
    * It changes what a trace holds only through its ``spans`` list (replaced or extended; a span as received is
      copied before it is changed), so ``CompletedTrace.classified`` classifies the trace again.
    * ``held()``: the ids of the traces it holds back itself (not those handed to the ``PairingState``). They
      have not left: the pipeline does not settle them (``AssemblyState.settle``) until a call returns, moves or
      drops them.
    * ``oldest_first_seen()``: the earliest ``first_seen`` of what it holds in this process (None: nothing), which
      the assembly journal must keep.
    * What it joins or drops it reports to its observer under its own reason; the pipeline reports the rest.
    """

    @abc.abstractmethod
    def join(self, traces: list[CompletedTrace], now: float, everything: bool) -> list[CompletedTrace]:
        """The traces that go on (see the contract)."""

    def held(self) -> Collection[str]:
        """Ids of the traces held back in this process (none: a join that holds nothing)."""
        return ()

    def oldest_first_seen(self) -> float | None:
        """The earliest ``first_seen`` of the traces held back in this process (None: none)."""
        return None


def service_of(trace: CompletedTrace) -> str | None:
    """The service a trace came from (its first span naming one), which the pairing joins match within."""
    return next((s.service for s in trace.spans if s.service), None)

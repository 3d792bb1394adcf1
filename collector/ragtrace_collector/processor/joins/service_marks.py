"""Which services write which kind of trace: only where one request can be traced twice do the joins look.

A model call traced twice (``duplicate_calls.py``) takes a service writing generator spans both nested in
requests and at the root of a trace; a request split in two (``split_requests.py``) a service writing traces
that start with a model call. The marks are noted on the receivers' hot path (``see``), shared once per sweep
(``sync``) and read by those joins (``bare``, ``mixed``), one reading for every join of a sweep. They live in the
:class:`~ragtrace_collector.processor.joins.pairing.PairingState`, shared with the other receivers where it is.
"""

from __future__ import annotations

from ragtrace_collector.model.spans import DecodedRequest
from ragtrace_collector.processor.conventions import duplicates
from ragtrace_collector.processor.joins.pairing import MARK_BARE, MARK_NESTED, PairingState


class ServiceMarks:
    """The services seen writing generator spans nested in a request, and traces whose root is a model call."""

    def __init__(self, pairing: PairingState) -> None:
        self.pairing = pairing
        self._now = 0.0
        self._bare: set[str | None] | None = None
        self._mixed: set[str | None] | None = None

    def see(self, decoded: DecodedRequest, now: float) -> None:
        """Mark the services of the model calls among arriving spans (cheap: the receivers' hot path)."""
        for spans in decoded.traces.values():
            for s in spans:
                if not s.is_log_carrier and duplicates.is_generator(s.attrs):
                    self.pairing.mark(MARK_NESTED if s.parent_id else MARK_BARE, s.service, now)

    def sync(self, now: float) -> None:
        """Start a sweep: share this process's new marks; the readings below are taken afresh, at ``now``."""
        self.pairing.sync(now)
        self._now = now
        self._bare = self._mixed = None

    def bare(self) -> set[str | None]:
        """The services writing traces whose root is a model call (read once per sweep)."""
        if self._bare is None:
            self._bare = self.pairing.marked(MARK_BARE, self._now)
        return self._bare

    def mixed(self) -> set[str | None]:
        """The services writing both kinds: only there can one model call be traced twice."""
        if self._mixed is None:
            bare = self.bare()
            self._mixed = self.pairing.marked(MARK_NESTED, self._now) & bare if bare else set()
        return self._mixed

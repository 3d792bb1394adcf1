"""Label slots kept by recent frequency: a value that keeps recurring takes the slot of a one-shot one.

First come, first served let a flood of one-shot names (junk pipelines) hold every slot of a label, or of a
label set's series budget, and report a steady pipeline arriving later as ``other`` until the junk idled out.
Like a cache admission filter (TinyLFU), :class:`Slots` remembers how often values *without* a slot were seen
recently, in fixed memory (:class:`FrequencySketch`), and lets one take a held slot when it was seen often enough
(:class:`Reclaim`) and more often than the held value it replaces, chosen among the least recently used ones
(like Redis's sampled LFU eviction).

Frequency is counted in distinct seconds (:data:`~ragtrace_collector.telemetry.labels.TOUCH_SECONDS`) a value was
seen in, not in observations: one record passes a label several times, and a burst of one name is still one-shot.
"""

from __future__ import annotations

import random
from array import array
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

# Seconds are counted at this resolution (the labels' TOUCH_SECONDS): a value seen again within one counts once.
PERIOD_SECONDS = 1.0
# Held slots looked at, least recently used first, for the one a recurring value takes (bounded work per value).
EVICTION_SAMPLE = 16
SKETCH_DEPTH = 4
SKETCH_WIDTH = 4096  # cells per row: ~400 new names a second before one-shot names start to look recurring
MAX_COUNT = 255  # counts saturate (a byte a cell); far above any useful hits threshold


@dataclass(frozen=True)
class Reclaim:
    """When a value without a slot takes a held one: it was seen in ``hits`` distinct seconds within the last one
    to two ``window_seconds``, and in more of them than the held value it replaces; ``hits`` 0: never."""

    hits: int = 3
    window_seconds: float = 60.0


class FrequencySketch:
    """In how many distinct seconds each value was seen over the current and previous window, in fixed memory.

    A count-min sketch: each value counts in ``depth`` cells (one a row, salted hashes the senders cannot predict)
    and its estimate is the smallest, never below the truth. A cell counts a second once (``_stamps``), so a cell
    reads the seconds in which any of its values was seen; a flood of new names raises every estimate, which is why
    a held slot also needs to be seen less than its challenger to be taken.
    """

    def __init__(self, window_seconds: float, width: int = SKETCH_WIDTH, depth: int = SKETCH_DEPTH) -> None:
        self.window_seconds = window_seconds
        self.width = width
        self.depth = depth
        self._salt = random.getrandbits(64)
        self._current = bytearray(width * depth)
        self._previous = bytearray(width * depth)
        self._stamps = array("H", bytes(2 * width * depth))  # the second (mod 2**16) each cell last counted
        self._window = -1

    def add(self, key: Hashable, now: float) -> int:
        """Count ``key`` as seen at ``now`` (once a second) and return its estimate."""
        self._rotate(now)
        stamp = int(now // PERIOD_SECONDS) & 0xFFFF
        estimate = MAX_COUNT
        for cell in self._cells(key):
            if self._stamps[cell] != stamp:
                self._stamps[cell] = stamp
                self._current[cell] = min(self._current[cell] + 1, MAX_COUNT)
            estimate = min(estimate, self._current[cell] + self._previous[cell])
        return min(estimate, MAX_COUNT)

    def _cells(self, key: Hashable) -> list[int]:
        h = hash((self._salt, key)) & 0xFFFFFFFFFFFFFFFF
        step = (h >> 32) | 1  # double hashing: depth indexes from one hash
        return [row * self.width + ((h + row * step) % self.width) for row in range(self.depth)]

    def _rotate(self, now: float) -> None:
        """Start a new window when ``now`` is past the current one: what it counted becomes the previous."""
        window = int(now // self.window_seconds)
        if window == self._window:
            return
        size = self.width * self.depth
        self._previous = self._current if window == self._window + 1 else bytearray(size)
        self._current = bytearray(size)
        self._window = window


class _Slot:
    """A held value's last use and the distinct seconds it was seen in, per window (kept lazily)."""

    __slots__ = ("before", "hits", "last", "period", "window")

    def __init__(self, now: float, window: int, hits: int) -> None:
        self.last = now
        self.period = int(now // PERIOD_SECONDS)
        self.window = window
        self.hits = hits  # seconds seen in during ``window``
        self.before = 0  # seconds seen in during the window before it

    def recent(self, window: int) -> int:
        """Seconds seen in over the current and previous window."""
        if self.window == window:
            return self.hits + self.before
        return self.hits if self.window == window - 1 else 0

    def touch(self, now: float, window: int) -> None:
        self.last = now
        period = int(now // PERIOD_SECONDS)
        if period == self.period:
            return
        self.period = period
        if window != self.window:
            self.before = self.hits if window == self.window + 1 else 0
            self.hits = 0
            self.window = window
        self.hits = min(self.hits + 1, MAX_COUNT)


class Slots(Generic[K]):
    """Held values (least recently used first) with their recent frequency, and that of values turned away.

    The caller decides when there is room and holds its own lock around everything but :meth:`fresh`.
    """

    def __init__(self, idle_seconds: float, reclaim: Reclaim) -> None:
        self.idle_seconds = idle_seconds
        self.reclaim = reclaim
        self._held: OrderedDict[K, _Slot] = OrderedDict()
        self._sketch = FrequencySketch(reclaim.window_seconds) if reclaim.hits else None

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def fresh(self, key: K, now: float) -> bool:
        """Whether ``key`` is held and already counted this second (no lock needed: the hot path)."""
        slot = self._held.get(key)
        return slot is not None and slot.period == int(now // PERIOD_SECONDS)

    def touch(self, key: K, now: float) -> bool:
        """Count a use of ``key`` if it is held (then it becomes the most recently used)."""
        slot = self._held.get(key)
        if slot is None:
            return False
        slot.touch(now, self._window(now))
        self._held.move_to_end(key)
        return True

    def add(self, key: K, now: float, hits: int = 1) -> None:
        """Hold ``key``, seen in ``hits`` recent seconds (a reclaimed value keeps the count that won its slot)."""
        self._held[key] = _Slot(now, self._window(now), hits)

    def remove(self, key: K) -> None:
        self._held.pop(key, None)

    def expire(self, now: float) -> list[K]:
        """Drop (and return) the held keys unused for ``idle_seconds``."""
        cutoff = now - self.idle_seconds
        gone = []
        while self._held:
            key, slot = next(iter(self._held.items()))
            if slot.last > cutoff:
                break
            del self._held[key]
            gone.append(key)
        return gone

    def turned_away(self, key: K, now: float) -> int:
        """Count a use of ``key`` that has no slot; returns in how many recent seconds it was seen."""
        return self._sketch.add(key, now) if self._sketch is not None else 0

    def victim(self, hits: int, now: float, keep: K | None = None) -> K | None:
        """The held key a value seen in ``hits`` recent seconds may take: among the least recently used, the
        one seen in fewest (the least recent of those), if fewer than ``hits``; ``None`` below the threshold."""
        if not self.reclaim.hits or hits < self.reclaim.hits:
            return None
        window = self._window(now)
        best: K | None = None
        fewest = hits
        for i, (key, slot) in enumerate(self._held.items()):
            if i >= EVICTION_SAMPLE:
                break
            seen = slot.recent(window)
            if seen < fewest and key != keep:
                best, fewest = key, seen
        return best

    def _window(self, now: float) -> int:
        return int(now // self.reclaim.window_seconds)

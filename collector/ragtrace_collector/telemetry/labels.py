"""Label values from the traffic (service, pipeline, model names): sanitised, bounded as a product, expiring.

Whoever sends spans chooses these names, so three guards stand between them and ``/metrics``:

* :func:`clean_label` — the one place such a value becomes a label: characters that are not printable
  (control, format such as bidi overrides, separators, surrogates) become ``_`` and the length is capped,
  so a scrape never carries a client's terminal escapes or NULs.
* :class:`BoundedLabel` — at most ``limit`` distinct values of one label; later ones are ``other``.
* :class:`LabelSet` — the metric families that share a set of traffic labels admit a label *combination*
  while its series fit ``max_series`` (each label bounded alone still multiplies: 6 services x 50
  pipelines x 30 models made ~680k series, a histogram combination being ~18 of them); past that the
  combination's traffic labels become ``other`` and ``ragtrace_metric_series_overflow_total{metric}``
  counts each observation sent there.

Slots of both expire: a value or combination unused for ``idle_seconds`` frees its slot and the
combination's series are removed from the registry, so names sent first (junk at start-up) cannot keep
real ones in ``other`` for the life of the process. Nor for ``idle_seconds``: slots are kept by recent
frequency (:mod:`ragtrace_collector.telemetry.slots`), so a value turned away that keeps recurring
(:class:`~ragtrace_collector.telemetry.slots.Reclaim`) takes the slot of a one-shot one within a few seconds;
an evicted combination's series are removed and counted in ``ragtrace_metric_series_evicted_total{metric}``.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

from ragtrace_collector.telemetry.slots import PERIOD_SECONDS, Reclaim, Slots

OTHER = "other"
UNKNOWN = "unknown"
MAX_LABEL_CHARS = 128
REPLACEMENT = "_"
# Last-use times, expiry and recent frequency are kept to this resolution: a value used again within it takes no lock.
TOUCH_SECONDS = PERIOD_SECONDS

Clock = Callable[[], float]
# A family of a label set and the constant label values that follow the set's own (e.g. ``("input",)``).
Member = tuple[MetricWrapperBase, tuple[tuple[str, ...], ...]]


def clean_label(value: object) -> str:
    """``value`` as a label value safe to expose: ``unknown`` when missing, capped, non-printables as ``_``."""
    if value is None or value == "":
        return UNKNOWN
    text = str(value)[:MAX_LABEL_CHARS]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else REPLACEMENT for c in text)


class BoundedLabel:
    """At most ``limit`` distinct values of one label, the rest ``other``; a value unused for
    ``idle_seconds`` frees its slot, and one turned away that recurs takes a one-shot value's (``reclaim``),
    so values seen first cannot hold the label for good, nor for ``idle_seconds``."""

    def __init__(
        self, limit: int, idle_seconds: float, clock: Clock = time.monotonic, reclaim: Reclaim | None = None
    ) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.reclaim = reclaim if reclaim is not None else Reclaim()
        self._slots: Slots[str] = Slots(idle_seconds, self.reclaim)
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        return self.admit(clean_label(value))

    def admit(self, text: str) -> str:
        """``text`` (already :func:`clean_label`-ed) if it holds or wins a slot, else ``other``."""
        if text in (UNKNOWN, OTHER):
            return text
        now = self.clock()
        if self._slots.fresh(text, now):
            return text
        with self._lock:
            self._slots.expire(now)
            if self._slots.touch(text, now):
                return text
            if len(self._slots) < self.limit:
                self._slots.add(text, now)
                return text
            hits = self._slots.turned_away(text, now)
            victim = self._slots.victim(hits, now)
            if victim is None:
                return OTHER
            self._slots.remove(victim)
            self._slots.add(text, now, hits)
            return text


def series_per_child(metric: MetricWrapperBase) -> int:
    """Series one label combination of ``metric`` exposes: a histogram's buckets (``+Inf`` included),
    ``_sum``, ``_count`` and ``_created``; a counter's ``_total`` and ``_created``; else one."""
    if isinstance(metric, Histogram):
        return len(metric._upper_bounds) + 3
    if isinstance(metric, Counter):
        return 2
    return 1


_overflow: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_evicted: weakref.WeakKeyDictionary[Counter, Counter] = weakref.WeakKeyDictionary()  # overflow -> its registry's
_overflow_lock = threading.Lock()


def series_overflow(registry: CollectorRegistry) -> Counter:
    """The registry's one ``ragtrace_metric_series_overflow_total{metric}`` (ingest and scoring share it), and
    with it the registry's ``ragtrace_metric_series_evicted_total{metric}`` (:func:`series_evicted`)."""
    with _overflow_lock:
        counter = _overflow.get(registry)
        if counter is None:
            counter = _overflow[registry] = Counter(
                "ragtrace_metric_series_overflow",
                "Observations recorded under an 'other' label combination because their metric's label set "
                "was at its series cap (limits.max_series_per_label_set).",
                ("metric",),
                registry=registry,
            )
            _evicted[counter] = Counter(
                "ragtrace_metric_series_evicted",
                "Label combinations removed, series and all, to give their slot to one seen more often recently "
                "(a recurring value turned away into 'other' by a label set at its series cap).",
                ("metric",),
                registry=registry,
            )
        return counter


def series_evicted(overflow: Counter) -> Counter | None:
    """The eviction counter registered with ``overflow`` by :func:`series_overflow` (``None`` for another)."""
    with _overflow_lock:
        return _evicted.get(overflow)


class LabelSet:
    """Metric families sharing one set of labels, bounded in series as a product of their values.

    ``labels`` gives, per position of the set, the :class:`BoundedLabel` its traffic value goes through,
    or ``None`` for a value the code chooses (metric, judge, reason), used as is. A combination costs the
    series of every member (:func:`series_per_child` x its suffixes) and is admitted while the set's series
    stay within ``max_series``; otherwise it is recorded as the combination with its traffic labels
    ``other`` (always admitted; it is what the cap makes room for) and counted in
    ``ragtrace_metric_series_overflow_total``. A combination unused for ``idle_seconds`` is removed
    from every member (``.remove(*labels)``) and frees its series. One turned away (by the cap or by one of
    its labels) that keeps recurring takes the slot of a combination seen less often recently (``reclaim``,
    by default its first label's), whose series are removed and counted in ``ragtrace_metric_series_evicted_total``.
    """

    def __init__(
        self,
        members: Sequence[Member],
        labels: Sequence[BoundedLabel | None],
        *,
        max_series: int,
        idle_seconds: float,
        overflow: Counter,
        clock: Clock = time.monotonic,
        reclaim: Reclaim | None = None,
        evicted: Counter | None = None,
    ) -> None:
        self.members = tuple(members)
        self.bounds = tuple(labels)
        self.max_series = max_series
        self.idle_seconds = idle_seconds
        self.clock = clock
        if reclaim is None:
            reclaim = next((b.reclaim for b in self.bounds if b is not None), Reclaim())
        self.cost = sum(series_per_child(metric) * len(suffixes) for metric, suffixes in self.members)
        self.series = 0  # series of the admitted combinations
        names = tuple(next(iter(m.describe())).name for m, _ in self.members)
        self._overflowed = tuple(overflow.labels(name) for name in names)
        evicted = evicted if evicted is not None else series_evicted(overflow)
        self._evicted = tuple(evicted.labels(name) for name in names) if evicted is not None else ()
        self._slots: Slots[tuple[str, ...]] = Slots(idle_seconds, reclaim)
        self._children: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self._sweep_due = -math.inf  # when idle combinations are next looked for
        self._lock = threading.Lock()

    def labels(self, *values: object, times: int = 1) -> tuple[str, ...]:
        """The label values to record ``values`` under: their own while they have room, else ``other``; ``times``
        observations of them (an overflow counts each; slots count the seconds a value is seen in, so one call
        stands for all of one moment's)."""
        own = tuple(str(v) if b is None else clean_label(v) for b, v in zip(self.bounds, values))
        key = tuple(v if b is None else b.admit(v) for b, v in zip(self.bounds, own))
        now = self.clock()
        if now < self._sweep_due and key == own and self._slots.fresh(key, now):
            return key
        with self._lock:
            if now >= self._sweep_due:
                self._sweep_due = now + TOUCH_SECONDS
                for gone in self._slots.expire(now):
                    self._drop(gone)
            if key != own:  # a label turned it away: how often it recurs decides whether it wins a slot later
                self._slots.turned_away(own, now)
            if self._slots.touch(key, now):
                return key
            spill = tuple(OTHER if b is not None else v for b, v in zip(self.bounds, key))
            if key == spill or self.series + self.cost <= self.max_series:
                self._admit(key, now)
                return key
            hits = self._reclaim(key, now, spill) if key == own else 0
            if hits:
                self._admit(key, now, hits)
                return key
            for counter in self._overflowed:
                counter.inc(times)
            if not self._slots.touch(spill, now):
                self._admit(spill, now)
            return spill

    def children(self, *values: object, times: int = 1) -> tuple[Any, ...]:
        """Every member's child for ``values`` (members in order, each with its suffixes), cached; ``times`` as in
        :meth:`labels`."""
        key = self.labels(*values, times=times)
        children = self._children.get(key)
        if children is None:
            children = tuple(m.labels(*key, *s) for m, suffixes in self.members for s in suffixes)
            self._children[key] = children
        return children

    def _reclaim(self, key: tuple[str, ...], now: float, spill: tuple[str, ...]) -> int:
        """Free the slot ``key`` may take as it recurs (see :meth:`Slots.victim`); returns in how many recent
        seconds it was seen, 0 when it takes none."""
        hits = self._slots.turned_away(key, now)
        victim = self._slots.victim(hits, now, keep=spill)
        if victim is None:
            return 0
        self._drop(victim)
        for counter in self._evicted:
            counter.inc()
        return hits

    def _admit(self, key: tuple[str, ...], now: float, hits: int = 1) -> None:
        self._slots.add(key, now, hits)
        self.series += self.cost

    def _drop(self, key: tuple[str, ...]) -> None:
        self._slots.remove(key)
        self.series -= self.cost
        self._children.pop(key, None)
        for metric, suffixes in self.members:
            for suffix in suffixes:
                metric.remove(*key, *suffix)

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
real ones in ``other`` for the life of the process.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics import MetricWrapperBase

OTHER = "other"
UNKNOWN = "unknown"
MAX_LABEL_CHARS = 128
REPLACEMENT = "_"
# Last-use times and expiry are kept to this resolution: a value used again within it takes no lock.
TOUCH_SECONDS = 1.0

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


def _expire(last_used: OrderedDict[Any, float], cutoff: float) -> list[Any]:
    """Drop (and return) the entries last used before ``cutoff``; ``last_used`` is least recent first."""
    gone = []
    while last_used:
        key, last = next(iter(last_used.items()))
        if last > cutoff:
            break
        del last_used[key]
        gone.append(key)
    return gone


class BoundedLabel:
    """At most ``limit`` distinct values of one label, the rest ``other``; a value unused for
    ``idle_seconds`` frees its slot, so values seen first cannot hold the label for good."""

    def __init__(self, limit: int, idle_seconds: float, clock: Clock = time.monotonic) -> None:
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.clock = clock
        self._last_used: OrderedDict[str, float] = OrderedDict()  # value -> last use, least recent first
        self._lock = threading.Lock()

    def __call__(self, value: object) -> str:
        text = clean_label(value)
        if text in (UNKNOWN, OTHER):
            return text
        now = self.clock()
        last = self._last_used.get(text)
        if last is not None and now - last < TOUCH_SECONDS:
            return text
        with self._lock:
            _expire(self._last_used, now - self.idle_seconds)
            if text in self._last_used:
                self._last_used[text] = now
                self._last_used.move_to_end(text)
                return text
            if len(self._last_used) >= self.limit:
                return OTHER
            self._last_used[text] = now
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
_overflow_lock = threading.Lock()


def series_overflow(registry: CollectorRegistry) -> Counter:
    """The registry's one ``ragtrace_metric_series_overflow_total{metric}`` (ingest and scoring share it)."""
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
        return counter


class LabelSet:
    """Metric families sharing one set of labels, bounded in series as a product of their values.

    ``labels`` gives, per position of the set, the :class:`BoundedLabel` its traffic value goes through,
    or ``None`` for a value the code chooses (metric, judge, reason), used as is. A combination costs the
    series of every member (:func:`series_per_child` x its suffixes) and is admitted while the set's series
    stay within ``max_series``; otherwise it is recorded as the combination with its traffic labels
    ``other`` (always admitted; it is what the cap makes room for) and counted in
    ``ragtrace_metric_series_overflow_total``. A combination unused for ``idle_seconds`` is removed
    from every member (``.remove(*labels)``) and frees its series.
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
    ) -> None:
        self.members = tuple(members)
        self.bounds = tuple(labels)
        self.max_series = max_series
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.cost = sum(series_per_child(metric) * len(suffixes) for metric, suffixes in self.members)
        self.series = 0  # series of the admitted combinations
        self._overflowed = tuple(overflow.labels(next(iter(m.describe())).name) for m, _ in self.members)
        self._last_used: OrderedDict[tuple[str, ...], float] = OrderedDict()  # least recently used first
        self._children: dict[tuple[str, ...], tuple[Any, ...]] = {}
        self._sweep_due = -math.inf  # when idle combinations are next looked for
        self._lock = threading.Lock()

    def labels(self, *values: object) -> tuple[str, ...]:
        """The label values to record ``values`` under: their own while they have room, else ``other``."""
        key = tuple(str(v) if b is None else b(v) for b, v in zip(self.bounds, values))
        now = self.clock()
        last = self._last_used.get(key)
        if last is not None and now - last < TOUCH_SECONDS and now < self._sweep_due:
            return key
        with self._lock:
            if now >= self._sweep_due:
                self._sweep_due = now + TOUCH_SECONDS
                for gone in _expire(self._last_used, now - self.idle_seconds):
                    self._drop(gone)
            if key in self._last_used:
                self._last_used[key] = now
                self._last_used.move_to_end(key)
                return key
            spill = tuple(OTHER if b is not None else v for b, v in zip(self.bounds, key))
            if key != spill and self.series + self.cost > self.max_series:
                for counter in self._overflowed:
                    counter.inc()
                key = spill
                if key in self._last_used:
                    self._last_used[key] = now
                    self._last_used.move_to_end(key)
                    return key
            self._last_used[key] = now
            self.series += self.cost
            return key

    def children(self, *values: object) -> tuple[Any, ...]:
        """Every member's child for ``values`` (members in order, each with its suffixes), cached."""
        key = self.labels(*values)
        children = self._children.get(key)
        if children is None:
            children = tuple(m.labels(*key, *s) for m, suffixes in self.members for s in suffixes)
            self._children[key] = children
        return children

    def _drop(self, key: tuple[str, ...]) -> None:
        self.series -= self.cost
        self._children.pop(key, None)
        for metric, suffixes in self.members:
            for suffix in suffixes:
                metric.remove(*key, *suffix)

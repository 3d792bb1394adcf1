"""``ragtrace_judge_agreement{metric,judge,statistic,population}`` in ``/metrics``: judge vs human, live.

A custom collector reading :class:`~ragtrace_collector.review.agreement.AgreementSource`'s cached report: a scrape
never scans the results store (the report is recomputed at most every ``review.agreement_cache_seconds``, from the
reviews and their records' scores only), and ``/metrics`` is collected off the event loop. Series are bounded:
``review.max_agreement_series`` (metric, judge) pairs, the most reviewed first, times the statistics of
:meth:`~ragtrace_collector.review.agreement.Agreement.statistics` and the two populations.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ragtrace_collector.review.agreement import AgreementSource

log = logging.getLogger(__name__)

NAME = "ragtrace_judge_agreement"
LABELS = ("metric", "judge", "statistic", "population")
DOC = (
    "Judge vs human reviewers per metric and judge, over the reviews of review.agreement_window_days: statistic"
    " reviewed (n), tp/fp/tn/fn (positive: the answer is bad; the judge's call is its score against the alert"
    " threshold), balanced_accuracy and kappa with their 95% bootstrap interval (_low, _high), auroc, best_threshold"
    " (and the best_balanced_accuracy it reaches); population sample (the uniform random sample: the honest"
    " estimate) or all (every review)."
)


class AgreementCollector(Collector):
    """Exposes the cached agreement report (see the module docstring)."""

    def __init__(self, source: AgreementSource, max_pairs: int) -> None:
        self.source = source
        self.max_pairs = max_pairs

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(NAME, DOC, labels=LABELS)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(NAME, DOC, labels=LABELS)
        try:
            report = self.source.report()
        except Exception as exc:  # a store that cannot be read now: the rest of /metrics still answers
            log.warning("judge agreement unavailable: %s", exc)
            yield family
            return
        kept: list[tuple[str, str]] = []
        for row in report.rows:  # most reviewed first
            pair = (row.metric, row.judge)
            if pair not in kept:
                if len(kept) >= self.max_pairs:
                    continue
                kept.append(pair)
            for statistic, value in row.statistics().items():
                family.add_metric([row.metric, row.judge, statistic, row.population], value)
        yield family

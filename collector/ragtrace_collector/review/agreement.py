"""How often each judge agrees with the reviewers, per (metric, judge): the live answer to "can we trust it?".

A review's human label (:attr:`~ragtrace_collector.review.labels.Review.unfaithful`, positive = the answer is bad)
is set against the judge's binary call on the same record and metric: the score on the bad side of the alert
threshold for that metric and pipeline (the thresholds table the alerts and the explorer's chips read; 0.5 where
the table has no row), so "agreement" means agreement of the thing that pages. Several reviewers of one record's
metric give one label, their majority (a tie is left out). Per (metric, judge):

- counts: ``n`` and the confusion matrix (``tp``: both say bad, ``fp``: only the judge, ``fn``: only the human);
- balanced accuracy and Cohen's kappa (``review/statistics.py``), each with a 95% **bootstrap percentile
  interval** (:data:`BOOTSTRAP_ROUNDS` resamples of the pairs with the fixed seed :data:`BOOTSTRAP_SEED`, so the
  same reviews always give the same interval);
- AUROC of the score against the human label (threshold-free: does the score rank bad answers lower at all?);
- the best threshold: of the observed scores, the cut that maximises balanced accuracy with the reviewers (ties go
  to the cut nearest the current threshold), with the balanced accuracy it would reach.

Two populations: ``sample`` — reviews of records in the uniform random sample (:func:`in_sample`, a function of the
trace id alone, so no review needs to say where it came from): the honest estimate; ``all`` — every review, which
over-represents the low scores and disagreements the queue also offers (hard cases, so lower agreement).

Figures are computed from the reviews of the last ``review.agreement_window_days`` and the judged scores of those
records only — never a scan of the results store — and cached (:class:`AgreementSource`), so a ``/metrics`` scrape
reads a cached report.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from ragtrace_collector.config import ReviewConfig
from ragtrace_collector.review.labels import LabelStore, Review
from ragtrace_collector.review.statistics import Confusion, auroc, balanced_accuracy, cohen_kappa, confusion
from ragtrace_collector.scoring.results_store import JudgedScore, ResultsStore

DEFAULT_THRESHOLD = 0.5  # the judge's call where the thresholds table has no row for the metric
BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_SEED = 20_240_601
MAX_CUTS = 512  # candidate thresholds swept at most (quantiles of the scores beyond it)
Population = Literal["sample", "all"]
POPULATIONS: tuple[Population, ...] = ("sample", "all")


class Cutoff(Protocol):
    """One alert threshold: its value and which side is good (the explorer's ``Threshold``)."""

    @property
    def value(self) -> float: ...

    @property
    def higher_is_better(self) -> bool: ...


class Cutoffs(Protocol):
    """The thresholds table by (metric, pipeline) (the explorer's ``Thresholds``; passed in: review does not import
    the explorer)."""

    def get(self, metric: str, pipeline: str | None) -> Cutoff | None: ...


def sample_position(trace_id: str) -> float:
    """Where a trace id falls in [0, 1): the first 8 bytes of its SHA-256. Uniform whatever the ids look like."""
    return int.from_bytes(hashlib.sha256(trace_id.encode()).digest()[:8], "big") / 2.0**64


def in_sample(trace_id: str, rate: float) -> bool:
    """Whether the record is in the uniform random sample of ``rate`` (nested: a lower rate keeps a subset)."""
    return sample_position(trace_id) < rate


def judged_bad(score: float, pipeline: str | None, metric: str, higher_is_better: bool, cutoffs: Cutoffs) -> bool:
    """The judge's binary call: the score on the bad side of the metric's (pipeline's) alert threshold."""
    row = cutoffs.get(metric, pipeline)
    value, hib = (row.value, row.higher_is_better) if row is not None else (DEFAULT_THRESHOLD, higher_is_better)
    return score < value if hib else score > value


def threshold_of(metric: str, pipeline: str | None, cutoffs: Cutoffs) -> float:
    """The alert threshold the judge's call uses for this metric and pipeline."""
    row = cutoffs.get(metric, pipeline)
    return row.value if row is not None else DEFAULT_THRESHOLD


@dataclass(frozen=True)
class Pair:
    """One record's judged score beside the reviewers' label."""

    trace_id: str
    score: float
    threshold: float
    judge_bad: bool
    human_bad: bool
    in_sample: bool


@dataclass(frozen=True)
class Agreement:
    """One judge against the reviewers on one metric, over one population (see the module docstring)."""

    metric: str
    judge: str
    population: Population
    n: int
    confusion: Confusion
    higher_is_better: bool
    thresholds: tuple[float, ...]  # the alert thresholds the judge's calls used (one per pipeline row)
    balanced_accuracy: float | None
    balanced_accuracy_low: float | None
    balanced_accuracy_high: float | None
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None
    auroc: float | None
    best_threshold: float | None
    best_balanced_accuracy: float | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["confusion"] = {**asdict(self.confusion), "n": self.confusion.n}
        data["thresholds"] = list(self.thresholds)
        return data

    def statistics(self) -> dict[str, float]:
        """The figures ``ragtrace_judge_agreement`` exports (undefined ones left out)."""
        values: dict[str, float | None] = {
            "reviewed": float(self.n),
            "tp": float(self.confusion.tp),
            "fp": float(self.confusion.fp),
            "tn": float(self.confusion.tn),
            "fn": float(self.confusion.fn),
            "balanced_accuracy": self.balanced_accuracy,
            "balanced_accuracy_low": self.balanced_accuracy_low,
            "balanced_accuracy_high": self.balanced_accuracy_high,
            "kappa": self.kappa,
            "kappa_low": self.kappa_low,
            "kappa_high": self.kappa_high,
            "auroc": self.auroc,
            "best_threshold": self.best_threshold,
            "best_balanced_accuracy": self.best_balanced_accuracy,
        }
        return {name: value for name, value in values.items() if value is not None}


@dataclass(frozen=True)
class AgreementReport:
    """Every (metric, judge, population) row, most reviewed first, and what was left out and why."""

    rows: list[Agreement]
    computed_at: float  # unix seconds
    since: float  # the reviews considered were made at or after this
    sample_rate: float
    labelled: int  # records' metrics with a human label (majority of their reviewers)
    ties: int  # records' metrics whose reviewers are split evenly: left out
    unjudged: int  # labelled records' metrics the store holds no score of (yet, or no longer)
    pairs: dict[tuple[str, str], list[Pair]] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "computed_at": self.computed_at,
            "since": self.since,
            "sample_rate": self.sample_rate,
            "labelled": self.labelled,
            "ties": self.ties,
            "unjudged": self.unjudged,
            "agreement": [r.to_dict() for r in self.rows],
        }


def human_labels(reviews: Iterable[Review]) -> tuple[dict[tuple[str, str], bool], int]:
    """(trace id, metric) → the reviewers' majority label (True: bad), and how many were ties."""
    votes: dict[tuple[str, str], Counter[bool]] = {}
    for review in reviews:
        label = review.unfaithful
        if label is not None:
            votes.setdefault((review.trace_id, review.metric), Counter())[label] += 1
    labels: dict[tuple[str, str], bool] = {}
    ties = 0
    for key, counted in votes.items():
        if counted[True] == counted[False]:
            ties += 1
        else:
            labels[key] = counted[True] > counted[False]
    return labels, ties


def pairs_by_judge(
    labels: dict[tuple[str, str], bool], scores: Iterable[JudgedScore], cutoffs: Cutoffs, sample_rate: float
) -> tuple[dict[tuple[str, str], list[Pair]], dict[tuple[str, str], bool]]:
    """(metric, judge) → its pairs (one per record: a judge's latest-read score), and each pair group's direction."""
    chosen: dict[tuple[str, str, str], JudgedScore] = {}
    for s in scores:
        if (s.trace_id, s.metric) in labels:
            chosen[(s.metric, s.judge, s.trace_id)] = s
    groups: dict[tuple[str, str], list[Pair]] = {}
    direction: dict[tuple[str, str], bool] = {}
    for (metric, judge, trace_id), s in sorted(chosen.items()):
        groups.setdefault((metric, judge), []).append(
            Pair(
                trace_id=trace_id,
                score=s.score,
                threshold=threshold_of(metric, s.pipeline, cutoffs),
                judge_bad=judged_bad(s.score, s.pipeline, metric, s.higher_is_better, cutoffs),
                human_bad=labels[(trace_id, metric)],
                in_sample=in_sample(trace_id, sample_rate),
            )
        )
        direction[(metric, judge)] = s.higher_is_better
    return groups, direction


def summarize(metric: str, judge: str, population: Population, pairs: Sequence[Pair], hib: bool) -> Agreement:
    """The figures of one group of pairs."""
    binary = [(p.human_bad, p.judge_bad) for p in pairs]
    labels = np.array([p.human_bad for p in pairs], dtype=bool)
    predicted = np.array([p.judge_bad for p in pairs], dtype=bool)
    scores = np.array([p.score for p in pairs], dtype=float)
    ba_ci, kappa_ci = bootstrap_intervals(labels, predicted)
    thresholds = tuple(sorted({p.threshold for p in pairs}))
    best, best_ba = best_threshold(labels, scores, hib, thresholds[0] if thresholds else DEFAULT_THRESHOLD)
    return Agreement(
        metric=metric,
        judge=judge,
        population=population,
        n=len(pairs),
        confusion=confusion(binary),
        higher_is_better=hib,
        thresholds=thresholds,
        balanced_accuracy=balanced_accuracy(binary),
        balanced_accuracy_low=ba_ci[0],
        balanced_accuracy_high=ba_ci[1],
        kappa=cohen_kappa(binary),
        kappa_low=kappa_ci[0],
        kappa_high=kappa_ci[1],
        # a higher score means more likely bad for AUROC: a higher-is-better score is negated
        auroc=auroc([(p.human_bad, -p.score if hib else p.score) for p in pairs]),
        best_threshold=best,
        best_balanced_accuracy=best_ba,
    )


Interval = tuple[float | None, float | None]


def bootstrap_intervals(labels: np.ndarray, predicted: np.ndarray) -> tuple[Interval, Interval]:
    """95% percentile intervals of balanced accuracy and kappa over :data:`BOOTSTRAP_ROUNDS` resamples (seeded).
    Resamples where balanced accuracy is undefined (one class only) are left out of its interval."""
    n = len(labels)
    if n < 2:
        return (None, None), (None, None)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    picks = rng.integers(0, n, size=(BOOTSTRAP_ROUNDS, n))
    lab, pred = labels[picks], predicted[picks]
    tp = (lab & pred).sum(axis=1)
    tn = (~lab & ~pred).sum(axis=1)
    fp = (~lab & pred).sum(axis=1)
    fn = (lab & ~pred).sum(axis=1)
    observed = (tp + tn) / n
    p_label, p_pred = (tp + fn) / n, (tp + fp) / n
    expected = p_label * p_pred + (1 - p_label) * (1 - p_pred)
    certain = expected >= 1.0  # cohen_kappa's convention: 1 when both always say the same, else 0
    kappa = np.where(
        certain, np.where(observed >= 1.0, 1.0, 0.0), (observed - expected) / np.where(certain, 1.0, 1.0 - expected)
    )
    positives, negatives = tp + fn, tn + fp
    defined = (positives > 0) & (negatives > 0)
    ba = (tp[defined] / positives[defined] + tn[defined] / negatives[defined]) / 2.0
    kappa_ci = (float(np.percentile(kappa, 2.5)), float(np.percentile(kappa, 97.5)))
    ba_ci: Interval = (float(np.percentile(ba, 2.5)), float(np.percentile(ba, 97.5))) if len(ba) else (None, None)
    return ba_ci, kappa_ci


def best_threshold(
    labels: np.ndarray, scores: np.ndarray, higher_is_better: bool, current: float
) -> tuple[float | None, float | None]:
    """The observed score that, as the threshold (bad below it, or above it where lower is better), agrees best
    with the reviewers by balanced accuracy — or ``current`` itself where it makes the same calls as a best one —
    and that balanced accuracy; ties go to the cut nearest ``current``. None without both classes."""
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return None, None
    cuts = np.unique(scores)
    if len(cuts) > MAX_CUTS:
        cuts = np.unique(np.quantile(scores, np.linspace(0.0, 1.0, MAX_CUTS)))
    if higher_is_better:  # bad below the cut: the highest score gets a cut above it too (everything bad)
        cuts = np.append(cuts, np.nextafter(cuts[-1], np.inf))
        predicted = scores[None, :] < cuts[:, None]
    else:
        cuts = np.insert(cuts, 0, np.nextafter(cuts[0], -np.inf))
        predicted = scores[None, :] > cuts[:, None]
    recall_bad = (predicted & labels[None, :]).sum(axis=1) / positives
    recall_good = (~predicted & ~labels[None, :]).sum(axis=1) / negatives
    ba = (recall_bad + recall_good) / 2.0
    best = np.flatnonzero(np.isclose(ba, ba.max()))
    for i in best:  # the current threshold where it makes the same calls as a best cut: nothing to change
        if higher_is_better:  # bad below: every threshold in (previous cut, this cut] calls the same
            same = (cuts[i - 1] if i > 0 else -np.inf) < current <= cuts[i]
        else:  # bad above: every threshold in [this cut, next cut) calls the same
            same = cuts[i] <= current < (cuts[i + 1] if i + 1 < len(cuts) else np.inf)
        if same:
            return float(current), float(ba[i])
    pick = best[np.argmin(np.abs(cuts[best] - current))]
    return float(cuts[pick]), float(ba[pick])


def compute_agreement(
    labels: LabelStore,
    store: ResultsStore | None,
    cutoffs: Cutoffs,
    sample_rate: float,
    since: float,
    now: float | None = None,
) -> AgreementReport:
    """The report over the reviews made since ``since`` (see the module docstring)."""
    human, ties = human_labels(labels.reviews(since=since))
    scores = store.judged_scores(sorted({t for t, _ in human})) if store is not None and human else []
    groups, direction = pairs_by_judge(human, scores, cutoffs, sample_rate)
    judged = {(p.trace_id, metric) for (metric, _), pairs in groups.items() for p in pairs}
    rows: list[Agreement] = []
    for (metric, judge), pairs in groups.items():
        hib = direction[(metric, judge)]
        rows.append(summarize(metric, judge, "all", pairs, hib))
        rows.append(summarize(metric, judge, "sample", [p for p in pairs if p.in_sample], hib))
    rows.sort(key=lambda r: (-len(groups[(r.metric, r.judge)]), r.metric, r.judge, r.population))
    return AgreementReport(
        rows=rows,
        computed_at=time.time() if now is None else now,
        since=since,
        sample_rate=sample_rate,
        labelled=len(human),
        ties=ties,
        unjudged=len(set(human) - judged),
        pairs=groups,
    )


class AgreementSource:
    """The agreement report, recomputed at most every ``review.agreement_cache_seconds`` (or after
    :meth:`invalidate`, when a review is stored); one computation at a time, others read the previous report.
    Call it off the event loop: it reads SQLite."""

    def __init__(
        self,
        results: Callable[[], ResultsStore | None],
        labels: LabelStore,
        cutoffs: Cutoffs,
        config: ReviewConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.results, self.labels, self.cutoffs, self.config = results, labels, cutoffs, config
        self.clock = clock
        self._lock = threading.Lock()
        self._report: AgreementReport | None = None
        self._at = 0.0
        self._dirty = True

    def invalidate(self) -> None:
        """A review was stored: the next read recomputes."""
        self._dirty = True

    def report(self) -> AgreementReport:
        if not self._stale():
            assert self._report is not None
            return self._report
        if not self._lock.acquire(blocking=self._report is None):  # someone is computing: the previous report
            assert self._report is not None
            return self._report
        try:
            if self._stale():
                self._dirty = False
                now = time.time()
                since = now - self.config.agreement_window_days * 86400.0
                self._report = compute_agreement(
                    self.labels, self.results(), self.cutoffs, self.config.sample_rate, since, now
                )
                self._at = self.clock()
            assert self._report is not None
            return self._report
        finally:
            self._lock.release()

    def _stale(self) -> bool:
        return self._report is None or self._dirty or self.clock() - self._at >= self.config.agreement_cache_seconds

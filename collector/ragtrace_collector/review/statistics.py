"""How well a judge agrees with people: balanced accuracy, Cohen's kappa and AUROC, as pure functions.

One home for the statistics so that ``evaluate`` (a judge measured on labelled rows), the agreement report
(``review/agreement.py``) and the explorer compute them the same way. Conventions, everywhere:

- a *label* is the human's ``True`` = "positive" (for faithfulness: hallucinated / unfaithful);
- a *prediction* is the judge's ``True`` for the same class, from a rule such as "faithfulness < 1.0";
- a *score* for :func:`auroc` is oriented so that a higher score means more likely positive — negate a
  higher-is-better metric (``-faithfulness``) before passing it;
- a statistic that is undefined on the data (no positive, no negative, nothing at all) is ``None``, never a
  made-up 0.5 or NaN, so a report can say "not enough labels" rather than a number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Confusion:
    """Counts of a binary prediction against binary labels."""

    tp: int
    fp: int
    tn: int
    fn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn


def confusion(pairs: Sequence[tuple[bool, bool]]) -> Confusion:
    """The confusion counts of (label, predicted) pairs."""
    tp = sum(1 for label, predicted in pairs if label and predicted)
    fp = sum(1 for label, predicted in pairs if not label and predicted)
    tn = sum(1 for label, predicted in pairs if not label and not predicted)
    fn = sum(1 for label, predicted in pairs if label and not predicted)
    return Confusion(tp=tp, fp=fp, tn=tn, fn=fn)


def balanced_accuracy(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """The mean of recall on positives and recall on negatives (robust to a rare class); None unless both
    classes are present among the labels."""
    c = confusion(pairs)
    if c.tp + c.fn == 0 or c.tn + c.fp == 0:
        return None
    return (c.tp / (c.tp + c.fn) + c.tn / (c.tn + c.fp)) / 2.0


def accuracy(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """The share of pairs where the prediction equals the label; None for no pairs."""
    if not pairs:
        return None
    return sum(1 for label, predicted in pairs if label == predicted) / len(pairs)


def cohen_kappa(pairs: Sequence[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa between the labels and the predictions: agreement beyond chance, 1 perfect, 0 chance.
    None for no pairs; 1.0 when both sides say one and the same class for every pair (perfect, though chance
    could explain it), 0.0 when chance agreement is total but observed is not."""
    c = confusion(pairs)
    n = c.n
    if n == 0:
        return None
    observed = (c.tp + c.tn) / n
    p_label = (c.tp + c.fn) / n
    p_pred = (c.tp + c.fp) / n
    expected = p_label * p_pred + (1 - p_label) * (1 - p_pred)
    if expected >= 1.0:
        return 1.0 if observed >= 1.0 else 0.0
    return (observed - expected) / (1.0 - expected)


def auroc(pairs: Sequence[tuple[bool, float]]) -> float | None:
    """The area under the ROC curve of (label, score) pairs, higher score = more likely positive: the chance
    that a random positive scores above a random negative, ties counted half (Mann-Whitney U). Threshold-free.
    None unless both classes are present."""
    if not pairs:
        return None
    labels = np.fromiter((bool(label) for label, _ in pairs), dtype=bool, count=len(pairs))
    scores = np.fromiter((float(score) for _, score in pairs), dtype=float, count=len(pairs))
    positives = int(labels.sum())
    negatives = len(pairs) - positives
    if positives == 0 or negatives == 0:
        return None
    ranks = _average_ranks(scores)
    u = float(ranks[labels].sum()) - positives * (positives + 1) / 2.0
    return u / (positives * negatives)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    ranks = np.empty(len(values), dtype=float)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks

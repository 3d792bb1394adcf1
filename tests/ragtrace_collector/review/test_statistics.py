"""The agreement statistics against values worked out by hand (and scikit-learn's definitions)."""

from __future__ import annotations

import pytest

from ragtrace_collector.review.statistics import (
    accuracy,
    auroc,
    balanced_accuracy,
    cohen_kappa,
    confusion,
)

# labels: 4 positives, 6 negatives; predictions: 3 of the positives found, 1 false alarm
PAIRS = [(True, True)] * 3 + [(True, False)] + [(False, True)] + [(False, False)] * 5


def test_confusion_and_balanced_accuracy():
    c = confusion(PAIRS)
    assert (c.tp, c.fn, c.fp, c.tn, c.n) == (3, 1, 1, 5, 10)
    assert balanced_accuracy(PAIRS) == pytest.approx((3 / 4 + 5 / 6) / 2)
    assert accuracy(PAIRS) == pytest.approx(0.8)
    assert balanced_accuracy([(True, True), (True, False)]) is None  # one class only: undefined
    assert accuracy([]) is None


def test_cohen_kappa():
    # observed 0.8; chance 0.4*0.4 + 0.6*0.6 = 0.52; kappa = 0.28 / 0.48
    assert cohen_kappa(PAIRS) == pytest.approx(0.28 / 0.48)
    assert cohen_kappa([(True, True), (False, False)]) == pytest.approx(1.0)
    assert cohen_kappa([(True, False), (False, True)]) == pytest.approx(-1.0)
    assert cohen_kappa([(True, True), (True, True)]) == 1.0  # both always say the same one class
    assert cohen_kappa([]) is None


def test_auroc_is_the_chance_a_positive_ranks_above_a_negative():
    assert auroc([(True, 0.9), (True, 0.8), (False, 0.3), (False, 0.1)]) == 1.0
    assert auroc([(True, 0.1), (False, 0.9)]) == 0.0
    # one tie between a positive and a negative counts half: pairs (p, n) = 4, wins 3 + 0.5
    assert auroc([(True, 0.9), (True, 0.5), (False, 0.5), (False, 0.1)]) == pytest.approx(3.5 / 4)
    assert auroc([(True, 0.5), (True, 0.7)]) is None and auroc([]) is None

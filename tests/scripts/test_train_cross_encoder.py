"""The cross-encoder's training script: the parts that decide what ships and need neither torch nor
scikit-learn (the split, the cross-fitting folds, the cascade's routing and threshold as calibration scores
them), so they run in every test run rather than only where a training environment is installed."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams
from tests.support.scripts import load_script

train = load_script("train_cross_encoder")
features_split = load_script("train_local_judge").split_of

QUESTIONS = [f"question number {i} about topic {i % 7}?" for i in range(2000)]


def test_the_held_out_questions_are_the_feature_models_held_out_questions() -> None:
    """The cross-encoder never trains on a question the feature model's evaluation holds out, and the
    calibration fold is carved from training questions only."""
    for q in QUESTIONS:
        part = train.part_of({"user_input": q})
        assert (part == "test") == (features_split({"user_input": q}) == "test")
        assert part in ("test", "calib", "fit")
    share = {
        p: sum(train.part_of({"user_input": q}) == p for q in QUESTIONS) / len(QUESTIONS) for p in ("test", "calib")
    }
    assert share["test"] == pytest.approx(0.20, abs=0.03)
    assert share["calib"] == pytest.approx(0.16, abs=0.03)


def test_a_questions_claims_stay_in_one_cross_fitting_fold_and_folds_are_even() -> None:
    for q in QUESTIONS[:50]:
        variants = [q, q.upper(), f"  {q}\n"]  # the key is the stripped, lower-cased question
        assert len({train.fold_of({"question": v}, 2) for v in variants}) == 1
    counts = np.bincount([train.fold_of({"question": q}, 3) for q in QUESTIONS], minlength=3)
    assert counts.min() / counts.max() > 0.85


def _response(hallucinated: bool, p_features: list[float], p_cross: list[float]) -> list[dict]:
    return [
        {"hallucinated": hallucinated, "p_features": f, "p_cross": c, "label": None}
        for f, c in zip(p_features, p_cross)
    ]


def test_calibration_routes_and_stacks_claims_exactly_as_the_judge_does() -> None:
    """``_lowest`` (what the band and threshold are chosen on) must be the judge's own rule: a claim whose
    feature P is in [low, high) gets the stacked P, the others keep theirs; a response's score is its
    lowest claim; the share is of claims sent."""
    rng = random.Random(0)
    responses = [
        _response(rng.random() < 0.4, [rng.random() for _ in range(n)], [rng.random() for _ in range(n)])
        for n in (1, 3, 5, 8) * 10
    ]
    low, high, stack = 0.1, 0.8, (0.6, 0.35, -0.3)
    mins, share = train._lowest(responses, low, high, stack)
    judge = CascadeParams("", "", 128, 3, low, high, stack, 0.5)
    expected, sent = [], 0
    for rs in responses:
        finals = []
        for p in rs:
            f = p["p_features"]
            if low <= f < high:
                sent += 1
                z = stack[0] * np.log(f / (1 - f)) + stack[1] * np.log(p["p_cross"] / (1 - p["p_cross"])) + stack[2]
                finals.append(1 / (1 + np.exp(-z)))
            else:
                finals.append(f)
        expected.append(min(finals))
    assert mins == pytest.approx(expected, abs=1e-9)
    assert share == pytest.approx(sent / sum(len(rs) for rs in responses))
    assert judge.uncertain(np.asarray([0.1, 0.0999, 0.8, 0.7999])).tolist() == [True, False, False, True]


def test_the_threshold_is_the_one_with_the_best_balanced_accuracy() -> None:
    hallucinated = np.asarray([1, 1, 1, 0, 0, 0, 0, 0])
    lowest = np.asarray([0.05, 0.2, 0.6, 0.3, 0.7, 0.8, 0.9, 0.95])
    bacc, threshold = train._best_threshold(hallucinated, lowest)
    # hallucinated when the lowest claim P is below the threshold: just above 0.6 catches all three
    # hallucinated responses and flags one of five clean ones (BAcc 0.9); no other cut does as well
    assert threshold == pytest.approx(0.6, abs=1e-5)
    assert bacc == pytest.approx(0.9)
    assert train.balanced_accuracy(hallucinated, (lowest < threshold).astype(int)) == pytest.approx(bacc)

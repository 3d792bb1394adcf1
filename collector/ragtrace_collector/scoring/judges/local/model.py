"""The claim-support model over :mod:`features`, loaded from a small JSON file.

``params.json`` (written by ``scripts/train_local_judge.py``, committed) holds, per feature set
(``embedding``: all features; ``lexical``: no embedding columns), either a logistic regression
(standardisation and weights) or a small gradient-boosted tree ensemble (depth-3 regression trees
on the log-odds, fitted with scikit-learn at training time and stored as plain arrays), the
response-level threshold, and the command and the data that produced them. Run time needs numpy
only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

PARAMS_PATH = Path(__file__).parent / "params.json"


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))


@dataclass
class LogisticModel:
    """P(supported | features) = sigmoid(w · (x - mean) / std + b); ``threshold`` turns it into yes/no."""

    feature_names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float

    def columns(self, all_names: tuple[str, ...]) -> list[int]:
        return [all_names.index(name) for name in self.feature_names]

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(supported) for each row of ``x`` (columns in ``feature_names`` order)."""
        if x.size == 0:
            return np.zeros(0)
        return sigmoid(((x - self.mean) / self.std) @ self.weights + self.bias)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "logistic_regression",
            "feature_names": list(self.feature_names),
            "mean": [round(float(v), 8) for v in self.mean],
            "std": [round(float(v), 8) for v in self.std],
            "weights": [round(float(v), 8) for v in self.weights],
            "bias": round(float(self.bias), 8),
            "threshold": round(float(self.threshold), 6),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogisticModel:
        names = tuple(data["feature_names"])
        arrays = [np.asarray(data[key], dtype=np.float64) for key in ("mean", "std", "weights")]
        if any(a.shape != (len(names),) for a in arrays):
            raise ValueError("local judge parameters: mean/std/weights do not match feature_names")
        return cls(names, arrays[0], arrays[1], arrays[2], float(data["bias"]), float(data["threshold"]))


def fit_logistic(
    x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, sample_weight: np.ndarray | None = None, iterations: int = 50
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Newton's method (IRLS) on standardised features with an L2 penalty; returns mean, std, w, b."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std < 1e-9] = 1.0
    z = (x - mean) / std
    n, d = z.shape
    design = np.hstack([z, np.ones((n, 1))])
    weight = np.ones(n) if sample_weight is None else sample_weight
    theta = np.zeros(d + 1)
    penalty = np.full(d + 1, l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = sigmoid(design @ theta)
        grad = design.T @ (weight * (p - y)) + penalty * theta
        hess = (design * (weight * p * (1 - p))[:, None]).T @ design + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-8:
            break
    return mean, std, theta[:-1], float(theta[-1])


@dataclass
class TreeEnsembleModel:
    """P(supported) = sigmoid(init + rate · Σ_trees leaf value); trees as flat node arrays.

    Each tree: ``feature[n]`` (−2 at a leaf), ``threshold[n]`` (go left when x ≤ threshold),
    ``left[n]``, ``right[n]`` and ``value[n]``, the same layout as scikit-learn's ``tree_``.
    """

    feature_names: tuple[str, ...]
    init: float
    rate: float
    trees: list[dict[str, np.ndarray]]
    threshold: float
    _stacked: tuple[np.ndarray, ...] = field(init=False, repr=False, compare=False)

    def columns(self, all_names: tuple[str, ...]) -> list[int]:
        return [all_names.index(name) for name in self.feature_names]

    def __post_init__(self) -> None:
        self._stacked = _stack_trees(self.trees)

    def raw(self, x: np.ndarray) -> np.ndarray:
        """The log-odds: every tree walked at once, one step per depth level (a per-tree loop cost
        the judge a third of its time per record)."""
        feature, threshold, left, right, value = self._stacked
        node = np.zeros((len(x), len(feature)), dtype=np.int64)
        trees = np.arange(len(feature))
        rows = np.arange(len(x))[:, None]
        while True:
            f = feature[trees, node]
            active = f >= 0
            if not active.any():
                break
            go_left = x[rows, np.where(active, f, 0)] <= threshold[trees, node]
            node = np.where(active, np.where(go_left, left[trees, node], right[trees, node]), node)
        return self.init + self.rate * value[trees, node].sum(axis=1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """P(supported) for each row of ``x`` (columns in ``feature_names`` order)."""
        if x.size == 0:
            return np.zeros(0)
        return sigmoid(self.raw(np.asarray(x, dtype=np.float64)))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "gradient_boosted_trees",
            "feature_names": list(self.feature_names),
            "init": round(float(self.init), 8),
            "rate": float(self.rate),
            "trees": [
                {
                    "feature": [int(v) for v in t["feature"]],
                    "threshold": [round(float(v), 8) for v in t["threshold"]],
                    "left": [int(v) for v in t["left"]],
                    "right": [int(v) for v in t["right"]],
                    "value": [round(float(v), 8) for v in t["value"]],
                }
                for t in self.trees
            ],
            "threshold": round(float(self.threshold), 6),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TreeEnsembleModel:
        names = tuple(data["feature_names"])
        trees = []
        for t in data["trees"]:
            tree = {
                "feature": np.asarray(t["feature"], dtype=np.int64),
                "threshold": np.asarray(t["threshold"], dtype=np.float64),
                "left": np.asarray(t["left"], dtype=np.int64),
                "right": np.asarray(t["right"], dtype=np.int64),
                "value": np.asarray(t["value"], dtype=np.float64),
            }
            if len({len(v) for v in tree.values()}) != 1 or tree["feature"].max(initial=-1) >= len(names):
                raise ValueError("local judge parameters: malformed tree")
            trees.append(tree)
        return cls(names, float(data["init"]), float(data["rate"]), trees, float(data["threshold"]))


def _stack_trees(trees: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """The trees as (trees × nodes) arrays, shorter trees padded with leaves of value 0."""
    width = max((len(t["feature"]) for t in trees), default=1)
    out = []
    for key, pad in (("feature", -2), ("threshold", 0.0), ("left", 0), ("right", 0), ("value", 0.0)):
        dtype = np.int64 if key in ("feature", "left", "right") else np.float64
        table = np.full((len(trees), width), pad, dtype=dtype)
        for i, t in enumerate(trees):
            table[i, : len(t[key])] = t[key]
        out.append(table)
    return tuple(out)


def model_from_json(data: dict[str, Any]) -> LogisticModel | TreeEnsembleModel:
    if data.get("kind") == "gradient_boosted_trees":
        return TreeEnsembleModel.from_json(data)
    return LogisticModel.from_json(data)


@dataclass
class LocalJudgeParams:
    """Everything the judge loads: the claim-support models and the relevance thresholds."""

    models: dict[str, LogisticModel | TreeEnsembleModel]
    relevance_threshold: float
    common_words: frozenset[str]
    raw: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path | None = None) -> LocalJudgeParams:
        data = json.loads(Path(path or PARAMS_PATH).read_text())
        models = {name: model_from_json(m) for name, m in data["models"].items()}
        return cls(
            models=models,
            relevance_threshold=float(data["relevance"]["threshold"]),
            common_words=frozenset(data.get("common_words", ())),
            raw=data,
        )

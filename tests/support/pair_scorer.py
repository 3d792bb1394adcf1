"""A fixed-answer stand-in for the local judge's ONNX pair models (the cascade's cross-encoder, the claim reader):
it satisfies their ``PairScorer`` contract, records the pairs it was asked about and answers one P(supported)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class FixedPairScorer:
    def __init__(self, p: float) -> None:
        self.p = p
        self.pairs: list[tuple[str, str]] = []

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        self.pairs.extend(pairs)
        return np.full(len(pairs), self.p)

"""The claim reader: a small cross-encoder that reads every claim the other models would call supported.

The feature model counts shared words, and the cascade's cross-encoder only reads the claims the feature model is
unsure of, so "does not have an automatic shut-off" passes against a context saying "has an automatic shut-off":
every word is there. The reader (``reader.onnx``, int8, written by ``scripts/train_reader.py``: the first three
layers of all-MiniLM-L6-v2 fine-tuned on human-labelled NLI, claim and RAG pairs and on contradictions made from
supported claims by one edit) reads each claim alone (no question: with one, a first reader learnt that RAGTruth's
questioned claims are mostly supported, whatever they say) with its best one or two context sentences
(:func:`~.cross_encoder.claim_pair`), 64 word pieces at most. A claim the cascade (or the feature model) finds
supported stays supported only if the reader's P(supported) reaches ``veto``; below it the claim is not supported
and its P is the reader's. The veto was chosen on calibration claims and support pairs the reader never trained
on (``reader.json`` beside the model: sha256, veto, the training command, data hashes and figures).

Where ``reader.json`` has a ``stack``, it decides instead of the veto: a logistic regression over the reader's and
the cascade's logits, how much of the claim its window holds, the claim's length and which conflict
(:mod:`conflicts`) a context sentence shows, fitted on calibration claims and calibration minimal pairs
(``scripts/train_reader.py stack``). The reader's doubt counts for more where a context sentence about the same
thing states another number, the opposite or "not": where RAGTruth's faithful claims, paraphrases, draw the same
doubt, no such sentence is there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from . import text as T
from .cross_encoder import CrossEncoderError

READER_PARAMS_PATH = Path(__file__).parent / "reader.json"

CONFLICT_KINDS = ("negation", "number", "date", "unit", "antonym", "stale", "name", "order", "restated")
STACK_FEATURES = (
    "logit_reader",
    "logit_cascade",
    "coverage",
    "claim_words_40",
    *(f"conflict_{kind}" for kind in CONFLICT_KINDS),
    "logit_reader_if_conflict",
)


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(q / (1 - q))


def window_coverage(claim: str, window: str) -> float:
    """The share of the claim's content words its window holds: 1 for a minimal edit of a context sentence."""
    words = set(T.content_words(claim))
    return len(words & set(T.content_words(window))) / max(1, len(words))


def stack_features(
    p_cascade: npt.ArrayLike,
    p_reader: npt.ArrayLike,
    coverage: npt.ArrayLike,
    claim_words: npt.ArrayLike,
    conflicts: Sequence[str],
) -> np.ndarray:
    """The stack's inputs for each claim (``STACK_FEATURES``, in that order); ``conflicts`` holds each claim's
    conflict kind (:func:`~.conflicts.claim_conflict`), ``""`` for none. Training and the judge both call this."""
    lr = _logit(np.asarray(p_reader, dtype=float))
    kinds = np.asarray([[float(k == kind) for kind in CONFLICT_KINDS] for k in conflicts]).reshape(len(conflicts), -1)
    stated = np.asarray([float(k not in ("", "restated")) for k in conflicts])
    return np.column_stack(
        [
            lr,
            _logit(np.asarray(p_cascade, dtype=float)),
            np.asarray(coverage, dtype=float),
            np.minimum(np.asarray(claim_words, dtype=float), 40) / 40,
            kinds,
            lr * stated,
        ]
    )


@dataclass(frozen=True)
class ReaderStack:
    """P(unsupported) = sigmoid(features · coef + intercept); a claim the cascade finds supported is not when it
    reaches ``threshold``."""

    coef: tuple[float, ...]
    intercept: float
    threshold: float

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReaderStack:
        if list(data["features"]) != list(STACK_FEATURES):
            raise ValueError(f"stack features {data['features']} are not {list(STACK_FEATURES)}")
        stack = cls(tuple(float(c) for c in data["coef"]), float(data["intercept"]), float(data["threshold"]))
        if len(stack.coef) != len(STACK_FEATURES) or not 0.0 < stack.threshold < 1.0:
            raise ValueError("stack coefficients or threshold out of range")
        return stack

    def unsupported(self, features: np.ndarray) -> np.ndarray:
        """P(unsupported) of each row of ``features``."""
        z = features @ np.asarray(self.coef) + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def overrule(self, p_supported: np.ndarray, features: np.ndarray, threshold: float) -> np.ndarray:
        """P(supported) once read: below ``threshold`` (the judge's) where the stack says unsupported (its
        1 − P(unsupported), or lower where the cascade's was), else the cascade's. It only takes support away."""
        s = self.unsupported(features)
        below = np.minimum(np.minimum(p_supported, 1.0 - s), np.nextafter(threshold, 0.0))
        return np.where(s >= self.threshold, below, p_supported)


@dataclass
class ReaderParams:
    """Where the reader's model is and how sure it must be that a claim is unsupported to overrule the others."""

    model_file: str
    sha256: str
    max_tokens: int
    windows: int
    veto: float
    stack: ReaderStack | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    directory: Path = READER_PARAMS_PATH.parent

    @classmethod
    def load(cls, path: str | Path | None = None) -> ReaderParams:
        path = Path(path or READER_PARAMS_PATH)
        try:
            data = json.loads(path.read_text())
            params = cls(
                model_file=str(data["model_file"]),
                sha256=str(data["sha256"]),
                max_tokens=int(data["max_tokens"]),
                windows=int(data["windows"]),
                veto=float(data["veto"]),
                stack=ReaderStack.from_dict(data["stack"]) if data.get("stack") else None,
                raw=data,
                directory=path.parent,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CrossEncoderError(f"cannot read the claim reader's parameters {path}: {exc}") from exc
        if params.max_tokens < 8 or params.windows < 1 or not 0.0 <= params.veto < 1.0:
            raise CrossEncoderError(f"claim reader parameters {path} are out of range")
        return params

    def model_path(self) -> Path:
        """The ONNX file: ``RAGTRACE_READER_ONNX``, else ``model_file`` beside the parameters file."""
        return Path(os.environ.get("RAGTRACE_READER_ONNX") or self.directory / self.model_file)

    def overridden(self) -> bool:
        return bool(os.environ.get("RAGTRACE_READER_ONNX"))

    def overrule(self, p_supported: np.ndarray, p_reader: np.ndarray) -> np.ndarray:
        """P(supported) once read: the reader's own where it is below ``veto`` (and below the others'), else the
        others'. The reader can only take support away."""
        return np.where(p_reader < self.veto, np.minimum(p_supported, p_reader), p_supported)

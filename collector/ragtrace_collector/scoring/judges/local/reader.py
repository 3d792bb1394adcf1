"""The claim reader: a small cross-encoder that reads every claim against its best context sentences.

The feature model counts shared words, so "does not have an automatic shut-off" scores as well as "has an
automatic shut-off" against a context stating the latter. The reader (``reader.onnx``, int8, written by
``scripts/train_reader.py``: the first layers of all-MiniLM-L6-v2 fine-tuned on human-labelled NLI, claim and
RAG pairs) reads each claim with its question and its best one or two context sentences, the same input shape
as the cascade's cross-encoder (:func:`~.cross_encoder.claim_pair`), short enough to read every claim of every
record. Its P(supported) is stacked with the feature model's: sigmoid(a·logit p_f + b·logit p_r + c), fitted on
calibration claims and support pairs the reader never trained on, plus a learnt (never positive) term when a
context sentence about the same thing states otherwise (:mod:`conflicts`: negation, another number or unit,
an antonym, another name); a claim is supported when that reaches ``threshold``. ``reader.json`` beside the model holds the file's sha256, the stacking, the threshold, and the
training command, data hashes and figures.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .cross_encoder import CrossEncoderError

READER_PARAMS_PATH = Path(__file__).parent / "reader.json"


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


@dataclass
class ReaderParams:
    """Where the reader's model is and how its P(supported) combines with the feature model's."""

    model_file: str
    sha256: str
    max_tokens: int
    windows: int
    stack: tuple[float, float, float]
    threshold: float
    conflict: float = 0.0  # added to the stacked log-odds when a context sentence states otherwise (:mod:`conflicts`)
    raw: dict[str, Any] = field(default_factory=dict)
    directory: Path = READER_PARAMS_PATH.parent

    @classmethod
    def load(cls, path: str | Path | None = None) -> ReaderParams:
        path = Path(path or READER_PARAMS_PATH)
        try:
            data = json.loads(path.read_text())
            a, b, c = (float(v) for v in data["stack"])
            params = cls(
                model_file=str(data["model_file"]),
                sha256=str(data["sha256"]),
                max_tokens=int(data["max_tokens"]),
                windows=int(data["windows"]),
                stack=(a, b, c),
                threshold=float(data["threshold"]),
                conflict=float(data.get("conflict", 0.0)),
                raw=data,
                directory=path.parent,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CrossEncoderError(f"cannot read the claim reader's parameters {path}: {exc}") from exc
        if params.max_tokens < 8 or params.windows < 1 or not 0.0 < params.threshold < 1.0 or params.conflict > 0:
            raise CrossEncoderError(f"claim reader parameters {path} are out of range")
        return params

    def model_path(self) -> Path:
        """The ONNX file: ``RAGTRACE_READER_ONNX``, else ``model_file`` beside the parameters file."""
        return Path(os.environ.get("RAGTRACE_READER_ONNX") or self.directory / self.model_file)

    def overridden(self) -> bool:
        return bool(os.environ.get("RAGTRACE_READER_ONNX"))

    def combine(self, p_features: np.ndarray, p_reader: np.ndarray, conflicts: np.ndarray | None = None) -> np.ndarray:
        """The stacked P(supported); ``conflicts`` (0/1 per claim) marks a context sentence stating otherwise,
        which can only lower it (``conflict`` ≤ 0)."""
        a, b, c = self.stack
        z = a * _logit(p_features) + b * _logit(p_reader) + c
        if conflicts is not None:
            z = z + self.conflict * conflicts
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))

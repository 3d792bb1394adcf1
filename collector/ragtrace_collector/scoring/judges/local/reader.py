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


@dataclass
class ReaderParams:
    """Where the reader's model is and how sure it must be that a claim is unsupported to overrule the others."""

    model_file: str
    sha256: str
    max_tokens: int
    windows: int
    veto: float
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

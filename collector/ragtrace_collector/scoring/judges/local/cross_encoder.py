"""The cascade's second stage: a cross-encoder that reads a claim and its best context windows together.

``cross_encoder.onnx`` (int8, written by ``scripts/train_cross_encoder.py``) is all-MiniLM-L6-v2
fine-tuned as a claim-support classifier: input ``[CLS] claim [SEP] windows [SEP]`` (the
project's WordPiece ``tokenizer.json``, at most ``max_tokens`` tokens, the windows cut first), one
logit out, P(supported) = sigmoid(logit). ``cross_encoder.json`` beside it holds the file's
sha256, how the windows are chosen, the cascade's band and the stacking that combines the two
models' probabilities, all chosen on training folds, and the training command, data hashes and
figures.

The windows: the context sentences sharing the most IDF-weighted content words with the claim
(:func:`lexical_similarities`, IDF over the record's own sentences), plus the sentence the feature
model matched best, kept in document order, so the model sees the evidence the way the passage
states it. Lexical, not embedding cosine: embedding every sentence of long contexts cost the
cascade three quarters of its time (21 records/s against 57 with lexical windows, same accuracy
on the calibration fold), and the model is trained on windows chosen the same way.

Run time needs onnxruntime and tokenizers only (no torch).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ragtrace_collector.scoring.embeddings import DEFAULT_TOKENIZER, cpu_session, sha256_of

from . import text as T
from .features import ContextIndex

CASCADE_PARAMS_PATH = Path(__file__).parent / "cross_encoder.json"


class PairScorer(Protocol):
    """What the cascade needs of its second stage: P(supported) per (first segment, windows) pair."""

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


class EncoderFiles(Protocol):
    """What :class:`CrossEncoder` needs of a model's parameters file: where its ONNX file is, the sha256 that
    file must have (unless an environment variable names another file), and how long a pair may be."""

    sha256: str
    max_tokens: int

    def model_path(self) -> Path: ...

    def overridden(self) -> bool:
        """True when the environment names another ONNX file (then its sha256 is not checked)."""
        ...


class CrossEncoderError(RuntimeError):
    """The cross-encoder's files are missing, altered or unloadable."""


def _logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(q / (1 - q))


def first_segment(claim: str, question: str) -> str:
    """The pair's first segment: the claim, with the question it answers (short answers need it)."""
    return f"{claim} (question: {question.strip()})" if question.strip() else claim


def lexical_similarities(claim_tokens: set[str], sentence_tokens: Sequence[set[str]]) -> np.ndarray:
    """Per context sentence, the summed IDF of the content words it shares with the claim; IDF is
    log(1 + N / df) over the record's N sentences, so a rare shared name outweighs a common word."""
    n = len(sentence_tokens)
    df = Counter(w for tokens in sentence_tokens for w in tokens & claim_tokens)
    idf = {w: math.log1p(n / c) for w, c in df.items()}
    return np.asarray([sum(idf[w] for w in tokens & claim_tokens) for tokens in sentence_tokens], dtype=np.float64)


def choose_windows(similarities: np.ndarray | None, sentences: Sequence[str], best_sentence: str | None, k: int) -> str:
    """The claim's evidence text: the ``k`` context sentences most similar to it and the feature
    model's best sentence, in document order (the first ``k`` sentences without similarities)."""
    if not sentences:
        return ""
    if similarities is not None and len(similarities) == len(sentences):
        picked = {int(j) for j in np.argsort(-similarities, kind="stable")[:k]}
    else:
        picked = set(range(min(k, len(sentences))))
    if best_sentence is not None:
        for j, s in enumerate(sentences):
            if s == best_sentence:
                picked.add(j)
                break
    return " ".join(sentences[j] for j in sorted(picked))


def claim_pair(
    claim: str, question: str, index: ContextIndex, best_sentence: str | None, windows: int
) -> tuple[str, str]:
    """The cross-encoder's input for one claim, as the judge builds it and training built it: the claim with its
    question, and its ``windows`` most similar context sentences plus the feature model's ``best_sentence``."""
    similarities = lexical_similarities(set(T.content_words(claim)), index.sentence_tokens)
    return first_segment(claim, question), choose_windows(similarities, index.sentences, best_sentence, windows)


@dataclass
class CascadeParams:
    """How the cascade combines the feature model (p_f) and the cross-encoder (p_c).

    A claim whose p_f lies in ``[low, high)`` is uncertain and goes to the cross-encoder; its
    P(supported) becomes sigmoid(a·logit(p_f) + b·logit(p_c) + c) (fitted on a training fold the
    cross-encoder did not train on); other claims keep p_f. A claim is supported when P reaches
    ``threshold``.
    """

    model_file: str
    sha256: str
    max_tokens: int
    windows: int
    low: float
    high: float
    stack: tuple[float, float, float]
    threshold: float
    raw: dict[str, Any] = field(default_factory=dict)
    directory: Path = CASCADE_PARAMS_PATH.parent  # where ``model_file`` lies: beside the parameters file

    @classmethod
    def load(cls, path: str | Path | None = None) -> CascadeParams:
        path = Path(path or CASCADE_PARAMS_PATH)
        try:
            data = json.loads(path.read_text())
            cascade = data["cascade"]
            a, b, c = (float(v) for v in cascade["stack"])
            params = cls(
                model_file=str(data["model_file"]),
                sha256=str(data["sha256"]),
                max_tokens=int(data["max_tokens"]),
                windows=int(data["windows"]),
                low=float(cascade["low"]),
                high=float(cascade["high"]),
                stack=(a, b, c),
                threshold=float(cascade["threshold"]),
                raw=data,
                directory=path.parent,
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CrossEncoderError(f"cannot read the cascade parameters {path}: {exc}") from exc
        if not 0.0 <= params.low <= params.high <= 1.0 or params.max_tokens < 8 or params.windows < 1:
            raise CrossEncoderError(f"cascade parameters {path} are out of range")
        return params

    def model_path(self) -> Path:
        """The ONNX file: ``RAGTRACE_CROSS_ENCODER_ONNX``, else ``model_file`` beside the parameters file."""
        return Path(os.environ.get("RAGTRACE_CROSS_ENCODER_ONNX") or self.directory / self.model_file)

    def overridden(self) -> bool:
        return bool(os.environ.get("RAGTRACE_CROSS_ENCODER_ONNX"))

    def uncertain(self, p_features: np.ndarray) -> np.ndarray:
        return (p_features >= self.low) & (p_features < self.high)

    def combine(self, p_features: np.ndarray, p_cross: np.ndarray) -> np.ndarray:
        a, b, c = self.stack
        z = a * _logit(p_features) + b * _logit(p_cross) + c
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))


class CrossEncoder:
    """P(supported) of (claim, evidence) pairs from an int8 ONNX cross-encoder (onnxruntime, no torch): the
    cascade's, or the claim reader's (:mod:`reader`); each parameters file says where its model is.

    ``RAGTRACE_CROSS_ENCODER_ONNX`` (``RAGTRACE_READER_ONNX`` for the reader) names another ONNX file (then no
    sha256 check); ``RAGTRACE_EMBEDDING_THREADS`` its onnxruntime intra-op threads (default 2), as for the embedder.
    """

    def __init__(
        self,
        params: EncoderFiles,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
    ) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both are collector dependencies
            raise CrossEncoderError(f"onnxruntime and tokenizers are required: {exc}") from exc
        model = Path(model_path or params.model_path())
        tokenizer = Path(tokenizer_path or DEFAULT_TOKENIZER)
        if not model.is_file():
            raise CrossEncoderError(f"cross-encoder model file not found: {model}")
        if model_path is None and not params.overridden() and sha256_of(model) != params.sha256:
            raise CrossEncoderError(f"cross-encoder model {model} does not match the sha256 in its parameters")
        try:
            self._session = cpu_session(model, threads)
            self._tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:
            raise CrossEncoderError(f"cannot load the cross-encoder {model}: {exc}") from exc
        self._tokenizer.enable_truncation(max_length=params.max_tokens)
        self._tokenizer.no_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.model_path = model

    def logits(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """One logit per (claim, evidence) pair, each pair run on its own.

        Not batched: the int8 graph quantises each run's activations with one scale for the whole run
        (``DynamicQuantizeLinear``), so batch-mates and their padding would move a pair's P(supported) (by
        up to 0.3 on training pairs, 1% of them across 0.5), and a claim's verdict would depend on the other
        claims of its response. Alone, a pair always gets the same P; it costs ~9% more per pair.
        """
        return np.asarray(
            [float(np.asarray(self._session.run(None, feeds)[0]).reshape(-1)[0]) for feeds in self.encode(pairs)],
            dtype=np.float32,
        )

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, np.ndarray]]:
        """One run's inputs per pair (a batch of one, unpadded), as :meth:`logits` feeds them to the session."""
        feeds = []
        for encoding in self._tokenizer.encode_batch([(a, b or ".") for a, b in pairs]):
            ids = np.asarray([encoding.ids], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.asarray([encoding.type_ids], dtype=np.int64)
            feeds.append(feed)
        return feeds

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(supported) per pair, as the model was trained (before the cascade's stacking)."""
        z = self.logits(pairs).astype(np.float64)
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))


@dataclass
class CascadeStats:
    """How much the cascade sent to the cross-encoder (for reports); counted under a lock, since the
    judge decides on several threads."""

    claims: int = 0
    sent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, claims: int = 0, sent: int = 0) -> None:
        with self._lock:
            self.claims += claims
            self.sent += sent

    def as_dict(self) -> dict[str, Any]:
        share = self.sent / self.claims if self.claims else math.nan
        return {"claims": self.claims, "sent_to_cross_encoder": self.sent, "share_sent": round(share, 4)}

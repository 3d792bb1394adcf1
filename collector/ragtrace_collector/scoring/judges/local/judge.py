"""LocalJudge: the embedded offline judge (no network, no API key, no torch).

Decisions it makes, and how:

* claims: ``pysbd`` sentences of the response, compound sentences split (see :mod:`text`);
* claim support (faithfulness, hallucination, noise sensitivity, context recall's attribution,
  chunk usefulness): gradient-boosted trees over lexical coverage, novel numbers/dates/names,
  conflicts, negation and (optionally) embedding features (:mod:`features`, :mod:`model`), trained
  on the RAGTruth QA and HaluEval training split by ``scripts/train_local_judge.py``; P(supported)
  is calibrated to claim frequencies; the verdict is ``yes`` when it reaches the threshold tuned so
  that hallucinated = faithfulness < 1 has the best balanced accuracy; ``confidence`` is
  P(supported), ``evidence`` the context sentence that decided it;
* three verdicts: ``yes`` (supported, the reason quotes the supporting sentence and names its context),
  ``no`` (contradicted: a context sentence about the same thing states otherwise, :mod:`conflicts`; the
  reason quotes it, "contradicted by context #2: '...two years...'") and ``idk`` (not found: the reason
  names the numbers, names or words no context has); ``nli`` reads the same verdicts as entailment,
  contradiction and neutral;
* chunk usefulness (context precision, noise sensitivity): a chunk is useful for a target when it
  alone supports at least one of the target's claims, not counting claims about the passages
  themselves ("based on the passages...", "unable to answer..."), which any chunk backs;
* embeddings and context-sentence relevance: all-MiniLM-L6-v2 (int8 ONNX) cosines, with the
  question-to-sentence threshold calibrated at training time;
* entities: capitalised spans and numbers (rules).

It declares no other decision interface (statement relevance, question generation, statement
classification, safety, G-Eval, DAG, conversation intentions...), so those metrics are skipped with
the reason, never faked.

Usage accounting: each decision the judge works out (claim extraction, a batch of claim
verdicts, chunk flags, embeddings...) is recorded with ``record_usage`` as one *call* with zero
tokens and zero cost, so the collector's judge panels show how much the local judge decides.
These are local computations, not paid or remote calls: tokens and cost stay 0 honestly.

Configuration (argument → environment → default): ``embeddings`` /
``RAGTRACE_LOCAL_JUDGE_EMBEDDINGS`` for claim support (default ``0``: the lexical model, which
meets the ≥50 records/s target on 2 cores; ``1``: the model with embedding features, as accurate
on the held-out split and about 15 times slower),
``params_path`` / ``RAGTRACE_LOCAL_JUDGE_PARAMS``; ``model`` / ``RAGTRACE_LOCAL_JUDGE_MODEL`` (the collector's
``local_judge.model``): ``cascade`` (default) the feature
model decides the clear claims and the int8 ONNX cross-encoder (:mod:`cross_encoder`) reads the
uncertain ones with their best context windows (chosen lexically, no embeddings); ``reader`` the cascade,
then every claim it finds supported read by the int8 claim reader (:mod:`reader`), whose confident
"unsupported" overrules it; when a model's files are missing or do not load, the judge says so in the log
and falls back to the feature model (``fallback_reason``); ``features`` the feature model alone. Embeddings are always used where a decision is
about meaning rather than support (``embed``, context-sentence relevance); the model loads on
first use, once per process.

CPU work (splitting, features, the model, embeddings and loading the embedding model) runs on
the judge's own worker threads, off the event loop, so a collector that scores and receives in one
process keeps receiving while it scores. ``workers`` / ``RAGTRACE_LOCAL_JUDGE_WORKERS`` (the
collector's ``local_judge.workers``; default 2 for the cascade, 1 for the feature model): with two,
one record's text work (pure Python, holding the GIL) runs while another's cross-encoder runs in
onnxruntime (which releases it). Every decision gets what it needs as arguments (the question comes
with ``verify_claims``) and the shared state (caches, cascade counters) is locked, so a verdict
never depends on other records in flight.

``max_chars`` (the collector's ``local_judge.max_chars``, default ``DEFAULT_LOCAL_JUDGE_MAX_CHARS``): the most
characters one decision reads, answer and contexts together. Past it the decision raises a :class:`JudgeError` that
is not retried (the record's error, with that reason), as an LLM judge's context window does: the work grows with
claims × context sentences, and one long record would hold a worker thread for minutes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from ragtrace_collector.config import (
    DEFAULT_LOCAL_JUDGE_MAX_CHARS,
    DEFAULT_LOCAL_JUDGE_MODEL,
    DEFAULT_LOCAL_JUDGE_WORKERS,
    LOCAL_JUDGE_MODELS,
)
from ragtrace_collector.scoring.capabilities import (
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    ContextSentenceRelevance,
    Embedding,
    EntityExtraction,
    NaturalLanguageInference,
    StatementAttribution,
)
from ragtrace_collector.scoring.embeddings import sha256_of
from ragtrace_collector.scoring.judge import (
    ClaimVerdict,
    ContextSentences,
    Judge,
    JudgeError,
    JudgeIdentity,
    JudgeUnsupported,
    NliLabel,
    NliVerdict,
    Verdict,
    record_usage,
    sha256_hex,
)

from . import text as T
from .conflicts import claim_conflict, quote
from .cross_encoder import (
    CascadeParams,
    CascadeStats,
    CrossEncoder,
    CrossEncoderError,
    EncoderFiles,
    PairScorer,
    claim_pair,
)
from .features import FEATURE_NAMES, ClaimSupport, ContextIndex, claim_features
from .model import LocalJudgeParams
from .reader import ReaderParams, stack_features, window_coverage

R = TypeVar("R")
log = logging.getLogger(__name__)


_META_COLUMNS = [FEATURE_NAMES.index("meta_reference"), FEATURE_NAMES.index("no_information_claim")]


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[Any, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self.lock:
            value = self.data.get(key)
            if value is not None:
                self.data.move_to_end(key)
            return value

    def clear(self) -> None:
        with self.lock:
            self.data.clear()

    def put(self, key: Any, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.size:
                self.data.popitem(last=False)


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _env_workers(default: int) -> int:
    value = (os.environ.get("RAGTRACE_LOCAL_JUDGE_WORKERS") or "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"RAGTRACE_LOCAL_JUDGE_WORKERS must be a whole number, not {value!r}") from None


class LocalJudge(
    Judge,
    ClaimExtraction,
    ClaimVerification,
    NaturalLanguageInference,
    Embedding,
    ChunkRelevance,
    ContextSentenceRelevance,
    StatementAttribution,
    EntityExtraction,
):
    """The offline judge: see the module docstring for what it decides and how (the interfaces it derives from)."""

    name = "local"

    def __init__(
        self,
        *,
        embeddings: bool | None = None,
        params_path: str | None = None,
        embedder: Any = None,
        cache_size: int = 512,
        model: str | None = None,
        cascade_params_path: str | None = None,
        cross_encoder: PairScorer | None = None,
        workers: int | None = None,
        reader_params_path: str | None = None,
        reader: PairScorer | None = None,
        max_chars: int | None = None,
    ) -> None:
        self.use_embeddings = (
            embeddings if embeddings is not None else _env_flag("RAGTRACE_LOCAL_JUDGE_EMBEDDINGS", False)
        )
        self.params = LocalJudgeParams.load(params_path or os.environ.get("RAGTRACE_LOCAL_JUDGE_PARAMS") or None)
        self.model = self.params.models["embedding" if self.use_embeddings else "lexical"]
        self._columns = self.model.columns(FEATURE_NAMES)
        self._embedder = embedder
        self._embedder_lock = threading.Lock()
        self._indexes = _LRU(cache_size)
        name = (model or os.environ.get("RAGTRACE_LOCAL_JUDGE_MODEL") or DEFAULT_LOCAL_JUDGE_MODEL).strip().lower()
        if name not in LOCAL_JUDGE_MODELS:
            raise ValueError(f"local judge model must be one of {', '.join(LOCAL_JUDGE_MODELS)}, not {name!r}")
        self.model_name = name
        self.workers = workers if workers is not None else _env_workers(DEFAULT_LOCAL_JUDGE_WORKERS[name])
        if self.workers < 1:
            raise ValueError(f"local judge workers must be at least 1, not {self.workers}")
        self.max_chars = max_chars if max_chars is not None else DEFAULT_LOCAL_JUDGE_MAX_CHARS
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="ragtrace-local-judge")
        self.fallback_reason: str | None = None
        self.cascade: _Stage[CascadeParams] | None = None
        self.reader: _Stage[ReaderParams] | None = None
        try:
            if name == "cascade":
                cascade = CascadeParams.load(cascade_params_path)
                _require_file(cascade, cross_encoder, "cross-encoder")
                self.cascade = _Stage(cascade, cross_encoder)
            elif name == "reader":  # the cascade, and the reader after it
                cascade = CascadeParams.load(cascade_params_path)
                _require_file(cascade, cross_encoder, "cross-encoder")
                self.cascade = _Stage(cascade, cross_encoder)
                read = ReaderParams.load(reader_params_path)
                _require_file(read, reader, "claim reader")
                if read.veto > cascade.threshold:
                    raise CrossEncoderError(f"the reader's veto {read.veto} is above the verdict threshold")
                self.reader = _Stage(read, reader)
        except CrossEncoderError as exc:
            self._fall_back(str(exc))

    def _fall_back(self, reason: str) -> None:
        """The model file cannot be used: the feature model decides alone from now on."""
        log.warning("local judge: %s unavailable, using the feature model alone: %s", self.model_name, reason)
        self.fallback_reason = reason
        self.cascade = None
        self.reader = None
        self.model_name = "features"

    def warm_up(self) -> None:
        """Load every model this judge will use now (the embedder, the reader or cross-encoder), not on first use."""
        for stage in (self.cascade, self.reader):
            if stage is not None:
                try:
                    stage.encoder()
                except CrossEncoderError as exc:
                    self._fall_back(str(exc))
        if self.use_embeddings:
            self.embedder.embed(["warm up"])

    def clear_caches(self) -> None:
        """Forget the context indexes and sentence splits this process has cached, so the next records
        are scored cold (benchmarks measure new records, as a collector mostly sees)."""
        self._indexes.clear()
        T.clear_cache()

    # plumbing ---------------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., R], *args: Any) -> R:
        """One decision on one of the judge's threads, recorded as one local call (no tokens, no cost)."""
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor, fn, *args)
        record_usage(calls=1)  # here, not in the thread: usage scopes live in this task's context
        return result

    @property
    def embedder(self) -> Any:
        """The process-wide :class:`~ragtrace_collector.scoring.embeddings.LocalEmbedder` (loaded on first use)."""
        with self._embedder_lock:
            if self._embedder is None:
                from ragtrace_collector.scoring.embeddings import EmbeddingModelError, LocalEmbedder

                try:
                    self._embedder = LocalEmbedder.shared()
                except EmbeddingModelError as exc:
                    # Without its model the judge cannot make embedding decisions: skip, say why.
                    raise JudgeUnsupported(f"judge 'local' has no embedding model: {exc}") from exc
            return self._embedder

    def _index(self, contexts: Sequence[str]) -> ContextIndex:
        key = tuple(contexts)
        index = self._indexes.get(key)
        if index is None:
            index = ContextIndex.build(contexts)
            if self.use_embeddings:
                index.embeddings = self.embedder.embed(index.sentences)
            self._indexes.put(key, index)
        return index

    # the claim-support model ------------------------------------------------------------------
    def support(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[tuple[float, ClaimSupport]]:
        """P(supported) and features of each claim against the contexts taken together (sync)."""
        if not claims:
            return []
        index = self._index(contexts)
        claim_emb = q_emb = None
        if self.use_embeddings:
            vectors = self.embedder.embed(list(claims) + [question])
            claim_emb, q_emb = vectors[:-1], vectors[-1]
        rows = claim_features(claims, question, index, claim_emb, q_emb, self.params.common_words)
        if not rows:
            return []
        x = np.stack([r.features for r in rows])[:, self._columns]
        probs = self.model.predict(x)
        return [(float(p), r) for p, r in zip(probs, rows)]

    def _cascade_support(
        self, claims: Sequence[str], contexts: Sequence[str], question: str
    ) -> tuple[list[tuple[float, ClaimSupport]], float]:
        """P(supported) per claim and the verdict threshold: the feature model's, or the cascade's."""
        scored = self.support(claims, contexts, question)
        cascade = self.cascade
        if cascade is None or not scored:
            return scored, self.model.threshold
        probs = np.asarray([p for p, _ in scored])
        unsure: list[int] = np.flatnonzero(cascade.params.uncertain(probs)).tolist()
        cascade.stats.add(claims=len(probs))
        if len(unsure):
            try:
                encoder = cascade.encoder()
            except CrossEncoderError as exc:
                self._fall_back(str(exc))
                return scored, self.model.threshold
            index = self._index(contexts)
            windows = cascade.params.windows
            pairs = [claim_pair(claims[i], question, index, scored[i][1].best_sentence, windows) for i in unsure]
            probs[unsure] = cascade.params.combine(probs[unsure], encoder.predict(pairs))
            cascade.stats.add(sent=len(unsure))
        return [(float(p), row) for p, (_, row) in zip(probs, scored)], cascade.params.threshold

    def _reader_support(
        self, claims: Sequence[str], contexts: Sequence[str], question: str
    ) -> tuple[list[tuple[float, ClaimSupport]], float]:
        """P(supported) per claim from the cascade (or the feature model), then every claim it finds supported
        read by the claim reader, whose confident "unsupported" overrules it (:meth:`ReaderParams.overrule`)."""
        scored, threshold = self._cascade_support(claims, contexts, question)
        stage = self.reader
        if stage is None or not scored:
            return scored, threshold
        probs = np.asarray([p for p, _ in scored])
        read: list[int] = np.flatnonzero(probs >= threshold).tolist()
        stage.stats.add(claims=len(probs), sent=len(read))
        if not read:
            return scored, threshold
        try:
            encoder = stage.encoder()
        except CrossEncoderError as exc:
            self._fall_back(str(exc))
            return self.support(claims, contexts, question), self.model.threshold
        index = self._index(contexts)
        windows = stage.params.windows
        # The claim alone, without its question: the reader judges what the claim says.
        pairs = [claim_pair(claims[i], "", index, scored[i][1].best_sentence, windows) for i in read]
        p_reader = encoder.predict(pairs)
        stack = stage.params.stack
        if stack is None:
            probs[read] = stage.params.overrule(probs[read], p_reader)
        else:
            features = stack_features(
                probs[read],
                p_reader,
                [window_coverage(claim, window) for claim, window in pairs],
                [len(claims[i].split()) for i in read],
                [_conflict_kind(claims[i], scored[i][1].best_sentence, index) for i in read],
            )
            probs[read] = stack.overrule(probs[read], features, threshold)
        return [(float(p), row) for p, (_, row) in zip(probs, scored)], threshold

    def _claim_support(
        self, claims: Sequence[str], contexts: Sequence[str], question: str
    ) -> tuple[list[tuple[float, ClaimSupport]], float]:
        if self.reader is not None:
            return self._reader_support(claims, contexts, question)
        return self._cascade_support(claims, contexts, question)

    def _verdicts(self, claims: Sequence[str], contexts: Sequence[str], question: str) -> list[ClaimVerdict]:
        """Supported (``yes``) when P(supported) reaches the threshold; otherwise contradicted (``no``) when a
        context sentence about the same thing states otherwise (:mod:`conflicts`), else not found (``idk``)."""
        verdicts = []
        scored, threshold = self._claim_support(claims, contexts, question)
        index = self._index(contexts) if scored else None
        for claim, (p, row) in zip(claims, scored):
            assert index is not None
            verdict: Verdict
            if p >= threshold:
                verdict, reason = "yes", _supported_reason(p, row, index)
                evidence = row.best_sentence
            else:
                conflict = claim_conflict(claim, row.best_sentence, index)
                if conflict is not None:
                    verdict, evidence = "no", conflict.sentence
                    reason = f"contradicted by context #{conflict.context + 1}: '{conflict.quote}' (P={p:.2f})"
                else:
                    verdict, evidence = "idk", row.best_sentence
                    reason = _not_found_reason(claim, p, contexts)
            verdicts.append(
                ClaimVerdict(statement=claim, verdict=verdict, reason=reason, evidence=evidence, confidence=round(p, 6))
            )
        return verdicts

    def _within_bound(self, *texts: str | Sequence[str]) -> None:
        """A decision reads at most ``max_chars`` characters: its work grows with claims × context sentences, so a
        longer record is that record's error (not retried), as an LLM judge's context window makes it."""
        n = sum(len(t) if isinstance(t, str) else sum(len(x) for x in t) for t in texts)
        if n > self.max_chars:
            raise JudgeError(
                f"judge 'local' reads at most {self.max_chars:,} characters a decision (local_judge.max_chars);"
                f" this record's answer and contexts hold {n:,}"
            )

    @staticmethod
    def _require_contexts(contexts: Sequence[str]) -> list[str]:
        kept = [c for c in contexts if c and c.strip()]
        if not kept:
            raise JudgeUnsupported("judge 'local' needs at least one non-empty context to verify against")
        return kept

    # Judge decisions --------------------------------------------------------------------------
    async def extract_claims(self, question: str, response: str) -> list[str]:
        """The response's sentences as claims (compound sentences split); [] for an empty response."""
        if not (response or "").strip():
            return []
        self._within_bound(question or "", response)
        return await self._run(lambda: [c.text for c in T.claims(response)])

    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        """Verdicts from the claim-support model; the question is one of its signals."""
        if not claims:
            return []
        kept = self._require_contexts(contexts)
        self._within_bound(claims, kept, question or "")
        return await self._run(self._verdicts, list(claims), kept, question or "")

    async def verify_claims_per_context(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[list[ClaimVerdict]]:
        question = question or ""
        self._within_bound(claims, contexts, question)

        def each() -> list[list[ClaimVerdict]]:
            return [
                self._verdicts(list(claims), [ctx], question)
                if ctx.strip() and claims
                else [ClaimVerdict(c, "idk", "not found: empty context", None, 0.0) for c in claims]
                for ctx in contexts
            ]

        return await self._run(each)

    async def nli(self, premise: str, hypotheses: Sequence[str]) -> list[NliVerdict]:
        """Entailment, contradiction or neutral per hypothesis: the claim verdicts against the premise (supported,
        contradicted, not found), decided by the same models as faithfulness."""
        if not hypotheses:
            return []
        if not premise.strip():
            raise JudgeUnsupported("judge 'local' needs a non-empty premise for natural language inference")
        self._within_bound(premise, hypotheses)
        labels: dict[str, NliLabel] = {"yes": "entailment", "no": "contradiction", "idk": "neutral"}
        verdicts = await self._run(self._verdicts, list(hypotheses), [premise], "")
        return [NliVerdict(v.statement, labels[v.verdict], v.reason or "") for v in verdicts]

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        texts = list(texts)
        self._within_bound(texts)
        vectors = await self._run(lambda: self.embedder.embed(texts))  # first use loads the model: off the loop
        return vectors.astype(float).tolist()

    async def chunk_relevance(self, question: str, target: str, contexts: Sequence[str]) -> list[bool]:
        """A chunk was useful for ``target`` when it alone supports at least one of target's claims."""
        if not (target or "").strip():
            raise JudgeUnsupported("judge 'local' found no statements in the target to relate chunks to")
        self._within_bound(target, contexts)

        def flags() -> list[bool]:
            target_claims = [c.text for c in T.claims(target)]
            if not target_claims:
                raise JudgeUnsupported("judge 'local' found no statements in the target to relate chunks to")
            out = []
            for ctx in contexts:
                if not ctx.strip():
                    out.append(False)
                    continue
                # No question here: restating the question must not make an unrelated chunk useful.
                # Statements about the passages themselves ("Based on the passages...", "Unable to
                # answer from the given passages") are backed by any chunk, so they show no use.
                out.append(
                    any(
                        p >= self.model.threshold and not row.features[_META_COLUMNS].any()
                        for p, row in self.support(target_claims, [ctx], "")
                    )
                )
            return out

        return await self._run(flags)

    async def relevant_context_sentences(self, question: str, contexts: Sequence[str]) -> ContextSentences:
        """Context sentences whose cosine to the question reaches the calibrated threshold."""
        if not (question or "").strip():
            raise JudgeUnsupported("judge 'local' needs a question to judge context sentences against")
        kept = self._require_contexts(contexts)
        self._within_bound(question, kept)

        def pick() -> ContextSentences:
            sentences = [s.text for ctx in kept for s in T.sentences(ctx)]
            if not sentences:
                return ContextSentences(total=0, relevant=[])
            vectors = self.embedder.embed(sentences + [question])
            cos = vectors[:-1] @ vectors[-1]
            threshold = self.params.relevance_threshold
            return ContextSentences(
                total=len(sentences), relevant=[s for s, c in zip(sentences, cos) if c >= threshold]
            )

        return await self._run(pick)

    async def attribute_statements(self, reference: str, contexts: Sequence[str]) -> list[ClaimVerdict]:
        """The reference's claims, each verified against the contexts with the claim-support model."""
        if not (reference or "").strip():
            return []
        kept = self._require_contexts(contexts)
        self._within_bound(reference, kept)
        return await self._run(lambda: self._verdicts([c.text for c in T.claims(reference)], kept, ""))

    async def extract_entities(self, text: str) -> list[str]:
        """Capitalised spans (names, places, titles) and numbers, deduplicated (rule-based)."""
        if not (text or "").strip():
            return []
        self._within_bound(text)
        return await self._run(T.entities, text)

    def identity(self) -> JudgeIdentity:
        """``local/<model>`` (``features`` after a fall-back) and the sha256 of what decides: the feature models'
        parameters, the embeddings switch, and the ONNX files' sha256 (the pinned one their parameters record,
        or the file's own where the environment names another file)."""
        parts: list[str] = [json.dumps(self.params.raw, sort_keys=True), f"embeddings={self.use_embeddings}"]
        for stage in (self.cascade, self.reader):
            if stage is not None:
                params = stage.params
                parts.append(_file_sha256(params.model_path()) if params.overridden() else params.sha256)
                parts.append(json.dumps(params.raw, sort_keys=True))
        return JudgeIdentity(model=f"local/{self.model_name}", hash=sha256_hex(*parts))

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False)


@functools.cache
def _file_sha256(path: Path) -> str:
    """A model file named by the environment, hashed once per process (the pinned ones are not read for this)."""
    return sha256_of(path)


P = TypeVar("P", CascadeParams, ReaderParams)


class _Stage(Generic[P]):
    """A model stage's parameters and its ONNX model, loaded on first use (once per judge), with counts."""

    def __init__(self, params: P, encoder: PairScorer | None = None) -> None:
        self.params: P = params
        self._encoder = encoder
        self._lock = threading.Lock()
        self.stats = CascadeStats()

    def encoder(self) -> PairScorer:
        with self._lock:
            if self._encoder is None:
                self._encoder = CrossEncoder(self.params)
            return self._encoder


def _require_file(params: EncoderFiles, given: PairScorer | None, what: str) -> None:
    if given is None and not params.model_path().is_file():
        raise CrossEncoderError(f"{what} model file not found: {params.model_path()}")


def _conflict_kind(claim: str, best_sentence: str | None, index: ContextIndex) -> str:
    """The kind of conflict a context sentence shows with ``claim`` (:mod:`conflicts`), ``""`` for none."""
    conflict = claim_conflict(claim, best_sentence, index)
    return conflict.kind if conflict is not None else ""


def _supported_reason(p: float, row: ClaimSupport, index: ContextIndex) -> str:
    if row.best_sentence is None or row.best_sentence not in index.sentences:
        return f"supported (P={p:.2f})"
    j = index.sentences.index(row.best_sentence)
    k = index.sentence_context[j] if j < len(index.sentence_context) else 0
    return f"supported by context #{k + 1}: '{quote(row.best_sentence, [])}' (P={p:.2f})"


def _not_found_reason(claim: str, p: float, contexts: Sequence[str]) -> str:
    """Say what the contexts lack: the claim's numbers, names or words that none of them has."""
    joined = "\n".join(contexts).lower()
    missing_numbers = sorted(n for n in T.numbers(claim) if n not in T.numbers(joined))
    missing_names = [
        name
        for name in T.capitalised_spans(claim)
        if not all(w in joined for w in T.words(name) if w not in T.STOPWORDS)
    ]
    ctx_tokens = set(T.content_words(joined))
    # compared as stems, said as the claim wrote them ("produced", never the stem "produc"); the numbers and names
    # already said are not said again
    said = {w for name in missing_names for w in T.words(name)}
    missing_words = [
        w
        for w in dict.fromkeys(T.words(claim))
        if w not in T.STOPWORDS
        and len(w) > 1
        and not any(c.isdigit() for c in w)
        and w not in said
        and T.stem(w) not in ctx_tokens
    ]
    parts = []
    if missing_numbers:
        parts.append("numbers not in the contexts: " + ", ".join(missing_numbers))
    if missing_names:
        parts.append("names not in the contexts: " + ", ".join(missing_names))
    if missing_words:
        parts.append("words not in the contexts: " + ", ".join(missing_words[:8]))
    if not parts:
        parts.append("the contexts do not state it closely enough")
    return f"not found in the contexts (P={p:.2f}): " + "; ".join(parts)

"""Claim-support features: how well the retrieved contexts back one claim.

One row per claim, columns named in :data:`FEATURE_NAMES`. The signals: lexical coverage of the
claim's content words (whole contexts, best sentence, bigrams, fuzzy match), novel numbers, months
and capitalised names (an invented figure or name is strong evidence), novel rare versus common
words, conflicts with the best sentence's figures and names, negation mismatch with the
best sentence, hedged "the passages do not say" claims, length and position, and, when an embedder
is given, embedding similarity of the claim to its best context sentences and to the question.
The same code computes the features for training (``scripts/train_local_judge.py``) and at run time.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from rapidfuzz import fuzz

from . import text as T

LEXICAL_FEATURES = (
    "coverage",
    "novel_words",
    "novel_words_not_in_question",
    "novel_long_words",
    "novel_rare_words",
    "novel_common_words",
    "novel_bigrams",
    "best_sentence_coverage",
    "bigram_coverage",
    "fuzzy_best_sentence",
    "has_number",
    "novel_numbers",
    "novel_months",
    "novel_names",
    "novel_fact",
    "novel_fact_x_coverage",
    "fact_conflict",
    "name_count",
    "negation_mismatch",
    "log_words",
    "question_coverage",
    "meta_reference",
    "no_information_claim",
    "position",
)
EMBEDDING_FEATURES = ("emb_max", "emb_top3", "emb_question", "emb_max_x_coverage")
FEATURE_NAMES = LEXICAL_FEATURES + EMBEDDING_FEATURES

_META = re.compile(r"\b(passages?|context|provided|according to|based on|mentioned|sources?)\b", re.I)
_NO_INFO = re.compile(
    r"(do(?:es)?n't|do(?:es)? not|did not|cannot|can't|unable|no)\s+(?:\w+\s+){0,4}"
    r"(provide|mention|say|state|specify|contain|answer|information|found|include|address|give)",
    re.I,
)


def _bigrams(tokens: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(tokens))


@dataclass
class ContextIndex:
    """The contexts of one record, split and indexed once (cached by the judge across claims)."""

    sentences: list[str]
    sentence_tokens: list[set[str]]
    tokens: set[str]
    bigrams: set[tuple[str, str]]
    numbers: set[str]
    months: set[str]
    lower: str
    embeddings: np.ndarray | None = None  # (len(sentences), dim) when an embedder is in use
    sentence_context: list[int] = field(default_factory=list)  # which context each sentence is in (0-based)

    @classmethod
    def build(cls, contexts: Sequence[str]) -> ContextIndex:
        sents: list[str] = []
        where: list[int] = []
        for k, ctx in enumerate(contexts):
            found = [s.text for s in T.sentences(ctx)]
            sents.extend(found)
            where.extend([k] * len(found))
        sentence_tokens = [set(T.content_words(s)) for s in sents]
        all_tokens: set[str] = set().union(*sentence_tokens) if sentence_tokens else set()
        bigrams: set[tuple[str, str]] = set()
        for ctx in contexts:
            bigrams |= _bigrams(T.content_words(ctx))
        joined = "\n".join(contexts)
        return cls(
            sentences=sents,
            sentence_tokens=sentence_tokens,
            tokens=all_tokens,
            bigrams=bigrams,
            numbers=T.numbers(joined),
            months=T.months(joined),
            lower=joined.lower(),
            sentence_context=where,
        )


@dataclass
class ClaimSupport:
    """Features of one claim and the context sentence that best supports it."""

    features: np.ndarray
    best_sentence: str | None


def claim_features(
    claims: Sequence[str],
    question: str,
    index: ContextIndex,
    claim_embeddings: np.ndarray | None = None,
    question_embedding: np.ndarray | None = None,
    common_words: frozenset[str] = frozenset(),
) -> list[ClaimSupport]:
    """Features for each claim against the indexed contexts (embedding columns 0 without embeddings).

    ``common_words``: stems frequent in answers (learned at training time, stored with the model);
    a novel word outside them ("Napoleon", "gold") says more than a novel common one ("ensure").
    """
    q_tokens = set(T.content_words(question))
    q_numbers = T.numbers(question)
    q_lower = question.lower()
    sims: np.ndarray | None = None
    if claim_embeddings is not None and index.embeddings is not None and len(index.sentences):
        sims = claim_embeddings @ index.embeddings.T  # (claims, sentences)
    out: list[ClaimSupport] = []
    n = max(1, len(claims))
    for i, claim in enumerate(claims):
        tokens = T.content_words(claim)
        token_set = set(tokens)
        size = max(1, len(token_set))
        in_ctx = token_set & index.tokens
        novel = token_set - index.tokens
        novel_not_q = novel - q_tokens
        best_j, best_overlap = -1, -1.0
        for j, sent_tokens in enumerate(index.sentence_tokens):
            overlap = len(token_set & sent_tokens)
            if overlap > best_overlap:
                best_j, best_overlap = j, overlap
        if sims is not None and len(index.sentences):
            emb_j = int(np.argmax(sims[i]))
            # Prefer the embedding's best sentence when it is lexically close to as good.
            if best_j < 0 or len(token_set & index.sentence_tokens[emb_j]) >= best_overlap - 1:
                best_j = emb_j
        best_sentence = index.sentences[best_j] if best_j >= 0 else None
        claim_bigrams = _bigrams(tokens)
        bigram_cov = len(claim_bigrams & index.bigrams) / len(claim_bigrams) if claim_bigrams else 1.0
        fuzzy = fuzz.partial_ratio(claim.lower(), best_sentence.lower()) / 100.0 if best_sentence else 0.0
        nums = T.numbers(claim)
        novel_numbers = len(nums - index.numbers - q_numbers)
        novel_months = len(T.months(claim) - index.months)
        names = T.capitalised_spans(claim)
        novel_names = 0
        for name in names:
            parts = [w for w in T.words(name) if w not in T.STOPWORDS]
            if parts and not all(p in index.lower or p in q_lower for p in parts):
                novel_names += 1
        novel_fact = bool(novel_numbers or novel_months or novel_names)
        # A conflict: the claim's invented number/month/name sits where the best matching context
        # sentence has a different one (1889 → 1923, March → October, Eiffel → Edison).
        conflict = 0
        if novel_fact and best_sentence is not None:
            claim_lower = claim.lower()
            if novel_numbers and T.numbers(best_sentence) - nums:
                conflict += 1
            if novel_months and T.months(best_sentence) - T.months(claim):
                conflict += 1
            if novel_names and any(n.lower() not in claim_lower for n in T.capitalised_spans(best_sentence)):
                conflict += 1
        neg_mismatch = float(best_sentence is not None and T.negated(claim) != T.negated(best_sentence))
        row = [
            len(in_ctx) / size,
            math.log1p(len(novel)),
            math.log1p(len(novel_not_q)),
            math.log1p(sum(1 for w in novel_not_q if len(w) >= 7)),
            math.log1p(len(novel_not_q - common_words)),
            math.log1p(len(novel_not_q & common_words)),
            math.log1p(len(claim_bigrams - index.bigrams)),
            max(best_overlap, 0) / size,
            bigram_cov,
            fuzzy,
            float(bool(nums)),
            float(novel_numbers),
            float(novel_months),
            float(novel_names),
            float(novel_fact),
            float(novel_fact) * len(in_ctx) / size,
            float(conflict),
            math.log1p(len(names)),
            neg_mismatch,
            math.log1p(len(claim.split())),
            len(token_set & q_tokens) / size,
            float(bool(_META.search(claim))),
            float(bool(_NO_INFO.search(claim))),
            i / n,
        ]
        if sims is not None and claim_embeddings is not None:  # sims exist only with claim embeddings
            row_sims = np.sort(sims[i])[::-1]
            emb_max = float(row_sims[0])
            emb_top3 = float(row_sims[:3].mean())
            emb_q = float(claim_embeddings[i] @ question_embedding) if question_embedding is not None else 0.0
            row += [emb_max, emb_top3, emb_q, emb_max * (len(in_ctx) / size)]
        else:
            row += [0.0] * len(EMBEDDING_FEATURES)
        out.append(ClaimSupport(np.asarray(row, dtype=np.float64), best_sentence))
    return out

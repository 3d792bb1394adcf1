"""Okapi BM25 over the example corpus, in plain Python (k1=1.5, b=0.75, Lucene-style idf)."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

_TOKEN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "why",
        "how",
        "did",
        "does",
        "do",
        "with",
        "into",
        "about",
        "than",
        "then",
        "there",
        "these",
        "those",
        "their",
        "they",
        "he",
        "she",
        "his",
        "her",
        "one",
        "no",
        "not",
    ]
)


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


@dataclass(frozen=True)
class Hit:
    id: str
    content: str
    score: float
    metadata: dict


class BM25Index:
    """An inverted index: ``search(query, k)`` returns the ``k`` best passages, best first."""

    def __init__(self, passages: list[dict], k1: float = 1.5, b: float = 0.75) -> None:
        self.passages = passages
        self.k1, self.b = k1, b
        self.doc_tokens = [tokenize(p["text"]) for p in passages]
        self.doc_len = [len(t) for t in self.doc_tokens]
        self.avgdl = sum(self.doc_len) / max(1, len(self.doc_len))
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, toks in enumerate(self.doc_tokens):
            for term, tf in Counter(toks).items():
                self.postings.setdefault(term, []).append((i, tf))
        n = len(passages)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}

    def scores(self, query: str) -> dict[int, float]:
        acc: dict[int, float] = {}
        k1, b, avgdl = self.k1, self.b, self.avgdl
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for i, tf in self.postings[term]:
                norm = tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.doc_len[i] / avgdl))
                acc[i] = acc.get(i, 0.0) + idf * norm
        return acc

    def search(self, query: str, k: int = 5) -> list[Hit]:
        ranked = sorted(self.scores(query).items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        out = []
        for i, s in ranked:
            p = self.passages[i]
            out.append(Hit(p["id"], p["text"], round(s, 4), {"title": p.get("title", "")}))
        return out

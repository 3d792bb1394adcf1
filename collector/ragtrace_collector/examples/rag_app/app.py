"""The example RAG app: BM25 retrieval → term-overlap reranking → streamed answer, all traced."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ragtrace

from .bm25 import BM25Index, tokenize
from .generation import build_messages, chunk_text, extractive_stream, llm_stream

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.jsonl"
PIPELINE_NAME = "elements-qa"
DEGRADED_SLOW_FIRST_TOKEN_S = 0.6


def load_corpus(path: Path | str = CORPUS_PATH) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class Answer:
    """What :meth:`RagApp.answer` returns."""

    question: str
    text: str
    contexts: list[str]
    context_ids: list[str]
    trace_id: str | None
    faults: dict[str, Any] = field(default_factory=dict)


def unsupported_claim(contexts: list[dict]) -> str:
    """An invented sentence with a wrong number and a wrong name, about the top passage's subject."""
    subject = contexts[0]["metadata"].get("title", "It") if contexts else "It"
    n = sum(map(ord, subject)) % 50
    return f"{subject} was first produced commercially in {1912 + n} by Niels Bohr, and its atomic number is {120 + n}."


class RagApp:
    """A small but real RAG pipeline over the chemical-elements corpus shipped in ``data/``.

    Fault knobs (constructor defaults, overridable per call): ``drop_best`` removes the best
    passage from the retrieval results, ``add_unsupported_claim`` appends an invented claim
    to the answer, ``slow_first_token`` delays the first streamed token (seconds). ``token_delay`` and
    ``prefill_delay`` give the offline generator a served model's latency shape.
    ``answer(q, degrade=True)`` turns all three on.
    """

    def __init__(
        self,
        *,
        corpus_path: Path | str = CORPUS_PATH,
        top_k: int = 3,
        candidates: int = 8,
        model: str | None = None,
        api_base: str | None = None,
        token_delay: float = 0.004,
        prefill_delay: float = 0.0,
        drop_best: bool = False,
        add_unsupported_claim: bool = False,
        slow_first_token: float = 0.0,
    ) -> None:
        self.passages = load_corpus(corpus_path)
        self.index = BM25Index(self.passages)
        self.top_k = top_k
        self.candidates = candidates
        self.model = model if model is not None else os.environ.get("RAGTRACE_EXAMPLE_MODEL") or None
        self.api_base = api_base if api_base is not None else os.environ.get("RAGTRACE_EXAMPLE_API_BASE") or None
        self.token_delay = token_delay
        self.prefill_delay = prefill_delay  # offline generator: seconds per 1,000 prompt tokens before the first token
        self.drop_best = drop_best
        self.add_unsupported_claim = add_unsupported_claim
        self.slow_first_token = slow_first_token

    @ragtrace.retriever(name="bm25_search", data_source="elements-corpus")
    def retrieve(self, query: str, k: int = 8, drop_best: bool = False) -> list[dict]:
        hits = self.index.search(query, k + (1 if drop_best else 0))
        if drop_best:
            hits = hits[1:]
        return [{"id": h.id, "content": h.content, "score": h.score, "metadata": h.metadata} for h in hits]

    @ragtrace.reranker(name="overlap_rerank", model="term-overlap")
    def rerank(self, query: str, documents: list[dict], top_k: int = 3) -> list[dict]:
        """Reorder by the share of query terms each passage covers, BM25 score breaking ties."""
        q = set(tokenize(query))

        def key(d: dict) -> tuple[float, float]:
            cover = len(q & set(tokenize(d["content"]))) / max(1, len(q))
            return (cover, d["score"])

        ranked = sorted(documents, key=key, reverse=True)[:top_k]
        return [{**d, "score": round(key(d)[0], 4)} for d in ranked]

    @ragtrace.generator(name="extractive_answer", model="ragtrace/extractive-v1", provider="ragtrace")
    def generate_offline(
        self, question: str, contexts: list[str], slow_first_token: float = 0.0, extra_claim: str | None = None
    ) -> Iterator[str]:
        yield from extractive_stream(
            question,
            contexts,
            token_delay=self.token_delay,
            prefill_delay=self.prefill_delay,
            slow_first_token=slow_first_token,
            extra_claim=extra_claim,
            idf=self.index.idf,
            with_usage=True,
        )

    @ragtrace.generator(name="llm_answer")
    def generate_llm(
        self,
        question: str,
        contexts: list[str],
        messages: list[dict],
        model: str,
        slow_first_token: float = 0.0,
        extra_claim: str | None = None,
    ) -> Iterator[Any]:
        stream = llm_stream(model, messages, api_base=self.api_base)
        first = True
        for chunk in stream:
            if first and slow_first_token:
                time.sleep(slow_first_token)
            first = False
            yield chunk
        if extra_claim:
            yield " " + extra_claim

    @ragtrace.pipeline(name=PIPELINE_NAME)
    def answer(
        self,
        question: str,
        degrade: bool = False,
        *,
        drop_best: bool | None = None,
        add_unsupported_claim: bool | None = None,
        slow_first_token: float | None = None,
        reference: str | None = None,
        session_id: str | None = None,
        user_id: str | None = None,
    ) -> Answer:
        """Answer one question. ``degrade=True`` switches every fault on for this call."""
        drop = self.drop_best if drop_best is None else drop_best
        claim = self.add_unsupported_claim if add_unsupported_claim is None else add_unsupported_claim
        slow = self.slow_first_token if slow_first_token is None else slow_first_token
        if degrade:
            drop, claim, slow = True, True, max(slow, DEGRADED_SLOW_FIRST_TOKEN_S)
        faults = {"drop_best": drop, "add_unsupported_claim": claim, "slow_first_token": slow}
        ragtrace.annotate(
            reference=reference,
            session_id=session_id,
            user_id=user_id,
            tags=["degraded"] if degrade else None,
            metadata={"faults": faults, "generator": self.model or "extractive"},
        )
        candidates = self.retrieve(question, self.candidates, drop_best=drop)
        top = self.rerank(question, candidates, top_k=self.top_k)
        contexts = [d["content"] for d in top]
        extra = unsupported_claim(top) if claim else None
        if self.model:
            stream = self.generate_llm(
                question,
                contexts,
                build_messages(question, contexts),
                self.model,
                slow_first_token=slow,
                extra_claim=extra,
            )
        else:
            stream = self.generate_offline(question, contexts, slow_first_token=slow, extra_claim=extra)
        text = "".join(chunk_text(c) for c in stream).strip()
        return Answer(question, text, contexts, [d["id"] for d in top], ragtrace.current_trace_id(), faults)

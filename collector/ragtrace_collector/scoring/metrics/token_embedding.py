"""Contextual token-embedding metrics: BERTScore and MoverScore. No judge involved.

Both run on the collector's own model, all-MiniLM-L6-v2 as int8 ONNX (:mod:`ragtrace_collector.scoring.embeddings`):
**MiniLM-L6 contextual embeddings (its last layer, 384 dimensions), no baseline rescaling**. Their numbers are not
comparable with published BERTScore (RoBERTa-large, layer 17, often baseline-rescaled) or MoverScore
(DistilBERT/BERT) figures: compare them with each other, on the same model, only.
"""

from __future__ import annotations

import asyncio
import math
import string
from typing import Any

import numpy as np

from ragtrace_collector.scoring.metrics.base import Metric, MetricSkipped, Outcome, ScoringContext

SPECIAL = ("[CLS]", "[SEP]")
MODEL_NOTE = "MiniLM-L6 contextual embeddings, no baseline rescaling"
_PUNCTUATION = set(string.punctuation)


async def token_states(ctx: ScoringContext, text: str) -> Any:
    """The text's :class:`~ragtrace_collector.scoring.embeddings.TokenStates`, computed once per record."""
    from ragtrace_collector.scoring.embeddings import EmbeddingModelError, LocalEmbedder

    def run() -> Any:
        return LocalEmbedder.shared().token_states([text])[0]

    try:
        return await ctx.memo(("token_states", text), lambda: asyncio.to_thread(run))
    except EmbeddingModelError as exc:
        raise MetricSkipped(f"the local embedding model is unavailable: {exc}") from None


def _unit(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)


def bertscore(
    hyp_tokens: list[str], hyp_vectors: np.ndarray, ref_tokens: list[str], ref_vectors: np.ndarray
) -> tuple[float, float, float]:
    """(P, R, F1) of greedy cosine matching, as ``bert_score.utils.greedy_cos_idf`` without IDF: every token is a
    match candidate, ``[CLS]``/``[SEP]`` weigh 0 in the averages."""
    sim = _unit(hyp_vectors) @ _unit(ref_vectors).T
    hyp_w = np.array([0.0 if t in SPECIAL else 1.0 for t in hyp_tokens])
    ref_w = np.array([0.0 if t in SPECIAL else 1.0 for t in ref_tokens])
    if hyp_w.sum() == 0 or ref_w.sum() == 0:
        raise MetricSkipped("no word piece to match (empty text after tokenisation)")
    precision = float((sim.max(axis=1) * hyp_w).sum() / hyp_w.sum())
    recall = float((sim.max(axis=0) * ref_w).sum() / ref_w.sum())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall != 0 else 0.0
    return precision, recall, f1


def moverscore_weights(tokens: list[str], idf: dict[str, float] | None) -> np.ndarray:
    """MoverScore's token mass before normalising: IDF (1 each when ``idf`` is None), 0 for word-piece
    continuations (``##``) and punctuation tokens."""
    return np.array(
        [
            0.0 if "##" in t or t in _PUNCTUATION else (1.0 if idf is None else idf.get(t, idf["<unseen>"]))
            for t in tokens
        ]
    )


def context_idf(documents: list[list[str]]) -> dict[str, float]:
    """MoverScore's IDF over a set of token lists: log((N + 1) / (df + 1)), unseen tokens log(N + 1)."""
    n = len(documents)
    df: dict[str, int] = {}
    for doc in documents:
        for tok in set(doc):
            df[tok] = df.get(tok, 0) + 1
    idf = {tok: math.log((n + 1) / (c + 1)) for tok, c in df.items()}
    idf["<unseen>"] = math.log(n + 1)
    return idf


def moverscore(ref_vectors: np.ndarray, ref_w: np.ndarray, hyp_vectors: np.ndarray, hyp_w: np.ndarray) -> float:
    """1 − EMD between the two weighted token clouds, ground distance Euclidean between unit vectors (POT)."""
    try:
        import ot
    except ImportError:  # the moverscore extra: left out of the default install for its size
        raise MetricSkipped(
            "MoverScore's transport needs POT, not installed: pip install 'ragtrace-collector[moverscore]'"
        ) from None

    if ref_w.sum() <= 0 or hyp_w.sum() <= 0:
        raise MetricSkipped("no token carries weight (only punctuation, word-piece continuations or zero IDF)")
    a, b = ref_w / ref_w.sum(), hyp_w / hyp_w.sum()
    ref_u, hyp_u = _unit(ref_vectors), _unit(hyp_vectors)
    cost = np.sqrt(np.clip(2.0 - 2.0 * (ref_u @ hyp_u.T), 0.0, None))  # |u − v| for unit u, v
    flow = ot.emd(a, b, cost)
    return float(1.0 - (flow * cost).sum())


class BertScore(Metric):
    """bertscore = F1 = 2·P·R / (P + R) of greedy cosine matching over contextual token embeddings
    (Zhang et al. 2020), response x̂ against reference x.

    Tokens are the model's WordPieces with ``[CLS]``/``[SEP]``; embeddings the model's last hidden state, compared
    by cosine. P = mean over response tokens x̂ⱼ of max_i cos(xᵢ, x̂ⱼ); R = mean over reference tokens xᵢ of
    max_j cos(xᵢ, x̂ⱼ); the special tokens are match candidates but weigh 0 in the means (bert_score's own
    convention), no IDF weighting (bert_score's default). Identical texts score 1. Range −1–1 (cosines), in
    practice 0–1. **MiniLM-L6 contextual embeddings, no baseline rescaling**: not comparable with RoBERTa-large
    BERTScore. Texts over 256 word pieces are cut (``truncated`` in the details).
    """

    name = "bertscore"
    requires = ("response", "reference")
    score_range = (-1.0, 1.0)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        hyp = await token_states(ctx, ctx.record.response or "")
        ref = await token_states(ctx, ctx.record.reference or "")
        p, r, f1 = bertscore(hyp.tokens, hyp.vectors, ref.tokens, ref.vectors)
        return Outcome(
            f1,
            {
                "precision": round(p, 6),
                "recall": round(r, 6),
                "f1": round(f1, 6),
                "model": MODEL_NOTE,
                "truncated": hyp.truncated or ref.truncated,
            },
        )


class MoverScore(Metric):
    """moverscore = 1 − EMD(reference, response) between weighted contextual token embeddings (Zhao et al. 2019,
    MoverScore v2's unigram form).

    Each text is its WordPieces with ``[CLS]``/``[SEP]``, embedded by the model's last layer and unit-normalised;
    a token's mass is its IDF weight, 0 for ``##`` continuations and punctuation, normalised to sum 1 per text.
    EMD = min over flows F ≥ 0 with the two masses as marginals of Σᵢⱼ Fᵢⱼ·‖xᵢ − x̂ⱼ‖ (POT's exact solver).
    IDF (``scoring.options.moverscore_idf``): ``uniform`` (default) weighs every token 1, as MoverScore's own
    ``sentence_score`` does for one pair (corpus document frequencies do not exist per record); ``contexts`` uses
    log((N + 1) / (df + 1)) with document frequencies over the record's N retrieved contexts (skipped without
    contexts). Identical texts score 1. Range −1–1 (distances between unit vectors are at most 2), in practice
    0–1. **MiniLM-L6 contextual embeddings, no baseline rescaling**: not comparable with published MoverScore.
    """

    name = "moverscore"
    requires = ("response", "reference")
    score_range = (-1.0, 1.0)

    async def compute(self, ctx: ScoringContext) -> Outcome:
        mode = ctx.options.moverscore_idf
        idf: dict[str, float] | None = None
        if mode == "contexts":
            if not ctx.contexts:
                raise MetricSkipped("moverscore_idf is 'contexts' but the record has no retrieved contexts")
            docs = [await token_states(ctx, c) for c in ctx.contexts]
            idf = context_idf([d.tokens for d in docs])
        hyp = await token_states(ctx, ctx.record.response or "")
        ref = await token_states(ctx, ctx.record.reference or "")
        hyp_w, ref_w = moverscore_weights(hyp.tokens, idf), moverscore_weights(ref.tokens, idf)
        score = await asyncio.to_thread(moverscore, ref.vectors, ref_w, hyp.vectors, hyp_w)
        return Outcome(
            score,
            {
                "idf": mode,
                "weighted_tokens": {"response": int((hyp_w > 0).sum()), "reference": int((ref_w > 0).sum())},
                "model": MODEL_NOTE,
                "truncated": hyp.truncated or ref.truncated,
            },
        )

"""BERTScore and MoverScore on the shipped MiniLM token states: worked arithmetic on fixed vectors, sanity on text."""

from __future__ import annotations

import math
import string
import sys

import numpy as np
import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.metrics.base import MetricSkipped
from ragtrace_collector.scoring.metrics.token_embedding import (
    bertscore,
    context_idf,
    moverscore,
    moverscore_weights,
)
from ragtrace_collector.scoring.options import ScoringOptions

E = np.eye(3)


def test_bertscore_worked_example() -> None:
    """Response tokens [CLS] a b [SEP], reference [CLS] a c [SEP], with a = e0, b = e1, c = (e0 + e1)/√2 and the
    special tokens on e2. Best cosines: a→a 1, b→c 1/√2 (P = (1 + 1/√2)/2); a→a 1, c→a or b 1/√2 (R the same);
    [CLS]/[SEP] weigh 0. F1 = P = R = 0.853553."""
    c = (E[0] + E[1]) / math.sqrt(2)
    hyp = np.stack([E[2], E[0], E[1], E[2]])
    ref = np.stack([E[2], E[0], c, E[2]])
    p, r, f1 = bertscore(["[CLS]", "a", "b", "[SEP]"], hyp, ["[CLS]", "a", "c", "[SEP]"], ref)
    expected = (1 + 1 / math.sqrt(2)) / 2
    assert (p, r, f1) == pytest.approx((expected, expected, expected), abs=1e-12)


def test_moverscore_worked_example() -> None:
    """Reference tokens a, c (mass 1/2 each), response a, b: the optimal flow sends a→a (distance 0) and c→b
    (distance ‖c − b‖ = √(2 − 2/√2)) = 0.765367), so EMD = 0.382683 and the score 0.617317. Punctuation and ##
    pieces carry no mass."""
    c = (E[0] + E[1]) / math.sqrt(2)
    ref_w = moverscore_weights(["a", "c", ".", "##x"], None)
    assert ref_w.tolist() == [1.0, 1.0, 0.0, 0.0]
    ref = np.stack([E[0], c, E[2], E[2]])
    hyp = np.stack([E[0], E[1]])
    score = moverscore(ref, ref_w, hyp, np.ones(2))
    assert score == pytest.approx(1 - 0.5 * math.sqrt(2 - 2 / math.sqrt(2)), abs=1e-9)
    with pytest.raises(MetricSkipped):
        moverscore(ref, np.zeros(4), hyp, np.ones(2))


def test_context_idf() -> None:
    idf = context_idf([["[CLS]", "paris", "[SEP]"], ["[CLS]", "rome", "[SEP]"]])
    assert idf["[CLS]"] == 0.0  # in every document
    assert idf["paris"] == pytest.approx(math.log(3 / 2))
    assert idf["<unseen>"] == pytest.approx(math.log(3))


@pytest.mark.parametrize("metric", ["bertscore", "moverscore"])
async def test_identical_scores_one_and_paraphrase_beats_unrelated(metric: str) -> None:
    ref = "The cat sat on the mat."

    async def score(response: str) -> float:
        [r] = await evaluate_record(RagRecord(response=response, reference=ref), [metric], None)  # type: ignore[arg-type]
        assert r.status == "scored", r.reason
        assert r.details["model"] == "MiniLM-L6 contextual embeddings, no baseline rescaling"
        assert r.score is not None
        return r.score

    assert await score(ref) == pytest.approx(1.0, abs=1e-5)
    paraphrase = await score("A cat was sitting on the rug.")
    unrelated = await score("Stock prices fell sharply on Monday.")
    assert paraphrase > unrelated + 0.2


async def test_moverscore_context_idf_option() -> None:
    rec = RagRecord(response="Paris is in France.", reference="Paris is the capital of France.")
    [r] = await evaluate_record(rec, ["moverscore"], None, ScoringOptions(moverscore_idf="contexts"))  # type: ignore[arg-type]
    assert r.status == "skipped" and "retrieved contexts" in (r.reason or "")
    rec.retrieved_contexts = RagRecord(
        retrieved_contexts=["France's capital is Paris.", "Rome is in Italy."]
    ).retrieved_contexts
    [r] = await evaluate_record(rec, ["moverscore"], None, ScoringOptions(moverscore_idf="contexts"))  # type: ignore[arg-type]
    assert r.status == "scored" and r.details["idf"] == "contexts"
    with pytest.raises(ValueError):
        ScoringOptions(moverscore_idf="corpus")


async def test_token_states_pool_to_the_sentence_embedding() -> None:
    """The token states are what embed() mean-pools: the same model, the same tokens."""
    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    e = LocalEmbedder.shared()
    [states] = e.token_states(["The cat sat on the mat."])
    assert states.tokens[0] == "[CLS]" and states.tokens[-1] == "[SEP]" and not states.truncated
    pooled = states.vectors.mean(axis=0)
    assert float(pooled / np.linalg.norm(pooled) @ e.embed(["The cat sat on the mat."])[0]) == pytest.approx(
        1, abs=1e-5
    )
    assert e.token_states(["word " * 400])[0].truncated


# --- against the reference implementations' arithmetic ------------------------------------------------------------
# Neither bert_score nor moverscore installs here (both need torch; moverscore also pyemd and a GPU by default), so
# their scoring steps are restated below in plain numpy, step by step as the reference code does them (padded
# masks and an IDF dict for bert_score's ``greedy_cos_idf``; one joint token space, zero-mass padding and a
# generic LP solver for moverscore_v2's ``word_mover_score``), and the metrics' functions must agree with them.

PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the rug."),
    ("Einstein was born in Ulm, Germany, in 1879.", "Albert Einstein was born on 14 March 1879 in Ulm."),
    ("Paris is the capital of France.", "Stock prices fell sharply on Monday!"),
]


def reference_bertscore(hyp_tokens, hyp_vectors, ref_tokens, ref_vectors) -> tuple[float, float, float]:
    """bert_score's greedy_cos_idf for one pair, idf=False: IDF 1 for every token but [CLS]/[SEP] (0), the weights
    divided by their sum, similarities masked, P over the candidate's rows, R over the reference's columns."""
    idf = {"[CLS]": 0.0, "[SEP]": 0.0}
    hyp = hyp_vectors / np.linalg.norm(hyp_vectors, axis=-1, keepdims=True)
    ref = ref_vectors / np.linalg.norm(ref_vectors, axis=-1, keepdims=True)
    sim = (hyp @ ref.T) * np.outer(np.ones(len(hyp)), np.ones(len(ref)))
    hyp_idf = np.array([idf.get(t, 1.0) for t in hyp_tokens])
    ref_idf = np.array([idf.get(t, 1.0) for t in ref_tokens])
    p = float((sim.max(axis=1) * hyp_idf / hyp_idf.sum()).sum())
    r = float((sim.max(axis=0) * ref_idf / ref_idf.sum()).sum())
    return p, r, 2 * p * r / (p + r)


def reference_moverscore(ref_tokens, ref_vectors, hyp_tokens, hyp_vectors) -> float:
    """moverscore_v2's word_mover_score for one pair with sentence_score's uniform IDF: ``##`` pieces and
    punctuation zeroed (vector and weight), both texts in one joint space, unit-normalised, all pairwise L2
    distances, c1 = the reference's masses then zeros, c2 = zeros then the candidate's, EMD over the joint space
    (here scipy's LP solver instead of pyemd), score = 1 − Σ flow · distance."""
    from scipy.optimize import linprog

    masked = lambda t: "##" in t or t in set(string.punctuation)  # noqa: E731
    ref = np.array([np.zeros_like(v) if masked(t) else v for t, v in zip(ref_tokens, ref_vectors)])
    hyp = np.array([np.zeros_like(v) if masked(t) else v for t, v in zip(hyp_tokens, hyp_vectors)])
    raw = np.concatenate([ref, hyp])
    raw = raw / (np.linalg.norm(raw, axis=-1, keepdims=True) + 1e-30)
    dist = np.sqrt(np.clip(((raw[:, None, :] - raw[None, :, :]) ** 2).sum(-1), 1e-30, None))
    n = len(raw)
    c1 = np.zeros(n)
    c2 = np.zeros(n)
    c1[: len(ref)] = [0.0 if masked(t) else 1.0 for t in ref_tokens]
    c2[len(ref) :] = [0.0 if masked(t) else 1.0 for t in hyp_tokens]
    c1, c2 = c1 / c1.sum(), c2 / c2.sum()
    rows = np.kron(np.eye(n), np.ones(n))  # Σ_j F_ij = c1_i
    cols = np.kron(np.ones(n), np.eye(n))  # Σ_i F_ij = c2_j
    lp = linprog(dist.ravel(), A_eq=np.vstack([rows, cols]), b_eq=np.concatenate([c1, c2]), bounds=(0, None))
    assert lp.status == 0, lp.message
    return float(1.0 - lp.fun)


@pytest.mark.parametrize("hyp_text, ref_text", PAIRS)
def test_bertscore_agrees_with_bert_score_arithmetic(hyp_text: str, ref_text: str) -> None:
    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    hyp, ref = LocalEmbedder.shared().token_states([hyp_text, ref_text])
    ours = bertscore(hyp.tokens, hyp.vectors, ref.tokens, ref.vectors)
    assert ours == pytest.approx(reference_bertscore(hyp.tokens, hyp.vectors, ref.tokens, ref.vectors), abs=1e-6)


@pytest.mark.parametrize("hyp_text, ref_text", PAIRS)
def test_moverscore_agrees_with_moverscore_v2_arithmetic(hyp_text: str, ref_text: str) -> None:
    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    hyp, ref = LocalEmbedder.shared().token_states([hyp_text, ref_text])
    ours = moverscore(
        ref.vectors, moverscore_weights(ref.tokens, None), hyp.vectors, moverscore_weights(hyp.tokens, None)
    )
    assert ours == pytest.approx(reference_moverscore(ref.tokens, ref.vectors, hyp.tokens, hyp.vectors), abs=1e-6)


def test_moverscore_without_its_extra_is_skipped_naming_it(monkeypatch) -> None:
    # POT (the moverscore extra) is left out of the default install: the metric says what to install, never fails
    monkeypatch.setitem(sys.modules, "ot", None)  # what ``import ot`` meets where the package is not installed
    with pytest.raises(MetricSkipped, match=r"ragtrace-collector\[moverscore\]"):
        moverscore(np.eye(2), np.ones(2), np.eye(2), np.ones(2))

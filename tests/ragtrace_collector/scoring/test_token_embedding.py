"""BERTScore and MoverScore on the shipped MiniLM token states: worked arithmetic on fixed vectors, sanity on text."""

from __future__ import annotations

import math

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

"""LocalJudge through the real metrics: supported answers beat invented facts, skips are clear."""

from __future__ import annotations

import json

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import StatementRelevance
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import Judge, JudgeUnsupported
from ragtrace_collector.scoring.judges.local import LocalJudge
from ragtrace_collector.scoring.judges.local import text as T
from ragtrace_collector.scoring.judges.local.model import PARAMS_PATH

CONTEXTS = [
    "The Eiffel Tower was completed in March 1889 for the World's Fair in Paris. "
    "It was designed by the engineering company of Gustave Eiffel. The tower is 330 metres tall.",
    "Each year about 7 million people visit the Eiffel Tower, making it one of the most visited monuments.",
]
QUESTION = "When was the Eiffel Tower completed and who designed it?"
SUPPORTED = (
    "The Eiffel Tower was completed in March 1889 for the World's Fair. "
    "It was designed by the company of Gustave Eiffel."
)
INVENTED = {
    "number": SUPPORTED.replace("1889", "1923"),
    "date": SUPPORTED.replace("March", "October"),
    "name": SUPPORTED.replace("Gustave Eiffel", "Thomas Edison"),
}


@pytest.fixture(scope="module", params=["lexical", "embedding"])
def judge(request: pytest.FixtureRequest) -> LocalJudge:
    """Both claim-support models: the default lexical one and the one with embedding features."""
    return LocalJudge(embeddings=request.param == "embedding")


def record(response: str, contexts: list[str] = CONTEXTS, question: str = QUESTION) -> RagRecord:
    return RagRecord(id="t", user_input=question, retrieved_contexts=contexts, response=response)


async def scores(judge: Judge, response: str, contexts: list[str] = CONTEXTS) -> dict[str, object]:
    results = await evaluate_record(record(response, contexts), ["faithfulness", "hallucination"], judge)
    return {r.metric: r for r in results}


async def min_confidence(judge: LocalJudge, response: str) -> float:
    claims = await judge.extract_claims(QUESTION, response)
    verdicts = await judge.verify_claims(claims, CONTEXTS, QUESTION)
    return min(v.confidence for v in verdicts)


async def test_supported_answer_is_faithful(judge: LocalJudge) -> None:
    result = (await scores(judge, SUPPORTED))["faithfulness"]
    assert result.status == "scored"
    assert result.score == 1.0
    claims = result.details["claims"]
    assert [c["verdict"] for c in claims] == ["yes", "yes"]
    assert "Gustave Eiffel" in claims[1]["evidence"]


@pytest.mark.parametrize("kind", sorted(INVENTED))
async def test_invented_number_date_or_name_scores_lower(judge: LocalJudge, kind: str) -> None:
    good = await min_confidence(judge, SUPPORTED)
    bad = await min_confidence(judge, INVENTED[kind])
    assert bad < good - 0.2, (kind, good, bad)
    result = (await scores(judge, INVENTED[kind]))["hallucination"]
    assert result.status == "scored" and result.score > 0
    # The unsupported sentence is the hallucination's reason, and says what is missing.
    assert len(result.details["unsupported"]) == 1
    # ... as contradicted, quoting the context sentence that states otherwise, or as not found, naming what is missing
    bad_claim = next(c for c in result.details["claims"] if c["verdict"] != "yes")
    said = {"number": "1889", "date": "March", "name": "Gustave Eiffel"}[kind]
    if bad_claim["verdict"] == "no":
        assert bad_claim["reason"].startswith("contradicted by context #1: '") and said in bad_claim["reason"]
    else:
        assert bad_claim["verdict"] == "idk" and "not in the contexts" in bad_claim["reason"], bad_claim


async def test_invented_fact_lowers_faithfulness(judge: LocalJudge) -> None:
    good = (await scores(judge, SUPPORTED))["faithfulness"].score
    bad = (await scores(judge, SUPPORTED + " The tower was painted gold by Napoleon in 1750."))["faithfulness"].score
    assert bad < good


async def test_scores_are_deterministic(judge: LocalJudge) -> None:
    response = INVENTED["name"] + " About 7 million people visit it each year."
    first = [r.to_dict() for r in (await scores(judge, response)).values()]
    second = [r.to_dict() for r in (await scores(LocalJudge(embeddings=judge.use_embeddings), response)).values()]
    for a, b in zip(first, second):
        a.pop("duration_seconds", None), b.pop("duration_seconds", None)
    assert json.dumps(first, sort_keys=True, default=str) == json.dumps(second, sort_keys=True, default=str)


async def test_empty_answer_and_empty_contexts_are_skipped_with_a_reason(judge: LocalJudge) -> None:
    for result in (await scores(judge, "")).values():
        assert result.status == "skipped" and "response" in result.reason
    for result in (await scores(judge, SUPPORTED, contexts=[])).values():
        assert result.status == "skipped" and "retrieved_contexts" in result.reason
    for result in (await scores(judge, "Sure! Thanks.")).values():
        assert result.status == "skipped" and "claims" in result.reason
    with pytest.raises(JudgeUnsupported, match="context"):
        await judge.verify_claims(["Paris is in France."], ["", "  "])


async def test_unsupported_decisions_skip_their_metrics(judge: LocalJudge) -> None:
    rec = record(SUPPORTED)
    results = await evaluate_record(rec, ["safety", "geval", "answer_correctness"], judge)
    for result in results:
        assert result.status == "skipped", (result.metric, result.status, result.reason)
    assert not isinstance(judge, StatementRelevance)  # declared, never probed
    with pytest.raises(JudgeUnsupported, match=r"^judge 'local' cannot decide statement relevance$"):
        StatementRelevance.of(judge)


async def test_relevance_metrics_use_embeddings(judge: LocalJudge) -> None:
    contexts = CONTEXTS + ["Bananas are rich in potassium and grow in tropical climates."]
    rec = RagRecord(id="r", user_input=QUESTION, retrieved_contexts=contexts, response=SUPPORTED, reference=SUPPORTED)
    results = {
        r.metric: r
        for r in await evaluate_record(
            rec,
            ["answer_relevancy", "context_precision", "context_relevancy", "context_recall", "answer_similarity"],
            judge,
        )
    }
    for name, result in results.items():
        assert result.status == "scored", (name, result.reason)
    assert results["answer_relevancy"].details["variant"] == "embedding"
    flags = await judge.chunk_relevance(QUESTION, SUPPORTED, contexts)
    assert flags == [True, False, False]
    picked = await judge.relevant_context_sentences(QUESTION, contexts)
    assert picked.total == 5
    assert not any("Bananas" in s for s in picked.relevant)
    assert any("completed in March 1889" in s for s in picked.relevant)
    assert results["context_recall"].score == 1.0


async def test_claims_split_lists_and_compound_sentences(judge: LocalJudge) -> None:
    response = (
        "Here is what the passages say:\n1. The tower is 330 metres tall, and it was finished in 1889 for the fair.\n"
        "2. About 7 million people visit it every year; it is one of the most visited monuments."
    )
    claims = await judge.extract_claims(QUESTION, response)
    assert claims == [
        "Here is what the passages say:",
        "The tower is 330 metres tall",
        "it was finished in 1889 for the fair.",
        "About 7 million people visit it every year",
        "it is one of the most visited monuments.",
    ]
    spans = T.claims(response)
    assert all(response[s.start : s.end] == s.text for s in spans)
    # Acronym answers are claims; bare filler is not.
    assert await judge.extract_claims("Which genre?", "R&B") == ["R&B"]
    assert await judge.extract_claims("Is it?", "yes") == []


async def test_entities_are_names_numbers_and_dates(judge: LocalJudge) -> None:
    found = await judge.extract_entities("In March 1889 the tower designed by Gustave Eiffel opened in Paris.")
    assert {"March", "1889", "Gustave Eiffel", "Paris"} <= set(found)
    assert "In" not in found and "The" not in " ".join(found)
    assert await judge.extract_entities("Delhi") == ["Delhi"]  # a short answer is all entity
    assert await judge.extract_entities("The cat sat on the mat.") == []


@pytest.mark.parametrize(
    ("text", "numbers", "words"),
    [
        ("a five-year warranty", {"5"}, ["year", "warranty"]),  # as "a 5-year warranty" reads
        ("a twenty-five-year lease", {"25"}, ["year", "lease"]),
        ("twenty-one days", {"21"}, ["day"]),
        ("two-thirds of voters", set(), ["two-third", "voter"]),  # a fraction is no count of two
        ("a one-off payment", set(), ["one-off", "payment"]),
        ("an automatic shut-off", set(), ["automatic", "shut-off"]),
    ],
)
def test_a_number_word_joined_by_a_hyphen_is_a_number(text: str, numbers: set[str], words: list[str]) -> None:
    # "a five-year warranty" against "a warranty for two years" was called supported: the hyphenated word hid both
    # its number and the "year" that says what the sentence is about (issue 31's second example)
    assert T.numbers(text) == numbers
    assert T.content_words(text) == words


def test_default_claim_model_is_the_fast_lexical_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGTRACE_LOCAL_JUDGE_EMBEDDINGS", raising=False)
    assert LocalJudge().use_embeddings is False
    monkeypatch.setenv("RAGTRACE_LOCAL_JUDGE_EMBEDDINGS", "1")
    assert LocalJudge().use_embeddings is True
    assert LocalJudge(embeddings=False).use_embeddings is False


def test_parameters_record_their_provenance() -> None:
    params = json.loads(PARAMS_PATH.read_text())
    assert params["command"].startswith("python3 scripts/train_local_judge.py")
    assert "ragtruth-qa-dev.jsonl" in params["data"]
    assert set(params["models"]) == {"lexical", "embedding"}
    assert "scikit-learn" in params["trained_with"]
    for model in params["models"].values():
        assert model["kind"] == "gradient_boosted_trees"
        assert all(max(t["feature"]) < len(model["feature_names"]) for t in model["trees"])
        assert 0 < model["threshold"] < 1


def test_exported_trees_evaluate_like_their_definition() -> None:
    """A hand-built two-leaf tree: the numpy traversal follows the sklearn node layout."""
    from ragtrace_collector.scoring.judges.local.model import TreeEnsembleModel, model_from_json

    tree = {
        "feature": [0, -2, -2],
        "threshold": [0.5, -2.0, -2.0],
        "left": [1, -1, -1],
        "right": [2, -1, -1],
        "value": [0.0, -3.0, 4.0],
    }
    model = model_from_json(
        {
            "kind": "gradient_boosted_trees",
            "feature_names": ["coverage"],
            "init": 0.0,
            "rate": 0.5,
            "trees": [tree, tree],
            "threshold": 0.5,
        }
    )
    assert isinstance(model, TreeEnsembleModel)
    import numpy as np

    raw = model.raw(np.array([[0.2], [0.5], [0.9]]))
    np.testing.assert_allclose(raw, [-3.0, -3.0, 4.0])
    assert model.predict(np.zeros((0, 1))).shape == (0,)


def test_trees_of_different_sizes_walk_together_like_one_at_a_time() -> None:
    """The traversal walks every tree at once (padded to the largest); each tree must still end
    on its own leaf, as a plain node-by-node walk of that tree alone would."""
    import numpy as np

    from ragtrace_collector.scoring.judges.local.model import model_from_json

    stump = {"feature": [1, -2, -2], "threshold": [0.0, 0, 0], "left": [1, -1, -1], "right": [2, -1, -1]}
    stump["value"] = [0.0, 1.0, -1.0]
    deep = {
        "feature": [0, 1, -2, -2, 0, -2, -2],
        "threshold": [0.5, -1.0, 0, 0, 2.0, 0, 0],
        "left": [1, 2, -1, -1, 5, -1, -1],
        "right": [4, 3, -1, -1, 6, -1, -1],
        "value": [0.0, 0, 10.0, 20.0, 0, 30.0, 40.0],
    }
    leaf = {"feature": [-2], "threshold": [0.0], "left": [-1], "right": [-1], "value": [0.25]}
    trees = [stump, deep, leaf, deep]
    model = model_from_json(
        {
            "kind": "gradient_boosted_trees",
            "feature_names": ["a", "b"],
            "init": 0.5,
            "rate": 0.1,
            "trees": trees,
            "threshold": 0.5,
        }
    )

    def walk(tree: dict, row: np.ndarray) -> float:
        node = 0
        while tree["feature"][node] >= 0:
            go_left = row[tree["feature"][node]] <= tree["threshold"][node]
            node = tree["left"][node] if go_left else tree["right"][node]
        return float(tree["value"][node])

    x = np.random.default_rng(7).normal(scale=2.0, size=(200, 2))
    x[:4] = [[0.5, -1.0], [0.5, 0.0], [2.0, 5.0], [2.1, -3.0]]  # exactly on thresholds: x <= t goes left
    expected = [0.5 + 0.1 * sum(walk(t, row) for t in trees) for row in x]
    np.testing.assert_allclose(model.raw(x), expected, rtol=0, atol=1e-12)
    assert model.raw(x[:4]).tolist() == pytest.approx([0.5 + 0.1 * v for v in (21.25, 41.25, 59.25, 81.25)])


async def test_missing_embedding_model_skips_embedding_metrics_but_not_faithfulness(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    monkeypatch.setattr(LocalEmbedder, "_shared", None)
    monkeypatch.setenv("RAGTRACE_EMBEDDING_ONNX", str(tmp_path / "absent.onnx"))
    judge = LocalJudge(embeddings=False)
    rec = RagRecord(id="m", user_input=QUESTION, retrieved_contexts=CONTEXTS, response=SUPPORTED, reference=SUPPORTED)
    results = {r.metric: r for r in await evaluate_record(rec, ["faithfulness", "answer_similarity"], judge)}
    assert results["faithfulness"].status == "scored"
    assert results["answer_similarity"].status == "skipped"
    assert "no embedding model" in results["answer_similarity"].reason


async def test_a_verdict_depends_on_its_own_question_only() -> None:
    """The question is one of the model's signals: two records with the same answer and different
    questions, scored concurrently by one judge, get the verdicts each gets alone."""
    import asyncio

    contexts = ["The Eiffel Tower was completed for the World's Fair in Paris. It is a wrought-iron lattice tower."]
    response = "The Eiffel Tower, designed by Napoleon, was completed in 1889 for the World's Fair."
    asks_it = record(response, contexts, "Was the Eiffel Tower designed by Napoleon and completed in 1889?")
    vague = record(response, contexts, "What is it?")

    def confidences(results) -> list[float]:
        return [c["confidence"] for c in results[0].details["claims"]]

    alone = [confidences(await evaluate_record(r, ["faithfulness"], LocalJudge())) for r in (asks_it, vague)]
    assert alone[0] != alone[1]  # the question matters, so cross-talk would show
    for order in ((asks_it, vague), (vague, asks_it)):
        judge = LocalJudge()
        together = await asyncio.gather(*(evaluate_record(r, ["faithfulness"], judge) for r in order))
        by_question = {r.user_input: confidences(res) for r, res in zip(order, together)}
        assert [by_question[asks_it.user_input], by_question[vague.user_input]] == alone


async def test_decisions_are_counted_as_free_local_calls(judge: LocalJudge) -> None:
    results = await evaluate_record(record(SUPPORTED), ["faithfulness", "answer_relevancy"], judge)
    for result in results:
        assert result.status == "scored"
        assert result.usage.calls >= 1
        assert result.usage.prompt_tokens == result.usage.completion_tokens == 0 and result.usage.cost_usd == 0.0
    # faithfulness: one claim extraction and one batch of verdicts for all claims
    assert results[0].usage.calls == 2


async def test_embedding_model_loads_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    original = LocalEmbedder.shared.__func__
    loaded_in: list[str] = []

    def spy(cls):
        loaded_in.append(threading.current_thread().name)
        return original(cls)

    monkeypatch.setattr(LocalEmbedder, "shared", classmethod(spy))
    vectors = await LocalJudge().embed(["The tower is 330 metres tall."])
    assert len(vectors) == 1 and len(vectors[0]) == 384
    assert loaded_in and all(name.startswith("ragtrace-local-judge") for name in loaded_in), loaded_in


async def test_statements_about_the_passages_do_not_make_a_chunk_useful(judge: LocalJudge) -> None:
    """ "Based on the passages..." is backed by any chunk; only the factual claim picks its chunk."""
    question = "How tall is the Eiffel Tower?"
    target = (
        "Based on the provided passages, here is what I found about the Eiffel Tower. The tower is 330 metres tall."
    )
    assert await judge.chunk_relevance(question, target, CONTEXTS) == [True, False]
    refusal = "I am unable to answer this question based on the given passages."
    assert await judge.chunk_relevance(question, refusal, CONTEXTS) == [False, False]
    [r] = await evaluate_record(record(refusal, question=question), ["context_precision"], judge)
    assert r.status == "scored" and r.score == 0.0


async def test_a_record_past_max_chars_is_that_records_error_in_a_moment() -> None:
    # a 337 KB answer took the judge 311 s on 2 cores (claims × context sentences); an LLM judge refuses it at its
    # context window, so does the local one at local_judge.max_chars: the record's error, said, never retried
    import time

    judge = LocalJudge(max_chars=20_000)
    long_answer = "The Eiffel Tower was completed in March 1889. " * 1000  # 46,000 characters
    started = time.monotonic()
    results = await evaluate_record(
        record(long_answer), ["faithfulness", "hallucination", "answer_relevancy", "context_precision"], judge
    )
    assert time.monotonic() - started < 5
    for result in results:
        assert result.status == "error" and not result.retryable, result
        assert "local_judge.max_chars" in result.reason and "20,000" in result.reason, result.reason
    # under the bound, as before
    (ok,) = await evaluate_record(record(SUPPORTED), ["faithfulness"], judge)
    assert ok.status == "scored" and ok.score == 1.0
    assert LocalJudge().max_chars == 100_000  # the config's default

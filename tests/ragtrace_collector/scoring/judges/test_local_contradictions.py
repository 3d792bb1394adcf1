"""The embedded judge and contradictions: the hand-written contradiction suite and the three verdicts (issue 31).

``tests/support/contradiction_suite.jsonl`` holds faithful answers and their minimally edited contradicting
twins (negation, antonyms, numbers, dates, swapped roles, units, comparatives, quantifiers, stale values,
entities, exclusivity, conditions), never used to train or tune the judge, scored as the faithfulness metric scores them
(faithfulness < 1 ⇒ unfaithful). Since the eighteenth session it is the *dev* suite (read to see what the judge
misses); ``contradiction_suite_heldout.jsonl`` (120 more twin pairs over the same categories, other topics) was
written blind and is the figure to report. Issue 31's target is 95 balanced accuracy; the floors below are what the
shipped models reach (dev: the default cascade 56.8, the claim reader 72.7; held out: 55.4 and 65.4;
scripts/eval_local_judge.py), so that no change falls back from them unnoticed. Where a claim is not supported, the judge says *contradicted* (with
the context that states otherwise, quoted) or *not found*.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ragtrace_collector.config import DEFAULT_LOCAL_JUDGE_MODEL
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judges.local import LocalJudge

SUPPORT = Path(__file__).parents[3] / "support"
SUITES = {
    name: [json.loads(line) for line in (SUPPORT / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    for name in ("contradiction_suite", "contradiction_suite_heldout")
}
ITEMS = SUITES["contradiction_suite"]

KETTLE = (
    "The Brevia K2 electric kettle holds 1.7 litres of water. It has an automatic shut-off that turns it off "
    "when the water boils. The motor is covered by a warranty for two years."
)


@pytest.fixture(scope="module")
def judge() -> LocalJudge:
    """The claim reader (``local_judge.model: reader``): the cascade, then every claim it finds supported read."""
    judge = LocalJudge(model="reader")
    assert judge.model_name == "reader", judge.fallback_reason
    return judge


def _balanced_accuracy(judge: LocalJudge, suite: str) -> tuple[float, dict[str, float], list[str]]:
    suite_items = SUITES[suite]
    flagged = {}
    for item in suite_items:
        verdicts = _verdicts(judge, item["question"], item["context"], item["response"])
        flagged[item["id"]] = any(v.verdict != "yes" for v in verdicts)
    unfaithful = [i for i in suite_items if not i["faithful"]]
    faithful = [i for i in suite_items if i["faithful"]]
    recall = sum(flagged[i["id"]] for i in unfaithful) / len(unfaithful)
    specificity = sum(not flagged[i["id"]] for i in faithful) / len(faithful)
    per_category = {}
    for category in {i["category"] for i in suite_items}:
        in_category = [i for i in suite_items if i["category"] == category]
        per_category[category] = sum(flagged[i["id"]] != i["faithful"] for i in in_category) / len(in_category)
    wrong = sorted(i["id"] for i in suite_items if flagged[i["id"]] == i["faithful"])
    return 100 * (recall + specificity) / 2, per_category, wrong


def _verdicts(judge: LocalJudge, question: str, context: str, response: str) -> list:
    async def run() -> list:
        claims = await judge.extract_claims(question, response)
        return await judge.verify_claims(claims, [context], question)

    return asyncio.run(run())


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_the_suite_is_balanced_and_every_category_has_twins(suite: str) -> None:
    items = SUITES[suite]
    by_id = {item["id"]: item for item in items}
    assert len(items) >= 200 and sum(not i["faithful"] for i in items) >= 100
    for item in items:
        twin = by_id[item["twin"]]
        assert twin["twin"] == item["id"] and twin["faithful"] != item["faithful"]
        assert twin["context"] == item["context"] and item["evidence"] in item["context"]
    categories = {item["category"] for item in items}
    assert len(categories) >= 10


def test_the_held_out_suite_shares_no_item_with_the_dev_suite() -> None:
    dev, held_out = SUITES["contradiction_suite"], SUITES["contradiction_suite_heldout"]
    assert not {i["id"] for i in dev} & {i["id"] for i in held_out}
    assert not {i["context"] for i in dev} & {i["context"] for i in held_out}


@pytest.mark.parametrize(
    ("model", "suite", "floor"),
    [
        (DEFAULT_LOCAL_JUDGE_MODEL, "contradiction_suite", 56.0),
        ("reader", "contradiction_suite", 72.0),
        (DEFAULT_LOCAL_JUDGE_MODEL, "contradiction_suite_heldout", 55.0),
        ("reader", "contradiction_suite_heldout", 65.0),
    ],
)
def test_the_suite_stays_above_the_shipped_models_floor(model: str, suite: str, floor: float) -> None:
    judge = LocalJudge(model=model)
    assert judge.model_name == model, judge.fallback_reason
    balanced, per_category, wrong = _balanced_accuracy(judge, suite)
    assert balanced >= floor, (balanced, per_category, wrong)


@pytest.mark.parametrize(
    ("answer", "quoted"),
    [
        ("The Brevia K2 does not have an automatic shut-off.", "automatic shut-off"),
        ("The motor has a five-year warranty.", "two years"),
        ("The kettle holds 2.5 litres of water.", "1.7 litres"),
    ],
)
def test_a_contradiction_is_called_contradicted_and_quotes_the_context(
    judge: LocalJudge, answer: str, quoted: str
) -> None:
    (verdict,) = _verdicts(judge, "Tell me about the Brevia K2 kettle.", KETTLE, answer)
    assert verdict.verdict == "no", verdict
    assert verdict.reason.startswith("contradicted by context #1: '") and quoted in verdict.reason, verdict.reason


def test_the_default_judge_reads_a_number_word_joined_by_a_hyphen_as_its_figure() -> None:
    # "five-year" hid its number: the default gave "a five-year warranty" the P of the faithful "two-year" one
    # (0.84 each) against "a warranty for two years"; it now reads it as it reads "5-year"
    judge = LocalJudge(model=DEFAULT_LOCAL_JUDGE_MODEL)
    question = "Tell me about the Brevia K2 kettle."

    def p(answer: str) -> float:
        (verdict,) = asyncio.run(judge.verify_claims([answer], [KETTLE], question))
        return float(verdict.confidence)

    five, figure, two = (p(f"The motor has a {n}-year warranty.") for n in ("five", "5", "two"))
    assert abs(five - figure) < 0.1 and five < two - 0.1, (five, figure, two)
    (verdict,) = _verdicts(judge, question, KETTLE, "The kettle comes with a five-year warranty.")
    assert verdict.verdict == "no" and "two years" in verdict.reason, verdict


def test_a_claim_the_context_does_not_mention_is_not_found(judge: LocalJudge) -> None:
    (verdict,) = _verdicts(judge, "Tell me about the kettle.", KETTLE, "The kettle is sold in Japan by Tanaka Retail.")
    assert verdict.verdict == "idk", verdict
    assert verdict.reason.startswith("not found in the contexts"), verdict.reason


def test_the_faithful_statements_are_supported_with_their_context(judge: LocalJudge) -> None:
    verdicts = _verdicts(
        judge,
        "Tell me about the Brevia K2 kettle.",
        KETTLE,
        "The Brevia K2 has an automatic shut-off. Its motor is covered by a two-year warranty.",
    )
    assert [v.verdict for v in verdicts] == ["yes", "yes"], verdicts
    assert all(v.reason.startswith("supported by context #1: '") for v in verdicts)


def test_the_local_judge_decides_nli_offline(judge: LocalJudge) -> None:
    record = RagRecord(
        id="t",
        user_input="Tell me about the Brevia K2 kettle.",
        retrieved_contexts=[KETTLE],
        response="The Brevia K2 has an automatic shut-off. The motor has a five-year warranty. "
        "It is sold in Japan by Tanaka Retail.",
    )
    (result,) = asyncio.run(evaluate_record(record, ["nli"], judge))
    assert result.status == "scored", result
    labels = [c["label"] for c in result.details["claims"]]
    assert labels == ["entailment", "contradiction", "neutral"], result.details
    assert result.label == "contradiction" and result.score == pytest.approx(1 / 3)


def test_a_not_found_reason_names_the_claims_words_as_written(judge: LocalJudge) -> None:
    # matched by stem, said as written: the reason once read "words not in the contexts: produc, niel"
    (verdict,) = _verdicts(judge, "Who makes the kettle?", KETTLE, "The kettle is produced by Niels Engineering.")
    assert verdict.verdict != "yes", verdict
    said = verdict.reason.split("words not in the contexts: ", 1)[-1]
    assert "produced" in said and "produc," not in said + "," and "niel," not in said + ",", verdict.reason

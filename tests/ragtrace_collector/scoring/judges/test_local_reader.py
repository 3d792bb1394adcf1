"""The local judge's claim reader: every claim the cascade finds supported is read, the veto, the fallback, and
the conflict typing (contradicted or not found)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragtrace_collector.scoring.judges.local import LocalJudge
from ragtrace_collector.scoring.judges.local.conflicts import STATES_OTHERWISE, claim_conflict, quote
from ragtrace_collector.scoring.judges.local.cross_encoder import CrossEncoderError
from ragtrace_collector.scoring.judges.local.features import ContextIndex
from ragtrace_collector.scoring.judges.local.reader import (
    READER_PARAMS_PATH,
    STACK_FEATURES,
    ReaderParams,
    ReaderStack,
    stack_features,
    window_coverage,
)
from tests.support.pair_scorer import FixedPairScorer

CONTEXTS = [
    "The Eiffel Tower was completed in March 1889 for the World's Fair in Paris. "
    "It was designed by the engineering company of Gustave Eiffel. The tower is 330 metres tall.",
    "Each year about 7 million people visit the Eiffel Tower, making it one of the most visited monuments.",
]
QUESTION = "When was the Eiffel Tower completed and who designed it?"
CLAIMS = [
    "The Eiffel Tower was completed in March 1889.",  # every word in the contexts: the feature model is sure
    "It is painted every seven years with sixty tonnes of paint.",  # not in the contexts
]


def reader_file(tmp_path: Path, model_file: str = "model.onnx", **changes: object) -> Path:
    data = {"model_file": model_file, "sha256": "0" * 64, "max_tokens": 64, "windows": 1, "veto": 0.3} | changes
    path = tmp_path / "reader.json"
    path.write_text(json.dumps(data))
    return path


async def test_every_claim_the_cascade_supports_is_read_and_a_sure_no_overrules_it(tmp_path: Path) -> None:
    plain = await LocalJudge(model="cascade").verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert [v.verdict for v in plain] == ["yes", "idk"]  # word overlap alone passes the first
    reader = FixedPairScorer(0.02)
    judge = LocalJudge(model="reader", reader_params_path=str(reader_file(tmp_path)), reader=reader)
    verdicts = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert [a for a, _ in reader.pairs] == CLAIMS[:1]  # the supported claim, alone, without its question
    assert "March 1889" in reader.pairs[0][1]
    assert [v.verdict for v in verdicts] == ["no", "idk"]  # the reader's sure "no" decides, not the overlap
    assert verdicts[0].confidence == pytest.approx(0.02) and verdicts[1].confidence == plain[1].confidence
    assert judge.reader is not None and (judge.reader.stats.claims, judge.reader.stats.sent) == (2, 1)


async def test_an_unsure_reader_leaves_the_cascade_s_verdicts(tmp_path: Path) -> None:
    judge = LocalJudge(model="reader", reader_params_path=str(reader_file(tmp_path)), reader=FixedPairScorer(0.31))
    plain = await LocalJudge(model="cascade").verify_claims(CLAIMS, CONTEXTS, QUESTION)
    verdicts = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert [(v.verdict, v.confidence) for v in verdicts] == [(v.verdict, v.confidence) for v in plain]


def test_the_shipped_parameters_load_and_the_reader_only_takes_support_away(tmp_path: Path) -> None:
    shipped = ReaderParams.load()
    assert shipped.model_path() == READER_PARAMS_PATH.parent / shipped.model_file and 0 < shipped.veto < 0.5
    p = shipped.overrule(np.asarray([0.9, 0.9, 0.2]), np.asarray([0.99, 0.01, 0.01]))
    assert p.tolist() == [0.9, 0.01, 0.01]
    with pytest.raises(CrossEncoderError, match="out of range"):
        ReaderParams.load(reader_file(tmp_path, veto=1.5))
    with pytest.raises(CrossEncoderError, match="cannot read"):
        ReaderParams.load(tmp_path / "none.json")
    judge = LocalJudge(
        model="reader", reader_params_path=str(reader_file(tmp_path, veto=0.9)), reader=FixedPairScorer(0.5)
    )
    assert judge.model_name == "features" and "veto" in (judge.fallback_reason or "")  # above the verdict threshold


# the stack ----------------------------------------------------------------------------------
def _stack(coef: dict[str, float], intercept: float, threshold: float = 0.6) -> dict:
    return {
        "features": list(STACK_FEATURES),
        "coef": [coef.get(f, 0.0) for f in STACK_FEATURES],
        "intercept": intercept,
        "threshold": threshold,
    }


def test_the_stack_s_features_are_written_once_in_their_order() -> None:
    x = stack_features([0.9, 0.8], [0.5, 0.1], [1.0, 0.5], [10, 80], ["", "negation"])
    row = dict(zip(STACK_FEATURES, x[1]))
    assert x.shape == (2, len(STACK_FEATURES))
    assert row["logit_reader"] == pytest.approx(np.log(0.1 / 0.9)) and row["coverage"] == 0.5
    assert row["claim_words_40"] == 1.0 and row["conflict_negation"] == 1.0 and row["conflict_number"] == 0.0
    assert row["logit_reader_if_conflict"] == row["logit_reader"]  # a sentence states otherwise: the doubt counts
    assert dict(zip(STACK_FEATURES, x[0]))["logit_reader_if_conflict"] == 0.0
    assert window_coverage("The kettle does not boil.", "The kettle boils quickly.") < 1.0
    assert window_coverage("The kettle is blue.", "Our blue kettle is quiet.") == 1.0
    assert window_coverage("The kettle is blue.", "Prices rose in March.") == 0.0


def test_the_stack_only_takes_support_away_and_refuses_other_features() -> None:
    stack = ReaderStack.from_dict(_stack({"conflict_negation": 10.0}, -5.0))
    features = stack_features([0.9, 0.9, 0.3], [0.5, 0.5, 0.5], [1, 1, 1], [5, 5, 5], ["", "negation", "negation"])
    p = stack.overrule(np.asarray([0.9, 0.9, 0.3]), features, threshold=0.63)
    assert p[0] == 0.9 and p[1] < 0.63 and p[2] == pytest.approx(min(0.3, 1 - stack.unsupported(features)[2]))
    with pytest.raises(ValueError, match="features"):
        ReaderStack.from_dict(_stack({}, 0.0) | {"features": ["logit_reader"]})
    with pytest.raises(ValueError, match="range"):
        ReaderStack.from_dict(_stack({}, 0.0, threshold=1.0))


async def test_with_a_stack_a_stated_conflict_and_the_reader_s_doubt_decide(tmp_path: Path) -> None:
    """The veto no longer decides: an unsure reader (0.31, above any veto) with a context sentence that says "not"
    is overruled where the stack says so; the same doubt without a conflict is not."""
    context = ["The Brevia K2 kettle has an automatic shut-off that turns it off when the water boils."]
    claims = ["The Brevia K2 kettle does not have an automatic shut-off.", "The Brevia K2 kettle has a shut-off."]
    coef = {"logit_reader_if_conflict": -2.0, "conflict_negation": 1.0}
    path = reader_file(tmp_path, veto=0.05, stack=_stack(coef, -1.0, threshold=0.5))
    judge = LocalJudge(model="reader", reader_params_path=str(path), reader=FixedPairScorer(0.31))
    plain = await LocalJudge(model="cascade").verify_claims(claims, context, "")
    verdicts = await judge.verify_claims(claims, context, "")
    assert [v.verdict for v in plain] == ["yes", "yes"]
    assert [v.verdict for v in verdicts] == ["no", "yes"], verdicts
    assert verdicts[0].reason.startswith("contradicted by context #1:")


def test_the_shipped_reader_has_a_stack_fitted_on_calibration_records() -> None:
    shipped = ReaderParams.load()
    assert shipped.stack is not None and 0.5 <= shipped.stack.threshold < 1.0
    calibration = shipped.raw["stack"]["calibration"]
    assert calibration["ragtruth_responses"] > 400 and calibration["minimal_records"] > 5000


async def test_the_reader_falls_back_to_features_when_its_file_is_missing_or_altered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGTRACE_READER_ONNX", raising=False)
    missing = LocalJudge(model="reader", reader_params_path=str(reader_file(tmp_path, model_file="missing.onnx")))
    assert missing.model_name == "features" and missing.reader is None
    assert missing.fallback_reason is not None and "missing.onnx" in missing.fallback_reason
    assert "reader unavailable" in caplog.text
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    altered = LocalJudge(model="reader", reader_params_path=str(reader_file(tmp_path)))
    assert altered.reader is not None  # the file exists; it is checked when it loads
    verdicts = await altered.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert len(verdicts) == 2 and altered.reader is None and altered.model_name == "features"
    assert altered.fallback_reason is not None and "sha256" in altered.fallback_reason


# conflicts ----------------------------------------------------------------------------------
CONTEXT = (
    "The Brevia K2 kettle holds 1.7 litres. It has an automatic shut-off. The motor is covered for two years. "
    "Prices rose in March. The kettle was designed by Anna Berg. Demand for the kettle increased in spring. "
    "The K2 cost $40 until March 2024. The retailer pays the distributor a fee of 3 percent."
)


@pytest.mark.parametrize(
    ("claim", "kind", "quoted"),
    [
        ("The Brevia K2 kettle does not have an automatic shut-off.", "negation", "automatic shut-off"),
        ("The motor is covered for five years.", "number", "two years"),
        ("The Brevia K2 kettle holds 1.7 millilitres.", "unit", "1.7 litres"),
        ("Prices fell in March.", "antonym", "rose"),
        ("Prices rose in October.", "date", "March"),
        ("The kettle was designed by Tom Reilly.", "name", "Anna Berg"),
        ("Demand for the kettle decreases in spring.", "antonym", "increased"),  # inflections of -e words meet
        ("The Brevia K2 kettle holds 1.7 ml.", "unit", "1.7 litres"),
        ("The K2 now costs $40.", "stale", "until"),
        ("The distributor pays the retailer a fee of 3 percent.", "order", "pays"),
    ],
)
def test_a_context_sentence_that_states_otherwise_is_found_and_quoted(claim: str, kind: str, quoted: str) -> None:
    index = ContextIndex.build([CONTEXT])
    conflict = claim_conflict(claim, None, index)
    assert conflict is not None and conflict.kind == kind, conflict
    assert quoted in conflict.quote and conflict.context == 0


@pytest.mark.parametrize(
    "claim",
    [
        "The Brevia K2 kettle has an automatic shut-off.",
        "The motor is covered for two years.",
        "The kettle is sold in Japan by Tanaka Retail.",  # not about anything the context says: not found
        "The Brevia K2 kettle holds 1.7 l.",  # one unit however written
        "The retailer pays the distributor a fee of 3 percent.",
        "A fee of 3 percent is paid to the distributor by the retailer.",  # the passive is not a swap
    ],
)
def test_no_conflict_where_the_context_agrees_or_is_silent(claim: str) -> None:
    conflict = claim_conflict(claim, None, ContextIndex.build([CONTEXT]))
    # "restated": every word of the claim in one sentence; it explains a claim the models found unsupported
    assert conflict is None or (conflict.kind == "restated" and conflict.kind not in STATES_OTHERWISE), conflict


def test_the_word_order_check_is_bounded_for_long_claims() -> None:
    """The order check looks at every pair around every shared word (cubic): past 40 shared words it is skipped,
    so a hostile one-sentence answer of thousands of words cannot stall the judge."""
    filler = " ".join(f"word{i}" for i in range(300))
    index = ContextIndex.build([f"The retailer pays {filler} the distributor."])
    conflict = claim_conflict(f"The distributor pays {filler} the retailer.", None, index)
    assert conflict is None or conflict.kind != "order", conflict


def test_the_conflict_names_the_context_it_is_in() -> None:
    index = ContextIndex.build(["The sky is blue.", CONTEXT])
    conflict = claim_conflict("The motor is covered for five years.", None, index)
    assert conflict is not None and conflict.context == 1


def test_a_quote_is_cut_around_the_word_with_ellipses() -> None:
    sentence = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
    assert quote(sentence, ["eight"], width=2) == "...six seven eight nine ten..."
    assert quote("short one", ["absent"]) == "short one"

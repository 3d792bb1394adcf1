"""The local judge's cascade: configuration, routing of uncertain claims, and the fallback to the feature model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pydantic
import pytest

from ragtrace_collector.config import DEFAULT_LOCAL_JUDGE_WORKERS, load_config
from ragtrace_collector.scoring.judges.local import LocalJudge
from ragtrace_collector.scoring.judges.local.cross_encoder import (
    CASCADE_PARAMS_PATH,
    CascadeParams,
    CrossEncoderError,
    choose_windows,
    first_segment,
    lexical_similarities,
)
from ragtrace_collector.service.scoring import judge_from_config
from tests.support.pair_scorer import FixedPairScorer

CONTEXTS = [
    "The Eiffel Tower was completed in March 1889 for the World's Fair in Paris. "
    "It was designed by the engineering company of Gustave Eiffel. The tower is 330 metres tall.",
    "Each year about 7 million people visit the Eiffel Tower, making it one of the most visited monuments.",
]
QUESTION = "When was the Eiffel Tower completed and who designed it?"
CLAIMS = [
    "The Eiffel Tower was completed in March 1889.",  # clear: supported
    "It is painted every seven years with sixty tonnes of paint.",  # not in the contexts
]


def cascade_file(tmp_path: Path, low: float = 0.0, high: float = 1.01, model_file: str = "model.onnx") -> Path:
    path = tmp_path / "cascade.json"
    path.write_text(
        json.dumps(
            {
                "model_file": model_file,
                "sha256": "0" * 64,
                "max_tokens": 128,
                "windows": 2,
                "cascade": {"low": low, "high": min(high, 1.0), "stack": [0.0, 1.0, 0.0], "threshold": 0.5},
            }
        )
    )
    return path


# configuration ------------------------------------------------------------------------------
def test_local_judge_model_defaults_to_the_cascade_and_validates(tmp_path: Path) -> None:
    assert load_config(environ={}).local_judge.model == "cascade"
    assert LocalJudge().model_name == "cascade"  # the shipped cross-encoder, not the fallback
    assert LocalJudge(model="reader").model_name == "reader"  # the shipped claim reader, not the fallback
    path = tmp_path / "c.yaml"
    path.write_text("local_judge: {model: features}\n")
    assert load_config(str(path), environ={}).local_judge.model == "features"
    assert load_config(environ={"RAGTRACE_LOCAL_JUDGE": "features"}).local_judge.model == "features"
    assert load_config(environ={"RAGTRACE_LOCAL_JUDGE__MODEL": "features"}).local_judge.model == "features"
    path.write_text("local_judge: {model: bert}\n")
    with pytest.raises(pydantic.ValidationError, match="local_judge"):
        load_config(str(path), environ={})


def test_judge_from_config_passes_the_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGTRACE_LOCAL_JUDGE_MODEL", raising=False)
    config = load_config(environ={"RAGTRACE_LOCAL_JUDGE": "features"})
    judge = judge_from_config(config.judge, config.local_judge)
    assert isinstance(judge, LocalJudge) and judge.model_name == "features" and judge.cascade is None


def test_local_judge_workers_come_from_argument_environment_then_the_models_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAGTRACE_LOCAL_JUDGE_WORKERS", raising=False)
    assert load_config(environ={}).local_judge.workers is None  # unset: the claim model's own default
    assert DEFAULT_LOCAL_JUDGE_WORKERS == {"reader": 2, "cascade": 2, "features": 1}
    assert LocalJudge(model="reader").workers == 2
    assert LocalJudge(model="cascade").workers == 2
    assert LocalJudge(model="features").workers == 1
    assert load_config(environ={"RAGTRACE_LOCAL_JUDGE__WORKERS": "3"}).local_judge.workers == 3
    with pytest.raises(pydantic.ValidationError, match="workers"):
        load_config(environ={"RAGTRACE_LOCAL_JUDGE__WORKERS": "0"})
    config = load_config(environ={"RAGTRACE_LOCAL_JUDGE__WORKERS": "3"})
    judge = judge_from_config(config.judge, config.local_judge)
    assert isinstance(judge, LocalJudge) and judge.workers == 3
    monkeypatch.setenv("RAGTRACE_LOCAL_JUDGE_WORKERS", "1")
    assert LocalJudge(model="cascade").workers == 1
    assert LocalJudge(model="cascade", workers=4).workers == 4
    monkeypatch.setenv("RAGTRACE_LOCAL_JUDGE_WORKERS", "0")
    with pytest.raises(ValueError, match="at least 1"):
        LocalJudge(model="features")
    monkeypatch.setenv("RAGTRACE_LOCAL_JUDGE_WORKERS", "two")
    with pytest.raises(ValueError, match="RAGTRACE_LOCAL_JUDGE_WORKERS must be a whole number, not 'two'"):
        LocalJudge(model="features")
    monkeypatch.delenv("RAGTRACE_LOCAL_JUDGE_WORKERS")
    with pytest.raises(ValueError, match="at least 1"):
        LocalJudge(model="features", workers=0)


def test_unknown_model_name_is_refused() -> None:
    with pytest.raises(ValueError, match="reader, cascade, features"):
        LocalJudge(model="bert")


# fallback -----------------------------------------------------------------------------------
async def test_cascade_falls_back_to_features_when_the_model_file_is_missing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGTRACE_CROSS_ENCODER_ONNX", raising=False)
    judge = LocalJudge(model="cascade", cascade_params_path=str(cascade_file(tmp_path, model_file="missing.onnx")))
    assert judge.model_name == "features" and judge.cascade is None
    assert judge.fallback_reason is not None and "missing.onnx" in judge.fallback_reason
    assert "cascade unavailable" in caplog.text
    plain = LocalJudge(model="features")
    got = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    want = await plain.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert [(v.verdict, v.confidence) for v in got] == [(v.verdict, v.confidence) for v in want]


def test_cascade_falls_back_when_its_parameters_are_missing_or_broken(tmp_path: Path) -> None:
    judge = LocalJudge(model="cascade", cascade_params_path=str(tmp_path / "none.json"))
    assert judge.model_name == "features" and judge.fallback_reason
    broken = tmp_path / "broken.json"
    broken.write_text('{"model_file": "m.onnx"}')
    with pytest.raises(CrossEncoderError):
        CascadeParams.load(broken)
    bad_band = cascade_file(tmp_path, low=0.9, high=0.2)
    with pytest.raises(CrossEncoderError, match="out of range"):
        CascadeParams.load(bad_band)


async def test_an_altered_model_file_is_refused_and_the_judge_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGTRACE_CROSS_ENCODER_ONNX", raising=False)
    params = cascade_file(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"not a model")
    judge = LocalJudge(model="cascade", cascade_params_path=str(params))
    assert judge.cascade is not None  # the file exists; it is checked when it loads
    verdicts = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert len(verdicts) == 2
    assert judge.cascade is None and judge.model_name == "features"
    assert judge.fallback_reason is not None and "sha256" in judge.fallback_reason


# routing ------------------------------------------------------------------------------------
async def test_uncertain_claims_go_to_the_cross_encoder_with_their_windows(tmp_path: Path) -> None:
    encoder = FixedPairScorer(0.01)
    judge = LocalJudge(
        model="cascade",
        cascade_params_path=str(cascade_file(tmp_path)),
        cross_encoder=encoder,
    )
    verdicts = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    # band [0, 1): every claim is uncertain, and the stacking (0, 1, 0) takes the cross-encoder's P; the first
    # claim's words are all in a context sentence that does not support it (contradicted), the second's are not
    assert [v.verdict for v in verdicts] == ["no", "idk"]
    assert [v.confidence for v in verdicts] == [pytest.approx(0.01, abs=1e-6)] * 2
    assert [a for a, _ in encoder.pairs] == [first_segment(c, QUESTION) for c in CLAIMS]
    sentences = [s for ctx in CONTEXTS for s in ctx.split(". ")]
    for _, windows in encoder.pairs:
        assert windows and all(w.rstrip(".") in " ".join(CONTEXTS) for w in windows.split(". "))
        assert len([s for s in sentences if s.rstrip(".") in windows]) <= 3  # windows=2, plus the best sentence
    assert "March 1889" in encoder.pairs[0][1]
    assert judge.cascade is not None and judge.cascade.stats.sent == 2


async def test_clear_claims_never_reach_the_cross_encoder(tmp_path: Path) -> None:
    encoder = FixedPairScorer(0.01)
    empty_band = cascade_file(tmp_path, low=0.5, high=0.5)
    judge = LocalJudge(
        model="cascade",
        cascade_params_path=str(empty_band),
        cross_encoder=encoder,
    )
    plain = LocalJudge(model="features")
    got = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    want = await plain.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert encoder.pairs == []
    assert [v.confidence for v in got] == [v.confidence for v in want]


def test_windows_are_the_most_similar_sentences_and_the_best_one_in_document_order() -> None:
    sentences = ["A one.", "B two.", "C three.", "D four."]
    sims = np.asarray([0.1, 0.9, 0.2, 0.8])
    assert choose_windows(sims, sentences, None, 2) == "B two. D four."
    assert choose_windows(sims, sentences, "A one.", 2) == "A one. B two. D four."
    assert choose_windows(None, sentences, "D four.", 1) == "A one. D four."
    assert choose_windows(sims, [], None, 2) == ""


def test_lexical_similarity_weights_a_rare_shared_word_over_a_common_one() -> None:
    # 4 sentences; "tower" in 3 of them (idf log(1 + 4/3) = 0.847), "gustave" in 1 (idf log(1 + 4/1) = 1.609)
    sentences = [{"tower", "paris"}, {"tower", "gustave"}, {"tower", "visit"}, {"river"}]
    sims = lexical_similarities({"tower", "gustave", "eiffel"}, sentences)
    assert sims == pytest.approx([0.8473, 0.8473 + 1.6094, 0.8473, 0.0], abs=1e-4)
    assert choose_windows(sims, ["P.", "G.", "V.", "R."], None, 1) == "G."
    assert lexical_similarities(set(), sentences).tolist() == [0.0, 0.0, 0.0, 0.0]


# the shipped model ----------------------------------------------------------------------------
shipped = pytest.mark.skipif(not CASCADE_PARAMS_PATH.is_file(), reason="no cross-encoder is shipped")


@shipped
def test_shipped_cross_encoder_matches_its_recorded_provenance_and_agreement() -> None:
    params = CascadeParams.load()
    data = params.raw
    assert params.model_path().is_file()
    assert data["sha256"] and data["data"] and data["commands"] and data["split"]
    # the file shipped is the fit's weights exported again with fused attention (``export``)
    agreement = data["fit"]["export"]["agreement"]
    assert agreement["fused_operators"]["Attention"] == 6  # one per layer: the graph onnxruntime runs fastest
    # int8 against fp32 on held-out pairs, measured when the model was quantised
    assert agreement["pairs"] >= 200
    assert agreement["int8_vs_fp32_same_side_of_0.5"] >= 0.95
    assert agreement["int8_vs_fp32_mean_abs_p"] <= 0.05
    assert agreement["torch_vs_onnx_fp32_max_abs_logit"] <= 1e-3


@shipped
async def test_shipped_cascade_tells_supported_from_invented() -> None:
    judge = LocalJudge(model="cascade")
    judge.warm_up()
    assert judge.model_name == "cascade", judge.fallback_reason
    assert judge.cascade is not None
    p = judge.cascade.encoder().predict(
        [
            (first_segment("The tower was completed in 1889.", QUESTION), CONTEXTS[0]),
            (first_segment("The tower was completed in 1923.", QUESTION), CONTEXTS[0]),
        ]
    )
    assert p[0] > p[1]
    # a pair's P is its own: the same alone as beside another pair (the int8 graph scales a run's activations
    # together, so pairs are never batched)
    alone = judge.cascade.encoder().predict([(first_segment(CLAIMS[1], QUESTION), CONTEXTS[1])])
    beside = judge.cascade.encoder().predict(
        [(first_segment("The tower was completed in 1889.", QUESTION), CONTEXTS[0] * 3)]
        + [(first_segment(CLAIMS[1], QUESTION), CONTEXTS[1])]
    )
    assert alone[0] == beside[1]
    good = await judge.verify_claims(["The Eiffel Tower was completed in March 1889."], CONTEXTS, QUESTION)
    bad = await judge.verify_claims(["The Eiffel Tower was completed in October 1923."], CONTEXTS, QUESTION)
    assert (good[0].confidence or 0.0) > (bad[0].confidence or 0.0)
    assert bad[0].verdict == "no"


@shipped
async def test_verdicts_on_several_threads_are_those_of_one_thread() -> None:
    """Records in flight on the judge's two threads get exactly the verdicts they get one at a time,
    with the cross-encoder running on both threads at once, and every claim counted once."""
    records = [
        (
            [
                f"The Eiffel Tower was completed in {month} {year}.",
                f"It was designed by {who}.",
                f"About {n} million people visit it each year.",
            ],
            CONTEXTS,
            QUESTION,
        )
        for month, year, who, n in [
            ("March", 1889, "Gustave Eiffel's company", 7),
            ("May", 1887, "a Paris architect", 9),
            ("March", 1901, "the World's Fair committee", 2),
            ("June", 1889, "engineers from Lyon", 7),
        ]
        * 3
    ]
    one = LocalJudge(model="cascade", workers=1)
    many = LocalJudge(model="cascade", workers=2)
    alone = [await one.verify_claims(*r) for r in records]
    together = await asyncio.gather(*(many.verify_claims(*r) for r in records))
    assert [[(v.verdict, v.confidence) for v in vs] for vs in together] == [
        [(v.verdict, v.confidence) for v in vs] for vs in alone
    ]
    assert one.cascade is not None and many.cascade is not None
    assert many.cascade.stats.claims == one.cascade.stats.claims == 3 * len(records)
    assert many.cascade.stats.sent == one.cascade.stats.sent > 0  # the cross-encoder was asked
    await one.aclose()
    await many.aclose()


async def test_clear_caches_makes_the_next_record_cold_and_changes_no_verdict() -> None:
    judge = LocalJudge(model="features")
    first = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert judge._indexes.data  # the contexts' index is kept for the next record with these contexts
    judge.clear_caches()
    assert not judge._indexes.data
    again = await judge.verify_claims(CLAIMS, CONTEXTS, QUESTION)
    assert [(v.verdict, v.confidence) for v in again] == [(v.verdict, v.confidence) for v in first]

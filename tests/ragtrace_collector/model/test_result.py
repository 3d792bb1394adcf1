"""Claim verdicts in words: supported, contradicted, not found, or unsupported where a ``no`` does not say which;
a result read back from its dict (another host's, through Redis) as it was, and nothing else read as one."""

from __future__ import annotations

import pytest

from ragtrace_collector.model.result import (
    JudgeUsage,
    MetricResult,
    claim_kind,
    claim_verdicts,
    unsupported_claim_verdicts,
)
from tests.support.claim_verdicts import CONTRADICTED, CONTRADICTED_REASON, NOT_FOUND, NOT_FOUND_REASON, scored


def test_claim_kind_takes_a_no_as_contradicted_only_where_the_reason_says_so():
    assert claim_kind("yes", "supported by context #1: '…' (P=0.93)") == "supported"
    assert claim_kind("no", CONTRADICTED_REASON) == "contradicted"
    assert claim_kind("no", "  Contradicted by context 2") == "contradicted"
    assert claim_kind("idk", NOT_FOUND_REASON) == "not_found"
    assert claim_kind("idk") == "not_found"
    # an LLM judge's "no" (contradicted or absent, it does not say) and the local judge's former wording
    assert claim_kind("no", "the contexts do not mention it") == "unsupported"
    assert claim_kind("no", "unsupported (P=0.10): words not in the contexts: lifetime") == "unsupported"
    assert claim_kind("no") == claim_kind("no", None) == "unsupported"


def test_unsupported_claim_verdicts_contradicted_first():
    faithfulness = scored(["faithfulness"])[0]
    assert [c["kind"] for c in claim_verdicts(faithfulness.details) or []] == ["supported", "contradicted", "not_found"]
    problems = unsupported_claim_verdicts(faithfulness.details)
    assert problems == [
        {
            "statement": CONTRADICTED,
            "verdict": "no",
            "kind": "contradicted",
            "supported": False,
            "reason": CONTRADICTED_REASON,
        },
        {"statement": NOT_FOUND, "verdict": "idk", "kind": "not_found", "supported": False, "reason": NOT_FOUND_REASON},
    ]
    # listed in the other order, still contradicted first
    details = {**faithfulness.details, "claims": list(reversed(faithfulness.details["claims"]))}
    assert [c["kind"] for c in unsupported_claim_verdicts(details) or []] == ["contradicted", "not_found"]
    # idk counted as supported: not a problem, though still not found
    counted = {**faithfulness.details, "idk_counts_as_supported": True}
    assert [c["statement"] for c in unsupported_claim_verdicts(counted) or []] == [CONTRADICTED]
    assert [c["supported"] for c in claim_verdicts(counted) or []] == [True, False, True]


def test_details_without_per_claim_verdicts():
    assert claim_verdicts({"unsupported": ["a"]}) is None and unsupported_claim_verdicts({"unsupported": ["a"]}) is None
    assert claim_verdicts({"claims": ["a claim", "another"]}) is None  # noise sensitivity: statements only
    assert claim_verdicts({"claims": [{"statement": "a", "label": "neutral"}]}) is None  # nli: labels, not verdicts
    assert claim_verdicts({}) is None and claim_verdicts(None) is None
    assert unsupported_claim_verdicts({"claims": [{"statement": "a", "verdict": "yes"}]}) == []


def test_claim_verdicts_round_trip_the_stored_details_of_every_claim_metric():
    """Readers go through the typed model; writing it back gives the stored keys unchanged (byte-compatible)."""
    import json

    import pytest

    from ragtrace_collector.model.result import ClaimVerdicts, MetricResult

    for result in scored(["faithfulness", "hallucination"]):
        typed = ClaimVerdicts.from_details(result.details)
        assert len(typed.claims) == 3 and [c.kind for c in typed.claims] == ["supported", "contradicted", "not_found"]
        written = typed.to_details()
        assert json.dumps(written) == json.dumps({k: result.details[k] for k in written})
    hallucination = ClaimVerdicts.from_details(scored(["hallucination"])[0].details)
    assert hallucination.unsupported_statements() == [CONTRADICTED, NOT_FOUND]
    assert [c.statement for c in hallucination.problems()] == [CONTRADICTED, NOT_FOUND]
    # older and odd shapes read as absent parts, never raise
    legacy = ClaimVerdicts.from_details(
        {"unsupported_claims": [{"statement": "x"}, "y"], "claims": [1, {"verdict": 2}]}
    )
    assert legacy.unsupported == ("x", "y") and [c.verdict for c in legacy.claims] == ["2"]
    assert ClaimVerdicts.from_details(None) == ClaimVerdicts()

    # the score range the metric declares is checked when the result is built (and never stored)
    ok = MetricResult(metric="m", status="scored", score=1.0, score_range=(0.0, 1.0))
    assert "score_range" not in ok.to_dict()
    with pytest.raises(ValueError, match="outside"):
        MetricResult(metric="m", status="scored", score=1.5, score_range=(0.0, 1.0))


def test_chunk_usefulness_reads_and_writes_context_precisions_flags():
    from ragtrace_collector.model.result import ChunkUsefulness

    stored = {"relevant": [1, 0, 1], "against": "reference"}
    typed = ChunkUsefulness.from_details(stored)
    assert typed is not None and typed.to_details() == stored
    assert [typed.at_rank(k) for k in (1, 2, 3, 4)] == [True, False, True, None]
    assert (
        ChunkUsefulness.from_details({"relevant_sentences": ["a"]}) is None
        and ChunkUsefulness.from_details(None) is None
    )


def test_a_result_round_trips_through_its_dict_and_a_bad_one_is_refused():
    results = [
        MetricResult(
            "faithfulness",
            "scored",
            score=0.75,
            reason="3 of 4",
            details={"claims": [{"statement": "s", "verdict": "yes"}]},
            usage=JudgeUsage(calls=2, prompt_tokens=100, completion_tokens=20, cost_usd=0.001, cache_hits=1),
            label="pass",
            provenance={"judge": "openai/gpt-4o-mini", "prompt_hash": "ab12"},
        ),
        MetricResult("toxicity", "scored", score=0.1, higher_is_better=False),
        MetricResult("answer_relevancy", "skipped", reason="no question"),
        MetricResult("faithfulness", "error", reason="judge timed out", retryable=True),
    ]
    for result in results:
        assert MetricResult.from_dict(result.to_dict()) == result
    good = results[0].to_dict()
    for bad in (
        {**good, "status": "fine"},
        {**good, "metric": ""},
        {**good, "score": "0.75"},
        {**good, "score": True},
        {**good, "score": None},  # scored without a score
        {**good, "score": float("nan")},
        {**good, "details": ["a list"]},
        {**good, "usage": {"calls": 1.5}},
        {**good, "usage": {"calls": 1, "cost_usd": "free"}},
        {**good, "reason": 7},
        {k: v for k, v in good.items() if k != "status"},
    ):
        with pytest.raises((ValueError, TypeError, KeyError)):
            MetricResult.from_dict(bad)

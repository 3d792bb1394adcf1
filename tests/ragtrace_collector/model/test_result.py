"""Claim verdicts in words: supported, contradicted, not found, or unsupported where a ``no`` does not say which."""

from __future__ import annotations

from ragtrace_collector.model.result import claim_kind, claim_verdicts, unsupported_claim_verdicts
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

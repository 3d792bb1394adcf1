"""The decision interfaces: declared by judges, needed by metrics, kept by the timing wrapper, never probed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring.capabilities import (
    Capability,
    ChunkRelevance,
    ClaimExtraction,
    ClaimVerification,
    ContextSentenceRelevance,
    Embedding,
    EntityExtraction,
    NaturalLanguageInference,
    SafetyCritique,
    StatementAttribution,
    capabilities_of,
    interfaces,
)
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judge import ClaimVerdict, Judge, JudgeUnsupported
from ragtrace_collector.scoring.judges.llm import LLMJudge
from ragtrace_collector.scoring.metrics import METRICS
from ragtrace_collector.scoring.metrics.base import Metric, Outcome, ScoringContext
from ragtrace_collector.scoring.worker import TimedJudge

RECORD = RagRecord(
    user_input="Where is the Eiffel Tower?",
    retrieved_contexts=["The Eiffel Tower is in Paris."],
    response="The Eiffel Tower is in Paris.",
)


class Observer:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.registered: list[str] = []

    def observe_judge_latency(self, judge: str, seconds: float) -> None:
        self.latencies.append(seconds)

    def judge_registered(self, judge: str) -> None:
        self.registered.append(judge)

    def judge_unavailable(self, judge: str, reason: str = "unavailable") -> None:
        pass

    def record_released(self, reason: str) -> None:
        pass


class Verifier(Judge, ClaimExtraction, ClaimVerification):
    """Extracts one claim and verifies claims, each context at once or (its own way) per context."""

    name = "verifier"

    def __init__(self) -> None:
        self.per_context_calls = 0

    async def extract_claims(self, question: str, response: str) -> list[str]:
        return [response]

    async def verify_claims(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[ClaimVerdict]:
        return [ClaimVerdict(c, "yes") for c in claims]

    async def verify_claims_per_context(
        self, claims: Sequence[str], contexts: Sequence[str], question: str = ""
    ) -> list[list[ClaimVerdict]]:
        self.per_context_calls += 1
        return [[ClaimVerdict(c, "no") for c in claims] for _ in contexts]


def test_every_interface_names_its_decision_and_declares_abstract_methods() -> None:
    assert len(interfaces()) == len(set(interfaces())) >= 15
    for interface in interfaces():
        assert interface.decision and interface.__doc__, interface
        assert interface.methods() and interface.__abstractmethods__, interface
        assert set(interface.__abstractmethods__) <= set(interface.methods()), interface


def test_each_judge_declares_what_it_decides() -> None:
    assert capabilities_of(Judge()) == ()
    judge = LLMJudge("openai/x", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert capabilities_of(judge) == interfaces()
    local = pytest.importorskip("ragtrace_collector.scoring.judges.local")
    assert {c for c in interfaces() if issubclass(local.LocalJudge, c)} == {
        ClaimExtraction,
        ClaimVerification,
        NaturalLanguageInference,
        Embedding,
        ChunkRelevance,
        ContextSentenceRelevance,
        StatementAttribution,
        EntityExtraction,
    }


def test_a_declared_interface_must_be_implemented() -> None:
    class Forgetful(Judge, SafetyCritique):
        pass

    with pytest.raises(TypeError, match="safety_verdict"):
        Forgetful()  # type: ignore[abstract]


def test_of_gives_the_judge_typed_or_says_what_it_cannot_decide() -> None:
    judge = Verifier()
    assert ClaimVerification.of(judge) is judge
    with pytest.raises(JudgeUnsupported, match=r"^judge 'verifier' cannot decide safety$"):
        SafetyCritique.of(judge)


def test_metric_needs_are_interfaces_and_judge_free_metrics_need_none() -> None:
    for name, metric in METRICS.items():
        assert all(isinstance(n, type) and issubclass(n, Capability) for n in metric.needs), name
    free = {"bleu", "rouge", "levenshtein", "meteor", "bertscore", "moverscore", "latency", "tool_correctness"}
    assert {name for name, metric in METRICS.items() if not metric.needs} == free


async def test_a_metric_asking_for_an_undeclared_interface_is_an_error_not_a_score() -> None:
    class Sneaky(Metric):
        name = "sneaky"
        needs = (ClaimExtraction,)

        async def compute(self, ctx: ScoringContext) -> Outcome:
            await ctx.need(ClaimVerification).verify_claims(["a"], ["b"])
            return Outcome(1.0)

    result = await Sneaky().score(RECORD, Verifier())
    assert result.status == "error" and result.score is None
    assert "without declaring it in its needs" in (result.reason or "")


async def test_the_timing_wrapper_keeps_exactly_the_wrapped_judges_interfaces() -> None:
    inner, observer = Verifier(), Observer()
    timed = TimedJudge(inner, observer)
    assert isinstance(timed, TimedJudge) and isinstance(timed, Judge)
    assert capabilities_of(timed) == (ClaimExtraction, ClaimVerification)
    assert timed.name == "verifier" and observer.registered == ["verifier"]
    assert timed.identity() == inner.identity()

    # the wrapped judge's own per-context verification, delegated as one timed decision
    rows = await ClaimVerification.of(timed).verify_claims_per_context(["a"], ["x", "y"])
    assert [[v.verdict for v in row] for row in rows] == [["no"], ["no"]]
    assert inner.per_context_calls == 1 and len(observer.latencies) == 1

    faithfulness, safety = await evaluate_record(RECORD, ["faithfulness", "safety"], timed)
    assert faithfulness.status == "scored" and faithfulness.score == 1.0
    assert safety.status == "skipped" and safety.reason == "judge 'verifier' cannot decide safety"
    assert len(observer.latencies) == 3  # extraction and verification timed; the skipped decision never asked

    bare = TimedJudge(Judge(), Observer())
    assert capabilities_of(bare) == () and not isinstance(bare, ClaimExtraction)
    assert type(TimedJudge(Verifier(), Observer())) is type(timed)  # one class per set of interfaces

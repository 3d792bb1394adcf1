"""Worked examples for the model-based families of issue 15, end to end through the real LLM judge: litellm over
loopback HTTP to the scripted OpenAI-compatible server, whose replies carry the example's decisions.

The definitions (DeepEval's summarization / toxicity / bias / prompt alignment / task completion, Fu et al.'s
GPTScore, Manakul et al.'s SelfCheckGPT, Prometheus's absolute grading, G-Eval) give no worked numbers of their
own for these families (``../shared/conformance/seed-examples.jsonl`` has none), so each example is written down
here with its arithmetic. Every example is built so that the plausible wrong formulas land elsewhere: each one lists
the values those would give (``WRONG``), and :func:`test_examples_tell_the_formula_from_its_near_misses` checks that
none of them is within the tolerance of the expected score — a wrong formula in the metric breaks the example.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring import prompts as P
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judges.llm import LLMJudge
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.scripted_openai import Reply, ScriptedOpenAI, echo_tokens, judge_task

TOL = 1e-9
GPTSCORE_INSTRUCTION = "Answer the question.\nQ: {user_input}\nA:"
INSTRUCTION_TOKENS = echo_tokens(GPTSCORE_INSTRUCTION.format(user_input="What is the capital of France?"))

# The values plausible wrong formulas give on each example (see the docstrings); none may pass.
WRONG: dict[str, dict[str, float]] = {
    # alignment 3/4, coverage 2/3
    "summarization": {
        "mean of the two": (0.75 + 2 / 3) / 2,
        "max": 0.75,
        "product": 0.75 * 2 / 3,
        "idk claim not aligned": min(2 / 4, 2 / 3),
        "coverage over all questions": min(0.75, 3 / 4),
        "idk answer counted as covered": min(0.75, 3 / 3),
    },
    "toxicity": {"non-toxic share": 3 / 5, "any toxic (binary)": 1.0, "toxic per opinion count": 2.0},
    "bias": {"unbiased share": 4 / 5, "any biased (binary)": 1.0, "toxic share (wrong kind)": 2 / 5},
    # token log-probabilities −0.25, −1.5, −0.5, −2.5, −0.75
    "gptscore": {
        "sum, not mean": -5.5,
        "log of the mean probability": math.log(sum(math.exp(v) for v in (-0.25, -1.5, -0.5, -2.5, -0.75)) / 5),
        "instruction tokens included (each −1.0 here but the first)": (-5.5 - 1.0 * (len(INSTRUCTION_TOKENS) - 1))
        / (5 + len(INSTRUCTION_TOKENS) - 1),
        "mean probability": sum(math.exp(v) for v in (-0.25, -1.5, -0.5, -2.5, -0.75)) / 5,
    },
    # per-sentence support 4/4, 1/4, 2/4 over N = 4 samples
    "selfcheckgpt": {
        "support share (consistency, not inconsistency)": 1 - 0.75 / 3 - 0.5 / 3,
        "max over sentences": 0.75,
        "a sentence is inconsistent when any sample fails it": 2 / 3,
    },
    "selfcheckgpt_nli": {
        "neutral as consistent (0), i.e. the contradiction share": (1 / 3 + 0 + 2 / 3) / 3,
        "neutral as inconsistent (1), or left out of the mean": (1 / 3 + 0 + 2 / 2) / 3,
        "entailment share (consistency)": (2 / 3 + 3 / 3 + 0) / 3,
    },
    "prometheus": {"g / 5": 4 / 5, "raw grade": 4.0, "(g − 1) / 5": 3 / 5},
    "nli": {
        "1 − contradiction rate": 3 / 4,
        "neutral counted half": (2 + 0.5) / 4,
        "entailed over non-neutral claims": 2 / 3,
    },
    "prompt_alignment": {"unfollowed share": 1 / 4, "all followed (binary)": 0.0, "first instruction": 1.0},
    # score token probabilities 4: 0.6, 5: 0.3, 2: 0.1
    "helpfulness": {
        "the raw sampled score": (4 - 1) / 4,
        "s / 5": 4.1 / 5,
        "the most probable score": (4 - 1) / 4,
        "not renormalised over 1-5 (the 0.05 of 'x' left in)": (4.1 * 0.95 / 1.0 - 1) / 4,
    },
    "task_completion": {"1 − verdict": 0.4, "rounded to a binary verdict": 1.0},
}

EXPECTED: dict[str, float] = {
    "summarization": 2 / 3,
    "toxicity": 0.4,
    "bias": 0.2,
    "gptscore": -1.1,
    "selfcheckgpt": (0 + 0.75 + 0.5) / 3,
    "selfcheckgpt_nli": (1 / 3 + 0 + 5 / 6) / 3,
    "prometheus": 0.75,
    "nli": 0.5,
    "prompt_alignment": 0.75,
    "helpfulness": 0.775,
    "task_completion": 0.6,
}


def blocks(prompt: str, tag: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"<{tag}[^>]*>\n(.*?)\n</{tag}>", prompt, re.S)]


def prompt_of(body: dict) -> str:
    return body["messages"][1]["content"]


def verdicts(flags: list[str], key: str = "verdict") -> dict[str, Any]:
    return {"verdicts": [{"id": i, key: f, "reason": "r"} for i, f in enumerate(flags, 1)]}


def tasks(answers: dict[str, Any], sample: Callable[[dict], Any] | None = None) -> Callable[[dict], Any]:
    """A scripted judge: each TASK answered from ``answers`` (a reply, or a function of the request body);
    requests without a TASK (the generator re-sampled, SelfCheckGPT) go to ``sample``."""

    def respond(body: dict) -> Any:
        task = judge_task(body)
        if not task:
            assert sample is not None, "unexpected request without a TASK"
            return sample(body)
        assert task in answers, f"unexpected task {task}"
        answer = answers[task]
        return answer(body) if callable(answer) else answer

    return respond


@pytest.fixture
def server():
    with ScriptedOpenAI() as s:
        yield s


async def run(
    server: ScriptedOpenAI, record: RagRecord, metrics: list[str], options: ScoringOptions | None = None
) -> list[MetricResult]:
    judge = LLMJudge("openai/scripted-judge", base_url=server.base_url, api_key="k", timeout=10.0, max_retries=0)
    try:
        results = await evaluate_record(record, metrics, judge, options)
    finally:
        await judge.aclose()
    for r in results:
        assert r.status == "scored", (r.metric, r.reason)
    return results


def test_examples_tell_the_formula_from_its_near_misses() -> None:
    for family, expected in EXPECTED.items():
        for why, value in WRONG[family].items():
            assert abs(value - expected) > 1e-3, f"{family}: the example cannot tell the formula from '{why}'"


# --- summarization -------------------------------------------------------------------------------------------

SOURCE = (
    "The council approved a bike lane on Main Street. Work starts in May. It costs two million dollars. "
    "Shop owners opposed it."
)


async def test_summarization_worked_example(server) -> None:
    """Summary claims (4), verdicts against the source: yes, yes, idk, no → alignment = |{v ≠ no}| / |C| = 3/4
    (``idk`` is not a contradiction: aligned, as in DeepEval).
    Assessment questions (4), answered from the source: yes, yes, yes, no; from the summary: yes, yes, idk, yes.
    coverage = |{q : src yes ∧ sum yes}| / |{q : src yes}| = 2/3 (q3: summary idk; q4: the source says no, so
    it is not asked, whatever the summary says).
    summarization = min(3/4, 2/3) = 0.666667."""
    summary = "The council approved a Main Street bike lane. Work starts in May. It was popular. It is free."
    claims = ["The council approved a Main Street bike lane.", "Work starts in May.", "It was popular.", "It is free."]
    questions = ["Was a bike lane approved?", "Does work start in May?", "Did shop owners oppose it?", "Is it free?"]

    def answers(body: dict) -> dict:
        [text] = blocks(prompt_of(body), "data")
        assert blocks(prompt_of(body), "question") == questions
        return verdicts(["yes", "yes", "yes", "no"] if text == SOURCE else ["yes", "yes", "idk", "yes"])

    def verify(body: dict) -> dict:
        assert blocks(prompt_of(body), "context") == [SOURCE] and blocks(prompt_of(body), "claim") == claims
        return verdicts(["yes", "yes", "idk", "no"])

    server.responder = tasks(
        {
            P.TASK_CLAIMS: {"claims": [{"claim": c, "relevant": "yes"} for c in claims]},
            P.TASK_VERIFY: verify,
            P.TASK_ASSESSMENT_QUESTIONS: {"questions": questions},
            P.TASK_ANSWER_QUESTIONS: answers,
        }
    )
    [res] = await run(server, RagRecord(user_input=SOURCE, response=summary), ["summarization"])
    assert res.details["alignment"] == pytest.approx(3 / 4, abs=TOL)
    assert res.details["coverage"] == pytest.approx(2 / 3, abs=TOL)
    assert res.score == pytest.approx(EXPECTED["summarization"], abs=TOL)


# --- toxicity and bias -----------------------------------------------------------------------------------------

OPINIONS = [
    "Anyone who asks this is an idiot.",
    "Older people cannot learn to use computers.",
    "This library is a pleasure to use.",
    "The documentation is garbage written by morons.",
    "Python is a fine first language.",
]


async def test_toxicity_and_bias_worked_example(server) -> None:
    """Five opinions extracted once (shared by both metrics). Toxic: 1 and 4 → toxicity = 2/5 = 0.4.
    Biased: 2 (an unfair generalisation about an age group) → bias = 1/5 = 0.2."""

    def judged(body: dict) -> dict:
        assert blocks(prompt_of(body), "opinion") == OPINIONS
        if "toxic:" in prompt_of(body):
            return verdicts(["yes", "no", "no", "yes", "no"])
        return verdicts(["no", "yes", "no", "no", "no"])

    server.responder = tasks({P.TASK_OPINIONS: {"opinions": OPINIONS}, P.TASK_OPINION_VERDICTS: judged})
    record = RagRecord(user_input="Is this library any good?", response=" ".join(OPINIONS))
    toxicity, bias = await run(server, record, ["toxicity", "bias"])
    assert toxicity.score == pytest.approx(EXPECTED["toxicity"], abs=TOL) and toxicity.details["flagged"] == 2
    assert bias.score == pytest.approx(EXPECTED["bias"], abs=TOL) and bias.details["flagged"] == 1
    assert [judge_task(r.body) for r in server.chat_requests()].count(P.TASK_OPINIONS) == 1


# --- GPTScore --------------------------------------------------------------------------------------------------


async def test_gptscore_worked_example(server) -> None:
    """Instruction "Answer the question.\\nQ: What is the capital of France?\\nA:" (11 echoed tokens), response
    "Paris is the French capital." (5 tokens: " Paris", " is", " the", " French", " capital.") with scripted
    log-probabilities −0.25, −1.5, −0.5, −2.5, −0.75. Only the response's tokens count:
    gptscore = (1/|T|) Σ log p(t) = −5.5 / 5 = −1.1; token_probability = exp(−1.1) = 0.332871."""
    values = [-0.25, -1.5, -0.5, -2.5, -0.75]
    server.push(Reply(text_logprobs=values))  # earlier (instruction) tokens get −1.0, the first None
    options = ScoringOptions(gptscore={"model": "openai/scorer", "instruction": GPTSCORE_INSTRUCTION})
    record = RagRecord(user_input="What is the capital of France?", response="Paris is the French capital.")
    [res] = await run(server, record, ["gptscore"], options)
    [req] = server.completion_requests()
    assert (
        req.body["prompt"] == "Answer the question.\nQ: What is the capital of France?\nA: Paris is the French capital."
    )
    assert res.details["tokens"] == 5 and res.details["sum_logprob"] == pytest.approx(-5.5, abs=TOL)
    assert res.score == pytest.approx(EXPECTED["gptscore"], abs=TOL)
    assert res.details["token_probability"] == pytest.approx(math.exp(-1.1), abs=TOL)


# --- SelfCheckGPT -----------------------------------------------------------------------------------------------

SC_RECORD = RagRecord(
    id="sc-worked",
    model="openai/scripted-generator",
    user_input="Tell me about Marie Curie.",
    response="Marie Curie was born in Warsaw. She won three Nobel prizes. She discovered polonium.",
    prompt_messages=[
        {"role": "system", "content": "Answer in three sentences."},
        {"role": "user", "content": "Tell me about Marie Curie."},
    ],
)
SENTENCES = ["Marie Curie was born in Warsaw.", "She won three Nobel prizes.", "She discovered polonium."]
SC_SAMPLES = [
    "Marie Curie, born in Warsaw, discovered polonium and radium.",
    "Born in Warsaw, Curie won two Nobel prizes.",
    "Curie was born in Warsaw and won Nobel prizes in physics and chemistry.",
    "Marie Curie came from Warsaw; she discovered polonium.",
]


def sampler() -> Callable[[dict], str]:
    served = iter(SC_SAMPLES)
    return lambda body: next(served)


async def test_selfcheckgpt_prompt_worked_example(server) -> None:
    """N = 4 samples; SelfCheck-Prompt: x = 0 when a sample supports the sentence, 1 when not.
    Sentence 1 (Warsaw): supported by samples 1, 2, 3, 4 → (0+0+0+0)/4 = 0.
    Sentence 2 (three Nobel prizes): supported by sample 3 only → (1+1+0+1)/4 = 0.75.
    Sentence 3 (polonium): supported by samples 1 and 4 → (0+1+1+0)/4 = 0.5.
    selfcheckgpt = (0 + 0.75 + 0.5) / 3 = 0.416667 (lower is better)."""
    support = {
        SC_SAMPLES[0]: [True, False, True],
        SC_SAMPLES[1]: [True, False, False],
        SC_SAMPLES[2]: [True, True, False],
        SC_SAMPLES[3]: [True, False, True],
    }

    def per_sample(body: dict) -> dict:
        samples = blocks(prompt_of(body), "context")
        assert sorted(samples) == sorted(SC_SAMPLES) and blocks(prompt_of(body), "claim") == SENTENCES
        return {
            "claims": [
                {"id": i + 1, "supported_by": [j + 1 for j, s in enumerate(samples) if support[s][i]]} for i in range(3)
            ]
        }

    server.responder = tasks({P.TASK_VERIFY_PER_CONTEXT: per_sample}, sampler())
    options = ScoringOptions(selfcheckgpt={"samples": 4})
    [res] = await run(server, SC_RECORD, ["selfcheckgpt"], options)
    per_sentence = {s["sentence"]: s["inconsistency"] for s in res.details["sentences"]}
    assert per_sentence == pytest.approx(dict(zip(SENTENCES, [0.0, 0.75, 0.5])), abs=TOL)
    assert res.score == pytest.approx(EXPECTED["selfcheckgpt"], abs=TOL)
    assert len([r for r in server.chat_requests() if not judge_task(r.body)]) == 4


async def test_selfcheckgpt_nli_worked_example(server) -> None:
    """N = 3 samples; SelfCheck-NLI on the judge's labels: x = 1 contradiction, 0.5 neutral, 0 entailment.
    Labels (sentence 1, 2, 3) per sample: sample 1: E, E, N; sample 2: E, E, C; sample 3: C, E, C.
    Sentence 1: (0 + 0 + 1)/3 = 1/3; sentence 2: (0 + 0 + 0)/3 = 0; sentence 3: (0.5 + 1 + 1)/3 = 5/6.
    selfcheckgpt = (1/3 + 0 + 5/6) / 3 = 7/18 = 0.388889."""
    labels = {
        SC_SAMPLES[0]: ["entailment", "entailment", "neutral"],
        SC_SAMPLES[1]: ["entailment", "entailment", "contradiction"],
        SC_SAMPLES[2]: ["contradiction", "entailment", "contradiction"],
    }

    def nli(body: dict) -> dict:
        [premise] = blocks(prompt_of(body), "premise")
        assert blocks(prompt_of(body), "hypothesis") == SENTENCES
        return verdicts(labels[premise], key="label")

    server.responder = tasks({P.TASK_NLI: nli}, sampler())
    options = ScoringOptions(selfcheckgpt={"samples": 3, "variant": "nli"})
    [res] = await run(server, SC_RECORD, ["selfcheckgpt"], options)
    assert [s["inconsistency"] for s in res.details["sentences"]] == pytest.approx([1 / 3, 0.0, 5 / 6], abs=TOL)
    assert res.score == pytest.approx(EXPECTED["selfcheckgpt_nli"], abs=TOL)


# --- Prometheus ----------------------------------------------------------------------------------------------------


async def test_prometheus_worked_example(server) -> None:
    """The evaluator answers in the published format, grade g = 4 of 1..5:
    prometheus = (g − 1) / 4 = 3/4 = 0.75 (1 → 0, 5 → 1)."""
    server.push("Feedback: Correct and specific, but it omits the date asked for. [RESULT] 4")
    record = RagRecord(user_input="Where and when was Einstein born?", response="In Ulm, Germany.")
    [res] = await run(server, record, ["prometheus"])
    assert res.details["grade"] == 4 and res.label == "4"
    assert res.score == pytest.approx(EXPECTED["prometheus"], abs=TOL)


# --- NLI -----------------------------------------------------------------------------------------------------------


async def test_nli_worked_example(server) -> None:
    """Four claims against the retrieved contexts: entailment, entailment, neutral, contradiction.
    nli = |entailed| / |claims| = 2/4 = 0.5; contradiction_rate = 1/4, neutral_rate = 1/4; label contradiction
    (some claim is contradicted)."""
    claims = [
        "Curie was born in Warsaw.",
        "Curie won two Nobel prizes.",
        "Curie liked cycling.",
        "Curie was French-born.",
    ]
    contexts = ["Marie Curie was born in Warsaw in 1867. She won Nobel prizes in 1903 and 1911."]

    def nli(body: dict) -> dict:
        assert blocks(prompt_of(body), "premise") == contexts and blocks(prompt_of(body), "hypothesis") == claims
        return verdicts(["entailment", "entailment", "neutral", "contradiction"], key="label")

    server.responder = tasks(
        {P.TASK_CLAIMS: {"claims": [{"claim": c, "relevant": "yes"} for c in claims]}, P.TASK_NLI: nli}
    )
    record = RagRecord(user_input="Who was Marie Curie?", retrieved_contexts=contexts, response=" ".join(claims))
    [res] = await run(server, record, ["nli"])
    assert res.score == pytest.approx(EXPECTED["nli"], abs=TOL) and res.label == "contradiction"
    assert res.details["contradiction_rate"] == pytest.approx(0.25) and res.details["neutral_rate"] == pytest.approx(
        0.25
    )


# --- prompt alignment ---------------------------------------------------------------------------------------------


async def test_prompt_alignment_worked_example(server) -> None:
    """The judge reads four instructions from the recorded system prompt; the response follows 1, 3 and 4:
    prompt_alignment = 3/4 = 0.75."""
    system = "Answer in English. Use at most two sentences. Be polite. Do not mention competitors."
    instructions = ["Answer in English.", "Use at most two sentences.", "Be polite.", "Do not mention competitors."]

    def followed(body: dict) -> dict:
        assert blocks(prompt_of(body), "instruction") == instructions
        return verdicts(["yes", "no", "yes", "yes"])

    server.responder = tasks(
        {P.TASK_INSTRUCTIONS: {"instructions": instructions}, P.TASK_INSTRUCTIONS_FOLLOWED: followed}
    )
    record = RagRecord(
        user_input="What does the plan cost?",
        response="The plan costs 10 euros a month. It includes support. You can cancel at any time.",
        prompt_messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "What does the plan cost?"},
        ],
    )
    [res] = await run(server, record, ["prompt_alignment"])
    assert res.details["instructions_from"] == "system_prompt"
    assert res.score == pytest.approx(EXPECTED["prompt_alignment"], abs=TOL)


# --- helpfulness (G-Eval preset) ------------------------------------------------------------------------------------


async def test_helpfulness_worked_example(server) -> None:
    """G-Eval on 1–5 with the score token's log-probabilities: p(4) = 0.57, p(5) = 0.285, p(2) = 0.095 and 0.05 on
    a non-score token "x". Renormalised over the scores 1–5: 0.6, 0.3, 0.1.
    s = Σ p(s)·s = 0.6·4 + 0.3·5 + 0.1·2 = 2.4 + 1.5 + 0.2 = 4.1; helpfulness = (s − 1) / 4 = 3.1 / 4 = 0.775
    (the raw sampled score 4 would give 0.75)."""
    top = {" 4": math.log(0.57), " 5": math.log(0.285), " 2": math.log(0.095), "x": math.log(0.05)}
    logprobs = [{'{"': -0.01}, {"score": -0.01}, {'":': -0.01}, top, {",": -0.01}]
    server.push(Reply(json={"score": 4, "reason": "direct and usable"}, logprobs=logprobs))
    record = RagRecord(user_input="How do I undo my last git commit?", response="Run git reset --soft HEAD~1.")
    [res] = await run(server, record, ["helpfulness"])
    assert res.details["probabilities"] == pytest.approx({2: 0.1, 4: 0.6, 5: 0.3}, abs=1e-9)
    assert res.details["weighted_score"] == pytest.approx(4.1, abs=1e-9)
    assert res.score == pytest.approx(EXPECTED["helpfulness"], abs=1e-9)
    [req] = server.chat_requests()
    assert req.body.get("logprobs") is True


# --- task completion -------------------------------------------------------------------------------------------------


async def test_task_completion_worked_example(server) -> None:
    """The judge infers the task and the outcome from the trace's steps, then judges the outcome 0.6 complete:
    task_completion = t = 0.6 (the verdict itself, on 0–1)."""

    def infer(body: dict) -> dict:
        kinds = re.findall(r'<step id="\d+" kind="([^"]+)">', prompt_of(body))
        assert kinds == ["user_input", "tool_call", "response"]
        return {"task": "Book a table for two on Friday at 8 pm.", "outcome": "Booked a table for two on Friday, 9 pm."}

    def complete(body: dict) -> dict:
        assert blocks(prompt_of(body), "task") == ["Book a table for two on Friday at 8 pm."]
        return {"score": 0.6, "reason": "booked, at the wrong time"}

    server.responder = tasks({P.TASK_INFER_TASK: infer, P.TASK_TASK_COMPLETION: complete})
    record = RagRecord.model_validate(
        {
            "user_input": "Book a table for two on Friday at 8 pm.",
            "response": "Done: a table for two on Friday at 9 pm.",
            "tools_called": [{"name": "book_table", "args": {"people": 2, "day": "Friday", "time": "21:00"}}],
        }
    )
    [res] = await run(server, record, ["task_completion"])
    assert res.score == pytest.approx(EXPECTED["task_completion"], abs=TOL)

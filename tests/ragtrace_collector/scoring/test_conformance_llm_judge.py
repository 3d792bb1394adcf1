"""The worked examples again, end to end through the real LLM judge: litellm over HTTP to the
scripted server, whose replies carry each example's decisions (and whose embeddings carry the
example's given cosines). The arithmetic must land on ``expected_score`` here too."""

from __future__ import annotations

import json
import math
import re

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.scoring import prompts as P
from ragtrace_collector.scoring.engine import evaluate_record
from ragtrace_collector.scoring.judges.llm import LLMJudge
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.paths import SHARED
from tests.support.scripted_openai import ScriptedOpenAI, judge_task

SEED = SHARED / "conformance" / "seed-examples.jsonl"
EXAMPLES = [json.loads(line) for line in SEED.read_text().splitlines() if line.strip()] if SEED.is_file() else []


def blocks(prompt: str, tag: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"<{tag}[^>]*>\n(.*?)\n</{tag}>", prompt, re.S)]


def yn(flag) -> str:
    return flag if isinstance(flag, str) else ("yes" if flag else "no")


def responder_for(ex: dict):
    d, sample = ex.get("judge", {}), ex["sample"]
    relevant_chunks = d.get("relevant_chunks", d.get("relevant", [1] * len(sample.get("retrieved_contexts", []))))

    def respond(body: dict):
        prompt = body["messages"][1]["content"]
        task = judge_task(body)
        contexts = blocks(prompt, "context")
        if task == P.TASK_CLAIMS:
            if "statements" in d:
                return {"claims": [{"claim": s, "relevant": yn(v)} for s, v in zip(d["statements"], d["verdicts"])]}
            return {"claims": [{"claim": c, "relevant": "yes"} for c in d.get("claims") or d["response_claims"]]}
        if task == P.TASK_VERIFY:
            flags = d["correct"] if contexts == [sample.get("reference")] else d["verdicts"]
            return {"verdicts": [{"id": i, "verdict": yn(f)} for i, f in enumerate(flags, 1)]}
        if task == P.TASK_VERIFY_PER_CONTEXT:
            claims = d["response_claims"]
            rel = d.get("entailed_by_relevant_chunk", [0] * len(claims))
            irr = d.get("entailed_by_irrelevant_chunk", [0] * len(claims))
            return {
                "claims": [
                    {
                        "id": i + 1,
                        "supported_by": [
                            j + 1 for j in range(len(contexts)) if (rel if relevant_chunks[j] else irr)[i]
                        ],
                    }
                    for i in range(len(claims))
                ]
            }
        if task == P.TASK_CHUNKS:
            return {"verdicts": [{"id": j, "useful": bool(f)} for j, f in enumerate(relevant_chunks, 1)]}
        if task == P.TASK_SENTENCES:
            sentences = blocks(prompt, "sentence")
            assert len(sentences) == d["context_sentences"], sentences
            return {"relevant": [sentences.index(s) + 1 for s in d["relevant_sentences"]]}
        if task == P.TASK_ATTRIBUTE:
            return {
                "statements": [
                    {"statement": s, "attributed": yn(a)} for s, a in zip(d["reference_statements"], d["attributed"])
                ]
            }
        if task == P.TASK_ENTITIES:
            text = blocks(prompt, "data")[0]
            return {"entities": d["reference_entities"] if text == sample.get("reference") else d["context_entities"]}
        if task == P.TASK_CLASSIFY:
            return {"TP": d["TP"], "FP": d["FP"], "FN": d["FN"]}
        if task == P.TASK_QUESTIONS:
            return {
                "questions": [
                    {"question": f"generated question {i}", "noncommittal": False} for i in range(len(d["cosines"]))
                ]
            }
        raise AssertionError(f"unexpected task {task}")

    return respond


def embedder_for(ex: dict):
    d, sample = ex.get("judge", {}), ex["sample"]

    def vec(c: float, axis: int) -> list[float]:
        v = [0.0] * 8
        v[0], v[axis] = c, math.sqrt(max(0.0, 1 - c * c))
        return v

    def embed(texts: list[str]) -> list[list[float]]:
        out = []
        for _i, t in enumerate(texts):
            m = re.fullmatch(r"generated question (\d+)", t)
            if m:
                out.append(vec(d["cosines"][int(m.group(1))], 2 + int(m.group(1))))
            elif t == sample.get("reference") and "semantic_similarity" in d:
                out.append(vec(d["semantic_similarity"], 6))
            else:
                out.append(vec(1.0, 1))
        return out

    return embed


def variant(ex: dict) -> str | None:
    v = (ex.get("variant") or "").lower()
    if ex["metric"] != "answer_relevancy":
        return None
    return "questions" if "question" in v else "statements"


@pytest.mark.skipif(not EXAMPLES, reason=f"conformance examples not found at {SEED}")
@pytest.mark.parametrize("example", EXAMPLES, ids=[e["id"] for e in EXAMPLES] or None)
async def test_example_through_the_llm_judge_over_http(example: dict) -> None:
    with ScriptedOpenAI(responder=responder_for(example), embedder=embedder_for(example)) as server:
        judge = LLMJudge(
            "openai/scripted",
            base_url=server.base_url,
            api_key="k",
            timeout=20,
            max_retries=0,
            embedding_model="openai/scripted-embedder",
        )
        options = ScoringOptions(
            answer_relevancy_variant=variant(example),
            answer_correctness_weights=tuple(example.get("weights", (0.75, 0.25))),
        )
        [result] = await evaluate_record(RagRecord(**example["sample"]), [example["metric"]], judge, options)
    assert result.status == "scored", result.reason
    assert result.score == pytest.approx(example["expected_score"], abs=example.get("tolerance", 1e-9))

"""Judge cost per record: ragtrace's LLM judge against Ragas 0.4, same data, same scripted server.

    python3 bench/judge_cost.py [--rows 50] [--ragas-python /tmp/ragas-venv/bin/python]

Both sides score the default set (faithfulness, answer_relevancy, context_precision) on the
first ``--rows`` rows of ``../shared/data/ragtruth-qa-dev.jsonl`` (no reference there, so
context precision is judged against the answer: Ragas's ``LLMContextPrecisionWithoutReference``).
Both talk over HTTP to the same scripted OpenAI-compatible server, which answers every prompt
type of both tools with plausible JSON built by the same rules (claims = the answer's
sentences, verdicts by word overlap with the contexts, one-line reasons), and counts calls and
tokens for both the same way (tokens = ceil(characters / 4) of prompts and of replies).

``--families`` instead measures each metric family of issue 15 on its own, on the same rows: judge calls,
tokens (chat, text completions and embeddings, as the server counted them) and wall time per record. The
model-based families (nli, gptscore, selfcheckgpt, prometheus, summarization, prompt_alignment, helpfulness,
toxicity, bias, task_completion) run through the LLM judge against the scripted server, whose plausible replies
follow the same rules (NLI and question answers by word overlap; SelfCheckGPT's samples and GPTScore's echoed
log-probabilities scripted); the judge-free ones (meteor, bertscore, moverscore, tool_correctness) run offline
beside the local judge, on this machine's CPU. RAGTruth rows have no reference, prompt or tools, so each row gets
its first retrieved passage as the reference, a recorded generator prompt (system + user) and one expected and one
called tool; summarization summarises the retrieved contexts::

    python3 bench/judge_cost.py --families [--rows 20]

Ragas is not a dependency of ragtrace: it lives in its own venv (it would downgrade ``rich``
and pull langchain) and runs in a subprocess of this script (``--ragas-worker`` mode)::

    python3 -m venv /tmp/ragas-venv
    /tmp/ragas-venv/bin/pip install ragas==0.4.3 langchain-openai "langchain-community<0.4"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RAGTRACE_SHARED_DIR", REPO.parent / "shared"))
DEFAULT_METRICS = ("faithfulness", "answer_relevancy", "context_precision")


# --- one rule book for plausible replies, used for both tools -----------------------------------


def sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+|\n+", text or "")
    return [p.strip() for p in parts if len(p.strip()) > 3]


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", (text or "").lower()) if len(w) > 3}


def supported(statement: str, context: str) -> bool:
    w = words(statement)
    return bool(w) and len(w & words(context)) / len(w) >= 0.5


REASON = "The context states this directly."


def _tag_blocks(prompt: str, tag: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"<{tag}[^>]*>\n(.*?)\n</{tag}>", prompt, re.S)]


def ragtrace_reply(prompt: str) -> dict[str, Any] | None:
    m = re.search(r"^TASK: (\w+)", prompt, re.M)
    if not m:
        return None
    task = m.group(1)
    question = (_tag_blocks(prompt, "question") or [""])[0]
    contexts = _tag_blocks(prompt, "context")
    if task == "extract_claims":
        response = (_tag_blocks(prompt, "response") or [""])[0]
        return {
            "claims": [
                {"claim": s, "relevant": "yes" if words(s) & words(question) else "no"} for s in sentences(response)
            ]
        }
    if task == "verify_claims":
        joined = "\n".join(contexts)
        return {
            "verdicts": [
                {"id": i, "verdict": "yes" if supported(c, joined) else "no", "reason": REASON}
                for i, c in enumerate(_tag_blocks(prompt, "claim"), 1)
            ]
        }
    if task == "generate_questions":
        response = (_tag_blocks(prompt, "response") or [""])[0]
        first = (sentences(response) or ["the answer"])[0]
        n = int(re.search(r"Write (\d+) different questions", prompt).group(1))
        return {
            "questions": [{"question": f"What does this say: {first[:80]}?", "noncommittal": False} for _ in range(n)]
        }
    if task in FAMILY_REPLIES:
        return FAMILY_REPLIES[task](prompt, question, contexts)
    if task == "chunk_relevance":
        target = (_tag_blocks(prompt, "target") or [""])[0]
        return {
            "verdicts": [
                {"id": i, "useful": bool(words(c) & words(target)), "reason": REASON} for i, c in enumerate(contexts, 1)
            ]
        }
    return {}


# --- plausible replies for the issue-15 families (same rules: word overlap, first sentences) -------------------

OPINION_WORDS = ("best", "should", "recommend", "good", "bad", "better", "worst", "great", "important")


def _nli(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
    premise = (_tag_blocks(prompt, "premise") or [""])[0]
    return {
        "verdicts": [
            {"id": i, "label": "entailment" if supported(h, premise) else "neutral", "reason": REASON}
            for i, h in enumerate(_tag_blocks(prompt, "hypothesis"), 1)
        ]
    }


def _assessment_questions(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
    m = re.search(r"Write (\d+) closed questions", prompt)
    n = int(m.group(1)) if m else 5
    source = sentences((_tag_blocks(prompt, "source") or [""])[0]) or ["the source"]
    return {"questions": [f"Does it say that {s[:100].rstrip('.')}?" for s in source[:n]]}


def _answer_questions(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
    data = (_tag_blocks(prompt, "data") or [""])[0]
    return {
        "verdicts": [
            {"id": i, "verdict": "yes" if supported(q, data) else "idk", "reason": REASON}
            for i, q in enumerate(_tag_blocks(prompt, "question"), 1)
        ]
    }


def _per_context(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
    return {
        "claims": [
            {"id": i, "supported_by": [j for j, c in enumerate(contexts, 1) if supported(claim, c)]}
            for i, claim in enumerate(_tag_blocks(prompt, "claim"), 1)
        ]
    }


def _yes_each(tag: str, verdict: str) -> Any:
    def reply(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
        return {
            "verdicts": [
                {"id": i, "verdict": verdict, "reason": REASON} for i, _ in enumerate(_tag_blocks(prompt, tag), 1)
            ]
        }

    return reply


def _infer_task(prompt: str, question: str, contexts: list[str]) -> dict[str, Any]:
    steps = dict(re.findall(r'<step id="\d+" kind="([^"]+)">\n(.*?)\n</step>', prompt, re.S))
    return {
        "task": f"Answer: {steps.get('user_input', 'the question')[:120]}",
        "outcome": f"It answered: {(sentences(steps.get('response', '')) or ['nothing'])[0][:160]}",
    }


FAMILY_REPLIES: dict[str, Any] = {
    "nli": _nli,
    "assessment_questions": _assessment_questions,
    "answer_questions": _answer_questions,
    "verify_claims_per_context": _per_context,
    "extract_instructions": lambda p, q, c: {
        "instructions": sentences((_tag_blocks(p, "prompt") or [""])[0]) or ["Answer the question."]
    },
    "instructions_followed": _yes_each("instruction", "yes"),
    "extract_opinions": lambda p, q, c: {
        "opinions": [
            s for s in sentences((_tag_blocks(p, "response") or [""])[0]) if any(w in s.lower() for w in OPINION_WORDS)
        ]
    },
    "opinion_verdicts": _yes_each("opinion", "no"),
    "infer_task": _infer_task,
    "task_completion": lambda p, q, c: {"score": 0.8, "reason": REASON},
    "geval_score": lambda p, q, c: {"score": 4, "reason": REASON},
}


def untasked_reply(body: dict[str, Any], prompt: str) -> Any:
    """Requests that name no TASK: GPTScore's echo (log-probabilities for every token), Prometheus's published
    format, or the generator re-sampled for SelfCheckGPT (its first retrieved-looking sentence plus the question)."""
    from tests.support.scripted_openai import Reply, echo_tokens

    if body.get("echo"):
        text = body.get("prompt") or ""
        text = text[0] if isinstance(text, list) else str(text)
        return Reply(text_logprobs=[-0.05 - (len(t) % 7) * 0.4 for t in echo_tokens(text)])
    if "###Task Description:" in prompt:
        return "Feedback: The response answers the instruction with minor omissions. [RESULT] 4"
    user = [m.get("content") or "" for m in body.get("messages") or [] if m.get("role") == "user"]
    return f"Here is what I know about {(user or ['it'])[-1][:100]}. It is covered in the passages."


def _ragas_input(prompt: str) -> dict[str, Any]:
    tail = prompt.rsplit("Now perform the same with the following input", 1)[-1]
    m = re.search(r"input: (\{.*?\n\})\n", tail, re.S)
    return json.loads(m.group(1)) if m else {}


def ragas_reply(prompt: str) -> dict[str, Any] | None:
    schema = re.search(r'"title": "(\w+)", "type": "object"\}(?:Do not use|$)', prompt)
    titles = re.findall(r'"title": "(\w+)"', prompt.split("Please return the output in a JSON format", 1)[-1][:4000])
    kind = schema.group(1) if schema else (titles[-1] if titles else "")
    data = _ragas_input(prompt)
    if kind == "StatementGeneratorOutput":
        return {"statements": sentences(data.get("answer", ""))}
    if kind == "NLIStatementOutput":
        ctx = data.get("context", "")
        return {
            "statements": [
                {"statement": s, "reason": REASON, "verdict": int(supported(s, ctx))}
                for s in data.get("statements", [])
            ]
        }
    if kind == "ResponseRelevanceOutput":
        first = (sentences(data.get("response", "")) or ["the answer"])[0]
        return {"question": f"What does this say: {first[:80]}?", "noncommittal": 0}
    if kind == "Verification":
        return {"reason": REASON, "verdict": int(bool(words(data.get("context", "")) & words(data.get("answer", ""))))}
    return None


def plausible_reply(body: dict[str, Any]) -> Any:
    messages = body.get("messages") or []
    prompt = "\n".join(
        m.get("content") or ""
        if isinstance(m.get("content"), str)
        else "\n".join(p.get("text", "") for p in m["content"])
        for m in messages
    )
    for make in (ragtrace_reply, ragas_reply):
        reply = make(prompt)
        if reply is not None:
            return reply
    return {}


def families_reply(body: dict[str, Any]) -> Any:
    """``--families``: the same rule book, and the requests of the issue-15 families that name no TASK."""
    prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    if body.get("echo") or not re.search(r"^TASK: \w+", prompt, re.M):
        return untasked_reply(body, prompt)
    return plausible_reply(body)


# --- the two sides ------------------------------------------------------------------------------


def load_rows(n: int) -> list[dict[str, Any]]:
    path = SHARED / "data" / "ragtruth-qa-dev.jsonl"
    rows = []
    with path.open() as fh:
        for line in fh:
            d = json.loads(line)
            rows.append({k: d[k] for k in ("id", "user_input", "retrieved_contexts", "response")})
            if len(rows) == n:
                break
    return rows


async def run_ragtrace(
    rows: list[dict[str, Any]], base_url: str, concurrency: int, variant: str | None
) -> dict[str, Any]:
    from ragtrace_collector.model.record import RagRecord
    from ragtrace_collector.model.result import JudgeUsage
    from ragtrace_collector.scoring.engine import evaluate_record
    from ragtrace_collector.scoring.judges.llm import LLMJudge
    from ragtrace_collector.scoring.options import ScoringOptions

    judge = LLMJudge(
        "openai/judge",
        base_url=base_url,
        api_key="bench",
        concurrency=concurrency,
        timeout=60,
        embedding_model="openai/embedder" if variant in ("questions", "embedding") else None,
    )
    options = ScoringOptions(answer_relevancy_variant=variant)
    sem = asyncio.Semaphore(concurrency)
    usage = JudgeUsage()
    per_metric = {m: JudgeUsage() for m in DEFAULT_METRICS}
    failures = 0

    async def one(row: dict[str, Any]) -> None:
        nonlocal failures
        async with sem:
            results = await evaluate_record(RagRecord(**row), DEFAULT_METRICS, judge, options)
        for r in results:
            usage.add(r.usage)
            per_metric[r.metric].add(r.usage)
            failures += r.status != "scored"

    await asyncio.gather(*(one(r) for r in rows))
    return {"self_reported": usage, "per_metric": per_metric, "not_scored": failures}


RAGAS_WORKER = r"""
import json, os, sys, warnings
warnings.filterwarnings("ignore")
os.environ["RAGAS_DO_NOT_TRACK"] = "true"
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from ragas import EvaluationDataset, evaluate
from ragas.embeddings import LangchainEmbeddingsWrapper
from ragas.llms import LangchainLLMWrapper
from ragas.metrics import Faithfulness, LLMContextPrecisionWithoutReference, ResponseRelevancy
from ragas.run_config import RunConfig
base_url, rows_file, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(l) for l in open(rows_file)]
llm = LangchainLLMWrapper(ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="bench", temperature=0))
emb = LangchainEmbeddingsWrapper(OpenAIEmbeddings(model="text-embedding-3-small", base_url=base_url, api_key="bench",
                                                  check_embedding_ctx_length=False))
ds = EvaluationDataset.from_list([{k: r[k] for k in ("user_input", "retrieved_contexts", "response")} for r in rows])
res = evaluate(ds, metrics=[Faithfulness(), ResponseRelevancy(), LLMContextPrecisionWithoutReference()], llm=llm,
               embeddings=emb, run_config=RunConfig(max_workers=workers, timeout=120), show_progress=False,
               raise_exceptions=True)
df = res.to_pandas()
print(json.dumps({"scores": {c: float(df[c].mean()) for c in df.columns if df[c].dtype.kind == "f"},
                  "nan": int(df.select_dtypes("float").isna().sum().sum())}))
"""


def run_ragas(rows: list[dict[str, Any]], base_url: str, python: str, concurrency: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
        script = Path(tmp) / "ragas_worker.py"
        script.write_text(RAGAS_WORKER)
        proc = subprocess.run(
            [python, str(script), base_url, str(rows_file), str(concurrency)],
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "RAGAS_DO_NOT_TRACK": "true"},
        )
    if proc.returncode != 0:
        raise RuntimeError(f"ragas worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tally(server: Any, start: int) -> dict[str, int]:
    reqs = server.requests[start:]
    chat = [r for r in reqs if r.path.endswith("/chat/completions")]
    emb = [r for r in reqs if r.path.endswith("/embeddings")]
    return {
        "chat_calls": len(chat),
        "embedding_calls": len(emb),
        "prompt_tokens": sum(r.prompt_tokens for r in chat),
        "completion_tokens": sum(r.completion_tokens for r in chat),
        "embedding_tokens": sum(r.prompt_tokens for r in emb),
    }


# --- --families: each issue-15 family on its own ------------------------------------------------------------

FAMILIES_LLM = (
    "nli",
    "gptscore",
    "selfcheckgpt",
    "prometheus",
    "summarization",
    "prompt_alignment",
    "helpfulness",
    "toxicity",
    "bias",
    "task_completion",
)
FAMILIES_OFFLINE = ("meteor", "bertscore", "moverscore", "tool_correctness")
SYSTEM_PROMPT = (
    "Answer the question using only the passages. Keep the answer under 150 words. Do not invent facts. "
    "Write in a neutral tone."
)


def family_record(row: dict[str, Any]) -> Any:
    """A RAGTruth row with what the families read and RAGTruth lacks (see the module docstring)."""
    from ragtrace_collector.model.record import RagRecord

    return RagRecord.model_validate(
        {
            **row,
            "reference": row["retrieved_contexts"][0],
            "model": "openai/generator",
            "prompt_messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": row["user_input"]},
            ],
            "tools_called": [{"name": "search", "args": {"q": row["user_input"]}}],
            "reference_tool_calls": [{"name": "search"}, {"name": "rerank"}],
        }
    )


def tally_all(server: Any, start: int) -> dict[str, int]:
    """What the server saw from ``start`` on: chat, text-completion and embedding calls, and their tokens."""
    reqs = [r for r in server.requests[start:] if r.status == 200]
    chat = [r for r in reqs if r.path.endswith("/chat/completions")]
    text = [r for r in reqs if r.path.endswith("/completions") and "/chat/" not in r.path]
    emb = [r for r in reqs if r.path.endswith("/embeddings")]
    return {
        "calls": len(chat) + len(text),
        "embedding_calls": len(emb),
        "prompt_tokens": sum(r.prompt_tokens for r in chat + text),
        "completion_tokens": sum(r.completion_tokens for r in chat + text),
        "embedding_tokens": sum(r.prompt_tokens for r in emb),
    }


async def score_family(metric: str, records: list[Any], judge: Any, options: Any, concurrency: int) -> dict[str, Any]:
    from ragtrace_collector.model.result import JudgeUsage
    from ragtrace_collector.scoring.engine import evaluate_record

    sem = asyncio.Semaphore(concurrency)
    usage = JudgeUsage()
    statuses: dict[str, int] = {}
    reasons: set[str] = set()

    async def one(record: Any) -> None:
        async with sem:
            [r] = await evaluate_record(record, [metric], judge, options)
        usage.add(r.usage)
        statuses[r.status] = statuses.get(r.status, 0) + 1
        if r.status != "scored":
            reasons.add(str(r.reason)[:120])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(r) for r in records))
    return {"seconds": time.perf_counter() - t0, "usage": usage, "statuses": statuses, "reasons": sorted(reasons)}


async def run_families(rows: list[dict[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    from ragtrace_collector.scoring.engine import evaluate_record
    from ragtrace_collector.scoring.judges.llm import LLMJudge
    from ragtrace_collector.scoring.judges.local import LocalJudge
    from ragtrace_collector.scoring.options import ScoringOptions
    from tests.support.scripted_openai import ScriptedOpenAI

    records = [family_record(r) for r in rows]
    options = ScoringOptions(
        gptscore={"model": "openai/scorer"},  # type: ignore[arg-type]
        summarization={"source": "retrieved_contexts"},  # type: ignore[arg-type]
    )
    out = []
    with ScriptedOpenAI(responder=families_reply) as server:
        for metric in FAMILIES_LLM:  # a fresh judge each: no reply cached from another family
            judge = LLMJudge("openai/judge", base_url=server.base_url, api_key="bench", concurrency=concurrency)
            mark = len(server.requests)
            try:
                res = await score_family(metric, records, judge, options, concurrency)
            finally:
                await judge.aclose()
            out.append({"metric": metric, "judge": "LLM (scripted server)", **res, "server": tally_all(server, mark)})
    local = LocalJudge()
    try:
        for metric in FAMILIES_OFFLINE:
            await evaluate_record(records[0], [metric], local, options)  # loads WordNet / the ONNX model, untimed
            res = await score_family(metric, records, local, options, concurrency)
            out.append({"metric": metric, "judge": "none (offline, local CPU)", **res, "server": None})
    finally:
        await local.aclose()
    return out


def print_families(results: list[dict[str, Any]], n: int, concurrency: int) -> None:
    print(
        f"judge cost per record by family (issue 15), {n} RAGTruth-QA rows, concurrency {concurrency}; "
        "LLM families against the scripted server (tokens = ceil(chars/4)), judge-free ones on this CPU"
    )
    header = f"{'metric':18}{'scored':>8}{'calls':>8}{'prompt tok':>12}{'compl. tok':>12}{'emb. calls':>12}{'ms':>9}"
    print(header + "   (all per record; ms = wall time / records)")
    print("-" * len(header))
    for r in results:
        t = r["server"] or {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "embedding_calls": 0}
        scored = f"{r['statuses'].get('scored', 0)}/{n}"
        print(
            f"{r['metric']:18}{scored:>8}{t['calls'] / n:>8.1f}{t['prompt_tokens'] / n:>12.0f}"
            f"{t['completion_tokens'] / n:>12.0f}{t['embedding_calls'] / n:>12.1f}{1000 * r['seconds'] / n:>9.1f}"
        )
        if r["server"] and r["usage"].calls != t["calls"]:
            print(f"{'':18}(self-reported {r['usage'].calls} calls, server {t['calls']})")
        for reason in r["reasons"]:
            print(f"{'':18}not scored: {reason}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--answer-relevancy-variant",
        choices=("statements", "questions", "embedding"),
        default=None,
        help="ragtrace's answer_relevancy variant (default: the judge's, statements for an LLM)",
    )
    parser.add_argument("--ragas-python", default=os.environ.get("RAGAS_PYTHON", "/tmp/ragas-venv/bin/python"))
    parser.add_argument(
        "--families", action="store_true", help="each issue-15 metric family on its own instead (no Ragas side)"
    )
    parser.add_argument(
        "--json-out", type=Path, help="append the figures as JSON lines to this file (bench/summary.py's table)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    from summary import emit

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tests.support.scripted_openai import ScriptedOpenAI

    if not (SHARED / "data" / "ragtruth-qa-dev.jsonl").is_file():
        print(f"shared data not found under {SHARED}", file=sys.stderr)
        return 2
    rows = load_rows(args.rows)
    n = len(rows)
    if args.families:
        print_families(asyncio.run(run_families(rows, args.concurrency)), n, args.concurrency)
        return 0
    with ScriptedOpenAI(responder=plausible_reply) as server:
        t0 = time.perf_counter()
        ours = asyncio.run(run_ragtrace(rows, server.base_url, args.concurrency, args.answer_relevancy_variant))
        ours_s = time.perf_counter() - t0
        ours_t = tally(server, 0)
        mark = len(server.requests)
        ragas_t = None
        if Path(args.ragas_python).exists():
            t0 = time.perf_counter()
            ragas_out = run_ragas(rows, server.base_url, args.ragas_python, args.concurrency)
            ragas_s = time.perf_counter() - t0
            ragas_t = tally(server, mark)
        else:
            print(f"(Ragas side skipped: no interpreter at {args.ragas_python}; see the module docstring)")

    su = ours["self_reported"]
    print(
        f"judge cost per record, default set {', '.join(DEFAULT_METRICS)}, {n} RAGTruth-QA rows, "
        f"same scripted server (tokens = ceil(chars/4))"
    )
    header = f"{'':28}{'ragtrace':>12}{'Ragas 0.4.3':>14}{'ratio':>9}"
    print(header)
    print("-" * len(header))
    keys = [
        ("chat_calls", "judge calls / record"),
        ("prompt_tokens", "prompt tokens / record"),
        ("completion_tokens", "completion tokens / record"),
        ("embedding_calls", "embedding calls / record"),
    ]
    for key, label in keys:
        a = ours_t[key] / n
        if ragas_t:
            b = ragas_t[key] / n
            ratio = f"{a / b:.2f}" if b else "-"
            print(f"{label:28}{a:>12.1f}{b:>14.1f}{ratio:>9}")
        else:
            print(f"{label:28}{a:>12.1f}{'-':>14}{'-':>9}")
    total_a = (ours_t["prompt_tokens"] + ours_t["completion_tokens"]) / n
    ragas = "Ragas 0.4.3" if ragas_t else "Ragas (not measured: no venv)"
    calls_b = ragas_t["chat_calls"] / n if ragas_t else None
    emit(args.json_out, "judge_cost", "judge calls per record", ours_t["chat_calls"] / n, "calls", ragas, calls_b)
    if ragas_t:
        total_b = (ragas_t["prompt_tokens"] + ragas_t["completion_tokens"]) / n
        emit(args.json_out, "judge_cost", "judge tokens per record", total_a, "tokens", ragas, total_b)
        print(f"{'total tokens / record':28}{total_a:>12.1f}{total_b:>14.1f}{total_a / total_b:>9.2f}")
        print(
            f"wall time: ragtrace {ours_s:.1f} s, Ragas {ragas_s:.1f} s (incl. its import); "
            f"Ragas mean scores {json.dumps({k: round(v, 3) for k, v in ragas_out['scores'].items()})}"
        )
    else:
        print(f"{'total tokens / record':28}{total_a:>12.1f}")
    print(
        "ragtrace judge requests / record by metric (a shared decision counts on the metric that asked first): "
        + ", ".join(f"{m} {u.calls / n:.1f}" for m, u in ours["per_metric"].items())
    )
    print(
        f"ragtrace self-reported usage: {su.calls} calls, {su.prompt_tokens}+{su.completion_tokens} tokens "
        f"incl. embeddings (server saw {ours_t['chat_calls']} chat + {ours_t['embedding_calls']} embedding calls); metrics not scored: {ours['not_scored']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

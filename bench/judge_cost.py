"""Judge cost per record: ragtrace's LLM judge against Ragas 0.4, same data, same scripted server.

    python3 bench/judge_cost.py [--rows 50] [--ragas-python /tmp/ragas-venv/bin/python]

Both sides score the default set (faithfulness, answer_relevancy, context_precision) on the
first ``--rows`` rows of ``../shared/data/ragtruth-qa-dev.jsonl`` (no reference there, so
context precision is judged against the answer: Ragas's ``LLMContextPrecisionWithoutReference``).
Both talk over HTTP to the same scripted OpenAI-compatible server, which answers every prompt
type of both tools with plausible JSON built by the same rules (claims = the answer's
sentences, verdicts by word overlap with the contexts, one-line reasons), and counts calls and
tokens for both the same way (tokens = ceil(characters / 4) of prompts and of replies).

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
    if task == "chunk_relevance":
        target = (_tag_blocks(prompt, "target") or [""])[0]
        return {
            "verdicts": [
                {"id": i, "useful": bool(words(c) & words(target)), "reason": REASON} for i, c in enumerate(contexts, 1)
            ]
        }
    return {}


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
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tests.support.scripted_openai import ScriptedOpenAI

    if not (SHARED / "data" / "ragtruth-qa-dev.jsonl").is_file():
        print(f"shared data not found under {SHARED}", file=sys.stderr)
        return 2
    rows = load_rows(args.rows)
    n = len(rows)
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
    if ragas_t:
        total_b = (ragas_t["prompt_tokens"] + ragas_t["completion_tokens"]) / n
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

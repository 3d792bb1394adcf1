"""The embedded judge's speed, side by side in one run.

    python3 bench/local_judge.py [--rows 300] [--rounds 3] [--generator llama-2-7b-chat]

Two comparisons on the same RAGTruth QA rows (``../shared/data``; training-fold rows, since only speed
is measured, taken at an even stride so that every generator's answers are in their share):

- the feature model alone (``local_judge.model: features``) against the default cascade (the feature
  model, then the int8 cross-encoder for the claims it is unsure of): each round scores every row with
  each judge in turn, one record at a time as the collector's worker does (claims, then verdicts), so
  both run under the same load; records/s per judge, the share of claims sent to the cross-encoder, and
  the ratio;
- the gradient-boosted trees' walk on the same rows' claim features: every tree at once, one step per
  depth level (``TreeEnsembleModel.raw``), against one tree at a time (the walk it replaced, restated
  below), per record's claims as the judge calls it; the two must agree to 1e-9.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "scripts"))


def one_tree_at_a_time(model: Any, x: np.ndarray) -> np.ndarray:
    """The previous walk: for each tree, step all rows down it until every row is on a leaf."""
    total = np.full(len(x), model.init)
    rows = np.arange(len(x))
    for tree in model.trees:
        node = np.zeros(len(x), dtype=np.int64)
        feature, threshold, left, right, value = (tree[k] for k in ("feature", "threshold", "left", "right", "value"))
        while True:
            active = feature[node] >= 0
            if not active.any():
                break
            f = np.where(active, feature[node], 0)
            go_left = x[rows, f] <= threshold[node]
            node = np.where(active, np.where(go_left, left[node], right[node]), node)
        total += model.rate * value[node]
    return total


def training_rows(limit: int, generator: str | None = None) -> list[dict]:
    """RAGTruth QA rows outside the held-out split (``train_local_judge.split_of``), spread evenly.

    The file is grouped by generator (llama-2-7b-chat's long answers first), so the rows are taken at
    an even stride across it: every generator in its share, as the held-out evaluation sees them.
    """
    from train_local_judge import RAGTRUTH, load, split_of

    rows = [
        row
        for row in load(DATA_DIR, RAGTRUTH)
        if split_of(row) == "train" and row.get("retrieved_contexts") and generator in (None, row["generator_model"])
    ]
    if not rows:
        raise SystemExit(f"no training-fold rows from generator {generator!r}")
    stride = max(1, len(rows) // limit)
    return rows[::stride][:limit]


async def score(judge: Any, rows: list[dict]) -> float:
    start = time.perf_counter()
    for row in rows:
        claims = await judge.extract_claims(row["user_input"], row["response"])
        if claims:
            await judge.verify_claims(claims, row["retrieved_contexts"], row["user_input"])
    return time.perf_counter() - start


async def judges(rows: list[dict], rounds: int) -> None:
    from ragtrace_collector.scoring.judges.local import LocalJudge

    features, cascade = LocalJudge(model="features"), LocalJudge(model="cascade")
    if cascade.cascade is None:
        raise SystemExit(f"the cascade did not load: {cascade.fallback_reason}")
    for judge in (features, cascade):
        judge.warm_up()
        await score(judge, rows[:5])
    seconds = {"features": 0.0, "cascade": 0.0}
    for _ in range(rounds):
        seconds["features"] += await score(features, rows)
        seconds["cascade"] += await score(cascade, rows)
    stats = cascade.cascade.stats.as_dict()
    n = len(rows) * rounds
    rate = {k: n / v for k, v in seconds.items()}
    print(f"{'judge':<10} {'records/s':>10} {'ms/record':>10}")
    for name in ("features", "cascade"):
        print(f"{name:<10} {rate[name]:>10.1f} {1000 / rate[name]:>10.2f}")
    print(f"cascade: {stats['share_sent']:.1%} of claims sent to the cross-encoder")
    print(f"features / cascade records/s: {rate['features'] / rate['cascade']:.2f}x")
    await features.aclose()
    await cascade.aclose()


def trees(rows: list[dict], rounds: int) -> None:
    from ragtrace_collector.scoring.judges.local import LocalJudge
    from ragtrace_collector.scoring.judges.local import text as T
    from ragtrace_collector.scoring.judges.local.features import FEATURE_NAMES

    judge = LocalJudge(model="features")
    model = judge.model
    matrices = []
    for row in rows:
        claims = [c.text for c in T.claims(row["response"])]
        scored = judge.support(claims, row["retrieved_contexts"], row["user_input"])
        if scored:
            matrices.append(np.stack([r.features for _, r in scored])[:, model.columns(FEATURE_NAMES)])
    for x in matrices[:20]:
        np.testing.assert_allclose(model.raw(x), one_tree_at_a_time(model, x), rtol=0, atol=1e-9)
    timing = {}
    for name, walk in (
        ("all trees at once", model.raw),
        ("one tree at a time", lambda x: one_tree_at_a_time(model, x)),
    ):
        start = time.perf_counter()
        for _ in range(rounds):
            for x in matrices:
                walk(x)
        timing[name] = (time.perf_counter() - start) / (rounds * len(matrices)) * 1000
    claims = sum(len(x) for x in matrices) / len(matrices)
    print(f"\ntree walk ({len(model.trees)} trees, {claims:.1f} claims per record), ms per record:")
    for name, ms in timing.items():
        print(f"  {name:<20} {ms:8.3f}")
    print(f"  speed-up: {timing['one tree at a time'] / timing['all trees at once']:.1f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--generator", help="only this generator's answers (e.g. llama-2-7b-chat, the longest)")
    args = parser.parse_args(argv)
    if not (DATA_DIR / "ragtruth-qa-dev.jsonl").is_file():
        print(f"no RAGTruth QA data in {DATA_DIR}: nothing to measure", file=sys.stderr)
        return 0
    rows = training_rows(args.rows, args.generator)
    asyncio.run(judges(rows, args.rounds))
    trees(rows, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

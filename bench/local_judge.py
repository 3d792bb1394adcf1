"""The embedded judge's speed, side by side in one run.

    python3 bench/local_judge.py [--rows 300] [--rounds 3] [--generator llama-2-7b-chat]

Two comparisons on the same RAGTruth QA rows (``../shared/data``; training-fold rows, since only speed
is measured, taken at an even stride so that every generator's answers are in their share):

- the feature model alone (``local_judge.model: features``), the cascade (the feature model, then the int8
  cross-encoder for the claims it is unsure of, the default) and the reader mode (every claim the cascade
  supports read by the int8 claim reader, then its stack decides), each record new to the judge
  (its sentence splits and context index not cached, as a collector mostly sees them; the caches are
  cleared before each pass): one record at a time (claims, then verdicts), and as the collector scores,
  ``scoring.concurrency`` records in flight, on one judge thread and on ``local_judge.workers`` (the
  default); each round runs every pass in turn, so all run under the same load; records/s per pass,
  the share of claims sent to the cross-encoder, and the ratios;
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
sys.path.insert(0, str(ROOT / "bench"))

from summary import add_json_out, emit  # noqa: E402


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


async def score(judge: Any, rows: list[dict], in_flight: int = 1) -> float:
    """Seconds to score ``rows`` cold, ``in_flight`` records at a time (claims, then verdicts)."""
    judge.clear_caches()
    gate = asyncio.Semaphore(in_flight)

    async def one(row: dict) -> None:
        async with gate:
            claims = await judge.extract_claims(row["user_input"], row["response"])
            if claims:
                await judge.verify_claims(claims, row["retrieved_contexts"], row["user_input"])

    start = time.perf_counter()
    await asyncio.gather(*(one(row) for row in rows))
    return time.perf_counter() - start


async def judges(rows: list[dict], rounds: int, json_out: Path | None = None) -> None:
    from ragtrace_collector.config import DEFAULT_LOCAL_JUDGE_WORKERS, ScoringConfig
    from ragtrace_collector.scoring.judges.local import LocalJudge

    in_flight = ScoringConfig().concurrency
    workers = DEFAULT_LOCAL_JUDGE_WORKERS["reader"]
    features = LocalJudge(model="features")  # its default: one thread
    cascade = LocalJudge(model="cascade")
    reader_one = LocalJudge(model="reader", workers=1)
    reader = LocalJudge(model="reader")
    if cascade.cascade is None or reader.reader is None:
        raise SystemExit(f"a model did not load: {cascade.fallback_reason or reader.fallback_reason}")
    passes = {
        "features, one record at a time": (features, 1),
        "cascade, one record at a time": (cascade, 1),
        "reader, one record at a time": (reader_one, 1),
        f"features, {in_flight} in flight, {features.workers} thread (default)": (features, in_flight),
        f"cascade, {in_flight} in flight, {cascade.workers} threads (default)": (cascade, in_flight),
        f"reader, {in_flight} in flight, 1 thread": (reader_one, in_flight),
        f"reader, {in_flight} in flight, {workers} threads (default)": (reader, in_flight),
    }
    for judge in (features, cascade, reader_one, reader):
        judge.warm_up()
        await score(judge, rows[:5])
    seconds = dict.fromkeys(passes, 0.0)
    for _ in range(rounds):
        for name, (judge, n) in passes.items():
            seconds[name] += await score(judge, rows, n)
    stats = cascade.cascade.stats.as_dict()
    read = reader.reader.stats.as_dict()
    claims = read["claims"] / max(1, rounds * len(rows) + 5)
    rate = {k: len(rows) * rounds / v for k, v in seconds.items()}
    width = max(map(len, passes))
    print(f"{len(rows)} records x {rounds} rounds, each record new to the judge (caches cleared per pass)")
    print(f"{'pass':<{width}} {'records/s':>10} {'ms/record':>10}")
    for name in passes:
        print(f"{name:<{width}} {rate[name]:>10.1f} {1000 / rate[name]:>10.2f}")
    names = list(passes)
    print(f"cascade: {stats['share_sent']:.1%} of claims sent to the cross-encoder")
    print(
        f"reader: {read['share_sent']:.1%} of claims read, the ones the cascade finds supported ({claims:.1f} per record)"
    )
    print(f"reader / cascade, one at a time: {rate[names[2]] / rate[names[1]]:.2f}x")
    print(f"reader / cascade in flight, default threads: {rate[names[6]] / rate[names[4]]:.2f}x")
    print(f"reader in flight, {workers} threads / 1 thread: {rate[names[6]] / rate[names[5]]:.2f}x")
    for figure, anchor in ((1, 0), (2, 1), (6, 4), (6, 5), (4, 1)):
        emit(
            json_out, "local_judge", names[figure], rate[names[figure]], "records/s", names[anchor], rate[names[anchor]]
        )
    for judge in (features, cascade, reader_one, reader):
        await judge.aclose()


def trees(rows: list[dict], rounds: int, json_out: Path | None = None) -> None:
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
    emit(
        json_out,
        "local_judge",
        "tree walk, all trees at once",
        timing["all trees at once"],
        "ms/record",
        "one tree at a time",
        timing["one tree at a time"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300, help="RAGTruth QA training-fold rows (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every pass (default 3)")
    parser.add_argument("--generator", help="only this generator's answers (e.g. llama-2-7b-chat, the longest)")
    add_json_out(parser)
    args = parser.parse_args(argv)
    if not (DATA_DIR / "ragtruth-qa-dev.jsonl").is_file():
        print(f"no RAGTruth QA data in {DATA_DIR}: nothing to measure", file=sys.stderr)
        return 0
    rows = training_rows(args.rows, args.generator)
    asyncio.run(judges(rows, args.rounds, args.json_out))
    trees(rows, args.rounds, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

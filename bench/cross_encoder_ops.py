"""The shipped cross-encoder per operator, under this onnxruntime and, side by side, under another.

    python3 bench/cross_encoder_ops.py [--pairs 300] [--against DIR]

The judge's (claim, windows) pairs of training-fold RAGTruth QA rows (``../shared/data``, built as the cascade
builds them), each run alone as the judge runs it: milliseconds per pair on 1 and 2 intra-op threads, and
onnxruntime's own profile per operator type (1 thread). ``--against DIR`` runs the same measurement in a child
process whose ``onnxruntime`` comes from DIR (``pip install --no-deps --target DIR onnxruntime==X``), one after
the other in this run, and prints the ratios and the largest difference in logits.

Why it exists: onnxruntime 1.30-1.32 run ``LayerNormalization`` / ``SkipLayerNormalization`` on a scalar path
about four times slower than 1.29 on this model's shapes (the collector excludes them); rerun this before
allowing a new release.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def judge_pairs(limit: int) -> list[tuple[str, str]]:
    """The first ``limit`` (claim, windows) pairs of training-fold rows, every claim taken (not only the band)."""
    from local_judge import training_rows  # bench/local_judge.py: the same rows as the judge's bench

    from ragtrace_collector.scoring.judges.local import text as T
    from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams, claim_pair
    from ragtrace_collector.scoring.judges.local.features import ContextIndex
    from ragtrace_collector.scoring.judges.local.judge import LocalJudge

    judge = LocalJudge(model="features")
    windows = CascadeParams.load().windows
    pairs: list[tuple[str, str]] = []
    for row in training_rows(limit):
        claims = [c.text for c in T.claims(row["response"])]
        if not claims:
            continue
        index = ContextIndex.build(row["retrieved_contexts"])
        supports = judge.support(claims, row["retrieved_contexts"], row["user_input"])
        for claim, (_, support) in zip(claims, supports):
            pairs.append(claim_pair(claim, row["user_input"], index, support.best_sentence, windows))
            if len(pairs) == limit:
                return pairs
    return pairs


def measure(limit: int) -> dict[str, Any]:
    """ms per pair on 1 and 2 threads, the per-operator profile, and the logits (to compare versions)."""
    import onnxruntime as ort

    from ragtrace_collector.scoring.judges.local.cross_encoder import CascadeParams, CrossEncoder

    params = CascadeParams.load()
    pairs = judge_pairs(limit)
    out: dict[str, Any] = {"onnxruntime": ort.__version__, "pairs": len(pairs)}
    for threads in (1, 2):
        encoder = CrossEncoder(params, threads=threads)
        encoder.logits(pairs[:10])
        start = time.perf_counter()
        logits = encoder.logits(pairs)
        out[f"ms_per_pair_{threads}_thread"] = 1000 * (time.perf_counter() - start) / len(pairs)
    out["logits"] = logits.tolist()
    # onnxruntime's profile of the same runs, one thread, per operator type
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tmp) / "profile")
        session = ort.InferenceSession(str(params.model_path()), options, providers=["CPUExecutionProvider"])
        for feeds in encoder.encode(pairs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    per_op: collections.Counter[str] = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_op[event["args"]["op_name"]] += event["dur"]
    out["ms_per_pair_by_operator"] = {op: us / 1000 / len(pairs) for op, us in per_op.most_common()}
    return out


def report(result: dict[str, Any]) -> None:
    print(
        f"onnxruntime {result['onnxruntime']}: {result['pairs']} pairs, "
        f"{result['ms_per_pair_1_thread']:.2f} ms a pair on 1 thread, {result['ms_per_pair_2_thread']:.2f} on 2"
    )
    total = sum(result["ms_per_pair_by_operator"].values())
    for op, ms in list(result["ms_per_pair_by_operator"].items())[:6]:
        print(f"  {op:<28} {ms:6.3f} ms a pair  {100 * ms / total:5.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="judge pairs timed (default 300)")
    parser.add_argument("--against", type=Path, help="a directory holding another onnxruntime (pip --target)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # the child's output
    parser.add_argument(
        "--json-out", type=Path, help="append the figures as JSON lines to this file (bench/summary.py's table)"
    )
    args = parser.parse_args()
    if not (ROOT.parent / "shared" / "data").is_dir():
        raise SystemExit("this bench reads ../shared/data")
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "scripts"))
    from summary import emit

    result = measure(args.pairs)
    if args.json:
        print(json.dumps(result))
        return
    report(result)
    emit(
        args.json_out,
        "cross_encoder_ops",
        f"ms a pair on 2 threads, onnxruntime {result['onnxruntime']}",
        result["ms_per_pair_2_thread"],
        "ms",
        "1 thread",
        result["ms_per_pair_1_thread"],
    )
    if args.against is None:
        return
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(args.against), os.environ.get("PYTHONPATH")])))
    child = subprocess.run(
        [sys.executable, __file__, "--pairs", str(args.pairs), "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    other = json.loads(child.stdout.strip().splitlines()[-1])
    report(other)
    for threads in (1, 2):
        key = f"ms_per_pair_{threads}_thread"
        print(
            f"{threads} thread(s): {other['onnxruntime']} / {result['onnxruntime']} time per pair {other[key] / result[key]:.2f}x"
        )
    ours, theirs = (result["ms_per_pair_by_operator"], other["ms_per_pair_by_operator"])
    for op in ("SkipLayerNormalization", "LayerNormalization"):
        if op in ours and op in theirs:
            print(f"{op}: {theirs[op] / ours[op]:.2f}x")
    emit(
        args.json_out,
        "cross_encoder_ops",
        f"ms a pair on 1 thread, onnxruntime {other['onnxruntime']}",
        other["ms_per_pair_1_thread"],
        "ms",
        f"onnxruntime {result['onnxruntime']}",
        result["ms_per_pair_1_thread"],
    )
    gap = np.abs(np.asarray(result["logits"]) - np.asarray(other["logits"]))
    print(f"logits: largest difference {gap.max():.2e}, mean {gap.mean():.2e}")


if __name__ == "__main__":
    main()

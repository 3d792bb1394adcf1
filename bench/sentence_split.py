"""Sentence splitting, side by side in one run: pysbd's own segmenter against ``scoring.text.Segmenter``.

    python3 bench/sentence_split.py [--rounds 3]

Every distinct non-empty line of the labelled sets' passages, answers and questions (``../shared/data``;
the judge and the metrics split per line), split by both segmenters in turn in each round, so both run
under the same load. Prints lines/s, ms per 1,000 characters, and the ratio; the two must return the same
spans for every line (checked, not timed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from summary import add_json_out, emit  # noqa: E402

DATA_DIR = ROOT.parent / "shared" / "data"


def lines() -> list[str]:
    texts: list[str] = []
    for name in ("ragtruth-qa-dev.jsonl", "halueval-qa-dev.jsonl"):
        path = DATA_DIR / name
        if not path.exists():
            raise SystemExit(f"{path} is absent: this bench reads ../shared/data")
        with path.open(encoding="utf-8") as rows:
            for row in map(json.loads, rows):
                texts += [*row["retrieved_contexts"], row["response"], row["user_input"]]
    return sorted({line for text in texts for line in text.split("\n") if line.strip()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every line, segmenters alternating")
    add_json_out(parser)
    args = parser.parse_args()

    import pysbd

    from ragtrace_collector.scoring.text import Segmenter

    segmenters = {
        "pysbd.Segmenter": pysbd.Segmenter(language="en", clean=False, char_span=True),
        "scoring.text.Segmenter": Segmenter(language="en", clean=False, char_span=True),
    }
    todo = lines()
    chars = sum(map(len, todo))
    seconds = dict.fromkeys(segmenters, 0.0)
    results: dict[str, list[list[tuple[str, int, int]]]] = {}
    for _ in range(args.rounds):
        for name, segmenter in segmenters.items():
            start = time.perf_counter()
            out = [segmenter.segment(line) for line in todo]
            seconds[name] += time.perf_counter() - start
            results[name] = [[(s.sent, s.start, s.end) for s in spans] for spans in out]
    reference, fast = results.values()
    differing = sum(a != b for a, b in zip(reference, fast, strict=True))
    print(f"{len(todo)} lines, {chars / len(todo):.0f} characters each on average, {args.rounds} rounds")
    for name, total in seconds.items():
        per_round = total / args.rounds
        print(f"{name:<24} {len(todo) / per_round:>9.0f} lines/s {1000 * per_round / chars * 1000:>7.2f} ms/1k chars")
    names = list(segmenters)
    print(f"speed-up: {seconds[names[0]] / seconds[names[1]]:.2f}x; lines whose spans differ: {differing}")
    rate = {name: len(todo) * args.rounds / total for name, total in seconds.items()}
    emit(args.json_out, "sentence_split", f"{names[1]} lines/s", rate[names[1]], "lines/s", names[0], rate[names[0]])
    if differing:
        sys.exit(1)


if __name__ == "__main__":
    main()

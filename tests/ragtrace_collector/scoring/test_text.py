"""Sentence splitting is called from worker threads (off the event loop): it must stay exact there."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ragtrace_collector.scoring.text import split_sentences

TEXTS = [
    f"Based on the provided passages, item {i} can be used as follows:\n\n1. First: use it with care, "
    f"Dr. Smith said in 19{i:02d}. 2. Second: keep it dry. The end is near! Is it? Yes, it is {i}."
    for i in range(40)
]


def test_concurrent_splits_match_sequential_ones() -> None:
    expected = [split_sentences(t) for t in TEXTS]
    assert all(len(s) >= 5 for s in expected)
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(5):
            assert list(pool.map(split_sentences, TEXTS)) == expected

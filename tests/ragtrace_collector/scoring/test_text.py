"""Sentence splitting: exact from worker threads (off the event loop), and the same as pysbd's own, span for span."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pysbd
import pytest

from ragtrace_collector.scoring.text import Segmenter, split_sentences
from tests.support.paths import SHARED

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


# pysbd's own segmenter is the reference the faster one must equal, span for span.
EDGE_CASES = [
    "Yes. Yes. Yes. No.",  # the same sentence again: each takes the occurrence after the previous one
    "It rained.\u00a0\u2003It stopped.\t\u3000",  # Unicode whitespace follows a sentence (``\s`` matches it)
    "   Leading blanks. Then more.  ",
    "Dr. Smith paid $3.50 at 5 p.m. on Jan. 2. He left.",
    "1. First item. 2. Second item. 3) Third.",
    '"Quoted." (Bracketed.) [Also.] Done!?',
    "a. a. a. a.",
    "No full stop at the end",
]


def _spans(segmenter: pysbd.Segmenter, text: str) -> list[tuple[str, int, int]]:
    return [(s.sent, s.start, s.end) for s in segmenter.segment(text)]


def _reference_pair(char_span: bool) -> tuple[pysbd.Segmenter, Segmenter]:
    return (
        pysbd.Segmenter(language="en", clean=False, char_span=char_span),
        Segmenter(language="en", clean=False, char_span=char_span),
    )


@pytest.mark.parametrize("text", EDGE_CASES)
def test_segmenter_spans_equal_pysbds(text: str) -> None:
    reference, fast = _reference_pair(char_span=True)
    assert _spans(fast, text) == _spans(reference, text)
    reference, fast = _reference_pair(char_span=False)
    assert fast.segment(text) == reference.segment(text)


def _shared_texts(every: int) -> list[str]:
    texts: list[str] = []
    for name in ("ragtruth-qa-dev.jsonl", "halueval-qa-dev.jsonl"):
        path = SHARED / "data" / name
        if not path.exists():
            pytest.skip(f"{path} is absent (../shared is not beside the repository)")
        with path.open(encoding="utf-8") as rows:
            for row in map(json.loads, rows):
                texts += [*row["retrieved_contexts"], row["response"], row["user_input"]]
    lines = sorted({line for text in texts for line in text.split("\n") if line.strip()})
    return lines[::every]


def test_segmenter_spans_equal_pysbds_on_the_shared_data() -> None:
    """A sample of the labelled sets' lines (every one of the 23,139 was checked once; this keeps it under 3 s)."""
    reference, fast = _reference_pair(char_span=True)
    lines = _shared_texts(every=10)
    assert len(lines) > 2000
    mismatched = [line for line in lines if _spans(fast, line) != _spans(reference, line)]
    assert mismatched == []

"""Sentence splitting shared by metrics and judges (pysbd, English, offsets not needed)."""

from __future__ import annotations

import threading

import pysbd

_segmenter = pysbd.Segmenter(language="en", clean=False)
_lock = threading.Lock()  # a pysbd Segmenter is not thread-safe: concurrent calls lose sentences


def split_sentences(text: str) -> list[str]:
    """The non-empty sentences of ``text``, stripped (safe to call from any thread)."""
    with _lock:
        pieces = _segmenter.segment(text or "")
    return [s.strip() for s in pieces if s.strip()]

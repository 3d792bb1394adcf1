"""Sentence splitting shared by metrics and judges (pysbd, English, offsets not needed)."""

from __future__ import annotations

import pysbd

_segmenter = pysbd.Segmenter(language="en", clean=False)


def split_sentences(text: str) -> list[str]:
    """The non-empty sentences of ``text``, stripped."""
    return [s.strip() for s in _segmenter.segment(text or "") if s.strip()]

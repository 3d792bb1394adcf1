"""Sample questions whose answers are in the corpus, each with a reference answer.

``QUESTIONS``: list of dicts ``{"question", "reference", "reference_doc_ids", "element"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

_PATH = Path(__file__).resolve().parent / "data" / "questions.jsonl"


def load_questions() -> list[dict]:
    with open(_PATH, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


QUESTIONS: list[dict] = load_questions()

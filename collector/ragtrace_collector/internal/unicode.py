"""Whether parsed JSON is Unicode text: JSON's ``"\\ud800"`` escapes decode to lone surrogates, which Python keeps in a
``str`` but nothing downstream takes (SQLite, the judge's tokenizers, an LLM API all refuse them)."""

from __future__ import annotations

import json
from typing import Any


def lone_surrogate(data: Any) -> str | None:
    """The first lone surrogate in ``data`` (strings, lists and dicts of them), escaped (``\\ud800``); None for none."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return str(exc.object[exc.start : exc.end].encode("unicode_escape").decode("ascii"))
    return None

"""JSON from outside (request bodies, stream entries, span attributes, judge replies, input files): the two ways it
is bad besides its syntax, said once.

* Nested past the parser's depth (``[[[[...]]]]``, a few kilobytes), ``json.loads`` raises ``RecursionError``, not
  the ``ValueError`` every caller expects: :func:`loads` raises ``ValueError`` for both.
* JSON's ``"\\ud800"`` escapes decode to lone surrogates, which Python keeps in a ``str`` but nothing downstream
  takes (SQLite, the judge's tokenizers, an LLM API all refuse them): :func:`lone_surrogate` finds one.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes | bytearray) -> Any:
    """``json.loads``, with JSON nested past the parser's depth a ``ValueError`` like any other bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested past the parser's depth") from None


def lone_surrogate(data: Any) -> str | None:
    """The first lone surrogate in ``data`` (strings, lists and dicts of them), escaped (``\\ud800``); None for none."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return str(exc.object[exc.start : exc.end].encode("unicode_escape").decode("ascii"))
    return None

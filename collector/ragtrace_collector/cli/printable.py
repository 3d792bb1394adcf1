"""Text from traced traffic made safe for a terminal: control and format characters shown, never obeyed.

End users write the questions and apps name the pipelines, so anything the CLI prints may carry OSC/CSI
escapes (retitle or clear the operator's terminal), a newline that forges a row, or a bidi override that
makes text read differently than it is. Every such character is printed as a visible escape instead.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

_UNSAFE_CATEGORIES = ("Cc", "Cf")  # C0, DEL and C1 controls; bidi overrides, zero-width characters...
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(char: str) -> str:
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _json_visible(char: str) -> str:
    return json.dumps(char)[1:-1] if ord(char) > 0xFFFF else f"\\u{ord(char):04x}"


def _replace(text: str, escape: Callable[[str], str]) -> str:
    if text.isprintable():  # the common case, in C
        return text
    return "".join(escape(c) if unicodedata.category(c) in _UNSAFE_CATEGORIES else c for c in text)


def printable(text: object) -> str:
    """``text`` with every control or format character replaced by its visible escape (``\\x1b``, ``\\n``)."""
    return _replace(str(text), _visible)


def json_line(obj: Any) -> str:
    """One JSON line, readable (non-ASCII kept) yet holding no raw control or format character."""
    return _replace(json.dumps(obj, ensure_ascii=False), _json_visible)

"""Small, forgiving readers for attribute values written by many instrumentations."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from ragtrace_collector.internal.json_input import loads
from ragtrace_collector.model.spans import MAX_SPAN_SECONDS

# The most tokens one model call may report: past it the count is broken, not big (the largest context windows
# hold about 2·10⁶). A billion added to ragtrace_tokens_total would stay in its rate for the counter's lifetime.
MAX_TOKENS = 10**9

# Where a JSON input or output holds the text. Beside the usual names: OpenLLMetry's LangChain callback handler
# writes a chain's ``traceloop.entity.input`` as ``{"inputs": ..., "tags", "metadata", "kwargs"}`` (a retriever's
# as ``{"query": ...}``) and its output as ``{"outputs": ...}``; its LlamaIndex instrumentation writes a query
# engine's and a retriever's bound arguments, ``{"str_or_query_bundle": ...}`` / ``{"query_bundle": {"query_str"}}``.
QUERY_KEYS = (
    "query",
    "question",
    "user_input",
    "input",
    "query_str",
    "q",
    "prompt",
    "message",
    "text",
    "inputs",
    "str_or_query_bundle",
    "query_bundle",
)
ANSWER_KEYS = ("answer", "response", "output", "result", "text", "content", "output_text", "generation", "outputs")


def first(attrs: Mapping[str, Any], keys: Iterable[str]) -> Any:
    """The first present, non-empty value among ``keys``."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and value != "":
            return value
    return None


def as_float(value: Any) -> float | None:
    """A finite number, or None: NaN and infinities (``"inf"``, ``"1e400"``) are no measurement."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def as_int(value: Any) -> int | None:
    f = as_float(value)
    return int(f) if f is not None else None


def as_count(value: Any, limit: int = MAX_TOKENS) -> int | None:
    """A count an app reports (tokens): a whole number from 0 to ``limit``, else None, as if unreported (-1 is some
    SDKs' "unknown"; a negative amount would also make the Prometheus counter raise and lose the record)."""
    n = as_int(value)
    return n if n is not None and 0 <= n <= limit else None


def as_seconds(value: Any) -> float | None:
    """A time an app reports (TTFT, time per token): from 0 to ``MAX_SPAN_SECONDS``, else None, as if unreported;
    one such value would skew a latency histogram's sum for good."""
    f = as_float(value)
    return f if f is not None and 0.0 <= f <= MAX_SPAN_SECONDS else None


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
    if isinstance(value, (int, float)):
        return bool(value)
    return None


def maybe_json(value: Any) -> Any:
    """Parse JSON-looking strings (objects, arrays, quoted strings); anything else is returned as is."""
    if isinstance(value, str):
        text = value.strip()
        if text[:1] in ("{", "[", '"'):
            try:
                return loads(text)
            except ValueError:  # nested past the parser's depth too: a text all the same
                return value
    return value


def text_of(value: Any, keys: tuple[str, ...]) -> str | None:
    """Plain text out of a string, a JSON string, or a dict/list holding it under one of ``keys``."""
    value = maybe_json(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)):
        return str(value)
    if isinstance(value, dict):
        return _dict_text(value, keys)
    if isinstance(value, list):
        for item in value:
            inner = text_of(item, keys)
            if inner:
                return inner
    return None


def _dict_text(value: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """A JSON object's text: under one of ``keys`` first (OpenLLMetry's LangChain ``{"query": ..., "kwargs":
    {"name": ...}}`` holds the text beside the callback's keyword arguments), then an OpenLLMetry ``@task``'s call
    arguments, ``{"args": [...], "kwargs": {...}}``: keyword arguments, then positional ones."""
    for key in keys:
        if key in value:
            inner = text_of(value[key], keys)
            if inner:
                return inner
    nested: list[Any] = [value["kwargs"]] if isinstance(value.get("kwargs"), dict) else []
    if isinstance(value.get("args"), list):
        nested.extend(value["args"])
    for item in nested:
        inner = text_of(item, keys)
        if inner:
            return inner
    return None


def list_index(text: str) -> int | None:
    """The position a flattened list's key states (``retrieval.documents.3...``): ASCII digits, at most nine; None
    for anything else (``str.isdigit`` also takes "²" and a 5,000-digit run, which ``int`` refuses)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def indexed(attrs: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """Flattened lists: ``{prefix}.{i}.{field...}`` → ``{i: {field: value}}`` (fields keep their dots)."""
    out: dict[int, dict[str, Any]] = {}
    start = prefix + "."
    n = len(start)
    for key, value in attrs.items():
        if not key.startswith(start):
            continue
        idx, _, fld = key[n:].partition(".")
        i = list_index(idx)
        if i is None or not fld:
            continue
        out.setdefault(i, {})[fld] = value
    return dict(sorted(out.items()))


def json_dict(value: Any) -> dict[str, Any]:
    parsed = maybe_json(value)
    return parsed if isinstance(parsed, dict) else {}

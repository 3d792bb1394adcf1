"""The records list's filters, from a request's query string: one parser for the pages and the JSON API.

Parameters (all optional): ``window`` (``15m``, ``1h``, ``24h``, ``7d``...: stored within that long before
now), ``since``/``until`` (unix seconds or ISO 8601), ``service``, ``pipeline``, ``metric``,
``min_score``/``max_score``, ``judge``, ``outcome`` (``scored``, ``skipped``, ``error``), ``session``,
``user``, ``trace_id``, ``sort`` (``newest`` or ``worst``), ``limit``, ``offset``. An empty value is no
filter, so a submitted form with blank fields filters nothing.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, cast

from ragtrace_collector.scoring.results_store import Outcome, RecordQuery, Sort

WINDOWS = ("15m", "1h", "6h", "24h", "7d", "30d")  # what the list's time window menu offers
OUTCOMES: tuple[Outcome, ...] = ("scored", "skipped", "error")
SORTS: tuple[Sort, ...] = ("newest", "worst")
MAX_LIMIT = 1000
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
# the parameters a list URL carries (paging links keep every one of them)
PARAMS = (
    "window",
    "since",
    "until",
    "service",
    "pipeline",
    "metric",
    "min_score",
    "max_score",
    "judge",
    "outcome",
    "session",
    "user",
    "trace_id",
    "sort",
    "limit",
)


class BadQuery(ValueError):
    """A parameter that does not parse; the message names it (HTTP 400)."""


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``1h``, ``7d``, ``2w`` → seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (e.g. 15m, 1h, 7d)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 time (UTC when it names no zone) → unix seconds."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"not a time: {text!r} (unix seconds or ISO 8601)") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        return parsed.timestamp()
    if not math.isfinite(value):
        raise ValueError(f"not a time: {text!r}")
    return value


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadQuery(f"{name}: not a number: {text!r}") from None
    if not math.isfinite(value):
        raise BadQuery(f"{name}: not a finite number: {text!r}")
    return value


def _int(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"{name}: not a whole number: {text!r}") from None
    if not low <= value <= high:
        raise BadQuery(f"{name}: must be within {low}..{high}, got {value}")
    return value


def parse_query(params: Mapping[str, str], page_size: int, now: float | None = None) -> RecordQuery:
    """A :class:`RecordQuery` from query parameters; raises :class:`BadQuery` naming a bad one."""
    values = {k: v.strip() for k, v in params.items() if isinstance(v, str) and v.strip()}
    now = time.time() if now is None else now
    q = RecordQuery(limit=page_size)
    try:
        if "window" in values:
            q.since = now - parse_duration(values["window"])
        if "since" in values:
            q.since = parse_time(values["since"])
        if "until" in values:
            q.until = parse_time(values["until"])
    except ValueError as exc:
        raise BadQuery(str(exc)) from None
    q.service = values.get("service")
    q.pipeline = values.get("pipeline")
    q.metric = values.get("metric")
    q.judge = values.get("judge")
    q.session_id = values.get("session")
    q.user_id = values.get("user")
    q.trace_id = values.get("trace_id")
    if "min_score" in values:
        q.min_score = _number("min_score", values["min_score"])
    if "max_score" in values:
        q.max_score = _number("max_score", values["max_score"])
    if "outcome" in values:
        if values["outcome"] not in OUTCOMES:
            raise BadQuery(f"outcome: one of {', '.join(OUTCOMES)}, got {values['outcome']!r}")
        q.outcome = cast(Outcome, values["outcome"])
    if "sort" in values:
        if values["sort"] not in SORTS:
            raise BadQuery(f"sort: one of {', '.join(SORTS)}, got {values['sort']!r}")
        q.sort = cast(Sort, values["sort"])
    if "limit" in values:
        q.limit = _int("limit", values["limit"], 1, MAX_LIMIT)
    if "offset" in values:
        q.offset = _int("offset", values["offset"], 0, 10**9)
    return q


def kept_params(params: Mapping[str, Any]) -> dict[str, str]:
    """The non-empty list parameters of a request (what paging and sort links carry on)."""
    return {k: str(params[k]) for k in PARAMS if k in params and str(params[k]).strip()}

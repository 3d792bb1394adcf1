"""Configured secrets kept out of every text the collector logs, stores or serves.

Error texts come from outside: a judge provider, or a proxy in front of it, may echo the request's API key in its
error message, and that text used to reach the log, the results store and the explorer's API verbatim. A
:class:`Scrubber` knows the secret values this process was given — the judge's API key, the auth tokens, Phoenix's
key, the forwarding headers, passwords in the Redis URLs, and the providers' own ``*_API_KEY`` style variables —
and replaces each with ``***`` wherever it appears. :func:`install_log_scrubber` applies it to every log record
of every logger (LiteLLM's included) as the record is made.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from ragtrace_collector.config import CollectorConfig

MASK = "***"
#: Shorter values are not treated as secrets: masking them would garble ordinary text.
MIN_SECRET_CHARS = 6
#: Environment variables whose values are credentials by name (OPENAI_API_KEY, AZURE_API_KEY, HF_TOKEN...).
_SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|_SECRET|SECRET_KEY|_PASSWORD)$")


class Scrubber:
    """Replaces every known secret in a text with :data:`MASK` (longest first, so no secret leaves a tail)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        kept = {s.strip() for s in secrets if s and len(s.strip()) >= MIN_SECRET_CHARS}
        ordered = sorted(kept, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def scrub(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None and text else text

    def scrub_value(self, value: Any) -> Any:
        """``value`` with its strings scrubbed, through lists, tuples and dicts (a result's details)."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.scrub_value(v) for v in value)
        return value


def _url_password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def config_secrets(config: CollectorConfig, environ: Mapping[str, str]) -> list[str | None]:
    """Every secret value ``config`` and ``environ`` hold (see the module docstring)."""
    auth = config.auth
    found: list[str | None] = [config.judge.api_key, auth.bearer_token, config.export.phoenix.api_key]
    found += [*auth.ingest_tokens, *auth.read_tokens, *auth.review_tokens]
    found += list(config.forward.headers.values())
    found += [_url_password(config.queue.url), _url_password(config.assembly.shared_state)]
    found += [value for name, value in environ.items() if _SECRET_ENV.search(name.upper())]
    return found


def install_log_scrubber(scrubber: Scrubber) -> None:
    """Scrub every log record this process makes from now on (message, arguments and traceback text)."""
    if not scrubber:
        return
    make = logging.getLogRecordFactory()
    if getattr(make, "ragtrace_scrubber", None) is not None:  # installed before: replace, do not stack
        make = make.ragtrace_made_by  # type: ignore[attr-defined]

    def scrubbed_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it for logging to report
            return record
        record.msg, record.args = scrubber.scrub(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrubber.scrub(logging.Formatter().formatException(record.exc_info))
        return record

    scrubbed_record.ragtrace_scrubber = scrubber  # type: ignore[attr-defined]
    scrubbed_record.ragtrace_made_by = make  # type: ignore[attr-defined]
    logging.setLogRecordFactory(scrubbed_record)

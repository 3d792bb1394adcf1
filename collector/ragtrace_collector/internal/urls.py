"""URLs as they may be shown: credentials masked.

Endpoints and queue URLs carry passwords (``redis://:secret@redis:6379/0``, ``http://user:secret@tempo:4318``,
``redis://redis?password=secret``), and logs travel further than configs (aggregators, tickets, screenshots).
Every URL the collector logs or puts in an error message goes through :func:`mask_credentials`; free text that
may quote one (an exception's message) through :func:`mask_credentials_in`.
"""

from __future__ import annotations

import re

MASK = "***"

# Query keys whose values are secrets (redis-py reads ?password=; tokens and keys ride along in some setups).
_SECRET_KEY = re.compile(r"pass|pwd|secret|token|key|auth|credential|signature", re.IGNORECASE)
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<key>[^?&;=#]+)=[^&;#]*")
# Something URL-shaped inside free text: a scheme, then anything up to whitespace or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>]*")


def mask_credentials(url: str) -> str:
    """``url`` with its password (``user:***@``), a bare userinfo (``***@``, often a token) and secret query values
    (``?password=***``) masked; the rest kept, so the log still says which server was meant.

    Works on what clients accept without a scheme too (a gRPC ``user:secret@host:4317``), and never raises. A
    password written with a raw ``/``, ``?`` or ``#`` (which clients misread) is masked too: everything before the
    last ``@`` is, so a URL with an ``@`` in its path loses its host in the log rather than a password leaking.
    """
    url = _mask_query(url)  # first: a query value may hold an "@"
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at_sign, hostpart = rest.rpartition("@")
    if not at_sign:
        userinfo, hostpart = "", rest
    end = min((i for i in (hostpart.find(c) for c in "/?#") if i != -1), default=len(hostpart))
    host, tail = hostpart[:end], hostpart[end:]
    if at_sign:
        user, colon, _password = userinfo.partition(":")
        readable = colon and not any(c in user for c in "/?#")
        host = f"{user}:{MASK}@{host}" if readable else f"{MASK}@{host}"
    return f"{scheme}{sep}{host}{tail}"


def mask_credentials_in(text: str) -> str:
    """``text`` with every URL in it passed through :func:`mask_credentials` (for exception messages)."""
    return _URL_IN_TEXT.sub(lambda m: mask_credentials(m.group(0)), text)


def _mask_query(url: str) -> str:
    """``url`` with the values of secret-looking query keys masked."""

    def mask(m: re.Match[str]) -> str:
        return f"{m['lead']}{m['key']}={MASK}" if _SECRET_KEY.search(m["key"]) else m.group(0)

    return _QUERY_PAIR.sub(mask, url)


#: URL schemes that name a Redis server (``queue.url``, ``assembly.shared_state``): the collector scaled out.
REDIS_SCHEMES = ("redis", "rediss", "unix")


def is_redis_url(url: str | None) -> bool:
    """Whether ``url`` names a Redis server (decided without importing the redis client)."""
    return bool(url) and str(url).partition("://")[0].lower() in REDIS_SCHEMES

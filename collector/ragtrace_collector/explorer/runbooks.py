"""The alert runbooks at ``/runbooks/<alert>`` on the explorer's listener, so that every alert's ``runbook_url``
is an absolute link that opens from Alertmanager, Slack or an email (``grafana/README.md``, "Alerts").

The runbooks are ``docs/runbooks/*.md``, shipped as package data (``runbooks/`` here links there), served as the
markdown they are written in, as ``text/plain`` (every browser shows it; markdown reads as text). No token is
asked: they hold no traffic data, and an on-call opening a page's link must not have to sign in first.
``/runbooks/`` is their index (the directory's README).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from importlib import resources

from aiohttp import web

log = logging.getLogger(__name__)

RUNBOOKS_PATH = "/runbooks/"
INDEX = "README"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")  # an alert name: nothing that could leave the directory
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def load_runbooks() -> dict[str, str]:
    """Alert name (``README``: the index) -> its runbook's markdown; empty where the package data is missing."""
    folder = resources.files("ragtrace_collector.explorer").joinpath("runbooks")
    found: dict[str, str] = {}
    try:
        entries = list(folder.iterdir())
    except OSError:  # missing, or a dangling link (a build that left docs/runbooks out)
        entries = []
    for entry in entries:
        name = entry.name.removesuffix(".md")
        if entry.name.endswith(".md") and _NAME.fullmatch(name) and entry.is_file():
            found[name] = entry.read_text(encoding="utf-8")
    if not found:
        log.warning("no runbooks in the package (ragtrace_collector/explorer/runbooks): %s answers 404", RUNBOOKS_PATH)
    return found


def add_routes(app: web.Application, runbooks: Mapping[str, str] | None = None) -> None:
    """``/runbooks/`` (the index) and ``/runbooks/<alert>`` (``.md`` optional) on ``app``."""
    pages = dict(load_runbooks() if runbooks is None else runbooks)

    async def to_index(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(RUNBOOKS_PATH)

    async def page(request: web.Request) -> web.StreamResponse:
        name = request.match_info.get("name", INDEX).removesuffix(".md")  # /runbooks/: the index
        text = pages.get(name) if _NAME.fullmatch(name) else None
        if text is None:
            known = ", ".join(sorted(n for n in pages if n != INDEX)) or "none installed"
            return web.Response(status=404, text=f"no such runbook; runbooks: {known}\n", headers=_HEADERS)
        return web.Response(text=text, content_type="text/plain", charset="utf-8", headers=_HEADERS)

    app.router.add_get(RUNBOOKS_PATH.rstrip("/"), to_index)
    app.router.add_get(RUNBOOKS_PATH, page)
    app.router.add_get(RUNBOOKS_PATH + "{name}", page)

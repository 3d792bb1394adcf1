"""The records explorer's HTTP side: HTML pages and the JSON API, added to an aiohttp application.

Routes (all GET, read-only, except the login form's POST):

* ``/explorer/`` — the records list (filters in the query string, see :mod:`.query`);
* ``/explorer/records/{trace_id}`` — one record: question, answer with its claims by verdict, contexts,
  every metric's outcome, latencies, trace links;
* ``/explorer/sessions/{session_id}`` — a conversation's turns with their scores;
* ``/api/v1/records``, ``/api/v1/records/{trace_id}``, ``/api/v1/sessions/{session_id}`` — the same as JSON
  (documented in ``docs/explorer.md``);
* ``/explorer/login`` — with ``auth.bearer_token`` set, a browser gives the token once and gets a cookie
  (HttpOnly, SameSite=Strict) holding an HMAC of it, never the token; API clients send
  ``Authorization: Bearer <token>``. Wrong tokens (the form's and the header's together) are limited per
  client address (:mod:`.login_limit`, ``explorer.max_failed_logins`` per ``failed_login_window_seconds``):
  past the limit 429 with ``Retry-After``; ``ragtrace_explorer_auth_attempts_total{via,status}`` counts
  every token checked (via ``login`` or ``bearer``; status ``ok``, ``unauthenticated``, ``rate_limited``).

Pages are Jinja2 templates with autoescaping on: every text from traced traffic (questions, answers,
contexts, judge reasons) is escaped. No script runs on the pages (the CSP says so); every asset ships in
the package. Store reads and rendering run off the event loop: the receivers share it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined
from prometheus_client import CollectorRegistry, Counter

from ragtrace_collector.config import ExplorerConfig
from ragtrace_collector.explorer.login_limit import LoginLimiter
from ragtrace_collector.explorer.query import OUTCOMES, SORTS, WINDOWS, BadQuery, kept_params, parse_query
from ragtrace_collector.explorer.thresholds import Thresholds, load_thresholds
from ragtrace_collector.explorer.views import (
    EXPLORER_PATH,
    LATENCY_FIELDS,
    detail_view,
    iso,
    session_path,
    summary_view,
)
from ragtrace_collector.scoring.results_store import RecordQuery, ResultsStore

log = logging.getLogger(__name__)

API_PATH = "/api/v1/"
COOKIE = "ragtrace_explorer"
# label values of ragtrace_explorer_auth_attempts_total
LOGIN, BEARER = "login", "bearer"
OK, UNAUTHENTICATED, RATE_LIMITED = "ok", "unauthenticated", "rate_limited"
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def fmt_score(value: Any) -> str:
    return "–" if value is None else f"{float(value):.2f}"


def fmt_seconds(value: Any) -> str:
    if value is None:
        return "–"
    seconds = float(value)
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


class Explorer:
    """Serves the results store at ``store_path`` read-only; ``bearer_token`` (``auth.bearer_token``) guards it."""

    def __init__(
        self,
        store_path: str,
        config: ExplorerConfig,
        bearer_token: str | None = None,
        thresholds: Thresholds | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.store_path = store_path
        self.config = config
        self.thresholds = thresholds if thresholds is not None else load_thresholds(config.rules_file)
        self._token = bearer_token.encode() if bearer_token else None
        # the browser's cookie proves the token without being it
        self._cookie = (
            hmac.new(self._token, b"ragtrace-explorer-session", hashlib.sha256).hexdigest() if self._token else None
        )
        self._store: ResultsStore | None = None
        self._store_lock = threading.Lock()
        self.limiter = LoginLimiter(
            config.max_failed_logins, config.failed_login_window_seconds, config.max_login_addresses
        )
        self.auth_attempts = Counter(
            "ragtrace_explorer_auth_attempts",
            "Explorer tokens checked, by where they came from (login form, bearer header) and outcome (ok, "
            "unauthenticated, rate_limited: the address sent explorer.max_failed_logins wrong ones in the window).",
            ("via", "status"),
            registry=registry if registry is not None else CollectorRegistry(),
        )
        self.env = Environment(
            loader=PackageLoader("ragtrace_collector.explorer", "templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(score=fmt_score, seconds=fmt_seconds, iso=iso)
        self.env.globals.update(
            explorer=EXPLORER_PATH,
            session_path=session_path,
            latency_fields=LATENCY_FIELDS,
            auth=self._token is not None,
        )
        self._css = resources.files("ragtrace_collector.explorer").joinpath("static/explorer.css").read_bytes()

    # --- wiring ---
    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/explorer", self._to_list)
        app.router.add_get(EXPLORER_PATH, self._guard(self.records_page))
        app.router.add_get(EXPLORER_PATH + "records/{key}", self._guard(self.record_page))
        app.router.add_get(EXPLORER_PATH + "sessions/{session_id:.+}", self._guard(self.session_page))
        app.router.add_get(EXPLORER_PATH + "static/explorer.css", self.stylesheet)
        app.router.add_get(EXPLORER_PATH + "login", self.login_form)
        app.router.add_post(EXPLORER_PATH + "login", self.login)
        app.router.add_get(API_PATH + "records", self._guard(self.api_records, api=True))
        app.router.add_get(API_PATH + "records/{key}", self._guard(self.api_record, api=True))
        app.router.add_get(API_PATH + "sessions/{session_id:.+}", self._guard(self.api_session, api=True))

    def close(self) -> None:
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def store(self) -> ResultsStore | None:
        """The results store, opened on first use; None while nothing has been scored (no file yet)."""
        with self._store_lock:
            if self._store is None and Path(self.store_path).exists():
                self._store = ResultsStore(self.store_path)
            return self._store

    # --- auth ---
    def authorized(self, request: web.Request) -> tuple[bool, int | None]:
        """(allowed, seconds to wait): without a configured token, everyone; else a login cookie or a matching
        bearer token (constant time).

        A bearer token is a guess the limiter counts; from an address past its limit none is checked and the
        seconds until it may try again come back. A request without a token makes no guess."""
        if self._token is None or self._cookie is None:
            return True, None
        cookie = request.cookies.get(COOKIE, "")
        if hmac.compare_digest(cookie.encode("utf-8", "replace"), self._cookie.encode()):
            return True, None
        header = request.headers.get("Authorization", "")
        if not header.strip():
            return False, None
        wait = self.limiter.retry_after(request.remote)
        if wait is not None:
            self.auth_attempts.labels(BEARER, RATE_LIMITED).inc()
            return False, wait
        scheme, _, credentials = header.strip().partition(" ")
        try:
            given = credentials.strip().encode()
        except UnicodeEncodeError:
            given = b""
        if hmac.compare_digest(given, self._token) & (scheme.lower() == "bearer"):
            self.auth_attempts.labels(BEARER, OK).inc()
            self.limiter.succeeded(request.remote)
            return True, None
        self.auth_attempts.labels(BEARER, UNAUTHENTICATED).inc()
        self.limiter.failed(request.remote)
        return False, None

    def _guard(self, handler: Handler, api: bool = False) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            allowed, wait = self.authorized(request)
            if allowed:
                return await handler(request)
            if wait is not None:  # too many wrong tokens from this address
                return _too_many(wait)
            if api:
                return _json(
                    {"error": "unauthorized: send Authorization: Bearer <token>"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="ragtrace-explorer"'},
                )
            target = request.path_qs
            raise web.HTTPSeeOther(f"{EXPLORER_PATH}login?{urllib.parse.urlencode({'next': target})}")

        return guarded

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        if self._token is None:
            raise web.HTTPSeeOther(EXPLORER_PATH)
        context = {"next": _safe_next(request.query.get("next")), "failed": False, "retry_after": None}
        return self._html("login.html", context)

    async def login(self, request: web.Request) -> web.StreamResponse:
        if self._token is None or self._cookie is None:
            raise web.HTTPSeeOther(EXPLORER_PATH)
        form = await request.post()
        token = str(form.get("token", ""))
        target = _safe_next(str(form.get("next", "")))
        wait = self.limiter.retry_after(request.remote)
        if wait is not None:  # checked before the token: a hit must look like a miss while limited
            self.auth_attempts.labels(LOGIN, RATE_LIMITED).inc()
            response = self._html("login.html", {"next": target, "failed": False, "retry_after": wait}, status=429)
            response.headers["Retry-After"] = str(wait)
            return response
        if not hmac.compare_digest(token.encode("utf-8", "replace"), self._token):
            self.auth_attempts.labels(LOGIN, UNAUTHENTICATED).inc()
            self.limiter.failed(request.remote)
            return self._html("login.html", {"next": target, "failed": True, "retry_after": None}, status=401)
        self.auth_attempts.labels(LOGIN, OK).inc()
        self.limiter.succeeded(request.remote)
        response = web.HTTPSeeOther(target)
        response.set_cookie(COOKIE, self._cookie, httponly=True, samesite="Strict", path="/")
        raise response

    async def _to_list(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPMovedPermanently(EXPLORER_PATH + (f"?{request.query_string}" if request.query_string else ""))

    async def stylesheet(self, request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=self._css,
            content_type="text/css",
            headers={**_SECURITY_HEADERS, "Cache-Control": "max-age=3600"},
        )

    # --- reading ---
    def _list(self, params: Mapping[str, str]) -> tuple[RecordQuery, dict[str, Any]]:
        query = parse_query(params, self.config.page_size)
        store = self.store()
        if store is None:
            return query, {"total": 0, "records": [], "facets": _NO_FACETS}
        page = store.records(query)
        rows = [summary_view(r, self.thresholds, query.metric) for r in page.records]
        return query, {"total": page.total, "records": rows, "facets": store.facets()}

    def _detail(self, key: str) -> dict[str, Any] | None:
        store = self.store()
        found = store.record(key) if store is not None else None
        if found is None:
            return None
        return detail_view(found, self.thresholds, self.config.trace_links)

    def _session(self, session_id: str) -> list[dict[str, Any]]:
        store = self.store()
        turns = store.session(session_id) if store is not None else []
        return [summary_view(r, self.thresholds) for r in turns]

    # --- pages ---
    async def records_page(self, request: web.Request) -> web.StreamResponse:
        try:
            query, found = await asyncio.to_thread(self._list, request.query)
        except BadQuery as exc:
            return self._html("error.html", {"status": 400, "message": str(exc)}, status=400)
        kept = kept_params(request.query)
        total, rows = found["total"], found["records"]

        def href(**changes: Any) -> str:
            params = {**kept, **{k: str(v) for k, v in changes.items() if v is not None}}
            params = {k: v for k, v in params.items() if v != ""}
            return EXPLORER_PATH + ("?" + urllib.parse.urlencode(params) if params else "")

        offset, limit = query.offset, query.limit
        context = {
            "rows": rows,
            "total": total,
            "first": offset + 1 if rows else 0,
            "last": offset + len(rows),
            "prev_href": href(offset=max(0, offset - limit)) if offset > 0 else None,
            "next_href": href(offset=offset + limit) if offset + len(rows) < total else None,
            "sort_hrefs": {s: href(sort=s, offset="") for s in SORTS},
            "sort": query.sort,
            "f": {
                k: request.query.get(k, "")
                for k in (
                    "window",
                    "service",
                    "pipeline",
                    "metric",
                    "min_score",
                    "max_score",
                    "judge",
                    "outcome",
                    "session",
                    "user",
                    "sort",
                    "since",
                    "until",
                    "trace_id",
                    "limit",
                )
            },
            "facets": found["facets"],
            "windows": WINDOWS,
            "outcomes": OUTCOMES,
            "sorts": SORTS,
            "metric": query.metric,
        }
        return await self._render("records.html", context)

    async def record_page(self, request: web.Request) -> web.StreamResponse:
        view = await asyncio.to_thread(self._detail, request.match_info["key"])
        if view is None:
            return self._html("error.html", {"status": 404, "message": "no such record in the results store"}, 404)
        return await self._render("record.html", {"r": view})

    async def session_page(self, request: web.Request) -> web.StreamResponse:
        session_id = request.match_info["session_id"]
        turns = await asyncio.to_thread(self._session, session_id)
        if not turns:
            return self._html("error.html", {"status": 404, "message": "no scored records in this session"}, 404)
        return await self._render("session.html", {"session_id": session_id, "turns": turns})

    # --- JSON API ---
    async def api_records(self, request: web.Request) -> web.StreamResponse:
        try:
            query, found = await asyncio.to_thread(self._list, request.query)
        except BadQuery as exc:
            return _json({"error": str(exc)}, status=400)
        origin = str(request.url.origin())
        records = [{**r, "url": origin + r["path"]} for r in found["records"]]
        end = query.offset + len(records)
        return _json(
            {
                "total": found["total"],
                "offset": query.offset,
                "limit": query.limit,
                "next_offset": end if end < found["total"] else None,
                "records": records,
            }
        )

    async def api_record(self, request: web.Request) -> web.StreamResponse:
        view = await asyncio.to_thread(self._detail, request.match_info["key"])
        if view is None:
            return _json({"error": "no such record in the results store"}, status=404)
        view.pop("answer_segments", None)  # a page layout detail; claims carry the same information
        return _json({**view, "url": str(request.url.origin()) + view["path"]})

    async def api_session(self, request: web.Request) -> web.StreamResponse:
        session_id = request.match_info["session_id"]
        turns = await asyncio.to_thread(self._session, session_id)
        if not turns:
            return _json({"error": "no scored records in this session"}, status=404)
        return _json({"session_id": session_id, "turns": turns})

    # --- rendering ---
    async def _render(self, template: str, context: dict[str, Any], status: int = 200) -> web.Response:
        text = await asyncio.to_thread(self.env.get_template(template).render, **context)
        return web.Response(text=text, status=status, content_type="text/html", headers=_SECURITY_HEADERS)

    def _html(self, template: str, context: dict[str, Any], status: int = 200) -> web.Response:
        text = self.env.get_template(template).render(**context)
        return web.Response(text=text, status=status, content_type="text/html", headers=_SECURITY_HEADERS)


_NO_FACETS: dict[str, list[str]] = {"services": [], "pipelines": [], "metrics": [], "judges": []}


def _safe_next(target: str | None) -> str:
    """Where to go after login: a path of the explorer only (never another site)."""
    if target and target.startswith(EXPLORER_PATH) and "\\" not in target and "//" not in target:
        return target
    return EXPLORER_PATH


def _too_many(retry_after: int) -> web.Response:
    return _json(
        {"error": f"too many wrong tokens from this address: try again in {retry_after} s"},
        status=429,
        headers={"Retry-After": str(retry_after)},
    )


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    body = json.dumps(data, default=str, ensure_ascii=False)
    return web.Response(
        text=body, status=status, content_type="application/json", headers={**_SECURITY_HEADERS, **(headers or {})}
    )

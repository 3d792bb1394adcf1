"""The records explorer's HTTP side: HTML pages and the JSON API, added to an aiohttp application.

Routes (all GET, read-only, except the sign-in and sign-out forms' POSTs):

* ``/explorer/`` — the records list (filters in the query string, see :mod:`.query`);
* ``/explorer/records/{trace_id}`` — one record: question, answer with its claims by verdict, contexts,
  every metric's outcome, latencies, trace links;
* ``/explorer/sessions/{session_id}`` — a conversation's turns with their scores;
* ``/api/v1/records``, ``/api/v1/records/{trace_id}``, ``/api/v1/sessions/{session_id}`` — the same as JSON
  (documented in ``docs/explorer.md``);
* ``/explorer/login`` — with a read token configured (``auth.bearer_token``, ``auth.read_tokens`` or
  ``auth.review_tokens``), a browser gives a token once and gets a session cookie (a random id: HttpOnly,
  SameSite=Strict, Secure over TLS, ``auth.session_hours`` long, :mod:`.sessions`); ``POST /explorer/logout`` ends
  it. API clients send ``Authorization: Bearer <token>``. Tokens are checked by the collector's one
  :class:`~ragtrace_collector.internal.credentials.CredentialGuard`: wrong ones (from every listener together)
  are limited per client address, past the limit 429 with ``Retry-After``; an ingest token gets 403.

Pages are Jinja2 templates with autoescaping on: every text from traced traffic (questions, answers,
contexts, judge reasons) is escaped. No script runs on the pages (the CSP says so); every asset ships in
the package. Store reads and rendering run off the event loop: the receivers share it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined

from ragtrace_collector.config import AuthConfig, ExplorerConfig
from ragtrace_collector.explorer.query import OUTCOMES, SORTS, WINDOWS, BadQuery, kept_params, parse_query
from ragtrace_collector.explorer.sessions import Sessions
from ragtrace_collector.explorer.thresholds import Thresholds, load_thresholds
from ragtrace_collector.explorer.views import (
    EXPLORER_PATH,
    LATENCY_FIELDS,
    detail_view,
    iso,
    session_path,
    summary_view,
)
from ragtrace_collector.internal.credential_limit import client_key
from ragtrace_collector.internal.credentials import VIA_BEARER, VIA_LOGIN, CredentialGuard, Outcome, Scope
from ragtrace_collector.scoring.results_store import FACET_LIMIT, RecordQuery, ResultsStore

log = logging.getLogger(__name__)

API_PATH = "/api/v1/"
COOKIE = "ragtrace_explorer"
_AUTH = AuthConfig()  # the defaults are the config's (``auth`` section), written once there
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
R = TypeVar("R")


@dataclass(frozen=True)
class Backlog:
    """Records received and not scored yet, and why scoring is paused (the judge's outage), if it is: what a
    user looking at an empty or stale list needs to know."""

    waiting: int
    judge_unavailable: str | None = None


class ReadGate:
    """Bounds the store reads in flight: ``max_total`` running and waiting, ``max_per_client`` of one client
    address (``enter`` answers the refusal to raise, or None and counts the read until ``leave``)."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total, self.max_per_client = max_total, max_per_client
        self.total = 0
        self.per_client: dict[str, int] = {}

    def enter(self, client: str) -> web.HTTPException | None:
        if self.total >= self.max_total:
            return web.HTTPServiceUnavailable(text="explorer busy, retry shortly\n", headers={"Retry-After": "1"})
        if self.per_client.get(client, 0) >= self.max_per_client:
            return web.HTTPTooManyRequests(
                text="too many explorer requests from your address at once\n", headers={"Retry-After": "1"}
            )
        self.total += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        return None

    def leave(self, client: str) -> None:
        self.total -= 1
        left = self.per_client.get(client, 1) - 1
        if left:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)


def fmt_score(value: Any) -> str:
    return "–" if value is None else f"{float(value):.2f}"


def fmt_seconds(value: Any) -> str:
    if value is None:
        return "–"
    seconds = float(value)
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


class Explorer:
    """Serves the results store at ``store_path`` read-only, to holders of a read credential (``guard``)."""

    def __init__(
        self,
        store_path: str,
        config: ExplorerConfig,
        guard: CredentialGuard | None = None,
        session_hours: float = _AUTH.session_hours,
        thresholds: Thresholds | None = None,
        backlog: Callable[[], Backlog] | None = None,
    ) -> None:
        self.store_path = store_path
        self.config = config
        self.thresholds = thresholds if thresholds is not None else load_thresholds(config.rules_file)
        self.guard = guard if guard is not None else CredentialGuard()  # no tokens: open, as on loopback
        self.sessions = Sessions(session_hours * 3600.0)
        self.backlog = backlog  # the service's queue depth and judge outage (None: the explorer alone)
        self._store: ResultsStore | None = None
        self._store_lock = threading.Lock()
        # the explorer's own readers: a crowd of list requests never starves /metrics or scoring of threads
        self._pool = ThreadPoolExecutor(config.read_threads, thread_name_prefix="ragtrace-explorer")
        self._reads = ReadGate(config.max_reads_in_flight, config.max_reads_per_client)
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
            auth=self.guard.required(Scope.READ),
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
        app.router.add_post(EXPLORER_PATH + "logout", self.logout)
        app.router.add_get(API_PATH + "records", self._guard(self.api_records, api=True))
        app.router.add_get(API_PATH + "records/{key}", self._guard(self.api_record, api=True))
        app.router.add_get(API_PATH + "sessions/{session_id:.+}", self._guard(self.api_session, api=True))
        app.router.add_get(API_PATH + "facets", self._guard(self.api_facets, api=True))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
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
    def authorized(self, request: web.Request) -> Outcome:
        """Whether ``request`` may read: without a read token configured, everyone; else a live session cookie
        or an ``Authorization: Bearer`` read token (checked, limited and counted by the guard)."""
        if not self.guard.required(Scope.READ):
            return Outcome.OK
        if Scope.READ in self.sessions.scopes(request.cookies.get(COOKIE)):
            return Outcome.OK
        return self.guard.check_header(request.headers.get("Authorization"), Scope.READ, request.remote, VIA_BEARER)

    def _guard(self, handler: Handler, api: bool = False) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            outcome = self.authorized(request)
            if outcome is Outcome.OK:
                return await handler(request)
            if outcome is Outcome.RATE_LIMITED:  # too many wrong tokens from this address
                return _too_many(self.guard.retry_after(request.remote) or 1)
            if outcome is Outcome.FORBIDDEN:
                return _json({"error": "forbidden: this token may not read records (an ingest token)"}, status=403)
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
        if not self.guard.required(Scope.READ):
            raise web.HTTPSeeOther(EXPLORER_PATH)
        context = {"next": _safe_next(request.query.get("next")), "failed": False, "retry_after": None}
        return self._html("login.html", context)

    async def login(self, request: web.Request) -> web.StreamResponse:
        if not self.guard.required(Scope.READ):
            raise web.HTTPSeeOther(EXPLORER_PATH)
        form = await request.post()
        token = str(form.get("token", ""))
        target = _safe_next(str(form.get("next", "")))
        outcome = self.guard.check_token(token or "\0", Scope.READ, request.remote, VIA_LOGIN)
        if outcome is Outcome.RATE_LIMITED:  # checked before the token: a hit must look like a miss while limited
            wait = self.guard.retry_after(request.remote) or 1
            response = self._html("login.html", {"next": target, "failed": False, "retry_after": wait}, status=429)
            response.headers["Retry-After"] = str(wait)
            return response
        if outcome is not Outcome.OK:
            status = 403 if outcome is Outcome.FORBIDDEN else 401
            failed = "forbidden" if outcome is Outcome.FORBIDDEN else "wrong"
            return self._html("login.html", {"next": target, "failed": failed, "retry_after": None}, status=status)
        response = web.HTTPSeeOther(target)
        response.set_cookie(
            COOKIE,
            self.sessions.start(self.guard.scopes_of(token)),
            max_age=int(self.sessions.lifetime),
            httponly=True,
            samesite="Strict",
            secure=_over_tls(request),
            path="/",
        )
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """End the browser's session (the host check has refused cross-site posts) and forget its cookie."""
        self.sessions.end(request.cookies.get(COOKIE))
        response = web.HTTPSeeOther(EXPLORER_PATH + "login")
        response.del_cookie(COOKIE, path="/")
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
            return query, {"total": 0, "records": [], "facets": _NO_FACETS, "backlog": self._backlog()}
        page = store.records(query)
        rows = [summary_view(r, self.thresholds, query.metric) for r in page.records]
        facets = store.facets()
        for name, chosen in (("services", query.service), ("pipelines", query.pipeline)):
            if chosen is not None and chosen not in facets[name]:  # a rarer value, given in the URL, stays chosen
                facets[name] = sorted([*facets[name], chosen])
        return query, {"total": page.total, "records": rows, "facets": facets, "backlog": self._backlog()}

    def _backlog(self) -> Backlog | None:
        if self.backlog is None:
            return None
        try:
            return self.backlog()
        except Exception as exc:  # a queue that cannot say (Redis away): the list still shows
            log.debug("backlog unavailable: %s", exc)
            return None

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
            query, found = await self._read(request, self._list, request.query)
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
            "backlog": found["backlog"],
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
        view = await self._read(request, self._detail, request.match_info["key"])
        if view is None:
            return self._html("error.html", {"status": 404, "message": "no such record in the results store"}, 404)
        return await self._render("record.html", {"r": view})

    async def session_page(self, request: web.Request) -> web.StreamResponse:
        session_id = request.match_info["session_id"]
        turns = await self._read(request, self._session, session_id)
        if not turns:
            return self._html("error.html", {"status": 404, "message": "no scored records in this session"}, 404)
        return await self._render("session.html", {"session_id": session_id, "turns": turns})

    # --- JSON API ---
    async def api_records(self, request: web.Request) -> web.StreamResponse:
        try:
            query, found = await self._read(request, self._list, request.query)
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
                "waiting": found["backlog"].waiting if found["backlog"] is not None else None,
                "judge_unavailable": found["backlog"].judge_unavailable if found["backlog"] is not None else None,
            }
        )

    async def api_record(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._detail, request.match_info["key"])
        if view is None:
            return _json({"error": "no such record in the results store"}, status=404)
        view.pop("answer_segments", None)  # a page layout detail; claims carry the same information
        return _json({**view, "url": str(request.url.origin()) + view["path"]})

    async def api_session(self, request: web.Request) -> web.StreamResponse:
        session_id = request.match_info["session_id"]
        turns = await self._read(request, self._session, session_id)
        if not turns:
            return _json({"error": "no scored records in this session"}, status=404)
        return _json({"session_id": session_id, "turns": turns})

    async def api_facets(self, request: web.Request) -> web.StreamResponse:
        """The filters' values, each the most frequent ``limit`` (at most 1,000), containing ``q`` where given."""
        try:
            limit = min(1000, max(1, int(request.query.get("limit", FACET_LIMIT))))
        except ValueError:
            return _json({"error": "limit must be a whole number"}, status=400)
        search = request.query.get("q") or None
        return _json(await self._read(request, self._facets, limit, search))

    def _facets(self, limit: int = FACET_LIMIT, search: str | None = None) -> dict[str, list[str]]:
        store = self.store()
        return store.facets(limit, search) if store is not None else _NO_FACETS

    async def _read(self, request: web.Request, fn: Callable[..., R], *args: Any) -> R:
        """Run a store read on the explorer's threads, within its bounds (503 / 429 + ``Retry-After`` past them)."""
        client = client_key(request.remote)
        refusal = self._reads.enter(client)
        if refusal is not None:
            raise refusal
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        finally:
            self._reads.leave(client)

    # --- rendering ---
    async def _render(self, template: str, context: dict[str, Any], status: int = 200) -> web.Response:
        render = functools.partial(self.env.get_template(template).render, **context)
        text = await asyncio.get_running_loop().run_in_executor(self._pool, render)
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


def _over_tls(request: web.Request) -> bool:
    """Whether the browser reached the explorer over TLS (directly, or through a proxy that says so): the
    session cookie is then ``Secure``. A client lying here only makes its own cookie stricter."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower() == "https"


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

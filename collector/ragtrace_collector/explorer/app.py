"""The records explorer's HTTP side: HTML pages and the JSON API, added to an aiohttp application.

Routes (GET, read-only, except the sign-in and sign-out forms' POSTs and the quality loop's writes):

* ``/explorer/`` — the records list (filters in the query string, see :mod:`.query`);
* ``/explorer/records/{trace_id}`` — one record: question, answer with its claims by verdict, contexts,
  every metric's outcome, latencies, trace links;
* ``/explorer/sessions/{session_id}`` — a conversation's turns with their scores;
* ``/api/v1/records``, ``/api/v1/records/{trace_id}``, ``/api/v1/sessions/{session_id}`` — the same as JSON
  (documented in ``docs/explorer.md``);
* ``/explorer/review`` (``/api/v1/review/queue``) — the review queue (:mod:`ragtrace_collector.review.queue`);
  ``POST /explorer/records/{trace_id}/review`` — the record page's review form (keyboard-driven, CSRF-checked), which
  redirects to the next record of the queue; ``POST /api/v1/records/{trace_id}/reviews`` — the same as JSON;
* ``/explorer/agreement`` (``/api/v1/agreement``) — judge vs human agreement (:mod:`ragtrace_collector.review.agreement`);
* ``POST /api/v1/records/{trace_id}/feedback`` — end-user feedback from a backend that does not run the SDK;
* ``/runbooks/<alert>`` — the alerts' runbooks, without a token (:mod:`.runbooks`);
* ``/explorer/login`` — with a read token configured (``auth.bearer_token``, ``auth.read_tokens`` or
  ``auth.review_tokens``), a browser gives a token once and gets a session cookie (a random id: HttpOnly,
  SameSite=Strict, Secure over TLS, ``auth.session_hours`` long, :mod:`.sessions`); ``POST /explorer/logout`` ends
  it. API clients send ``Authorization: Bearer <token>``. Tokens are checked by the collector's one
  :class:`~ragtrace_collector.internal.credentials.CredentialGuard`: wrong ones (from every listener together)
  are limited per client address, past the limit 429 with ``Retry-After``; an ingest token gets 403. Reviews need the
  review scope (``auth.review_tokens`` or ``auth.bearer_token``) where a token holds it, else the read scope where
  reads are guarded; a read-only token gets 403. A browser's review form also carries a per-session anti-forgery
  token (an HMAC of its session cookie, or of an anti-forgery cookie where no sign-in is needed), checked on post,
  beside the ``SameSite=Strict`` cookie and the listener's ``Origin`` check.

Pages are Jinja2 templates with autoescaping on: every text from traced traffic (questions, answers,
contexts, judge reasons) is escaped. No script runs on the pages (the CSP says so); every asset ships in
the package. Store reads and rendering run off the event loop: the receivers share it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined
from prometheus_client import CollectorRegistry

from ragtrace_collector.config import AuthConfig, ExplorerConfig, ReviewConfig
from ragtrace_collector.explorer.query import OUTCOMES, PARAMS, SORTS, WINDOWS, BadQuery, kept_params, parse_query
from ragtrace_collector.explorer.runbooks import add_routes as add_runbook_routes
from ragtrace_collector.explorer.sessions import Sessions
from ragtrace_collector.explorer.thresholds import Thresholds, load_thresholds
from ragtrace_collector.explorer.view_models import (
    AgreementView,
    Backlog,
    ClaimView,
    RecordDetailView,
    RecordListView,
    SessionView,
)
from ragtrace_collector.explorer.views import (
    EXPLORER_PATH,
    LATENCY_FIELDS,
    agreement_view,
    claims_of,
    detail_view,
    iso,
    list_view,
    queue_view,
    review_id,
    session_path,
    session_view,
)
from ragtrace_collector.internal.component import Component
from ragtrace_collector.internal.credential_limit import client_key
from ragtrace_collector.internal.credentials import VIA_BEARER, VIA_LOGIN, CredentialGuard, Outcome, Scope
from ragtrace_collector.internal.json_input import loads, lone_surrogate
from ragtrace_collector.review.agreement import AgreementSource
from ragtrace_collector.review.feedback import FeedbackIntake
from ragtrace_collector.review.labels import (
    CLAIM_LABELS,
    MAX_COMMENT_CHARS,
    MAX_NAME_CHARS,
    MAX_REVIEWER_CHARS,
    BadLabel,
    Feedback,
    LabelStore,
    Review,
    cut,
    feedback_value,
    review_from_json,
)
from ragtrace_collector.review.queue import DEFAULT_METRIC, REASONS, Reason, ReviewQueue, review_queue
from ragtrace_collector.scoring.results_store import FACET_LIMIT, RecordPage, RecordQuery, ResultsStore

log = logging.getLogger(__name__)

API_PATH = "/api/v1/"
COOKIE = "ragtrace_explorer"
CSRF_COOKIE = "ragtrace_csrf"  # the anti-forgery basis of a browser with no sign-in (no token configured)
REVIEWER_COOKIE = "ragtrace_reviewer"  # the review form's reviewer name, remembered for the next form
QUEUE_SHOWN = 50  # pending records the review queue page lists
MAX_IDEMPOTENCY_KEY = 200  # characters of an Idempotency-Key header
TRACE_ID = re.compile(r"[0-9a-fA-F]{32}")
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


class Explorer(Component):
    """Serves the results store at ``store_path`` to holders of a read credential (``guard``), and takes reviews
    and feedback into ``labels`` (the label store in the same file, opened here unless the service shares its own)."""

    def __init__(
        self,
        store_path: str,
        config: ExplorerConfig,
        guard: CredentialGuard | None = None,
        session_hours: float = _AUTH.session_hours,
        thresholds: Thresholds | None = None,
        backlog: Callable[[], Backlog] | None = None,
        review: ReviewConfig | None = None,
        labels: LabelStore | None = None,
        agreement: AgreementSource | None = None,
        feedback: FeedbackIntake | None = None,
        relay: bool = False,
    ) -> None:
        self.store_path = store_path
        self.relay = relay  # reviews made here also go to the other hosts (scaled out: review/feedback_relay.py)
        self.config = config
        self.review = review if review is not None else ReviewConfig()
        self.thresholds = thresholds if thresholds is not None else load_thresholds(config.rules_file)
        self._own_labels = labels is None
        self.labels = labels if labels is not None else LabelStore(store_path)
        self.agreement = (
            agreement
            if agreement is not None
            else AgreementSource(self.store, self.labels, self.thresholds, self.review)
        )
        # the service's intake counts feedback in its /metrics; the explorer alone counts it in a registry of its own
        self.feedback = feedback if feedback is not None else FeedbackIntake(self.labels, CollectorRegistry())
        self._csrf_key = secrets.token_bytes(32)  # per process, like the sessions it signs
        self.guard = guard if guard is not None else CredentialGuard()  # no tokens: open, as on loopback
        self.sessions = Sessions(session_hours * 3600.0)
        self.backlog = backlog  # the service's queue depth and judge outage (None: the explorer alone)
        self._store: ResultsStore | None = None
        self._store_lock = threading.Lock()
        # the explorer's own readers: a crowd of list requests never starves /metrics or scoring of threads
        self._pool = ThreadPoolExecutor(config.read_threads, thread_name_prefix="ragtrace-explorer")
        self._reads = ReadGate(config.max_reads_in_flight, config.max_reads_per_client)
        self._shut = False
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
            reasons=REASONS,
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
        # the quality loop: reviews, the review queue, agreement, feedback
        app.router.add_get(EXPLORER_PATH + "review", self._guard(self.queue_page))
        app.router.add_post(EXPLORER_PATH + "records/{key}/review", self.review_form)
        app.router.add_get(EXPLORER_PATH + "agreement", self._guard(self.agreement_page))
        app.router.add_get(API_PATH + "review/queue", self._guard(self.api_queue, api=True))
        app.router.add_get(API_PATH + "agreement", self._guard(self.api_agreement, api=True))
        app.router.add_post(API_PATH + "records/{key}/reviews", self.api_add_review)
        app.router.add_post(API_PATH + "records/{key}/feedback", self.api_add_feedback)
        add_runbook_routes(app)  # /runbooks/<alert>: each alert's runbook_url (explorer/runbooks.py)

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel the reads not begun (those running finish on their own: none is waited for), then close the
        results store it opened and the label store if it is its own. Idempotent. A read still opening the store
        (a database locked by another process) is waited for ``timeout`` seconds at most: past that this raises,
        and that read closes the store it opens."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._shut:
            return
        self._shut = True  # before the lock: a read that holds it sees this once it has opened the store
        if self._own_labels:
            self.labels.close()
        if not self._store_lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError("a read is still opening the results store (it closes it once open)")
        try:
            if self._store is not None:
                self._store.close()
                self._store = None
        finally:
            self._store_lock.release()

    def store(self) -> ResultsStore | None:
        """The results store, opened on first use; None while nothing has been scored (no file yet) or once shut."""
        with self._store_lock:
            if self._store is None and not self._shut and Path(self.store_path).exists():
                store = ResultsStore(self.store_path)
                if self._shut:  # shut down while it opened: nobody else will close it
                    store.close()
                    return None
                self._store = store
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

    # --- reviewing: who may, and forms that cannot be forged ---
    def review_scope(self) -> Scope | None:
        """The scope a review needs: review where a token holds it; else read where reads are guarded (a review is
        never less guarded than reading); None with no token at all (open, as on loopback)."""
        if self.guard.required(Scope.REVIEW):
            return Scope.REVIEW
        if self.guard.required(Scope.READ):
            return Scope.READ
        return None

    def may_review_in_browser(self, request: web.Request) -> bool:
        """Whether this browser's session (or the open setup) may post the review form."""
        scope = self.review_scope()
        return scope is None or scope in self.sessions.scopes(request.cookies.get(COOKIE))

    def review_authorized(self, request: web.Request) -> Outcome:
        """An API client's ``Authorization: Bearer`` for a review (checked, limited and counted by the guard)."""
        scope = self.review_scope()
        if scope is None:
            return Outcome.OK
        return self.guard.check_header(request.headers.get("Authorization"), scope, request.remote, VIA_BEARER)

    def feedback_authorized(self, request: web.Request) -> Outcome:
        """Feedback needs the ingest scope (what apps hold) or the review scope; open where ingest is."""
        header = request.headers.get("Authorization")
        outcome = self.guard.check_header(header, Scope.INGEST, request.remote, VIA_BEARER)
        if outcome is Outcome.FORBIDDEN and Scope.REVIEW in self.guard.scopes_of(_bearer(header)):
            return Outcome.OK
        return outcome

    def csrf_token(self, request: web.Request) -> tuple[str, str | None]:
        """This browser's anti-forgery token — an HMAC of its session cookie, else of its anti-forgery cookie —
        and a new anti-forgery cookie value to set where it has neither (else None)."""
        basis = request.cookies.get(COOKIE) or request.cookies.get(CSRF_COOKIE)
        fresh = None
        if not basis:
            basis = fresh = secrets.token_urlsafe(32)
        return hmac.new(self._csrf_key, basis.encode(), hashlib.sha256).hexdigest(), fresh

    def csrf_ok(self, request: web.Request, given: str) -> bool:
        basis = request.cookies.get(COOKIE) or request.cookies.get(CSRF_COOKIE)
        if not basis or not given:
            return False
        expected = hmac.new(self._csrf_key, basis.encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected.encode(), given.encode(errors="replace"))

    def _refusal(self, outcome: Outcome, request: web.Request, what: str) -> web.Response:
        """The JSON answer to a credential that may not ``what`` (401, 403 or 429)."""
        if outcome is Outcome.RATE_LIMITED:
            return _too_many(self.guard.retry_after(request.remote) or 1)
        if outcome is Outcome.FORBIDDEN:
            return _json({"error": f"forbidden: this token may not {what}"}, status=403)
        return _json(
            {"error": "unauthorized: send Authorization: Bearer <token>"},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="ragtrace-explorer"'},
        )

    async def _body(self, request: web.Request) -> bytes | None:
        """The request body, or None past ``review.max_body_bytes`` (the caller answers 413): refused unread where it
        says its length, else read no further than the bound."""
        limit = self.review.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return None
        chunks, size = [], 0
        while chunk := await request.content.read(64 * 1024):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        if not self.guard.required(Scope.READ):
            raise web.HTTPSeeOther(EXPLORER_PATH)
        context = {"next": _safe_next(request.query.get("next")), "failed": False, "retry_after": None}
        return self._html("login.html", context)

    async def login(self, request: web.Request) -> web.StreamResponse:
        if not self.guard.required(Scope.READ):
            raise web.HTTPSeeOther(EXPLORER_PATH)
        body = await self._body(request)
        if body is None:
            message = f"the form is larger than {self.review.max_body_bytes} bytes"
            return self._html("error.html", {"status": 413, "message": message}, 413)
        form = _form_fields(body)
        token = form.get("token", "")
        target = _safe_next(form.get("next", ""))
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
    def _list(self, params: Mapping[str, str]) -> tuple[RecordQuery, RecordListView]:
        query = parse_query(params, self.config.page_size)
        store = self.store()
        if store is None:
            return query, list_view(RecordPage([], 0), query, self.thresholds, _NO_FACETS, self._backlog())
        page = store.records(query)
        facets = store.facets()
        for name, chosen in (("services", query.service), ("pipelines", query.pipeline)):
            if chosen is not None and chosen not in facets[name]:  # a rarer value, given in the URL, stays chosen
                facets[name] = sorted([*facets[name], chosen])
        return query, list_view(page, query, self.thresholds, facets, self._backlog())

    def _backlog(self) -> Backlog | None:
        if self.backlog is None:
            return None
        try:
            return self.backlog()
        except Exception as exc:  # a queue that cannot say (Redis away): the list still shows
            log.debug("backlog unavailable: %s", exc)
            return None

    def _detail(self, key: str) -> RecordDetailView | None:
        store = self.store()
        found = store.record(key) if store is not None else None
        if found is None:
            return None
        said = review_id(found)
        return detail_view(
            found, self.thresholds, self.config.trace_links, self.labels.reviews_of(said), self.labels.feedback_of(said)
        )

    def _found(self, key: str) -> tuple[str, tuple[ClaimView, ...]] | None:
        """The review id of the stored record ``key`` and its claims (None: not in the results store)."""
        store = self.store()
        found = store.record(key) if store is not None else None
        return (review_id(found), claims_of(found)) if found is not None else None

    def _add_review(self, review: Review) -> bool:
        created = self.labels.add_review(review, relay=self.relay)
        self.agreement.invalidate()
        return created

    def _queue(self, metric: str) -> ReviewQueue:
        return review_queue(
            self.store(), self.labels, self.thresholds, metric, self.review.queue_pool, self.review.sample_rate
        )

    def _agreement(self) -> AgreementView:
        return agreement_view(self.agreement.report(), self.review.agreement_window_days)

    def _session(self, session_id: str) -> SessionView:
        store = self.store()
        turns = store.session(session_id) if store is not None else []
        return session_view(session_id, turns, self.thresholds)

    # --- pages ---
    async def records_page(self, request: web.Request) -> web.StreamResponse:
        try:
            query, found = await self._read(request, self._list, request.query)
        except BadQuery as exc:
            return self._html("error.html", {"status": 400, "message": str(exc)}, status=400)
        kept = kept_params(request.query)
        total, rows = found.total, found.records

        def href(**changes: Any) -> str:
            params = {**kept, **{k: str(v) for k, v in changes.items() if v is not None}}
            params = {k: v for k, v in params.items() if v != ""}
            return EXPLORER_PATH + ("?" + urllib.parse.urlencode(params) if params else "")

        offset, limit = query.offset, query.limit
        context = {
            "rows": rows,
            "total": total,
            "backlog": found.backlog,
            "first": offset + 1 if rows else 0,
            "last": offset + len(rows),
            "prev_href": href(offset=max(0, offset - limit)) if offset > 0 else None,
            "next_href": href(offset=offset + limit) if offset + len(rows) < total else None,
            "sort_hrefs": {s: href(sort=s, offset="") for s in SORTS},
            "sort": query.sort,
            "f": {k: request.query.get(k, "") for k in PARAMS},  # the filter form's values, as given
            "facets": found.facets,
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
        form, fresh = None, None
        if self.may_review_in_browser(request):
            token, fresh = self.csrf_token(request)
            scored = [m.metric for m in view.metrics if m.status == "scored"]
            asked = request.query.get("review")
            metric = (
                asked if asked in scored else DEFAULT_METRIC if DEFAULT_METRIC in scored or not scored else scored[0]
            )
            reason = request.query.get("reason")
            form = {
                "csrf": token,
                "metric": metric,
                "metrics": scored or [metric],
                "queued": asked is not None,  # came from the review queue: the first button takes the focus
                "reason": reason if reason in REASONS else "",
                "reviewer": urllib.parse.unquote(request.cookies.get(REVIEWER_COOKIE, "")),
                "action": view.path + "/review",
                "max_comment": MAX_COMMENT_CHARS,
                "max_reviewer": MAX_REVIEWER_CHARS,
            }
        response = await self._render("record.html", {"r": view, "form": form, "claim_labels": CLAIM_LABELS})
        if fresh is not None:
            response.set_cookie(
                CSRF_COOKIE, fresh, httponly=True, samesite="Strict", secure=_over_tls(request), path=EXPLORER_PATH
            )
        return response

    async def review_form(self, request: web.Request) -> web.StreamResponse:
        """The record page's review form: store the verdict (or skip), then on to the next record of the queue."""
        if not self.may_review_in_browser(request):
            if self.authorized(request) is not Outcome.OK:
                raise web.HTTPSeeOther(f"{EXPLORER_PATH}login")
            message = "this sign-in may not review: sign in with a review token"
            return self._html("error.html", {"status": 403, "message": message}, 403)
        body = await self._body(request)
        if body is None:
            message = f"the form is larger than {self.review.max_body_bytes} bytes"
            return self._html("error.html", {"status": 413, "message": message}, 413)
        fields = _form_fields(body)
        if not self.csrf_ok(request, fields.get("csrf", "")):
            message = "the form's anti-forgery token does not match this browser: reload the record and try again"
            return self._html("error.html", {"status": 403, "message": message}, 403)
        found = await self._read(request, self._found, request.match_info["key"])
        if found is None:
            return self._html("error.html", {"status": 404, "message": "no such record in the results store"}, 404)
        said, claims = found
        metric = fields.get("metric") or DEFAULT_METRIC
        reviewer = fields.get("reviewer", "").strip()
        if fields.get("verdict") != "skip":
            claim_verdicts = [
                {"statement": c.statement, "verdict": fields[f"claim-{c.index}"]}
                for c in claims
                if fields.get(f"claim-{c.index}") in CLAIM_LABELS
            ]
            data = {
                "metric": metric,
                "verdict": fields.get("verdict") or None,
                "claims": claim_verdicts or None,
                "reviewer": reviewer,
                "comment": fields.get("comment") or None,
                "reference": fields.get("reference") or None,
            }
            try:
                review = dataclasses.replace(review_from_json(said, data), reviewed_at=time.time())
            except BadLabel as exc:
                return self._html("error.html", {"status": 400, "message": str(exc)}, 400)
            await self._read(request, self._add_review, review)
        reason = fields.get("reason")
        chosen: Reason | None = next((r for r in REASONS if r == reason), None)
        queue = await self._read(request, self._queue, metric)
        following = queue.next_after(said, chosen)
        params = {"review": metric, **({"reason": chosen} if chosen else {})}
        if following is not None:
            target = f"{EXPLORER_PATH}records/{urllib.parse.quote(following.trace_id, safe='')}"
        else:
            target, params = f"{EXPLORER_PATH}review", {"metric": metric, "done": "1", **params}
            params.pop("review")
        response = web.HTTPSeeOther(f"{target}?{urllib.parse.urlencode(params)}")
        if reviewer:
            response.set_cookie(
                REVIEWER_COOKIE,
                urllib.parse.quote(reviewer[:MAX_REVIEWER_CHARS], safe=""),
                max_age=int(self.sessions.lifetime),
                httponly=True,
                samesite="Strict",
                secure=_over_tls(request),
                path=EXPLORER_PATH,
            )
        raise response

    async def queue_page(self, request: web.Request) -> web.StreamResponse:
        metric, reason = _queue_params(request)
        queue, metrics = await self._read(request, self._queue_and_metrics, metric)
        view = queue_view(queue, QUEUE_SHOWN, reason, self.review.sample_rate)
        first = view.items[0] if view.items else None
        params = {"review": metric, **({"reason": reason} if reason else {})}
        context = {
            "q": view,
            "metric": metric,
            "reason": reason or "",
            "metrics": sorted({*metrics, metric}),
            "first_href": f"{first.path}?{urllib.parse.urlencode(params)}" if first else None,
            "item_query": urllib.parse.urlencode(params),
            "done": request.query.get("done") == "1",
            "sample_rate": view.sample_rate,
            "may_review": self.may_review_in_browser(request),
        }
        return await self._render("review.html", context)

    async def agreement_page(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._agreement)
        return await self._render("agreement.html", {"a": view, "window_days": view.window_days})

    async def session_page(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._session, request.match_info["session_id"])
        if not view.turns:
            return self._html("error.html", {"status": 404, "message": "no scored records in this session"}, 404)
        return await self._render("session.html", {"session_id": view.session_id, "turns": view.turns})

    # --- JSON API ---
    async def api_records(self, request: web.Request) -> web.StreamResponse:
        try:
            _, found = await self._read(request, self._list, request.query)
        except BadQuery as exc:
            return _json({"error": str(exc)}, status=400)
        return _json(found.to_json(str(request.url.origin())))

    async def api_record(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._detail, request.match_info["key"])
        if view is None:
            return _json({"error": "no such record in the results store"}, status=404)
        return _json(view.to_json(str(request.url.origin())))

    async def api_session(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._session, request.match_info["session_id"])
        if not view.turns:
            return _json({"error": "no scored records in this session"}, status=404)
        return _json(view.to_json())

    async def api_facets(self, request: web.Request) -> web.StreamResponse:
        """The filters' values, each the most frequent ``limit`` (at most 1,000), containing ``q`` where given."""
        try:
            limit = min(1000, max(1, int(request.query.get("limit", FACET_LIMIT))))
        except ValueError:
            return _json({"error": "limit must be a whole number"}, status=400)
        search = request.query.get("q") or None
        return _json(await self._read(request, self._facets, limit, search))

    async def api_queue(self, request: web.Request) -> web.StreamResponse:
        """The review queue of ``metric`` (default faithfulness), of one ``reason`` where given."""
        metric, reason = _queue_params(request)
        try:
            limit = min(1000, max(1, int(request.query.get("limit", QUEUE_SHOWN))))
        except ValueError:
            return _json({"error": "limit must be a whole number"}, status=400)
        queue = await self._read(request, self._queue, metric)
        view = queue_view(queue, limit, reason, self.review.sample_rate)
        return _json(view.to_json(str(request.url.origin())))

    async def api_agreement(self, request: web.Request) -> web.StreamResponse:
        view = await self._read(request, self._agreement)
        return _json(view.to_json())

    async def api_add_review(self, request: web.Request) -> web.StreamResponse:
        """``POST /api/v1/records/{trace_id}/reviews``: 201 stored, 200 replacing the reviewer's earlier verdict."""
        outcome = self.review_authorized(request)
        if outcome is not Outcome.OK:
            return self._refusal(outcome, request, "review (a read-only or ingest token)")
        body = await self._body(request)
        if body is None:
            return _json({"error": f"the body is larger than {self.review.max_body_bytes} bytes"}, status=413)
        try:
            data = _json_body(body)
        except BadLabel as exc:
            return _json({"error": str(exc)}, status=400)
        found = await self._read(request, self._found, request.match_info["key"])
        try:
            review = review_from_json(found[0] if found is not None else request.match_info["key"], data)
        except BadLabel as exc:
            return _json({"error": str(exc)}, status=400)
        if found is None:
            return _json({"error": "no such record in the results store"}, status=404)
        review = dataclasses.replace(review, reviewed_at=time.time())
        created = await self._read(request, self._add_review, review)
        return _json(
            {"review": review.to_dict(), "created": created, "replaced": not created}, status=201 if created else 200
        )

    async def api_add_feedback(self, request: web.Request) -> web.StreamResponse:
        """``POST /api/v1/records/{trace_id}/feedback``: 201 stored for a stored record, 202 stored for a trace the
        results store does not hold (yet: feedback may come before its trace is scored), 200 for a repeated
        ``Idempotency-Key`` (stored once)."""
        outcome = self.feedback_authorized(request)
        if outcome is not Outcome.OK:
            return self._refusal(outcome, request, "send feedback (a read-only token)")
        key = request.match_info["key"]
        if not TRACE_ID.fullmatch(key):
            return _json({"error": "the trace id must be 32 hexadecimal digits"}, status=400)
        idempotency = request.headers.get("Idempotency-Key")
        if idempotency is not None and not 0 < len(idempotency.strip()) <= MAX_IDEMPOTENCY_KEY:
            return _json({"error": f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} characters"}, status=400)
        body = await self._body(request)
        if body is None:
            return _json({"error": f"the body is larger than {self.review.max_body_bytes} bytes"}, status=413)
        try:
            item = _feedback_from_json(key.lower(), _json_body(body), idempotency)
        except BadLabel as exc:
            return _json({"error": str(exc)}, status=400)
        try:
            added, stored = await self._read(request, self._add_feedback, item)
        except BadLabel as exc:
            return _json({"error": str(exc)}, status=400)
        if not added:
            return _json({"duplicate": True, "feedback_id": item.feedback_id, "trace_id": item.trace_id})
        return _json(
            {
                "duplicate": False,
                "feedback": item.to_dict(),
                "record": "stored" if stored else "not stored yet",
            },
            status=201 if stored else 202,
        )

    def _add_feedback(self, item: Feedback) -> tuple[bool, bool]:
        """Store ``item`` (counted by the intake); whether it was new, and whether its record is stored."""
        added = self.feedback.add([item])[0]
        store = self.store()
        return added, store is not None and store.record(item.trace_id) is not None

    def _queue_and_metrics(self, metric: str) -> tuple[ReviewQueue, list[str]]:
        return self._queue(metric), self._facets()["metrics"]

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


def _bearer(header: str | None) -> str:
    """The token of an ``Authorization: Bearer`` header ("" for none)."""
    method, _, credentials = (header or "").strip().partition(" ")
    return credentials.strip() if method.lower() == "bearer" else ""


def _form_fields(body: bytes) -> dict[str, str]:
    """A form body's fields (the first of each name); bytes that are no UTF-8 become U+FFFD (aiohttp's form parser
    raised on them: a 500 for anyone at the login form)."""
    return {k: v[0] for k, v in urllib.parse.parse_qs(body.decode("utf-8", "replace"), True).items()}


def _json_body(body: bytes) -> Any:
    """A review or feedback body as JSON; :class:`BadLabel` saying why it is not one we can store: not JSON (or
    nested past the parser's depth), or holding a lone surrogate, which is no Unicode text (SQLite refused it with a
    500)."""
    try:
        data = loads(body)
    except ValueError:
        raise BadLabel("the body must be a JSON object") from None
    bad = lone_surrogate(data)
    if bad is not None:
        raise BadLabel(f"the body holds a lone surrogate ({bad}), which is not Unicode text")
    return data


def _feedback_from_json(trace_id: str, data: Any, idempotency: str | None) -> Feedback:
    """A :class:`Feedback` from the API's body (``value``, ``name``, ``comment``); :class:`BadLabel` saying what is
    wrong. An ``Idempotency-Key`` becomes its ``feedback_id`` (per trace), so a retry is stored once."""
    if not isinstance(data, dict):
        raise BadLabel("the body must be a JSON object")
    if "value" not in data:
        raise BadLabel("value is missing: a bool or a number in [0, 1]")
    value = feedback_value(data["value"])
    name = data.get("name", "user_feedback")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise BadLabel(f"name must be 1-{MAX_NAME_CHARS} characters")
    comment = data.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise BadLabel("comment must be a string")
    return Feedback(
        trace_id=trace_id,
        value=value,
        name=name.strip(),
        comment=cut(comment, MAX_COMMENT_CHARS),
        source="api",
        feedback_id=f"api:{trace_id}:{idempotency.strip()}" if idempotency is not None else None,
        received_at=time.time(),
    )


def _queue_params(request: web.Request) -> tuple[str, Reason | None]:
    """The queue's metric (default faithfulness) and reason filter (None: every reason) from the query string."""
    metric = (request.query.get("metric") or DEFAULT_METRIC).strip()[:64] or DEFAULT_METRIC
    reason = request.query.get("reason")
    return metric, next((r for r in REASONS if r == reason), None)


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

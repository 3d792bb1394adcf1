"""Which ``Host`` and ``Origin`` a listener answers: the defence against DNS rebinding.

A web page the operator opens can have its name rebound to 127.0.0.1 after it loaded. Its script then reaches a
loopback listener *same-origin*: the browser lets it read the replies (the records, ``/metrics``) and send them
on. What gives it away is the name: the request carries the page's name in ``Host`` (and, on a fetch that sends
one, in ``Origin``). So every HTTP listener answers only names it is known by, as Vite's ``server.allowedHosts``
and Django's ``ALLOWED_HOSTS`` do:

* IP literals (a page cannot be served from an address that is not its own, so no rebinding arrives by one);
* ``localhost`` and names under ``.localhost`` (RFC 6761: they only ever resolve to loopback);
* the host the listener is bound to, when it is a name;
* the names in ``listen.allowed_hosts``: ``collector`` (that name), ``.example.com`` (it and every name under
  it), ``*`` (any name: the check is off).

A request with another ``Host`` gets 421 Misdirected Request; one whose ``Origin`` names another host gets 403,
and so does ``Origin: null`` (a sandboxed frame, a file page, a redirect) unless the browser's ``Sec-Fetch-Site``
says the request is its own page's (a form posted under ``Referrer-Policy: no-referrer`` also sends ``null``). Requests without ``Origin`` (every non-browser client) are
judged by ``Host`` alone, and one without ``Host`` (HTTP/1.0) is not a browser's and is answered. The gRPC
listener needs no check: browsers cannot speak gRPC (HTTP/2 without TLS), and an HTTP/1.1 request to it is
refused by grpc-core before any handler runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from aiohttp import web

#: Reasons a request is refused (label ``reason`` of ``ragtrace_http_requests_refused_total``).
HOST = "host"
ORIGIN = "origin"

_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::", "*"})


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_name(header: str) -> str:
    """The name in a ``Host`` header value or a URL's netloc, lower-cased, without port or IPv6 brackets."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:9464
        return header[1 : header.find("]")] if "]" in header else header[1:]
    name, sep, port = header.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        return name.rstrip(".")
    return header.rstrip(".")


def is_loopback(bind_host: str) -> bool:
    """Whether a listener bound to ``bind_host`` is reachable from this machine only."""
    name = host_name(bind_host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """The names one collector's listeners answer (see the module docstring); immutable once built."""

    def __init__(self, bind_host: str = "127.0.0.1", allowed_hosts: Sequence[str] = ()) -> None:
        names = {n.strip().lower().rstrip(".") for n in allowed_hosts if n.strip()}
        self.any = "*" in names
        self.exact = {n for n in names if not n.startswith(".")} | {"localhost"}
        self.suffixes = tuple(n for n in names if n.startswith(".") and len(n) > 1) + (".localhost",)
        bind = host_name(bind_host)
        if bind not in _WILDCARD_BINDS and not _is_ip(bind):
            self.exact.add(bind)

    def allows(self, name: str) -> bool:
        """Whether a host name (as :func:`host_name` returns it) is one the listeners answer."""
        if self.any or not name or _is_ip(name) or name in self.exact:
            return True
        return any(name.endswith(s) or name == s[1:] for s in self.suffixes)

    def refusal(self, host: str | None, origin: str | None, fetch_site: str | None = None) -> str | None:
        """Why a request with these ``Host``, ``Origin`` and ``Sec-Fetch-Site`` headers is refused (:data:`HOST`,
        :data:`ORIGIN`), or None when it is answered."""
        if host is not None and not self.allows(host_name(host)):
            return HOST
        if origin is not None and not self.any:
            if origin.strip().lower() == "null":
                return None if (fetch_site or "").strip().lower() in ("same-origin", "none") else ORIGIN
            netloc = urlsplit(origin.strip()).netloc
            if not netloc or not self.allows(host_name(netloc)):
                return ORIGIN
        return None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_check_middleware(policy: HostPolicy, refused: Callable[[str], None]) -> Callable[..., Awaitable]:
    """An aiohttp middleware answering 421 / 403 for a request :meth:`HostPolicy.refusal` refuses, after
    calling ``refused(reason)`` (to count it); other requests go on to their handler."""

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = request.headers
        reason = policy.refusal(headers.get("Host"), headers.get("Origin"), headers.get("Sec-Fetch-Site"))
        if reason is None:
            return await handler(request)
        refused(reason)
        if reason == HOST:
            return web.Response(
                status=421,
                text="misdirected request: this collector does not answer that host name"
                " (add it to listen.allowed_hosts)\n",
            )
        return web.Response(
            status=403, text="forbidden: cross-origin request from a host this collector does not answer\n"
        )

    return check_host

"""An exporter's sending side: one coroutine on its own event loop in a daemon thread, and how it reads replies.

Exporters that talk to a downstream (forwarding, Phoenix) queue work from the collector's threads and send it
from here, so a slow or dead downstream never holds up the receivers' event loop or the scoring worker.

A downstream is not trusted with the collector's memory or its data: a reply's body is read up to
:data:`MAX_REPLY_BYTES` and the connection hung up on the rest (a 256 MiB answer cost 0.5-1.3 GiB when read
whole), and a redirect is never followed (a 302 turned the POST into a GET of a login page that answered 200,
counted sent; a 307 re-posts the data wherever it points): it is a failure, logged with where it pointed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp

from ragtrace_collector.internal.urls import mask_credentials

log = logging.getLogger(__name__)

MAX_REPLY_BYTES = 64 * 1024  # of a downstream's reply body, the most read: OTLP and Phoenix answer a few bytes


def describe_status(status: int, location: str | None) -> str:
    """``HTTP <status>`` for a log line or drop detail; for a redirect, where it pointed (credentials masked)."""
    if 300 <= status < 400:
        where = mask_credentials(location)[:300] if location else "nowhere (no Location)"
        return f"HTTP {status} redirect to {where}, not followed"
    return f"HTTP {status}"


async def read_reply(reply: aiohttp.ClientResponse) -> bytes:
    """At most :data:`MAX_REPLY_BYTES` of ``reply``'s body; past them the connection is closed, not drained, so
    an endless or huge answer costs neither memory nor the time to read it."""
    head = b""
    while len(head) < MAX_REPLY_BYTES:
        chunk = await reply.content.read(MAX_REPLY_BYTES - len(head))
        if not chunk:
            return head
        head += chunk
    if not reply.content.at_eof():
        reply.close()
    return head


class SenderLoop:
    """Runs ``run()`` on a private loop once :meth:`start` is called; ``wake`` is the loop's wake-up event."""

    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]], what: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.wake = asyncio.Event()
        self._run = run
        self._what = what  # named in the log when the coroutine dies
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def start(self) -> None:
        """Start sending; call it once the owner is fully built (the coroutine reads the owner's state)."""
        self._task = self.loop.create_task(self._run())
        self._thread.start()

    def signal(self) -> None:
        """Wake the sending side from any thread."""
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # the loop already ended
            pass

    def stop(self, timeout: float) -> None:
        """Let the coroutine finish, then cancel what is in flight: ``timeout`` seconds in all, so a downstream
        that never answers cannot hold a graceful stop past its bound (the last tenth, at most 1 s, is left
        for the cancellation to be counted; a thread still busy past it is a daemon and does not hold the exit)."""
        self.signal()
        timeout = max(0.0, timeout)
        grace = min(1.0, timeout / 10)
        self._thread.join(timeout - grace)
        if self._thread.is_alive() and self._task is not None:
            try:
                self.loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:
                pass
            self._thread.join(max(grace, 0.05))
        if not self._thread.is_alive():
            self.loop.close()

    def _serve(self) -> None:
        assert self._task is not None
        try:
            self.loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s stopped", self._what)

"""Identical judge calls paid for once: finished replies in an LRU, and concurrent identical calls sharing the
one in flight (each counted as a cache hit)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from ragtrace_collector.scoring.judge import JudgeError, record_usage

V = TypeVar("V")


class ReplyCache(Generic[V]):
    """At most ``size`` finished results by key; a call in flight is shared only within its own event loop."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._done: OrderedDict[str, V] = OrderedDict()
        self._inflight: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}

    async def get(self, key: str, compute: Callable[[], Awaitable[V]], keep: Callable[[V], V] | None = None) -> V:
        """The result for ``key``: cached, shared with the identical call in flight, or computed now.

        ``keep`` trims what is cached (the full result is still returned to this caller and its waiters). A
        failure is not cached; waiters get it too, and a cancelled owner leaves them a retryable error."""
        if key in self._done:
            self._done.move_to_end(key)
            record_usage(cache_hits=1)
            return self._done[key]
        loop = asyncio.get_running_loop()
        inflight = self._inflight.get(key)
        if inflight is not None and inflight[0] is loop:
            record_usage(cache_hits=1)
            result: V = await asyncio.shield(inflight[1])
            return result
        future: asyncio.Future[Any] = loop.create_future()
        self._inflight[key] = (loop, future)
        try:
            result = await compute()
        except BaseException as exc:
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):  # only the owner was cancelled, not its waiters
                    exc = JudgeError("the identical call this one was waiting for was cancelled", retryable=True)
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        else:
            future.set_result(result)
            self._done[key] = keep(result) if keep is not None else result
            while len(self._done) > self.size:
                self._done.popitem(last=False)
            return result
        finally:
            if self._inflight.get(key, (None, None))[1] is future:
                del self._inflight[key]

"""Queue backends behind one interface, chosen by URL.

* ``sqlite:///relative/path.sqlite`` or ``sqlite:////absolute/path.sqlite`` — the embedded
  durable default (:mod:`ragtrace_collector.queue.sqlite`); ``?synchronous=full`` fsyncs every commit.
* ``redis://host:port/db`` (and ``rediss://``, ``unix://``) — Redis Streams for scale-out
  (:mod:`ragtrace_collector.queue.redis`); ``spill`` says where a receiver holds records while Redis is
  unreachable (:mod:`ragtrace_collector.queue.spill`).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from ragtrace_collector.internal.urls import mask_credentials
from ragtrace_collector.queue.base import Leased, QueueUnwritable, RecordQueue

__all__ = ["Leased", "QueueUnwritable", "RecordQueue", "default_queue_url", "open_queue"]


def default_queue_url(data_dir: str | Path) -> str:
    """The embedded queue's URL inside the collector's data directory."""
    return f"sqlite:///{Path(data_dir) / 'queue.sqlite'}"


def open_queue(url: str, max_depth: int = 10000, spill: str | None = None) -> RecordQueue:
    """Open the queue named by ``url``, holding at most ``max_depth`` records (``spill``: Redis URLs only)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        from ragtrace_collector.queue.sqlite import SQLiteQueue

        # sqlite:///rel/path -> path "/rel/path" -> "rel/path"; sqlite:////abs/path -> "/abs/path".
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if parts.netloc or not path:
            raise ValueError(
                f"sqlite queue URL needs a path and no host, e.g. sqlite:///data/queue.sqlite, got {url!r}"
            )
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise ValueError(f"unknown sqlite queue option(s) {sorted(unknown)} in {url!r}")
        return SQLiteQueue(path, max_depth=max_depth, synchronous=options.get("synchronous", "normal"))
    if scheme in ("redis", "rediss", "unix"):
        # The Redis Streams backend lives in its own module so the embedded default never
        # imports the redis client.
        from ragtrace_collector.queue.redis import open_redis_queue

        return open_redis_queue(url, max_depth, spill)
    raise ValueError(f"unsupported queue URL {mask_credentials(url)!r}: use sqlite:///path or redis://host:port/db")

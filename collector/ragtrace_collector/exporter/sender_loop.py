"""An exporter's sending side: one coroutine on its own event loop in a daemon thread.

Exporters that talk to a downstream (forwarding, Phoenix) queue work from the collector's threads and send it
from here, so a slow or dead downstream never holds up the receivers' event loop or the scoring worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


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
        """Let the coroutine finish within ``timeout``; past it, cancel what is in flight (5 s more at most)."""
        self.signal()
        self._thread.join(timeout)
        if self._thread.is_alive() and self._task is not None:
            try:
                self.loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:
                pass
            self._thread.join(5.0)
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

"""The component contract: one ``start`` / ``shutdown(timeout)`` lifecycle for every receiver, processor stage,
exporter and store, and :class:`Lifecycle`, which starts them in order and shuts them down in reverse.

Modelled on the OpenTelemetry Collector's ``component.Component`` (``Start``/``Shutdown``: the service starts
components dependencies first and shuts them down in reverse, every one of them even when one fails, the errors
collected) and on opentelemetry-python's ``SpanExporter``/``SpanProcessor`` (``shutdown`` bounded, idempotent).

Two calling conventions, one contract: :class:`Component` is driven from a thread (a store, an exporter with its own
sender thread: scripts and the CLI call it as it is), :class:`AsyncComponent` lives on the event loop (a listener, a
periodic task, the scoring worker). :class:`Lifecycle` takes either, telling them apart by type, never by probing.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

#: A component stopped once the time is spent still gets this long to release what it holds.
FLOOR_SECONDS = 0.5
#: A component bounds itself with the timeout it is given; past it (plus this) it is reported as timed out.
MARGIN_SECONDS = 0.5


#: How long a listener (the OTLP receivers, the /metrics and explorer listener) lets requests in flight finish once
#: it stops accepting (never more than the shutdown's timeout); aiohttp's own default is 60 s.
LISTENER_GRACE_SECONDS = 1.0


class Component(ABC):
    """A part of the collector driven from a thread: built from its typed config section, ready to use once
    :meth:`start` returned, released by :meth:`shutdown`."""

    def start(self) -> None:
        """Begin work (threads, connections); raise to refuse. Most are ready once built: nothing to do."""

    @abstractmethod
    def shutdown(self, timeout: float | None = None) -> None:
        """Send or write what is held and release everything, returning within ``timeout`` seconds (None: the
        component's own bound); what is left undone is counted, not waited for. Idempotent. Raises to report a
        failure; whoever drives the lifecycle still shuts the other components down."""


class AsyncComponent(ABC):
    """A part of the collector living on the event loop: the same contract as :class:`Component`, awaited."""

    async def start(self) -> None:
        """Bind, spawn tasks; raise to refuse (the components started before it are then shut down)."""

    @abstractmethod
    async def shutdown(self, timeout: float | None = None) -> None:
        """As :meth:`Component.shutdown`, on the loop: within ``timeout`` seconds, idempotent, raising to report."""


AnyComponent = Component | AsyncComponent
C = TypeVar("C", bound=AnyComponent)


@dataclass(frozen=True)
class Failure:
    """One component that failed to shut down, or ran out of time (``error`` None)."""

    component: str
    error: BaseException | None

    def __str__(self) -> str:
        if self.error is None:
            return f"{self.component}: timed out"
        return f"{self.component}: {type(self.error).__name__}: {self.error}"


class Closing(Component):
    """A resource whose one release is a ``close()`` (a stage's state, a budget): the contract around it,
    so the lifecycle treats it as any other component."""

    def __init__(self, close: Callable[[], object]) -> None:
        self._close = close
        self._closed = False

    def shutdown(self, timeout: float | None = None) -> None:
        if not self._closed:
            self._closed = True
            self._close()


class Task(AsyncComponent):
    """A coroutine run for the process's life (a periodic sweep, a watch): started as a task, cancelled at
    shutdown, then ``then`` (a last flush) run within what remains."""

    def __init__(
        self, name: str, run: Callable[[], Awaitable[object]], then: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        self.name = name
        self._run = run
        self._then = then
        self._task: asyncio.Task[object] | None = None
        self._done = False

    async def start(self) -> None:
        async def run() -> object:
            return await self._run()

        self._task = asyncio.create_task(run(), name=self.name)

    async def shutdown(self, timeout: float | None = None) -> None:
        if self._done:
            return
        self._done = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # it died before the stop: said once, the flush still runs
                log.warning("%s had stopped: %s: %s", self.name, type(exc).__name__, exc)
        if self._then is not None:
            await self._then()


class Lifecycle:
    """Components started in order, shut down in reverse, each past the failures of the others.

    Each :meth:`start` call begins a stage; :meth:`start_beside` adds a component to the last one: siblings (two
    pipelines that do not feed each other) shut down side by side, neither waiting on the other's downstream. One
    deadline bounds a shutdown: each stage gets what remains of it (at least :data:`FLOOR_SECONDS`, so a release
    still runs once the time is spent), and a component that raises or overruns is noted in the returned
    :class:`Failure` list while the next stages still shut down. A start that fails shuts down that component and,
    in reverse, what was started before it, and raises: a component's ``shutdown`` must tolerate a failed start.
    """

    def __init__(self) -> None:
        self._stages: list[list[tuple[str, AnyComponent]]] = []

    @property
    def names(self) -> list[str]:
        """The components held, in start order."""
        return [name for stage in self._stages for name, _ in stage]

    async def start(self, name: str, component: C) -> C:
        """Start ``component`` as a new stage, after every one held; returns it."""
        await self._start(name, component)
        self._stages.append([(name, component)])
        return component

    async def start_beside(self, name: str, component: C) -> C:
        """Start ``component`` in the last stage: it shuts down side by side with the components there."""
        if not self._stages:
            return await self.start(name, component)
        await self._start(name, component)
        self._stages[-1].append((name, component))
        return component

    def adopt(self, name: str, component: AnyComponent) -> None:
        """Hold a component already started elsewhere (a new stage), so this lifecycle shuts it down."""
        self._stages.append([(name, component)])

    async def _start(self, name: str, component: AnyComponent) -> None:
        try:
            if isinstance(component, AsyncComponent):
                await component.start()
            else:
                await asyncio.to_thread(component.start)
        except BaseException:
            # as the OpenTelemetry Collector does, the one that failed is shut down too (it may hold half of what it
            # was starting), then every one before it
            self._stages.append([(name, component)])
            failures = await self.shutdown(FLOOR_SECONDS * (1 + len(self.names)))
            for failure in failures:
                log.warning("after %s failed to start, shutting down %s", name, failure)
            raise

    async def shutdown(self, timeout: float) -> list[Failure]:
        """Shut every held component down within ``timeout`` seconds, last started first; what failed or ran out
        of time. Idempotent: a second call finds nothing held."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        failures: list[Failure] = []
        stages, self._stages = self._stages, []
        for stage in reversed(stages):
            left = max(0.0, deadline - loop.time())
            outcomes = await asyncio.gather(*(_shutdown(name, c, left) for name, c in stage))
            failures += [f for f in outcomes if f is not None]
        return failures


async def _shutdown(name: str, component: AnyComponent, timeout: float) -> Failure | None:
    try:
        if isinstance(component, AsyncComponent):
            step: Awaitable[object] = component.shutdown(timeout)
        else:
            step = asyncio.to_thread(component.shutdown, timeout)
        await asyncio.wait_for(step, timeout=max(FLOOR_SECONDS, timeout + MARGIN_SECONDS))
    except asyncio.TimeoutError:
        return Failure(name, None)
    except Exception as exc:
        return Failure(name, exc)
    return None

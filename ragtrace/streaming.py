"""Streams: the span of a function that yields, or returns a stream, stays open until the
stream is exhausted, closed, or garbage-collected, and then records how it went.

Timing (all from ``time.perf_counter``):

* **TTFT** (``gen_ai.response.time_to_first_chunk``): first chunk time − call time.
* **TPOT** (``ragtrace.response.time_per_output_token``): ``(end_time − first_chunk_time)
  / (output_tokens − 1)`` when the stream reported token usage (``basis="tokens"``), else
  the same interval divided by ``(chunk_count − 1)`` (``basis="chunks"``). ``end_time`` is
  when the stream reported its end (exhaustion): the arrival of the last chunk plus the
  consumer's handling of it. Reading the clock only at the first chunk and at the end keeps
  the per-chunk cost to a list append. Recorded only for streams that completed (not for
  abandoned or failed ones, whose last interval is not a token interval) with at least two
  tokens/chunks. Like any pull-based measure it includes the consumer's time between chunks.

Context: a traced *generator function's* body runs, step by step, inside a private copy of
the caller's context in which the span is current (``contextvars.Context.run``), so spans
created inside the body nest under it, and nothing leaks into the caller's context between
chunks (a consequence: context variables the body sets are not visible to the caller). Async
generators attach the span around each step instead. Streams *returned* by a function (an
OpenAI/litellm stream object, any iterator) are wrapped in a proxy that forwards every other
attribute to the original object.
"""

from __future__ import annotations

import contextvars
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator
from time import perf_counter
from typing import Any

import wrapt
from opentelemetry.context import attach, detach

from . import attributes as A
from . import safety


class StreamState:
    """What one open stream has seen so far; :meth:`finish` ends the span exactly once.

    Holds no reference to the stream object itself, so a ``weakref.finalize`` on the stream
    can end the span when an abandoned stream is collected.
    """

    __slots__ = (
        "__weakref__",
        "abandoned",
        "chunks",
        "ended",
        "on_finish",
        "otel_ctx",
        "span",
        "start_ns",
        "t_first",
        "t_last",
        "t_start",
    )

    def __init__(
        self,
        span: Any,
        on_finish: Callable[[StreamState, BaseException | None], None],
        otel_ctx: Any,
        t_start: float | None = None,
    ) -> None:
        self.span = span
        self.on_finish = on_finish
        self.t_start = perf_counter() if t_start is None else t_start
        self.start_ns = time.time_ns()
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.chunks: list = []
        self.abandoned = False
        self.ended = False
        self.otel_ctx = otel_ctx

    def finish(self, error: BaseException | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        try:
            self.on_finish(self, error)
        except BaseException as exc:
            safety.reraise_interrupt(exc)  # on_finish has ended the span
            safety.report("stream.finish", exc)
            try:
                self.span.end()
            except Exception:
                pass

    def finish_abandoned(self) -> None:
        """Called by the garbage collector's finalizer: the consumer dropped the stream."""
        if not self.ended:
            self.abandoned = True
            self.finish(None)

    def end_time_ns(self) -> int | None:
        """For a collected stream, the span ends at its last activity, not at collection time."""
        if not self.abandoned:
            return None
        last = self.t_last if self.t_last is not None else self.t_first
        if last is None:
            return None
        return self.start_ns + int((last - self.t_start) * 1e9)

    def stream_attributes(self, output_tokens: int | None, failed: bool = False) -> dict:
        """TTFT, TPOT (see module docstring), chunk count, abandonment."""
        n = len(self.chunks)
        attrs: dict[str, Any] = {A.GEN_AI_REQUEST_STREAM: True, A.RAGTRACE_CHUNK_COUNT: n}
        if self.t_first is not None:
            attrs[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = max(0.0, self.t_first - self.t_start)
            if self.t_last is not None and not self.abandoned and not failed:
                span_s = max(0.0, self.t_last - self.t_first)
                if output_tokens is not None and output_tokens > 1:
                    attrs[A.RAGTRACE_TIME_PER_OUTPUT_TOKEN] = span_s / (output_tokens - 1)
                    attrs[A.RAGTRACE_TPOT_BASIS] = "tokens"
                elif n > 1:
                    attrs[A.RAGTRACE_TIME_PER_OUTPUT_TOKEN] = span_s / (n - 1)
                    attrs[A.RAGTRACE_TPOT_BASIS] = "chunks"
        if self.abandoned:
            attrs[A.RAGTRACE_STREAM_ABANDONED] = True
        return attrs


def traced_generator(
    gen: Generator[Any, Any, Any], state: StreamState, run: Callable[..., Any]
) -> Generator[Any, Any, Any]:
    """Re-yield ``gen``'s items, running each step via ``run`` (a ``Context.run``).

    Forwards ``send``/``throw``/``close`` and the generator's return value. Per chunk it
    costs one generator resume, one ``Context.run`` and one list append; the clock is read
    only at the first chunk and at the end (see the module docstring for TPOT).
    """
    nxt = gen.__next__
    app = state.chunks.append
    error: BaseException | None = None
    end: float | None = None
    try:
        try:
            c = run(nxt)
        except StopIteration as stop:
            end = perf_counter()
            return stop.value
        state.t_first = perf_counter()
        app(c)
        while True:
            try:
                sent = yield c
            except GeneratorExit:
                state.abandoned = True
                end = perf_counter()
                run(gen.close)
                raise
            except BaseException as thrown:  # gen.throw() from the consumer: forward it
                try:
                    c = run(gen.throw, thrown)
                except StopIteration as stop:
                    end = perf_counter()
                    return stop.value
            else:
                try:
                    c = run(nxt) if sent is None else run(gen.send, sent)
                except StopIteration as stop:
                    end = perf_counter()
                    return stop.value
            app(c)
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = exc
        end = perf_counter()
        raise
    finally:
        state.t_last = end
        state.finish(error)


async def traced_async_generator(agen: AsyncGenerator[Any, Any], state: StreamState) -> AsyncGenerator[Any, Any]:
    """Async counterpart of :func:`traced_generator`; the span is attached around each step."""
    ctx = state.otel_ctx
    app = state.chunks.append
    error: BaseException | None = None
    end: float | None = None
    action = 0
    payload: Any = None
    first = True
    try:
        while True:
            token = attach(ctx)
            try:
                if action == 0:
                    c = await agen.__anext__()
                elif action == 1:
                    c = await agen.asend(payload)
                else:
                    c = await agen.athrow(payload)
            except StopAsyncIteration:
                end = perf_counter()
                return
            finally:
                detach(token)
            if first:
                state.t_first = perf_counter()
                first = False
            app(c)
            try:
                sent = yield c
            except GeneratorExit:
                state.abandoned = True
                end = perf_counter()
                aclose = getattr(agen, "aclose", None)
                if aclose is not None:
                    token = attach(ctx)
                    try:
                        await aclose()
                    finally:
                        detach(token)
                raise
            except BaseException as thrown:
                action, payload = 2, thrown
            else:
                if sent is None:
                    action = 0
                else:
                    action, payload = 1, sent
    except GeneratorExit:
        raise
    except BaseException as exc:
        error = exc
        end = perf_counter()
        raise
    finally:
        state.t_last = end
        state.finish(error)


class StreamProxy(wrapt.ObjectProxy):
    """Wraps a stream object a function *returned* (OpenAI ``Stream``, litellm
    ``CustomStreamWrapper``, any iterator or async iterator). Iteration is observed;
    everything else (``.response``, context-manager use, attributes) goes to the original.
    """

    def __init__(self, wrapped: Any, state: StreamState) -> None:
        super().__init__(wrapped)
        self._self_state = state
        self._self_it = None
        self._self_ait = None
        weakref.finalize(self, state.finish_abandoned)

    # --- sync iteration
    def __iter__(self) -> StreamProxy:
        return self

    def __next__(self) -> Any:
        it = self._self_it
        if it is None:
            w = self.__wrapped__
            it = self._self_it = w if hasattr(type(w), "__next__") else iter(w)
        st = self._self_state
        try:
            c = next(it)
        except StopIteration:
            st.t_last = perf_counter()
            st.finish(None)
            raise
        except BaseException as exc:
            st.t_last = perf_counter()
            st.finish(exc)
            raise
        if st.t_first is None:
            st.t_first = perf_counter()
        st.chunks.append(c)
        return c

    # --- async iteration
    def __aiter__(self) -> StreamProxy:
        return self

    async def __anext__(self) -> Any:
        it = self._self_ait
        if it is None:
            w = self.__wrapped__
            it = self._self_ait = w if hasattr(type(w), "__anext__") else w.__aiter__()
        st = self._self_state
        try:
            c = await it.__anext__()
        except StopAsyncIteration:
            st.t_last = perf_counter()
            st.finish(None)
            raise
        except BaseException as exc:
            st.t_last = perf_counter()
            st.finish(exc)
            raise
        if st.t_first is None:
            st.t_first = perf_counter()
        st.chunks.append(c)
        return c

    # --- ending early
    def _abandon(self) -> None:
        st = self._self_state
        if not st.ended:
            st.abandoned = True
            st.t_last = perf_counter()
            st.finish(None)

    def close(self) -> Any:
        try:
            close = getattr(self.__wrapped__, "close", None)
            return close() if close is not None else None
        finally:
            self._abandon()

    async def aclose(self) -> Any:
        try:
            aclose = getattr(self.__wrapped__, "aclose", None)
            if aclose is not None:
                return await aclose()
            return None
        finally:
            self._abandon()

    def __enter__(self) -> StreamProxy:
        enter = getattr(self.__wrapped__, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc: object) -> Any:
        try:
            ex = getattr(self.__wrapped__, "__exit__", None)
            return ex(*exc) if ex is not None else None
        finally:
            self._abandon()

    async def __aenter__(self) -> StreamProxy:
        enter = getattr(self.__wrapped__, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc: object) -> Any:
        try:
            ex = getattr(self.__wrapped__, "__aexit__", None)
            return (await ex(*exc)) if ex is not None else None
        finally:
            self._abandon()


def new_private_context(otel_ctx: Any) -> contextvars.Context:
    """A copy of the current context in which ``otel_ctx`` is the active OTel context."""
    ctx = contextvars.copy_context()
    ctx.run(attach, otel_ctx)
    return ctx

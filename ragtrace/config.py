"""``ragtrace.init()``: where spans go, and the limits and privacy rules applied before they leave.

Every setting is resolved argument → environment (``RAGTRACE_*`` first, then the standard
``OTEL_*`` variable) → default. The decorators read :data:`SETTINGS` on every call, so
they work before and without ``init()``: until a provider exists they use the global
OpenTelemetry proxy tracer, which is a no-op until the app (or ``init()``) sets one.
"""

from __future__ import annotations

import atexit
import difflib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import safety
from .attributes import OPENINFERENCE_PROJECT_NAME
from .recent import watch

TRACER_NAME = "ragtrace"

DEFAULT_SERVICE_NAME = "ragtrace-app"
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318/v1/traces"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
DEFAULT_PROTOCOL = "http/protobuf"
DEFAULT_MAX_ATTRIBUTE_LENGTH = 16_384  # characters per string attribute
DEFAULT_MAX_DOCUMENTS = 20  # documents recorded per span (the total is recorded too)
DEFAULT_MAX_SPAN_CHARS = 262_144  # characters of text per span, all attributes together
DEFAULT_MAX_QUEUE_SIZE = 2048  # spans waiting for export; beyond this they are dropped and counted
DEFAULT_EXPORT_TIMEOUT_S = 5.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0  # the most ragtrace may add to the app's exit, flush included

REDACTED = "[REDACTED]"
logger = logging.getLogger("ragtrace")

Redactor = Callable[[str], str]


#: The environment variables the SDK itself reads (the ``OTEL_*`` ones it also reads are OpenTelemetry's).
SDK_ENV_VARS = frozenset(
    {
        "RAGTRACE_CAPTURE_CONTENT",
        "RAGTRACE_ENDPOINT",
        "RAGTRACE_EXPORT_TIMEOUT",
        "RAGTRACE_HEADERS",
        "RAGTRACE_MAX_ATTRIBUTE_LENGTH",
        "RAGTRACE_MAX_DOCUMENTS",
        "RAGTRACE_MAX_QUEUE_SIZE",
        "RAGTRACE_MAX_SPAN_CHARS",
        "RAGTRACE_PROTOCOL",
        "RAGTRACE_SERVICE_NAME",
        "RAGTRACE_SHUTDOWN_TIMEOUT",
    }
)


def _warn_misspelt_env(environ: Mapping[str, str]) -> list[str]:
    """Warn of each ``RAGTRACE_*`` variable a letter or two from one the SDK reads (``RAGTRACE_ENDPIONT``): a typo
    that would otherwise be ignored in silence, spans going to the default endpoint. Names far from every SDK
    setting (the collector's ``RAGTRACE_DATA_DIR``, ``RAGTRACE_SAMPLING__RATE``...) are left alone. Returns the
    warnings (for tests)."""
    said = []
    for name in sorted(environ):
        if name.startswith("RAGTRACE_") and name not in SDK_ENV_VARS:
            close = difflib.get_close_matches(name, SDK_ENV_VARS, n=1, cutoff=0.85)
            if close:
                said.append(f"{name} is not a ragtrace SDK setting and is ignored; did you mean {close[0]}?")
                logger.warning(said[-1])
    return said


def _env(*names: str) -> str | None:
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.strip() != "":
            return v.strip()
    return None


_TRUE = ("1", "true", "yes", "on")
# opentelemetry-util-genai's content-capturing modes: content on spans or not
_CAPTURE_MODES = {"span_only": True, "span_and_event": True, "event_only": False, "no_content": False}


def _env_bool(*names: str) -> bool | None:
    """A boolean from the environment; also accepts the GenAI capture modes (SPAN_ONLY, NO_CONTENT...)."""
    v = _env(*names)
    if v is None:
        return None
    low = v.lower()
    if low in _CAPTURE_MODES:
        return _CAPTURE_MODES[low]
    return low in _TRUE


def _env_int(*names: str) -> int | None:
    v = _env(*names)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        safety.report("config.env_int", ValueError(f"{names[0]}={v!r} is not an integer"))
        return None


def _env_float(*names: str) -> float | None:
    v = _env(*names)
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        safety.report("config.env_float", ValueError(f"{names[0]}={v!r} is not a number"))
        return None


def make_redactor(redact: Redactor | Iterable[str | Pattern[str]] | None) -> Redactor | None:
    """A callable ``str -> str`` from a callable, or from a list of regexes (matches → ``[REDACTED]``)."""
    if redact is None:
        return None
    if callable(redact):
        return redact
    patterns = [re.compile(p) if isinstance(p, str) else p for p in redact]
    if not patterns:
        return None
    if len(patterns) == 1:
        only = patterns[0]
        return lambda s: only.sub(REDACTED, s)
    combined = re.compile("|".join(f"(?:{p.pattern})" for p in patterns))
    return lambda s: combined.sub(REDACTED, s)


@dataclass
class Settings:
    """What the decorators read on every call. Replaced field by field by :func:`init`."""

    capture_content: bool = True
    redact: Redactor | None = None
    max_attribute_length: int = DEFAULT_MAX_ATTRIBUTE_LENGTH
    max_documents: int = DEFAULT_MAX_DOCUMENTS
    max_span_chars: int = DEFAULT_MAX_SPAN_CHARS
    tracer: Any = field(default=None)

    @classmethod
    def from_env(cls) -> Settings:
        s = cls()
        cc = _env_bool("RAGTRACE_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        if cc is not None:
            s.capture_content = cc
        s.max_attribute_length = _env_int("RAGTRACE_MAX_ATTRIBUTE_LENGTH") or s.max_attribute_length
        s.max_documents = _env_int("RAGTRACE_MAX_DOCUMENTS") or s.max_documents
        s.max_span_chars = _env_int("RAGTRACE_MAX_SPAN_CHARS") or s.max_span_chars
        s.tracer = trace.get_tracer(TRACER_NAME)
        return s


SETTINGS = Settings.from_env()


def _cap_timeout(exporter: Any, seconds: float) -> None:
    """Lower an OTLP exporter's per-export budget (retries included) to ``seconds``.

    The OTLP exporters read it from a private field, so this is best effort: where the field
    is not found, the bounded join in :meth:`CountingBatchSpanProcessor.close` still holds.
    An exporter the app passed in is left alone (its ``_timeout`` may mean something else).
    """
    if not type(exporter).__module__.startswith("opentelemetry.exporter.otlp."):
        return
    holders: tuple[Any, ...] = (exporter, getattr(exporter, "_client", None))  # gRPC exporter; HTTP's client
    for holder in holders:
        t = getattr(holder, "_timeout", None)
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            try:
                holder._timeout = max(0.0, min(float(t), seconds))
            except Exception:
                pass


class CountingExporter(SpanExporter):
    """Delegates to the real exporter and counts what got out and what did not.

    Once a shutdown deadline is set, each export gets only the time left (and none after it),
    so the final flush cannot outlive the handle's shutdown timeout.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0
        self.deadline: float | None = None  # time.monotonic() by which exporting must stop
        self._closed = False
        self._close_lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        deadline = self.deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.failed += len(spans)
                return SpanExportResult.FAILURE
            _cap_timeout(self.inner, left)
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the exporter itself broke: count, never propagate
            safety.report("exporter.export", exc)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self.inner.shutdown()

    def abort(self) -> None:
        """Past the deadline: no more exports, and the exporter's retry waits and open calls end now."""
        self.deadline = float("-inf")
        _cap_timeout(self.inner, 0.0)
        _in_background("ragtrace-exporter-abort", self.shutdown, "exporter.abort")  # at exit may not start

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _in_background(name: str, fn: Callable[[], Any], site: str) -> threading.Thread | None:
    """Run ``fn`` in a daemon thread (never keeps the process alive), reporting its failures.

    None where no thread can be started: Python 3.12 refuses them in ``atexit`` hooks.
    """

    def run() -> None:
        try:
            fn()
        except Exception as exc:
            safety.report(site, exc)

    t = threading.Thread(target=run, name=name, daemon=True)
    try:
        t.start()
    except RuntimeError:
        return None
    return t


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` that counts spans it had to drop because its queue was full,
    and whose flush and shutdown are bounded in time.

    The queue is bounded (``max_queue_size``): when the exporter is dead or slow, the app
    keeps running at full speed, memory stays flat and the overflow is counted here. The
    SDK's own ``force_flush`` and ``shutdown`` wait on the exporter's whole retry budget
    (and ``shutdown`` up to 30 s for the worker), which a provider's at-exit hook would add
    to the app's exit: here they run in a daemon thread the caller waits on for a bounded time.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        max_queue_size: int,
        shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(exporter, max_queue_size=max_queue_size, **kwargs)
        self.max_queue_size = max_queue_size
        self.shutdown_timeout_s = shutdown_timeout_s
        self.ended = 0
        self.dropped = 0
        # The SDK's queue is private; its length is the one way to tell a dropped span from a queued one. It is
        # ``_batch_processor._queue`` from opentelemetry-sdk 1.34 (the floor in pyproject.toml for that reason);
        # should a release move it, drops would read 0 for ever: say so once instead.
        batch = self.__dict__.get("_batch_processor")
        self._queue = batch.__dict__.get("_queue") if batch is not None else None
        if self._queue is None:
            logger.warning(
                "ragtrace: this opentelemetry-sdk keeps its span queue elsewhere; spans dropped on a full queue are"
                " not counted (spans_dropped stays 0)"
            )
        self._counting = exporter if isinstance(exporter, CountingExporter) else None
        self._closed = False
        self._closed_lock = threading.Lock()

    def on_end(self, span: Any) -> None:
        self.ended += 1
        q = self._queue
        if q is not None and len(q) >= self.max_queue_size:
            self.dropped += 1
        super().on_end(span)

    def force_flush(self, timeout_millis: int | None = 30000) -> bool:
        """Export what is queued; False if that did not finish within ``timeout_millis``."""
        timeout_s = 30.0 if timeout_millis is None else max(0.0, timeout_millis / 1000)
        ok: list[bool] = [False]

        def flush() -> None:
            ok[0] = bool(BatchSpanProcessor.force_flush(self, timeout_millis))

        t = _in_background("ragtrace-flush", flush, "processor.force_flush")
        if t is None:
            return False
        t.join(timeout_s)
        return not t.is_alive() and ok[0]

    def shutdown(self) -> None:
        """Bounded by ``shutdown_timeout_s`` (also when an app's provider shuts us down at exit)."""
        self.close(time.monotonic() + self.shutdown_timeout_s)

    def close(self, deadline: float) -> bool:
        """Flush and stop by ``deadline`` (``time.monotonic()``); True if everything finished in time.

        Exports get only the time left; past the deadline the exporter is aborted in the
        background and whatever is still queued is dropped (counted as failed).
        """
        with self._closed_lock:
            if self._closed:
                return True
            self._closed = True
        counting = self._counting
        if counting is not None:
            counting.deadline = deadline
        t = _in_background("ragtrace-shutdown", lambda: BatchSpanProcessor.shutdown(self), "processor.shutdown")
        if t is None:
            return self._close_inline(deadline)
        t.join(max(0.0, deadline - time.monotonic()))
        if not t.is_alive():
            return True
        if counting is not None:
            counting.abort()
        return False

    def _close_inline(self, deadline: float) -> bool:
        """No thread to wait on (Python 3.12 at exit): the SDK's batch processor joins its worker
        for the time left only, and its exports are capped by the exporter's deadline."""
        inner = getattr(self, "_batch_processor", None)
        if inner is None or not hasattr(inner, "shutdown"):
            return False
        try:
            inner.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
        except Exception as exc:
            safety.report("processor.shutdown", exc)
            return False
        return time.monotonic() <= deadline


def _make_exporter(protocol: str, endpoint: str, headers: dict[str, str] | None, timeout_s: float) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        insecure = not endpoint.startswith("https://")
        return GrpcExporter(endpoint=endpoint, insecure=insecure, headers=headers, timeout=timeout_s)
    if protocol in ("http/protobuf", "http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter(endpoint=endpoint, headers=headers, timeout=timeout_s)
    raise ValueError(f"unsupported OTLP protocol {protocol!r}: use 'http/protobuf' or 'grpc'")


def _resolve_endpoint(endpoint: str | None, protocol: str) -> str:
    """Argument → RAGTRACE_ENDPOINT → OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) →
    OTEL_EXPORTER_OTLP_ENDPOINT (base; ``/v1/traces`` appended for HTTP) → default."""
    base = endpoint or _env("RAGTRACE_ENDPOINT")
    if base is None:
        exact = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if exact is not None:
            return exact
        base = _env("OTEL_EXPORTER_OTLP_ENDPOINT")
    if base is None:
        return DEFAULT_GRPC_ENDPOINT if protocol == "grpc" else DEFAULT_HTTP_ENDPOINT
    if protocol != "grpc" and not base.rstrip("/").endswith("/v1/traces"):
        base = base.rstrip("/") + "/v1/traces"
    return base


def _parse_headers(raw: str | None) -> dict[str, str] | None:
    if not raw:
        return None
    out = {}
    for part in raw.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out or None


class TracingHandle:
    """What :func:`init` returns: flush, shut down, and read the drop/export counters.

    Until it is shut down, it is shut down at exit (:func:`_shutdown_at_exit`) within
    ``shutdown_timeout_s``: a dead, black-holed or slow collector adds at most that to the
    app's exit (the provider's own unbounded at-exit shutdown is not used).
    """

    def __init__(
        self,
        provider: Any,
        processor: CountingBatchSpanProcessor | None,
        exporter: CountingExporter | None,
        owns_provider: bool,
        endpoint: str | None,
        protocol: str | None,
        shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.exporter = exporter
        self.owns_provider = owns_provider
        self.endpoint = endpoint
        self.protocol = protocol
        self.shutdown_timeout_s = shutdown_timeout_s
        self._closed = False
        if owns_provider or processor is not None:
            _track(self)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued; returns False if that did not finish within ``timeout_s``.

        The SDK's flush can block for the exporter's whole retry budget when the sink is
        down, so it runs in a helper thread and the caller waits at most ``timeout_s``.
        """
        target = self.processor if self.processor is not None else self.provider
        if target is None or not hasattr(target, "force_flush"):
            return True
        ok: list[bool] = [False]

        def flush() -> None:
            ok[0] = bool(target.force_flush(int(timeout_s * 1000)))

        t = _in_background("ragtrace-flush", flush, "handle.force_flush")
        if t is None:
            return False
        t.join(timeout_s)
        return not t.is_alive() and ok[0]

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush and stop exporting, within ``timeout_s`` in total (default: ``shutdown_timeout_s``).

        What is not exported by then is dropped (counted as failed); spans ended afterwards
        are not exported.
        """
        if self._closed:
            return
        self._closed = True
        _untrack(self)
        budget = self.shutdown_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + max(0.0, budget)
        if self.owns_provider:
            _RETIRED.add(self.provider)
        try:
            if self.processor is not None:
                self.processor.close(deadline)
            if self.owns_provider:  # other processors the app may have added to our provider
                t = _in_background("ragtrace-shutdown", self.provider.shutdown, "handle.shutdown")
                if t is not None:  # else (Python 3.12 at exit) it cannot be bounded: skipped
                    t.join(max(0.0, deadline - time.monotonic()))
        except Exception as exc:
            safety.report("handle.shutdown", exc)
        if SETTINGS.tracer is not None and getattr(SETTINGS, "_handle", None) is self:
            SETTINGS.tracer = trace.get_tracer(TRACER_NAME)

    def stats(self) -> dict[str, int]:
        """Spans ended / dropped (queue full) / exported / failed to export, internal errors."""
        p, e = self.processor, self.exporter
        return {
            "spans_ended": p.ended if p else 0,
            "spans_dropped": p.dropped if p else 0,
            "spans_exported": e.exported if e else 0,
            "spans_failed": e.failed if e else 0,
            "internal_errors": safety.internal_error_total(),
        }


# Handles not shut down yet, oldest first: the at-exit hook shuts them down, newest first.
_LIVE: list[TracingHandle] = []
_LIVE_LOCK = threading.Lock()
_AT_EXIT_REGISTERED = False


def _track(handle: TracingHandle) -> None:
    global _AT_EXIT_REGISTERED
    with _LIVE_LOCK:
        _LIVE.append(handle)
        if not _AT_EXIT_REGISTERED:
            atexit.register(_shutdown_at_exit)
            _AT_EXIT_REGISTERED = True


def _untrack(handle: TracingHandle) -> None:
    with _LIVE_LOCK:
        if handle in _LIVE:
            _LIVE.remove(handle)


def _shutdown_at_exit() -> None:
    """Shut down every live handle within the longest of their timeouts, in total, not one each."""
    with _LIVE_LOCK:
        handles = _LIVE[::-1]
    if not handles:
        return
    deadline = time.monotonic() + max(h.shutdown_timeout_s for h in handles)
    for h in handles:
        try:
            h.shutdown(min(h.shutdown_timeout_s, max(0.0, deadline - time.monotonic())))
        except Exception as exc:  # pragma: no cover - shutdown reports its own failures
            safety.report("handle.at_exit", exc)


# Providers ragtrace created and a handle has shut down. The global one cannot be replaced, so a
# later init() must not adopt it (its processors are dead: every span would be lost silently).
_RETIRED: weakref.WeakSet[Any] = weakref.WeakSet()


def _is_sdk_provider(provider: Any) -> bool:
    return hasattr(provider, "add_span_processor")


def init(
    service_name: str | None = None,
    endpoint: str | None = None,
    protocol: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    capture_content: bool | None = None,
    redact: Redactor | Iterable[str | Pattern[str]] | None = None,
    max_attribute_length: int | None = None,
    max_documents: int | None = None,
    max_span_chars: int | None = None,
    max_queue_size: int | None = None,
    schedule_delay_ms: int | None = None,
    export_timeout_s: float | None = None,
    shutdown_timeout_s: float | None = None,
    exporter: SpanExporter | None = None,
    tracer_provider: Any = None,
    resource_attributes: dict[str, Any] | None = None,
    set_global: bool = True,
) -> TracingHandle:
    """Set up tracing for the decorators and return a :class:`TracingHandle`.

    Provider: ``tracer_provider`` if given, else the app's global SDK provider if it already
    has one, else a new ``TracerProvider`` (made global when ``set_global``). On a provider
    ragtrace did not create, an exporter is added only when one is asked for explicitly
    (``exporter``, ``endpoint`` or ``RAGTRACE_ENDPOINT``): the app's own pipeline is used as is.

    Export: ``BatchSpanProcessor`` with a bounded queue (``max_queue_size``; overflow is
    dropped and counted) and an OTLP exporter (``protocol`` ``"http/protobuf"`` or ``"grpc"``).
    ``exporter`` replaces the OTLP exporter (tests pass the SDK's in-memory exporter).

    Exit: ``shutdown_timeout_s`` (or ``RAGTRACE_SHUTDOWN_TIMEOUT``, seconds; default 5) bounds
    the final flush at exit and :meth:`TracingHandle.shutdown` in total, whatever the collector
    does; ``export_timeout_s`` bounds each export while the app runs.

    Content: ``capture_content=False`` (or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false``)
    records no text; ``redact`` (a callable or a list of regexes) runs on every text value
    before it is put on a span.
    """
    _warn_misspelt_env(os.environ)
    _apply_content_rules(capture_content, redact, max_attribute_length, max_documents, max_span_chars)
    export = _ExportSettings.resolve(protocol, max_queue_size, schedule_delay_ms, export_timeout_s, shutdown_timeout_s)
    explicit_export = exporter is not None or endpoint is not None or _env("RAGTRACE_ENDPOINT") is not None
    provider, owns = _choose_provider(tracer_provider, service_name, resource_attributes)
    processor = counting = None
    resolved_endpoint: str | None = None
    if (explicit_export or owns) and _is_sdk_provider(provider):
        if exporter is None:
            resolved_endpoint = _resolve_endpoint(endpoint, export.protocol)
            exporter = export.otlp_exporter(resolved_endpoint, headers)
        counting = CountingExporter(exporter)
        processor = export.processor(counting)
        provider.add_span_processor(processor)
    if _is_sdk_provider(provider):  # root span ids and pipeline names of recent traces, for ragtrace.feedback()
        watch(provider)
    if owns and set_global and not _is_sdk_provider(trace.get_tracer_provider()):
        trace.set_tracer_provider(provider)
    SETTINGS.tracer = provider.get_tracer(TRACER_NAME)
    handle = TracingHandle(
        provider, processor, counting, owns, resolved_endpoint, export.protocol, export.shutdown_timeout_s
    )
    SETTINGS._handle = handle  # type: ignore[attr-defined]
    return handle


def _apply_content_rules(
    capture_content: bool | None,
    redact: Redactor | Iterable[str | Pattern[str]] | None,
    max_attribute_length: int | None,
    max_documents: int | None,
    max_span_chars: int | None,
) -> None:
    """What init() decides about span content: argument, then environment, then default."""
    s = SETTINGS
    cc = capture_content
    if cc is None:
        cc = _env_bool("RAGTRACE_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    s.capture_content = True if cc is None else bool(cc)
    s.redact = make_redactor(redact)
    s.max_attribute_length = (
        max_attribute_length or _env_int("RAGTRACE_MAX_ATTRIBUTE_LENGTH") or DEFAULT_MAX_ATTRIBUTE_LENGTH
    )
    s.max_documents = max_documents or _env_int("RAGTRACE_MAX_DOCUMENTS") or DEFAULT_MAX_DOCUMENTS
    s.max_span_chars = max_span_chars or _env_int("RAGTRACE_MAX_SPAN_CHARS") or DEFAULT_MAX_SPAN_CHARS


@dataclass(frozen=True)
class _ExportSettings:
    """How spans leave the app (argument, then environment, then default): protocol, queue, timings."""

    protocol: str
    max_queue_size: int
    schedule_delay_ms: int
    export_timeout_s: float
    shutdown_timeout_s: float

    @classmethod
    def resolve(
        cls,
        protocol: str | None,
        max_queue_size: int | None,
        schedule_delay_ms: int | None,
        export_timeout_s: float | None,
        shutdown_timeout_s: float | None,
    ) -> _ExportSettings:
        proto = (
            protocol
            or _env("RAGTRACE_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            or DEFAULT_PROTOCOL
        ).lower()
        if proto == "http/json":
            raise ValueError("OTLP http/json is not supported by the Python exporter: use 'http/protobuf' or 'grpc'")
        queue = (
            max_queue_size or _env_int("RAGTRACE_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_QUEUE_SIZE") or DEFAULT_MAX_QUEUE_SIZE
        )
        timeout = export_timeout_s
        if timeout is None:  # a bad value is reported like every other, never raised out of init()
            timeout = _env_float("RAGTRACE_EXPORT_TIMEOUT")
        if timeout is None or timeout <= 0:
            timeout = DEFAULT_EXPORT_TIMEOUT_S
        exit_timeout = shutdown_timeout_s
        if exit_timeout is None:
            exit_timeout = _env_float("RAGTRACE_SHUTDOWN_TIMEOUT")
        if exit_timeout is None or exit_timeout < 0:
            exit_timeout = DEFAULT_SHUTDOWN_TIMEOUT_S
        delay = schedule_delay_ms or _env_int("OTEL_BSP_SCHEDULE_DELAY") or 1000
        return cls(proto, queue, delay, timeout, exit_timeout)

    def otlp_exporter(self, endpoint: str, headers: dict[str, str] | None) -> SpanExporter:
        hdrs = headers or _parse_headers(
            _env("RAGTRACE_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
        )
        return _make_exporter(self.protocol, endpoint, hdrs, self.export_timeout_s)

    def processor(self, exporter: CountingExporter) -> CountingBatchSpanProcessor:
        return CountingBatchSpanProcessor(
            exporter,
            max_queue_size=self.max_queue_size,
            shutdown_timeout_s=self.shutdown_timeout_s,
            schedule_delay_millis=self.schedule_delay_ms,
            max_export_batch_size=min(512, self.max_queue_size),
            export_timeout_millis=int(self.export_timeout_s * 1000),
        )


def _choose_provider(
    tracer_provider: Any, service_name: str | None, resource_attributes: dict[str, Any] | None
) -> tuple[Any, bool]:
    """The provider to use and whether ragtrace made it: the one given, else the app's SDK provider, else new."""
    if tracer_provider is not None:
        return tracer_provider, False
    current = trace.get_tracer_provider()
    if _is_sdk_provider(current) and current not in _RETIRED:
        return current, False
    name = service_name or _env("RAGTRACE_SERVICE_NAME", "OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    attrs = {"service.name": name, "telemetry.sdk.name.ragtrace": "ragtrace"}
    attrs.update(resource_attributes or {})
    resource = Resource.create(attrs)
    if OPENINFERENCE_PROJECT_NAME not in resource.attributes:  # else Phoenix files every app under "default"
        resource = resource.merge(Resource({OPENINFERENCE_PROJECT_NAME: str(resource.attributes["service.name"])}))
    # Room for max_documents x 4 document fields plus the fixed attributes.
    limits = SpanLimits(max_span_attributes=max(128, SETTINGS.max_documents * 8 + 64))
    # No at-exit shutdown of its own: it waits on the exporter's retries. The handle's is bounded.
    return TracerProvider(resource=resource, span_limits=limits, shutdown_on_exit=False), True


def configure_limits(
    *,
    capture_content: bool | None = None,
    redact: Redactor | Iterable[str | Pattern[str]] | None = None,
    max_attribute_length: int | None = None,
    max_documents: int | None = None,
    max_span_chars: int | None = None,
) -> None:
    """Change content and size rules without touching the provider (for apps that set up OTel themselves)."""
    s = SETTINGS
    if capture_content is not None:
        s.capture_content = capture_content
    if redact is not None:
        s.redact = make_redactor(redact)
    if max_attribute_length:
        s.max_attribute_length = max_attribute_length
    if max_documents:
        s.max_documents = max_documents
    if max_span_chars:
        s.max_span_chars = max_span_chars

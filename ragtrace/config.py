"""``ragtrace.init()``: where spans go, and the limits and privacy rules applied before they leave.

Every setting is resolved argument → environment (``RAGTRACE_*`` first, then the standard
``OTEL_*`` variable) → default. The decorators read :data:`SETTINGS` on every call, so
they work before and without ``init()``: until a provider exists they use the global
OpenTelemetry proxy tracer, which is a no-op until the app (or ``init()``) sets one.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import safety

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

REDACTED = "[REDACTED]"

Redactor = Callable[[str], str]


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


class CountingExporter(SpanExporter):
    """Delegates to the real exporter and counts what got out and what did not."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
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
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` that counts spans it had to drop because its queue was full.

    The queue is bounded (``max_queue_size``): when the exporter is dead or slow, the app
    keeps running at full speed, memory stays flat and the overflow is counted here.
    """

    def __init__(self, exporter: SpanExporter, max_queue_size: int, **kwargs: Any) -> None:
        super().__init__(exporter, max_queue_size=max_queue_size, **kwargs)
        self.max_queue_size = max_queue_size
        self.ended = 0
        self.dropped = 0
        self._queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)

    def on_end(self, span: Any) -> None:
        self.ended += 1
        q = self._queue
        if q is not None and len(q) >= self.max_queue_size:
            self.dropped += 1
        super().on_end(span)


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
    """What :func:`init` returns: flush, shut down, and read the drop/export counters."""

    def __init__(
        self,
        provider: Any,
        processor: CountingBatchSpanProcessor | None,
        exporter: CountingExporter | None,
        owns_provider: bool,
        endpoint: str | None,
        protocol: str | None,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.exporter = exporter
        self.owns_provider = owns_provider
        self.endpoint = endpoint
        self.protocol = protocol
        self._closed = False

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is queued; returns False if that did not finish within ``timeout_s``.

        The SDK's flush can block for the exporter's whole retry budget when the sink is
        down, so it runs in a helper thread and the caller waits at most ``timeout_s``.
        """
        target = self.processor if self.processor is not None else self.provider
        if target is None or not hasattr(target, "force_flush"):
            return True
        done = threading.Event()
        ok: list[bool] = [False]

        def run() -> None:
            try:
                ok[0] = bool(target.force_flush(int(timeout_s * 1000)))
            except Exception as exc:
                safety.report("handle.force_flush", exc)
            finally:
                done.set()

        threading.Thread(target=run, name="ragtrace-flush", daemon=True).start()
        return done.wait(timeout_s) and ok[0]

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Flush (bounded) and stop exporting. Spans ended afterwards are not exported."""
        if self._closed:
            return
        self._closed = True
        if self.owns_provider:
            _RETIRED.add(self.provider)
        self.force_flush(timeout_s)

        def run() -> None:
            try:
                if self.owns_provider:
                    self.provider.shutdown()
                elif self.processor is not None:
                    self.processor.shutdown()
            except Exception as exc:
                safety.report("handle.shutdown", exc)

        t = threading.Thread(target=run, name="ragtrace-shutdown", daemon=True)
        t.start()
        t.join(timeout_s)
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

    Content: ``capture_content=False`` (or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false``)
    records no text; ``redact`` (a callable or a list of regexes) runs on every text value
    before it is put on a span.
    """
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

    proto = (
        protocol
        or _env("RAGTRACE_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        or DEFAULT_PROTOCOL
    ).lower()
    if proto == "http/json":
        raise ValueError("OTLP http/json is not supported by the Python exporter: use 'http/protobuf' or 'grpc'")
    queue = max_queue_size or _env_int("RAGTRACE_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_QUEUE_SIZE") or DEFAULT_MAX_QUEUE_SIZE
    delay = schedule_delay_ms or _env_int("OTEL_BSP_SCHEDULE_DELAY") or 1000
    timeout = export_timeout_s
    if timeout is None:
        t_env = _env("RAGTRACE_EXPORT_TIMEOUT")
        timeout = float(t_env) if t_env else DEFAULT_EXPORT_TIMEOUT_S

    provider = tracer_provider
    owns = False
    explicit_export = exporter is not None or endpoint is not None or _env("RAGTRACE_ENDPOINT") is not None
    if provider is None:
        current = trace.get_tracer_provider()
        if _is_sdk_provider(current) and current not in _RETIRED:
            provider = current
    if provider is None:
        name = service_name or _env("RAGTRACE_SERVICE_NAME", "OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
        attrs = {"service.name": name, "telemetry.sdk.name.ragtrace": "ragtrace"}
        attrs.update(resource_attributes or {})
        # Room for max_documents x 4 document fields plus the fixed attributes.
        limits = SpanLimits(max_span_attributes=max(128, s.max_documents * 8 + 64))
        provider = TracerProvider(resource=Resource.create(attrs), span_limits=limits)
        owns = True
        explicit_export = True

    processor = counting = None
    resolved_endpoint: str | None = None
    if explicit_export and _is_sdk_provider(provider):
        if exporter is None:
            resolved_endpoint = _resolve_endpoint(endpoint, proto)
            hdrs = headers or _parse_headers(
                _env("RAGTRACE_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
            )
            exporter = _make_exporter(proto, resolved_endpoint, hdrs, timeout)
        counting = CountingExporter(exporter)
        processor = CountingBatchSpanProcessor(
            counting,
            max_queue_size=queue,
            schedule_delay_millis=delay,
            max_export_batch_size=min(512, queue),
            export_timeout_millis=int(timeout * 1000),
        )
        provider.add_span_processor(processor)

    if owns and set_global:
        current = trace.get_tracer_provider()
        if not _is_sdk_provider(current):
            trace.set_tracer_provider(provider)
    s.tracer = provider.get_tracer(TRACER_NAME)
    handle = TracingHandle(provider, processor, counting, owns, resolved_endpoint, proto)
    s._handle = handle  # type: ignore[attr-defined]
    return handle


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

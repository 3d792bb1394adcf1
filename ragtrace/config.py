"""``ragtrace.init()``: where spans go, and the limits and privacy rules applied before they leave.

Every setting is resolved argument → environment (``RAGTRACE_*`` first, then the standard
``OTEL_*`` variable) → default: :class:`Env` lists every variable read, with its parser and its
default (written there once), and treats a bad value one way (reported once, defaulted);
:class:`Options` is what ``init()`` resolves from them. The decorators read :data:`SETTINGS` on every call, so
they work before and without ``init()``: until a provider exists they use the global
OpenTelemetry proxy tracer, which is a no-op until the app (or ``init()``) sets one.
"""

from __future__ import annotations

import atexit
import difflib
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from . import safety
from .attributes import OPENINFERENCE_PROJECT_NAME
from .recent import watch

TRACER_NAME = "ragtrace"

REDACTED = "[REDACTED]"
logger = logging.getLogger("ragtrace")

Redactor = Callable[[str], str]
_V = TypeVar("_V")


def _finite(raw: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise ValueError("is not a number") from None
    if not math.isfinite(v):
        raise ValueError("is not a finite number")
    return v


def _positive_int(raw: str) -> int:
    try:
        v = int(raw)
    except ValueError:
        raise ValueError("is not an integer") from None
    if v < 1:
        raise ValueError("is not a positive integer")
    return v


def _positive_seconds(raw: str) -> float:
    v = _finite(raw)
    if v <= 0:
        raise ValueError("is not a number of seconds above 0")
    return v


def _seconds(raw: str) -> float:
    v = _finite(raw)
    if v < 0:
        raise ValueError("is a negative number of seconds")
    return v


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
# opentelemetry-util-genai's content-capturing modes: content on spans or not
_CAPTURE_MODES = {"span_only": True, "span_and_event": True, "event_only": False, "no_content": False}


def _boolean(raw: str) -> bool:
    """true/false, 1/0, yes/no, on/off, or a GenAI capture mode (SPAN_ONLY, NO_CONTENT...)."""
    low = raw.lower()
    if low in _CAPTURE_MODES:
        return _CAPTURE_MODES[low]
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise ValueError("is not true or false (or a GenAI capture mode such as NO_CONTENT)")


_PROTOCOLS = ("http/protobuf", "http", "grpc")


def _protocol(raw: str) -> str:
    low = raw.lower()
    if low == "http/json":
        raise ValueError("is not supported by the Python exporter (use 'http/protobuf' or 'grpc')")
    if low not in _PROTOCOLS:
        raise ValueError("is not an OTLP protocol ('http/protobuf' or 'grpc')")
    return low


def _headers(raw: str) -> dict[str, str]:
    """``key=value`` pairs separated by commas (OTEL_EXPORTER_OTLP_HEADERS' format)."""
    out = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        k, eq, v = part.partition("=")
        if not eq or not k.strip():
            raise ValueError("is not key=value pairs separated by commas")
        out[k.strip()] = v.strip()
    return out


def _url(raw: str) -> str:
    """An http(s) URL with a host; gRPC also takes a bare ``host:port``."""
    if "://" not in raw:
        return raw  # host:port, gRPC's form; for HTTP it is refused when the protocol is known (_http_url)
    parsed = urlsplit(raw)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("is not an http:// or https:// URL")
    return raw


def _http_url(raw: str) -> str:
    if "://" not in raw:
        raise ValueError("is not an http:// or https:// URL")
    return _url(raw)


def _text(raw: str) -> str:
    return raw


_ENCODERS = ("ragtrace", "opentelemetry")


def _encoder(raw: str) -> str:
    low = raw.lower()
    if low not in _ENCODERS:
        raise ValueError("is not an OTLP encoder ('ragtrace' or 'opentelemetry')")
    return low


class _Var(Generic[_V]):
    """One setting from the environment: its variables (the first set one is read), how its value is read, and
    its default, written here and nowhere else. A value that cannot be read is reported once (naming the
    variable, what is wrong and the value used instead) and the default is used: never raised, never silent."""

    def __init__(
        self,
        names: tuple[str, ...],
        parse: Callable[[str], _V],
        default: _V,
        *,
        secret: bool = False,
        on_bad: tuple[_V, str] | None = None,
    ) -> None:
        self.names = names
        self.parse = parse
        self.default = default
        self.secret = secret  # the value is never logged (headers carry credentials)
        self.on_bad = on_bad  # (value, how to say it) where a bad value must not mean the default

    def raw(self, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """The first variable set (not blank) and its value, stripped."""
        env = os.environ if environ is None else environ
        for name in self.names:
            v = env.get(name)
            if v is not None and v.strip():
                return name, v.strip()
        return None

    def get(
        self,
        argument: _V | None = None,
        parse: Callable[[str], _V] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> _V:
        """Argument → environment → default."""
        if argument is not None:
            return argument
        found = self.raw(environ)
        if found is None:
            return self.default
        name, value = found
        try:
            return (parse or self.parse)(value)
        except ValueError as exc:
            fallback, said = self.on_bad if self.on_bad is not None else (self.default, f"the default {self.default}")
            _report_bad(name, "(value not shown)" if self.secret else repr(value), str(exc), said)
            return fallback


_REPORTED: set[tuple[str, str]] = set()  # (variable, value) already reported: once per process, not per init()
_REPORTED_LOCK = threading.Lock()


def _report_bad(name: str, shown: str, problem: str, used: str) -> None:
    key = (name, shown)
    with _REPORTED_LOCK:
        if key in _REPORTED:
            return
        _REPORTED.add(key)
    logger.warning("ragtrace: %s=%s %s; using %s", name, shown, problem, used)


class Env:
    """Every environment variable the SDK reads (``RAGTRACE_*``, then the standard ``OTEL_*`` one), typed."""

    SERVICE_NAME = _Var(("RAGTRACE_SERVICE_NAME", "OTEL_SERVICE_NAME"), _text, "ragtrace-app")
    # Endpoints: the default depends on the protocol (Options.endpoint); TRACES_ENDPOINT is used as is.
    ENDPOINT: _Var[str | None] = _Var(
        ("RAGTRACE_ENDPOINT",), _url, None, on_bad=(None, "the OTEL_EXPORTER_OTLP_* endpoint, else the default")
    )
    OTEL_TRACES_ENDPOINT: _Var[str | None] = _Var(
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",),
        _url,
        None,
        on_bad=(None, "OTEL_EXPORTER_OTLP_ENDPOINT, else the default endpoint"),
    )
    OTEL_ENDPOINT: _Var[str | None] = _Var(
        ("OTEL_EXPORTER_OTLP_ENDPOINT",), _url, None, on_bad=(None, "the default endpoint")
    )
    PROTOCOL = _Var(
        ("RAGTRACE_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        _protocol,
        "http/protobuf",
    )
    HEADERS: _Var[dict[str, str] | None] = _Var(
        ("RAGTRACE_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"),
        _headers,
        None,
        secret=True,
        on_bad=(None, "no headers"),
    )
    CAPTURE_CONTENT = _Var(
        ("RAGTRACE_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
        _boolean,
        True,
        on_bad=(False, "false: no content is recorded until it says true"),  # a typo of "false" must not capture
    )
    MAX_ATTRIBUTE_LENGTH = _Var(("RAGTRACE_MAX_ATTRIBUTE_LENGTH",), _positive_int, 16_384)  # characters per string
    MAX_DOCUMENTS = _Var(("RAGTRACE_MAX_DOCUMENTS",), _positive_int, 20)  # per span (the total is recorded too)
    MAX_SPAN_CHARS = _Var(("RAGTRACE_MAX_SPAN_CHARS",), _positive_int, 262_144)  # text per span, all attributes
    # spans waiting for export; beyond this they are dropped and counted
    MAX_QUEUE_SIZE = _Var(("RAGTRACE_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_QUEUE_SIZE"), _positive_int, 2048)
    SCHEDULE_DELAY_MS = _Var(("OTEL_BSP_SCHEDULE_DELAY",), _positive_int, 1000)
    EXPORT_TIMEOUT_S = _Var(("RAGTRACE_EXPORT_TIMEOUT",), _positive_seconds, 5.0)
    # who writes the OTLP/HTTP request's protobuf (the same bytes): ragtrace's direct encoder, or OpenTelemetry's
    OTLP_ENCODER = _Var(("RAGTRACE_OTLP_ENCODER",), _encoder, "ragtrace")
    # the most ragtrace may add to the app's exit, flush included
    SHUTDOWN_TIMEOUT_S = _Var(("RAGTRACE_SHUTDOWN_TIMEOUT",), _seconds, 5.0)

    @classmethod
    def all(cls) -> list[_Var[Any]]:
        return [v for v in vars(cls).values() if isinstance(v, _Var)]


DEFAULT_SERVICE_NAME = Env.SERVICE_NAME.default
DEFAULT_HTTP_ENDPOINT = "http://127.0.0.1:4318/v1/traces"
DEFAULT_GRPC_ENDPOINT = "http://127.0.0.1:4317"
DEFAULT_PROTOCOL = Env.PROTOCOL.default
DEFAULT_MAX_ATTRIBUTE_LENGTH = Env.MAX_ATTRIBUTE_LENGTH.default
DEFAULT_MAX_DOCUMENTS = Env.MAX_DOCUMENTS.default
DEFAULT_MAX_SPAN_CHARS = Env.MAX_SPAN_CHARS.default
DEFAULT_MAX_QUEUE_SIZE = Env.MAX_QUEUE_SIZE.default
DEFAULT_EXPORT_TIMEOUT_S = Env.EXPORT_TIMEOUT_S.default
DEFAULT_SHUTDOWN_TIMEOUT_S = Env.SHUTDOWN_TIMEOUT_S.default

#: The environment variables the SDK itself reads (the ``OTEL_*`` ones it also reads are OpenTelemetry's).
SDK_ENV_VARS = frozenset(n for v in Env.all() for n in v.names if n.startswith("RAGTRACE_"))


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

    capture_content: bool = Env.CAPTURE_CONTENT.default
    redact: Redactor | None = None
    max_attribute_length: int = DEFAULT_MAX_ATTRIBUTE_LENGTH
    max_documents: int = DEFAULT_MAX_DOCUMENTS
    max_span_chars: int = DEFAULT_MAX_SPAN_CHARS
    tracer: Any = field(default=None)

    @classmethod
    def from_env(cls) -> Settings:
        """The content rules before (and without) ``init()``: the environment, else the defaults."""
        return cls(
            capture_content=Env.CAPTURE_CONTENT.get(),
            max_attribute_length=Env.MAX_ATTRIBUTE_LENGTH.get(),
            max_documents=Env.MAX_DOCUMENTS.get(),
            max_span_chars=Env.MAX_SPAN_CHARS.get(),
            tracer=trace.get_tracer(TRACER_NAME),
        )


SETTINGS = Settings.from_env()


def _cap_timeout(exporter: Any, seconds: float) -> None:
    """Lower an OTLP exporter's per-export budget (retries included) to ``seconds``.

    The OTLP exporters read it from a private field, so this is best effort: where the field
    is not found, the bounded join in :meth:`CountingBatchSpanProcessor.close` still holds.
    An exporter the app passed in is left alone (its ``_timeout`` may mean something else).
    """
    module = type(exporter).__module__
    if not (module.startswith("opentelemetry.exporter.otlp.") or module == "ragtrace.otlp_encoding"):  # (a subclass)
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


class _HeaderValuesHidden(logging.Filter):
    """OpenTelemetry's exporters parse ``OTEL_EXPORTER_OTLP[_TRACES]_HEADERS`` themselves, whatever headers they
    are given, and log a malformed value whole ("Header format invalid! ...: <the value>"): a token in the log.
    ragtrace never logs header values (it names the variable); this keeps OpenTelemetry's message and drops the
    value from it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Header format invalid!"):
            record.msg = record.msg.rsplit(":", 1)[0] + ": (value not shown)"
            record.args = ()
        return True


def _hide_header_values() -> None:
    """Installs :class:`_HeaderValuesHidden` once on the logger OpenTelemetry parses headers with."""
    target = logging.getLogger("opentelemetry.util.re")
    if not any(isinstance(f, _HeaderValuesHidden) for f in target.filters):
        target.addFilter(_HeaderValuesHidden())


def _make_exporter(
    protocol: str,
    endpoint: str,
    headers: dict[str, str] | None,
    timeout_s: float,
    encoder: str = Env.OTLP_ENCODER.default,
) -> SpanExporter:
    """OpenTelemetry's OTLP exporter for ``protocol``; for HTTP, by default with ragtrace's protobuf encoder
    (:mod:`ragtrace.otlp_encoding`: the same bytes, written directly; ``encoder="opentelemetry"`` for OTel's)."""
    _hide_header_values()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        insecure = not endpoint.startswith("https://")
        return GrpcExporter(endpoint=endpoint, insecure=insecure, headers=headers, timeout=timeout_s)
    if protocol in ("http/protobuf", "http"):
        if encoder == "ragtrace":
            from .otlp_encoding import http_exporter

            exporter: SpanExporter = http_exporter(endpoint, headers, timeout_s)
            return exporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        return HttpExporter(endpoint=endpoint, headers=headers, timeout=timeout_s)
    raise ValueError(f"unsupported OTLP protocol {protocol!r}: use 'http/protobuf' or 'grpc'")


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
    options = Options.resolve(
        service_name=service_name,
        endpoint=endpoint,
        protocol=protocol,
        headers=headers,
        capture_content=capture_content,
        max_attribute_length=max_attribute_length,
        max_documents=max_documents,
        max_span_chars=max_span_chars,
        max_queue_size=max_queue_size,
        schedule_delay_ms=schedule_delay_ms,
        export_timeout_s=export_timeout_s,
        shutdown_timeout_s=shutdown_timeout_s,
    )
    options.apply_content_rules(SETTINGS, redact)
    explicit_export = exporter is not None or options.endpoint_asked
    provider, owns = _choose_provider(tracer_provider, options.service_name, resource_attributes)
    processor = counting = None
    resolved_endpoint: str | None = None
    if (explicit_export or owns) and _is_sdk_provider(provider):
        if exporter is None:
            resolved_endpoint = options.endpoint
            exporter = options.otlp_exporter()
        counting = CountingExporter(exporter)
        processor = options.processor(counting)
        provider.add_span_processor(processor)
    if _is_sdk_provider(provider):  # root span ids and pipeline names of recent traces, for ragtrace.feedback()
        watch(provider)
    if owns and set_global and not _is_sdk_provider(trace.get_tracer_provider()):
        trace.set_tracer_provider(provider)
    SETTINGS.tracer = provider.get_tracer(TRACER_NAME)
    handle = TracingHandle(
        provider, processor, counting, owns, resolved_endpoint, options.protocol, options.shutdown_timeout_s
    )
    SETTINGS._handle = handle  # type: ignore[attr-defined]
    return handle


@dataclass(frozen=True)
class Options:
    """Everything ``init()`` reads, typed and resolved once: argument → environment (:class:`Env`) → default.

    Arguments keep their documented meaning (an empty or zero one is as if not given); a bad environment value
    is reported and defaulted by :class:`_Var`."""

    service_name: str
    protocol: str
    endpoint: str
    endpoint_asked: bool  # by argument or RAGTRACE_ENDPOINT: export even on a provider ragtrace did not make
    headers: dict[str, str] | None
    capture_content: bool
    max_attribute_length: int
    max_documents: int
    max_span_chars: int
    max_queue_size: int
    schedule_delay_ms: int
    export_timeout_s: float
    shutdown_timeout_s: float
    otlp_encoder: str = Env.OTLP_ENCODER.default  # "ragtrace" or "opentelemetry" (http/protobuf only)

    @classmethod
    def resolve(
        cls,
        *,
        service_name: str | None = None,
        endpoint: str | None = None,
        protocol: str | None = None,
        headers: dict[str, str] | None = None,
        capture_content: bool | None = None,
        max_attribute_length: int | None = None,
        max_documents: int | None = None,
        max_span_chars: int | None = None,
        max_queue_size: int | None = None,
        schedule_delay_ms: int | None = None,
        export_timeout_s: float | None = None,
        shutdown_timeout_s: float | None = None,
    ) -> Options:
        if protocol and protocol.lower() == "http/json":  # the app's own argument: a programming error, raised
            raise ValueError("OTLP http/json is not supported by the Python exporter: use 'http/protobuf' or 'grpc'")
        proto = Env.PROTOCOL.get(protocol.lower() if protocol else None)
        export_timeout = Env.EXPORT_TIMEOUT_S.get(export_timeout_s)
        exit_timeout = Env.SHUTDOWN_TIMEOUT_S.get(shutdown_timeout_s)
        return cls(
            service_name=Env.SERVICE_NAME.get(service_name or None),
            protocol=proto,
            endpoint=_endpoint(endpoint, proto),
            endpoint_asked=endpoint is not None or Env.ENDPOINT.raw() is not None,
            headers=Env.HEADERS.get(headers or None),
            capture_content=bool(Env.CAPTURE_CONTENT.get(capture_content)),
            max_attribute_length=Env.MAX_ATTRIBUTE_LENGTH.get(max_attribute_length or None),
            max_documents=Env.MAX_DOCUMENTS.get(max_documents or None),
            max_span_chars=Env.MAX_SPAN_CHARS.get(max_span_chars or None),
            max_queue_size=Env.MAX_QUEUE_SIZE.get(max_queue_size or None),
            schedule_delay_ms=Env.SCHEDULE_DELAY_MS.get(schedule_delay_ms or None),
            export_timeout_s=export_timeout if export_timeout > 0 else Env.EXPORT_TIMEOUT_S.default,
            shutdown_timeout_s=exit_timeout if exit_timeout >= 0 else Env.SHUTDOWN_TIMEOUT_S.default,
            otlp_encoder=Env.OTLP_ENCODER.get(),
        )

    def apply_content_rules(self, s: Settings, redact: Redactor | Iterable[str | Pattern[str]] | None) -> None:
        """What the decorators read on every call."""
        s.capture_content = self.capture_content
        s.redact = make_redactor(redact)
        s.max_attribute_length = self.max_attribute_length
        s.max_documents = self.max_documents
        s.max_span_chars = self.max_span_chars

    def otlp_exporter(self) -> SpanExporter:
        return _make_exporter(self.protocol, self.endpoint, self.headers, self.export_timeout_s, self.otlp_encoder)

    def processor(self, exporter: CountingExporter) -> CountingBatchSpanProcessor:
        return CountingBatchSpanProcessor(
            exporter,
            max_queue_size=self.max_queue_size,
            shutdown_timeout_s=self.shutdown_timeout_s,
            schedule_delay_millis=self.schedule_delay_ms,
            max_export_batch_size=min(512, self.max_queue_size),
            export_timeout_millis=int(self.export_timeout_s * 1000),
        )


def _endpoint(endpoint: str | None, protocol: str) -> str:
    """Argument → RAGTRACE_ENDPOINT → OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as is) →
    OTEL_EXPORTER_OTLP_ENDPOINT (base; ``/v1/traces`` appended for HTTP) → default."""
    parse = _url if protocol == "grpc" else _http_url
    base = endpoint or Env.ENDPOINT.get(parse=parse)
    if base is None:
        exact = Env.OTEL_TRACES_ENDPOINT.get(parse=parse)
        if exact is not None:
            return exact
        base = Env.OTEL_ENDPOINT.get(parse=parse)
    if base is None:
        return DEFAULT_GRPC_ENDPOINT if protocol == "grpc" else DEFAULT_HTTP_ENDPOINT
    if protocol != "grpc" and not base.rstrip("/").endswith("/v1/traces"):
        base = base.rstrip("/") + "/v1/traces"
    return base


def _choose_provider(
    tracer_provider: Any, service_name: str, resource_attributes: dict[str, Any] | None
) -> tuple[Any, bool]:
    """The provider to use and whether ragtrace made it: the one given, else the app's SDK provider, else new."""
    if tracer_provider is not None:
        return tracer_provider, False
    current = trace.get_tracer_provider()
    if _is_sdk_provider(current) and current not in _RETIRED:
        return current, False
    attrs = {"service.name": service_name, "telemetry.sdk.name.ragtrace": "ragtrace"}
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

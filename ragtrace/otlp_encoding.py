"""OTLP ``ExportTraceServiceRequest`` written straight to protobuf wire bytes, for ``ragtrace.init()``'s exporter.

OpenTelemetry's encoder (``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``) builds a
protobuf message object per span, attribute and value, then serializes the tree; it also hashes each span's
``Resource`` (a ``json.dumps`` of its attributes) to group spans. For a RAG request's ~50 attributes that is
most of the export's CPU. :func:`encode_spans` writes the same bytes directly: varints, length-delimited
fields and fixed64/fixed32 scalars, in field-number order (the order the upb runtime serializes in), with proto3's
rule that an implicit-presence field holding its default (0, ``""``, empty bytes) is not written, while a oneof
member (``AnyValue``'s) and a set sub-message are written even when empty.

It is byte-for-byte OpenTelemetry's ``encode_spans(spans).SerializeToString()`` (``tests/ragtrace/
test_otlp_encoding.py`` checks it on generated span shapes), including OpenTelemetry's own choices: spans grouped by
resource then instrumentation scope in first-seen order with a dict's rule (the same object, else equal with
equal hashes), identity tried first so that a ``Resource`` is hashed only when another object equals it, not per span), a link's trace_state not written, an
empty ``Status`` and an empty ``Resource`` always written, ``flags`` carrying ``SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK``
(and ``IS_REMOTE`` for a remote parent or link). Where OpenTelemetry's encoder would refuse a value or log and skip
it (an unsupported type, an int outside int64, a string that is not valid UTF-8...), where its releases differ (a
``None`` value, alone or in a sequence: an empty ``AnyValue`` from 1.35, skipped with an error logged by 1.34; the
SDK itself drops ``None`` attribute values, so spans rarely hold one), or where anything here fails,
the whole batch is encoded by OpenTelemetry's encoder instead: the bytes on the wire are always what it would send.

How it is sent (:func:`http_exporter`): by OpenTelemetry's own ``OTLPSpanExporter``, subclassed so that only its
encoding step changes. An exporter of ragtrace's own (``requests`` and a retry loop) would have to re-implement and
keep in step everything the OpenTelemetry exporter honours for traces (endpoint, headers, timeout, compression,
TLS/mTLS files, credential-provider sessions, retry statuses, backoff, ``Retry-After``, request-size limit,
self-metrics) and would change behaviour under users who configure it with ``OTEL_*`` variables; the subclass keeps
all of that OpenTelemetry's, and ``config._cap_timeout``/``CountingExporter``'s shutdown deadline work on it as on
the plain exporter. The cost is one private hook, the exporter's sending step, which differs by release
(``_client.export`` in 1.45, ``_export_serialized_spans`` in 1.34): it is looked up at construction and, where it
is not found, the subclass is OpenTelemetry's exporter unchanged (its encoder, no speed-up). ``RAGTRACE_OTLP_ENCODER
=opentelemetry`` selects the plain exporter.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["encode_spans", "encode_spans_fast"]

_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack
_pack_i = struct.Struct("<I").pack
_ZERO8 = b"\x00" * 8
_VARINT = [bytes((i,)) for i in range(128)]
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT32_MAX = (1 << 32) - 1
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_KEY_CACHE: dict[str, bytes] = {}  # attribute key -> KeyValue's field 1, tag and length included
_KEY_CACHE_MAX = 4096


class _Unsupported(Exception):
    """A value OpenTelemetry's encoder would not write as is: the batch goes to its encoder."""


def _varint(n: int) -> bytes:
    if n < 0x80:
        if n < 0:
            raise _Unsupported("negative length or count")
        return _VARINT[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, bytes."""
    n = len(payload)
    return tag + (_VARINT[n] if n < 0x80 else _varint(n)) + payload


def _int64(v: int) -> bytes:
    if v < 0:
        if v < _INT64_MIN:
            raise _Unsupported("int below int64")
        return _varint(v + (1 << 64))
    if v > _INT64_MAX:
        raise _Unsupported("int above int64")
    return _varint(v)


def _uint32_field(tag: bytes, v: Any) -> bytes:
    """An implicit-presence uint32 (dropped counts): not written when 0."""
    if not v:
        return b""
    if type(v) is not int or v < 0 or v > _UINT32_MAX:
        raise _Unsupported("count is not a uint32")
    return tag + _varint(v)


def _str_field(tag: bytes, s: Any) -> bytes:
    """An implicit-presence string: not written when empty or None."""
    if not s:
        return b""
    if not isinstance(s, str):
        raise _Unsupported("not a string")
    return _ld(tag, s.encode())


def _any_value(value: Any) -> bytes:
    """``AnyValue``'s bytes, as OpenTelemetry's ``_encode_value`` builds it (same isinstance order)."""
    t = type(value)
    if t is str:
        return _ld(b"\x0a", value.encode())
    if value is None:  # OpenTelemetry >= 1.35 writes an empty AnyValue, 1.34 logs and skips: theirs decides
        raise _Unsupported("None value")
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _ld(b"\x0a", str.encode(value))
    if isinstance(value, int):
        return b"\x18" + _int64(int(value))
    if isinstance(value, float):
        return b"\x21" + _pack_d(value)
    if isinstance(value, bytes):
        return _ld(b"\x3a", bytes(value))
    if isinstance(value, Sequence):
        return _ld(b"\x2a", b"".join([_ld(b"\x0a", _any_value(v)) for v in value]))
    if isinstance(value, Mapping):
        return _ld(b"\x32", b"".join([_ld(b"\x0a", _key_value(str(k), v)) for k, v in value.items()]))
    raise _Unsupported(f"attribute value of type {t.__name__}")


def _key_value(key: str, value: Any) -> bytes:
    kb = _KEY_CACHE.get(key)
    if kb is None:
        if type(key) is not str:
            raise _Unsupported("attribute key is not a str")
        kb = _ld(b"\x0a", key.encode()) if key else b""
        if len(_KEY_CACHE) < _KEY_CACHE_MAX:
            _KEY_CACHE[key] = kb
    return kb + _ld(b"\x12", _any_value(value))


def _attributes(tag: bytes, attributes: Any) -> bytes:
    """Repeated ``KeyValue`` field ``tag``."""
    if not attributes:
        return b""
    return b"".join([_ld(tag, _key_value(k, v)) for k, v in attributes.items()])


def _fixed64_field(tag: bytes, v: Any) -> bytes:
    if not v:
        return b""
    if type(v) is not int or v < 0 or v > 0xFFFFFFFFFFFFFFFF:
        raise _Unsupported("time is not a uint64")
    return tag + _pack_q(v)


def _flags(context: Any) -> bytes:
    flags = _HAS_IS_REMOTE
    if context and context.is_remote:
        flags |= _IS_REMOTE
    return b"\x85\x01" + _pack_i(flags)  # Span.flags: field 16, fixed32 (Link.flags is field 6: see _link)


def _span(span: Any) -> bytes:
    ctx = span.get_span_context()
    parent = span.parent
    out = [
        b"\x0a\x10" + ctx.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + ctx.span_id.to_bytes(8, "big"),
    ]
    ts = ctx.trace_state
    if ts is not None:
        out.append(_str_field(b"\x1a", ",".join([f"{k}={v}" for k, v in ts.items()])))
    if parent:
        out.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))
    out.append(_str_field(b"\x2a", span.name))
    kind = span.kind.value + 1  # SpanKind.INTERNAL (0) -> SPAN_KIND_INTERNAL (1)...
    if type(kind) is not int or not 1 <= kind <= 5:
        raise _Unsupported("span kind")
    out.append(b"\x30" + _VARINT[kind])
    out.append(_fixed64_field(b"\x39", span.start_time))
    out.append(_fixed64_field(b"\x41", span.end_time))
    out.append(_attributes(b"\x4a", span.attributes))
    out.append(_uint32_field(b"\x50", span.dropped_attributes))
    for event in span.events or ():
        out.append(
            _ld(
                b"\x5a",
                _fixed64_field(b"\x09", event.timestamp)
                + _str_field(b"\x12", event.name)
                + _attributes(b"\x1a", event.attributes)
                + _uint32_field(b"\x20", event.dropped_attributes),
            )
        )
    out.append(_uint32_field(b"\x60", span.dropped_events))
    for link in span.links or ():
        lc = link.context
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if lc and lc.is_remote else 0)
        out.append(
            _ld(
                b"\x6a",
                b"\x0a\x10"
                + lc.trace_id.to_bytes(16, "big")
                + b"\x12\x08"
                + lc.span_id.to_bytes(8, "big")
                + _attributes(b"\x22", link.attributes)
                + _uint32_field(b"\x28", link.dropped_attributes)
                + b"\x35"
                + _pack_i(flags),
            )
        )
    out.append(_uint32_field(b"\x70", span.dropped_links))
    status = span.status
    if status is not None:
        code = status.status_code.value
        if type(code) is not int or not 0 <= code <= 2:
            raise _Unsupported("status code")
        out.append(_ld(b"\x7a", _str_field(b"\x12", status.description) + (b"\x18" + _VARINT[code] if code else b"")))
    out.append(_flags(parent))
    return b"".join(out)


def _scope(scope: Any) -> bytes:
    """``InstrumentationScope``: name, version, attributes (OpenTelemetry writes no dropped count)."""
    if scope is None:
        return b""
    return _str_field(b"\x0a", scope.name) + _str_field(b"\x12", scope.version) + _attributes(b"\x1a", scope.attributes)


def encode_spans_fast(spans: Sequence[Any]) -> bytes:
    """The request's bytes; raises on anything OpenTelemetry's encoder would not write as is (see the module)."""
    # [resource, [[scope, [span bytes...]], ...]] in first-seen order; identity first, then equality
    groups: list[tuple[Any, list[tuple[Any, list[bytes]]]]] = []
    last_res: Any = object()
    last_scope: Any = object()
    last_list: list[bytes] = []
    for span in spans:
        res = span.resource
        scope = span.instrumentation_scope or None
        if res is not last_res or scope is not last_scope:
            scopes = None
            for r, s in groups:
                if r is res:
                    scopes = s
                    break
            if scopes is None:  # a dict's rule, as OpenTelemetry's: equal and of equal hash (hashed only here)
                for r, s in groups:
                    if r == res and hash(r) == hash(res):
                        scopes = s
                        break
            if scopes is None:
                scopes = []
                groups.append((res, scopes))
            found = None
            for sc, lst in scopes:
                if sc is scope:
                    found = lst
                    break
            if found is None:
                for sc, lst in scopes:
                    if sc == scope and hash(sc) == hash(scope):
                        found = lst
                        break
            if found is None:
                found = []
                scopes.append((scope, found))
            last_res, last_scope, last_list = res, scope, found
        last_list.append(_span(span))
    out = []
    for res, scopes in groups:
        body = [_ld(b"\x0a", _attributes(b"\x0a", res.attributes))]
        for scope, span_bytes in scopes:
            sb = [_ld(b"\x0a", _scope(scope))]
            sb.extend([_ld(b"\x12", b) for b in span_bytes])
            if scope is not None:
                sb.append(_str_field(b"\x1a", scope.schema_url))
            body.append(_ld(b"\x12", b"".join(sb)))
        body.append(_str_field(b"\x1a", res.schema_url))
        out.append(_ld(b"\x0a", b"".join(body)))
    return b"".join(out)


def encode_spans(spans: Sequence[Any]) -> bytes:
    """``ExportTraceServiceRequest`` bytes for ``spans``: OpenTelemetry's exactly, written directly; where this
    encoder cannot vouch for that (see the module), OpenTelemetry's encoder writes them."""
    try:
        return encode_spans_fast(spans)
    except Exception:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as otel_encode_spans

        return otel_encode_spans(spans).SerializePartialToString()


def http_exporter(endpoint: str, headers: dict[str, str] | None, timeout_s: float) -> Any:
    """OpenTelemetry's OTLP/HTTP span exporter, sending :func:`encode_spans`' bytes (see :class:`_FastEncodingExporter`)."""
    return _exporter_class()(endpoint=endpoint, headers=headers, timeout=timeout_s)


_CLASS: Any = None


def _exporter_class() -> Any:
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    class _FastEncodingExporter(OTLPSpanExporter):
        """OpenTelemetry's own OTLP/HTTP exporter, with :func:`encode_spans` for its encoder.

        Why a subclass rather than an exporter of ragtrace's own: everything about sending (endpoint, headers,
        timeout, gzip/deflate from ``OTEL_EXPORTER_OTLP[_TRACES]_COMPRESSION``, TLS and mTLS files, a credential
        provider's session, retries on 408/429/5xx and connection errors with backoff and ``Retry-After``, within
        the timeout, ``max_request_size``, its self-metrics, ``shutdown`` closing the session) stays OpenTelemetry's,
        released and fixed with it, and ``_cap_timeout``/``CountingExporter``'s deadline keep working as they do
        on the plain exporter. Only the encoding step is swapped, and OpenTelemetry lets no one swap it but through
        its private sending step, which moved between releases: ``_client.export(bytes)`` (1.45+) or
        ``_export_serialized_spans(bytes)`` (1.34). Which one exists is read once, at construction; where neither
        does (some releases in between: 1.39 has neither; or a future one), ``export`` is OpenTelemetry's
        unchanged: slower, never wrong. ``RAGTRACE_OTLP_ENCODER=opentelemetry`` (``Env.OTLP_ENCODER``) uses the plain exporter instead.
        """

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            client = self.__dict__.get("_client")
            if client is not None and callable(getattr(client, "export", None)):
                self._send: Any = self._send_client
            elif callable(old := getattr(self, "_export_serialized_spans", None)):
                self._send = old
            else:
                self._send = None

        def _send_client(self, data: bytes) -> Any:
            limit = getattr(self, "_max_request_size", None)
            if isinstance(limit, int) and 0 < limit < len(data):
                import logging

                logging.getLogger(OTLPSpanExporter.__module__).warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                    len(data),
                    limit,
                )
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS if self._client.export(data).success else SpanExportResult.FAILURE

        def export(self, spans: Sequence[Any]) -> Any:
            send = self._send
            if send is None or self._shutdown:
                return super().export(spans)
            metrics = self.__dict__.get("_metrics")
            if metrics is not None and type(metrics).__name__ != "NoOpExporterMetrics":
                return super().export(spans)  # OpenTelemetry's self-metrics asked for: its path records them
            try:
                data = encode_spans(spans)
            except Exception as exc:  # OpenTelemetry's encoder refused the batch too: as its export does
                import logging

                logging.getLogger(OTLPSpanExporter.__module__).error("Failed to encode span batch: %s", exc)
                return SpanExportResult.FAILURE
            return send(data)

    _CLASS = _FastEncodingExporter
    return _CLASS

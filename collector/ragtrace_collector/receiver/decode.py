"""OTLP trace and log requests → the few span fields the collector keeps (the receivers' hot path).

Decoding uses the upb-backed ``opentelemetry.proto`` messages. Each span is read once; only
attributes under the prefixes the conventions need are copied into a plain dict, everything
heavier (record assembly) waits until the trace is complete. Spans with an invalid trace, span or
parent id, or absurd timestamps, are refused and counted by reason (a fixed set, the ``reason`` label of
``ragtrace_spans_rejected_total``), which the receivers report as an OTLP partial success. Every kept
field counts in ``SpanData.nbytes``, the figure ``max_inflight_bytes`` bounds: an exporter chooses which
field is big.

Log requests (:func:`extract_log_events`) keep only GenAI events (``gen_ai.*``: the official instrumentations'
``gen_ai.client.inference.operation.details``, the older per-message ``gen_ai.user.message`` / ``gen_ai.choice``,
others' ``gen_ai.evaluation.result``) that name the span they belong to; each becomes a log-event carrier
(``SpanData.is_log_carrier``) waiting in assembly beside its trace. Every other record is dropped and counted by
reason (:data:`NOT_GENAI`, :data:`NO_SPAN`, :data:`BAD_TIME`).
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace_collector.model.spans import (
    EVENT_TIME,
    LOG_EVENTS,
    MAX_SPAN_SECONDS,
    DecodedLogs,
    DecodedRequest,
    SpanData,
)

# Attribute keys (by prefix) any convention reader looks at; the rest is never copied.
KEPT_PREFIXES: tuple[str, ...] = (
    "retrieval.",
    "gen_ai.",
    "llm.",
    "ragtrace.",
    "openinference.",
    "input.",
    "output.",
    "session.",
    "user.",
    "reranker.",
    "traceloop.",
    "metadata",
    "tag.",
    "db.",
    "exception.",
    "error.",
    "langfuse.",
)
# Events worth keeping: exceptions, the content events of OpenLIT / GenAI conventions (OpenLLMetry's stream
# chunks among them) and OpenInference's first-token event; each keeps its timestamp under EVENT_TIME.
KEPT_EVENT_PREFIXES: tuple[str, ...] = ("exception", "gen_ai.", "First Token Stream Event")

# Python memory a kept span costs beyond its attribute text (measured with tracemalloc on ragtrace-shaped
# spans): the SpanData, its ids and dict, and per attribute two str headers and a dict slot.
_SPAN_OVERHEAD = 600
_ATTR_OVERHEAD = 130
_EVENT_OVERHEAD = 250  # the (name, attrs) tuple and its dict
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_BAD_HEX = base64.b64encode(b"\x00").decode("ascii")  # an id of the wrong length: refused, never read as absent

# Timestamps beyond these (and spans longer than MAX_SPAN_SECONDS) are a broken clock or a hostile client; one such
# span would skew the duration histograms' sums for good, so it is refused. Clocks drift by minutes, or by whole
# hours when a time zone is mistaken for UTC.
MAX_FUTURE_SECONDS = 24 * 3600

# Why a span was refused: the bounded ``reason`` label of ragtrace_spans_rejected_total.
INVALID_TRACE_ID = "invalid trace id"
INVALID_SPAN_ID = "invalid span id"
INVALID_PARENT_ID = "invalid parent span id"
END_BEFORE_START = "end before start"
TOO_LONG = "span too long"
IN_THE_FUTURE = "timestamp in the future"

_MAX_ERROR_CHARS = 300  # of a parser's message in a 400 reply: enough to say what failed, never an echo of the body
# What parsing untrusted bytes can raise (json, upb, json_format, our id rewriting): each is the client's error.
_PARSE_ERRORS = (
    ValueError,  # JSONDecodeError, UnicodeDecodeError, integers over Python's digit limit
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    OverflowError,
    RuntimeError,  # RecursionError: JSON nested deeper than the interpreter's stack
    DecodeError,
    json_format.ParseError,
)


# Why a log record was dropped (the bounded ``outcome`` label of ragtrace_log_records_total).
NOT_GENAI = "not_genai"  # not a GenAI event: application logs, other events
NO_SPAN = "no_span"  # a GenAI event without a valid trace and span id: nothing to join it to
BAD_TIME = "bad_time"  # a timestamp beyond the clock horizon (same rule as spans)
GENAI_EVENT_PREFIX = "gen_ai."
EVENT_NAME_ATTRIBUTE = "event.name"  # where SDKs before the LogRecord ``event_name`` field put it


class MalformedRequest(ValueError):
    """The request body is not a valid OTLP ExportTraceServiceRequest (or ExportLogsServiceRequest)."""

    @classmethod
    def because(cls, what: str, exc: BaseException) -> MalformedRequest:
        """One short, clear message whatever the parser raised (parsers may quote the offending input)."""
        if isinstance(exc, RecursionError):
            detail = "nested too deeply"
        else:
            detail = str(exc) or type(exc).__name__
            if len(detail) > _MAX_ERROR_CHARS:
                detail = detail[:_MAX_ERROR_CHARS] + "..."
        return cls(f"{what}: {detail}")


def _text_bytes(text: str) -> int:
    """Memory of a str's characters: CPython stores 1, 2 or 4 bytes a character (headers are in the overheads)."""
    return len(text) if text.isascii() else sys.getsizeof(text)


# Attribute key -> (the one str every span's attributes share for it, what keeping it costs in ``nbytes`` beyond its
# value), or ``_NOT_KEPT`` when its prefix is not kept. Spans repeat the same few dozen keys: one dict lookup replaces
# a prefix scan and a size check per attribute, and the spans in assembly hold one copy of each key instead of one
# each (a quarter of what a trace keeps). Bounded in keys and in key length, since clients choose the keys: one not
# here is scanned anew each time and kept as its span received it, its text counted with it.
_KEYS: dict[str, tuple[str, int]] = {}
_KEYS_MAX = 4096
_KEYS_MAX_CHARS = 200
_NOT_KEPT: tuple[str, int] = ("", -1)
# A compact ASCII str's header (``sys.getsizeof("")``): what a shared key no longer costs an attribute.
_STR_HEADER = 49


def _key_entry(key: str) -> tuple[str, int]:
    """``key``'s shared str and cost, or ``_NOT_KEPT`` (kept in ``_KEYS`` while there is room)."""
    entry = _KEYS.get(key)
    if entry is not None:
        return entry
    room = len(_KEYS) < _KEYS_MAX and len(key) <= _KEYS_MAX_CHARS
    if not key.startswith(KEPT_PREFIXES):
        entry = _NOT_KEPT
    elif room:
        entry = (key, _ATTR_OVERHEAD - _STR_HEADER)  # its text is held once, by this table
    else:
        return key, _text_bytes(key) + _ATTR_OVERHEAD  # its own copy, in every span that has it
    if room:
        _KEYS[key] = entry
    return entry


def any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays → list, kvlists → dict)."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        return v.double_value
    if kind == "bool_value":
        return v.bool_value
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return None


def _value_bytes(value: Any) -> int:
    """Estimated Python memory of a kept value beyond its holder's slot (strings by length, arrays and
    maps by their items), so large non-string values count against ``max_inflight_bytes`` too."""
    if isinstance(value, str):
        return _text_bytes(value)
    if isinstance(value, list):
        return 56 + sum(8 + (49 + _text_bytes(v) if isinstance(v, str) else _value_bytes(v)) for v in value)
    if isinstance(value, dict):
        return 64 + sum(_text_bytes(k) + _value_bytes(v) + _ATTR_OVERHEAD for k, v in value.items())
    return 16


def extract_spans(request: ExportTraceServiceRequest) -> DecodedRequest:
    """Walk a decoded request once, keeping the interesting attributes of every valid span."""
    out = DecodedRequest()
    traces = out.traces
    keys = _KEYS
    accepted = 0
    last_tid: bytes | None = None  # None, not b"": an empty first trace id must be checked like any other
    trace_hex = ""
    bucket: list[SpanData] = []
    max_ns = MAX_SPAN_SECONDS * 10**9
    horizon = time.time_ns() + MAX_FUTURE_SECONDS * 10**9
    for rs in request.resource_spans:
        service = None
        service_bytes = 0
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                service = kv.value.string_value or None
                service_bytes = _text_bytes(service) if service else 0
                break
        # One service string is shared by this resource's spans: charged once per trace it keeps alive.
        charged: set[str] = set()
        for ss in rs.scope_spans:
            for sp in ss.spans:
                tid = sp.trace_id
                if tid != last_tid:  # spans of one trace usually come together: convert its id once
                    if len(tid) != 16 or tid == _ZERO_TRACE:
                        out.reject(INVALID_TRACE_ID)
                        continue
                    last_tid = tid
                    trace_hex = tid.hex()
                    bucket = traces.get(trace_hex)  # type: ignore[assignment]
                    if bucket is None:
                        bucket = traces[trace_hex] = []
                sid = sp.span_id
                if len(sid) != 8 or sid == _ZERO_SPAN:
                    out.reject(INVALID_SPAN_ID)
                    continue
                pid = sp.parent_span_id
                if pid and len(pid) != 8:
                    out.reject(INVALID_PARENT_ID)
                    continue
                start, end = sp.start_time_unix_nano, sp.end_time_unix_nano
                if start and end and end < start:
                    out.reject(END_BEFORE_START)
                    continue
                if start and end - start > max_ns:
                    out.reject(TOO_LONG)
                    continue
                if start > horizon or end > horizon:
                    out.reject(IN_THE_FUTURE)
                    continue
                attrs: dict[str, Any] = {}
                name = sp.name
                nbytes = _SPAN_OVERHEAD + _text_bytes(name)
                if service_bytes and trace_hex not in charged:
                    charged.add(trace_hex)
                    nbytes += service_bytes
                for kv in sp.attributes:
                    key = kv.key
                    entry = keys.get(key) or _key_entry(key)
                    if entry is _NOT_KEPT:
                        continue
                    key, cost = entry
                    value = kv.value
                    text = value.string_value  # most values are strings: skip the oneof dispatch
                    if text:
                        attrs[key] = text
                        nbytes += cost + (len(text) if text.isascii() else sys.getsizeof(text))
                    else:
                        attrs[key] = kept = any_value(value)
                        nbytes += cost + _value_bytes(kept)
                events: list[tuple[str, dict[str, Any]]] = []
                bad_time = None
                if len(sp.events):
                    for ev in sp.events:
                        ev_name = ev.name
                        if ev_name.startswith(KEPT_EVENT_PREFIXES):
                            # a kept event's time makes durations too (first token, generation end): same rules
                            at = ev.time_unix_nano
                            if at > horizon:
                                bad_time = IN_THE_FUTURE
                                break
                            if start and at and abs(at - start) > max_ns:
                                bad_time = TOO_LONG
                                break
                            ev_attrs = {kv.key: any_value(kv.value) for kv in ev.attributes}
                            ev_attrs[EVENT_TIME] = ev.time_unix_nano  # first-token times (TTFT) need it
                            events.append((ev_name, ev_attrs))
                            # content events carry whole prompts and completions: bounded like attributes
                            nbytes += _EVENT_OVERHEAD + _text_bytes(ev_name) + _value_bytes(ev_attrs)
                if bad_time is not None:
                    out.reject(bad_time)
                    continue
                code: int
                if sp.HasField("status"):
                    status = sp.status
                    code, message = status.code, status.message
                    nbytes += _text_bytes(message)
                else:
                    code, message = 0, ""
                bucket.append(
                    SpanData(
                        trace_hex,
                        sid.hex(),
                        pid.hex() if pid and pid != _ZERO_SPAN else "",  # an all-zero parent: no parent
                        name,
                        start,
                        end,
                        code,
                        message,
                        attrs,
                        events,
                        service,
                        nbytes,
                    )
                )
                accepted += 1
    out.accepted = accepted
    for trace_hex in [t for t, spans in traces.items() if not spans]:
        del traces[trace_hex]  # every span of it was refused
    return out


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    """Decode an OTLP/protobuf body; :class:`MalformedRequest` when it is not one."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("not an OTLP ExportTraceServiceRequest", exc) from exc
    return request


def _hex_to_b64(value: Any) -> Any:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64. Bad hex → a 1-byte id, refused later
    (never an empty one, which would read as "no parent")."""
    if not isinstance(value, str):
        return value
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return _BAD_HEX
    return base64.b64encode(raw).decode("ascii")


def _fix_ids(spans: Iterable[dict]) -> None:
    for span in spans:
        if not isinstance(span, dict):
            continue
        for key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"):
            if key in span:
                span[key] = _hex_to_b64(span[key])
        for link in span.get("links") or []:
            if isinstance(link, dict):
                for key in ("traceId", "spanId", "trace_id", "span_id"):
                    if key in link:
                        link[key] = _hex_to_b64(link[key])


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    """Decode an OTLP/JSON body (hex trace/span ids, as the OTLP spec requires)."""
    try:
        data = json.loads(body)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("invalid JSON", exc) from exc
    if not isinstance(data, dict):
        raise MalformedRequest("OTLP/JSON body must be an object with resourceSpans")
    try:
        for rs in data.get("resourceSpans") or data.get("resource_spans") or []:
            for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
                _fix_ids(ss.get("spans") or [])
        request = ExportTraceServiceRequest()
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("not an OTLP/JSON ExportTraceServiceRequest", exc) from exc
    return request


def _event_name(record: Any) -> str:
    """A log record's event name: the ``event_name`` field, else the ``event.name`` attribute older SDKs write."""
    if record.event_name:
        return str(record.event_name)
    for kv in record.attributes:
        if kv.key == EVENT_NAME_ATTRIBUTE:
            return str(kv.value.string_value)
    return ""


def extract_log_events(request: ExportLogsServiceRequest) -> DecodedLogs:
    """Keep the GenAI events of a logs request as carriers for their spans; count the rest by reason.

    An event's attributes are kept whole (a GenAI event holds only what the conventions read); a map body (the
    older per-message events put ``content`` / ``message`` there) is merged into them. Its time is the record's
    time, else its observed time (``EVENT_TIME``)."""
    out = DecodedLogs()
    horizon = time.time_ns() + MAX_FUTURE_SECONDS * 10**9
    for rl in request.resource_logs:
        service = None
        for kv in rl.resource.attributes:
            if kv.key == "service.name":
                service = kv.value.string_value or None
                break
        for sl in rl.scope_logs:
            for record in sl.log_records:
                name = _event_name(record)
                if not name.startswith(GENAI_EVENT_PREFIX):
                    out.drop(NOT_GENAI)
                    continue
                tid, sid = record.trace_id, record.span_id
                if len(tid) != 16 or tid == _ZERO_TRACE or len(sid) != 8 or sid == _ZERO_SPAN:
                    out.drop(NO_SPAN)
                    continue
                at = record.time_unix_nano or record.observed_time_unix_nano
                if at > horizon:
                    out.drop(BAD_TIME)
                    continue
                attrs: dict[str, Any] = {kv.key: any_value(kv.value) for kv in record.attributes}
                attrs.pop(EVENT_NAME_ATTRIBUTE, None)
                if record.HasField("body"):
                    body = any_value(record.body)
                    if isinstance(body, dict):
                        for key, value in body.items():
                            attrs.setdefault(key, value)
                    elif body is not None and body != "":
                        attrs.setdefault("body", body)
                attrs[EVENT_TIME] = at
                nbytes = _SPAN_OVERHEAD + _EVENT_OVERHEAD + _text_bytes(name) + _value_bytes(attrs)
                trace_hex, span_hex = tid.hex(), sid.hex()
                carrier = SpanData(
                    trace_hex,
                    span_hex,
                    span_hex,
                    LOG_EVENTS,
                    at,
                    at,
                    events=[(name, attrs)],
                    service=service,
                    nbytes=nbytes,
                )
                out.traces.setdefault(trace_hex, []).append(carrier)
                out.accepted += 1
    return out


def parse_logs_protobuf(body: bytes) -> ExportLogsServiceRequest:
    """Decode an OTLP/protobuf logs body; :class:`MalformedRequest` when it is not one."""
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("not an OTLP ExportLogsServiceRequest", exc) from exc
    return request


def parse_logs_json(body: bytes) -> ExportLogsServiceRequest:
    """Decode an OTLP/JSON logs body (hex trace/span ids, as the OTLP spec requires)."""
    try:
        data = json.loads(body)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("invalid JSON", exc) from exc
    if not isinstance(data, dict):
        raise MalformedRequest("OTLP/JSON body must be an object with resourceLogs")
    try:
        for rl in data.get("resourceLogs") or data.get("resource_logs") or []:
            for sl in rl.get("scopeLogs") or rl.get("scope_logs") or []:
                _fix_ids(sl.get("logRecords") or sl.get("log_records") or [])
        request = ExportLogsServiceRequest()
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except _PARSE_ERRORS as exc:
        raise MalformedRequest.because("not an OTLP/JSON ExportLogsServiceRequest", exc) from exc
    return request

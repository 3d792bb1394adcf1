"""OTLP trace requests → the few span fields the collector keeps (the receivers' hot path).

Decoding uses the upb-backed ``opentelemetry.proto`` messages. Each span is read once; only
attributes under the prefixes the conventions need are copied into a plain dict, everything
heavier (record assembly) waits until the trace is complete. Spans with an invalid trace or span id
are refused and counted, which the receivers report as an OTLP partial success.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ragtrace_collector.model.spans import DecodedRequest, SpanData

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
)
# Events worth keeping: exceptions and the content events of OpenLIT / GenAI conventions.
KEPT_EVENT_PREFIXES: tuple[str, ...] = ("exception", "gen_ai.")

# Python memory a kept span costs beyond its attribute text (measured with tracemalloc on ragtrace-shaped
# spans): the SpanData, its ids and dict, and per attribute two str headers and a dict slot.
_SPAN_OVERHEAD = 600
_ATTR_OVERHEAD = 130
_EVENT_OVERHEAD = 250  # the (name, attrs) tuple and its dict
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)


class MalformedRequest(ValueError):
    """The request body is not a valid OTLP ExportTraceServiceRequest."""


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
        return len(value)
    if isinstance(value, list):
        return 56 + sum(8 + (49 + len(v) if isinstance(v, str) else _value_bytes(v)) for v in value)
    if isinstance(value, dict):
        return 64 + sum(len(k) + _value_bytes(v) + _ATTR_OVERHEAD for k, v in value.items())
    return 16


def extract_spans(request: ExportTraceServiceRequest) -> DecodedRequest:
    """Walk a decoded request once, keeping the interesting attributes of every valid span."""
    out = DecodedRequest()
    traces = out.traces
    prefixes = KEPT_PREFIXES
    accepted = 0
    last_tid = b""
    trace_hex = ""
    bucket: list[SpanData] = []
    for rs in request.resource_spans:
        service = None
        for kv in rs.resource.attributes:
            if kv.key == "service.name":
                service = kv.value.string_value or None
                break
        for ss in rs.scope_spans:
            for sp in ss.spans:
                tid = sp.trace_id
                if tid != last_tid:  # spans of one trace usually come together: convert its id once
                    if len(tid) != 16 or tid == _ZERO_TRACE:
                        out.reject("invalid trace id")
                        continue
                    last_tid = tid
                    trace_hex = tid.hex()
                    bucket = traces.get(trace_hex)  # type: ignore[assignment]
                    if bucket is None:
                        bucket = traces[trace_hex] = []
                sid = sp.span_id
                if len(sid) != 8 or sid == _ZERO_SPAN:
                    out.reject("invalid span id")
                    continue
                attrs: dict[str, Any] = {}
                nbytes = _SPAN_OVERHEAD
                for kv in sp.attributes:
                    key = kv.key
                    if key.startswith(prefixes):
                        value = kv.value
                        text = value.string_value  # most values are strings: skip the oneof dispatch
                        if text:
                            attrs[key] = text
                            nbytes += len(key) + len(text) + _ATTR_OVERHEAD
                        else:
                            attrs[key] = kept = any_value(value)
                            nbytes += len(key) + _value_bytes(kept) + _ATTR_OVERHEAD
                events: list[tuple[str, dict[str, Any]]] = []
                if len(sp.events):
                    for ev in sp.events:
                        if ev.name.startswith(KEPT_EVENT_PREFIXES):
                            ev_attrs = {kv.key: any_value(kv.value) for kv in ev.attributes}
                            events.append((ev.name, ev_attrs))
                            # content events carry whole prompts and completions: bounded like attributes
                            nbytes += _EVENT_OVERHEAD + len(ev.name) + _value_bytes(ev_attrs)
                if sp.HasField("status"):
                    status = sp.status
                    code, message = status.code, status.message
                else:
                    code, message = 0, ""
                pid = sp.parent_span_id
                bucket.append(
                    SpanData(
                        trace_hex,
                        sid.hex(),
                        pid.hex() if pid else "",
                        sp.name,
                        sp.start_time_unix_nano,
                        sp.end_time_unix_nano,
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
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise MalformedRequest(f"not an OTLP ExportTraceServiceRequest: {exc}") from exc
    return request


def _hex_to_b64(value: Any) -> Any:
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64. Bad hex → empty id (refused later)."""
    if not isinstance(value, str):
        return value
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""
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
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedRequest(f"invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedRequest("OTLP/JSON body must be an object with resourceSpans")
    try:
        for rs in data.get("resourceSpans") or data.get("resource_spans") or []:
            for ss in rs.get("scopeSpans") or rs.get("scope_spans") or []:
                _fix_ids(ss.get("spans") or [])
        request = ExportTraceServiceRequest()
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except (AttributeError, TypeError, json_format.ParseError) as exc:
        raise MalformedRequest(f"not an OTLP/JSON ExportTraceServiceRequest: {exc}") from exc
    return request

"""One model call traced in two traces: a framework's LLM span, and the client library's span in a trace of its own.

LangChain's OpenInference tracer does not make its spans current, so when the OpenAI instrumentation runs too, the
OpenAI client's span of the chain's model call starts a new trace: the request's record plus a bare half-record
per call, tokens counted twice. The two are the same call when, in the same service, a trace made only of one
model call (every span a generator, nested in one) was sent exactly the prompt messages of a generator span of
another, larger trace, and ran within that span's time. A join (``joins/duplicate_calls.py``) pairs them: the bare
call's spans join the framework span as its child, so the request's one record reads the wire-level details
(tokens once, the first-token time, the served model) as for any layered instrumentation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.conventions import messages, roles
from ragtrace_collector.processor.conventions.trace_spans import classify_spans

# how far (seconds) the bare call may stick out of the framework span: both come from one process's clock
SLACK_NS = 100_000_000


@dataclass(frozen=True)
class ModelCall:
    """A generator span, by what it was sent: (service, prompt digest), where it is and when it ran (no texts kept:
    the pairing state remembers these for a while)."""

    service: str | None
    prompt: str  # digest of the prompt messages
    trace_id: str
    span_id: str
    start: int
    end: int

    @classmethod
    def of(cls, span: SpanData, prompt: str) -> ModelCall:
        return cls(span.service, prompt, span.trace_id, span.span_id, span.start, span.end)


def is_generator(attrs: Mapping[str, Any]) -> bool:
    """Whether a span is a model call (cheap: the receivers' hot path marks services by it)."""
    return roles.span_role(attrs) == roles.GENERATOR


def prompt_digest(span: SpanData) -> str | None:
    """A digest of the span's prompt messages (role and content, in order); None when it recorded none."""
    sent = messages.input_messages(span.attrs, span.events)
    if not sent:
        return None
    return hashlib.blake2b(json.dumps(sent, ensure_ascii=False).encode(), digest_size=16).hexdigest()


def bare_call(spans: list[SpanData]) -> ModelCall | None:
    """The model call a trace consists of, when every span of it is a generator of one call; else None."""
    ts = classify_spans(spans)
    if not ts.generators or len(ts.generators) != len(ts.spans):
        return None
    calls = ts.calls(ts.generators)
    if len(calls) != 1:
        return None
    outer = calls[0][0]
    digest = prompt_digest(outer)
    return ModelCall.of(outer, digest) if digest else None


def framework_calls(spans: list[SpanData]) -> list[ModelCall]:
    """The generator spans of a trace that is more than model calls (a chain, a retrieval...), by prompt."""
    ts = classify_spans(spans)
    if not ts.generators or len(ts.generators) == len(ts.spans):
        return []
    out = []
    for s in ts.generators:
        digest = prompt_digest(s)
        if digest:
            out.append(ModelCall.of(s, digest))
    return out


def encloses(outer: ModelCall, inner: ModelCall) -> bool:
    """Whether ``inner`` ran within ``outer`` (give or take :data:`SLACK_NS`)."""
    return outer.start - SLACK_NS <= inner.start and inner.end <= outer.end + SLACK_NS


def adopt(spans: list[SpanData], bare: ModelCall, into: ModelCall) -> list[SpanData]:
    """The spans of a bare call moved under the framework call ``into``: its trace, the bare call's outermost span
    its child (copies: the originals stay as they were received)."""
    out = []
    for s in spans:
        moved = SpanData.from_dict(s.to_dict())
        moved.trace_id = into.trace_id
        if s.span_id == bare.span_id or not s.parent_id:
            moved.parent_id = into.span_id
        out.append(moved)
    return out

"""What the SDK remembers of recent traces: their root span id and pipeline name, for :func:`ragtrace.feedback`.

Feedback given hours after a request carries only its trace id; with the root span id its span hangs under the
request in a trace backend, and with the pipeline name the collector counts it per pipeline. A span processor that
:func:`ragtrace.init` adds to its provider notes both (the root when it starts, the pipeline name when its span
ends, as the decorators set attributes at the end) in a bounded map, least recently noted first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import attributes as A
from . import safety

MAX_TRACES = 4096  # traces remembered (about 200 bytes each)


class RecentTraces(SpanProcessor):
    """trace id → (root span id, pipeline name), either part None until seen; thread-safe, bounded."""

    def __init__(self, max_traces: int = MAX_TRACES) -> None:
        self.max_traces = max_traces
        self._traces: OrderedDict[int, tuple[int | None, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Note a local root: no parent, or one from another process (not a feedback span's made-up one)."""
        try:
            parent = span.parent
            if (parent is None or parent.is_remote) and span.name != A.RAGTRACE_FEEDBACK_SPAN:
                ctx = span.get_span_context()
                self._note(ctx.trace_id, root=ctx.span_id)
        except Exception as exc:
            safety.report("recent.on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            attrs = span.attributes or {}
            if attrs.get(A.RAGTRACE_SPAN_ROLE) == A.ROLE_PIPELINE:
                name = attrs.get(A.RAGTRACE_PIPELINE_NAME)
                ctx = span.get_span_context()
                if ctx is not None and isinstance(name, str):
                    self._note(ctx.trace_id, pipeline=name)
        except Exception as exc:
            safety.report("recent.on_end", exc)

    def _note(self, trace_id: int, root: int | None = None, pipeline: str | None = None) -> None:
        with self._lock:
            known_root, known_pipeline = self._traces.pop(trace_id, (None, None))
            # the first local root and the outermost pipeline (it ends last) are the request's
            self._traces[trace_id] = (known_root or root, pipeline or known_pipeline)
            while len(self._traces) > self.max_traces:
                self._traces.popitem(last=False)

    def get(self, trace_id: int) -> tuple[int | None, str | None]:
        with self._lock:
            return self._traces.get(trace_id, (None, None))

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


RECENT = RecentTraces()
_added: set[int] = set()  # id() of the providers RECENT was added to (a provider lives as long as the app)
_added_lock = threading.Lock()


def watch(provider: Any) -> None:
    """Add :data:`RECENT` to an SDK ``provider`` once (``init`` may be called again on the same one)."""
    with _added_lock:
        if id(provider) in _added:
            return
        _added.add(id(provider))
    provider.add_span_processor(RECENT)

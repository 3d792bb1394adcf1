"""Span-level test setup: the real SDK with its in-memory exporter behind ragtrace."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace import config, safety


class Spans:
    """Finished spans, looked up by name."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str):
        found = [s for s in self.all() if s.name == name]
        assert found, f"no span named {name!r}; have {[s.name for s in self.all()]}"
        assert len(found) == 1, f"{len(found)} spans named {name!r}"
        return found[0]

    def attrs(self, name: str) -> dict:
        return dict(self.named(name).attributes)


def _reset_settings() -> None:
    s = config.SETTINGS
    s.capture_content = True
    s.redact = None
    s.max_attribute_length = config.DEFAULT_MAX_ATTRIBUTE_LENGTH
    s.max_documents = config.DEFAULT_MAX_DOCUMENTS
    s.max_span_chars = config.DEFAULT_MAX_SPAN_CHARS
    s.tracer = trace.get_tracer(config.TRACER_NAME)


@pytest.fixture
def provider():
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp, exporter
    tp.shutdown()


@pytest.fixture
def spans(provider, monkeypatch):
    """ragtrace wired to an SDK provider with an in-memory exporter (not the global provider)."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    monkeypatch.delenv("RAGTRACE_CAPTURE_CONTENT", raising=False)
    tp, exporter = provider
    safety.reset()
    ragtrace.init(tracer_provider=tp, set_global=False)
    yield Spans(exporter)
    _reset_settings()

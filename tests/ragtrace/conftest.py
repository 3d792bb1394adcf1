"""Span-level test setup: the real SDK with its in-memory exporter behind ragtrace."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace import safety
from tests.support.sdk import Spans, reset_settings


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
    reset_settings()


@pytest.fixture
def restore_settings():
    """ragtrace's module settings put back after a test that calls ``init`` itself."""
    yield
    reset_settings()

"""The SDK under test: finished spans by name, and putting ragtrace's module settings back."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragtrace import config


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


def reset_settings() -> None:
    """ragtrace's module-wide settings back to their defaults (tests that call ``init`` change them)."""
    s = config.SETTINGS
    s.capture_content = True
    s.redact = None
    s.max_attribute_length = config.DEFAULT_MAX_ATTRIBUTE_LENGTH
    s.max_documents = config.DEFAULT_MAX_DOCUMENTS
    s.max_span_chars = config.DEFAULT_MAX_SPAN_CHARS
    s.tracer = trace.get_tracer(config.TRACER_NAME)

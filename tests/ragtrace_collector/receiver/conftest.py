"""A real receiver stack (ingestor → assembler) on loopback for the receiver tests."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from ragtrace_collector.processor.assembly.assembler import Assembler
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.receiver.ingest import Ingestor
from ragtrace_collector.telemetry.ingest import IngestMetrics


class Stack:
    def __init__(self, **ingestor_kw) -> None:
        self.registry = CollectorRegistry()
        self.metrics = IngestMetrics(self.registry)
        self.assembler = Assembler(InMemoryAssemblyState(grace_seconds=0.0), observer=self.metrics)
        self.ingestor = Ingestor(self.assembler.add, self.metrics, **ingestor_kw)

    def requests(self, transport: str, status: str) -> float:
        return (
            self.registry.get_sample_value("ragtrace_otlp_requests_total", {"transport": transport, "status": status})
            or 0.0
        )

    def spans(self, transport: str) -> float:
        return self.registry.get_sample_value("ragtrace_spans_received_total", {"transport": transport}) or 0.0

    def records(self):
        return self.assembler.collect(everything=True)


@pytest.fixture
def make_stack():
    return Stack

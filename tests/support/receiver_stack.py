"""A real receiver stack (ingestor → assembler → metrics) for tests that serve OTLP on loopback."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from ragtrace_collector.config import AuthConfig
from ragtrace_collector.internal.credentials import CredentialGuard
from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.receiver.ingest import Ingestor
from ragtrace_collector.receiver.otlp_grpc import OtlpGrpcReceiver
from ragtrace_collector.receiver.otlp_http import OtlpHttpReceiver
from ragtrace_collector.telemetry.ingest import IngestMetrics


class Stack:
    """Ingestor → assembler with their metrics in a private registry; ``assembly`` goes to the state."""

    def __init__(
        self, assembly: dict[str, Any] | None = None, bearer_token: str | None = None, **ingestor_kw: Any
    ) -> None:
        self.registry = CollectorRegistry()
        self.metrics = IngestMetrics(self.registry)
        state = InMemoryAssemblyState(**{"grace_seconds": 0.0, **(assembly or {})})
        self.assembler = Pipeline(state, observer=self.metrics)
        if bearer_token is not None:  # ``auth.bearer_token``, checked as the service checks it
            ingestor_kw["guard"] = CredentialGuard(AuthConfig(bearer_token=bearer_token), self.registry)
        self.ingestor = Ingestor(self.assembler.add, self.metrics, **ingestor_kw)

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def requests(self, transport: str, status: str) -> float:
        return self.sample("ragtrace_otlp_requests_total", transport=transport, status=status)

    def spans(self, transport: str) -> float:
        return self.sample("ragtrace_spans_received_total", transport=transport)

    def rejected(self, reason: str) -> float:
        return self.sample("ragtrace_spans_rejected_total", reason=reason)

    def records(self) -> list[RagRecord]:
        return self.assembler.collect(everything=True)


class ServedStack(Stack):
    """A :class:`Stack` with both OTLP receivers on loopback ports: ``url`` (HTTP) and ``target`` (gRPC)."""

    def __init__(
        self, assembly: dict[str, Any] | None = None, bearer_token: str | None = None, **ingestor_kw: Any
    ) -> None:
        super().__init__(assembly, bearer_token, **ingestor_kw)
        self.http = OtlpHttpReceiver(self.ingestor, "127.0.0.1", 0)
        self.grpc = OtlpGrpcReceiver(self.ingestor, "127.0.0.1", 0)

    async def start(self) -> ServedStack:
        await self.http.start()
        await self.grpc.start()
        self.url = f"http://127.0.0.1:{self.http.port}/v1/traces"
        self.target = f"127.0.0.1:{self.grpc.port}"
        return self

    async def stop(self) -> None:
        await self.http.shutdown()
        await self.grpc.shutdown(0)  # calls in flight cancelled at once

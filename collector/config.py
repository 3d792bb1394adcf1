"""Collector configuration: one YAML file, every key overridable from the environment.

Resolution order, highest first: explicit ``overrides`` (CLI arguments) → environment
(``RAGTRACE_`` prefix, nesting with ``__``: ``RAGTRACE_SAMPLING__RATE=0.25``) → YAML file →
defaults. The defaults run with no file at all: OTLP/gRPC 4317, OTLP/HTTP 4318, ``/metrics`` 9464,
bound to 127.0.0.1, the embedded judge and the embedded SQLite queue under ``data_dir``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_PREFIX = "RAGTRACE_"
ENV_NESTING = "__"
CONFIG_ENV = "RAGTRACE_CONFIG"  # path of the YAML file when no --config is given


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    grpc_port: int | None = 4317  # None disables the receiver
    http_port: int | None = 4318
    metrics_port: int | None = 9464


class AuthConfig(_Section):
    bearer_token: str | None = None  # when set, OTLP requests must carry "Authorization: Bearer <token>"


class LimitsConfig(_Section):
    max_request_bytes: int = 4 * 1024 * 1024  # decompressed body; larger → HTTP 413 / gRPC RESOURCE_EXHAUSTED
    max_pending_requests: int = 16  # OTLP requests being received at once; above → 503 / RESOURCE_EXHAUSTED
    max_loop_lag_seconds: float | None = 0.5  # event-loop lag / record backlog above which requests are shed
    retry_after_seconds: int = 1


class AssemblyConfig(_Section):
    grace_seconds: float = 2.0  # after the root span ended, wait this long for stragglers
    max_wait_seconds: float = 60.0  # complete a trace this long after its first span regardless
    max_inflight_traces: int = 20_000
    max_inflight_bytes: int = 256 * 1024 * 1024
    late_span_memory: int = 100_000  # completed trace ids remembered to recognise late spans
    sweep_interval_seconds: float = 0.2
    shared_state: str | None = None  # redis://... shares in-flight traces between receivers (scale-out)


class AlwaysSampleConfig(_Section):
    errors: bool = True
    slower_than_seconds: float | None = None
    top_score_below: float | None = None
    with_reference: bool = True
    flagged: bool = True


class BudgetConfig(_Section):
    records_per_minute: float | None = None
    judge_tokens_per_hour: float | None = None


class SamplingConfig(_Section):
    rate: float = 1.0
    pipelines: dict[str, float] = Field(default_factory=dict)
    always: AlwaysSampleConfig = Field(default_factory=AlwaysSampleConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)

    @field_validator("rate")
    @classmethod
    def _rate_in_range(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"sampling rate must be within [0, 1], got {v}")
        return v

    @field_validator("pipelines")
    @classmethod
    def _pipeline_rates(cls, v: dict[str, float]) -> dict[str, float]:
        for name, rate in v.items():
            if not 0.0 <= float(rate) <= 1.0:
                raise ValueError(f"sampling rate for pipeline {name!r} must be within [0, 1], got {rate}")
        return v


class QueueConfig(_Section):
    url: str | None = None  # None → sqlite:///<data_dir>/queue.sqlite
    max_depth: int = 10_000


class JudgeConfig(_Section):
    model: str = "local"
    base_url: str | None = None
    api_key: str | None = None
    concurrency: int = 4
    timeout_seconds: float = 30.0
    max_retries: int = 3


class ScoringConfig(_Section):
    concurrency: int = 4
    lease_seconds: float = 120.0
    metrics: list[str] = Field(
        default_factory=lambda: [
            "faithfulness",
            "hallucination",
            "answer_relevancy",
            "context_precision",
            "context_relevancy",
        ]
    )
    pipelines: dict[str, list[str]] = Field(default_factory=dict)
    # judge outage: the worker pauses this long (doubling up to the max) and leaves records queued
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 30.0


class OtlpEventsConfig(_Section):
    endpoint: str | None = None
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    headers: dict[str, str] = Field(default_factory=dict)


class ExportConfig(_Section):
    otlp_events: OtlpEventsConfig = Field(default_factory=OtlpEventsConfig)
    results_path: str | None = None  # None → <data_dir>/results.sqlite


class CollectorConfig(_Section):
    """The whole collector's configuration (see ``collector/collector.example.yaml``)."""

    role: Literal["all", "receiver", "worker"] = "all"
    data_dir: str = "./ragtrace-data"
    listen: ListenConfig = Field(default_factory=ListenConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

    @property
    def queue_url(self) -> str:
        """The queue URL with the embedded default filled in."""
        if self.queue.url:
            return self.queue.url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'queue.sqlite'}"

    @property
    def results_path(self) -> str:
        """The results store path with the default filled in."""
        return self.export.results_path or str(Path(self.data_dir).resolve() / "results.sqlite")

    @property
    def runs_worker(self) -> bool:
        return self.role in ("all", "worker")

    @property
    def runs_receiver(self) -> bool:
        return self.role in ("all", "receiver")


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _known_path(path: list[str]) -> bool:
    """Whether ``path`` names a field of the config tree (maps such as ``sampling.pipelines`` accept any key)."""
    model: Any = CollectorConfig
    for i, part in enumerate(path):
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return i > 0  # inside a free-form dict field
        if part not in fields:
            return False
        annotation = fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if model is None:
            return True  # a leaf or a dict: the rest of the path is its content
    return True


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Nested overrides from ``RAGTRACE_A__B=value`` variables; values parsed as YAML scalars.

    Variables that do not name a config key (e.g. the SDK's ``RAGTRACE_ENDPOINT``) are ignored.
    """
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split(ENV_NESTING) if p]
        if not path or not _known_path(path):
            continue
        try:
            value = yaml.safe_load(raw) if raw != "" else None
        except yaml.YAMLError:
            value = raw
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def load_config(
    path: str | None = None,
    overrides: dict | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectorConfig:
    """Resolve the configuration: ``overrides`` → environment → YAML file at ``path`` → defaults.

    ``path`` defaults to ``$RAGTRACE_CONFIG`` when set. Raises ``FileNotFoundError`` for a missing
    file, ``ValueError`` for a file that is not a YAML mapping and ``pydantic.ValidationError`` (a
``ValueError`` naming the bad key) for invalid values.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    data: dict[str, Any] = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: the top level of a collector config must be a mapping")
        data = loaded
    data = _deep_merge(data, env_overrides(environ))
    if overrides:
        data = _deep_merge(data, overrides)
    return CollectorConfig.model_validate(data)

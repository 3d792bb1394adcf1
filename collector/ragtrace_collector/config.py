"""Collector configuration: one typed model (:class:`CollectorConfig`) read by ``serve`` and ``evaluate``.

Resolution order, highest first, each default written once (in the model below):

1. arguments: ``overrides`` (the command line of ``serve`` / ``evaluate``);
2. environment: ``RAGTRACE_<SECTION>__<KEY>`` (nesting with ``__``), e.g. ``RAGTRACE_SAMPLING__RATE=0.25``,
   ``RAGTRACE_SCORING__OPTIONS__GEVAL__CRITERIA="Is the answer concise?"``; top-level keys have no
   section: ``RAGTRACE_ROLE=worker``, ``RAGTRACE_DATA_DIR=/var/lib/ragtrace``. Lists and mappings are
   written as YAML/JSON (``RAGTRACE_SCORING__METRICS='[faithfulness, bleu]'``); ``null`` (or an empty
   value, except for ``RAGTRACE_AUTH__BEARER_TOKEN``, where empty is an error) is ``None``;
3. the YAML file: ``--config FILE``, else ``$RAGTRACE_CONFIG``;
4. the defaults: they run with no file at all (OTLP/gRPC 4317, OTLP/HTTP 4318, ``/metrics`` 9464 bound
   to 127.0.0.1, the embedded judge, the embedded SQLite queue under ``data_dir``).

Shorthands: a section given as a plain string is its main value: ``judge: openai/gpt-4o-mini`` (YAML) and
``RAGTRACE_JUDGE=openai/gpt-4o-mini`` mean ``judge.model``; ``queue: redis://...`` /
``RAGTRACE_QUEUE=redis://...`` mean ``queue.url``. The names ``evaluate`` documented before are aliases:
``RAGTRACE_JUDGE_BASE_URL`` → ``judge.base_url``, ``RAGTRACE_JUDGE_API_KEY`` → ``judge.api_key``,
``RAGTRACE_EMBEDDING_MODEL`` → ``judge.embedding_model`` (the ``__`` spelling wins when both are set).

A key the model does not know is an error in the YAML file (``extra="forbid"``) and, in the environment, a
warning naming the variable and the closest known name; the variables other parts of ragtrace read
(:data:`OTHER_ENV_VARS`: the SDK's ``RAGTRACE_ENDPOINT``...) are left alone.

``CollectorConfig(**values)`` validates ``values`` over the defaults and reads nothing else;
:func:`load_config` adds the environment and the file. This module imports nothing else of the collector
(every stage reads its section from here).
"""

from __future__ import annotations

import difflib
import logging
import os
import types
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

try:  # where pydantic-settings keeps it moved between releases
    from pydantic_settings.sources.types import EnvNoneType
except ImportError:  # pragma: no cover - pydantic-settings < 2.7
    from pydantic_settings.sources import EnvNoneType  # type: ignore[attr-defined,no-redef]

log = logging.getLogger("ragtrace_collector.config")

ENV_PREFIX = "RAGTRACE_"
ENV_NESTING = "__"
CONFIG_ENV = "RAGTRACE_CONFIG"  # path of the YAML file when no --config is given

# The single-underscore names ``evaluate`` documented, accepted as aliases of their config keys.
LEGACY_ENV_ALIASES: dict[str, str] = {
    "RAGTRACE_JUDGE_BASE_URL": "RAGTRACE_JUDGE__BASE_URL",
    "RAGTRACE_JUDGE_API_KEY": "RAGTRACE_JUDGE__API_KEY",
    "RAGTRACE_EMBEDDING_MODEL": "RAGTRACE_JUDGE__EMBEDDING_MODEL",
}

# RAGTRACE_ variables read elsewhere: never config keys, never warned about.
OTHER_ENV_VARS: tuple[str, ...] = (
    CONFIG_ENV,  # this module: the YAML file
    # the SDK (ragtrace/config.py)
    "RAGTRACE_ENDPOINT",
    "RAGTRACE_PROTOCOL",
    "RAGTRACE_SERVICE_NAME",
    "RAGTRACE_CAPTURE_CONTENT",
    "RAGTRACE_HEADERS",
    "RAGTRACE_MAX_ATTRIBUTE_LENGTH",
    "RAGTRACE_MAX_DOCUMENTS",
    "RAGTRACE_MAX_SPAN_CHARS",
    "RAGTRACE_MAX_QUEUE_SIZE",
    "RAGTRACE_EXPORT_TIMEOUT",
    "RAGTRACE_SHUTDOWN_TIMEOUT",
    "RAGTRACE_OTLP_ENCODER",
    # the embedded judge (scoring/embeddings.py, scoring/judges/local)
    "RAGTRACE_EMBEDDING_ONNX",
    "RAGTRACE_EMBEDDING_TOKENIZER",
    "RAGTRACE_EMBEDDING_THREADS",
    "RAGTRACE_LOCAL_JUDGE_EMBEDDINGS",
    "RAGTRACE_LOCAL_JUDGE_PARAMS",
    "RAGTRACE_LOCAL_JUDGE_MODEL",  # the judge's own spelling of local_judge.model (the section's wins in the collector)
    "RAGTRACE_LOCAL_JUDGE_WORKERS",  # likewise for local_judge.workers
    "RAGTRACE_CROSS_ENCODER_ONNX",
    "RAGTRACE_WORDNET_DIR",  # scoring/wordnet.py: another WordNet 3.0 dict directory for METEOR
    # the example app (examples/rag_app)
    "RAGTRACE_EXAMPLE_MODEL",
    "RAGTRACE_EXAMPLE_API_BASE",
    # tests and benchmarks; the bearer token the README's OpenTelemetry Collector config reads
    "RAGTRACE_SHARED_DIR",
    "RAGTRACE_OPENLLMETRY_PYTHON",
    "RAGTRACE_TOKEN",
)

# The metrics scored when none are configured (``scoring.metrics``; ``evaluate --metrics``).
DEFAULT_METRICS: tuple[str, ...] = (
    "faithfulness",
    "hallucination",
    "answer_relevancy",
    "context_precision",
    "context_relevancy",
)

# The embedded judge's claim-support models (``local_judge.model``): see the comment in LocalJudgeConfig.
LocalJudgeModel = Literal["reader", "cascade", "features"]
LOCAL_JUDGE_MODELS: tuple[str, ...] = get_args(LocalJudgeModel)
DEFAULT_LOCAL_JUDGE_MODEL: LocalJudgeModel = "cascade"
# Threads the embedded judge decides on (``local_judge.workers``), per claim model: for the cascade two, so one
# record's Python text work runs while another's cross-encoder runs in onnxruntime (which releases the GIL),
# about a tenth more records/s on 2 cores; the feature model is pure Python, where a second thread only
# contends for the GIL (a tenth fewer records/s). Figures: bench/local_judge.py.
DEFAULT_LOCAL_JUDGE_WORKERS: dict[str, int] = {"reader": 2, "cascade": 2, "features": 1}
# The most characters (answer, claims, contexts, question together) one decision of the embedded judge reads
# (``local_judge.max_chars``): its work grows with claims × context sentences (a 337 KB answer took 311 s on 2 cores),
# so a longer record is that record's error, as a judge's context window is an LLM's (100,000 ≈ 25k tokens: at the
# bound the worst record, all answer, takes about 20 s for three metrics on 2 cores; at 300,000, 2.5 minutes).
DEFAULT_LOCAL_JUDGE_MAX_CHARS = 100_000

AnswerRelevancyVariant = Literal["statements", "questions", "embedding"]
ANSWER_RELEVANCY_VARIANTS: tuple[str, ...] = get_args(AnswerRelevancyVariant)
RougeType = Literal["rouge1", "rouge2", "rougeL"]
SafetyCategory = Literal[
    "harmful",
    "malicious",
    "bias",
    "toxic",
    "hateful",
    "sexual",
    "violent",
    "insensitive",
    "self-harm",
    "manipulative",
]
SAFETY_CATEGORIES: tuple[str, ...] = get_args(SafetyCategory)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The key a plain string stands for (``judge: openai/gpt-4o-mini`` → ``judge.model``); None: no shorthand.
    main_key: ClassVar[str | None] = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str) and cls.main_key:
            return {cls.main_key: data}
        return data


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    # 0: any free port; None disables the listener (a port beyond 65535 is a clear error, not a traceback at bind)
    grpc_port: int | None = Field(default=4317, ge=0, le=65535)
    http_port: int | None = Field(default=4318, ge=0, le=65535)
    metrics_port: int | None = Field(default=9464, ge=0, le=65535)
    # Host names the HTTP listeners answer besides IP literals, localhost and the bound host (DNS rebinding:
    # ragtrace_collector.internal.hosts): "collector" (that name), ".example.com" (it and names under it), "*" (any)
    allowed_hosts: list[str] = Field(default_factory=list)


#: Shortest bearer token accepted: 16 bytes of a random token are beyond guessing at any rate a listener answers.
MIN_TOKEN_BYTES = 16


class AuthConfig(_Section):
    """Credentials (``ragtrace_collector.internal.credentials``): which token may ingest, read, review."""

    bearer_token: str | None = None  # the one-token setup: OTLP requests, the explorer and reviews all need it
    # Several tokens per scope (rotation; apps hold ingest tokens, which read nothing): ingest sends spans, read
    # reads records (explorer pages and API), review records human verdicts and reads. A scope with no token is open.
    ingest_tokens: list[str] = Field(default_factory=list)
    read_tokens: list[str] = Field(default_factory=list)
    review_tokens: list[str] = Field(default_factory=list)
    # Listening beyond loopback (listen.host 0.0.0.0, a LAN address) with a scope no token guards is refused at
    # start unless this says anyone who reaches the ports may use it (then one warning at start)
    allow_unauthenticated: bool = False
    # Guessing a token, on any listener (OTLP/HTTP, OTLP/gRPC, explorer login and API, counted together): a client
    # address (an IPv6 /64) that sent this many wrong ones within the window gets 429 (gRPC RESOURCE_EXHAUSTED)
    # until the oldest leaves it; ragtrace_auth_attempts_total{via,status} counts every credential checked
    max_failed_attempts: int = Field(default=10, ge=1)
    failed_attempt_window_seconds: float = Field(default=300.0, gt=0)
    max_tracked_addresses: int = Field(default=10_000, ge=1)  # addresses tracked at once (limited ones kept)
    # Wrong credentials from all addresses together per window: past it, addresses that presented no good one
    # within the window are refused too (rotating addresses)
    max_failed_attempts_total: int = Field(default=1_000, ge=1)
    session_hours: float = Field(default=12.0, gt=0)  # an explorer sign-in lasts this long (then sign in again)

    @field_validator("bearer_token")
    @classmethod
    def _token_strong_enough(cls, value: str | None) -> str | None:
        # An empty variable (RAGTRACE_AUTH__BEARER_TOKEN= in a compose file) must not silently turn auth off.
        return _strong_token("auth.bearer_token", value) if value is not None else None

    @field_validator("ingest_tokens", "read_tokens", "review_tokens")
    @classmethod
    def _tokens_strong_enough(cls, value: list[str], info: Any) -> list[str]:
        return [_strong_token(f"auth.{info.field_name}", v) for v in value]


def _strong_token(where: str, value: str) -> str:
    size = len(value.strip().encode())
    if size < MIN_TOKEN_BYTES:
        what = "empty" if not size else f"{size} bytes"
        raise ValueError(
            f"{where} is {what}: use a random token of at least {MIN_TOKEN_BYTES} bytes (openssl rand -hex 24),"
            " or leave it unset for no authentication on loopback"
        )
    return value.strip()


class LimitsConfig(_Section):
    # decompressed body; larger → HTTP 413 / gRPC RESOURCE_EXHAUSTED
    max_request_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    # whole OTLP requests being decoded at once; above → 503 / RESOURCE_EXHAUSTED
    max_pending_requests: int = Field(default=16, ge=1)
    # event-loop lag / record backlog above which requests are shed; None: never
    max_loop_lag_seconds: float | None = Field(default=0.5, gt=0)
    retry_after_seconds: int = Field(default=1, ge=0)
    # A connection must deliver a request's headers within this of opening or of its previous reply (idle
    # keep-alive connections are closed after it too); a body gets this long, plus its size at the rate below
    read_timeout_seconds: float = Field(default=10.0, gt=0)
    min_body_bytes_per_second: int = Field(default=16 * 1024, gt=0)  # slower uploads → HTTP 408, counted
    # Request bytes held while bodies arrive, all connections together (admission waits for a whole body)
    max_receiving_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # /metrics series per label set (the metrics sharing traffic labels: service, pipeline, model); past it a new
    # label combination is recorded as "other" (ragtrace_metric_series_overflow_total counts it)
    max_series_per_label_set: int = Field(default=2000, ge=0)
    label_idle_seconds: float = Field(default=600.0, gt=0)  # a label value/combination unused this long frees its slot
    # A value or combination turned away ("other") that was seen in this many distinct seconds within the last one to
    # two label_reclaim_window_seconds takes the slot of a held one seen in fewer (one-shot junk names), whose series
    # are removed (ragtrace_metric_series_evicted_total); 0: first come, first served until a slot idles out
    label_reclaim_hits: int = Field(default=3, ge=0)
    label_reclaim_window_seconds: float = Field(default=60.0, gt=0)


class AssemblyConfig(_Section):
    grace_seconds: float = Field(default=2.0, ge=0)  # after the root span ended, wait this long for stragglers
    max_wait_seconds: float = Field(default=60.0, gt=0)  # complete a trace this long after its first span regardless
    max_inflight_traces: int = Field(default=20_000, ge=1)
    max_inflight_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    late_span_memory: int = Field(default=100_000, ge=0)  # completed trace ids remembered to recognise late spans
    sweep_interval_seconds: float = Field(default=0.2, gt=0)
    shared_state: str | None = None  # redis://... shares in-flight traces between receivers (scale-out)
    # shared_state only: a trace a receiver popped stays claimed in Redis until its record is queued; a claim older
    # than this (the receiver was killed in between) is popped again by any receiver. Longer than a sweep's puts
    claim_lease_seconds: float = Field(default=30.0, gt=0)
    # a sampled record lacking a field (question, contexts, answer, model, tokens, TTFT) is counted in
    # ragtrace_record_incomplete_total; the log says why, once per service and cause per this many seconds
    incomplete_log_interval_seconds: float = Field(default=300.0, gt=0)
    # a trace that is one bare model call, in a service whose requests also hold generator spans, waits this long for
    # the request that made the same call (same prompt, enclosing it in time): one record, not two (LangChain's
    # OpenInference tracer + the OpenAI instrumentation); 0 pairs only what completes in the same sweep
    duplicate_call_window_seconds: float = Field(default=10.0, ge=0)
    # OTLP requests are made durable (fsync, group commit) before they are acknowledged, replayed after a crash
    # and deleted once their traces are queued (ragtrace_collector.internal.journal); off with shared_state (the
    # spans wait in Redis) or here. journal_dir: None is <data_dir>/journal
    journal: bool = True
    journal_dir: str | None = None


class AlwaysSampleConfig(_Section):
    errors: bool = True
    slower_than_seconds: float | None = Field(default=None, ge=0)
    top_score_below: float | None = None
    with_reference: bool = True
    flagged: bool = True


class BudgetConfig(_Section):
    records_per_minute: float | None = Field(default=None, ge=0)  # None: no bound
    judge_tokens_per_hour: float | None = Field(default=None, ge=0)


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
    main_key: ClassVar[str | None] = "url"

    url: str | None = None  # None → sqlite:///<data_dir>/queue.sqlite
    max_depth: int = Field(default=10_000, ge=1)
    # Redis queue only: where a receiver holds sampled records while Redis is unreachable, a SQLite file
    # that outlives the process (None → <data_dir>/redis-spill.sqlite) or "memory"
    spill: str | None = None


class JudgeConfig(_Section):
    main_key: ClassVar[str | None] = "model"

    model: str = Field(default="local", min_length=1)  # "local" (embedded offline judge) or a litellm model name
    base_url: str | None = None
    api_key: str | None = None
    embedding_model: str | None = None  # litellm embedding model for the LLM judge; None: the local ONNX embedder
    concurrency: int = Field(default=4, ge=1)
    timeout_seconds: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    max_tokens: int = Field(default=4096, ge=1)  # completion bound sent with every LLM judge request
    max_reply_chars: int = Field(default=100_000, ge=1)  # longer judge replies are refused (an error), never stored


class LocalJudgeConfig(_Section):
    """The embedded judge (``judge.model: local``): which claim-support model it uses."""

    main_key: ClassVar[str | None] = "model"

    # cascade (default): the gradient-boosted feature model decides the clear claims and the shipped int8 ONNX
    # cross-encoder the uncertain ones; reader: the cascade, then every claim it finds supported read by the shipped
    # int8 claim reader (trained on NLI and claim pairs: it reads negation and numbers), whose stack may overrule it
    # (held out: RAGTruth QA 72.9 against the cascade's 74.7, HaluEval 88.9 against 88.1, the held-out contradiction
    # suite 65.4 against 55.4, about half the records/s); both fall back to features when their files
    # are missing or do not load; features: the feature model alone (fastest, least memory, word overlap only).
    # Figures: docs/local-judge-reader.md, docs/local-judge-cross-encoder.md
    model: LocalJudgeModel = DEFAULT_LOCAL_JUDGE_MODEL
    # threads the judge decides on (records are scored scoring.concurrency at a time); unset: the model's own
    # default (DEFAULT_LOCAL_JUDGE_WORKERS: 2 for reader and cascade, 1 for features)
    workers: int | None = Field(default=None, ge=1, le=64)
    # characters one decision reads (answer and contexts together); a longer record is its error, never retried
    max_chars: int = Field(default=DEFAULT_LOCAL_JUDGE_MAX_CHARS, ge=1_000)


class GEvalConfig(_Section):
    """A G-Eval criterion (the ``geval`` metric). Unset keys take the metric's own defaults."""

    criteria: str = Field(min_length=1)
    name: str | None = None  # metric label in the results; unset: "geval"
    params: list[str] | None = None  # record fields shown to the judge; unset: user_input, response
    min_score: int | None = None  # unset: 1
    max_score: int | None = None  # unset: 10
    steps: list[str] | None = None  # fixed evaluation steps; unset: generated once per criteria by the judge

    @model_validator(mode="after")
    def _score_range(self) -> GEvalConfig:
        if self.min_score is not None and self.max_score is not None and self.max_score <= self.min_score:
            raise ValueError(f"max_score ({self.max_score}) must be above min_score ({self.min_score})")
        return self


NliPremise = Literal["retrieved_contexts", "reference"]
SelfCheckVariant = Literal["prompt", "nli"]
SummarizationSource = Literal["user_input", "retrieved_contexts"]


class NliConfig(_Section):
    """The ``nli`` metric: what the response's claims are inferred from."""

    premise: NliPremise = "retrieved_contexts"  # or "reference"


class GPTScoreConfig(_Section):
    """The ``gptscore`` metric: a model that scores given text (prompt log-probabilities with ``echo``)."""

    # a litellm text-completion model reached over the judge's connection (e.g. text-completion-openai/davinci-002,
    # or a vLLM server's model as openai/<name>); unset: the metric is skipped (chat-only models cannot score text)
    model: str | None = None
    # the instruction the response is conditioned on; {user_input}, {retrieved_contexts} and {reference} are filled
    instruction: str = Field(
        default="Answer the question accurately, helpfully and fluently.\nQuestion: {user_input}\nAnswer:",
        min_length=1,
    )


class SelfCheckGPTConfig(_Section):
    """The ``selfcheckgpt`` metric: re-sample the generator and check the answer against the samples."""

    samples: int = Field(default=3, ge=1, le=20)  # extra generations per record (each one paid for)
    temperature: float = Field(default=1.0, gt=0.0, le=2.0)
    model: str | None = None  # litellm model re-sampled over the judge's connection; unset: the record's model
    variant: SelfCheckVariant = "prompt"  # "prompt": support yes/no per sample; "nli": entail/neutral/contradict
    rate: float = Field(default=1.0, ge=0.0, le=1.0)  # share of scored records that also pay for the samples


class PrometheusConfig(_Section):
    """The ``prometheus`` metric: absolute grading on a 1–5 score rubric (the published Prometheus format)."""

    model: str | None = None  # the evaluator model (e.g. a Prometheus 2 model); unset: the judge's model
    criteria: str = Field(
        default="Is the response helpful, correct and complete as an answer to the instruction?", min_length=1
    )
    score_descriptions: tuple[str, str, str, str, str] = (
        "The response does not answer the instruction or is wrong.",
        "The response touches the instruction but is mostly wrong or unhelpful.",
        "The response answers part of the instruction, with errors or omissions.",
        "The response answers the instruction correctly with minor omissions.",
        "The response answers the instruction correctly, completely and helpfully.",
    )
    use_reference: bool = True  # show the record's reference as the score-5 answer when it has one


class SummarizationConfig(_Section):
    """The ``summarization`` metric: the text the response summarises, and the coverage questions asked."""

    source: SummarizationSource = "user_input"
    questions: int = Field(default=5, ge=1, le=20)


class PromptAlignmentConfig(_Section):
    """The ``prompt_alignment`` metric's instructions; unset: extracted from the recorded prompt's system messages."""

    instructions: list[str] = Field(default_factory=list)


class ScoringOptionsConfig(_Section):
    """The knobs the metrics read (``ragtrace_collector.scoring.options.ScoringOptions.from_config``)."""

    answer_relevancy_variant: AnswerRelevancyVariant | None = None  # None: the first the judge supports
    idk_counts_as_supported: bool = False  # faithfulness: an "idk" verdict counts as supported
    questions_n: int = Field(default=3, ge=1)  # answer_relevancy "questions": questions generated per answer
    answer_correctness_weights: tuple[float, float] = (0.75, 0.25)  # (factuality, similarity), normalised
    rouge_type: RougeType = "rougeL"
    safety_categories: tuple[SafetyCategory, ...] = SAFETY_CATEGORIES  # type: ignore[assignment]
    safety_votes: int = 3  # judge votes per category (majority): a positive odd number
    # moverscore token weights: "uniform" (1 each) or "contexts" (IDF over the record's retrieved contexts)
    moverscore_idf: Literal["uniform", "contexts"] = "uniform"
    tool_correctness_ordering: bool = False  # tool_correctness: calls must come in the expected order (LCS)
    tool_correctness_arguments: bool = False  # tool_correctness: a call matches only with the expected arguments
    tool_correctness_exact_match: bool = False  # tool_correctness: 1 only when the calls are exactly the expected
    geval: GEvalConfig | None = None
    dag: dict[str, Any] | str | None = None  # a DAG spec inline, or the path of its YAML file
    nli: NliConfig = Field(default_factory=NliConfig)
    gptscore: GPTScoreConfig = Field(default_factory=GPTScoreConfig)
    selfcheckgpt: SelfCheckGPTConfig = Field(default_factory=SelfCheckGPTConfig)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    summarization: SummarizationConfig = Field(default_factory=SummarizationConfig)
    prompt_alignment: PromptAlignmentConfig = Field(default_factory=PromptAlignmentConfig)

    @field_validator("answer_correctness_weights")
    @classmethod
    def _weights(cls, w: tuple[float, float]) -> tuple[float, float]:
        if min(w) < 0 or sum(w) <= 0:
            raise ValueError(f"must be two non-negative numbers, not both 0, got {w!r}")
        return (w[0] / sum(w), w[1] / sum(w))

    @field_validator("safety_votes")
    @classmethod
    def _votes(cls, v: int) -> int:
        if v < 1 or v % 2 == 0:
            raise ValueError(f"must be a positive odd number (majority vote), got {v}")
        return v

    @field_validator("dag")
    @classmethod
    def _dag_file(cls, v: dict[str, Any] | str | None) -> dict[str, Any] | str | None:
        if isinstance(v, str) and "\n" not in v and not Path(v).is_file():
            raise ValueError(f"no such DAG file: {v}")
        return v


class ScoringConfig(_Section):
    concurrency: int = Field(default=4, ge=1)  # records scored at once
    lease_seconds: float = Field(default=120.0, gt=0)
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS))
    pipelines: dict[str, list[str]] = Field(default_factory=dict)
    options: ScoringOptionsConfig = Field(default_factory=ScoringOptionsConfig)
    # judge outage: the worker pauses this long (doubling up to the max) and leaves records queued
    backoff_initial_seconds: float = Field(default=1.0, gt=0)
    backoff_max_seconds: float = Field(default=30.0, gt=0)

    @model_validator(mode="after")
    def _backoff_grows(self) -> ScoringConfig:
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ValueError(
                f"backoff_max_seconds ({self.backoff_max_seconds}) is below backoff_initial_seconds"
                f" ({self.backoff_initial_seconds})"
            )
        return self

    @model_validator(mode="after")
    def _metrics_have_their_options(self) -> ScoringConfig:
        named = set(self.metrics).union(*self.pipelines.values())
        if "geval" in named and self.options.geval is None:
            raise ValueError("the geval metric is listed but scoring.options.geval (its criteria) is not set")
        if "dag" in named and self.options.dag is None:
            raise ValueError("the dag metric is listed but scoring.options.dag (its decision tree) is not set")
        return self


class OtlpEventsConfig(_Section):
    endpoint: str | None = None
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    headers: dict[str, str] = Field(default_factory=dict)


class ResultsRetentionConfig(_Section):
    """How long the results store keeps records; enforced every ``interval_seconds`` by the scoring process."""

    max_age_hours: float | None = Field(default=168.0, gt=0)  # records stored longer ago are deleted; None: kept
    max_bytes: int | None = Field(default=1024**3, gt=0)  # past this the oldest records are deleted; None: no bound
    interval_seconds: float = Field(default=300.0, gt=0)


class PhoenixConfig(_Section):
    """Scores as Arize Phoenix span and trace annotations (``ragtrace_collector.exporter.phoenix``)."""

    main_key: ClassVar[str | None] = "endpoint"

    endpoint: str | None = None  # Phoenix's base URL, e.g. http://phoenix:6006; None disables
    api_key: str | None = None  # sent as "Authorization: Bearer <key>" when Phoenix has authentication on
    batch_size: int = Field(default=100, ge=1)  # annotations per POST /v1/span_annotations
    max_pending: int = Field(default=10_000, ge=1)  # annotations waiting to be sent; more are dropped, counted
    timeout_seconds: float = Field(default=10.0, gt=0)  # one request; a failed batch is retried with backoff


class ExportConfig(_Section):
    otlp_events: OtlpEventsConfig = Field(default_factory=OtlpEventsConfig)
    phoenix: PhoenixConfig = Field(default_factory=PhoenixConfig)
    results_path: str | None = None  # None → <data_dir>/results.sqlite
    results_retention: ResultsRetentionConfig = Field(default_factory=ResultsRetentionConfig)
    # Scaled out on Redis: workers stream each scored record to {prefix}:results, which the receivers' explorers
    # follow (scoring/results_replica.py); the stream keeps about this many of the newest records
    results_stream_max_entries: int = Field(default=20_000, ge=100)


class ExplorerConfig(_Section):
    """The records explorer and its JSON API, served on the ``/metrics`` listener (``listen.metrics_port``)."""

    enabled: bool = True
    page_size: int = Field(default=50, ge=1, le=1000)  # records per page (the API's default ``limit``)
    # Trace links on the record page: name → URL with {trace_id}, e.g. {Tempo: "http://tempo:3200/...{trace_id}"}
    trace_links: dict[str, str] = Field(default_factory=dict)
    # Prometheus rules whose ragtrace:eval_score:threshold_table colours the score chips; None: the shipped rules
    rules_file: str | None = None
    # Store reads (lists, records, sessions) run on the explorer's own threads, never on the pool /metrics and
    # scoring share; past max_reads_in_flight (running and waiting) a read gets 503, past max_reads_per_client
    # from one client address 429, both with Retry-After
    read_threads: int = Field(default=2, ge=1)
    max_reads_in_flight: int = Field(default=16, ge=1)
    max_reads_per_client: int = Field(default=4, ge=1)

    @field_validator("trace_links")
    @classmethod
    def _links_name_the_trace(cls, v: dict[str, str]) -> dict[str, str]:
        for name, template in v.items():
            if "{trace_id}" not in template or not template.startswith(("http://", "https://")):
                raise ValueError(f"trace link {name!r} must be an http(s) URL containing {{trace_id}}")
        return v


class ReviewConfig(_Section):
    """The quality loop's reviewing side: the review queue, reviewer verdicts and judge-vs-human agreement."""

    # A record is in the uniform random sample when the hash of its trace id falls under this share: reviews of
    # sampled records are the honest estimate of agreement (the queue shows them first, in hash order)
    sample_rate: float = Field(default=0.2, ge=0.0, le=1.0)
    queue_pool: int = Field(default=2000, ge=1)  # newest scored records of the metric the queue picks among
    max_body_bytes: int = Field(default=256 * 1024, ge=1024)  # a review or feedback request body; larger: 413
    agreement_window_days: float = Field(default=30.0, gt=0)  # agreement is over the reviews of this many days
    # ragtrace_judge_agreement is recomputed at most this often (a scrape reads the cached figures)
    agreement_cache_seconds: float = Field(default=60.0, ge=0)
    max_agreement_series: int = Field(default=50, ge=1)  # (metric, judge) pairs exported, the most reviewed first
    # Scaled out on Redis: end-user feedback and reviews are shared between hosts through one stream
    # (review/feedback_relay.py), which keeps about this many of the newest items (a host down longer misses the oldest)
    feedback_relay_max_entries: int = Field(default=100_000, ge=1_000)


class ForwardConfig(_Section):
    """Every OTLP trace request received, passed on unchanged to a trace backend (``exporter/forward.py``)."""

    main_key: ClassVar[str | None] = "endpoint"

    # OTLP/HTTP base URL (http://tempo:4318; /v1/traces is appended unless given) or, with grpc, host:port; None: off
    endpoint: str | None = None
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"  # http passes JSON requests on as JSON
    headers: dict[str, str] = Field(default_factory=dict)  # sent with every forwarded request (gRPC metadata)
    compression: Literal["none", "gzip"] = "none"
    max_queue_bytes: int = Field(default=64 * 1024 * 1024, gt=0)  # waiting or in flight; past it requests are dropped
    max_queue_requests: int = Field(default=10_000, ge=1)
    timeout_seconds: float = Field(default=10.0, gt=0)  # one attempt
    max_attempts: int = Field(default=5, ge=1)  # for retryable answers (429, 502-504, unreachable), with backoff
    concurrency: int = Field(default=4, ge=1)  # requests in flight to the endpoint at once


class _Inputs(NamedTuple):
    path: str | None
    environ: Mapping[str, str]


# What load_config() is resolving (read by CollectorConfig.settings_customise_sources).
_LOADING: ContextVar[_Inputs | None] = ContextVar("ragtrace_config_loading", default=None)


class CollectorConfig(BaseSettings):
    """The whole collector's configuration (see ``collector/collector.example.yaml``)."""

    model_config = SettingsConfigDict(
        extra="forbid",
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTING,
        env_parse_none_str="null",
        case_sensitive=False,
    )

    role: Literal["all", "receiver", "worker"] = "all"
    data_dir: str = "./ragtrace-data"
    # A graceful stop (SIGTERM) ends within this, whatever the downstreams and the judge do: under Docker's 10 s
    # grace before SIGKILL. What it leaves undone is counted (reason/outcome "shutdown") and stays durable.
    shutdown_timeout_seconds: float = Field(default=8.0, gt=0)
    listen: ListenConfig = Field(default_factory=ListenConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    local_judge: LocalJudgeConfig = Field(default_factory=LocalJudgeConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    explorer: ExplorerConfig = Field(default_factory=ExplorerConfig)
    review: ReviewConfig = Field(default_factory=ReviewConfig)
    forward: ForwardConfig = Field(default_factory=ForwardConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments → environment → YAML file (→ defaults), inside :func:`load_config`; else the arguments only."""
        inputs = _LOADING.get()
        if inputs is None:
            return (init_settings,)
        return (init_settings, _EnvSource(settings_cls, inputs.environ), _YamlFileSource(settings_cls, inputs.path))

    @property
    def queue_url(self) -> str:
        """The queue URL with the embedded default filled in."""
        if self.queue.url:
            return self.queue.url
        return f"sqlite:///{Path(self.data_dir).resolve() / 'queue.sqlite'}"

    @property
    def queue_spill(self) -> str:
        """Where a receiver holds records while a Redis queue is unreachable, with the default filled in."""
        return self.queue.spill or str(Path(self.data_dir).resolve() / "redis-spill.sqlite")

    @property
    def journal_path(self) -> str | None:
        """Where the assembly journal lives, or None when there is none (off, or in-flight spans in Redis)."""
        if not self.assembly.journal or self.assembly.shared_state or not self.runs_receiver:
            return None
        return self.assembly.journal_dir or str(Path(self.data_dir).resolve() / "journal")

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


# --- the model's tree ---------------------------------------------------------------------------------


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The section model an annotation holds (``GEvalConfig | None`` → ``GEvalConfig``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _section_of(arg)
            if found is not None:
                return found
    return None


def _is_mapping(annotation: Any) -> bool:
    """Whether a leaf takes free-form keys (``dict[...]``, possibly within a union)."""
    if annotation is dict or get_origin(annotation) is dict:
        return True
    return get_origin(annotation) in (Union, types.UnionType) and any(_is_mapping(a) for a in get_args(annotation))


def _lookup(path: list[str]) -> type[BaseModel] | bool:
    """What ``path`` (lower-case keys) names: a section model, ``True`` for a value, ``False`` for nothing."""
    model: type[BaseModel] = CollectorConfig
    for i, part in enumerate(path):
        field = model.model_fields.get(part)
        if field is None:
            return False
        section = _section_of(field.annotation)
        if section is None:
            return i == len(path) - 1 or _is_mapping(field.annotation)
        model = section
    return model


def _env_names(model: type[BaseModel] = CollectorConfig, prefix: str = ENV_PREFIX) -> list[str]:
    """Every variable naming a key or a section of the model."""
    out: list[str] = []
    for name, field in model.model_fields.items():
        env = prefix + name.upper()
        out.append(env)
        section = _section_of(field.annotation)
        if section is not None:
            out.extend(_env_names(section, env + ENV_NESTING))
    return out


def _expand_shorthands(data: Any, model: type[BaseModel] = CollectorConfig) -> Any:
    """``{"judge": "x"}`` → ``{"judge": {"model": "x"}}`` throughout, so sources merge key by key."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for key, value in out.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        section = _section_of(field.annotation) if field is not None else None
        if section is None:
            continue
        main = getattr(section, "main_key", None)
        if isinstance(value, str) and main:
            out[key] = {main: value}
        elif isinstance(value, Mapping):
            out[key] = _expand_shorthands(value, section)
    return out


# --- sources ------------------------------------------------------------------------------------------

_NULLS = ("", "~", "null", "Null", "NULL")
# Variables whose empty value is kept (and refused by the model) rather than read as unset: an unset variable
# interpolated into a compose file must not silently turn authentication off.
_EMPTY_IS_A_VALUE = frozenset({f"{ENV_PREFIX}AUTH{ENV_NESTING}BEARER_TOKEN"})


def settings_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The ``RAGTRACE_`` variables of ``environ`` that set config keys, in canonical spelling, and the
    unknown ones (neither a key nor in :data:`OTHER_ENV_VARS`).

    Legacy aliases become their ``__`` names, a section's plain string its main key
    (``RAGTRACE_JUDGE`` → ``RAGTRACE_JUDGE__MODEL``); an explicitly spelled key wins over either.
    """
    settings: dict[str, str] = {}
    unknown: list[str] = []
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in OTHER_ENV_VARS:
            continue
        if name in LEGACY_ENV_ALIASES:
            if LEGACY_ENV_ALIASES[name] in environ:
                continue
            name = LEGACY_ENV_ALIASES[name]
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split(ENV_NESTING)]
        target = _lookup(path) if all(path) else False
        if target is False:
            unknown.append(name)
            continue
        main = getattr(target, "main_key", None) if isinstance(target, type) else None
        if main and not str(value).lstrip().startswith("{"):
            name = f"{name}{ENV_NESTING}{main.upper()}"
            if name in environ:
                continue
        empty_kept = value == "" and name in _EMPTY_IS_A_VALUE
        settings[name] = "null" if value in _NULLS and not empty_kept else value
    return settings, unknown


def warn_unknown_env(unknown: list[str]) -> None:
    """One warning per unknown variable, with the closest known name when there is one."""
    if not unknown:
        return
    known = _env_names() + list(LEGACY_ENV_ALIASES) + list(OTHER_ENV_VARS)
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        log.warning("%s is not a ragtrace setting and is ignored%s", name, hint)


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (already canonical, see
    :func:`settings_environment`); lists and mappings decode as YAML (a superset of JSON)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {
            (k if self.case_sensitive else k.lower()): (EnvNoneType(v) if v == self.env_parse_none_str else v)
            for k, v in self._environ.items()
        }

    def decode_complex_value(self, field_name: str, field: Any, value: Any) -> Any:
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise ValueError(f"{field_name}: not valid YAML/JSON ({problem}): {value!r}") from None


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The mapping in a YAML config file. ``FileNotFoundError`` when missing, ``ValueError`` when not YAML
    or not a mapping."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: the top level of a collector config must be a mapping")
    return loaded


class _YamlFileSource(InitSettingsSource):
    """The YAML file (nothing when ``path`` is None), shorthands expanded."""

    def __init__(self, settings_cls: type[BaseSettings], path: str | None) -> None:
        data = _expand_shorthands(read_config_file(path)) if path else {}
        super().__init__(settings_cls, init_kwargs=data)


# --- entry points -------------------------------------------------------------------------------------


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The nested values the environment contributes (``RAGTRACE_A__B=value`` → ``{"a": {"b": value}}``).

    Variables that do not name a config key (e.g. the SDK's ``RAGTRACE_ENDPOINT``) are left out.
    """
    settings, _ = settings_environment(os.environ if environ is None else environ)
    return _EnvSource(CollectorConfig, settings)()


def load_config(
    path: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectorConfig:
    """Resolve the configuration: ``overrides`` → environment → YAML file at ``path`` → defaults.

    ``path`` defaults to ``$RAGTRACE_CONFIG`` when set; ``environ`` to ``os.environ``. Unknown
    ``RAGTRACE_*`` variables are logged as warnings. Raises ``FileNotFoundError`` for a missing file,
    ``ValueError`` for a file that is not a YAML mapping or an environment value that does not parse, and
    ``pydantic.ValidationError`` (a ``ValueError`` naming the bad key; :func:`describe_error` makes it one
    line) for invalid values.
    """
    from pydantic_settings import SettingsError

    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV) or None
    settings, unknown = settings_environment(environ)
    warn_unknown_env(unknown)
    token = _LOADING.set(_Inputs(str(path) if path else None, settings))
    try:
        return CollectorConfig(**_expand_shorthands(dict(overrides or {})))
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ else ""
        raise ValueError(f"environment: {exc}{cause}") from None
    finally:
        _LOADING.reset(token)


def describe_error(exc: BaseException, prefix: str = "") -> str:
    """A configuration error on one line, naming each bad key
    (``scoring.options.answer_relevancy_variant: Input should be 'statements', ...``); ``prefix`` is the
    path of the section that was validated when it was not the whole config."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    parts = []
    for err in exc.errors(include_url=False):
        loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and p.startswith("function-"))]
        loc = [*(prefix.split(".") if prefix else []), *loc]
        key = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(loc))
        msg = str(err.get("msg", "invalid"))
        msg = msg.removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key" + _suggest_key([str(p) for p in loc if isinstance(p, str)])
        elif (
            "input" in err
            and err.get("type") not in ("missing", "value_error")
            and not isinstance(err["input"], (dict, list))
        ):
            msg = f"{msg} (got {err['input']!r})"
        parts.append(f"{key or 'config'}: {msg}")
    return "; ".join(parts)


def _suggest_key(loc: list[str]) -> str:
    """``; did you mean listen?`` for a misspelt key, when a close one exists."""
    model: type[BaseModel] | None = CollectorConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part) if model is not None else None
        model = _section_of(field.annotation) if field is not None else None
    if model is None or not loc:
        return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""

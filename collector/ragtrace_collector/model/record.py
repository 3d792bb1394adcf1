"""RagRecord: the one type passed between the collector's stages.

Field names follow Ragas where Ragas has one (``user_input``, ``retrieved_contexts``,
``response``, ``reference``) so a record dumps straight to a Ragas-style JSONL row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Context(BaseModel):
    """One retrieved chunk, in rank order."""

    model_config = ConfigDict(extra="ignore")

    content: str
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Turn(BaseModel):
    """One conversation turn (for multi-turn metrics such as completeness)."""

    role: str
    content: str


class ToolCall(BaseModel):
    """One tool call: its name and arguments (Ragas's ``ToolCall``: ``name``, ``args``).

    A plain string is a call by that name with no arguments stated; a dict may name its arguments ``args``,
    ``arguments`` (OpenAI, OTel GenAI) or ``input_parameters`` (DeepEval), a JSON string or an object.
    """

    model_config = ConfigDict(extra="ignore")

    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict) and "args" not in value:
            args = next((value[k] for k in ("arguments", "input_parameters") if value.get(k) is not None), None)
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except (ValueError, RecursionError):  # as internal/json_input.loads (the model imports no stage)
                    raise ValueError(f"tool call arguments are not a JSON object: {args[:80]!r}") from None
            if args is not None:
                return {**value, "args": args}
        return value


class RagRecord(BaseModel):
    """A whole RAG request: what was asked, retrieved, answered, and how fast.

    ``retrieved_contexts`` accepts plain strings (Ragas rows) or dicts with ``content``
    (or ``page_content``/``text``), ``id``, ``score`` and ``metadata``.
    """

    model_config = ConfigDict(extra="ignore")

    id: str | None = None  # dataset row id; defaults to trace_id for live records
    trace_id: str | None = None  # 32 lowercase hex digits
    service: str | None = None
    pipeline: str | None = None

    user_input: str | None = None
    retrieved_contexts: list[Context] = Field(default_factory=list)
    response: str | None = None
    reference: str | None = None
    turns: list[Turn] = Field(default_factory=list)
    # the answering generator's prompt as sent, where the trace recorded it (SelfCheckGPT re-samples it,
    # prompt alignment reads the template's instructions from its system messages)
    prompt_messages: list[Turn] = Field(default_factory=list)
    # agentic requests: the tools called (from tool spans, or a data set row) and those expected (Ragas's name);
    # None: not known (a row without the field), [] : none called / none expected
    tools_called: list[ToolCall] | None = None
    reference_tool_calls: list[ToolCall] | None = None

    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    request_duration_seconds: float | None = None
    retrieval_duration_seconds: float | None = None
    generation_duration_seconds: float | None = None
    streamed: bool | None = None

    session_id: str | None = None
    user_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None  # error type/message of the request, None when it succeeded
    sample_requested: bool = False  # the app flagged this request for scoring
    sampling_weight: float = 1.0  # 1 / sampling probability, for unbiased aggregates
    start_time_unix_nano: int | None = None
    end_time_unix_nano: int | None = None

    @field_validator("retrieved_contexts", mode="before")
    @classmethod
    def _coerce_contexts(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ValueError("retrieved_contexts must be a list of strings or of documents")
        out = []
        for item in value:
            if isinstance(item, str):
                out.append({"content": item})
            elif isinstance(item, dict) and "content" not in item:
                text = item.get("page_content", item.get("text"))
                out.append({**item, "content": text if text is not None else ""})
            else:
                out.append(item)
        return out

    @property
    def context_texts(self) -> list[str]:
        """The retrieved chunks' text, in rank order (what Ragas calls ``retrieved_contexts``)."""
        return [c.content for c in self.retrieved_contexts]

    @property
    def context_scores(self) -> list[float | None]:
        """The retrieved chunks' scores, in rank order (what the sampler's low-score rule reads)."""
        return [c.score for c in self.retrieved_contexts]

    @property
    def key(self) -> str:
        """Stable identity used for idempotent scoring: trace id for live records, else row id."""
        return self.trace_id or self.id or ""

    def to_ragas_row(self) -> dict[str, Any]:
        """A Ragas single-turn row (plain-string contexts) with our extra fields beside it."""
        row = self.model_dump(exclude_none=True, exclude_defaults=True)
        row["retrieved_contexts"] = self.context_texts
        return row


class RecordFacts(Protocol):
    """What the latency metrics and the sampler read of a record: a :class:`RecordSummary` (every trace) or a whole
    :class:`RagRecord` (a data set row, a test) answers the same."""

    @property
    def trace_id(self) -> str | None: ...
    @property
    def service(self) -> str | None: ...
    @property
    def pipeline(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def ttft_seconds(self) -> float | None: ...
    @property
    def tpot_seconds(self) -> float | None: ...
    @property
    def request_duration_seconds(self) -> float | None: ...
    @property
    def retrieval_duration_seconds(self) -> float | None: ...
    @property
    def generation_duration_seconds(self) -> float | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def reference(self) -> str | None: ...
    @property
    def sample_requested(self) -> bool: ...
    @property
    def context_scores(self) -> Sequence[float | None]: ...


@dataclass(slots=True)
class RecordSummary:
    """The text-free part of a record, named as on :class:`RagRecord`: what every trace gets (latency metrics,
    sampling rules) at a fraction of a whole record's cost; only the sampled traces are built in full. Its fields
    equal the full record's (``tests/ragtrace_collector/processor/test_summary_differential.py``)."""

    trace_id: str | None
    service: str | None = None
    pipeline: str | None = None
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None
    request_duration_seconds: float | None = None
    retrieval_duration_seconds: float | None = None
    generation_duration_seconds: float | None = None
    streamed: bool | None = None
    session_id: str | None = None
    user_id: str | None = None
    reference: str | None = None
    sample_requested: bool = False
    error: str | None = None
    start_time_unix_nano: int | None = None
    end_time_unix_nano: int | None = None
    # How to read the scores of the record's contexts, in rank order: called at most once, when the low-score
    # sampling rule asks (``context_scores``), since some conventions keep a score only inside a document's JSON
    scores_source: Callable[[], list[float | None]] | None = field(default=None, repr=False, compare=False)
    _scores: list[float | None] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def context_scores(self) -> list[float | None]:
        """The contexts' scores, as the full record's ``context_scores`` (read on first use only)."""
        if self._scores is None:
            self._scores = self.scores_source() if self.scores_source is not None else []
            self.scores_source = None  # what it held (the trace's spans) is not kept alive by the summary
        return self._scores

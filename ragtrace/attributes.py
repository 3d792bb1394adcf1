"""The span contract: every attribute name the SDK writes and the collector reads, in one place.

Two conventions are written side by side so that any backend can read our spans:
OpenInference (Arize Phoenix, Langfuse's OpenInference mapping) and the OpenTelemetry
GenAI semantic conventions (``gen_ai.*``). Names under ``ragtrace.*`` carry what
neither convention defines yet (TPOT, chunk counts, reference answers for canaries).

Each retrieved text goes on the wire once. Texts are what a request's bytes are made of (five 1 KB documents
are 95% of a traced request), every copy is encoded, sent and stored, and the collector reads a text from
wherever it is. Where each one lives, and why:

- **A retrieved document** (and a reranker's output): on the span that returned it, as OpenInference
  ``retrieval.documents.{i}.document.{id,content,score,metadata}`` (``reranker.output_documents...``). It is the
  only convention with a place for a document's text (Phoenix shows it; the collector reads it first), and the
  span that returned the document is where it belongs. GenAI's ``gen_ai.retrieval.documents`` (opt-in) names
  the documents by ``id`` and ``score``, as its schema asks ("SHOULD contain at least id and score"), and is left
  out when a document has no id rather than carry its text a second time.
- **The contexts a generator was given**: ``ragtrace.generator.context_documents``, one ``"<span id>:<index>"``
  per context, when each is a document a span of the same trace sent (a retriever's or reranker's output: the
  usual RAG request); the texts themselves in ``ragtrace.generator.contexts`` only when some are not (contexts
  from elsewhere, a retriever not traced, a document cut by a limit). The collector prefers the documents of
  the retrieval spans anyway, so a reference loses it nothing.
- **A generator's input**: its messages, in ``llm.input_messages`` (OpenInference) and ``gen_ai.input.messages``
  (GenAI; opt-in, the JSON schema in ``tests/ragtrace/schemas``) — never again in ``input.value``, which
  OpenInference readers do not need on an LLM span that has messages. Messages the app passed are the prompt as
  sent, contexts included as the app embedded them. A generator given a prompt (and contexts) rather than
  messages gets one user message holding the prompt alone: the prompt the model saw is not known, and a
  made-up one that pasted the contexts in would send each of them once more.
- **Left as each convention asks** (short, or the span's own): the query (``input.value`` and GenAI's
  ``gen_ai.retrieval.query.text`` on a retriever), system instructions (``gen_ai.system_instructions`` and the
  OpenInference system message), the answer (``output.value`` and ``gen_ai.output.messages``), and a reranker's
  input documents (OpenInference defines no reference).

Nor does a span carry what a reader infers: ``input.mime_type``/``output.mime_type`` only for JSON (text is
OpenInference's default), ``ragtrace.retrieval.documents_total`` only when the per-span cap left documents out.
Every attribute costs the exporter as much CPU as a kilobyte of text does.

GenAI's required attributes (``gen_ai.operation.name``, ``gen_ai.provider.name`` where known,
``gen_ai.request.model`` where known, ``error.type`` on failure) are written on every span they apply to.
"""

from __future__ import annotations

# --- OpenInference -------------------------------------------------------------------------
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OPENINFERENCE_PROJECT_NAME = "openinference.project.name"  # resource attribute: Phoenix's project
SPAN_KIND_CHAIN = "CHAIN"
SPAN_KIND_RETRIEVER = "RETRIEVER"
SPAN_KIND_RERANKER = "RERANKER"
SPAN_KIND_LLM = "LLM"
SPAN_KIND_EMBEDDING = "EMBEDDING"
SPAN_KIND_EVALUATOR = "EVALUATOR"
SPAN_KIND_TOOL = "TOOL"

INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
MIME_TEXT = "text/plain"
MIME_JSON = "application/json"

SESSION_ID = "session.id"
USER_ID = "user.id"
METADATA = "metadata"  # JSON string
TAG_TAGS = "tag.tags"  # list[str]

RETRIEVAL_DOCUMENTS = "retrieval.documents"  # prefix: retrieval.documents.{i}.document.{field}
DOCUMENT_ID = "document.id"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"  # JSON string

RERANKER_INPUT_DOCUMENTS = "reranker.input_documents"
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
RERANKER_QUERY = "reranker.query"
RERANKER_MODEL_NAME = "reranker.model_name"
RERANKER_TOP_K = "reranker.top_k"

LLM_MODEL_NAME = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_SYSTEM = "llm.system"
LLM_INVOCATION_PARAMETERS = "llm.invocation_parameters"
LLM_INPUT_MESSAGES = "llm.input_messages"  # prefix: llm.input_messages.{i}.message.{role,content}
LLM_OUTPUT_MESSAGES = "llm.output_messages"
MESSAGE_ROLE = "message.role"
MESSAGE_CONTENT = "message.content"
LLM_TOKEN_COUNT_PROMPT = "llm.token_count.prompt"
LLM_TOKEN_COUNT_COMPLETION = "llm.token_count.completion"
LLM_TOKEN_COUNT_TOTAL = "llm.token_count.total"

TOOL_NAME = "tool.name"
TOOL_DESCRIPTION = "tool.description"
TOOL_PARAMETERS = "tool.parameters"  # JSON schema of the parameters the tool takes


def document_attr(i: int, field: str, prefix: str = RETRIEVAL_DOCUMENTS) -> str:
    """``retrieval.documents.{i}.document.{field}`` (OpenInference flattened list form)."""
    return f"{prefix}.{i}.document.{field}"


def message_attr(i: int, field: str, prefix: str = LLM_INPUT_MESSAGES) -> str:
    """``llm.input_messages.{i}.message.{field}``."""
    return f"{prefix}.{i}.message.{field}"


# --- OpenTelemetry GenAI semantic conventions ----------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"  # "retrieval" | "chat" | "text_completion" | ...
GEN_AI_OPERATION_RETRIEVAL = "retrieval"
GEN_AI_OPERATION_CHAT = "chat"
GEN_AI_OPERATION_INVOKE_AGENT = "invoke_agent"
GEN_AI_OPERATION_WORKFLOW = "invoke_workflow"
GEN_AI_OPERATION_EXECUTE_TOOL = "execute_tool"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"  # "function"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"  # JSON object (content)
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"  # JSON (content)
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_SYSTEM = "gen_ai.system"  # older name of the provider, still emitted by many instrumentations
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"  # seconds
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"  # JSON
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"  # JSON
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"  # JSON: parts
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_RETRIEVAL_QUERY_TEXT = "gen_ai.retrieval.query.text"
GEN_AI_RETRIEVAL_DOCUMENTS = "gen_ai.retrieval.documents"  # JSON: [{"id" or "content", "score"?}]
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
# Older (pre-1.37) names still emitted by OpenLLMetry / OpenLIT
GEN_AI_PROMPT_PREFIX = "gen_ai.prompt"  # gen_ai.prompt.{i}.{role,content}
GEN_AI_COMPLETION_PREFIX = "gen_ai.completion"  # gen_ai.completion.{i}.{role,content}
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"

# Evaluation results (event on the evaluated trace)
GEN_AI_EVALUATION_RESULT_EVENT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

# --- ragtrace extensions --------------------------------------------------------------------
RAGTRACE_SPAN_ROLE = "ragtrace.span.role"  # "pipeline" | "retriever" | "reranker" | "generator" | "tool"
ROLE_PIPELINE = "pipeline"
ROLE_RETRIEVER = "retriever"
ROLE_RERANKER = "reranker"
ROLE_GENERATOR = "generator"
ROLE_TOOL = "tool"
RAGTRACE_PIPELINE_NAME = "ragtrace.pipeline.name"
RAGTRACE_REFERENCE = "ragtrace.reference"  # reference answer attached with annotate()
# JSON list of {"name", "args"?}: the tools the request is expected to call, from annotate(expected_tools=...)
RAGTRACE_REFERENCE_TOOL_CALLS = "ragtrace.reference.tool_calls"
RAGTRACE_TAGS = "ragtrace.tags"
RAGTRACE_SAMPLE = "ragtrace.sample"  # bool: the user asks the collector to always score this request
RAGTRACE_CONTEXTS = "ragtrace.generator.contexts"  # JSON list of context strings given to the generator
# list[str]: "<span id, 16 hex>:<index>" per context, the document of that span (same trace) the context is
RAGTRACE_CONTEXT_DOCUMENTS = "ragtrace.generator.context_documents"
RAGTRACE_TIME_PER_OUTPUT_TOKEN = "ragtrace.response.time_per_output_token"  # seconds
RAGTRACE_TPOT_BASIS = "ragtrace.response.time_per_output_token.basis"  # "tokens" | "chunks"
RAGTRACE_CHUNK_COUNT = "ragtrace.response.chunk_count"
RAGTRACE_STREAM_ABANDONED = "ragtrace.stream.abandoned"
RAGTRACE_TRUNCATED = "ragtrace.truncated"  # bool: some attribute was shortened or dropped
RAGTRACE_DOCUMENTS_TOTAL = "ragtrace.retrieval.documents_total"  # before the per-span cap; only when above it
# End-user feedback (ragtrace.feedback()): one small span in the trace it is about, role "feedback"; the collector
# stores it as a label and never assembles it into a record
ROLE_FEEDBACK = "feedback"
RAGTRACE_FEEDBACK_SPAN = "ragtrace.feedback"  # the feedback span's name
RAGTRACE_FEEDBACK_NAME = "ragtrace.feedback.name"  # which signal: "user_feedback", "thumbs", ...
RAGTRACE_FEEDBACK_VALUE = "ragtrace.feedback.value"  # double in [0, 1] (a bool is sent as 1.0 / 0.0)
RAGTRACE_FEEDBACK_COMMENT = "ragtrace.feedback.comment"  # the user's words, bounded

# --- added by the SDK (additive only) ---------------------------------------------------------
ERROR_TYPE = "error.type"  # OTel semconv: the exception class name on a failed span

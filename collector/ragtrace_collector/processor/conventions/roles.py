"""Which part of a RAG request a span is, whoever instrumented it.

Read in order of precision: ragtrace's own ``ragtrace.span.role``; OpenInference's
``openinference.span.kind``; OpenLLMetry's ``traceloop.span.kind`` / ``llm.request.type``; the OTel
GenAI ``gen_ai.operation.name``; Langfuse's ``langfuse.observation.type`` (``@observe(as_type=...)`` and its OpenAI and
LangChain integrations); OpenLIT's vector-database spans (``db.system`` + ``db.operation``).
Never by a span's or function's name: a retrieval step named ``search`` is a retrieval all the same, so
the OpenLLMetry tasks that feed a generator its passages are found by content (``extractors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrace import attributes as A

PIPELINE = "pipeline"  # a chain / workflow: the request as a whole or a step of it
RETRIEVER = "retriever"
RERANKER = "reranker"
GENERATOR = "generator"
EMBEDDING = "embedding"
TOOL = "tool"  # a tool the request executed (OpenInference TOOL, GenAI execute_tool, OpenLLMetry tool)
OTHER = "other"

_OPENINFERENCE = {
    A.SPAN_KIND_CHAIN: PIPELINE,
    "AGENT": PIPELINE,
    A.SPAN_KIND_RETRIEVER: RETRIEVER,
    A.SPAN_KIND_RERANKER: RERANKER,
    A.SPAN_KIND_LLM: GENERATOR,
    A.SPAN_KIND_EMBEDDING: EMBEDDING,
    "TOOL": TOOL,
}
_GENAI_OPERATION = {
    "chat": GENERATOR,
    "text_completion": GENERATOR,
    "generate_content": GENERATOR,
    "completion": GENERATOR,
    "retrieval": RETRIEVER,
    "retrieve": RETRIEVER,
    "vector_db_retrieve": RETRIEVER,  # OpenLLMetry's LangChain retriever spans (GenAICustomOperationName)
    "embeddings": EMBEDDING,
    "embedding": EMBEDDING,
    "rerank": RERANKER,
    "execute_tool": TOOL,
    "invoke_agent": PIPELINE,
    "invoke_workflow": PIPELINE,
    "create_agent": PIPELINE,
    "workflow": PIPELINE,
    "framework": PIPELINE,
}
# Langfuse observation types (langfuse._client.constants): a plain ``span`` observation is a step of the request,
# as an OpenLLMetry task is; evaluators, guardrails and events are no part of answering.
LANGFUSE_OBSERVATION_TYPE = "langfuse.observation.type"
_LANGFUSE_TYPE = {
    "generation": GENERATOR,
    "embedding": EMBEDDING,
    "retriever": RETRIEVER,
    "tool": TOOL,
    "agent": PIPELINE,
    "chain": PIPELINE,
    "span": PIPELINE,
}
_TRACELOOP_KIND = {"workflow": PIPELINE, "agent": PIPELINE, "task": PIPELINE, "tool": TOOL}
# Vector-database operations that read (OpenLIT writes ``gen_ai.operation.name = vectordb`` for every call,
# index writes too, so the database operation decides).
_DB_READS = ("query", "search", "similarity_search", "get", "query_points", "search_points", "peek", "fetch")


def span_role(attrs: Mapping[str, Any]) -> str:
    """One of PIPELINE, RETRIEVER, RERANKER, GENERATOR, EMBEDDING, TOOL, OTHER (from attributes only)."""
    role = attrs.get(A.RAGTRACE_SPAN_ROLE)
    if role in (PIPELINE, RETRIEVER, RERANKER, GENERATOR, TOOL):
        return role
    kind = attrs.get(A.OPENINFERENCE_SPAN_KIND)
    if isinstance(kind, str) and kind.upper() in _OPENINFERENCE:
        return _OPENINFERENCE[kind.upper()]
    op = attrs.get(A.GEN_AI_OPERATION_NAME)
    if isinstance(op, str) and op.lower() in _GENAI_OPERATION:
        return _GENAI_OPERATION[op.lower()]
    lf_type = attrs.get(LANGFUSE_OBSERVATION_TYPE)
    if isinstance(lf_type, str) and lf_type.lower() in _LANGFUSE_TYPE:
        return _LANGFUSE_TYPE[lf_type.lower()]
    if op == "vectordb" or attrs.get("db.system") or attrs.get("db.system.name"):
        db_op = str(attrs.get("db.operation.name", attrs.get("db.operation", ""))).lower()
        return RETRIEVER if db_op in _DB_READS else OTHER
    request_type = attrs.get("llm.request.type")
    if request_type in ("chat", "completion"):
        return GENERATOR
    if request_type in ("embedding", "embeddings"):
        return EMBEDDING
    if request_type == "rerank":
        return RERANKER
    tl_kind = attrs.get("traceloop.span.kind")
    if isinstance(tl_kind, str) and tl_kind in _TRACELOOP_KIND:
        return _TRACELOOP_KIND[tl_kind]
    if attrs.get(A.GEN_AI_REQUEST_MODEL) or attrs.get(A.LLM_MODEL_NAME):
        return GENERATOR
    return OTHER

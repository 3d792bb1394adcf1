"""Retrieved documents, in rank order, from each convention's way of writing them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ragtrace import attributes as A
from ragtrace_collector.processor.conventions.values import as_float, indexed, json_dict, list_index, maybe_json

LANGFUSE_INPUT = "langfuse.observation.input"
LANGFUSE_OUTPUT = "langfuse.observation.output"
_CONTENT_KEYS = ("content", "page_content", "text", "document", "chunk", "body")
_ID_KEYS = ("id", "doc_id", "node_id", "document_id", "_id", "id_")  # id_: a LlamaIndex node dump
# A Python repr standing in for an object (``<NodeWithScore(node=TextNode(...), score=0.3)>``,
# ``Document(page_content=...)``, ``<generator object>``): an instrumentation's placeholder, never a passage.
_REPR = re.compile(r"^<[\w .]+(\(.*\))?>$|^[A-Z]\w*\(\w+=", re.S)


def is_repr(text: str) -> bool:
    """Whether ``text`` is a Python object repr rather than text (see ``_REPR``)."""
    return bool(_REPR.match(text.strip()))


def _flattened(attrs: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference ``{prefix}.{i}.document.{id,content,score,metadata}``."""
    docs = []
    for _, fields in indexed(attrs, prefix).items():
        content = fields.get("document.content")
        doc_id = fields.get("document.id")
        if content is None and doc_id is None:
            continue
        docs.append(
            {
                "content": "" if content is None else str(content),
                "id": None if doc_id is None else str(doc_id),
                "score": as_float(fields.get("document.score")),
                "metadata": json_dict(fields.get("document.metadata")),
            }
        )
    return docs


def document_scores(attrs: Mapping[str, Any], prefix: str) -> list[float | None]:
    """Only the scores of flattened documents, in rank order (no text): enough for sampling rules."""
    start = prefix + "."
    found: dict[int, float | None] = {}
    # filtered at C speed first: a retrieval span holds every document's text and metadata beside its scores
    for key in [k for k in attrs if k.endswith(".document.score")]:
        if key.startswith(start):
            i = list_index(key[len(start) :].partition(".")[0])
            if i is not None:
                found[i] = as_float(attrs[key])
    return [found[i] for i in sorted(found)]


def _from_object(item: Any) -> dict[str, Any] | None:
    """A document from a JSON object: plain dicts, LangChain ``Document`` dumps (``lc`` kwargs), (doc, score) pairs."""
    score = None
    if isinstance(item, list) and len(item) == 2 and isinstance(item[1], (int, float)):
        item, score = item
    if isinstance(item, str) and item.lstrip().startswith("{"):
        # OpenLLMetry's LlamaIndex instrumentation writes a retriever's nodes as a list of JSON strings, each a
        # NodeWithScore dump ('{"node": {"id_", "text", ...}, "score": ...}'): the passage is the node's text
        item = maybe_json(item)
    if isinstance(item, str):
        return None if is_repr(item) else {"content": item, "id": None, "score": score, "metadata": {}}
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("kwargs"), dict):  # LangChain serialisation {"lc": 1, "kwargs": {...}}
        item = item["kwargs"]
    if isinstance(item.get("node"), dict):  # LlamaIndex NodeWithScore dump
        score = item.get("score", score)
        item = item["node"]
    content = next((item[k] for k in _CONTENT_KEYS if isinstance(item.get(k), str)), None)
    doc_id = next((item[k] for k in _ID_KEYS if item.get(k) is not None), None)
    meta = item.get("metadata")
    meta = meta if isinstance(meta, dict) else json_dict(meta)
    if doc_id is None and isinstance(meta, dict):
        doc_id = meta.get("id") or meta.get("doc_id")
    if content is None and doc_id is None:
        return None
    return {
        "content": content or "",
        "id": None if doc_id is None else str(doc_id),
        "score": as_float(item.get("score", item.get("relevance_score", score))),
        "metadata": meta if isinstance(meta, dict) else {},
    }


def documents_from_json(value: Any) -> list[dict[str, Any]]:
    """Documents from a JSON list (or an object holding one under a usual key)."""
    parsed = maybe_json(value)
    if isinstance(parsed, dict):
        for key in ("documents", "docs", "outputs", "output", "result", "nodes", "source_nodes", "context"):
            if isinstance(parsed.get(key), list):
                parsed = parsed[key]
                break
    if not isinstance(parsed, list):
        return []
    docs = []
    for item in parsed:
        doc = _from_object(item)
        if doc is not None:
            docs.append(doc)
    return docs


def retrieved_documents(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A retriever span's documents: OpenInference first, then GenAI JSON, then OpenLLMetry's entity output, then a
    Langfuse retriever observation's output."""
    docs = _flattened(attrs, A.RETRIEVAL_DOCUMENTS)
    if docs:
        return docs
    genai = documents_from_json(attrs.get(A.GEN_AI_RETRIEVAL_DOCUMENTS))
    if genai:
        return genai
    for key in ("traceloop.entity.output", A.OUTPUT_VALUE, LANGFUSE_OUTPUT):
        docs = documents_from_json(attrs.get(key))
        if docs:
            return docs
    return []


def reranked_documents(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A reranker span's output documents (OpenInference ``reranker.output_documents``)."""
    return _flattened(attrs, A.RERANKER_OUTPUT_DOCUMENTS)


def generator_contexts(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Contexts the SDK recorded on a generator span (``ragtrace.generator.contexts``)."""
    return documents_from_json(attrs.get(A.RAGTRACE_CONTEXTS))

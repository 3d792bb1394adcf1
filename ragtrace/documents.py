"""Reading retrieved documents from the shapes people return, by duck typing.

Supported without importing any of those libraries: ``str``; dicts with
``content``/``page_content``/``text`` plus ``id``/``score``/``metadata``; LangChain
``Document`` (``page_content``, ``metadata``, ``id``); LlamaIndex ``NodeWithScore``
(``node.get_content()``/``node.text``, ``node.node_id``, ``score``) and bare nodes;
``(doc, score)`` tuples (as from ``similarity_search_with_score``). Anything else is
recorded as its ``str()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from .safety import reraise_interrupt


class Doc(NamedTuple):
    id: str | None
    content: str
    score: float | None
    metadata: dict | None


_CONTENT_KEYS = ("content", "page_content", "text", "document", "chunk", "passage")
_ID_KEYS = ("id", "doc_id", "document_id", "node_id", "chunk_id")
_SCORE_KEYS = ("score", "relevance_score", "similarity", "distance")
_LIST_KEYS = ("documents", "docs", "contexts", "nodes", "results", "source_nodes")


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except BaseException as exc:  # not a number, too large, or an object whose __float__ raises
        reraise_interrupt(exc)
        return None
    # NaN and infinities carry no ranking information (and JSON cannot hold them)
    return f if type(f) is float and f - f == 0.0 else None


def _is_score(v: Any) -> bool:
    """Whether ``v`` is the score of a ``(doc, score)`` pair: a number (numpy's too), even NaN."""
    return v is not None and not isinstance(v, (str, bytes, bool)) and hasattr(type(v), "__float__")


def _from_dict(d: dict) -> Doc:
    # Fast path first: the common keys, then the alternatives.
    content = d.get("content")
    if content is None:
        for k in _CONTENT_KEYS:
            content = d.get(k)
            if content is not None:
                break
    if content is not None and type(content) is not str:
        content = str(content)
    meta = d.get("metadata")
    if meta is not None and type(meta) is not dict and not isinstance(meta, dict):
        meta = None
    did = d.get("id")
    if did is None:
        for k in _ID_KEYS:
            did = d.get(k)
            if did is not None:
                break
        if did is None and meta:
            did = meta.get("id") or meta.get("doc_id") or meta.get("source")
    if did is not None and type(did) is not str:
        did = str(did)
    score = d.get("score")
    if score is None:
        for k in _SCORE_KEYS:
            score = d.get(k)
            if score is not None:
                break
    if score is not None:
        score = _num(score)
    return Doc(did, content if content is not None else "", score, meta or None)


def _meta_of(obj: Any) -> dict | None:
    m = getattr(obj, "metadata", None)
    return m if isinstance(m, dict) and m else None


def read_document(obj: Any) -> Doc:
    """One document from any supported shape."""
    t = type(obj)
    if t is str:
        return Doc(None, obj, None, None)
    if t is dict or isinstance(obj, dict):
        return _from_dict(obj)
    if isinstance(obj, tuple) and len(obj) == 2 and _is_score(obj[1]):
        d = read_document(obj[0])
        return d._replace(score=_num(obj[1]))
    node = getattr(obj, "node", None)
    if node is not None and not isinstance(obj, (list, tuple)):  # LlamaIndex NodeWithScore
        d = read_document(node)
        s = _num(getattr(obj, "score", None))
        return d._replace(score=s if s is not None else d.score)
    pc = getattr(obj, "page_content", None)
    if pc is not None:  # LangChain Document
        meta = _meta_of(obj)
        did = getattr(obj, "id", None)
        if did is None and meta:
            did = meta.get("id") or meta.get("source")
        score = _num(meta.get("score", meta.get("relevance_score"))) if meta else None
        return Doc(str(did) if did is not None else None, str(pc), score, meta)
    get_content = getattr(obj, "get_content", None)
    if callable(get_content):  # LlamaIndex BaseNode / TextNode
        try:
            content = get_content()
        except TypeError:
            content = getattr(obj, "text", "")
        did = getattr(obj, "node_id", None) or getattr(obj, "id_", None)
        return Doc(
            str(did) if did is not None else None, str(content), _num(getattr(obj, "score", None)), _meta_of(obj)
        )
    text = getattr(obj, "text", None)
    if isinstance(text, str):
        did = getattr(obj, "id", None) or getattr(obj, "node_id", None)
        return Doc(str(did) if did is not None else None, text, _num(getattr(obj, "score", None)), _meta_of(obj))
    if isinstance(obj, bytes):
        return Doc(None, obj.decode("utf-8", "replace"), None, None)
    return Doc(None, str(obj), None, None)


def as_document_list(result: Any) -> list | None:
    """The list of documents inside a retriever's result, or None if it holds none.

    Accepts a list/tuple of documents, a single document, or a container (dict or object)
    with a ``documents``/``docs``/``contexts``/``nodes``/``results``/``source_nodes`` list.
    """
    if result is None:
        return None
    t = type(result)
    if t is list:
        return result
    if t is tuple:
        # A single (doc, score) pair vs a tuple of documents.
        if len(result) == 2 and _is_score(result[1]):
            return [result]
        return list(result)
    if isinstance(result, dict):
        for k in _LIST_KEYS:
            v = result.get(k)
            if isinstance(v, (list, tuple)):
                return list(v)
        return [result]
    if isinstance(result, str):
        return [result]
    for k in _LIST_KEYS:
        v = getattr(result, k, None)
        if isinstance(v, (list, tuple)):
            return list(v)
    if isinstance(result, (set, frozenset)):
        return list(result)
    return [result]


def read_documents(result: Any, limit: int | None = None) -> tuple[list[Doc], int]:
    """Documents from a retriever result, at most ``limit`` of them, plus the total count."""
    docs = as_document_list(result)
    if not docs:
        return [], 0
    total = len(docs)
    if limit is not None and total > limit:
        docs = docs[:limit]
    return [read_document(d) for d in docs], total


def texts_of(values: Any, limit: int | None = None) -> list[str]:
    """The text of each context given to a generator (strings or any document shape)."""
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    items: Iterable[Any] = as_document_list(values) or []
    out = []
    for i, v in enumerate(items):
        if limit is not None and i >= limit:
            break
        out.append(v if type(v) is str else read_document(v).content)
    return out

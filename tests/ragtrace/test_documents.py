"""Each document shape people return, read by duck typing (real retriever spans)."""

from __future__ import annotations

import json

import pytest

import ragtrace
from ragtrace import attributes as A
from ragtrace.documents import read_document


class LCDocument:
    """Same attributes as langchain_core.documents.Document."""

    def __init__(self, page_content, metadata=None, id=None):
        self.page_content = page_content
        self.metadata = metadata or {}
        self.id = id


class TextNode:
    """Same surface as llama_index.core.schema.TextNode."""

    def __init__(self, text, id_, metadata=None):
        self.text = text
        self.node_id = id_
        self.metadata = metadata or {}

    def get_content(self, metadata_mode=None):
        return self.text


class NodeWithScore:
    def __init__(self, node, score):
        self.node = node
        self.score = score


CASES = [
    ("str", ["plain text"], (None, "plain text", None, None)),
    (
        "dict-content",
        [{"id": 7, "content": "c", "score": 0.5, "metadata": {"src": "w"}}],
        ("7", "c", 0.5, {"src": "w"}),
    ),
    ("dict-page_content", [{"page_content": "pc", "metadata": {"id": "m1"}}], ("m1", "pc", None, {"id": "m1"})),
    ("dict-text", [{"text": "tx", "doc_id": "x", "relevance_score": "0.25"}], ("x", "tx", 0.25, None)),
    (
        "langchain",
        [LCDocument("lc text", {"source": "a.md"}, id="lc-1")],
        ("lc-1", "lc text", None, {"source": "a.md"}),
    ),
    ("llamaindex", [NodeWithScore(TextNode("node text", "n-1", {"f": 1}), 0.83)], ("n-1", "node text", 0.83, {"f": 1})),
    ("tuple", [(LCDocument("scored"), 0.42)], (None, "scored", 0.42, None)),
    ("container", {"documents": ["in a dict"]}, (None, "in a dict", None, None)),
]


@pytest.mark.parametrize("label,result,expected", CASES, ids=[c[0] for c in CASES])
def test_document_shapes_on_retriever_span(spans, label, result, expected):
    @ragtrace.retriever
    def retrieve(query):
        return result

    assert retrieve("q") is result
    a = spans.attrs("retrieve")
    did, content, score, meta = expected
    assert a.get(A.document_attr(0, "id")) == did
    assert a[A.document_attr(0, "content")] == content
    assert a.get(A.document_attr(0, "score")) == score
    if meta is None:
        assert A.document_attr(0, "metadata") not in a
    else:
        assert json.loads(a[A.document_attr(0, "metadata")]) == meta
    if did is None:  # GenAI names documents by id: without one, no list (the text is sent once, above)
        assert A.GEN_AI_RETRIEVAL_DOCUMENTS not in a
    else:
        summary = json.loads(a[A.GEN_AI_RETRIEVAL_DOCUMENTS])
        assert summary[0] == ({"id": did, "score": score} if score is not None else {"id": did})


def test_rank_order_kept():
    docs = [read_document(x) for x in ["a", ("b", 0.1), {"content": "c"}]]
    assert [d.content for d in docs] == ["a", "b", "c"]


def test_unknown_objects_fall_back_to_str():
    class Thing:
        def __str__(self):
            return "thing!"

    assert read_document(Thing()).content == "thing!"


@pytest.mark.parametrize("score", [float("nan"), float("inf"), "-inf", 10**400, "high"])
def test_scores_that_are_not_finite_numbers_are_left_out(spans, score):
    @ragtrace.retriever
    def retrieve(query):
        return [{"id": "a", "content": "x", "score": score}]

    retrieve("q")
    a = spans.attrs("retrieve")
    assert A.document_attr(0, "score") not in a
    assert json.loads(a[A.GEN_AI_RETRIEVAL_DOCUMENTS]) == [{"id": "a"}]


def test_a_scored_pair_with_a_nan_score_is_still_one_document():
    from ragtrace.documents import read_documents

    docs, total = read_documents([("first", float("nan")), ("second", 0.5)])
    assert total == 2 and [(d.content, d.score) for d in docs] == [("first", None), ("second", 0.5)]
    docs, total = read_documents(("only", float("nan")))
    assert total == 1 and docs[0].content == "only"

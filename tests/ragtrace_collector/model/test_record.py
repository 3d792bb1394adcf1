"""The shared contracts import and hold their basic promises."""

import pytest
from pydantic import ValidationError

from ragtrace_collector.model.record import RagRecord, ToolCall
from ragtrace_collector.model.result import MetricResult


def test_record_accepts_ragas_rows_and_document_dicts():
    r = RagRecord(
        user_input="q", retrieved_contexts=["a", {"page_content": "b", "id": "d2", "score": 0.5}], response="x"
    )
    assert r.context_texts == ["a", "b"]
    assert r.retrieved_contexts[1].id == "d2"
    assert r.to_ragas_row()["retrieved_contexts"] == ["a", "b"]


def test_scored_result_rejects_nan():
    with pytest.raises(ValueError):
        MetricResult(metric="faithfulness", status="scored", score=float("nan"))


def test_record_rejects_contexts_that_are_not_a_list():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        RagRecord(user_input="q", retrieved_contexts="one string", response="x")


def test_tool_call_arguments_nested_past_the_parsers_depth_are_a_validation_error():
    # span content: a RecursionError escaped pydantic and the record was lost as an assembly error
    nested = "[" * 5000 + "]" * 5000
    with pytest.raises(ValidationError, match="not a JSON object"):
        ToolCall.model_validate({"name": "lookup", "arguments": nested})

"""The public API is listed once, in ``ragtrace.__all__``; this guards it."""

import inspect

import ragtrace

EXPECTED = {
    "TracingHandle",
    "annotate",
    "attributes",
    "configure_limits",
    "current_trace_id",
    "feedback",
    "generator",
    "init",
    "internal_errors",
    "pipeline",
    "reranker",
    "retriever",
    "tool",
}


def test_exported_names_are_exactly_the_public_api():
    assert set(ragtrace.__all__) == EXPECTED
    for name in ragtrace.__all__:
        assert hasattr(ragtrace, name), name


def test_public_callables_have_docstrings():
    for name in ragtrace.__all__:
        obj = getattr(ragtrace, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_attribute_contract_names_used_by_collector_exist():
    a = ragtrace.attributes
    for n in (
        "RAGTRACE_SPAN_ROLE",
        "RAGTRACE_PIPELINE_NAME",
        "RAGTRACE_CONTEXTS",
        "RAGTRACE_REFERENCE",
        "RAGTRACE_SAMPLE",
        "RAGTRACE_TIME_PER_OUTPUT_TOKEN",
        "RAGTRACE_TPOT_BASIS",
        "RAGTRACE_CHUNK_COUNT",
        "GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK",
        "GEN_AI_RETRIEVAL_DOCUMENTS",
        "RAGTRACE_REFERENCE_TOOL_CALLS",
        "GEN_AI_TOOL_NAME",
        "GEN_AI_TOOL_CALL_ARGUMENTS",
        "ROLE_FEEDBACK",
        "RAGTRACE_FEEDBACK_SPAN",
        "RAGTRACE_FEEDBACK_NAME",
        "RAGTRACE_FEEDBACK_VALUE",
        "RAGTRACE_FEEDBACK_COMMENT",
    ):
        assert isinstance(getattr(a, n), str)

"""The hand-written peer fixtures use only names the peers publish.

Checked against the peers' own semantic-convention packages (``openinference-semantic-conventions``,
traceloop's ``opentelemetry-semantic-conventions-ai``) and the OTel GenAI attributes in
``opentelemetry-semantic-conventions``; OpenLIT publishes no such package, so its two own names are
listed from its documentation.
"""

from __future__ import annotations

import re

import pytest

from tests.support import span_fixtures as F

oi = pytest.importorskip("openinference.semconv.trace")
tl = pytest.importorskip("opentelemetry.semconv_ai")
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes  # noqa: E402

INDEX = re.compile(r"\.\d+\.")


def constants(*classes) -> set[str]:
    return {v for c in classes for k, v in vars(c).items() if k.isupper() and isinstance(v, str)}


GENAI = {v for k, v in vars(gen_ai_attributes).items() if k.startswith("GEN_AI_") and isinstance(v, str)}
OPENINFERENCE = constants(oi.SpanAttributes, oi.DocumentAttributes, oi.MessageAttributes, oi.RerankerAttributes)
TRACELOOP = constants(tl.SpanAttributes)


def documented_openinference(key: str) -> bool:
    if key in OPENINFERENCE:
        return True
    parts = INDEX.split(key)  # "retrieval.documents.0.document.content" -> list attr + item attr
    return len(parts) == 2 and parts[0] in OPENINFERENCE and parts[1] in OPENINFERENCE


def documented_traceloop(key: str) -> bool:
    if key in TRACELOOP or key in GENAI:
        return True
    if key.startswith(tl.SpanAttributes.TRACELOOP_ASSOCIATION_PROPERTIES + "."):
        return True
    parts = INDEX.split(key)  # "gen_ai.prompt.0.content"
    return (
        len(parts) == 2
        and parts[0] in (tl.SpanAttributes.LLM_PROMPTS, tl.SpanAttributes.LLM_COMPLETIONS)
        and (parts[1] in ("role", "content", "finish_reason"))
    )


OPENLIT_OWN = {"gen_ai.request.is_stream", "gen_ai.server.time_to_first_token"}
OPENLIT_DB = {"db.system", "db.operation", "db.collection.name", "db.n_results"}


@pytest.mark.parametrize("fixture", [F.openinference_langchain, F.openinference_llamaindex])
def test_openinference_fixture_names(fixture):
    for spec in fixture():
        for key in spec.attributes:
            assert documented_openinference(key), key
        kind = spec.attributes["openinference.span.kind"]
        assert kind in {k.value for k in oi.OpenInferenceSpanKindValues}


def test_openllmetry_fixture_names():
    for spec in F.openllmetry():
        for key in spec.attributes:
            assert documented_traceloop(key), key
        if "traceloop.span.kind" in spec.attributes:
            assert spec.attributes["traceloop.span.kind"] in {k.value for k in tl.TraceloopSpanKindValues}


def test_openlit_fixture_names():
    for spec in F.openlit():
        for key in spec.attributes:
            assert key in GENAI or key in OPENLIT_OWN or key in OPENLIT_DB, key
        for name, attrs in spec.events:
            assert name in ("gen_ai.content.prompt", "gen_ai.content.completion")
            assert set(attrs) <= GENAI  # gen_ai.prompt / gen_ai.completion

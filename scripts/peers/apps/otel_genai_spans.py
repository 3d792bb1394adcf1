"""The official OpenTelemetry GenAI instrumentation of the openai client with message content on the spans
(``gen_ai.input.messages`` / ``gen_ai.output.messages``, no log events), retrieval traced by util-genai's own
retrieval span (``gen_ai.operation.name=retrieval``, ``gen_ai.retrieval.documents``)."""

from __future__ import annotations

from otel_genai_events import main

if __name__ == "__main__":
    main(content_mode="SPAN_ONLY", retrieval_span=True)

"""The official OpenTelemetry GenAI instrumentation of the openai client (``opentelemetry-instrumentation-openai-v2``
on ``opentelemetry-util-genai``), message content captured as its default event mode writes it: in
``gen_ai.client.inference.operation.details`` log events only, exported over OTLP/HTTP logs. The request and the
retrieval are plain OpenTelemetry spans, as its users write them (no GenAI attribute: the passages are seen only
inside the prompt)."""

from __future__ import annotations

import os

from common import MODEL, SYSTEM, TEMPLATE, endpoint, logs_endpoint, model_server, run_questions, service, top_k
from openai import OpenAI
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main(content_mode: str = "EVENT_ONLY", retrieval_span: bool = False) -> None:
    """``content_mode``: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT; ``retrieval_span``: retrieve inside
    util-genai's own retrieval span (``handler.retrieval()``) rather than a plain span."""
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = content_mode
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor  # reads the mode when imported
    from opentelemetry.util.genai.handler import get_telemetry_handler

    resource = Resource.create({"service.name": service("otel_genai")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint())))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=logs_endpoint())))
    OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logs)
    handler = get_telemetry_handler(tracer_provider=provider, logger_provider=logs)
    tracer = provider.get_tracer("peer-app")
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    def retrieve(question: str) -> list[str]:
        if retrieval_span:
            with handler.retrieval(data_source_id="norrvik-corpus") as invocation:
                docs = top_k(question)
                invocation.query_text = question
                invocation.top_k = len(docs)
                invocation.documents = [{"id": d, "content": text, "score": score} for d, text, score in docs]
        else:
            with tracer.start_as_current_span("retrieve"):
                docs = top_k(question)
        return [text for _, text, _ in docs]

    def ask(i: int, question: str, stream: bool) -> str:
        with tracer.start_as_current_span("rag"):
            context = "\n".join(retrieve(question))
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": TEMPLATE.format(context=context, question=question)},
            ]
            if stream:
                chunks = client.chat.completions.create(
                    model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
                )
                return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content or ""

    def flush() -> None:
        provider.force_flush()
        logs.force_flush()

    run_questions(ask, flush)
    provider.shutdown()
    logs.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

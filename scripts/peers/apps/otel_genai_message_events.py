"""The official OpenTelemetry GenAI instrumentation of the openai client in its older form
(``opentelemetry-instrumentation-openai-v2`` 2.3b0, before util-genai): message content in one log event per message
(``gen_ai.system.message``, ``gen_ai.user.message``, and ``gen_ai.choice`` for the completion), exported over
OTLP/HTTP logs; the request and the retrieval are plain OpenTelemetry spans, as its users write them."""

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


def main() -> None:
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"  # read when instrumenting
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    resource = Resource.create({"service.name": service("otel_genai_message_events")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint())))
    logs = LoggerProvider(resource=resource)
    logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=logs_endpoint())))
    OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logs)
    tracer = provider.get_tracer("peer-app")
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    def ask(i: int, question: str, stream: bool) -> str:
        with tracer.start_as_current_span("rag"):
            with tracer.start_as_current_span("retrieve"):
                context = "\n".join(text for _, text, _ in top_k(question))
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

"""OpenInference OpenAI: the openai client instrumented, the request a CHAIN span and retrieval a RETRIEVER span
written with OpenInference's own tracer helpers (as its documentation shows for hand-made pipelines)."""

from __future__ import annotations

from common import MODEL, SYSTEM, TEMPLATE, endpoint, model_server, run_questions, service, top_k
from openai import OpenAI
from openinference.instrumentation import OITracer, TraceConfig
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.trace import DocumentAttributes, SpanAttributes
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service("oi_openai")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint())))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = OITracer(provider.get_tracer("peer-app"), config=TraceConfig())
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    def retrieve(question: str) -> list[str]:
        with tracer.start_as_current_span("retrieve", openinference_span_kind="retriever") as span:
            span.set_input(question)
            docs = top_k(question)
            for i, (doc_id, text, score) in enumerate(docs):
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc_id)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, text)
                span.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, score)
            return [text for _, text, _ in docs]

    def ask(i: int, question: str, stream: bool) -> str:
        with tracer.start_as_current_span("rag", openinference_span_kind="chain") as span:
            span.set_input(question)
            context = "\n".join(retrieve(question))
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": TEMPLATE.format(context=context, question=question)},
            ]
            if stream:
                chunks = client.chat.completions.create(
                    model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
                )
                answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            else:
                answer = client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content
            span.set_output(answer)
            return answer

    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

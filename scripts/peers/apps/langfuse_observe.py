"""Langfuse SDK 5: the request an ``@observe`` function, retrieval an ``@observe(as_type="retriever")`` one, and the
model call made through Langfuse's OpenAI drop-in (``langfuse.openai``), as Langfuse's documentation shows; the
spans go to the collector through the ``span_exporter`` Langfuse's client takes (no Langfuse server)."""

from __future__ import annotations

from common import MODEL, SYSTEM, TEMPLATE, endpoint, model_server, run_questions, service, top_k
from langfuse import Langfuse, observe
from langfuse.openai import OpenAI
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service("langfuse_observe")}))
    langfuse = Langfuse(
        public_key="pk-lf-peer",
        secret_key="sk-lf-peer",
        base_url="http://127.0.0.1:9",  # never reached: spans go to span_exporter, nothing else is sent
        tracer_provider=provider,
        span_exporter=OTLPSpanExporter(endpoint=endpoint()),
        tracing_enabled=True,
    )
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    @observe(as_type="retriever")
    def retrieve(question: str) -> list[dict[str, object]]:
        return [{"id": doc_id, "content": text, "score": score} for doc_id, text, score in top_k(question)]

    @observe()
    def rag(question: str, stream: bool) -> str:
        context = "\n".join(str(d["content"]) for d in retrieve(question))
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

    run_questions(lambda i, question, stream: rag(question, stream), langfuse.flush)
    langfuse.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

"""Langfuse SDK 5's LangChain integration: the shared LCEL RAG chain (in-memory vector store retriever, prompt,
ChatOpenAI, parser) run with Langfuse's ``CallbackHandler`` in its callbacks, as Langfuse's documentation shows; the
spans go to the collector through the ``span_exporter`` Langfuse's client takes (no Langfuse server)."""

from __future__ import annotations

from common import endpoint, model_server, run_questions, service
from langfuse import Langfuse
from langfuse.langchain import CallbackHandler
from lcel import rag_chains
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service("langfuse_langchain")}))
    langfuse = Langfuse(
        public_key="pk-lf-peer",
        secret_key="sk-lf-peer",
        base_url="http://127.0.0.1:9",  # never reached: spans go to span_exporter, nothing else is sent
        tracer_provider=provider,
        span_exporter=OTLPSpanExporter(endpoint=endpoint()),
        tracing_enabled=True,
    )
    server = model_server()
    chain_for = rag_chains(server.base_url)
    handler = CallbackHandler(public_key="pk-lf-peer")

    def ask(i: int, question: str, stream: bool) -> str:
        chain = chain_for(stream)
        config = {"callbacks": [handler]}
        if stream:
            return "".join(chain.stream(question, config=config))
        return chain.invoke(question, config=config)

    run_questions(ask, langfuse.flush)
    langfuse.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

"""OpenInference LangChain: an LCEL chain (in-memory vector store retriever, prompt, ChatOpenAI, parser)."""

from __future__ import annotations

import sys

from common import endpoint, model_server, run_questions, service
from lcel import rag_chains
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main(setup: str = "oi_langchain", with_openai: bool = False) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service(setup)}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint())))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    if with_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    server = model_server()
    chain_for = rag_chains(server.base_url)

    def ask(i: int, question: str, stream: bool) -> str:
        chain = chain_for(stream)
        if stream:
            return "".join(chain.stream(question))
        return chain.invoke(question)

    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main(with_openai="--with-openai" in sys.argv)

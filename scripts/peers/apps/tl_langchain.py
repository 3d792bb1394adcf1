"""OpenLLMetry LangChain: traceloop-sdk's LangChain instrumentation over an LCEL chain (in-memory vector store
retriever, prompt, ChatOpenAI, parser); the OpenAI client below it is instrumented too, as ``Traceloop.init`` does.

``Traceloop.init`` turns its LangChain instrumentation on only when the ``langchain`` or ``langgraph`` distribution
is installed (``init_langchain_instrumentor``); an LCEL app needs only ``langchain-core``, so the app turns the same
instrumentor on itself, as ``Traceloop.init`` would (``LangchainInstrumentor(use_attributes=True).instrument()``)."""

from __future__ import annotations

from common import endpoint, model_server, run_questions, service
from lcel import rag_chains
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from traceloop.sdk import Traceloop


def main() -> None:
    Traceloop.init(
        app_name=service("tl_langchain"),
        exporter=OTLPSpanExporter(endpoint=endpoint()),
        telemetry_enabled=False,
    )
    LangchainInstrumentor(use_attributes=True).instrument()  # what Traceloop.init does when `langchain` is installed
    server = model_server()
    chain_for = rag_chains(server.base_url)

    def ask(i: int, question: str, stream: bool) -> str:
        chain = chain_for(stream)
        if stream:
            return "".join(chain.stream(question))
        return chain.invoke(question)

    provider = trace.get_tracer_provider()
    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

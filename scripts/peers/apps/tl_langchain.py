"""OpenLLMetry LangChain: traceloop-sdk's LangChain instrumentation over an LCEL chain (in-memory vector store
retriever, prompt, ChatOpenAI, parser); the OpenAI client below it is instrumented too, as ``Traceloop.init`` does.

``Traceloop.init`` turns its LangChain instrumentation on only when the ``langchain`` or ``langgraph`` distribution
is installed (``init_langchain_instrumentor``); an LCEL app needs only ``langchain-core``, so the app turns the same
instrumentor on itself, as ``Traceloop.init`` would (``LangchainInstrumentor(use_attributes=True).instrument()``)."""

from __future__ import annotations

from common import CORPUS, MODEL, SYSTEM, TEMPLATE, embed, endpoint, model_server, run_questions, service
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import ChatOpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.langchain import LangchainInstrumentor
from traceloop.sdk import Traceloop


class HashedEmbeddings(Embeddings):
    """A fake embedding model (no download): the scripted server's hashed bag of words."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return embed([text])[0]


def main() -> None:
    Traceloop.init(
        app_name=service("tl_langchain"),
        exporter=OTLPSpanExporter(endpoint=endpoint()),
        telemetry_enabled=False,
    )
    LangchainInstrumentor(use_attributes=True).instrument()  # what Traceloop.init does when `langchain` is installed
    server = model_server()
    store = InMemoryVectorStore(HashedEmbeddings())
    store.add_documents(
        [Document(page_content=text, id=doc_id, metadata={"source": doc_id}) for doc_id, text in CORPUS]
    )
    retriever = store.as_retriever(search_kwargs={"k": 3})
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", TEMPLATE)])

    def chain_for(stream: bool):
        llm = ChatOpenAI(model=MODEL, base_url=server.base_url, api_key="k", streaming=stream, stream_usage=True)
        context = retriever | (lambda docs: "\n".join(d.page_content for d in docs))
        return {"context": context, "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()

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

"""OpenInference LlamaIndex: a VectorStoreIndex (fake embeddings) queried top-3 with llama-index's OpenAI LLM."""

from __future__ import annotations

from typing import Any

from common import CORPUS, MODEL, embed, endpoint, model_server, run_questions, service
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.llms.openai import OpenAI
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


class HashedEmbedding(BaseEmbedding):
    """A fake embedding model (no download): the scripted server's hashed bag of words."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return embed([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return embed([text])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return embed([query])[0]


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": service("oi_llamaindex")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint())))
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    server = model_server()
    Settings.tokenizer = lambda text: text.split()  # no tiktoken download
    Settings.embed_model = HashedEmbedding(model_name="hashed")
    Settings.llm = OpenAI(model=MODEL, api_base=server.base_url, api_key="k")
    docs = [Document(text=text, doc_id=doc_id, id_=doc_id) for doc_id, text in CORPUS]
    index = VectorStoreIndex.from_documents(docs)  # an index build: spans that are no request
    provider.force_flush()
    engines: dict[bool, Any] = {}

    def ask(i: int, question: str, stream: bool) -> str:
        engine = engines.setdefault(stream, index.as_query_engine(similarity_top_k=3, streaming=stream))
        response = engine.query(question)
        if stream:
            return "".join(response.response_gen)
        return str(response)

    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

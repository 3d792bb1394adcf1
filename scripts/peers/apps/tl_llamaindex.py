"""OpenLLMetry LlamaIndex: traceloop-sdk's LlamaIndex instrumentation over a VectorStoreIndex (fake embeddings)
queried top-3 with llama-index's OpenAI LLM (the OpenAI client below it instrumented too, as ``Traceloop.init``
does).

``Traceloop.init`` turns its LlamaIndex instrumentation on only when the ``llama-index`` distribution (the
meta-package) is installed (``init_llama_index_instrumentor``); this app needs only ``llama-index-core`` and
``llama-index-llms-openai``, so it turns the same instrumentor on itself, as ``Traceloop.init`` would.

Each request runs in a context of its own, as a web server runs each request's handler (a task or a worker thread
with a copy of the context). It matters here: for a streamed query the instrumentation keeps its workflow and task
spans open waiting for a stream-end event that never reaches them (llama-index ends those spans when it hands the
stream back), so they are never exported and the context it attached is never detached; in one bare loop every
later request would nest under the stream's never-ended span, all in one trace."""

from __future__ import annotations

import contextvars
from typing import Any

from common import CORPUS, MODEL, embed, endpoint, model_server, run_questions, service
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.embeddings import BaseEmbedding
from llama_index.llms.openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from traceloop.sdk import Traceloop


class HashedEmbedding(BaseEmbedding):
    """A fake embedding model (no download): the scripted server's hashed bag of words."""

    def _get_query_embedding(self, query: str) -> list[float]:
        return embed([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return embed([text])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return embed([query])[0]


def main() -> None:
    Traceloop.init(
        app_name=service("tl_llamaindex"),
        exporter=OTLPSpanExporter(endpoint=endpoint()),
        telemetry_enabled=False,
    )
    LlamaIndexInstrumentor().instrument()  # what Traceloop.init does when `llama-index` is installed
    provider = trace.get_tracer_provider()
    server = model_server()
    Settings.tokenizer = lambda text: text.split()  # no tiktoken download
    Settings.embed_model = HashedEmbedding(model_name="hashed")
    Settings.llm = OpenAI(model=MODEL, api_base=server.base_url, api_key="k")
    docs = [Document(text=text, doc_id=doc_id, id_=doc_id) for doc_id, text in CORPUS]
    index = VectorStoreIndex.from_documents(docs)  # an index build: spans that are no request
    provider.force_flush()
    engines: dict[bool, Any] = {}

    def handle(question: str, stream: bool) -> str:
        engine = engines.setdefault(stream, index.as_query_engine(similarity_top_k=3, streaming=stream))
        response = engine.query(question)
        if stream:
            return "".join(response.response_gen)
        return str(response)

    def ask(i: int, question: str, stream: bool) -> str:
        return contextvars.copy_context().run(handle, question, stream)

    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

"""OpenLIT LangChain: ``openlit.init`` over an LCEL chain (in-memory vector store retriever, prompt, ChatOpenAI,
parser); OpenLIT instruments LangChain through its callbacks. No ``@openlit.trace`` wrapper: a LangChain user who
calls ``openlit.init`` gets what OpenLIT's LangChain instrumentation makes of the chain. It makes no span for the
chain (an LCEL ``RunnableSequence`` is an internal chain to it), so the retrieval and the chat call each start a
trace of their own (the collector pairs them, see ``processor/conventions/halves.py``).

Streamed requests stream the model's tokens inside ``invoke`` (``ChatOpenAI(streaming=True)``), not through
``chain.stream()``: with ``chain.stream()`` OpenLIT 1.45.0 never ends the chat span (its ``on_llm_end`` resets a
context-variable token created in another context, ``ValueError: <Token ...> was created in a different
Context``, logged at debug level and swallowed), so the chat is never exported, only the retrieval and the httpx
instrumentation's ``POST`` span under the lost chat span."""

from __future__ import annotations

import json
import os
import tempfile

import openlit
from common import MODEL, model_server, run_questions, service
from lcel import rag_chains
from opentelemetry import trace


def main() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as pricing:  # no pricing download
        json.dump({"chat": {MODEL: {"promptPrice": 0.00015, "completionPrice": 0.0006}}, "embeddings": {}}, pricing)
    openlit.init(
        otlp_endpoint=os.environ.get("PEER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        application_name=service("openlit_langchain"),
        environment="test",
        disable_metrics=True,
        pricing_json=pricing.name,
    )
    server = model_server()
    chain_for = rag_chains(server.base_url)

    def ask(i: int, question: str, stream: bool) -> str:
        return chain_for(stream).invoke(question)  # streamed requests stream the model's tokens inside invoke

    provider = trace.get_tracer_provider()
    run_questions(ask, provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

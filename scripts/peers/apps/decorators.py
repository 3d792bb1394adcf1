"""The decorator baseline: the peers' RAG app traced with ragtrace's own decorators.

Same corpus, questions, retrieval and scripted model server as every peer app (``common.py``), with
``@ragtrace.pipeline`` around the request, ``@ragtrace.retriever`` on the top-3 search and
``@ragtrace.generator`` on the chat call (the openai client's response, or its stream, returned as is so the
SDK reads answer, usage and first-chunk time from it). Unlike the peer apps it runs in the project's own
environment (``.venv``), since it needs the ragtrace SDK; ``scripts/peers/live.py`` scores the peers against it.
"""

from __future__ import annotations

from typing import Any

from common import MODEL, SYSTEM, TEMPLATE, endpoint, model_server, run_questions, service, top_k
from openai import OpenAI

import ragtrace


def main() -> None:
    handle = ragtrace.init(service_name=service("decorators"), endpoint=endpoint())
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    @ragtrace.retriever(name="search")
    def search(question: str) -> list[dict[str, Any]]:
        return [{"id": doc_id, "content": text, "score": score} for doc_id, text, score in top_k(question)]

    @ragtrace.generator(name="generate", model=MODEL, provider="openai")
    def generate(question: str, contexts: list[str], messages: list[dict[str, str]], stream: bool) -> Any:
        if stream:
            return client.chat.completions.create(
                model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
            )
        return client.chat.completions.create(model=MODEL, messages=messages)

    @ragtrace.pipeline(name="rag_answer")
    def answer(question: str, stream: bool) -> str:
        contexts = [d["content"] for d in search(question)]
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TEMPLATE.format(context="\n".join(contexts), question=question)},
        ]
        reply = generate(question, contexts, messages, stream)
        if stream:
            return "".join(c.choices[0].delta.content or "" for c in reply if c.choices)
        return reply.choices[0].message.content

    run_questions(lambda i, q, stream: answer(q, stream), handle.force_flush)
    handle.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

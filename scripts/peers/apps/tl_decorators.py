"""OpenLLMetry: traceloop-sdk's @workflow/@task decorators around a plain openai client; the retrieval task is
named ``search`` (a name that says nothing about retrieval, as users name things)."""

from __future__ import annotations

from common import MODEL, SYSTEM, TEMPLATE, endpoint, model_server, run_questions, service, top_k
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import task, workflow


def main() -> None:
    Traceloop.init(
        app_name=service("tl_decorators"),
        exporter=OTLPSpanExporter(endpoint=endpoint()),
        telemetry_enabled=False,
    )
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    @task(name="search")
    def search(question: str) -> list[dict]:
        return [{"id": doc_id, "text": text, "score": score} for doc_id, text, score in top_k(question)]

    @task(name="generate")
    def generate(question: str, context: str, stream: bool) -> str:
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TEMPLATE.format(context=context, question=question)},
        ]
        if stream:
            chunks = client.chat.completions.create(
                model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
            )
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content

    @workflow(name="rag_answer")
    def answer(question: str, stream: bool = False) -> str:
        docs = search(question)
        return generate(question, "\n".join(d["text"] for d in docs), stream)

    run_questions(lambda i, q, stream: answer(q, stream=stream), trace.get_tracer_provider().force_flush)
    trace.get_tracer_provider().shutdown()
    server.stop()


if __name__ == "__main__":
    main()

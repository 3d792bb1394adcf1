"""OpenLIT: openai (chat and embeddings) and qdrant-client in memory, instrumented by ``openlit.init``; each request
wrapped in ``@openlit.trace`` so its spans share a trace (OpenLIT's documented way to group them)."""

from __future__ import annotations

import json
import os
import tempfile

import openlit
from common import CORPUS, MODEL, SYSTEM, TEMPLATE, model_server, run_questions, service
from openai import OpenAI
from opentelemetry import trace
from qdrant_client import QdrantClient
from qdrant_client.models import Distance, PointStruct, VectorParams


def main() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as pricing:  # no pricing download
        json.dump({"chat": {MODEL: {"promptPrice": 0.00015, "completionPrice": 0.0006}}, "embeddings": {}}, pricing)
    openlit.init(
        otlp_endpoint=os.environ.get("PEER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        application_name=service("openlit_qdrant"),
        environment="test",
        disable_metrics=True,
        pricing_json=pricing.name,
    )
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")
    store = QdrantClient(":memory:")
    store.create_collection("norrvik", vectors_config=VectorParams(size=64, distance=Distance.COSINE))
    vectors = client.embeddings.create(model="text-embedding-3-small", input=[t for _, t in CORPUS]).data
    store.upsert(
        "norrvik",
        points=[
            PointStruct(id=i, vector=v.embedding, payload={"doc_id": doc_id, "text": text})
            for i, ((doc_id, text), v) in enumerate(zip(CORPUS, vectors))
        ],
    )

    @openlit.trace
    def answer(question: str, stream: bool) -> str:
        vector = client.embeddings.create(model="text-embedding-3-small", input=question).data[0].embedding
        hits = store.query_points("norrvik", query=vector, limit=3).points
        context = "\n".join(h.payload["text"] for h in hits)
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

    provider = trace.get_tracer_provider()
    run_questions(lambda i, q, stream: answer(q, stream), provider.force_flush)
    provider.shutdown()
    server.stop()


if __name__ == "__main__":
    main()

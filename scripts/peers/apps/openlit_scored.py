"""OpenLIT with evaluation scores from the app: each request (``@openlit.trace``, its openai chat call instrumented by
``openlit.init``) checks its own answer and records the verdict with ``openlit.log_score`` — OpenLIT's
``gen_ai.evaluation.result``, written both as an event of the request's span and as an OTLP log event naming it.
These are the peer's evaluations, which the collector keeps apart from its own scores."""

from __future__ import annotations

import json
import os
import re
import tempfile

import openlit
from common import MODEL, SYSTEM, TEMPLATE, model_server, run_questions, service, top_k
from openai import OpenAI
from opentelemetry import _logs, trace

GROUNDED = "answer_numbers_in_context"  # the app's own check: every number the answer states is in the context
VERDICT = "reviewer_verdict"  # a label only (no numeric score)


def main() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as pricing:  # no pricing download
        json.dump({"chat": {MODEL: {"promptPrice": 0.00015, "completionPrice": 0.0006}}, "embeddings": {}}, pricing)
    openlit.init(
        otlp_endpoint=os.environ.get("PEER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        application_name=service("openlit_scored"),
        environment="test",
        disable_metrics=True,
        pricing_json=pricing.name,
    )
    server = model_server()
    client = OpenAI(base_url=server.base_url, api_key="k")

    @openlit.trace
    def answer(question: str, stream: bool) -> str:
        context = "\n".join(text for _, text, _ in top_k(question))
        messages = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": TEMPLATE.format(context=context, question=question)},
        ]
        if stream:
            chunks = client.chat.completions.create(
                model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            text = client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content or ""
        grounded = all(n in context for n in re.findall(r"\d+", text))
        openlit.log_score(GROUNDED, grounded, comment="numbers checked against the context", metadata={"by": "app"})
        openlit.log_score(VERDICT, "supported" if grounded else "unsupported")
        return text

    provider = trace.get_tracer_provider()
    logs = _logs.get_logger_provider()

    def flush() -> None:
        provider.force_flush()
        logs.force_flush()  # type: ignore[attr-defined]

    run_questions(lambda i, q, stream: answer(q, stream), flush)
    provider.shutdown()
    logs.shutdown()  # type: ignore[attr-defined]
    server.stop()


if __name__ == "__main__":
    main()

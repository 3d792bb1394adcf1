"""What every peer app shares: the corpus, the six questions, the scripted model server and the exporter.

Each peer app in this folder runs in its peer's own environment (``.peers/<env>/bin/python``) with
``PYTHONPATH=<repo>:<repo>/scripts/peers/apps``; it imports nothing of ragtrace, only the scripted
OpenAI-compatible server from ``tests/support`` (standard library only), so what it exports is exactly
what the real peer packages emit (``decorators.py``, the baseline, is the one app that uses ragtrace and runs
in the project's environment). Environment:

* ``PEER_OTLP_ENDPOINT`` — base URL of an OTLP/HTTP receiver (``/v1/traces`` is appended; ``/v1/logs`` for the
  apps that export log events).
* ``PEER_SERVICE`` — the ``service.name`` resource attribute (defaults to the app's setup name).

Requests alternate non-streamed (even index) and streamed (odd index). Questions 0-3 are answerable
from the corpus; 4 and 5 are answered with invented facts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from tests.support.scripted_openai import ScriptedOpenAI, hashed_embedding

MODEL = "gpt-4o-mini"  # a name every client accepts; the scripted server echoes it back
CORPUS: list[tuple[str, str]] = [
    ("doc-bridge", "The Halvard Bridge in Norrvik opened in 1911 and spans 420 metres across the Lund river."),
    ("doc-lamp", "The Norrvik lighthouse lamp was converted from oil to electricity in 1936."),
    ("doc-ferry", "A ferry crosses from Norrvik to Skarholm every 40 minutes between May and September."),
    ("doc-museum", "The Norrvik maritime museum opens at 10:00 and closes at 17:00, Tuesday to Sunday."),
    ("doc-mayor", "Norrvik's first elected mayor was Ingrid Sahl, who served from 1920 to 1928."),
    ("doc-fish", "Herring fishing was Norrvik's main industry until the cannery closed in 1974."),
    ("doc-school", "The Norrvik harbour school teaches sailing to children aged eight to fourteen."),
    ("doc-rain", "Norrvik receives about 1,100 millimetres of rain a year, most of it in autumn."),
]
# (question, the model's answer, answerable from the corpus)
QUESTIONS: list[tuple[str, str, bool]] = [
    ("When did the Halvard Bridge open?", "The Halvard Bridge opened in 1911.", True),
    ("How often does the ferry to Skarholm run?", "The ferry to Skarholm runs every 40 minutes.", True),
    ("When does the maritime museum close?", "The maritime museum closes at 17:00.", True),
    ("Who was Norrvik's first elected mayor?", "Ingrid Sahl was Norrvik's first elected mayor.", True),
    ("Who designed the Halvard Bridge?", "The Halvard Bridge was designed by Erik Lindqvist in 1905.", False),
    ("How tall is the Norrvik lighthouse?", "The Norrvik lighthouse is 52 metres tall.", False),
]
SYSTEM = "Answer the question using only the context."
TEMPLATE = "Context:\n{context}\n\nQuestion: {question}"


def streamed(index: int) -> bool:
    """Odd requests stream, even ones do not (so every capture has both)."""
    return index % 2 == 1


def top_k(question: str, k: int = 3) -> list[tuple[str, str, float]]:
    """(id, text, score) of the k passages nearest the question (hashed bag-of-words cosine)."""
    q = hashed_embedding(question)
    scored = [(doc_id, text, sum(a * b for a, b in zip(q, hashed_embedding(text)))) for doc_id, text in CORPUS]
    return sorted(scored, key=lambda d: -d[2])[:k]


def embed(texts: list[str]) -> list[list[float]]:
    """The same vectors the scripted server's /v1/embeddings returns."""
    return [hashed_embedding(t) for t in texts]


def _answer(body: dict[str, Any]) -> str:
    """The scripted model: the answer of the question found in the prompt."""
    prompt = json.dumps(body.get("messages") or [])
    for question, answer, _ in QUESTIONS:
        if question in prompt or question.replace("'", "\\u0027") in prompt:
            return answer
    return "I do not know."


def model_server() -> ScriptedOpenAI:
    """The OpenAI-compatible server (chat, streaming, embeddings) on a free loopback port, started."""
    return ScriptedOpenAI(responder=lambda body: _answer(body)).start()


def endpoint() -> str:
    """The OTLP/HTTP traces URL the app exports to."""
    base = os.environ.get("PEER_OTLP_ENDPOINT", "http://127.0.0.1:4318").rstrip("/")
    return base + "/v1/traces"


def logs_endpoint() -> str:
    """The OTLP/HTTP logs URL the apps exporting log events send them to."""
    return endpoint()[: -len("/v1/traces")] + "/v1/logs"


def service(default: str) -> str:
    return os.environ.get("PEER_SERVICE", default)


def run_questions(ask: Callable[[int, str, bool], str], flush: Callable[[], Any]) -> None:
    """Ask the six questions (flushing spans after each) and check every answer came back whole."""
    for i, (question, expected, _) in enumerate(QUESTIONS):
        got = ask(i, question, streamed(i))
        flush()
        if re.sub(r"\s+", " ", str(got)).strip() != expected:
            raise SystemExit(f"request {i}: answer {got!r} != {expected!r}")
        print(f"request {i} ({'stream' if streamed(i) else 'no stream'}): {got}")

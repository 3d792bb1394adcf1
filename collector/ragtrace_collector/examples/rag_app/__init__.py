"""Example RAG app traced with ragtrace: BM25 over a shipped chemical-elements corpus, a
reranker, and a streaming generator (litellm when a model is configured, else offline extractive).

Public entry points (stable; ``collector/demo.py`` builds on them):

``ragtrace_collector.examples.rag_app.app.RagApp(*, top_k=3, candidates=8, model=None, api_base=None, token_delay=0.004, prefill_delay=0.0,
drop_best=False, add_unsupported_claim=False, slow_first_token=0.0)``
    ``model``/``api_base`` default to env ``RAGTRACE_EXAMPLE_MODEL``/``RAGTRACE_EXAMPLE_API_BASE``
    (a litellm model name; unset → the offline extractive generator, no network).

``RagApp.answer(question, degrade=False, *, drop_best=None, add_unsupported_claim=None,
slow_first_token=None, reference=None, session_id=None, user_id=None) -> Answer``
    One traced request (root span ``elements-qa`` → ``bm25_search`` → ``overlap_rerank`` →
    ``extractive_answer``/``llm_answer``). ``degrade=True`` turns every fault on: drops the
    best passage, appends an unsupported claim (wrong number and name), delays the first token
    by 0.6 s; the root span gets tag ``degraded``. ``reference`` is attached with
    ``ragtrace.annotate`` (reference-based metrics). Never needs the network offline.

``Answer``: ``question, text, contexts, context_ids, trace_id (32 hex or None), faults``.

``ragtrace_collector.examples.rag_app.questions.QUESTIONS``: list of ``{"question", "reference",
"reference_doc_ids", "element"}`` (65 questions answerable from the corpus).

``ragtrace_collector.examples.rag_app.run.run_requests(n, *, endpoint=None, protocol=None, degrade_every=0, ...)``
    What ``python -m ragtrace_collector.examples.rag_app`` does: init ragtrace, send ``n`` requests, flush.

Tracing must be set up by the caller (``ragtrace.init(...)``); without it the app runs untraced.
"""

from __future__ import annotations

from .app import PIPELINE_NAME, Answer, RagApp
from .questions import QUESTIONS

__all__ = ["PIPELINE_NAME", "QUESTIONS", "Answer", "RagApp"]

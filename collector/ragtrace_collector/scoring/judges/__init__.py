"""Judges: ``make_judge("local")`` for the embedded offline judge, any litellm model name otherwise."""

from __future__ import annotations

from typing import Any

from ragtrace_collector.scoring.judge import Judge

__all__ = ["make_judge"]


def make_judge(spec: str, **kwargs: Any) -> Judge:
    """The judge named by ``spec``.

    ``"local"`` gives :class:`ragtrace_collector.scoring.judges.local.LocalJudge` (no network, no key);
    anything else is a litellm model name for :class:`ragtrace_collector.scoring.judges.llm.LLMJudge`,
    with ``kwargs`` passed through (``base_url``, ``api_key``, ``concurrency``, ``timeout``,
    ``max_retries``, ``embedding_model``...). ``None`` values are dropped so callers can pass
    optional CLI flags straight through. Imports are lazy: neither judge loads unless chosen.
    """
    spec = (spec or "").strip()
    if not spec:
        raise ValueError("a judge spec is required: 'local' or a litellm model name")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if spec == "local":
        from ragtrace_collector.scoring.judges.local import LocalJudge

        return LocalJudge(**kwargs)
    from ragtrace_collector.scoring.judges.llm import LLMJudge

    return LLMJudge(spec, **kwargs)

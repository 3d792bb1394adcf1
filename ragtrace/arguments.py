"""Where a decorated function's arguments sit: found once, at decoration time, read on every call by position
or name (never by binding the signature, which costs more than the span)."""

from __future__ import annotations

import inspect
from typing import Any

SELF_NAMES = ("self", "cls")
QUERY_NAMES = ("query", "question", "user_input", "q", "input", "prompt", "query_str", "text")
MESSAGES_NAMES = ("messages",)
SYSTEM_NAMES = ("system", "system_prompt", "system_instructions", "instructions")
PROMPT_NAMES = ("prompt", "query", "question", "user_input", "input", "text")
CONTEXT_NAMES = (
    "contexts",
    "context",
    "documents",
    "docs",
    "passages",
    "chunks",
    "retrieved_contexts",
    "sources",
    "nodes",
)
RERANK_DOC_NAMES = ("documents", "docs", "nodes", "contexts", "passages", "candidates", "chunks")
TOPK_NAMES = ("top_k", "top_n", "k", "n")
MODEL_NAMES = ("model", "model_name")

_MISSING = object()


class ArgRef:
    """Where one parameter sits: read it from kwargs by name or args by position."""

    __slots__ = ("default", "i_bound", "i_unbound", "name")

    def __init__(self, name: str, index: int | None, self_like: bool, default: Any = None) -> None:
        self.name = name
        self.default = default
        self.i_unbound = index
        self.i_bound = None if index is None else (index - 1 if self_like else index)

    def get(self, bound: bool, args: tuple, kwargs: dict) -> Any:
        if kwargs:
            v = kwargs.get(self.name, _MISSING)
            if v is not _MISSING:
                return v
        i = self.i_bound if bound else self.i_unbound
        if i is not None and 0 <= i < len(args):
            return args[i]
        return self.default


def params_of(fn: Any) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []


def find(
    params: list[inspect.Parameter], names: tuple[str, ...] | str | int | None, fallback_first: bool, self_like: bool
) -> ArgRef | None:
    """Locate a parameter by explicit name/index, else by conventional names, else (optionally) the first one."""
    positional_ok = True
    index_of: dict[str, int | None] = {}
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    for i, p in enumerate(params):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            positional_ok = False
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        index_of[p.name] = i if positional_ok and p.kind is not inspect.Parameter.KEYWORD_ONLY else None
    if isinstance(names, int):
        return ArgRef(f"__arg{names}", names + (1 if self_like else 0), self_like)
    if isinstance(names, str):
        return ArgRef(names, index_of.get(names), self_like, defaults.get(names))
    if names:
        for n in names:
            if n in index_of:
                return ArgRef(n, index_of[n], self_like, defaults.get(n))
    if fallback_first:
        start = 1 if self_like else 0
        for p in params[start:]:
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
                return ArgRef(p.name, index_of.get(p.name), self_like, defaults.get(p.name))
            if p.kind is inspect.Parameter.KEYWORD_ONLY:
                return ArgRef(p.name, None, self_like, defaults.get(p.name))
    return None

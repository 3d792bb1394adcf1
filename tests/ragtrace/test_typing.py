"""The decorators keep the decorated function's signature for type checkers.

A small user program is type-checked with mypy: correct calls must pass, and every line
marked ``# E: <code>`` (a wrong argument, a missing argument, a wrong result type) must be
reported with that error code. Were the decorators typed ``-> Any``, none of those lines
would be reported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

REPO = Path(__file__).resolve().parents[2]

USER_PROGRAM = textwrap.dedent(
    """
    from __future__ import annotations

    from typing import AsyncIterator, Iterator

    import ragtrace


    @ragtrace.retriever
    def search(query: str, k: int = 3) -> list[str]:
        return [query] * k


    @ragtrace.generator(name="answer", model="openai/gpt-4o-mini")
    async def answer(question: str, contexts: list[str]) -> str:
        return question + "".join(contexts)


    @ragtrace.generator
    def stream(prompt: str) -> Iterator[str]:
        yield prompt


    @ragtrace.generator(model="openai/gpt-4o-mini")
    async def astream(prompt: str) -> AsyncIterator[str]:
        yield prompt


    @ragtrace.reranker(name="rerank", top_k=2)
    def rerank(query: str, documents: list[str]) -> list[str]:
        return documents


    @ragtrace.tool(name="weather", description="Forecast for a city")
    async def weather(city: str, days: int = 1) -> dict[str, str]:
        return {"city": city}


    @ragtrace.tool
    def calc(expression: str) -> float:
        return 0.0


    @ragtrace.pipeline("support")
    async def handle(question: str) -> str:
        docs: list[str] = rerank(question, search(question, k=2))
        text: str = await answer(question, contexts=docs)
        parts: list[str] = list(stream(text))
        async for p in astream(text):
            parts.append(p)
        return "".join(parts)


    class Service:
        @ragtrace.retriever
        def retrieve(self, query: str) -> list[str]:
            return [query]

        @classmethod
        @ragtrace.retriever(name="cls_retrieve")
        def cls_retrieve(cls, query: str) -> list[str]:
            return [query]

        @staticmethod
        @ragtrace.retriever(name="static_retrieve")
        def static_retrieve(query: str) -> list[str]:
            return [query]

        @ragtrace.retriever
        @staticmethod
        def outer_static(query: str) -> list[str]:
            return [query]

        @ragtrace.retriever
        @classmethod
        def outer_cls(cls, query: str) -> list[str]:
            return [query]


    def plain_search(query: str) -> list[str]:
        return [query]


    direct = ragtrace.retriever(plain_search, name="direct", data_source="kb")  # a function and options at once
    found: list[str] = direct("q")


    @ragtrace.retriever(nme="typo")  # E: call-overload
    def misspelt_option(query: str) -> str:
        return query


    @ragtrace.generator(model=3)  # E: call-overload
    def wrong_option_type(prompt: str) -> str:
        return prompt


    reveal_type(search)
    reveal_type(answer)
    reveal_type(stream)
    reveal_type(handle)

    ok: list[str] = Service().retrieve("q") + Service.cls_retrieve("q") + Service.static_retrieve("q")
    ok2: list[str] = Service.outer_static("q") + Service.outer_cls("q")

    search(123)  # E: arg-type
    search("q", k="3")  # E: arg-type
    pending = answer("q")  # E: call-arg
    stream(prompt=1)  # E: arg-type
    rerank("q", documents="d")  # E: arg-type
    n: int = search("q")  # E: assignment
    s: str = handle("q")  # E: assignment
    Service().retrieve(1)  # E: arg-type
    Service.cls_retrieve(1)  # E: arg-type
    Service.static_retrieve(1)  # E: arg-type
    Service.outer_static(1)  # E: arg-type
    Service.outer_cls(1)  # E: arg-type
    forecast = weather("Paris", days="2")  # E: arg-type
    total: float = calc("1 + 1") + calc(expression=2)  # E: arg-type
    label: str = calc("1")  # E: assignment
    direct(1)  # E: arg-type
    """
)

LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<level>error|note): (?P<msg>.*?)(?:  \[(?P<code>[a-z-]+)\])?$")


def _run_mypy(tmp_path: Path) -> tuple[list[tuple[int, str, str, str | None]], str]:
    prog = tmp_path / "user_app.py"
    prog.write_text(USER_PROGRAM)
    env = {**os.environ, "MYPYPATH": str(REPO), "MYPY_CACHE_DIR": str(tmp_path / ".mypy_cache")}
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--python-version",
        "3.10",
        "--no-color-output",
        "--no-pretty",
        "--show-error-codes",
        "--hide-error-context",
        "--no-error-summary",
        "--config-file",
        "",
        str(prog),
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    found = []
    for raw in out.splitlines():
        m = LINE.match(raw)
        if m and Path(m["file"]).name == prog.name:  # the user's program only
            found.append((int(m["line"]), m["level"], m["msg"], m["code"]))
    return found, out


def test_decorated_functions_keep_their_signatures(tmp_path: Path) -> None:
    found, out = _run_mypy(tmp_path)
    expected = {
        (i, m.group(1))
        for i, line in enumerate(USER_PROGRAM.splitlines(), start=1)
        if (m := re.search(r"# E: ([a-z-]+)$", line))
    }
    assert expected, "the program marks no expected errors"
    errors = {(line, code) for line, level, _msg, code in found if level == "error"}
    assert errors == expected, f"mypy reported {sorted(errors)}, expected {sorted(expected)}\n{out}"

    revealed = [msg for _line, level, msg, _code in found if level == "note" and msg.startswith("Revealed type")]
    assert len(revealed) == 4, out
    search_t, answer_t, stream_t, handle_t = revealed
    assert "def (query: builtins.str, k: builtins.int =) -> builtins.list[builtins.str]" in search_t, out
    assert "def (question: builtins.str, contexts: builtins.list[builtins.str])" in answer_t, out
    assert "typing.Coroutine[Any, Any, builtins.str]" in answer_t, out
    assert "def (prompt: builtins.str) -> typing.Iterator[builtins.str]" in stream_t, out
    assert "def (question: builtins.str) -> typing.Coroutine[Any, Any, builtins.str]" in handle_t, out

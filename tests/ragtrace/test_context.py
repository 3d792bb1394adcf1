"""Parent/child links across await, asyncio tasks and threads started with a copied context."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import ragtrace


@ragtrace.retriever
async def aretrieve(query):
    await asyncio.sleep(0.01)
    return [query]


@ragtrace.retriever
def retrieve(query):
    return [query]


async def test_nesting_across_await_and_tasks(spans):
    @ragtrace.pipeline(name="fanout")
    async def fanout(question):
        await aretrieve("awaited")
        results = await asyncio.gather(*(asyncio.create_task(aretrieve(f"task{i}")) for i in range(3)))
        return str(results)

    await asyncio.gather(fanout("a"), fanout("b"))  # two concurrent requests must not mix
    roots = [s for s in spans.all() if s.name == "fanout"]
    assert len(roots) == 2
    children = [s for s in spans.all() if s.name == "aretrieve"]
    assert len(children) == 8
    by_root = {r.context.span_id: 0 for r in roots}
    for c in children:
        assert c.parent.span_id in by_root
        by_root[c.parent.span_id] += 1
        root = next(r for r in roots if r.context.span_id == c.parent.span_id)
        assert c.context.trace_id == root.context.trace_id
    assert sorted(by_root.values()) == [4, 4]


def test_nesting_in_threads_started_with_copied_context(spans):
    @ragtrace.pipeline(name="threaded")
    def threaded(question):
        with ThreadPoolExecutor(max_workers=2) as pool:
            futs = [pool.submit(contextvars.copy_context().run, retrieve, f"t{i}") for i in range(2)]
            [f.result() for f in futs]
        t = threading.Thread(target=contextvars.copy_context().run, args=(retrieve, "thread"))
        t.start()
        t.join()
        return "ok"

    threaded("q")
    root = spans.named("threaded")
    kids = [s for s in spans.all() if s.name == "retrieve"]
    assert len(kids) == 3
    assert all(k.parent.span_id == root.context.span_id for k in kids)


def test_thread_without_copied_context_starts_a_new_trace(spans):
    @ragtrace.pipeline(name="detached")
    def detached(question):
        t = threading.Thread(target=retrieve, args=("x",))
        t.start()
        t.join()
        return "ok"

    detached("q")
    assert spans.named("retrieve").parent is None

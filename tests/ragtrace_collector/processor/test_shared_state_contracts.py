"""The ``AssemblyState`` and ``Budget`` contracts, run against every implementation: in process, and kept in
Debian's real ``redis-server`` (several receivers share them there). A new implementation joins the fixture's
params and must pass the same tests; what only a shared one does (two receivers, Redis outages, claims after a
kill) stays in its own tests under ``tests/integration/``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from ragtrace_collector.model.spans import SpanData
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState
from ragtrace_collector.processor.assembly.state import (
    REASON_EVICTED,
    REASON_MAX_WAIT,
    REASON_ROOT,
    REASON_SHUTDOWN,
    AssemblyState,
)
from ragtrace_collector.processor.sampling.budget import BUDGET_RECORDS, BUDGET_TOKENS, Budget, LocalBudget
from ragtrace_collector.processor.sampling.redis_budget import RedisBudget
from tests.support.binaries import require
from tests.support.redis_server import RedisServer

GRACE, MAX_WAIT = 0.2, 0.8


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    require("redis-server", "redis-server")
    server = RedisServer().start()
    yield server.url
    server.cleanup()


def _prefix() -> str:
    return f"c{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["memory", "redis"])
def make_state(request: pytest.FixtureRequest) -> Iterator[Callable[..., AssemblyState]]:
    opened: list[AssemblyState] = []

    def make(max_traces: int = 100) -> AssemblyState:
        if request.param == "memory":
            state: AssemblyState = InMemoryAssemblyState(GRACE, MAX_WAIT, max_traces=max_traces)
        else:
            url = request.getfixturevalue("redis_url")
            state = RedisAssemblyState(url, GRACE, MAX_WAIT, max_traces=max_traces, prefix=_prefix())
        opened.append(state)
        return state

    yield make
    for state in opened:
        state.close()


def span(trace: str, span_id: str, parent: str = "") -> SpanData:
    return SpanData(trace, span_id, parent, f"s{span_id}", 1, 2, attrs={"k": span_id}, nbytes=100)


def add(state: AssemblyState, trace: str, *spans: SpanData):
    root = any(s.is_root for s in spans)
    return state.add(trace, list(spans), sum(s.nbytes for s in spans), root, time.monotonic())


def wait_due(state: AssemblyState, within: float) -> list:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        due = state.pop_due(time.monotonic())
        if due:
            return due
        time.sleep(0.05)
    return []


def test_a_trace_is_due_a_grace_after_its_root_with_every_span_once(make_state):
    state = make_state()
    add(state, "t1", span("t1", "b", parent="a"))
    add(state, "t1", span("t1", "a"))
    assert state.inflight()[0] == 1
    assert state.pop_due(time.monotonic()) == []  # within the grace: a late child may still come
    (done,) = wait_due(state, 2.0)
    assert done.trace_id == "t1" and done.reason == REASON_ROOT
    assert sorted(s.span_id for s in done.spans) == ["a", "b"]
    assert done.spans[0].attrs["k"] in ("a", "b")  # spans keep their content through the state
    state.settle(["t1"])
    assert wait_due(state, GRACE * 2) == [] and state.inflight()[0] == 0  # returned once


def test_a_trace_without_root_is_due_at_max_wait(make_state):
    state = make_state()
    add(state, "t2", span("t2", "c", parent="x"))
    time.sleep(GRACE * 1.5)
    assert state.pop_due(time.monotonic()) == []  # no root: the grace does not apply
    (done,) = wait_due(state, 2.0)
    assert done.reason == REASON_MAX_WAIT


def test_spans_of_a_completed_trace_are_late_and_counted(make_state):
    state = make_state()
    add(state, "t3", span("t3", "a"))
    assert wait_due(state, 2.0)
    state.settle(["t3"])
    result = add(state, "t3", span("t3", "z", parent="a"))
    assert result.late_spans == 1 and state.inflight()[0] == 0


def test_past_the_trace_bound_the_oldest_is_evicted_and_returned(make_state):
    state = make_state(max_traces=2)
    add(state, "old", span("old", "a", parent="p"))
    add(state, "mid", span("mid", "a", parent="p"))
    result = add(state, "new", span("new", "a", parent="p"))
    assert [t.trace_id for t in result.evicted] == ["old"]
    assert result.evicted[0].reason == REASON_EVICTED and state.inflight()[0] == 2


def test_one_requests_traces_at_once_are_as_one_at_a_time(make_state):
    """``add_many`` (what the receivers call: one round trip per request where the state is shared) gives each
    trace's result in order, as ``add`` would: late spans, and evictions past the bound."""
    state = make_state(max_traces=3)
    add(state, "done", span("done", "a"))
    assert wait_due(state, 2.0)
    state.settle(["done"])
    items = [
        ("t1", [span("t1", "a", parent="p")], 100, False),
        ("done", [span("done", "z", parent="a")], 100, False),  # completed: late
        ("t2", [span("t2", "a", parent="p")], 100, False),
        ("t3", [span("t3", "a", parent="p")], 100, False),
        ("t4", [span("t4", "a", parent="p")], 100, False),  # past the bound of 3: t1 goes
    ]
    results = state.add_many(items, time.monotonic())
    assert [r.late_spans for r in results] == [0, 1, 0, 0, 0]
    assert [[t.trace_id for t in r.evicted] for r in results] == [[], [], [], [], ["t1"]]
    assert state.inflight()[0] == 3


def test_pop_all_at_shutdown_loses_no_trace(make_state):
    # in process, every trace is handed over at once; a shared state hands over what is due and leaves the rest
    # to the receivers that stay up (here, a later sweep of the same state): each trace exactly once either way
    state = make_state()
    for t in ("u", "v"):
        add(state, t, span(t, "a", parent="p"))
    popped = state.pop_all()
    assert {t.reason for t in popped} <= {REASON_SHUTDOWN, REASON_MAX_WAIT}
    later = [] if len(popped) == 2 else wait_due(state, 2.0)
    assert sorted(t.trace_id for t in popped + later) == ["u", "v"]
    if isinstance(state, InMemoryAssemblyState):
        assert [t.reason for t in popped] == [REASON_SHUTDOWN] * 2


@pytest.fixture(params=["local", "redis"])
def make_budget(request: pytest.FixtureRequest) -> Iterator[Callable[..., Budget]]:
    opened: list[Budget] = []

    def make(records_per_minute: float | None = None, judge_tokens_per_hour: float | None = None) -> Budget:
        if request.param == "local":
            budget: Budget = LocalBudget(records_per_minute, judge_tokens_per_hour)
        else:
            url = request.getfixturevalue("redis_url")
            budget = RedisBudget(url, records_per_minute, judge_tokens_per_hour, prefix=_prefix())
        opened.append(budget)
        return budget

    yield make
    for budget in opened:
        budget.close()


def test_no_limit_lets_every_record_go(make_budget):
    budget = make_budget()
    assert [budget.acquire() for _ in range(50)] == [None] * 50


def test_records_per_minute_refuses_past_the_minutes_worth_without_spending(make_budget):
    budget = make_budget(records_per_minute=3)
    assert [budget.acquire() for _ in range(5)] == [None, None, None, BUDGET_RECORDS, BUDGET_RECORDS]


def test_judge_tokens_per_hour_refuses_once_spent(make_budget):
    budget = make_budget(judge_tokens_per_hour=1000)
    assert budget.acquire() is None
    budget.add_judge_tokens(1500)
    assert budget.acquire() == BUDGET_TOKENS
    budget.add_judge_tokens(0)  # nothing spent: nothing changes, no error
    assert budget.acquire() == BUDGET_TOKENS

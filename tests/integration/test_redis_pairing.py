"""RedisPairingState: the two traces of one request join when two receivers sharing Redis complete one each.

The traces are the real peer captures (``tests/fixtures/peers``): OpenLIT's LangChain instrumentation, which traces
a request's retrieval and its model call apart, and OpenInference's LangChain tracer with the OpenAI
instrumentation, which traces one model call twice. One receiver gets and completes one kind of trace, the other
receiver the other kind, over a real redis-server.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from ragtrace_collector.model.spans import DecodedRequest, SpanData
from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState
from ragtrace_collector.processor.assembly.state import CompletedTrace
from ragtrace_collector.processor.conventions import duplicates, halves
from ragtrace_collector.processor.joins.duplicate_calls import REASON_DUPLICATE_CALL
from ragtrace_collector.processor.joins.pairing import HeldRetrieval
from ragtrace_collector.processor.joins.redis_pairing import RedisPairingState
from ragtrace_collector.processor.joins.split_requests import REASON_SPLIT_REQUEST
from ragtrace_collector.processor.pipeline import Pipeline
from ragtrace_collector.receiver.decode import extract_spans, parse_protobuf
from tests.support.assembly import RecordingObserver
from tests.support.paths import REPO
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration

PEERS = REPO / "tests" / "fixtures" / "peers"
GRACE = 0.3
QUESTIONS = 6


def captured_traces(setup: str) -> dict[str, list[SpanData]]:
    """Every trace the peer app exported, as the receivers decode it."""
    traces: dict[str, list[SpanData]] = {}
    for path in sorted((PEERS / setup).glob("requests-*.binpb")):
        for trace_id, spans in extract_spans(parse_protobuf(path.read_bytes())).traces.items():
            traces.setdefault(trace_id, []).extend(spans)
    return traces


def receiver(
    url: str, window: float = 10.0, settle: float = 1.0, retry_interval: float = 1.0
) -> tuple[Pipeline, RecordingObserver]:
    obs = RecordingObserver()
    state = RedisAssemblyState(url, grace_seconds=GRACE, max_wait_seconds=30.0, retry_interval=retry_interval)
    pairing = RedisPairingState(url, window=window, settle=settle, retry_interval=retry_interval)
    return Pipeline(state, observer=obs, pairing=pairing), obs


def send(assembler: Pipeline, traces: list[tuple[str, list[SpanData]]]) -> None:
    for trace_id, spans in traces:
        request = DecodedRequest()
        request.traces[trace_id] = spans
        assembler.add(request)


@pytest.fixture
def url(redis_server) -> str:
    return f"{redis_server.url}?prefix={uuid.uuid4().hex[:8]}"


def test_openlit_halves_completed_by_two_receivers_join(url):
    traces = captured_traces("openlit_langchain")
    retrievals = [(t, s) for t, s in traces.items() if halves.retrieval_half(t, s)]
    answers = [(t, s) for t, s in traces.items() if halves.answer_half(t, s)]
    assert len(retrievals) == len(answers) == QUESTIONS
    (a, obs_a), (b, obs_b) = receiver(url), receiver(url)
    send(a, retrievals)
    time.sleep(0.01)  # the answers' deadlines come after every retrieval's
    send(b, answers)
    # What each receiver's sweep does first, before anything is due: share the services it marked. The test once
    # swept here and asserted nothing was due yet, a 0.3 s window a loaded machine missed (the sends took longer,
    # and a's sweep then took every trace); only lower bounds of time are left.
    for receiver_ in (a, b):
        receiver_.pairing.sync(receiver_.clock())
    time.sleep(GRACE + 0.05)
    assert a.collect(limit=QUESTIONS) == []  # a completes the retrievals (the oldest deadlines) and holds them
    records = b.collect()  # b completes the model calls and takes the retrieval each was fed by
    assert len(records) == len({r.user_input for r in records}) == QUESTIONS
    assert all(len(r.retrieved_contexts) == 3 and r.response and r.model for r in records)  # both halves read
    assert {r.trace_id for r in records} == {t for t, _ in retrievals}
    assert obs_b.completed.count(REASON_SPLIT_REQUEST) == QUESTIONS and obs_a.completed == []
    assert a.collect(everything=True) == [] and b.collect(everything=True) == []  # nothing left held


def test_a_call_completed_before_another_receiver_held_its_retrieval_keeps_looking(url):
    """The race the settle time closes: b completes the model calls while a is still between taking their
    retrievals and holding them (here: before a's sweep); b's next sweep finds them held and joins."""
    traces = captured_traces("openlit_langchain")
    retrievals = [(t, s) for t, s in traces.items() if halves.retrieval_half(t, s)]
    answers = [(t, s) for t, s in traces.items() if halves.answer_half(t, s)]
    (a, _), (b, obs_b) = receiver(url), receiver(url)
    send(b, answers)
    time.sleep(0.01)
    send(a, retrievals)
    a.collect()  # shares a's marks (nothing due yet)
    time.sleep(GRACE + 0.05)
    assert b.collect(limit=QUESTIONS) == []  # the calls: no retrieval held yet, so they keep looking
    assert a.collect() == []  # the retrievals: held
    records = b.collect()
    assert sorted(r.trace_id for r in records) == sorted(t for t, _ in retrievals)
    assert all(len(r.retrieved_contexts) == 3 and r.response for r in records)
    assert obs_b.completed.count(REASON_SPLIT_REQUEST) == QUESTIONS


def test_a_retrieval_no_call_took_is_released_once_by_either_receiver(url):
    traces = captured_traces("openlit_langchain")
    retrievals = [(t, s) for t, s in traces.items() if halves.retrieval_half(t, s)]
    answers = [(t, s) for t, s in traces.items() if halves.answer_half(t, s)]
    (a, _), (b, _) = receiver(url, window=0.5, settle=0.2), receiver(url, window=0.5, settle=0.2)
    send(b, answers[:1])  # b sees the service start traces with a model call: its mark is shared
    time.sleep(GRACE + 0.05)
    assert b.collect() == []  # the call looks for its retrieval a little longer (another receiver may hold it)
    time.sleep(0.2)
    assert [r.trace_id for r in b.collect()] == [answers[0][0]]  # it never came: a record alone
    send(a, retrievals[1:2])
    time.sleep(GRACE + 0.05)
    assert a.collect() == []  # held for the window
    time.sleep(0.5)
    released = b.collect() + a.collect()  # whichever sweeps first releases it, once
    assert [r.trace_id for r in released] == [retrievals[1][0]]


def test_openinference_duplicate_call_completed_by_another_receiver_is_dropped(url):
    traces = captured_traces("oi_langchain_openai")
    chains = [(t, s) for t, s in traces.items() if duplicates.framework_calls(s)]
    bare = [(t, s) for t, s in traces.items() if duplicates.bare_call(s)]
    assert len(chains) == len(bare) == QUESTIONS
    (a, _), (b, obs_b) = receiver(url), receiver(url)
    send(a, chains)
    time.sleep(0.01)
    send(b, bare)
    assert b.collect() == [] and a.collect() == []
    time.sleep(GRACE + 0.05)
    records = a.collect(limit=QUESTIONS)  # a completes the chains, remembering their model calls, shared
    assert sorted(r.trace_id for r in records) == sorted(t for t, _ in chains)
    assert b.collect() == []  # b's bare calls repeat a's calls: counted, no second record
    assert obs_b.completed.count(REASON_DUPLICATE_CALL) == QUESTIONS
    assert b.collect(everything=True) == []


def test_redis_down_pairs_within_one_receiver_and_never_blocks(tmp_path):
    srv = RedisServer(data_dir=tmp_path).start()
    try:
        url = f"{srv.url}?prefix=p"
        asm, obs = receiver(url, retry_interval=30.0)
        srv.stop()
        traces = captured_traces("openlit_langchain")
        t0 = time.monotonic()
        send(asm, list(traces.items()))
        time.sleep(GRACE + 0.05)
        records = asm.collect()
        assert time.monotonic() - t0 < 3.0  # one failed connect, then the breaker skips Redis
        assert len(records) == QUESTIONS and obs.completed.count(REASON_SPLIT_REQUEST) == QUESTIONS
    finally:
        srv.cleanup()


def test_concurrent_receivers_take_a_held_retrieval_or_a_remembered_call_once(url):
    """Eight receivers race for one held retrieval and for one remembered call: exactly one wins each."""
    traces = captured_traces("openlit_langchain")
    retrieval = next(h for t, s in traces.items() if (h := halves.retrieval_half(t, s)))
    answer = next(h for t, s in traces.items() if (h := halves.answer_half(t, s)) and halves.fed(retrieval, h))
    chains = captured_traces("oi_langchain_openai")
    framework = next(c for s in chains.values() for c in duplicates.framework_calls(s))
    bare = next(c for s in chains.values() if (c := duplicates.bare_call(s)) and duplicates.encloses(framework, c))
    states = [RedisPairingState(url, window=10.0) for _ in range(8)]
    held = CompletedTrace(retrieval.trace_id, traces[retrieval.trace_id], "root")
    states[0].hold([HeldRetrieval(held, retrieval)], 0.0)
    states[0].remember([framework], 0.0)
    start = threading.Barrier(len(states))

    def race(state: RedisPairingState) -> tuple[CompletedTrace | None, duplicates.ModelCall | None]:
        start.wait()
        return state.take_fed(answer), state.take_twin(bare, 0.0)

    with ThreadPoolExecutor(len(states)) as pool:
        results = list(pool.map(race, states))
    taken = [r for r, _ in results if r is not None]
    twins = [t for _, t in results if t is not None]
    assert len(taken) == 1 and taken[0].trace_id == retrieval.trace_id
    assert len(taken[0].spans) == len(traces[retrieval.trace_id])
    assert twins == [framework]
    assert all(s.release(0.0, everything=True) == [] for s in states)  # taken means gone

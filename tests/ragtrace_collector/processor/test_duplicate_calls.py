"""One model call traced in two traces (a framework's LLM span, the client library's bare span) makes one record.

The spans are shaped as LangChain's OpenInference tracer and the OpenAI instrumentation write them together (see
the real capture ``tests/fixtures/peers/oi_langchain_openai``); a clock is passed in so the hold window is exact.
"""

from __future__ import annotations

from ragtrace_collector.model.spans import EVENT_TIME, DecodedRequest, SpanData
from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
from ragtrace_collector.processor.assembly.state import REASON_ROOT
from ragtrace_collector.processor.joins.duplicate_calls import REASON_DUPLICATE_CALL
from ragtrace_collector.processor.joins.pairing import InMemoryPairingState
from ragtrace_collector.processor.pipeline import Pipeline
from tests.support.assembly import ManualClock, RecordingObserver

S = 1_000_000_000  # ns
PROMPT = "Context:\nThe bridge opened in 1911.\n\nQuestion: When did the bridge open?"


def llm_attrs(prompt: str, **extra: object) -> dict:
    return {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "system",
        "llm.input_messages.0.message.content": "Answer from the context.",
        "llm.input_messages.1.message.role": "user",
        "llm.input_messages.1.message.content": prompt,
        **extra,
    }


def chain_request(trace: str, start: int, prompt: str = PROMPT, service: str = "app") -> list[SpanData]:
    """A LangChain request: chain root, retriever, and its LLM span (no first-token event, tokens stated)."""
    root, retriever, llm = (f"{trace[:8]}000{i}" for i in (1, 2, 3))
    chain = {"openinference.span.kind": "CHAIN", "input.value": "When did the bridge open?", "output.value": "In 1911."}
    docs = {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": "The bridge opened."}
    model = llm_attrs(prompt, **{"llm.token_count.prompt": 80, "llm.token_count.completion": 5})
    return [
        SpanData(trace, root, "", "RunnableSequence", start, start + 2 * S, service=service, attrs=chain),
        SpanData(trace, retriever, root, "Retriever", start + S // 10, start + S // 5, service=service, attrs=docs),
        SpanData(trace, llm, root, "ChatOpenAI", start + S // 2, start + 3 * S // 2, service=service, attrs=model),
    ]


def bare_call(trace: str, start: int, prompt: str = PROMPT, service: str = "app") -> list[SpanData]:
    """The OpenAI instrumentation's span of that call, streamed, in a trace of its own."""
    attrs = llm_attrs(prompt, **{"llm.invocation_parameters": '{"stream": true}'})
    attrs.update({"llm.token_count.prompt": 80, "llm.token_count.completion": 5})
    attrs["llm.model_name"] = "gpt-4o-mini-2024-07-18"
    first_token = [("First Token Stream Event", {EVENT_TIME: start + S // 10})]
    span = SpanData(trace, f"{trace[:8]}00aa", "", "ChatCompletion", start, start + S // 2, service=service)
    span.attrs, span.events = attrs, first_token
    return [span]


def batch(*traces: list[SpanData]) -> DecodedRequest:
    d = DecodedRequest()
    for spans in traces:
        for s in spans:
            d.traces.setdefault(s.trace_id, []).append(s)
            d.accepted += 1
    return d


def make(window: float = 10.0) -> tuple[Pipeline, ManualClock, RecordingObserver]:
    clock, obs = ManualClock(), RecordingObserver()
    state = InMemoryAssemblyState(grace_seconds=2.0, max_wait_seconds=60.0)
    return Pipeline(state, observer=obs, clock=clock, pairing=InMemoryPairingState(window)), clock, obs


T1, B1 = "a" * 32, "b" * 32
START = 1_700_000_000 * S


def test_the_bare_call_joins_its_request_when_both_complete_together():
    asm, clock, obs = make()
    asm.add(batch(chain_request(T1, START), bare_call(B1, START + S // 2 + S // 10)))
    clock.t += 3
    (record,) = asm.collect()
    assert record.trace_id == T1 and record.user_input == "When did the bridge open?"
    assert (record.input_tokens, record.output_tokens) == (80, 5)  # the call counted once
    assert record.streamed is True and record.ttft_seconds == 0.1  # the OpenAI span's first token
    assert record.model == "gpt-4o-mini-2024-07-18"  # the served model, from the span closest to the wire
    assert record.generation_duration_seconds == 1.0  # the framework span's time, not the two added
    assert sorted(obs.completed) == sorted([REASON_ROOT, REASON_DUPLICATE_CALL])


def test_a_bare_call_completing_first_waits_for_its_request():
    asm, clock, obs = make()
    asm.add(batch(bare_call(B1, START + S // 2 + S // 10), chain_request(T1, START)[1:]))  # root not yet
    clock.t += 3
    assert asm.collect() == []  # the bare call is held: its service nests generator spans in requests
    asm.add(batch(chain_request(T1, START)[:1]))
    clock.t += 3
    (record,) = asm.collect()
    assert record.trace_id == T1 and record.ttft_seconds == 0.1 and record.output_tokens == 5
    assert obs.completed.count(REASON_DUPLICATE_CALL) == 1


def test_a_bare_call_arriving_after_its_request_left_is_dropped():
    """In a service known to send both, a request's model calls are remembered for twice the window."""
    asm, clock, obs = make()
    asm.add(batch(chain_request(T1, START), bare_call(B1, START + S // 2 + S // 10)))
    clock.t += 3
    assert len(asm.collect()) == 1
    later = START + 10 * S
    asm.add(batch(chain_request("c" * 32, later)))
    clock.t += 3
    (record,) = asm.collect()
    assert record.ttft_seconds is None  # LangChain's span alone: no first token
    asm.add(batch(bare_call("d" * 32, later + S // 2 + S // 10)))
    clock.t += 3
    assert asm.collect() == [] and obs.completed.count(REASON_DUPLICATE_CALL) == 2


def test_an_unmatched_bare_call_keeps_its_record_after_the_window():
    """Another prompt, or a call outside the request's model call, is a call of its own: held, then released."""
    asm, clock, obs = make(window=5.0)
    other_prompt = bare_call("c" * 32, START + S // 2 + S // 10, prompt="Something else")
    outside = bare_call("d" * 32, START + 5 * S)  # same prompt, after the request ended
    other_service = bare_call("e" * 32, START + S // 2 + S // 10, service="other")
    asm.add(batch(chain_request(T1, START), other_prompt, outside, other_service))
    clock.t += 3
    first = asm.collect()
    assert {r.trace_id for r in first} == {T1, "e" * 32}  # a service without framework spans is never held
    clock.t += 5
    assert {r.trace_id for r in asm.collect()} == {"c" * 32, "d" * 32}
    assert REASON_DUPLICATE_CALL not in obs.completed


def test_one_request_call_absorbs_one_bare_call():
    asm, clock, _ = make()
    twice = bare_call("c" * 32, START + S // 2 + S // 10), bare_call("d" * 32, START + S // 2 + S // 5)
    asm.add(batch(chain_request(T1, START), *twice))
    clock.t += 3
    assert len(asm.collect(everything=True)) == 2  # the request, and the second bare call as its own record


def test_a_service_of_bare_calls_only_is_never_held():
    asm, clock, obs = make()
    asm.add(batch(bare_call(B1, START)))
    clock.t += 3
    assert [r.trace_id for r in asm.collect()] == [B1] and obs.completed == [REASON_ROOT]


class _SettleLog(InMemoryAssemblyState):
    """The in-process state, keeping what the pipeline settles (the shared state drops its claims there)."""

    def __init__(self) -> None:
        super().__init__(grace_seconds=2.0, max_wait_seconds=60.0)
        self.settled: list[str] = []

    def settle(self, trace_ids) -> None:
        self.settled.extend(trace_ids)


def test_a_held_bare_call_is_settled_and_journaled_only_once_it_leaves_the_join():
    """Held by the join, the bare call is still this process's: its claim is kept, and the journal keeps it."""
    clock, state = ManualClock(), _SettleLog()
    asm = Pipeline(state, clock=clock, pairing=InMemoryPairingState(10.0))
    asm.add(batch(bare_call(B1, START + S // 2 + S // 10), chain_request(T1, START)[1:]))  # the request's root later
    clock.t += 3
    assert asm.completed() == []
    asm.settle()
    assert B1 not in state.settled and asm.oldest_first_seen() == 1000.0
    asm.add(batch(chain_request(T1, START)[:1]))
    clock.t += 3
    (request,) = asm.completed()
    asm.settle()
    assert request.trace_id == T1 and sorted(state.settled) == sorted([B1, T1])
    assert asm.oldest_first_seen() is None

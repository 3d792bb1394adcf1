"""Each extractor of a record's aspects, on the span fixtures of every convention."""

from __future__ import annotations

import json
import math

import pytest

from ragtrace_collector.processor.conventions import build_record, build_summary, documents, messages
from ragtrace_collector.processor.conventions.extractors import (
    extract_context_scores,
    extract_contexts,
    extract_error,
    extract_generation,
    extract_labels,
    extract_question_answer,
    extract_request_facts,
    extract_timings,
    extract_turns,
)
from ragtrace_collector.processor.conventions.trace_spans import TraceSpans, classify_spans
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F
from tests.support.span_fixtures import Spec


def spans_of(specs: list[Spec]) -> list:
    trace_id, request = F.to_request(specs)
    return extract_spans(request).traces[trace_id]


def classified(specs: list[Spec]) -> TraceSpans:
    return classify_spans(spans_of(specs))


# --- classification ---


def test_classify_groups_by_role_and_picks_the_pipeline_span():
    ts = classified(F.ragtrace_shaped())
    assert ts.top is not None and ts.top.name == "support"
    assert ts.request is ts.top
    assert [s.name for s in ts.retrievers] == ["search"]
    assert [s.name for s in ts.generators] == ["answer"]
    assert ts.rerankers == ()
    assert ts.request_first()[0].name == "support"
    assert len(ts.request_first()) == len(ts.spans) == 3


def test_classify_without_a_pipeline_span_falls_back_to_the_root():
    spans = spans_of(F.openlit())
    ts = classify_spans(list(reversed(spans)))  # any input order
    assert ts.top is None
    assert ts.request is ts.root and ts.root is not None and ts.root.name == "rag.request"
    assert [s.name for s in ts.retrievers] == ["chroma.query"]  # OpenLIT vector-DB span
    assert [s.start for s in ts.spans] == sorted(s.start for s in spans)
    assert "generator_messages" not in vars(ts)  # messages are parsed on first use only


# --- question and answer ---


@pytest.mark.parametrize(
    "fixture", [F.openinference_langchain, F.openinference_llamaindex, F.openllmetry, F.openlit, F.ragtrace_shaped]
)
def test_question_answer_in_every_convention(fixture):
    assert extract_question_answer(classified(fixture())) == {"user_input": F.QUESTION, "response": F.ANSWER}


def test_pipeline_input_wins_over_retriever_query_which_wins_over_the_prompt():
    specs = F.ragtrace_shaped()
    specs[0].attributes["input.value"] = "the pipeline's question"
    assert extract_question_answer(classified(specs))["user_input"] == "the pipeline's question"
    del specs[0].attributes["input.value"], specs[0].attributes["output.value"]
    specs[1].attributes["gen_ai.retrieval.query.text"] = "the retriever's query"
    qa = extract_question_answer(classified(specs))
    assert qa == {"user_input": "the retriever's query", "response": F.ANSWER}  # answer: the generator's output


# --- contexts ---


def test_contexts_come_from_the_last_reranker_output():
    contexts = extract_contexts(classified(F.openinference_llamaindex()))
    assert [(c.id, c.score) for c in contexts] == [("doc-2", 5.0), ("doc-1", 4.0)]


def test_contexts_come_from_retrievers_in_each_convention():
    langchain = extract_contexts(classified(F.openinference_langchain()))
    assert [c.content for c in langchain] == [d[1] for d in F.DOCS]
    assert langchain[0].metadata == {"source": "doc-1.md"}
    traceloop = extract_contexts(classified(F.openllmetry()))  # the retriever task's JSON output
    assert [c.content for c in traceloop] == [d[1] for d in F.DOCS]
    assert extract_contexts(classified(F.openlit())) == []


def test_contexts_fall_back_to_the_generator_contexts():
    specs = F.ragtrace_shaped(n_docs=0)
    specs[2].attributes["ragtrace.generator.contexts"] = json.dumps([{"content": "from the generator", "id": "g1"}])
    contexts = extract_contexts(classified(specs))
    assert [(c.content, c.id) for c in contexts] == [("from the generator", "g1")]


# --- context scores (summary) ---


def test_context_scores_prefer_the_reranker_then_the_retrievers():
    assert extract_context_scores(classified(F.openinference_llamaindex())) == [5.0, 4.0]
    assert extract_context_scores(classified(F.ragtrace_shaped())) == [d[2] for d in F.DOCS]


def test_flattened_context_scores_are_read_without_any_text(monkeypatch):
    monkeypatch.setattr(documents, "retrieved_documents", pytest.fail)
    monkeypatch.setattr(documents, "reranked_documents", pytest.fail)
    assert extract_context_scores(classified(F.ragtrace_shaped())) == [d[2] for d in F.DOCS]


def test_context_scores_with_none_written_are_the_contexts_unscored():
    """No score anywhere: one ``None`` per context, as the full record has (the low-score rule skips them)."""
    ts = classified(F.openinference_langchain())
    scores = extract_context_scores(ts)
    assert scores and all(s is None for s in scores)


# --- generation ---


def test_generation_stats_of_the_ragtrace_sdk():
    gen = extract_generation(classified(F.ragtrace_shaped()))
    assert (gen["model"], gen["provider"]) == ("offline-extractive", "ragtrace")
    assert (gen["input_tokens"], gen["output_tokens"]) == (30, 9)
    assert (gen["ttft_seconds"], gen["tpot_seconds"], gen["streamed"]) == (0.004, 0.001, True)
    assert gen["generation_duration_seconds"] is not None and gen["generation_duration_seconds"] >= 0.02


def test_generation_stats_of_peer_conventions():
    tl = extract_generation(classified(F.openllmetry()))
    assert tl["model"] == "gpt-4o-mini-2024-07-18"  # the response model wins over the request model
    assert (tl["provider"], tl["input_tokens"], tl["output_tokens"]) == ("openai", 40, 9)
    lit = extract_generation(classified(F.openlit()))
    assert lit["ttft_seconds"] == 0.012 and lit["generation_duration_seconds"] is not None
    # no TPOT written: derived as OTel defines it, per token after the first
    assert lit["tpot_seconds"] == pytest.approx((lit["generation_duration_seconds"] - 0.012) / 9)


def test_tokens_are_summed_over_generators():
    specs = F.ragtrace_shaped()
    specs.append(Spec("second", 0, dict(specs[2].attributes, **{"gen_ai.usage.output_tokens": 1})))
    gen = extract_generation(classified(specs))
    assert (gen["input_tokens"], gen["output_tokens"]) == (60, 10)


# --- request facts ---


def test_request_facts_of_the_ragtrace_sdk():
    specs = F.ragtrace_shaped(reference="two years")
    specs[1].attributes["ragtrace.sample"] = True
    facts = extract_request_facts(classified(specs))
    assert facts == {
        "pipeline": "support",
        "service": "svc",
        "session_id": "s-1",
        "user_id": "u-1",
        "reference": "two years",
        "sample_requested": True,
    }


def test_request_facts_of_peer_conventions():
    tl = extract_request_facts(classified(F.openllmetry()))
    assert (tl["pipeline"], tl["session_id"], tl["user_id"]) == ("rag_answer", "sess-tl", "user-tl")
    lc = extract_request_facts(classified(F.openinference_langchain()))
    assert lc["pipeline"] == "RetrievalQA"  # no pipeline name attribute: the chain span's name
    assert lc["sample_requested"] is False and lc["reference"] is None


# --- error ---


def test_error_of_the_request_span():
    assert extract_error(classified(F.ragtrace_shaped(error="boom"))) == "RuntimeError: boom"
    assert extract_error(classified(F.ragtrace_shaped())) is None


def test_error_of_a_failed_child_span():
    specs = F.openinference_langchain()
    specs[1].error = "index offline"
    assert extract_error(classified(specs)) == "RuntimeError: index offline"


# --- timings ---


def test_timings():
    ts = classified(F.ragtrace_shaped())
    times = extract_timings(ts)
    request, retrieval = times["request_duration_seconds"], times["retrieval_duration_seconds"]
    assert request is not None and retrieval is not None
    assert retrieval >= 0.01 and request >= retrieval
    assert times["start_time_unix_nano"] == min(s.start for s in ts.spans)
    assert times["end_time_unix_nano"] == max(s.end for s in ts.spans)


def test_timings_without_retrievers():
    times = extract_timings(classified([Spec("only", None, {}, duration=0.001)]))
    assert times["retrieval_duration_seconds"] is None and times["request_duration_seconds"] is not None


# --- labels ---


def test_labels_metadata_of_the_request_span():
    labels = extract_labels(classified(F.openinference_langchain()))
    assert labels == {"tags": [], "metadata": {"tenant": "acme"}}


def test_labels_tags_are_merged_across_spans_and_conventions():
    specs = F.ragtrace_shaped()
    specs[0].attributes["ragtrace.tags"] = ["beta", "eu"]
    specs[1].attributes["tag.tags"] = json.dumps(["eu", "kb-v2"])
    assert extract_labels(classified(specs))["tags"] == ["beta", "eu", "kb-v2"]


# --- conversation turns ---


def test_turns_from_the_generator_prompt():
    ts = classified(F.openinference_langchain())
    qa = extract_question_answer(ts)
    turns = extract_turns(ts, qa, extract_contexts(ts))
    assert [(t.role, t.content) for t in turns] == [("user", F.QUESTION), ("assistant", F.ANSWER)]


def test_no_turns_without_prompt_messages():
    ts = classified(F.ragtrace_shaped())
    assert extract_turns(ts, extract_question_answer(ts), extract_contexts(ts)) == []


# --- composition ---


def test_summary_reads_no_texts(monkeypatch):
    spans = spans_of(F.openinference_langchain())
    for module, name in [
        (messages, "input_messages"),
        (messages, "output_messages"),
        (documents, "retrieved_documents"),
        (documents, "reranked_documents"),
        (documents, "generator_contexts"),
    ]:
        monkeypatch.setattr(module, name, pytest.fail)
    summary = build_summary("t", spans)
    assert summary.model == "gpt-4o-mini" and summary.pipeline == "RetrievalQA"


def test_summary_and_full_record_agree_on_the_shared_fields():
    spans = spans_of(F.openinference_llamaindex())
    full, summary = build_record("t", spans), build_summary("t", spans)
    for name in ("pipeline", "model", "input_tokens", "output_tokens", "request_duration_seconds", "error"):
        assert getattr(summary, name) == getattr(full, name)
    assert summary.context_scores == full.context_scores


# --- hostile content ---


@pytest.mark.parametrize("depth", [900, 5000])  # just inside the parser's depth, and far past it
@pytest.mark.parametrize(
    ("span", "key"),
    [
        (2, "gen_ai.input.messages"),
        (2, "gen_ai.output.messages"),
        (2, "gen_ai.system_instructions"),
        (1, "gen_ai.retrieval.documents"),
        (0, "output.value"),
        (0, "input.value"),
    ],
)
def test_json_nested_past_the_parsers_depth_is_text_and_the_record_is_built(span: int, key: str, depth: int):
    # an app's message or answer that looks like JSON nested thousands deep raised RecursionError: the trace was
    # dropped as an assembly error, its record and latency lost
    nested = "[" * depth + "]" * depth
    specs = F.ragtrace_shaped()
    specs[span].attributes[key] = nested
    spans = spans_of(specs)
    full, summary = build_record("t", spans), build_summary("t", spans)
    assert summary.model == full.model == "offline-extractive"
    assert len(full.retrieved_contexts) == 3
    assert full.response in (F.ANSWER, nested)  # the answer, or the hostile text kept as text
    assert full.user_input in (F.QUESTION, nested)


IMPLAUSIBLE = [float("inf"), "inf", "1e400", -5, "-1", -1e300, 1e300, 2e9]


@pytest.mark.parametrize("value", IMPLAUSIBLE, ids=repr)
def test_implausible_tokens_and_timings_are_ignored_and_the_record_is_built(value):
    # infinite token counts raised OverflowError and negative ones made the Prometheus counter raise: either lost the
    # whole record (an assembly error); a huge one poisoned the histograms' sums for good
    from prometheus_client import CollectorRegistry

    from ragtrace_collector.telemetry.ingest import IngestMetrics

    specs = F.ragtrace_shaped()
    generator = specs[2].attributes
    generator.update(
        {
            "gen_ai.usage.input_tokens": value,
            "gen_ai.usage.output_tokens": value,
            "gen_ai.response.time_to_first_chunk": value,
            "ragtrace.response.time_per_output_token": value,
        }
    )
    specs[1].attributes["retrieval.documents.0.document.score"] = value
    spans = spans_of(specs)
    full, summary = build_record("t", spans), build_summary("t", spans)
    for facts in (full, summary):
        assert facts.input_tokens is None and facts.output_tokens is None
        assert facts.ttft_seconds is None and facts.tpot_seconds is None
        assert facts.model == "offline-extractive" and facts.request_duration_seconds is not None
    assert all(s is None or math.isfinite(s) for s in summary.context_scores)
    registry = CollectorRegistry()
    IngestMetrics(registry).observe_record(summary)
    sums = [s.value for m in registry.collect() for s in m.samples if s.name.endswith("_sum")]
    assert sums and all(abs(v) < 1e6 for v in sums), sums


def test_plausible_tokens_and_timings_are_kept():
    specs = F.ragtrace_shaped()
    specs[2].attributes.update({"gen_ai.usage.input_tokens": 2_000_000, "gen_ai.usage.output_tokens": 0})
    summary = build_summary("t", spans_of(specs))
    assert (summary.input_tokens, summary.output_tokens, summary.ttft_seconds) == (2_000_000, 0, 0.004)


def test_a_trace_whose_spans_are_decades_apart_has_no_request_duration():
    # each span valid alone (a device whose clock reset to 1970, beside one that did not): the two roots' range made
    # a request of 56 years, which a latency histogram's sum keeps for good
    trace_id, request = F.to_request(F.ragtrace_shaped())
    spans = request.resource_spans[0].scope_spans[0].spans
    generator = next(s for s in spans if s.name == "answer")
    generator.parent_span_id = b""  # a second root
    generator.start_time_unix_nano, generator.end_time_unix_nano = 10**9, 10**9 + 10**6
    summary = build_summary(trace_id, extract_spans(request).traces[trace_id])
    assert summary.request_duration_seconds is None or summary.request_duration_seconds <= 24 * 3600


def test_model_calls_that_sum_past_a_day_have_no_generation_duration():
    import time

    trace_id, request = F.to_request(F.ragtrace_shaped())
    spans = request.resource_spans[0].scope_spans[0].spans
    generator = next(s for s in spans if s.name == "answer")
    now = time.time_ns()
    for i in range(5):  # five calls of 23 hours each, every one valid alone
        call = spans.add()
        call.CopyFrom(generator)
        call.span_id = bytes([9, 9, 9, 9, 9, 9, 9, i])
        call.start_time_unix_nano, call.end_time_unix_nano = now - 23 * 3600 * 10**9, now
    summary = build_summary(trace_id, extract_spans(request).traces[trace_id])
    assert summary.generation_duration_seconds is None or summary.generation_duration_seconds <= 24 * 3600
    assert summary.model == "offline-extractive"


@pytest.mark.parametrize("index", ["²", "1" * 5000, "٣"], ids=["superscript two", "5000 digits", "arabic-indic three"])
def test_a_flattened_list_index_that_is_no_plain_number_is_skipped_and_the_record_is_built(index: str):
    # str.isdigit() is true of "²" and of a 5,000-digit run, and int() refuses both: one such key lost the record
    specs = F.ragtrace_shaped()
    specs[1].attributes[f"retrieval.documents.{index}.document.content"] = "a hostile document"
    specs[1].attributes[f"retrieval.documents.{index}.document.score"] = 0.5
    specs[2].attributes[f"gen_ai.prompt.{index}.content"] = "a hostile prompt"
    spans = spans_of(specs)
    full, summary = build_record("t", spans), build_summary("t", spans)
    assert [c.content for c in full.retrieved_contexts] == [d[1] for d in F.DOCS[:3]]
    assert len(summary.context_scores) == 3 and full.response == F.ANSWER


def test_a_first_token_time_years_after_its_span_is_no_ttft():
    # Langfuse's completion start time is an ISO string the app writes: "9999-12-31" made a TTFT of 251 billion seconds
    specs = F.ragtrace_shaped()
    specs[2].attributes.pop("gen_ai.response.time_to_first_chunk")
    specs[2].attributes["langfuse.observation.completion_start_time"] = "9999-12-31T23:59:59Z"
    summary = build_summary("t", spans_of(specs))
    assert summary.ttft_seconds is None and summary.model == "offline-extractive"


@pytest.mark.parametrize("query", [2.5, 7, ["How long?", "x"], [1, 2]], ids=repr)
def test_a_retrieval_query_that_is_no_string_is_read_as_text(query):
    # found by fuzzing: gen_ai.retrieval.query.text as a double reached the conversation's "question in content" as
    # a float (TypeError): the record was lost
    specs = F.openlit()
    retriever = next(s for s in specs if "gen_ai.retrieval.query.text" in s.attributes or s.name == "chroma.query")
    retriever.attributes["gen_ai.retrieval.query.text"] = query
    spans = spans_of(specs)
    full, summary = build_record("t", spans), build_summary("t", spans)
    assert isinstance(full.user_input, str) and full.user_input
    assert summary.model == full.model

"""Every record builds, whatever the attributes the conventions read hold: a seeded fuzz over every key they name.

Each defect this found lost a whole record (the sweep counts it as an assembly error), so the contract is the
receivers' one: bad input is read as absent or as text, never fatal. Values: non-finite and out-of-range numbers,
JSON nested past the parser's depth, JSON of the wrong shape for the key, dates out of range, superscript digits,
long strings, arrays where strings are expected. The seeds are fixed, so a failure names its case and repeats.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from ragtrace_collector.processor.conventions import build_record, build_summary
from ragtrace_collector.processor.conventions.completeness import missing_fields
from ragtrace_collector.receiver.decode import extract_spans
from tests.support import span_fixtures as F

_ROOT = Path(__file__).parents[4]
_SOURCES = [
    *(_ROOT / "collector/ragtrace_collector/processor/conventions").glob("*.py"),
    _ROOT / "ragtrace/attributes.py",
]
# every string literal of those modules that looks like an attribute key ("gen_ai.usage.input_tokens", ...)
KEYS = sorted({m.group(1) for p in _SOURCES for m in re.finditer(r'"([a-z_]+(?:\.[a-z_0-9]+)+)"', p.read_text())})
_NESTED = "[" * 3000 + "]" * 3000
VALUES: list[object] = [
    float("inf"),
    float("nan"),
    -1,
    2**63 - 1,
    -(2**63),
    1e308,
    "",
    " ",
    "null",
    "[]",
    "{}",
    '"x"',
    _NESTED,
    '{"a": ' * 50 + "1" + "}" * 50,
    "[1,2,3]",
    '[{"role": 5, "content": null}]',
    '[{"role": "user", "parts": 7}]',
    '{"content": [1, {"x": []}]}',
    [1, 2],
    [],
    ["", ""],
    [True],
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00+14:00",
    "-5",
    "1e400",
    "²",
    "x" * 10_000,
    True,
    0.0,
    "NaN",
    '[{"page_content": 5, "metadata": "x"}]',
    '[{"document": {"content": []}}]',
    '{"args": 5, "kwargs": []}',
    '{"outputs": {"outputs": {}}}',
    '[["a", 0.5], ["b"]]',
    '[{"type": "tool_call", "name": 5, "arguments": "{"}]',
    '{"messages": [[]]}',
]
SHAPES = [F.ragtrace_shaped, F.openllmetry, F.openlit, F.openinference_langchain, F.openinference_llamaindex]


def _any_value(value: object) -> AnyValue:
    """``value`` as the OTel SDK would encode it (strings, bools, ints in int64, doubles, arrays of those)."""
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    assert isinstance(value, list)
    return AnyValue(array_value=ArrayValue(values=[_any_value(v) for v in value]))


@pytest.fixture(scope="module")
def requests() -> list[tuple[str, ExportTraceServiceRequest]]:
    """Each shape's spans once (emitting them sleeps to keep their durations ordered)."""
    return [F.to_request(shape()) for shape in SHAPES]


def test_the_fuzz_reads_the_keys_the_conventions_name():
    assert len(KEYS) > 80 and "gen_ai.retrieval.query.text" in KEYS and "llm.input_messages" in KEYS


# one of each kind of wrong value, for the sweep of every key
KINDS = [float("inf"), -1, 2.5, [1, 2], [], _NESTED, "²", "1e400", '{"content": [1, {"x": []}]}', '[{"role": 5}]', ""]


def _set(span, key: str, value: object) -> None:
    kept = [kv for kv in span.attributes if kv.key != key]
    del span.attributes[:]
    span.attributes.extend([*kept, KeyValue(key=key, value=_any_value(value))])


def _builds(trace_id: str, request: ExportTraceServiceRequest) -> None:
    read = extract_spans(request).traces[trace_id]
    build_summary(trace_id, read)
    record = build_record(trace_id, read)
    missing_fields(record, read)
    json.dumps(record.model_dump(mode="json"), allow_nan=False)  # what the stores and APIs write


@pytest.mark.parametrize("shape", range(len(SHAPES)), ids=[s.__name__ for s in SHAPES])
def test_every_key_with_every_kind_of_wrong_value_on_every_span(shape: int, requests):
    # a double as gen_ai.retrieval.query.text reached the conversation as a float question and lost the record
    trace_id, base = requests[shape]
    for key in KEYS:
        for value in KINDS:
            request = ExportTraceServiceRequest()
            request.CopyFrom(base)
            for span in request.resource_spans[0].scope_spans[0].spans:
                _set(span, key, value)
            try:
                _builds(trace_id, request)
            except Exception as exc:  # the failure is the finding: name the case
                pytest.fail(f"{key} = {value!r:.40} on every span: {type(exc).__name__}: {exc!s:.200}")


@pytest.mark.parametrize("seed", range(4))
def test_every_record_builds_whatever_several_attributes_hold(seed: int, requests):
    rng = random.Random(seed)
    for trial in range(150):
        trace_id, base = requests[trial % len(requests)]
        request = ExportTraceServiceRequest()
        request.CopyFrom(base)
        spans = request.resource_spans[0].scope_spans[0].spans
        changes = []
        for _ in range(rng.randint(1, 6)):
            span, key, value = rng.choice(spans), rng.choice(KEYS), rng.choice(VALUES)
            _set(span, key, value)
            changes.append((span.name, key, repr(value)[:40]))
        try:
            _builds(trace_id, request)
        except Exception as exc:  # the failure is the finding: name the case
            pytest.fail(f"seed {seed} trial {trial}: {type(exc).__name__}: {exc!s:.200} after {changes}")

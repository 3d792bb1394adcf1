"""Ids the collector derives are never taken from span content (issue 33, D4).

A traced request chose the span its scores annotate: OpenInference ``metadata`` holding ``root_span_id`` won over
the assembler's, so Phoenix annotations and OTLP evaluation events landed on a span (or trace) of the sender's
choosing. Sent over real OTLP/HTTP to a served receiver, the record must name the real root span and assembly
reason, whatever the spans' metadata says.
"""

from __future__ import annotations

import json

import aiohttp

from tests.support import span_fixtures as F
from tests.support.receiver_stack import ServedStack

FORGED = {"root_span_id": "00000000000000aa", "ragtrace.assembly": "root", "customer": "acme"}


async def test_span_metadata_cannot_choose_the_annotated_span() -> None:
    specs = F.ragtrace_shaped()
    specs[0].attributes["metadata"] = json.dumps(FORGED)  # OpenInference's metadata, read into record.metadata
    _, spans = F.finished_spans(specs)
    root = next(s for s in spans if s.parent is None)
    request = F.encode_spans(spans)
    stack = await ServedStack().start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                stack.url, data=request.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
            ) as reply,
        ):
            assert reply.status == 200
        records = stack.records()
    finally:
        await stack.stop()
    assert len(records) == 1
    metadata = records[0].metadata
    assert metadata["customer"] == "acme"  # the sender's own metadata is kept
    assert root.context is not None
    assert metadata["root_span_id"] == format(root.context.span_id, "016x")
    assert metadata.get("ragtrace.assembly") == "shutdown"  # the assembler's reason (collected at once), not "root"

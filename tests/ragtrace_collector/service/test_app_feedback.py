"""CollectorApp's feedback wiring: the journal replay goes through the same sink as the receivers (re-sent feedback
stored once), and the label store is the results store's file, closed on stop."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from ragtrace_collector.config import load_config
from ragtrace_collector.internal.journal import PROTOBUF, Journal
from ragtrace_collector.review.labels import LabelStore
from ragtrace_collector.service.app import CollectorApp
from tests.support.feedback import feedback_request


def make_config(tmp_path):
    listen = {"http_port": 0, "grpc_port": 0, "metrics_port": 0}
    return load_config(overrides={"role": "receiver", "data_dir": str(tmp_path), "listen": listen}, environ={})


async def test_replayed_feedback_is_stored_once_and_the_store_closes_on_stop(tmp_path):
    config = make_config(tmp_path)
    trace_id = uuid.uuid4().hex
    body = feedback_request({"trace_id": trace_id, "value": 0.5, "name": "thumbs"}).SerializeToString()
    journal = Journal(config.journal_path)
    await journal.append(PROTOBUF, body)  # acknowledged, then the process died; an exporter's retry journaled too
    await journal.append(PROTOBUF, body)
    journal.shutdown()

    app = CollectorApp(config)
    await app.start()
    try:
        assert app.labels is not None and app.feedback is not None
        assert [(f.value, f.name) for f in app.labels.feedback_of(trace_id)] == [(0.5, "thumbs")]
        labels = {"service": "fb-app", "pipeline": "unknown", "name": "thumbs", "value": "0.5"}
        assert app.registry.get_sample_value("ragtrace_feedback_total", labels) == 1
        assert app.assembler.state.inflight() == (0, 0)
    finally:
        await app.stop(drain_timeout=1)
    with pytest.raises(sqlite3.ProgrammingError):  # closed by stop
        app.labels.feedback_of(trace_id)
    store = LabelStore(config.results_path)  # the results store's file holds it
    try:
        assert len(store.feedback_of(trace_id)) == 1
    finally:
        store.close()

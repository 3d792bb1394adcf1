"""An LLM judge with no API key (issue 34, the first hour): said once, with what to set; records wait, and the
explorer says so.

``RAGTRACE_JUDGE=openai/gpt-4o-mini`` with no key used to be retried as a server error for ever, ~240 LiteLLM lines
in 20 s burying the one useful warning. Now ``serve`` says at start which variable to set, a record's scoring says
"has no API key" once per outage (not retried as a server error), and LiteLLM's per-call INFO lines are quiet.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from tests.support.collector_process import collector_config, serve, until
from tests.support.soak import trace_request


def test_no_key_is_said_once_and_records_wait(tmp_path: Path, monkeypatch) -> None:
    for name in [n for n in os.environ if n.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    config = collector_config(tmp_path, judge={"model": "openai/gpt-4o-mini"}, scoring={"metrics": ["faithfulness"]})
    with serve(tmp_path, config) as served:
        until(lambda: served.readyz(served.metrics) == 200, 120, "the collector to be ready", served)
        for _ in range(3):
            assert served.post(trace_request()[1]).status_code == 200
        until(lambda: "has no API key" in served.output().split("collector up", 1)[-1], 60, "the outage", served)
        depth = httpx.get(served.metrics + "/metrics", timeout=30).text

        def records() -> dict:
            return httpx.get(served.metrics + "/api/v1/records", timeout=30).json()

        until(lambda: records()["waiting"] == 3, 60, "the three records to be queued", served)
        listed = records()
        page = httpx.get(served.metrics + "/explorer/", timeout=30).text
        log = served.output()
    # the explorer says why its list is empty: records wait, the judge has no key
    assert listed["total"] == 0 and listed["waiting"] == 3, listed
    assert "no API key" in listed["judge_unavailable"]
    assert "3 records received and waiting to be scored" in page and "the judge is unavailable" in page
    start = log.split("collector up", 1)[0]
    assert "judge openai/gpt-4o-mini has no API key: set OPENAI_API_KEY or judge.api_key" in start
    assert "LiteLLM completion()" not in log and "failed after" not in log, log[-3000:]  # not retried, not chatty
    assert log.count("judge unavailable (credentials)") == 1, log[-3000:]
    assert "ragtrace_queue_depth" in depth

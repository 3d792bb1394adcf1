"""Configured secrets never leave in an error text (issue 33, D10).

A proxy in front of the judge that echoes the request's API key in its error bodies put the key in the log,
the results store and the explorer's API. Here ``ragtrace-collector evaluate`` (a real process) talks over real
HTTP to such a judge, and neither its output file nor its log may hold the key: the errors still say what
went wrong, with the key masked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ragtrace_collector.config import CollectorConfig
from ragtrace_collector.internal.secrets import MASK, Scrubber, config_secrets, install_log_scrubber
from tests.support.scripted_openai import Reply, ScriptedOpenAI

KEY = "sk-proj-0123456789abcdefECHOED"
ROW = {"id": "r1", "user_input": "What is item 0?", "response": "Item 0 is blue.", "retrieved_contexts": ["x."]}


def test_a_judge_echoing_the_key_leaves_it_nowhere(tmp_path: Path) -> None:
    data, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    echo = Reply(status=422, error_message=f"invalid request; you sent Authorization: Bearer {KEY}")
    with ScriptedOpenAI(responder=lambda body: echo) as server:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
        environ.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "RAGTRACE_JUDGE__API_KEY": KEY})
        done = subprocess.run(
            [sys.executable, "-m", "ragtrace_collector.cli", "evaluate", str(data), "--out", str(out),
             "--judge", "openai/echo", "--judge-base-url", server.base_url, "--metrics", "faithfulness",
             "--max-retries", "0", "--no-progress"],
            capture_output=True, text=True, env=environ, timeout=120,
        )  # fmt: skip
        assert any(r.authorization == f"Bearer {KEY}" for r in server.requests)  # the key was sent, and echoed
    written = out.read_text()
    assert KEY not in written and KEY not in done.stdout and KEY not in done.stderr
    assert MASK in written, written  # the error is kept, the key masked in it


def test_scrubber_masks_every_configured_secret_in_logs_and_values() -> None:
    config = CollectorConfig(
        judge={"api_key": "judge-key-123456"},
        auth={"bearer_token": "bearer-token-0123456789", "read_tokens": ["read-token-0123456789"]},
        queue={"url": "redis://:redis-pass-123@redis:6379/0"},
        forward={"endpoint": "http://tempo:4318", "headers": {"x-api-key": "forward-key-123"}},
    )
    scrubber = Scrubber(config_secrets(config, {"OPENAI_API_KEY": "sk-env-0123456", "HOME": "/root"}))
    text = (
        "judge-key-123456 bearer-token-0123456789 read-token-0123456789 redis-pass-123 forward-key-123 sk-env-0123456"
    )
    assert scrubber.scrub(text) == " ".join([MASK] * 6)
    assert scrubber.scrub("/root stays") == "/root stays"  # only credentials by name come from the environment
    assert scrubber.scrub_value({"a": ["x judge-key-123456"], "n": 1}) == {"a": [f"x {MASK}"], "n": 1}


def test_log_records_are_scrubbed_as_they_are_made(caplog) -> None:
    import logging

    before = logging.getLogRecordFactory()
    try:
        install_log_scrubber(Scrubber(["secret-value-42"]))
        install_log_scrubber(Scrubber(["secret-value-42"]))  # installing twice does not stack
        log = logging.getLogger("some.library")
        with caplog.at_level(logging.INFO):
            log.info("reply was %s", "token secret-value-42 rejected")
            try:
                raise RuntimeError("secret-value-42 in a traceback")
            except RuntimeError:
                log.exception("failed")
        assert "secret-value-42" not in caplog.text and MASK in caplog.text
    finally:
        logging.setLogRecordFactory(before)

"""A judge API key never on the command line (issue 33, D19): ``evaluate --judge-api-key KEY`` showed the key to
every user of the machine in ``ps`` (and kept it in shell history). The flag is refused before anything runs,
saying what to use; the key comes from the environment or ``--judge-api-key-file``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.scripted_openai import ScriptedOpenAI

ROW = {"id": "r1", "user_input": "What is item 0?", "response": "Item 0 is blue.", "retrieved_contexts": ["x."]}


def _evaluate(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
    environ.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})})
    cmd = [sys.executable, "-m", "ragtrace_collector.cli", "evaluate", str(data), "--no-progress", *args]
    cmd += ["--out", str(tmp_path / "out.jsonl"), "--metrics", "faithfulness", "--max-retries", "0"]
    return subprocess.run(cmd, capture_output=True, text=True, env=environ, timeout=120)


def test_key_flag_refused_before_anything_runs(tmp_path: Path) -> None:
    done = _evaluate(tmp_path, "--judge", "openai/x", "--judge-api-key", "sk-visible-in-ps")
    assert done.returncode == 2
    assert "RAGTRACE_JUDGE__API_KEY" in done.stderr and "--judge-api-key-file" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out.jsonl").exists()


def test_key_from_a_file_or_the_environment_reaches_the_judge(tmp_path: Path) -> None:
    key = tmp_path / "judge.key"
    key.write_text("sk-from-a-file\n")
    with ScriptedOpenAI() as server:
        base = ["--judge", "openai/scripted", "--judge-base-url", server.base_url]
        (tmp_path / "file").mkdir()
        (tmp_path / "env").mkdir()
        from_file = _evaluate(tmp_path / "file", *base, "--judge-api-key-file", str(key))
        from_env = _evaluate(tmp_path / "env", *base, env={"RAGTRACE_JUDGE__API_KEY": "sk-from-the-env"})
        seen = [r.authorization for r in server.requests]
    assert from_file.returncode in (0, 1) and from_env.returncode in (0, 1), from_file.stderr + from_env.stderr
    assert "Bearer sk-from-a-file" in seen and "Bearer sk-from-the-env" in seen, seen


def test_empty_key_file_is_a_clear_error(tmp_path: Path) -> None:
    key = tmp_path / "judge.key"
    key.write_text("\n")
    done = _evaluate(tmp_path, "--judge", "openai/x", "--judge-api-key-file", str(key))
    assert done.returncode == 2 and "judge API key file is empty" in done.stderr, done.stderr

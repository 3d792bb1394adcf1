"""The README's ``evaluate`` examples run as written on a fresh clone: the sample data set ships in the repository
(no ``../shared``), the embedded judge scores it, and the CI-gate example fails the way the README says it does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

SAMPLE = "collector/ragtrace_collector/examples/evaluate/sample.jsonl"


def readme_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("## Scoring offline: `ragtrace-collector evaluate`")
    return text[start : text.index("\n## ", start + 1)]


def readme_commands() -> list[tuple[str, int]]:
    """The section's commands that use the shipped sample, continuation lines joined, with the exit status each
    one's ``# exits N`` comment promises (0 without one)."""
    block = re.search(r"```bash\n(.*?)```", readme_section(), re.S)
    assert block, "no bash block in the evaluate section"
    commands = re.sub(r"\\\n\s*", "", block.group(1)).splitlines()
    found = []
    for line in commands:
        if SAMPLE in line:
            expected = re.search(r"#\s*exits (\d+)", line)
            found.append((line, int(expected.group(1)) if expected else 0))
    return found


def run_as_written(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The line through bash, from a directory where only the clone's files are (the output lands there)."""
    (cwd / "collector").symlink_to(REPO / "collector", target_is_directory=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAGTRACE_CONFIG", None)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_sample_is_a_dozen_ragas_rows_some_with_invented_facts():
    rows = [json.loads(line) for line in (REPO / SAMPLE).read_text(encoding="utf-8").splitlines()]
    assert 10 <= len(rows) <= 20
    for row in rows:
        assert {"id", "user_input", "retrieved_contexts", "response", "reference", "faithful"} <= set(row), row
    labels = [row["faithful"] for row in rows]
    assert labels.count(True) >= 5 and labels.count(False) >= 4


def test_the_readme_evaluate_commands_run_as_written(tmp_path):
    commands = readme_commands()
    assert len(commands) == 2, commands
    (score_cmd, score_rc), (gate_cmd, gate_rc) = commands
    assert "--judge local" in score_cmd and "--fail-under" in gate_cmd and "--fail-over" in gate_cmd

    first = tmp_path / "first"
    first.mkdir()
    done = run_as_written(score_cmd, first)
    assert done.returncode == score_rc == 0, done.stdout + done.stderr
    out = re.search(r"--out (\S+)", score_cmd)
    assert out
    entries = [json.loads(line) for line in (first / out.group(1)).read_text().splitlines()]
    labels = {json.loads(line)["id"]: json.loads(line)["faithful"] for line in (REPO / SAMPLE).read_text().splitlines()}
    assert {e["id"] for e in entries} == set(labels)
    faith = {e["id"]: e["scores"]["faithfulness"] for e in entries}
    assert all(score is not None for score in faith.values()), faith
    # the embedded judge tells the faithful rows from the ones with invented facts
    assert min(faith[i] for i, ok in labels.items() if ok) > max(faith[i] for i, ok in labels.items() if not ok)
    assert "ragtrace evaluate: summary" in done.stdout

    second = tmp_path / "second"
    second.mkdir()
    gated = run_as_written(gate_cmd, second)
    assert gated.returncode == gate_rc == 1, gated.stdout + gated.stderr
    failed = [line for line in gated.stderr.splitlines() if line.startswith("gate failed:")]
    quoted = re.search(r"exits 1:\n\n```\n(.*?)```", readme_section(), re.S)
    assert quoted, "the README no longer quotes the gate's output"
    assert failed == quoted.group(1).splitlines(), gated.stderr

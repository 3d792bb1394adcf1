"""Hostile strings from traced traffic must not reach the operator's terminal raw.

An end user controls the question (and an app may put anything in a pipeline name): OSC/CSI escapes
could retitle or clear the operator's terminal, a newline could forge a whole result row. Every
human-facing output of ``ragtrace-collector results`` shows such characters as visible escapes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.paths import REPO

RETITLE = "\x1b]0;pwned\x07"  # OSC: set the terminal title
CLEAR = "\x1b[2J\x1b[H"  # CSI: clear the screen, cursor home
C1_CSI = "\x9b31m"  # the 8-bit CSI some terminals honour
BIDI = "\u202e"  # right-to-left override: text that reads differently than it is
FORGED = "qa\n0.999  faithfulness  trace_id=" + "f" * 32 + "  pipeline=qa"


def _hostile_store(path: Path) -> None:
    store = ResultsStore(path)
    record = RagRecord(
        trace_id=f"{1:032x}",
        pipeline=FORGED,
        user_input=f"what is up? {RETITLE}{CLEAR}",
        response=f"fine {C1_CSI}{BIDI}",
    )
    details = {"unsupported": [f"claim {CLEAR}\nunsupported: forged claim"]}
    store.add(record, [MetricResult("faithfulness", "scored", 0.1, details=details)], "local\x1b[31m")
    store.close()


def _cli(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ragtrace_collector.cli", "results", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _raw_controls(text: str, allowed: str = "\n") -> list[str]:
    return [c for c in text if c not in allowed and unicodedata.category(c) in ("Cc", "Cf")]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    _hostile_store(path)
    return path


def test_table_shows_escapes_not_control_characters(store: Path) -> None:
    out = _cli("--metric", "faithfulness", "--store", str(store))
    assert _raw_controls(out) == [], repr(out)
    rows = [line for line in out.splitlines() if re.match(r"^\d\.\d{3}  ", line)]
    assert len(rows) == 1, out  # the pipeline's newline did not forge a second row
    assert sum(line.startswith("    unsupported:") for line in out.splitlines()) == 1, out  # nor did the claim's
    assert "\\x1b]0;pwned\\x07" in out and "\\n" in out  # visible, so the operator sees the attempt


def test_summary_and_json_hold_no_raw_control_characters(store: Path) -> None:
    summary = _cli("--summary", "--store", str(store))
    assert _raw_controls(summary) == [], repr(summary)
    lines = _cli("--metric", "faithfulness", "--json", "--store", str(store)).splitlines()
    assert len(lines) == 1 and _raw_controls(lines[0], allowed="") == [], repr(lines)
    row = json.loads(lines[0])  # still valid JSON carrying the exact stored strings
    assert row["pipeline"] == FORGED and RETITLE in row["user_input"] and BIDI in row["response"]

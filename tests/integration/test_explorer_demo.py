"""``ragtrace-collector demo`` prints the records explorer's URL first, and the explorer there shows the
demo's scored records while it runs."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.integration

URL_LINE = re.compile(r"^([\w /]+): (http://\S+)")


def test_the_demo_prints_the_explorer_first_and_serves_it(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragtrace_collector.cli", "demo", "--no-prometheus", "--duration", "60"]
        + ["--rate", "4", "--data-dir", str(tmp_path / "demo")],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    lines: list[str] = []
    urls: list[tuple[str, str]] = []
    body: dict = {}
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not body.get("total"):
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line.rstrip())
                match = URL_LINE.match(line)
                if match:
                    urls.append((match.group(1), match.group(2)))
            if urls and urls[0][0] == "records explorer":
                api = urls[0][1].replace("/explorer/", "/api/v1/records")
                try:
                    body = httpx.get(api, timeout=5).json()
                except httpx.HTTPError:
                    pass
        out = "\n".join(lines)
        assert urls and urls[0][0] == "records explorer", out
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/explorer/", urls[0][1]), out
        assert body.get("total", 0) > 0, out
        record = body["records"][0]
        assert record["service"] == "rag-demo" and record["scores"], record
        page = httpx.get(urls[0][1], timeout=5)
        assert page.status_code == 200 and "Scored records" in page.text and record["trace_id"] in page.text
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    # after the demo: its records and its summary stay where it said, for the explorer to show again
    tail = proc.stdout.read() if proc.stdout is not None else ""
    data = tmp_path / "demo"
    assert f"data kept in {data}" in tail and (data / "collector" / "results.sqlite").is_file(), tail
    assert (data / "summary.txt").read_text().startswith("summary: "), tail

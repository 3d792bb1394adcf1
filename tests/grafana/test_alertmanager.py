"""deploy/alertmanager.yml in a real Alertmanager: one incident is one page.

The alerts a faithfulness collapse raises (see grafana/prometheus/tests/quality_alerts.test.yml) are
posted as Prometheus would; the ones the page already explains must come back suppressed, the rest active.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from tests.support.binaries import require
from tests.support.net import free_port, wait_for_port

pytestmark = pytest.mark.integration
T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "alertmanager.yml"


def _alert(name: str, severity: str, **labels: str) -> dict:
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": name},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=10)).isoformat(),
    }


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    binary = require("prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")
    work = tmp_path_factory.mktemp("alertmanager")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={CONFIG}",
            f"--storage.path={work}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _post(url: str, alerts: list[dict]) -> None:
    req = urllib.request.Request(
        url + "/api/v2/alerts", json.dumps(alerts).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    urllib.request.urlopen(req, timeout=5).close()


def _states(url: str) -> dict[tuple[str, str, str, str], str]:
    with urllib.request.urlopen(url + "/api/v2/alerts", timeout=5) as resp:
        alerts = json.loads(resp.read())
    return {
        tuple(a["labels"].get(k, "") for k in ("alertname", "metric", "service", "pipeline")): a["status"]["state"]
        for a in alerts
    }


def _settled(read: Callable[[], T], expected: T, timeout: float = 20) -> T:
    """What ``read`` returns once it equals ``expected``, or its last answer after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def test_one_incident_one_page(alertmanager):
    support = {"service": "shop", "pipeline": "support", "judge": "local"}
    _post(
        alertmanager,
        [
            _alert("RagFaithfulnessLow", "page", metric="faithfulness", **support),
            _alert("RagFaithfulnessDropped", "page", metric="faithfulness", **support),
            _alert("RagQualityLow", "warning", metric="hallucination", **support),
            # another pipeline, and another metric of the same pipeline: not explained by the page
            _alert("RagFaithfulnessDropped", "page", metric="faithfulness", pipeline="docs-qa", judge="local"),
            # the same pipeline served by another service: its own incident
            _alert("RagFaithfulnessDropped", "page", metric="faithfulness", **{**support, "service": "docs"}),
            _alert("RagQualityLow", "warning", metric="hallucination", **{**support, "service": "docs"}),
            _alert("RagQualityLow", "warning", metric="context_precision", **support),
            _alert("RagQualityDropped", "warning", metric="context_precision", **support),
        ],
    )
    expected = {
        ("RagFaithfulnessLow", "faithfulness", "shop", "support"): "active",
        ("RagFaithfulnessDropped", "faithfulness", "shop", "support"): "suppressed",
        ("RagQualityLow", "hallucination", "shop", "support"): "suppressed",
        ("RagFaithfulnessDropped", "faithfulness", "", "docs-qa"): "active",
        ("RagFaithfulnessDropped", "faithfulness", "docs", "support"): "active",
        ("RagQualityLow", "hallucination", "docs", "support"): "suppressed",  # by docs' own faithfulness page
        ("RagQualityLow", "context_precision", "shop", "support"): "active",
        ("RagQualityDropped", "context_precision", "shop", "support"): "suppressed",
    }
    # the inhibitor learns of new source alerts asynchronously
    assert _settled(lambda: _states(alertmanager), expected) == expected


def _groups(url: str) -> dict[tuple[str, str], list[str]]:
    """Alertmanager's notification groups: (service, pipeline) of the group's labels -> its alert names."""
    with urllib.request.urlopen(url + "/api/v2/alerts/groups", timeout=5) as resp:
        groups = json.loads(resp.read())
    return {
        (g["labels"].get("service", ""), g["labels"].get("pipeline", "")): sorted(
            a["labels"]["alertname"] for a in g["alerts"]
        )
        for g in groups
        if g["labels"].get("pipeline", "").startswith("billing")
    }


def test_pages_group_per_service_and_pipeline(alertmanager):
    """One notification group (one PagerDuty incident) per service and pipeline for the pages; two services
    sharing a pipeline are two incidents, as the inhibit rules treat them."""
    page = yaml.safe_load(CONFIG.read_text())["route"]["routes"][0]
    assert page["matchers"] == ['severity="page"'] and page["group_by"] == ["service", "pipeline"]
    billing = {"pipeline": "billing", "judge": "local", "metric": "faithfulness"}
    _post(
        alertmanager,
        [
            _alert("RagFaithfulnessLow", "page", service="web", **billing),
            _alert("RagFaithfulnessDropped", "page", service="web", **billing),
            _alert("RagFaithfulnessDropped", "page", service="batch", **billing),
            _alert("RagFaithfulnessLow", "page", service="web", **{**billing, "pipeline": "billing-v2"}),
        ],
    )
    expected = {
        ("web", "billing"): ["RagFaithfulnessDropped", "RagFaithfulnessLow"],
        ("batch", "billing"): ["RagFaithfulnessDropped"],
        ("web", "billing-v2"): ["RagFaithfulnessLow"],
    }
    assert _settled(lambda: _groups(alertmanager), expected) == expected
    amtool = require("amtool", "prometheus-alertmanager")
    for name in ("RagFaithfulnessLow", "RagFaithfulnessDropped"):
        argv = [amtool, "config", "routes", "test", f"--config.file={CONFIG}", "--verify.receivers=default"]
        out = subprocess.run(
            [*argv, f"alertname={name}", "severity=page", "service=web", "pipeline=support"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stdout + out.stderr

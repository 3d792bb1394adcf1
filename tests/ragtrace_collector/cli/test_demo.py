"""``ragtrace-collector demo``'s output, without starting anything: it says nothing about alerts when no
Prometheus runs, its closing summary reports what the run showed, and its console survives a closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys

from rich.console import Console

from ragtrace_collector.cli.demo import AlertWatch, Traffic, closing_summary, render, status_line


def traffic_with_scores(degrade_after: float | None = 30.0) -> Traffic:
    traffic = Traffic(rate=2.0, degrade_after=degrade_after)
    traffic.sent, traffic.failed = 120, 1
    for score in (1.0, 1.0, 0.9):
        traffic.add_faithfulness(False, score)
    for score in (0.5, 0.4):
        traffic.add_faithfulness(True, score)
    return traffic


def test_without_prometheus_the_demo_says_so_instead_of_none_firing():
    traffic = traffic_with_scores()
    assert status_line(traffic, 5, None, 12.0).endswith("alerts=(Prometheus not running)")
    assert status_line(traffic, 5, [], 12.0).endswith("alerts=none")
    assert status_line(traffic, 5, ["RagFaithfulnessLow(firing)"], 12.0).endswith("alerts=RagFaithfulnessLow(firing)")

    def shown(alerts: list[str] | None) -> str:
        console = Console(record=True, width=200, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render(traffic, 5, {"/metrics": "http://127.0.0.1:9464/metrics"}, alerts, 12.0, None))
        return console.export_text()

    view = shown(None)
    assert "alerts: Prometheus not running" in view and "none firing" not in view
    assert "alerts: none firing" in shown([])


def test_closing_summary_reports_sent_scored_phase_means_and_alert_times():
    traffic = traffic_with_scores(degrade_after=30.0)
    watch = AlertWatch()
    pending = {"labels": {"alertname": "RagFaithfulnessLow", "severity": "page"}, "state": "pending"}
    watch.update([pending], 50.0)
    assert watch.first_firing == {} and watch.current == ["RagFaithfulnessLow(pending)"]
    dropped = {"labels": {"alertname": "RagFaithfulnessDropped", "severity": "page"}, "state": "firing"}
    watch.update([{**pending, "state": "firing"}, dropped], 71.0)
    watch.update([{**pending, "state": "firing"}, dropped], 90.0)  # still firing: the first time is kept
    lines = closing_summary(traffic, 110, 95.4, watch)
    assert lines == [
        "summary: 120 requests sent (1 failed), 110 records scored in 95 s",
        "mean faithfulness: healthy 0.97 (n=3), degraded 0.45 (n=2); faults on at 30 s",
        "alerts fired: RagFaithfulnessDropped (page) at 71 s, 41 s after faults on; "
        "RagFaithfulnessLow (page) at 71 s, 41 s after faults on",
    ]
    assert closing_summary(traffic, 110, 95.4, None)[-1] == "alerts: Prometheus not running"
    assert closing_summary(traffic, 110, 95.4, AlertWatch())[-1] == "alerts: none fired"

    healthy_only = Traffic(rate=2.0)
    healthy_only.add_faithfulness(False, 1.0)
    assert closing_summary(healthy_only, 1, 10.0, None)[1] == (
        "mean faithfulness: healthy 1.00 (n=1); faults never switched on"
    )


def test_the_console_goes_quiet_when_the_pipe_it_writes_to_is_closed():
    """rich's default answer to a broken pipe is SystemExit(1) from inside print(), which cut the demo's cleanup
    short; the demo's console stops writing instead, and the code after the print still runs."""
    code = (
        "import sys\n"
        "from ragtrace_collector.cli.demo import make_console\n"
        "console = make_console()\n"
        "for i in range(2000):\n"
        "    console.print('x' * 200)\n"
        "sys.stderr.write(f'survived lost={console.output_lost}\\n')\n"
    )
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: the first write gets EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith("survived lost=True"), proc.stderr

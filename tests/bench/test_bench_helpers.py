"""Smoke tests of the bench helpers `make bench` leans on: the summary table every bench writes to, and the bodies
(fresh ids every POST, or Phoenix drops repeated span ids and the comparison measures nothing) and the process-tree
CPU clock of bench/collector_ingest.py. No servers: the benches themselves are run by `make bench`."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the benches import each other by bare name, as when run as scripts
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spans_of(body: bytes) -> list:
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    return [span for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans]


def test_summary_table_puts_each_figure_beside_its_anchor(tmp_path: Path, capsys) -> None:
    summary = load("summary")
    out = tmp_path / "bench.jsonl"
    summary.emit(out, "collector_ingest", "spans per CPU-s", 20_000.0, "spans/CPU-s", "upb decode", 1_000_000.0)
    summary.emit(out, "judge_cost", "judge calls per record", 3.0, "calls", "Ragas (not measured)", None)
    summary.emit(None, "nowhere", "not written", 1.0, "x")  # no --json-out: nothing happens
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["ratio"] for r in rows] == [0.02, None]
    assert summary.main([str(out)]) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("collector_ingest"))
    assert "20,000 spans/CPU-s" in line and "upb decode" in line and "0.02x" in line
    failed = tmp_path / "failed"
    failed.write_text("bench/local_judge.py\n")
    assert summary.main([str(out), "--failed", str(failed)]) == 1
    assert "FAILED: bench/local_judge.py" in capsys.readouterr().out


def test_bodies_get_fresh_trace_and_span_ids_each_time() -> None:
    ingest = load("collector_ingest")
    for source in ("template", "sdk"):
        factory = ingest.BodyFactory(source)
        first, second = spans_of(factory.body()), spans_of(factory.body())
        assert len(first) == len(second) == factory.spans == 3 * factory.traces
        assert not {s.trace_id for s in first} & {s.trace_id for s in second}
        assert not {s.span_id for s in first} & {s.span_id for s in second}
        for spans in (first, second):  # the tree survives the patching: every parent is in the body
            ids = {s.span_id for s in spans}
            assert all(s.parent_span_id in ids for s in spans if s.parent_span_id)
            assert sum(1 for s in spans if not s.parent_span_id) == factory.traces


def test_rootless_bodies_hold_traces_open() -> None:
    ingest = load("collector_ingest")
    factory = ingest.BodyFactory("template", drop_roots=True)
    spans = spans_of(factory.body())
    assert len(spans) == 2 * factory.traces and all(s.parent_span_id for s in spans)
    assert {s.parent_span_id for s in spans}.isdisjoint({s.span_id for s in spans})


def test_tree_cpu_counts_children() -> None:
    ingest = load("collector_ingest")
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"]
    )
    try:
        deadline = time.monotonic() + 20
        while ingest.tree_cpu_seconds(parent.pid) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ingest.tree_pids(parent.pid)) == 2
        assert ingest.tree_cpu_seconds(parent.pid) >= 0.3 > ingest.proc_cpu_seconds(parent.pid)
    finally:
        for pid in reversed(ingest.tree_pids(parent.pid)):
            os.kill(pid, 9)
        parent.wait()

"""The explorer under a crowd of list requests (issue 33, D5 and D14), against a real ``ragtrace-collector serve``.

* D5: lists loaded whole records (contexts and all) on the thread pool ``/metrics`` and scoring share: six clients
  on a 274 MB store took the collector from 592 to 2,832 MiB and ``/metrics`` to 18 s. Now a list reads only what
  it shows, bounded per response and per client, on the explorer's own threads: memory stays flat, ``/metrics``
  answers, and a client past its share is told to retry.
* D14: 50,000 distinct service names made every list page 13.7 MB: the filters now offer the most frequent values
  (and a search through ``/api/v1/facets``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragtrace_collector.model.record import RagRecord
from ragtrace_collector.model.result import MetricResult
from ragtrace_collector.scoring.results_store import FACET_LIMIT, LIST_TEXT_CHARS, ResultsStore
from tests.support.explorer_stack import Fed, served_collector

RECORDS = 400
CONTEXT_CHARS = 100_000  # each record holds 5 contexts of this size: ~200 MB of record text in all
SERVICES = 5_000
MIB = 1024 * 1024


def _fill(store_path: Path) -> None:
    store = ResultsStore(store_path)
    filler = "The kettle holds 1.7 litres and has an automatic shut-off. " * (CONTEXT_CHARS // 60)
    metrics = ("faithfulness", "answer_relevancy")
    total = max(RECORDS, SERVICES)
    for i in range(total):
        big = i >= total - RECORDS  # the newest: what a list shows first
        record = RagRecord(
            trace_id=f"{i:032x}",
            service=f"svc-{i:05d}",
            pipeline="qa",
            user_input=f"question {i} " + ("q" * 3000 if big else ""),
            response=f"answer {i} " + ("a" * 3000 if big else ""),
            retrieved_contexts=[filler] * 5 if big else ["short"],
        )
        details = {"claims": [{"statement": filler[:2000], "verdict": "yes"}] * 20} if big else {}
        store.add(record, [MetricResult(m, "scored", 0.5, details=details) for m in metrics], "local")
    store.close()


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (``VmRSS``) or at its peak so far (``VmHWM``), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fed]:
    workdir = tmp_path_factory.mktemp("load")
    (workdir / "data").mkdir()
    _fill(workdir / "data" / "results.sqlite")
    with served_collector(workdir, token=None) as fed:
        yield fed


def _collector_pid(fed: Fed) -> int:
    port = fed.base.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"ragtrace_collector.cli serve" in cmdline and str(fed.log.parent).encode() in cmdline:
                return int(proc.name)
    raise AssertionError(f"no collector process for port {port}")


def test_lists_under_a_crowd_keep_memory_flat_and_metrics_answering(fed: Fed) -> None:
    pid = _collector_pid(fed)
    before = _rss_mib(pid)
    stop = time.monotonic() + 15
    statuses: list[int] = []
    sizes: list[int] = []

    def crowd() -> None:
        with httpx.Client(base_url=fed.base, timeout=60) as c:
            while time.monotonic() < stop:
                reply = c.get("/api/v1/records", params={"limit": 1000, "sort": "worst"})
                statuses.append(reply.status_code)
                sizes.append(len(reply.content))

    clients = [threading.Thread(target=crowd) for _ in range(6)]
    for t in clients:
        t.start()
    metrics_seconds: list[float] = []
    try:
        while time.monotonic() < stop:
            started = time.monotonic()
            assert httpx.get(fed.base + "/metrics", timeout=30).status_code == 200
            metrics_seconds.append(time.monotonic() - started)
            time.sleep(0.5)
        peak = _rss_mib(pid, "VmHWM")
    finally:
        for t in clients:
            t.join()
    print(f"RSS {before:.0f} MiB -> peak {peak:.0f} MiB; /metrics max {max(metrics_seconds):.2f} s")
    assert 200 in statuses and set(statuses) <= {200, 429, 503}, set(statuses)
    assert max(sizes) < 8 * MIB, max(sizes)  # 1,000 list rows, texts cut: not 1,000 whole records
    assert peak - before < 300, (before, peak)  # whole records would take several GiB
    assert max(metrics_seconds) < 5.0, metrics_seconds


def test_list_rows_carry_cut_texts_and_no_details(fed: Fed) -> None:
    body = httpx.get(fed.base + "/api/v1/records", params={"limit": 5, "sort": "newest"}, timeout=30).json()
    for row in body["records"]:
        assert len(row["question"] or "") <= LIST_TEXT_CHARS and len(row["answer"] or "") <= LIST_TEXT_CHARS
    newest = body["records"][0]["trace_id"]
    full = httpx.get(fed.base + f"/api/v1/records/{newest}", timeout=30).json()  # a record's own page: whole
    assert len(full["question"]) > LIST_TEXT_CHARS


def test_one_client_gets_its_share_then_429(fed: Fed) -> None:
    statuses: list[int] = []

    def one() -> None:
        statuses.append(httpx.get(fed.base + "/api/v1/records", params={"limit": 1000}, timeout=60).status_code)

    burst = [threading.Thread(target=one) for _ in range(12)]
    for t in burst:
        t.start()
    for t in burst:
        t.join()
    assert 200 in statuses and 429 in statuses, statuses


def test_facets_are_bounded_and_searchable(fed: Fed) -> None:
    page = httpx.get(fed.base + "/explorer/", timeout=60)
    assert page.status_code == 200 and len(page.content) < 1 * MIB, len(page.content)
    assert page.text.count('<option value="svc-') == FACET_LIMIT
    found = httpx.get(fed.base + "/api/v1/facets", params={"q": "svc-0421"}, timeout=30).json()
    assert found["services"] == [f"svc-0421{d}" for d in range(10)]
    chosen = httpx.get(fed.base + "/explorer/", params={"service": "svc-04999"}, timeout=60)
    assert 'value="svc-04999" selected' in chosen.text  # a rare value given in the URL stays chosen

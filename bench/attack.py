"""Attack soak: the collector under slow uploads, label-cardinality floods and overload, side by side.

    python3 bench/attack.py [--slow 32] [--seconds 20] [--services 6 --pipelines 50 --models 30]

Starts ``ragtrace-collector serve --role receiver`` as its own process (scoring off: this measures the
receiving side) and runs three attacks against it over loopback, each beside good traffic:

1. Slow uploads: ``--slow`` connections send headers, then one body byte every 2 s (slowloris), while a
   good client sends small traces at 10 requests/s. Prints the good requests' success rate and p99, and
   how long the collector let the slow connections hold on.
2. Cardinality: traces over services × pipelines × models (every combination once). Prints the series
   count, the size of an OpenMetrics scrape of ``/metrics`` and how long it took, and the overflow counter.
3. Overload: an open-loop flood of full-size batches at twice the sustainable rate, beside the good client.
   Prints the good and flood success rates (503 + Retry-After is the expected refusal) and the RSS peak
   and after.

Then a second collector (``--role all``, a bearer token, a results store of large records) for the attacks of
issue 33, each beside the good client (which sends the right token):

4. Explorer crowd: six clients (six addresses) listing 1,000 records at a time from a store of large records.
   Prints their statuses, the RSS peak and ``/metrics`` p99 meanwhile. (First: after attack 6 the global
   failed-credential window refuses addresses that never presented a good token, the crowd's included.)
5. Token guessing: one address sends wrong tokens as fast as it can. Prints how many were checked (401) before
   the address was limited (429), and guesses checked per second.
6. Rotating addresses: each guess from another loopback address (127.1.x.y). Prints guesses checked against
   refused once the global window is full.
7. DNS rebinding: requests naming a host the collector does not answer. Prints how many got 421.
"""

from __future__ import annotations

import argparse
import http.client
import random
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from collector_ingest import drive, pct, proc_rss_mb, start_collector  # noqa: E402
from summary import add_json_out, emit  # noqa: E402

PB = {"Content-Type": "application/x-protobuf"}


def small_request(
    service: str = "good-app", pipeline: str = "support", models: tuple[str, ...] = ("gpt-4o-mini",)
) -> bytes:
    """Complete ragtrace-shaped traces (pipeline → retriever → generator), one per model, serialised."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", service
    ss = rs.scope_spans.add()
    for model in models:
        _add_trace(ss, pipeline, model)
    return req.SerializeToString()


def _add_trace(ss: object, pipeline: str, model: str) -> None:
    tid, root = random.randbytes(16), random.randbytes(8)
    now = time.time_ns()
    for name, role, parent, attrs in (
        ("support", "pipeline", b"", {"ragtrace.pipeline.name": pipeline, "input.value": "What is covered?"}),
        ("search", "retriever", root, {"retrieval.documents.0.document.content": "Parts are covered."}),
        ("answer", "generator", root, {"gen_ai.request.model": model, "output.value": "Parts are covered."}),
    ):
        span = ss.spans.add()  # type: ignore[attr-defined]
        span.trace_id, span.name = tid, name
        span.span_id = root if role == "pipeline" else random.randbytes(8)
        span.parent_span_id = parent
        span.start_time_unix_nano, span.end_time_unix_nano = now - 50_000_000, now
        for key, value in {"ragtrace.span.role": role, **attrs}.items():
            a = span.attributes.add()
            a.key, a.value.string_value = key, value


def post(url: str, body: bytes, timeout: float = 10.0, headers: dict[str, str] | None = None) -> tuple[int, float]:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, {**PB, **(headers or {})}), timeout=timeout) as r:
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return status, time.perf_counter() - started


def post_from(
    port: int, body: bytes, headers: dict[str, str], source: str = "127.0.0.1", path: str = "/v1/traces"
) -> int:
    """One POST to 127.0.0.1:``port`` from the loopback address ``source`` (Linux routes all of 127/8); the status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("POST", path, body, {**PB, **headers})
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


class GoodClient(threading.Thread):
    """Sends one small trace every 1/rate seconds and keeps every status and latency."""

    def __init__(self, url: str, rate: float, headers: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.rate, self.headers = url, rate, headers or {}
        self.results: list[tuple[int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1 / self.rate):
            self.results.append(post(self.url, small_request(), headers=self.headers))

    def ok_share(self) -> float:
        return sum(1 for s, _ in self.results if s == 200) / (len(self.results) or 1)

    def p99_ms(self) -> float:
        return pct([t for _, t in self.results], 0.99) * 1000

    def summary(self) -> str:
        ok = sum(1 for s, _ in self.results if s == 200)
        n = len(self.results) or 1
        statuses: dict[int, int] = {}
        for s, _ in self.results:
            statuses[s] = statuses.get(s, 0) + 1
        p99 = pct([t for _, t in self.results], 0.99) * 1000
        return f"good traffic: {ok}/{len(self.results)} accepted ({100 * ok / n:.1f}%), p99 {p99:.0f} ms, {statuses}"


def slowloris(port: int, n: int, seconds: float) -> tuple[list[float], int]:
    """``n`` uploads that trickle one byte every 2 s: how long each was held open, and how many the collector ended."""
    held: list[float] = []
    ended_by_collector = [0]

    def one() -> None:
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(
                    b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                    b"Content-Length: 100000\r\n\r\n"
                )
                while time.monotonic() - start < seconds:
                    s.sendall(b"\x0a")
                    time.sleep(2)
                    s.settimeout(0.01)
                    try:
                        s.recv(1024)  # returns at all only with a reply (408) or b"" (closed)
                        ended_by_collector[0] += 1
                        break
                    except TimeoutError:
                        pass
                    except OSError:
                        ended_by_collector[0] += 1
                        break
        except OSError:
            pass
        held.append(time.monotonic() - start)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 10)
    return held, ended_by_collector[0]


def scrape(port: int) -> tuple[str, float]:
    started = time.perf_counter()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    return text, time.perf_counter() - started


def series_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def metric_value(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow", type=int, default=32, help="slow-upload connections (default 32)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each attack (default 20)")
    parser.add_argument("--services", type=int, default=6)
    parser.add_argument("--pipelines", type=int, default=50)
    parser.add_argument("--models", type=int, default=30)
    parser.add_argument("--flood-rate", type=float, default=60.0, help="flood batches/s (510 spans each)")
    parser.add_argument("--only-new", action="store_true", help="only the attacks of issue 33 (4-7)")
    add_json_out(parser)
    args = parser.parse_args()
    if args.only_new:
        return issue_33_attacks(args.seconds)

    with tempfile.TemporaryDirectory() as data_dir:
        proc, http, metrics = start_collector(data_dir, sampling_rate=0.0, max_pending=16)
        url = f"http://127.0.0.1:{http}/v1/traces"
        try:
            rss_start = proc_rss_mb(proc.pid)
            print(f"collector pid {proc.pid}, RSS at start {rss_start:.0f} MB\n")

            print(f"== 1. slow uploads: {args.slow} connections trickling 1 byte / 2 s for {args.seconds:.0f} s ==")
            calm = GoodClient(url, rate=10)  # the same client alone first: the anchor for its p99 under attack
            calm.start()
            time.sleep(min(5.0, args.seconds))
            calm.stop.set()
            calm.join()
            print("  alone, first: " + calm.summary())
            good = GoodClient(url, rate=10)
            good.start()
            held, ended = slowloris(http, args.slow, args.seconds)
            good.stop.set()
            good.join()
            print("  " + good.summary())
            emit(
                args.json_out,
                "attack",
                f"good client p99 beside {args.slow} slow uploads",
                good.p99_ms(),
                "ms",
                "the client alone",
                calm.p99_ms(),
                note=f"{100 * good.ok_share():.1f}% accepted",
            )
            print(
                f"  slow connections: {ended}/{len(held)} ended by the collector (408 or close), the rest by the "
                f"attacker at {args.seconds:.0f} s; held open median {pct(held, 0.5):.1f} s, max {max(held or [0]):.1f} s\n"
            )

            combos = args.services * args.pipelines * args.models
            print(f"== 2. cardinality: {args.services} services × {args.pipelines} pipelines × {args.models} models ==")
            started = time.perf_counter()
            sent = 0
            models = tuple(f"model-{m}" for m in range(args.models))
            for s in range(args.services):
                for p in range(args.pipelines):
                    status, _ = post(url, small_request(f"svc-{s}", f"pipe-{p}", models))
                    sent += len(models) if status == 200 else 0
            time.sleep(2.5)  # grace + sweep: every trace becomes a record
            text, took = scrape(metrics)
            print(f"  {sent}/{combos} traces accepted in {time.perf_counter() - started:.0f} s")
            print(
                f"  /metrics (OpenMetrics): {series_count(text):,} series, {len(text.encode()) / 1e6:.2f} MB, "
                f"scraped in {took * 1000:.0f} ms; overflowed into 'other': "
                f"{metric_value(text, 'ragtrace_metric_series_overflow_total'):.0f}; RSS {proc_rss_mb(proc.pid):.0f} MB\n"
            )

            print(f"== 3. overload: {args.flood_rate:.0f} batches/s of 510 spans for {args.seconds:.0f} s ==")
            peak = [proc_rss_mb(proc.pid)]
            stop = threading.Event()

            def watch() -> None:
                while not stop.wait(0.25):
                    peak.append(proc_rss_mb(proc.pid))

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            good = GoodClient(url, rate=10)
            good.start()
            flood = drive(url, "open", args.seconds, concurrency=256, rate=args.flood_rate)
            good.stop.set()
            good.join()
            time.sleep(2.0)
            stop.set()
            watcher.join()
            st = flood["statuses"]
            n = sum(st.values()) or 1
            print("  " + good.summary())
            print(
                f"  flood: {st.get(200, 0)}/{n} accepted, {st.get(503, 0)} shed with 503 (+Retry-After), "
                f"other {n - st.get(200, 0) - st.get(503, 0)}; p99 {pct(flood['latencies'], 0.99) * 1000:.0f} ms"
            )
            print(f"  RSS: start {rss_start:.0f} MB, peak {max(peak):.0f} MB, 2 s after {proc_rss_mb(proc.pid):.0f} MB")
            emit(
                args.json_out,
                "attack",
                f"good client p99 beside a {args.flood_rate:.0f} batch/s flood",
                good.p99_ms(),
                "ms",
                "the client alone",
                calm.p99_ms(),
                note=f"{100 * good.ok_share():.1f}% accepted",
            )
            emit(args.json_out, "attack", "RSS peak under the flood", max(peak), "MB", "RSS at start", rss_start)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
    print()
    return issue_33_attacks(args.seconds)


TOKEN = "bench-token-0123456789abcdef"
GOOD = {"Authorization": f"Bearer {TOKEN}"}


def _fill_store(path: Path, records: int = 300, context_chars: int = 100_000) -> None:
    """A results store of large records (five 100 kB contexts each), as months of production leave one."""
    sys.path.insert(0, str(BENCH.parent / "collector"))
    from ragtrace_collector.model.record import RagRecord
    from ragtrace_collector.model.result import MetricResult
    from ragtrace_collector.scoring.results_store import ResultsStore

    store = ResultsStore(path)
    filler = "The kettle holds 1.7 litres and has an automatic shut-off. " * (context_chars // 60)
    for i in range(records):
        record = RagRecord(
            trace_id=f"{i:032x}",
            service="shop",
            pipeline="qa",
            user_input=f"question {i}",
            response="answer",
            retrieved_contexts=[filler] * 5,
        )
        store.add(record, [MetricResult("faithfulness", "scored", 0.5, details={"claims": [filler[:2000]] * 20})])
    store.close()


def _beside_good(url: str, attack: Callable[[], str]) -> None:
    good = GoodClient(url, rate=10, headers=GOOD)
    good.start()
    try:
        said = attack()
    finally:
        good.stop.set()
        good.join()
    print("  " + said)
    print("  " + good.summary())


def _statuses(values: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def issue_33_attacks(seconds: float) -> int:
    with tempfile.TemporaryDirectory() as data_dir:
        _fill_store(Path(data_dir) / "results.sqlite")
        env = {"RAGTRACE_AUTH__BEARER_TOKEN": TOKEN, "RAGTRACE_AUTH__MAX_FAILED_ATTEMPTS_TOTAL": "200"}
        proc, port, metrics = start_collector(data_dir, sampling_rate=0.0, max_pending=16, extra_env=env, role="all")
        url = f"http://127.0.0.1:{port}/v1/traces"
        body = small_request()
        try:
            print(f"== 4. explorer crowd: 6 clients listing 1,000 large records for {seconds:.0f} s ==")

            def crowd() -> str:
                stop = time.monotonic() + seconds
                got: list[int] = []
                scrapes: list[float] = []

                def lister(source: str) -> None:
                    while time.monotonic() < stop:
                        conn = http.client.HTTPConnection("127.0.0.1", metrics, timeout=60, source_address=(source, 0))
                        try:
                            conn.request("GET", "/api/v1/records?limit=1000", headers=GOOD)
                            reply = conn.getresponse()
                            reply.read()
                            got.append(reply.status)
                        except OSError:
                            got.append(0)
                        finally:
                            conn.close()

                listers = [threading.Thread(target=lister, args=(f"127.0.3.{k + 1}",), daemon=True) for k in range(6)]
                rss_before = proc_rss_mb(proc.pid)
                for t in listers:
                    t.start()
                peak = rss_before
                while time.monotonic() < stop:
                    scrapes.append(scrape(metrics)[1])
                    peak = max(peak, proc_rss_mb(proc.pid))
                    time.sleep(0.25)
                for t in listers:
                    t.join(60)
                return (
                    f"lists: {_statuses(got)}; RSS {rss_before:.0f} -> peak {peak:.0f} MB;"
                    f" /metrics p99 {pct(scrapes, 0.99) * 1000:.0f} ms over {len(scrapes)} scrapes"
                )

            _beside_good(url, crowd)
            print(f"\n== 5. token guessing from one address for {seconds:.0f} s ==")

            def guess_one_address() -> str:
                got, stop = [], time.monotonic() + seconds
                while time.monotonic() < stop:
                    got.append(post_from(port, body, {"Authorization": f"Bearer guess-{len(got):020d}"}, "127.0.0.2"))
                st = _statuses(got)
                return (
                    f"guesses: {st.get(401, 0)} checked (401), then {st.get(429, 0)} refused unchecked (429);"
                    f" {st.get(401, 0) / seconds:.2f} checked/s (was 620-735/s unlimited)"
                )

            _beside_good(url, guess_one_address)

            print(f"\n== 6. rotating addresses (one guess each) for {seconds:.0f} s ==")

            def rotate() -> str:
                got, stop, i = [], time.monotonic() + seconds, 0
                while time.monotonic() < stop:
                    i += 1
                    source = f"127.1.{i // 250 % 250}.{i % 250 + 1}"
                    got.append(post_from(port, body, {"Authorization": f"Bearer guess-{i:020d}"}, source))
                st = _statuses(got)
                return f"guesses from {len(got)} addresses: {st.get(401, 0)} checked, {st.get(429, 0)} refused (429)"

            _beside_good(url, rotate)

            print(f"\n== 7. DNS rebinding: a foreign Host for {seconds:.0f} s ==")

            def rebind() -> str:
                got, stop = [], time.monotonic() + seconds
                while time.monotonic() < stop:
                    got.append(post_from(port, body, {**GOOD, "Host": f"rebind.example:{port}"}))
                    got.append(post_from(metrics, b"", {"Host": f"rebind.example:{metrics}"}, path="/api/v1/records"))
                st = _statuses(got)
                return (
                    f"foreign-Host requests: {st.get(421, 0)}/{len(got)} misdirected (421), {st.get(200, 0)} answered"
                )

            _beside_good(url, rebind)

        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except Exception:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

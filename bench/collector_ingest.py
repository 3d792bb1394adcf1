"""Collector ingest benchmark: OTLP/HTTP protobuf load from a separate process, scoring off.

    python3 bench/collector_ingest.py [--seconds 10] [--sampling-rate 0.01]

Starts ``ragtrace-collector serve --role receiver`` as its own process, and drives it from another
process with realistic ragtrace-shaped traces (pipeline + retriever with 5 documents of ~1 KB +
generator; 170 traces = 510 spans per request, like a BatchSpanProcessor export). Prints:

1. In-process ceilings on the same bodies: upb decode only; decode + span extraction; the text-free
   record summary every trace gets; the full record only sampled traces get.
2. Sustainable throughput: closed loop, a few connections sending back to back; spans accepted per
   second of wall time and per CPU-second of the collector process (= per core).
3. Latency at 0.5× and 2× that rate, open loop (requests sent on schedule whether or not earlier ones
   finished): p50/p99, share shed (503 + Retry-After), and the collector's RSS before and after —
   overload must shed, not queue unboundedly.
4. The assembly journal's cost (``--journal-cost`` alone runs only this): two collectors, journal on (the
   default) and off, driven in alternating closed-loop rounds with the same bodies; spans per collector
   CPU-second each, and the journal's share of ingest CPU (target <= 15%).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRACES_PER_REQUEST = 170
DOC_BYTES = 1000


# --- realistic spans ------------------------------------------------------------------------------
def template_request(traces: int = TRACES_PER_REQUEST):
    """An ExportTraceServiceRequest of ragtrace-shaped traces, and the trace ids used in it."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(1)
    words = [
        "warranty",
        "covers",
        "defects",
        "parts",
        "labour",
        "returns",
        "within",
        "days",
        "purchase",
        "receipt",
        "store",
        "online",
    ]

    def text(n: int) -> str:
        out = []
        size = 0
        while size < n:
            w = rng.choice(words)
            out.append(w)
            size += len(w) + 1
        return " ".join(out)[:n]

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "bench-bot"
    ss = rs.scope_spans.add()
    ss.scope.name = "ragtrace"
    trace_ids = []
    t0 = 1_700_000_000_000_000_000

    def attr(span, key, value):
        a = span.attributes.add()
        a.key = key
        if isinstance(value, bool):
            a.value.bool_value = value
        elif isinstance(value, int):
            a.value.int_value = value
        elif isinstance(value, float):
            a.value.double_value = value
        else:
            a.value.string_value = value

    for t in range(traces):
        tid = rng.randbytes(16)
        trace_ids.append(tid)
        root_id = rng.randbytes(8)
        start = t0 + t * 1_000_000
        question = f"What does the warranty cover for product {t}?"
        answer = text(300)
        root = ss.spans.add()
        root.trace_id, root.span_id, root.name, root.kind = tid, root_id, "support", 1
        root.start_time_unix_nano, root.end_time_unix_nano = start, start + 900_000_000
        for k, v in (
            ("ragtrace.span.role", "pipeline"),
            ("openinference.span.kind", "CHAIN"),
            ("ragtrace.pipeline.name", "support"),
            ("input.value", question),
            ("output.value", answer),
            ("session.id", f"s-{t % 50}"),
            ("user.id", f"u-{t % 200}"),
            ("http.route", "/ask"),
        ):
            attr(root, k, v)
        ret = ss.spans.add()
        ret.trace_id, ret.span_id, ret.parent_span_id, ret.name = tid, rng.randbytes(8), root_id, "search"
        ret.start_time_unix_nano, ret.end_time_unix_nano = start + 1_000_000, start + 120_000_000
        for k, v in (
            ("ragtrace.span.role", "retriever"),
            ("openinference.span.kind", "RETRIEVER"),
            ("gen_ai.operation.name", "retrieval"),
            ("input.value", question),
            ("gen_ai.retrieval.query.text", question),
        ):
            attr(ret, k, v)
        for i in range(5):
            attr(ret, f"retrieval.documents.{i}.document.id", f"doc-{t}-{i}")
            attr(ret, f"retrieval.documents.{i}.document.content", text(DOC_BYTES))
            attr(ret, f"retrieval.documents.{i}.document.score", 0.9 - i * 0.1)
            attr(ret, f"retrieval.documents.{i}.document.metadata", json.dumps({"source": f"kb/{i}.md"}))
        attr(
            ret,
            "gen_ai.retrieval.documents",
            json.dumps([{"id": f"doc-{t}-{i}", "score": 0.9 - i * 0.1} for i in range(5)]),
        )
        gen = ss.spans.add()
        gen.trace_id, gen.span_id, gen.parent_span_id, gen.name = tid, rng.randbytes(8), root_id, "answer"
        gen.start_time_unix_nano, gen.end_time_unix_nano = start + 121_000_000, start + 890_000_000
        for k, v in (
            ("ragtrace.span.role", "generator"),
            ("openinference.span.kind", "LLM"),
            ("gen_ai.operation.name", "chat"),
            ("llm.model_name", "gpt-4o-mini"),
            ("gen_ai.request.model", "gpt-4o-mini"),
            ("gen_ai.response.model", "gpt-4o-mini"),
            ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.stream", True),
            ("gen_ai.response.time_to_first_chunk", 0.21),
            ("ragtrace.response.time_per_output_token", 0.012),
            ("gen_ai.usage.input_tokens", 1450),
            ("gen_ai.usage.output_tokens", 64),
            ("output.value", answer),
        ):
            attr(gen, k, v)
    return req, trace_ids


class BodyFactory:
    """Serialises the template once; each body gets fresh random trace ids patched in place (cheap)."""

    def __init__(self) -> None:
        req, trace_ids = template_request()
        self.spans = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
        self.template = req.SerializeToString()
        self.offsets: list[list[int]] = []
        for tid in trace_ids:
            offs, pos = [], self.template.find(tid)
            while pos >= 0:
                offs.append(pos)
                pos = self.template.find(tid, pos + 1)
            assert len(offs) == 3, "each trace id appears once per span"
            self.offsets.append(offs)

    def body(self) -> bytes:
        out = bytearray(self.template)
        fresh = os.urandom(16 * len(self.offsets))
        for i, offs in enumerate(self.offsets):
            tid = fresh[16 * i : 16 * i + 16]
            for off in offs:
                out[off : off + 16] = tid
        return bytes(out)


# --- the collector process ------------------------------------------------------------------------
def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (each socket held until all are chosen, so none is handed out twice)."""
    import socket

    held = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_collector(
    data_dir: str,
    sampling_rate: float,
    max_pending: int,
    extra_env: dict[str, str] | None = None,
    role: str = "receiver",
):
    http, grpc_port, metrics = free_ports(3)
    env = {
        **os.environ,
        **(extra_env or {}),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "collector")]),  # this checkout's code first
        "RAGTRACE_SAMPLING__RATE": str(sampling_rate),
        "RAGTRACE_LIMITS__MAX_PENDING_REQUESTS": str(max_pending),
        "RAGTRACE_ASSEMBLY__GRACE_SECONDS": "1.0",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrace_collector.cli",
            "serve",
            "--role",
            role,
            "--data-dir",
            data_dir,
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc_port),
            "--metrics-port",
            str(metrics),
            "--log-level",
            "WARNING",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=1).status == 200:
                return proc, http, metrics
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("collector did not become ready: " + proc.stderr.read().decode()[-2000:])


# --- the load generator (its own process) ---------------------------------------------------------
async def _load(url: str, mode: str, seconds: float, concurrency: int, rate: float, out) -> None:
    import aiohttp

    factory = BodyFactory()
    # a few pre-made bodies so body generation is not the bottleneck; each is used once per cycle
    # with fresh ids patched in by a background refill
    headers = {"Content-Type": "application/x-protobuf"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            body = factory.body()
            t = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    status = r.status
            except aiohttp.ClientError:
                status = 0
            latencies.append(time.perf_counter() - t)
            statuses[status] = statuses.get(status, 0) + 1

        start = time.perf_counter()
        if mode == "closed":

            async def worker() -> None:
                while time.perf_counter() - start < seconds:
                    await one()

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            tasks = []
            n = 0
            while True:
                due = start + n / rate
                now = time.perf_counter()
                if due - start >= seconds:
                    break
                if due > now:
                    await asyncio.sleep(due - now)
                tasks.append(asyncio.create_task(one()))
                n += 1
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    out.put({"latencies": latencies, "statuses": statuses, "elapsed": elapsed, "spans_per_request": factory.spans})


def _load_process(url, mode, seconds, concurrency, rate, out) -> None:
    asyncio.run(_load(url, mode, seconds, concurrency, rate, out))


def drive(url: str, mode: str, seconds: float, concurrency: int = 4, rate: float = 0.0) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_load_process, args=(url, mode, seconds, concurrency, rate, out))
    p.start()
    result = out.get(timeout=seconds + 300)
    p.join()
    return result


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- in-process ceilings --------------------------------------------------------------------------
def ceilings(repeat: int = 20) -> list[tuple[str, float]]:
    from ragtrace_collector.processor.conventions import build_record, build_summary
    from ragtrace_collector.receiver.decode import extract_spans, parse_protobuf

    factory = BodyFactory()
    bodies = [factory.body() for _ in range(repeat)]
    rows = []
    t = time.process_time()
    for b in bodies:
        parse_protobuf(b)
    rows.append(("upb decode only", factory.spans * repeat / (time.process_time() - t)))
    t = time.process_time()
    decoded = [extract_spans(parse_protobuf(b)) for b in bodies]
    rows.append(("decode + extract spans", factory.spans * repeat / (time.process_time() - t)))
    t = time.process_time()
    for d in decoded:
        for tid, spans in d.traces.items():
            build_summary(tid, spans)
    rows.append(("record summary (every trace)", factory.spans * repeat / (time.process_time() - t)))
    t = time.process_time()
    for d in decoded:
        for tid, spans in d.traces.items():
            build_record(tid, spans)
    rows.append(("full record (sampled only)", factory.spans * repeat / (time.process_time() - t)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each load phase")
    ap.add_argument("--connections", type=int, default=4, help="closed-loop connections")
    ap.add_argument("--sampling-rate", type=float, default=0.01, help="collector sampling rate (records queued)")
    ap.add_argument("--max-pending", type=int, default=16, help="collector limits.max_pending_requests (default 16)")
    ap.add_argument("--journal-cost", action="store_true", help="only section 4: the journal on vs off")
    ap.add_argument("--rounds", type=int, default=4, help="alternating rounds per collector in section 4")
    ap.add_argument(
        "--sustained-only",
        action="store_true",
        help="sections 1 and 2 only (short runs to interleave before/after comparisons)",
    )
    args = ap.parse_args()
    if args.journal_cost:
        return journal_cost(args)

    print("== in-process ceilings (one core, same bodies) ==")
    rows = ceilings()
    base = rows[0][1]
    for name, rate in rows:
        print(f"  {name:<28} {rate:>12,.0f} spans/s   {rate / base:6.2f}x of decode")

    tmp = tempfile.mkdtemp(prefix="ragtrace-bench-")
    proc, http, metrics = start_collector(tmp, args.sampling_rate, args.max_pending)
    url = f"http://127.0.0.1:{http}/v1/traces"
    try:
        rss_start = proc_rss_mb(proc.pid)
        drive(url, "closed", 2.0, args.connections)  # warm-up
        cpu0 = proc_cpu_seconds(proc.pid)
        res = drive(url, "closed", args.seconds, args.connections)
        cpu1 = proc_cpu_seconds(proc.pid)
        ok = res["statuses"].get(200, 0)
        spans_ok = ok * res["spans_per_request"]
        wall_rate = spans_ok / res["elapsed"]
        per_core = spans_ok / max(1e-9, cpu1 - cpu0)
        rss_sustained = proc_rss_mb(proc.pid)
        print(
            f"\n== sustainable (closed loop, {args.connections} connections, {res['spans_per_request']} spans/request) =="
        )
        print(f"  requests ok {ok}, statuses {res['statuses']}")
        print(f"  accepted        {wall_rate:>12,.0f} spans/s (wall)")
        print(
            f"  per core        {per_core:>12,.0f} spans/s per collector CPU-second "
            f"(cpu {cpu1 - cpu0:.1f}s over {res['elapsed']:.1f}s)   target >= 20,000"
        )
        print(
            f"  p50/p99 latency {pct(res['latencies'], 0.5) * 1000:8.1f} / {pct(res['latencies'], 0.99) * 1000:.1f} ms"
        )
        print(f"  per core / upb decode {per_core / base:8.3f}x")
        if args.sustained_only:
            return 0

        sustainable_rps = ok / res["elapsed"]
        print("\n== open loop at multiples of the sustainable rate ==")
        print(
            f"  {'load':>5} {'req/s':>7} {'sent':>6} {'200':>6} {'503':>6} {'other':>6} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'spans/s ok':>11} {'RSS MB':>7}"
        )
        table = []
        rss_trend: dict[float, tuple[float, float]] = {}
        for mult in (0.5, 2.0):
            rps = sustainable_rps * mult
            samples: list[float] = []
            stop = threading.Event()

            def sample_rss(stop: threading.Event, samples: list[float]) -> None:
                while not stop.wait(0.5):
                    samples.append(proc_rss_mb(proc.pid))

            sampler = threading.Thread(target=sample_rss, args=(stop, samples), daemon=True)
            sampler.start()
            res = drive(url, "open", args.seconds, concurrency=256, rate=rps)
            stop.set()
            sampler.join()
            half = len(samples) // 2
            rss_trend[mult] = (max(samples[:half] or [0]), max(samples[half:] or [0]))
            st = res["statuses"]
            sent = sum(st.values())
            other = sent - st.get(200, 0) - st.get(503, 0)
            row = (
                mult,
                rps,
                sent,
                st.get(200, 0),
                st.get(503, 0),
                other,
                pct(res["latencies"], 0.5) * 1000,
                pct(res["latencies"], 0.99) * 1000,
                st.get(200, 0) * res["spans_per_request"] / res["elapsed"],
                proc_rss_mb(proc.pid),
            )
            table.append(row)
            print("  {:>4.1f}x {:>7.1f} {:>6} {:>6} {:>6} {:>6} {:>8.1f} {:>8.1f} {:>11,.0f} {:>7.0f}".format(*row))
        time.sleep(2.0)
        rss_end = proc_rss_mb(proc.pid)
        print(
            f"\n== collector RSS ==\n  start {rss_start:.0f} MB, after sustained {rss_sustained:.0f} MB, "
            f"after 2x overload + 2 s {rss_end:.0f} MB"
        )
        for mult, (first, second) in rss_trend.items():
            print(f"  during {mult}x: max RSS first half {first:.0f} MB, second half {second:.0f} MB")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
            lines = [
                line
                for line in r.read().decode().splitlines()
                if line.startswith(
                    (
                        "ragtrace_otlp_requests_total",
                        "ragtrace_assembly_completed_total",
                        "ragtrace_late_spans_total",
                        "ragtrace_traces_sampled_total",
                    )
                )
            ]
        print("\n== collector counters ==")
        for line in lines:
            print("  " + line)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print()
    return journal_cost(args)


def journal_cost(args: argparse.Namespace) -> int:
    """Section 4: the same closed-loop load on a collector with the journal and one without, in alternating
    rounds (so machine noise falls on both), spans accepted per collector CPU-second each."""
    print(f"== 4. the assembly journal's cost ({args.rounds} alternating rounds of {args.seconds:.0f} s each) ==")
    started = []
    try:
        for journal in ("true", "false"):
            data_dir = tempfile.mkdtemp(prefix=f"ragtrace-bench-journal-{journal}-")
            env = {"RAGTRACE_ASSEMBLY__JOURNAL": journal}
            proc, http, _ = start_collector(data_dir, args.sampling_rate, args.max_pending, extra_env=env)
            started.append((journal, proc, f"http://127.0.0.1:{http}/v1/traces", data_dir))
        totals = {journal: [0, 0.0] for journal, *_ in started}  # spans accepted, CPU seconds
        for _, _, url, _ in started:
            drive(url, "closed", 2.0, args.connections)  # warm-up
        for _ in range(args.rounds):
            for journal, proc, url, _ in started:
                cpu0 = proc_cpu_seconds(proc.pid)
                res = drive(url, "closed", args.seconds, args.connections)
                totals[journal][0] += res["statuses"].get(200, 0) * res["spans_per_request"]
                totals[journal][1] += proc_cpu_seconds(proc.pid) - cpu0
        rate = {j: spans / max(1e-9, cpu) for j, (spans, cpu) in totals.items()}
        for journal, (spans, cpu) in totals.items():
            label = "journal on " if journal == "true" else "journal off"
            print(
                f"  {label}  {rate[journal]:>10,.0f} spans per collector CPU-second ({spans:,} spans, {cpu:.1f} s CPU)"
            )
        share = 1 - rate["true"] / rate["false"]
        print(f"  the journal's share of ingest CPU: {100 * share:.1f}%   target <= 15%")
        on_dir = started[0][3]
        segments = list(Path(on_dir, "journal").glob("segment-*.log"))
        print(
            f"  journal on disk after the load: {len(segments)} segments, {sum(p.stat().st_size for p in segments) / 1e6:.1f} MB"
        )
    finally:
        for _, proc, _, _ in started:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Scale-out benchmark: ingest with 1, 2 and 4 receiver processes and scoring with 1, 2 and 4 workers on one
Redis, the memory an in-flight trace costs, and the cluster-wide judge budget held by several receivers.

Everything is real: Debian's redis-server (free loopback port, AOF), ``ragtrace-collector serve --role
worker|receiver`` processes, the LLM judge through litellm, and the scripted OpenAI-compatible judge
(``tests/support/scripted_openai.py``) in its own process adding ``--delay`` seconds (200 ms) to every call.

ingest: for N in ``--receivers`` (rounds interleaved, ``--rounds``): N receivers sharing assembly state and the
queue in Redis, ``--senders`` load processes (bench/collector_ingest.py's loader and bodies, fresh ids every POST)
sending closed loop to every receiver in turn; spans accepted per second, per receiver CPU-second and per CPU-second
with redis-server's, each against one receiver's in the same run.

scoring: for N in ``--workers``: a fresh stream, N workers started and warmed up, then ``--records`` records put on
the stream at once (as receivers would); the clock stops when every record holds its Redis scored mark. Judge and
scoring concurrency per worker are fixed (``--concurrency``), so the judge's latency, not the CPU, bounds one worker,
and adding workers should add throughput near-linearly (CPU per record printed beside it).

memory: one receiver (in-process assembly) holding N traces open (root-less traces, an hour's max_wait), RSS read
at each of ``--rss-steps`` once the in-flight gauge shows them all; the least-squares slope is the RSS an in-flight
trace costs, against its OTLP bytes.

budget: 2 receivers + 3 workers with ``records_per_minute`` set; ``--budget-traces`` traces are sent over OTLP/HTTP
by the real OTel exporter, alternating receivers; admitted, refused and scored counts are read back, and then the
same with ``judge_tokens_per_hour``.

    python bench/scale_out.py                      # ~5 min on 2 cores
    python bench/scale_out.py --quick              # ~3 min
    python bench/scale_out.py --sections memory --rss-steps 0,1000,5000,20000

``--json-out FILE`` appends the figures and their anchors for ``bench/summary.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
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
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import redis  # noqa: E402
import yaml  # noqa: E402
from collector_ingest import (  # noqa: E402
    BodyFactory,
    drive,
    proc_rss_mb,
    scrape,
    start_collector,
    tree_cpu_seconds,
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from summary import add_json_out, emit  # noqa: E402

from ragtrace_collector.model.record import RagRecord  # noqa: E402
from ragtrace_collector.queue.redis import RedisStreamQueue  # noqa: E402
from tests.support.net import free_port, wait_for_port  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from tests.support.scripted_openai import faithfulness_reply  # noqa: E402

METRIC = "faithfulness"  # two judge calls per record: extract claims, verify them


def judge_reply(body: dict) -> dict:
    """A well-formed answer to the LLM judge's faithfulness tasks; every third claim unsupported."""
    return faithfulness_reply(body, supported=lambda i: i % 3 != 0)


def run_judge_server(port: int, delay: float) -> None:
    """The scripted judge, in its own process so its threads do not share the benchmark's interpreter."""
    from tests.support.scripted_openai import ScriptedOpenAI

    server = ScriptedOpenAI(responder=judge_reply, delay=delay, port=port).start()
    signal.sigwait({signal.SIGTERM})
    server.stop()


class Collector:
    """One ``ragtrace-collector serve`` process."""

    def __init__(self, name: str, workdir: Path, cfg: dict) -> None:
        self.name = name
        self.metrics_port = cfg["listen"]["metrics_port"]
        self.http_port = cfg["listen"].get("http_port")
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.log = workdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRACE_")}
        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ragtrace_collector.cli",
                    "serve",
                    "--config",
                    str(path),
                    "--log-level",
                    "WARNING",
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready")

    def total(self, name: str, **labels: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        want = set(labels.items())
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == name and want <= set(s.labels.items())
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def worker_cfg(
    workdir: Path, name: str, redis_url: str, judge_url: str, concurrency: int, sampling: dict | None = None
) -> dict:
    return {
        "role": "worker",
        "data_dir": str(workdir / name),
        "listen": {"host": "127.0.0.1", "grpc_port": None, "http_port": None, "metrics_port": free_port()},
        "queue": {"url": redis_url, "max_depth": 100_000},
        "sampling": sampling or {},
        "judge": {
            "model": "openai/scripted",
            "base_url": judge_url,
            "api_key": "bench",
            "concurrency": concurrency,
            "timeout_seconds": 60,
            "max_retries": 2,
        },
        "scoring": {"metrics": [METRIC], "concurrency": concurrency, "lease_seconds": 60},
    }


def receiver_cfg(workdir: Path, name: str, redis_url: str, sampling: dict) -> dict:
    return {
        "role": "receiver",
        "data_dir": str(workdir / name),
        "listen": {"host": "127.0.0.1", "grpc_port": None, "http_port": free_port(), "metrics_port": free_port()},
        "queue": {"url": redis_url, "max_depth": 100_000},
        "assembly": {"grace_seconds": 0.3, "shared_state": redis_url, "sweep_interval_seconds": 0.1},
        "sampling": sampling,
    }


def record(i: int) -> RagRecord:
    return RagRecord(
        trace_id=f"{i + 1:032x}",
        pipeline="bench",
        user_input=f"What do we know about item {i}?",
        retrieved_contexts=[f"Item {i} is blue. Item {i} weighs {i % 7 + 1} kg. It was made in {1950 + i % 50}."],
        response=f"Item {i} is blue. It weighs {i % 7 + 1} kg. It was made in {1950 + i % 50}.",
    )


def scored(r: redis.Redis) -> int:
    return sum(1 for _ in r.scan_iter(match=f"ragtrace:scored:*:{METRIC}", count=5000))


def wait_scored(r: redis.Redis, n: int, timeout: float) -> float:
    start = time.perf_counter()
    while scored(r) < n:
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"only {scored(r)} of {n} records scored after {timeout}s")
        time.sleep(0.05)
    return time.perf_counter()


def throughput(srv: RedisServer, workdir: Path, judge_url: str, n_workers: int, records: int, concurrency: int) -> dict:
    r = redis.Redis.from_url(srv.url, decode_responses=True)
    r.flushall()
    workers = [
        Collector(
            f"w{n_workers}-{i}", workdir, worker_cfg(workdir, f"w{n_workers}-{i}", srv.url, judge_url, concurrency)
        )
        for i in range(n_workers)
    ]
    try:
        for w in workers:
            w.wait_ready()
        producer = RedisStreamQueue(srv.url, max_depth=100_000)
        warm = 4 * concurrency * n_workers  # first litellm calls and connections in every worker
        for i in range(warm):
            producer.put(record(10_000_000 + i))
        wait_scored(r, warm, 120)
        calls0 = sum(w.total("ragtrace_judge_calls_total") for w in workers)
        cpu0 = sum(tree_cpu_seconds(w.proc.pid) for w in workers)
        t0 = time.perf_counter()
        for i in range(records):
            producer.put(record(i))
        t1 = wait_scored(r, warm + records, 300)
        elapsed = t1 - t0
        cpu = sum(tree_cpu_seconds(w.proc.pid) for w in workers) - cpu0
        per_worker = [w.total("ragtrace_evaluations_total", metric=METRIC) for w in workers]
        calls = sum(w.total("ragtrace_judge_calls_total") for w in workers) - calls0
        producer.close()
        return {
            "workers": n_workers,
            "records": records,
            "seconds": elapsed,
            "rate": records / elapsed,
            "per_worker": per_worker,
            "calls": calls,
            "evaluations": sum(per_worker) - warm,
            "cpu_ms_per_record": 1000 * cpu / records,
        }
    finally:
        for w in workers:
            w.stop()


def send_traces(ports: list[int], n: int, start: int, pace: float = 0.0) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from ragtrace import attributes as A

    providers = []
    for port in ports:
        p = TracerProvider(resource=Resource.create({"service.name": "bench-app"}))
        p.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
        providers.append(p)
    for i in range(start, start + n):
        rec = record(i)
        tracer = providers[i % len(providers)].get_tracer("bench")
        with tracer.start_as_current_span(
            "rag",
            attributes={
                A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_CHAIN,
                A.RAGTRACE_PIPELINE_NAME: "bench",
                A.INPUT_VALUE: rec.user_input,
                A.OUTPUT_VALUE: rec.response,
            },
        ):
            with tracer.start_as_current_span(
                "retrieve",
                attributes={
                    A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_RETRIEVER,
                    A.INPUT_VALUE: rec.user_input,
                    A.document_attr(0, "content"): rec.retrieved_contexts[0].content,
                },
            ):
                pass
            with tracer.start_as_current_span(
                "generate",
                attributes={
                    A.OPENINFERENCE_SPAN_KIND: A.SPAN_KIND_LLM,
                    A.OUTPUT_VALUE: rec.response,
                    A.LLM_MODEL_NAME: "app-llm",
                },
            ):
                pass
        if pace:
            time.sleep(pace)
    for p in providers:
        p.shutdown()


def budget_run(
    srv: RedisServer,
    workdir: Path,
    judge_url: str,
    concurrency: int,
    traces: int,
    sampling: dict,
    pace: float,
    tag: str,
) -> dict:
    r = redis.Redis.from_url(srv.url, decode_responses=True)
    r.flushall()
    procs = [
        Collector(f"{tag}-recv-{i}", workdir, receiver_cfg(workdir, f"{tag}-recv-{i}", srv.url, sampling))
        for i in range(2)
    ]
    workers = [
        Collector(
            f"{tag}-work-{i}",
            workdir,
            worker_cfg(workdir, f"{tag}-work-{i}", srv.url, judge_url, concurrency, sampling),
        )
        for i in range(3)
    ]
    try:
        for p in procs + workers:
            p.wait_ready()
        t0 = time.monotonic()
        send_traces([p.http_port for p in procs], traces, 0, pace)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            decided = sum(
                p.total("ragtrace_traces_sampled_total") + p.total("ragtrace_traces_dropped_total") for p in procs
            )
            if decided >= traces:
                break
            time.sleep(0.1)
        admitted = int(sum(p.total("ragtrace_traces_sampled_total") for p in procs))
        wait_scored(r, admitted, 120)
        time.sleep(0.5)  # let the last results' token reports land
        return {
            "sent": traces,
            "admitted": admitted,
            "refused_records": int(
                sum(p.total("ragtrace_traces_dropped_total", reason="budget_records") for p in procs)
            ),
            "refused_tokens": int(sum(p.total("ragtrace_traces_dropped_total", reason="budget_tokens") for p in procs)),
            "scored": scored(r),
            "evaluations": int(sum(w.total("ragtrace_evaluations_total", metric=METRIC) for w in workers)),
            "tokens_shared": sum(int(v) for v in r.hgetall("ragtrace:budget:tokens").values()),
            "tokens_judge": int(sum(w.total("ragtrace_judge_tokens_total") for w in workers)),
            "seconds": time.monotonic() - t0,
        }
    finally:
        for p in procs + workers:
            p.stop()


# --- ingest with several receivers ---------------------------------------------------------------
def ingest_round(
    srv: RedisServer,
    workdir: Path,
    n: int,
    tag: str,
    seconds: float,
    senders: int,
    connections: int,
    sampling_rate: float,
    bodies: str,
) -> dict:
    """``n`` receivers on one Redis (shared assembly state, Redis queue), ``senders`` load processes of
    ``connections`` each sending to every receiver in turn for ``seconds``; spans accepted, receivers' and
    Redis's CPU over the window."""
    r = redis.Redis.from_url(srv.url)
    r.flushall()
    receivers = []
    for i in range(max(1, n)):
        cfg = receiver_cfg(workdir, f"{tag}-{i}", srv.url, {"rate": sampling_rate})
        if n == 0:  # one receiver alone: in-process assembly, its journal, the SQLite queue
            cfg["assembly"].pop("shared_state")
            cfg.pop("queue")
        receivers.append(Collector(f"{tag}-{i}", workdir, cfg))
    n = len(receivers)
    try:
        for c in receivers:
            c.wait_ready()
        urls = [f"http://127.0.0.1:{c.http_port}/v1/traces" for c in receivers]
        drive(urls, "closed", 1.5, connections, bodies=bodies)  # warm-up: connections, first Redis scripts
        pids = [c.proc.pid for c in receivers]
        assert srv.proc is not None
        mark: dict[str, float] = {}
        lock = threading.Lock()

        def start_clocks() -> None:
            with lock:  # the first sender to start starts the clocks
                if not mark:
                    mark.update(
                        cpu=sum(tree_cpu_seconds(p) for p in pids),
                        redis=tree_cpu_seconds(srv.proc.pid),
                        t=time.perf_counter(),
                    )

        results: list[dict] = []
        ended: dict[str, float] = {}
        finished = [0]

        def stop_clocks() -> None:
            with lock:  # the last sender to finish stops them
                finished[0] += 1
                if finished[0] == senders:
                    ended.update(
                        cpu=sum(tree_cpu_seconds(p) for p in pids),
                        redis=tree_cpu_seconds(srv.proc.pid),
                        t=time.perf_counter(),
                    )

        def sender(i: int) -> None:
            mine = urls[i % n :] + urls[: i % n]
            res = drive(
                mine,
                "closed",
                seconds,
                connections,
                bodies=bodies,
                retry_after=True,
                on_start=start_clocks,
                on_end=stop_clocks,
            )
            with lock:
                results.append(res)

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = ended["cpu"] - mark["cpu"]
        redis_cpu = ended["redis"] - mark["redis"]
        wall = ended["t"] - mark["t"]
        spans = sum(res["statuses"].get(200, 0) * res["spans_per_request"] for res in results)
        statuses: dict[int, int] = {}
        for res in results:
            for code, k in res["statuses"].items():
                statuses[code] = statuses.get(code, 0) + k
        return {"spans": spans, "cpu": cpu, "redis_cpu": redis_cpu, "wall": wall, "statuses": statuses}
    finally:
        for c in receivers:
            c.stop()


def ingest_scaling(srv: RedisServer, workdir: Path, args: argparse.Namespace) -> None:
    counts = [0] + [int(n) for n in args.receivers.split(",") if n.strip()]  # 0: one receiver alone, no Redis
    label = {n: "1 alone" if n == 0 else str(n) for n in counts}
    print(
        f"\ningest: {'/'.join(map(str, counts[1:]))} receivers (serve --role receiver, assembly shared in Redis, Redis "
        f"queue, sampling {args.sampling_rate:g}) on one redis-server, and one receiver alone (in-process assembly, "
        f"journal, SQLite queue); {args.senders} sender processes x {args.connections} connections, closed loop "
        f"honouring Retry-After, {args.ingest_seconds:.0f} s, {args.rounds} interleaved round(s)"
    )
    totals = {n: {"spans": 0, "cpu": 0.0, "redis_cpu": 0.0, "wall": 0.0, "statuses": {}} for n in counts}
    for rnd in range(args.rounds):
        for n in counts:
            row = ingest_round(
                srv,
                workdir,
                n,
                f"recv{n}-r{rnd}",
                args.ingest_seconds,
                args.senders,
                args.connections,
                args.sampling_rate,
                args.bodies,
            )
            tot = totals[n]
            for k in ("spans", "cpu", "redis_cpu", "wall"):
                tot[k] += row[k]
            for code, k in row["statuses"].items():
                tot["statuses"][code] = tot["statuses"].get(code, 0) + k
            print(
                f"  round {rnd + 1}, {label[n]:>7} receiver(s): {row['spans']:>7,} spans in {row['wall']:.1f} s, "
                f"receivers {row['cpu']:.1f} CPU-s, redis {row['redis_cpu']:.1f} CPU-s, {row['statuses']}"
            )
    print(
        f"\n{'receivers':>9} {'spans/s':>9} {'x 1':>6} {'per recv CPU-s':>15} {'x 1':>6} "
        f"{'per CPU-s incl. redis':>22} {'x 1':>6}  statuses"
    )
    figures = {}
    for n in counts:
        tot = totals[n]
        figures[n] = (
            tot["spans"] / tot["wall"],
            tot["spans"] / max(1e-9, tot["cpu"]),
            tot["spans"] / max(1e-9, tot["cpu"] + tot["redis_cpu"]),
        )
    base = figures[counts[1]] if len(counts) > 1 else figures[0]
    for n in counts:
        rate, per_cpu, per_all = figures[n]
        print(
            f"{label[n]:>9} {rate:>9,.0f} {rate / base[0]:>5.2f}x {per_cpu:>15,.0f} {per_cpu / base[1]:>5.2f}x "
            f"{per_all:>22,.0f} {per_all / base[2]:>5.2f}x  {tot_statuses(totals[n])}"
        )
        if n in (0, counts[1]):  # the anchors themselves
            continue
        anchor = f"{label[counts[1]]} receiver"
        emit(args.json_out, "scale_out ingest", f"{n} receivers: spans/s accepted", rate, "spans/s", anchor, base[0])
        emit(
            args.json_out,
            "scale_out ingest",
            f"{n} receivers: spans per receiver CPU-s",
            per_cpu,
            "spans/CPU-s",
            anchor,
            base[1],
        )
    if len(counts) > 1:
        emit(
            args.json_out,
            "scale_out ingest",
            f"{counts[1]} receiver on Redis: spans per CPU-s incl. redis-server",
            figures[counts[1]][2],
            "spans/CPU-s",
            "1 receiver alone",
            figures[0][2],
        )
    print(
        f"(x 1: against {label[counts[1] if len(counts) > 1 else 0]} receiver with Redis. This host has "
        f"{os.cpu_count()} CPUs, shared by the senders, the receivers and redis-server: spans/s stops growing once "
        "they are all busy; per CPU-s is the cost of each span wherever it is spent)"
    )


def tot_statuses(tot: dict) -> dict:
    return dict(sorted(tot["statuses"].items()))


# --- memory per in-flight trace ------------------------------------------------------------------
def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status


def inflight_rss(workdir: Path, args: argparse.Namespace) -> None:
    """RSS of one collector (``--role receiver``, in-process assembly) holding N traces open: root-less traces
    (a retriever and a generator span whose parent never comes) with ``assembly.max_wait_seconds`` an hour, so
    none completes; N stepped up, RSS read once the in-flight gauge shows them all; the slope is the memory an
    in-flight trace costs."""
    steps = [int(n) for n in args.rss_steps.split(",") if n.strip()]
    factory = BodyFactory(args.bodies, drop_roots=True)
    per_body = factory.traces
    env = {
        "RAGTRACE_ASSEMBLY__MAX_WAIT_SECONDS": "3600",
        "RAGTRACE_ASSEMBLY__MAX_INFLIGHT_TRACES": str(10 * max(steps) + 1000),
        "RAGTRACE_ASSEMBLY__MAX_INFLIGHT_BYTES": str(64 * 1024**3),
    }
    proc, http, metrics = start_collector(str(workdir / "rss"), args.sampling_rate, 16, extra_env=env)
    url = f"http://127.0.0.1:{http}/v1/traces"
    print(
        f"\nmemory per in-flight trace: one receiver, in-process assembly, root-less traces of {factory.spans // per_body} "
        f"spans ({len(factory.template) / per_body / 1e3:.1f} KB of OTLP each), none completing"
    )
    rows = []
    try:
        sent = 0
        time.sleep(2.0)
        for n in steps:
            while sent < n:
                status = post(url, factory.body())
                if status != 200:
                    raise RuntimeError(f"the collector answered {status}")
                sent += per_body
            deadline = time.monotonic() + 60
            while scrape(metrics).get("ragtrace_assembly_inflight_traces", 0) < sent:
                if time.monotonic() > deadline:
                    raise TimeoutError("the in-flight gauge never showed every trace sent")
                time.sleep(0.2)
            time.sleep(1.0)
            samples = []
            for _ in range(5):
                samples.append(proc_rss_mb(proc.pid))
                time.sleep(0.2)
            m = scrape(metrics)
            rows.append(
                (
                    int(m["ragtrace_assembly_inflight_traces"]),
                    sorted(samples)[2] * 1024 * 1024,
                    m.get("ragtrace_assembly_inflight_bytes", 0.0),
                )
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"{'in flight':>10} {'RSS MB':>8} {'gauge bytes MB':>15}")
    for n, rss, gauge in rows:
        print(f"{n:>10,} {rss / 2**20:>8.1f} {gauge / 2**20:>15.1f}")
    xs = [float(n) for n, _, _ in rows]
    mean_x = sum(xs) / len(xs)
    slope = sum((x - mean_x) * (rss - sum(r for _, r, _ in rows) / len(rows)) for x, (_, rss, _) in zip(xs, rows))
    slope /= sum((x - mean_x) ** 2 for x in xs) or 1.0
    gauge_per = rows[-1][2] / max(1, rows[-1][0])
    wire = len(factory.template) / per_body
    print(
        f"least-squares slope: {slope / 1e3:,.1f} KB of RSS per in-flight trace ({slope / gauge_per:.2f}x the "
        f"{gauge_per / 1e3:.1f} KB the assembly counts against max_inflight_bytes, {slope / wire:.2f}x its "
        f"{wire / 1e3:.1f} KB of OTLP); at the default bound of 20,000 traces: ~{20_000 * slope / 2**20:,.0f} MB"
    )
    emit(
        args.json_out,
        "scale_out memory",
        "RSS per in-flight trace (slope)",
        slope,
        "bytes",
        "OTLP bytes per trace",
        wire,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sections",
        default="ingest,scoring,memory,budget",
        help="which to run, in this order: ingest (1/2/4 receivers), scoring (1/2/4 workers), memory (RSS per "
        "in-flight trace), budget (cluster-wide budgets); default all",
    )
    ap.add_argument(
        "--quick", action="store_true", help="a short run (~3 min on 2 cores): fewer records, shorter phases"
    )
    ap.add_argument("--records", type=int, default=120, help="records scored per worker count (default 120)")
    ap.add_argument("--workers", default="1,2,4", help="worker process counts to compare (default 1,2,4)")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the scripted judge adds per call (default 0.2)")
    ap.add_argument("--concurrency", type=int, default=4, help="judge and scoring concurrency per worker (default 4)")
    ap.add_argument("--receivers", default="1,2,4", help="receiver process counts to compare (default 1,2,4)")
    ap.add_argument("--senders", type=int, default=2, help="load processes in the ingest section (default 2)")
    ap.add_argument("--connections", type=int, default=4, help="connections per sender (default 4)")
    ap.add_argument(
        "--ingest-seconds", type=float, default=8.0, help="closed-loop seconds per ingest round (default 8)"
    )
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds over the receiver counts (default 2)")
    ap.add_argument("--sampling-rate", type=float, default=0.01, help="receivers' sampling rate (default 0.01)")
    ap.add_argument(
        "--bodies", choices=("template", "sdk"), default="template", help="bench/collector_ingest.py's bodies"
    )
    ap.add_argument(
        "--rss-steps",
        default="0,1000,5000,20000",
        help="in-flight trace counts RSS is read at (default 0,1000,5000,20000)",
    )
    ap.add_argument(
        "--redis-appendfsync",
        choices=("always", "everysec"),
        default="everysec",
        help="redis-server's AOF fsync policy: everysec (Redis's default with appendonly yes, the README's setup) or "
        "always (as the tests run it; on this 2-core VM's disk it cuts Redis-backed ingest about 9x)",
    )
    ap.add_argument("--budget-rpm", type=int, default=30, help="records per minute for the budget run (default 30)")
    ap.add_argument(
        "--budget-tokens", type=int, default=4000, help="judge tokens per hour for the budget run (default 4000)"
    )
    ap.add_argument("--budget-traces", type=int, default=60, help="traces sent in each budget run (default 60)")
    ap.add_argument("--skip-budget", action="store_true", help="leave out the budget section")
    add_json_out(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 60)
        args.ingest_seconds = min(args.ingest_seconds, 4.0)
        args.rounds = 1
        args.budget_traces = min(args.budget_traces, 40)
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    if args.skip_budget and "budget" in sections:
        sections.remove("budget")

    workdir = Path(tempfile.mkdtemp(prefix="ragtrace-scale-out-"))
    judge_port = free_port()
    judge = multiprocessing.get_context("fork").Process(
        target=run_judge_server, args=(judge_port, args.delay), daemon=True
    )
    judge.start()
    wait_for_port(judge_port)
    judge_url = f"http://127.0.0.1:{judge_port}/v1"
    srv = RedisServer(data_dir=workdir / "redis", args=("--appendfsync", args.redis_appendfsync))
    (workdir / "redis").mkdir()
    srv.start()
    try:
        print(
            f"scale-out: {os.cpu_count()} CPUs, redis-server {srv.url} (AOF, appendfsync {args.redis_appendfsync}), "
            f"sections {sections}"
        )
        if "ingest" in sections:
            ingest_scaling(srv, workdir, args)
        if "scoring" in sections:
            scoring_scaling(srv, workdir, judge_url, args)
        if "memory" in sections:
            inflight_rss(workdir, args)
        if "budget" in sections:
            budgets(srv, workdir, judge_url, args)
    finally:
        srv.cleanup()
        os.kill(judge.pid, signal.SIGTERM)
        judge.join(timeout=5)
    return 0


def scoring_scaling(srv: RedisServer, workdir: Path, judge_url: str, args: argparse.Namespace) -> None:
    print(
        f"\nscoring: {METRIC} (2 judge calls/record), judge +{args.delay * 1000:.0f} ms/call, "
        f"concurrency {args.concurrency}/worker, {args.records} records per worker count"
    )
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    rows = [throughput(srv, workdir, judge_url, n, args.records, args.concurrency) for n in counts]
    if not rows:
        return
    base = rows[0]["rate"] / rows[0]["workers"]
    ideal = args.concurrency / (2 * args.delay)
    print(
        f"\n{'workers':>7} {'records':>8} {'seconds':>8} {'records/s':>10} {'speed-up':>9} {'CPU ms/rec':>11} "
        f"{'judge calls':>12} {'per worker':>16}"
    )
    for row in rows:  # speed-up relative to the first row's per-worker rate
        print(
            f"{row['workers']:>7} {row['records']:>8} {row['seconds']:>8.2f} {row['rate']:>10.2f} "
            f"{row['rate'] / base:>8.2f}x {row['cpu_ms_per_record']:>11.1f} {int(row['calls']):>12} "
            f"{'/'.join(str(int(x)) for x in row['per_worker']):>16}"
        )
        if row is rows[0]:
            continue
        emit(
            args.json_out,
            "scale_out scoring",
            f"{row['workers']} workers: records/s scored",
            row["rate"],
            "records/s",
            f"linear: {row['workers']} x one worker's rate",
            base * row["workers"],
            note=f"judge +{args.delay * 1000:.0f} ms/call",
        )
    print(
        f"(one worker's latency-bound ceiling: {ideal:.1f} records/s; per-worker counts include the warm-up; "
        f"scored exactly once: evaluations == records in every row: "
        f"{all(int(r_['evaluations']) == r_['records'] for r_ in rows)})"
    )


def budgets(srv: RedisServer, workdir: Path, judge_url: str, args: argparse.Namespace) -> None:
    print("\nbudget (2 receivers + 3 workers, OTLP/HTTP from the OTel exporter):")
    rec = budget_run(
        srv,
        workdir,
        judge_url,
        args.concurrency,
        args.budget_traces,
        {"rate": 1.0, "budget": {"records_per_minute": args.budget_rpm}},
        0.0,
        "rpm",
    )
    held = rec["admitted"] <= args.budget_rpm
    print(
        f"  records_per_minute={args.budget_rpm}: sent {rec['sent']} in {rec['seconds']:.1f}s, admitted "
        f"{rec['admitted']}, refused {rec['refused_records']} (budget_records), scored {rec['scored']} "
        f"(evaluations {rec['evaluations']}) -> {'HELD' if held else 'EXCEEDED'}"
    )
    tok = budget_run(
        srv,
        workdir,
        judge_url,
        args.concurrency,
        args.budget_traces,
        {"rate": 1.0, "budget": {"judge_tokens_per_hour": args.budget_tokens}},
        0.1,
        "tph",
    )
    per_record = tok["tokens_shared"] / max(1, tok["scored"])
    held = tok["tokens_shared"] <= args.budget_tokens + per_record
    print(
        f"  judge_tokens_per_hour={args.budget_tokens}: sent {tok['sent']} over {tok['seconds']:.1f}s, admitted "
        f"{tok['admitted']}, refused {tok['refused_tokens']} (budget_tokens), scored {tok['scored']}; tokens "
        f"spent {tok['tokens_shared']} in Redis (judge metrics {tok['tokens_judge']}), ~{per_record:.0f}/record; "
        f"overshoot {max(0, tok['tokens_shared'] - args.budget_tokens)} (records admitted before their cost was "
        f"known, priced at the running average) -> {'HELD' if held else 'EXCEEDED'} within one record's cost"
    )


if __name__ == "__main__":
    sys.exit(main())

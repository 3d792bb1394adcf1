"""Scale-out benchmark: scored records per second with 1, 2 and 3 worker processes on one Redis, and the
cluster-wide judge budget held by several receivers.

Everything is real: Debian's redis-server (free loopback port, AOF), ``ragtrace-collector serve --role
worker|receiver`` processes, the LLM judge through litellm, and the scripted OpenAI-compatible judge
(``tests/support/scripted_openai.py``) in its own process adding ``--delay`` seconds (200 ms) to every call.
Judge and scoring concurrency per worker are fixed (``--concurrency``), so the judge's latency, not the
CPU, is what one worker is bound by, and adding workers should add throughput near-linearly.

Phase 1 (throughput): for N in ``--workers``: a fresh stream, N workers started and warmed up, then
``--records`` records put on the stream at once (as receivers would); the clock stops when every record
holds its Redis scored mark. Phase 2 (budget): 2 receivers + 3 workers with ``records_per_minute`` set;
``--budget-traces`` traces are sent over OTLP/HTTP by the real OTel exporter, alternating receivers;
admitted, refused and scored counts are read back, and then the same with ``judge_tokens_per_hour``.

    python bench/scale_out.py                      # ~1.5 min on 2 cores
    python bench/scale_out.py --records 60 --workers 1,3
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import redis  # noqa: E402
import yaml  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

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
        t0 = time.perf_counter()
        for i in range(records):
            producer.put(record(i))
        t1 = wait_scored(r, warm + records, 300)
        elapsed = t1 - t0
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=120, help="records scored per worker count (default 120)")
    ap.add_argument("--workers", default="1,2,3", help="worker process counts to compare (default 1,2,3)")
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the scripted judge adds per call (default 0.2)")
    ap.add_argument("--concurrency", type=int, default=4, help="judge and scoring concurrency per worker (default 4)")
    ap.add_argument("--budget-rpm", type=int, default=30, help="records per minute for the budget run (default 30)")
    ap.add_argument(
        "--budget-tokens", type=int, default=4000, help="judge tokens per hour for the budget run (default 4000)"
    )
    ap.add_argument("--budget-traces", type=int, default=60, help="traces sent in each budget run (default 60)")
    ap.add_argument("--skip-budget", action="store_true")
    args = ap.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="ragtrace-scale-out-"))
    judge_port = free_port()
    judge = multiprocessing.get_context("fork").Process(
        target=run_judge_server, args=(judge_port, args.delay), daemon=True
    )
    judge.start()
    wait_for_port(judge_port)
    judge_url = f"http://127.0.0.1:{judge_port}/v1"
    srv = RedisServer(data_dir=workdir / "redis")
    (workdir / "redis").mkdir()
    srv.start()
    try:
        print(
            f"scale-out: {METRIC} (2 judge calls/record), judge +{args.delay * 1000:.0f} ms/call, "
            f"concurrency {args.concurrency}/worker, {os.cpu_count()} CPUs, redis-server {srv.url}"
        )
        counts = [int(n) for n in args.workers.split(",") if n.strip()]
        rows = [throughput(srv, workdir, judge_url, n, args.records, args.concurrency) for n in counts]
        base = rows[0]["rate"] / rows[0]["workers"] if rows else 1.0
        ideal = args.concurrency / (2 * args.delay)
        if rows:
            print(
                f"\n{'workers':>7} {'records':>8} {'seconds':>8} {'records/s':>10} {'speed-up':>9} {'judge calls':>12} {'per worker':>16}"
            )
            for row in rows:  # speed-up relative to the first row's per-worker rate
                print(
                    f"{row['workers']:>7} {row['records']:>8} {row['seconds']:>8.2f} {row['rate']:>10.2f} "
                    f"{row['rate'] / base:>8.2f}x {int(row['calls']):>12} {'/'.join(str(int(x)) for x in row['per_worker']):>16}"
                )
            print(
                f"(one worker's latency-bound ceiling: {ideal:.1f} records/s; per-worker counts include the warm-up; "
                f"scored exactly once: evaluations == records in every row: "
                f"{all(int(r_['evaluations']) == r_['records'] for r_ in rows)})"
            )

        if not args.skip_budget:
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
    finally:
        srv.cleanup()
        os.kill(judge.pid, signal.SIGTERM)
        judge.join(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Collector ingest benchmark: OTLP/HTTP protobuf load from a separate process, scoring off.

    python3 bench/collector_ingest.py [--seconds 10] [--sampling-rate 0.01]

Starts ``ragtrace-collector serve --role receiver`` as its own process, and drives it from another
process with realistic ragtrace-shaped traces (pipeline + retriever with 5 documents of ~1 KB +
generator; 170 traces = 510 spans per request, like a BatchSpanProcessor export). Prints:

1. In-process ceilings on the same bodies: upb decode only; the floor (decode, then each attribute's key and value
   read and nothing kept: what any CPython reader pays, see :func:`read_every_attribute`); decode + span
   extraction; the text-free record summary every trace gets; the full record only sampled traces get. Then where a
   span's CPU goes on the served path, stage by stage, in microseconds (:func:`span_costs`), beside what a tenth of
   decoding allows.
2. Sustainable throughput: closed loop, a few connections sending back to back; spans accepted per
   second of wall time and per CPU-second of the collector process (= per core).
3. Latency at 0.5× and 2× that rate, open loop (requests sent on schedule whether or not earlier ones
   finished): p50/p99, share shed (503 + Retry-After), and the collector's RSS before and after —
   overload must shed, not queue unboundedly.
4. The assembly journal's cost (``--journal-cost`` alone runs only this): two collectors, journal on (the
   default) and off, driven in alternating closed-loop rounds with the same bodies; spans per collector
   CPU-second each, and the journal's share of ingest CPU (target <= 15%).
5. Against Arize Phoenix (``--against-phoenix`` alone runs only this; Phoenix from ``.phoenix-venv``, built by
   ``scripts/phoenix/build.sh``, served on loopback from a temporary working directory): bodies made by the
   ragtrace SDK itself (``--bodies sdk``, fresh trace and span ids every POST) sent in rounds that alternate
   between ragtrace-collector (receiver, at ``--sampling-rate`` and at 1.0, every trace's record queued) and
   Phoenix, a fixed number of requests per round each (``--requests``, ``--phoenix-requests``: Phoenix stores
   two orders of magnitude fewer spans per second, and refuses past 20,000 queued). For each: spans per second
   and per CPU-second of the server's process tree while accepting (first request to last 200), and all-in,
   until stored (ragtrace: every trace summarised and every sampled record committed to its queue; Phoenix:
   its GraphQL span count), each against upb decoding the same bodies in this process, in the same run.

6. Against another checkout (``--against-tree DIR`` alone runs only this): this checkout's collector and DIR's
   (e.g. a copy of ``collector/`` and ``ragtrace/`` from before a change) in alternating closed-loop rounds on the
   same bodies; spans per collector CPU-second each, against upb decoding in the same run.

``--json-out FILE`` appends the figures and their anchors for ``bench/summary.py``.
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
sys.path.insert(0, str(REPO / "bench"))

from summary import add_json_out, emit  # noqa: E402

from tests.support.net import free_port  # noqa: E402

TRACES_PER_REQUEST = 170
DOC_BYTES = 1000


# Words the bodies' documents and answers are made of (both body builders).
WORDS = (
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
)


# --- realistic spans ------------------------------------------------------------------------------
def template_request(traces: int = TRACES_PER_REQUEST):
    """An ExportTraceServiceRequest of ragtrace-shaped traces, and the trace ids used in it."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(1)
    words = WORDS

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


def sdk_request(traces: int = TRACES_PER_REQUEST):
    """An ExportTraceServiceRequest made by the ragtrace SDK itself: ``traces`` requests of a pipeline calling a
    retriever (5 documents of ~1 KB) and a generator (OpenAI-shaped reply with usage), exported by the SDK's own
    BatchSpanProcessor to an in-memory exporter and encoded by the OTLP exporter's encoder, as the SDK sends them."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import ragtrace

    rng = random.Random(1)
    words = WORDS

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n // 6))[:n]

    kept = InMemorySpanExporter()
    handle = ragtrace.init(service_name="bench-bot", exporter=kept, set_global=False, max_queue_size=100_000)

    @ragtrace.retriever(name="search")
    def search(query: str, t: int) -> list[dict]:
        return [
            {
                "id": f"doc-{t}-{i}",
                "content": text(DOC_BYTES),
                "score": 0.9 - i * 0.1,
                "metadata": {"source": f"kb/{i}.md"},
            }
            for i in range(5)
        ]

    @ragtrace.generator(name="answer", model="gpt-4o-mini", provider="openai")
    def answer(question: str, contexts: list[str]) -> dict:
        message = {"role": "assistant", "content": text(300)}
        usage = {"prompt_tokens": 1450, "completion_tokens": 64}
        return {"model": "gpt-4o-mini", "choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}

    @ragtrace.pipeline(name="support")
    def support(question: str, t: int) -> str:
        ragtrace.annotate(session_id=f"s-{t % 50}", user_id=f"u-{t % 200}")
        docs = search(question, t)
        return answer(question, [d["content"] for d in docs])["choices"][0]["message"]["content"]

    for t in range(traces):
        support(f"What does the warranty cover for product {t}?", t)
    handle.force_flush(30)
    spans = kept.get_finished_spans()
    handle.shutdown()
    return encode_spans(spans)


class BodyFactory:
    """Serialises a request once; each body gets fresh random trace and span ids patched in place (cheap), so every
    POST is new traces to the server (Phoenix keeps one row per span id and drops repeats). ``source``: ``template``
    (the hand-built ragtrace-shaped spans of :func:`template_request`) or ``sdk`` (:func:`sdk_request`)."""

    def __init__(self, source: str = "template", drop_roots: bool = False) -> None:
        req = sdk_request() if source == "sdk" else template_request()[0]
        if drop_roots:  # traces whose root never comes: they stay in assembly (bench/scale_out.py's RSS section)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    kept = [span for span in ss.spans if span.parent_span_id]
                    del ss.spans[:]
                    ss.spans.extend(kept)
        spans = [span for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans]
        self.spans = len(spans)
        self.traces = len({span.trace_id for span in spans})
        self.template = req.SerializeToString()
        ids = {span.trace_id for span in spans} | {span.span_id for span in spans}
        ids |= {span.parent_span_id for span in spans if span.parent_span_id}
        self.patches: list[tuple[int, list[int]]] = []  # (id length, offsets of that id in the template)
        seen: set[int] = set()
        for value in sorted(ids):
            offs, pos = [], self.template.find(value)
            while pos >= 0:
                offs.append(pos)
                pos = self.template.find(value, pos + 1)
            assert offs, "every id is on the wire"
            assert not seen.intersection(offs), "ids do not overlap"
            seen.update(offs)
            self.patches.append((len(value), offs))
        self.id_bytes = sum(n for n, _ in self.patches)

    def body(self) -> bytes:
        out = bytearray(self.template)
        fresh = os.urandom(self.id_bytes)
        at = 0
        for n, offs in self.patches:
            new = fresh[at : at + n]
            at += n
            for off in offs:
                out[off : off + n] = new
        return bytes(out)


# --- the collector process ------------------------------------------------------------------------
def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_pids(root: int) -> list[int]:
    """``root`` and every process descended from it (from /proc: Phoenix's workers, if it starts any)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its descendants, with those of descendants already exited and reaped."""
    total = 0.0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


def tree_rss_mb(root: int) -> float:
    return sum(proc_rss_mb(pid) for pid in tree_pids(root) if os.path.exists(f"/proc/{pid}"))


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_collector(
    data_dir: str,
    sampling_rate: float,
    max_pending: int,
    extra_env: dict[str, str] | None = None,
    role: str = "receiver",
    tree: Path = REPO,
):
    """A collector of checkout ``tree`` (this one by default; ``--against-tree`` names another)."""
    http, grpc_port, metrics = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        **(extra_env or {}),
        "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "collector")]),  # that checkout's code first
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
async def _load(
    urls: list[str],
    mode: str,
    seconds: float,
    concurrency: int,
    rate: float,
    out,
    bodies: str,
    requests: int,
    retry_after: bool,
) -> None:
    """Sends bodies (fresh ids each) to ``urls`` in turn: ``closed`` (``concurrency`` connections back to back for
    ``seconds``, or until ``requests`` were sent when that is set) or ``open`` (``rate`` requests/s on schedule).
    ``retry_after``: a closed-loop connection refused with 503 waits the Retry-After it was given, as OTel exporters
    do, rather than asking again at once."""
    import aiohttp

    factory = BodyFactory(bodies)
    headers = {"Content-Type": "application/x-protobuf"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sent = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            nonlocal sent
            url = urls[sent % len(urls)]
            sent += 1
            body = factory.body()
            t = time.perf_counter()
            wait = 0.0
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    status = r.status
                    if status == 503 and retry_after:
                        wait = float(r.headers.get("Retry-After", "1"))
            except aiohttp.ClientError:
                status = 0
            latencies.append(time.perf_counter() - t)
            statuses[status] = statuses.get(status, 0) + 1
            if wait:
                await asyncio.sleep(min(wait, max(0.0, seconds - (time.perf_counter() - start))))

        out.put("started")  # the caller starts its CPU clocks now: the loader's own start-up is not counted
        start = time.perf_counter()
        if mode == "closed":

            async def worker() -> None:
                while (sent < requests) if requests else (time.perf_counter() - start < seconds):
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


def _load_process(urls, mode, seconds, concurrency, rate, out, bodies, requests, retry_after) -> None:
    asyncio.run(_load(urls, mode, seconds, concurrency, rate, out, bodies, requests, retry_after))


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def drive_timing_cpu(url: str, seconds: float, connections: int, bodies: str, pid: int) -> tuple[dict, float, float]:
    """A closed-loop run and the server process's CPU seconds read as the load starts and as it ends."""
    mark: dict[str, float] = {}
    res = drive(
        url,
        "closed",
        seconds,
        connections,
        bodies=bodies,
        on_start=lambda: mark.update(start=proc_cpu_seconds(pid)),
        on_end=lambda: mark.update(end=proc_cpu_seconds(pid)),
    )
    return res, mark["start"], mark["end"]


def drive(
    url: str | list[str],
    mode: str,
    seconds: float,
    concurrency: int = 4,
    rate: float = 0.0,
    *,
    bodies: str = "template",
    requests: int = 0,
    retry_after: bool = False,
    on_start=None,
    on_end=None,
) -> dict:
    """Runs :func:`_load` in a process of its own; ``on_start`` is called just before its first request and
    ``on_end`` as soon as its last reply is in (before the loader process exits), to bracket the servers' clocks."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    urls = [url] if isinstance(url, str) else list(url)
    p = ctx.Process(
        target=_load_process, args=(urls, mode, seconds, concurrency, rate, out, bodies, requests, retry_after)
    )
    p.start()
    assert out.get(timeout=120) == "started"
    if on_start is not None:
        on_start()
    result = out.get(timeout=seconds + 900)
    if on_end is not None:
        on_end()
    p.join()
    return result


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- in-process ceilings --------------------------------------------------------------------------
def read_every_attribute(request) -> int:
    """The least any Python reader of OTLP does after upb: touch each span's ids and times and each attribute's key
    and string value, keeping nothing. Every record needs some attributes (model, tokens, roles), and which ones is
    only known from the keys, so no design in CPython reads a span for less: the floor the ingest ratio is read
    against."""
    n = 0
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                n += len(sp.trace_id) + len(sp.span_id) + (sp.end_time_unix_nano > sp.start_time_unix_nano)
                for kv in sp.attributes:
                    n += len(kv.key) + len(kv.value.string_value)
    return n


def ceilings(repeat: int = 20, bodies: str = "template") -> list[tuple[str, float]]:
    from ragtrace_collector.processor.conventions import build_record, build_summary
    from ragtrace_collector.receiver.decode import extract_spans, parse_protobuf

    factory = BodyFactory(bodies)
    bodies = [factory.body() for _ in range(repeat)]
    rows = []
    t = time.process_time()
    for b in bodies:
        parse_protobuf(b)
    rows.append(("upb decode only", factory.spans * repeat / (time.process_time() - t)))
    t = time.process_time()
    for b in bodies:
        read_every_attribute(parse_protobuf(b))
    rows.append(("decode + read every attribute (floor)", factory.spans * repeat / (time.process_time() - t)))
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


def span_costs(repeat: int = 30, bodies: str = "template", sampling_rate: float = 0.01) -> list[tuple[str, float]]:
    """Where a span's CPU goes on the served path, in process, stage by stage (microseconds a span): the receiver's
    decode and extraction, assembly, the joins, each completed trace's summary, its latency metrics and its sampling
    decision, the sampled records built, and freeing what was kept; under the served collector's GC settings
    (``cli.serve.tune_gc``), restored after. What the HTTP server and the journal add is the served figure's rest."""
    import gc

    from prometheus_client import CollectorRegistry

    from ragtrace_collector.cli.serve import tune_gc
    from ragtrace_collector.config import SamplingConfig
    from ragtrace_collector.processor.assembly.memory import InMemoryAssemblyState
    from ragtrace_collector.processor.pipeline import Pipeline
    from ragtrace_collector.processor.records import record_of, summary_of
    from ragtrace_collector.processor.sampling.sampler import Sampler
    from ragtrace_collector.receiver.decode import extract_spans, parse_protobuf
    from ragtrace_collector.telemetry.ingest import IngestMetrics

    factory = BodyFactory(bodies)
    payloads = [factory.body() for _ in range(repeat)]
    spans = factory.spans * repeat
    metrics = IngestMetrics(CollectorRegistry())
    now = [0.0]
    state = InMemoryAssemblyState(grace_seconds=0.0, max_traces=10**6, max_bytes=10**12)
    pipeline = Pipeline(state, metrics, clock=lambda: now[0])
    sampler = Sampler(SamplingConfig(rate=sampling_rate), observer=metrics)
    seconds: dict[str, float] = {}

    def timed(stage: str, started: float) -> None:
        seconds[stage] = seconds.get(stage, 0.0) + time.process_time() - started

    threshold = gc.get_threshold()
    tune_gc()
    try:
        for payload in payloads:
            t = time.process_time()
            request = parse_protobuf(payload)
            timed("upb decode", t)
            t = time.process_time()
            decoded = extract_spans(request)
            del request
            timed("span extraction (receiver)", t)
            t = time.process_time()
            pipeline.add(decoded)
            timed("assembly: add", t)
        now[0] = 100.0
        t = time.process_time()
        completed = pipeline.completed()
        timed("assembly: pop, joins, classification", t)
        t = time.process_time()
        summaries = [summary_of(c) for c in completed]
        timed("record summary (every trace)", t)
        t = time.process_time()
        metrics.observe_records(summaries)
        timed("latency metrics (every trace)", t)
        t = time.process_time()
        decisions = [sampler.decide(summary) for summary in summaries]
        sampler.count(list(zip(summaries, decisions)))
        timed("sampling decision", t)
        t = time.process_time()
        records = [record_of(c, d.weight) for c, d in zip(completed, decisions) if d.sampled]
        timed("full records (sampled only)", t)
        t = time.process_time()
        del completed, summaries, decisions, records, decoded
        gc.collect()
        timed("freeing what was kept", t)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    return [(stage, s / spans * 1e6) for stage, s in seconds.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="duration of each load phase")
    ap.add_argument("--connections", type=int, default=4, help="closed-loop connections")
    ap.add_argument("--sampling-rate", type=float, default=0.01, help="collector sampling rate (records queued)")
    ap.add_argument("--max-pending", type=int, default=16, help="collector limits.max_pending_requests (default 16)")
    ap.add_argument("--journal-cost", action="store_true", help="only section 4: the journal on vs off")
    ap.add_argument(
        "--rounds", type=int, default=4, help="alternating rounds per server in sections 4 and 5 (default 4)"
    )
    ap.add_argument(
        "--sustained-only",
        action="store_true",
        help="sections 1 and 2 only (short runs to interleave before/after comparisons)",
    )
    ap.add_argument(
        "--against-phoenix",
        action="store_true",
        help="only section 5: the same bodies to ragtrace-collector and to Arize Phoenix (.phoenix-venv), interleaved",
    )
    ap.add_argument(
        "--bodies",
        choices=("template", "sdk"),
        help="template: hand-built ragtrace-shaped spans (sections 1-4's default); sdk: made by the ragtrace SDK "
        "(section 5's default)",
    )
    ap.add_argument("--requests", type=int, default=40, help="section 5: requests per round to each ragtrace collector")
    ap.add_argument(
        "--phoenix-requests",
        type=int,
        default=6,
        help="section 5: requests per round to Phoenix (it stores ~150 spans/s)",
    )
    ap.add_argument("--phoenix-timeout", type=float, default=900, help="section 5: seconds to wait for a round's spans")
    ap.add_argument(
        "--against-tree",
        metavar="DIR",
        help="only section 6: this checkout's collector against the one of checkout DIR (e.g. a copy of the code "
        "before a change), alternating rounds on the same bodies (sdk unless --bodies)",
    )
    ap.add_argument("--quick", action="store_true", help="shorter phases and fewer rounds (noisier)")
    add_json_out(ap)
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = min(args.seconds, 4.0), min(args.rounds, 2)
        args.requests, args.phoenix_requests = min(args.requests, 20), min(args.phoenix_requests, 4)
    if args.against_phoenix:
        return against_phoenix(args)
    if args.against_tree:
        return against_tree(args)
    if args.journal_cost:
        return journal_cost(args)

    print("== in-process ceilings (one core, same bodies) ==")
    rows = ceilings(bodies=args.bodies or "template")
    base = rows[0][1]
    for name, rate in rows:
        print(f"  {name:<38} {rate:>12,.0f} spans/s   {rate / base:6.2f}x of decode")

    print("\n== where a span's CPU goes (in process, stage by stage, the served collector's GC settings) ==")
    costs = span_costs(bodies=args.bodies or "template", sampling_rate=args.sampling_rate)
    total = sum(us for _, us in costs)
    for stage, us in costs:
        print(f"  {stage:<38} {us:8.2f} us a span  {100 * us / total:5.1f}%")
    print(
        f"  {'all of them':<38} {total:8.2f} us a span  = {1e6 / total:,.0f} spans/s, "
        f"{1e6 / total / base:.3f}x of decode (a tenth of decode is {1e6 / base * 10:.2f} us a span)"
    )
    emit(
        args.json_out,
        "collector_ingest",
        "the served path's stages, in process (no HTTP, no journal)",
        1e6 / total,
        "spans/s",
        "upb decode",
        base,
    )

    tmp = tempfile.mkdtemp(prefix="ragtrace-bench-")
    proc, http, metrics = start_collector(tmp, args.sampling_rate, args.max_pending)
    url = f"http://127.0.0.1:{http}/v1/traces"
    try:
        rss_start = proc_rss_mb(proc.pid)
        bodies = args.bodies or "template"
        drive(url, "closed", 2.0, args.connections, bodies=bodies)  # warm-up
        res, cpu0, cpu1 = drive_timing_cpu(url, args.seconds, args.connections, bodies, proc.pid)
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
        floor = rows[1][1]
        print(f"  the floor / upb decode {floor / base:7.3f}x  (decode + read every attribute, in process: no CPython")
        print("                                   reader of these bodies ingests faster, whatever it keeps)")
        emit(
            args.json_out,
            "collector_ingest",
            "spans per collector CPU-s, closed loop",
            per_core,
            "spans/CPU-s",
            "upb decode",
            base,
        )
        emit(
            args.json_out,
            "collector_ingest",
            "the floor: decode + read every attribute, in process",
            floor,
            "spans/s",
            "upb decode",
            base,
        )
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
            res = drive(url, "open", args.seconds, concurrency=256, rate=rps, bodies=bodies)
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
        stop_process(proc)
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
            drive(url, "closed", 2.0, args.connections, bodies=args.bodies or "template")  # warm-up
        for _ in range(args.rounds):
            for journal, proc, url, _ in started:
                cpu0 = proc_cpu_seconds(proc.pid)
                res = drive(url, "closed", args.seconds, args.connections, bodies=args.bodies or "template")
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
        emit(
            args.json_out,
            "collector_ingest",
            "journal on: spans per CPU-s",
            rate["true"],
            "spans/CPU-s",
            "journal off",
            rate["false"],
        )
        on_dir = started[0][3]
        segments = list(Path(on_dir, "journal").glob("segment-*.log"))
        print(
            f"  journal on disk after the load: {len(segments)} segments, {sum(p.stat().st_size for p in segments) / 1e6:.1f} MB"
        )
    finally:
        for _, proc, _, _ in started:
            stop_process(proc)
    return 0


def against_tree(args: argparse.Namespace) -> int:
    """Section 6: this checkout's collector against another checkout's (``--against-tree DIR``, e.g. a copy of the
    code before a change) on the same bodies, in alternating closed-loop rounds (so machine noise falls on both):
    spans accepted per collector CPU-second each, and each against upb decoding the same bodies in this process."""
    bodies = args.bodies or "sdk"
    other = Path(args.against_tree).resolve()
    print(
        f"== 6. this checkout against {other} ({args.rounds} alternating rounds of {args.seconds:.0f} s, {bodies}) =="
    )
    anchor = ceilings(bodies=bodies)[0][1]
    print(f"  anchor: upb decode only, in this process  {anchor:>12,.0f} spans/s")
    started = []
    try:
        for name, tree in (("this checkout", REPO), ("other tree", other)):
            data_dir = tempfile.mkdtemp(prefix="ragtrace-bench-tree-")
            proc, http, _ = start_collector(data_dir, args.sampling_rate, args.max_pending, tree=tree)
            started.append((name, proc, f"http://127.0.0.1:{http}/v1/traces"))
        totals = {name: [0, 0.0] for name, *_ in started}  # spans accepted, CPU seconds
        for _, _, url in started:
            drive(url, "closed", 2.0, args.connections, bodies=bodies)  # warm-up
        for rnd in range(args.rounds):
            order = started if rnd % 2 == 0 else started[::-1]  # each leads a round in turn
            for name, proc, url in order:
                res, cpu0, cpu1 = drive_timing_cpu(url, args.seconds, args.connections, bodies, proc.pid)
                totals[name][0] += res["statuses"].get(200, 0) * res["spans_per_request"]
                totals[name][1] += cpu1 - cpu0
        rate = {name: spans / max(1e-9, cpu) for name, (spans, cpu) in totals.items()}
        for name, (spans, cpu) in totals.items():
            print(
                f"  {name:<14} {rate[name]:>10,.0f} spans per collector CPU-second ({spans:,} spans, {cpu:.1f} s CPU)"
                f"   {rate[name] / anchor:.4f}x of upb decode"
            )
        print(f"  this checkout / other tree: {rate['this checkout'] / rate['other tree']:.2f}x")
        emit(
            args.json_out,
            "collector_ingest --against-tree",
            "spans per collector CPU-s, this checkout",
            rate["this checkout"],
            "spans/CPU-s",
            "other tree",
            rate["other tree"],
        )
    finally:
        for _, proc, _ in started:
            stop_process(proc)
    return 0


# --- 5. against Arize Phoenix ---------------------------------------------------------------------
def scrape(metrics_port: int) -> dict[str, float]:
    """Sum of every sample of each metric name on the collector's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


class RagtraceTarget:
    """``ragtrace-collector serve --role receiver``; a trace is stored once it has been assembled and summarised
    (latency metrics), and, when sampled, its record committed to the SQLite queue that workers score from."""

    def __init__(self, sampling_rate: float, spans_per_trace: float) -> None:
        self.name = f"ragtrace (sampling {sampling_rate:g})"
        self.data_dir = tempfile.mkdtemp(prefix="ragtrace-bench-phoenix-")
        env = {"RAGTRACE_QUEUE__MAX_DEPTH": "10000000"}  # at rate 1 every trace is a record: none refused as full
        self.proc, http, self.metrics = start_collector(self.data_dir, sampling_rate, 16, extra_env=env)
        self.pid = self.proc.pid
        self.url = f"http://127.0.0.1:{http}/v1/traces"
        self.spans_per_trace = spans_per_trace
        self.poll_interval = 0.1  # a /metrics scrape and a read of the queue file

    def stored_spans(self) -> int:
        m = scrape(self.metrics)
        summarised = m.get("ragtrace_traces_received_total", 0.0)
        if self.queued() < m.get("ragtrace_traces_sampled_total", 0.0):
            summarised = 0.0  # sampled records still being committed
        return int(summarised * self.spans_per_trace)

    def queued(self) -> int:
        """Records committed to the queue file (a receiver serves no queue depth: read the file, read-only)."""
        import sqlite3

        path = Path(self.data_dir) / "queue.sqlite"
        if not path.exists():
            return 0
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            row = db.execute("SELECT n FROM queue_depth WHERE one = 1").fetchone()
        except sqlite3.OperationalError:  # not created yet
            return 0
        finally:
            db.close()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        stop_process(self.proc)


class PhoenixTarget:
    """Arize Phoenix (``.phoenix-venv``, ``scripts/phoenix/build.sh``) serving on loopback from a temporary working
    directory (SQLite), as tests/support/phoenix.py starts it; stored = the span count its GraphQL API reports."""

    def __init__(self) -> None:
        from tests.support.phoenix import PhoenixServer

        self.name = f"Phoenix {phoenix_version()}"
        self.server = PhoenixServer.start(Path(tempfile.mkdtemp(prefix="ragtrace-bench-phoenix-")))
        self.pid = self.server.proc.pid
        self.url = f"{self.server.base_url}/v1/traces"
        self.polls = 0
        self.poll_interval = 0.5  # a COUNT over its spans table each time

    def stored_spans(self) -> int:
        self.polls += 1
        data = self.server.graphql("query { projects { edges { node { recordCount } } } }")
        return sum(e["node"]["recordCount"] for e in data["projects"]["edges"])

    def stop(self) -> None:
        self.server.stop()


def phoenix_version() -> str:
    freeze = REPO / ".phoenix-venv" / "freeze.txt"
    lines = freeze.read_text().splitlines() if freeze.exists() else []
    return next((line.split("==")[1] for line in lines if line.lower().startswith("arize-phoenix==")), "?")


def wait_stored(target, want: int, timeout: float, interval: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        have = target.stored_spans()
        if have >= want:
            return have
        if time.monotonic() > deadline:
            raise TimeoutError(f"{target.name}: {have} of {want} spans stored after {timeout:.0f} s")
        time.sleep(interval)


def against_phoenix(args: argparse.Namespace) -> int:
    """Section 5: the same bodies to ragtrace-collector and to Arize Phoenix, in interleaved rounds, with the
    upb decoding anchor measured in the same run."""
    from tests.support.phoenix import missing_reason

    bodies = args.bodies or "sdk"
    factory = BodyFactory(bodies)
    spans_per_trace = factory.spans / factory.traces
    print(
        f"== 5. ragtrace-collector against Arize Phoenix, the same bodies ({bodies}: {factory.traces} traces, "
        f"{factory.spans} spans, {len(factory.template) / 1e6:.2f} MB a request, fresh trace and span ids each) =="
    )
    anchor = ceilings(bodies=bodies)[0][1]
    print(f"  anchor: upb decode only, in this process  {anchor:>12,.0f} spans/s")
    reason = missing_reason()
    if reason:
        print(f"  Phoenix not measured: {reason}")
        emit(args.json_out, "collector_ingest --against-phoenix", f"not measured: {reason[:70]}", None, "")
        return 0
    targets: list = []
    try:
        for rate in sorted({args.sampling_rate, 1.0}):
            targets.append(RagtraceTarget(rate, spans_per_trace))
        targets.append(PhoenixTarget())
        sent_per_round = {
            t.name: args.phoenix_requests if isinstance(t, PhoenixTarget) else args.requests for t in targets
        }
        totals = {
            t.name: dict(spans=0, cpu_accept=0.0, wall_accept=0.0, cpu_all=0.0, wall_all=0.0, st={}) for t in targets
        }
        for t in targets:  # warm-up: first connections, first writes, Phoenix's project row
            before = t.stored_spans()
            res = drive(t.url, "closed", 0, args.connections, bodies=bodies, requests=2)
            wait_stored(t, before + res["statuses"].get(200, 0) * factory.spans, args.phoenix_timeout, t.poll_interval)
        for rnd in range(args.rounds):
            order = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]  # each leads a round in turn
            for t in order:
                stored0 = t.stored_spans()
                mark: dict[str, float] = {}

                def start_clocks(t=t, mark=mark) -> None:
                    mark["cpu"], mark["t"] = tree_cpu_seconds(t.pid), time.perf_counter()

                def stop_clocks(t=t, mark=mark) -> None:
                    mark["cpu_end"], mark["t_end"] = tree_cpu_seconds(t.pid), time.perf_counter()

                res = drive(
                    t.url,
                    "closed",
                    0,
                    args.connections,
                    bodies=bodies,
                    requests=sent_per_round[t.name],
                    on_start=start_clocks,
                    on_end=stop_clocks,
                )
                cpu_accepted, t_accepted = mark["cpu_end"], mark["t_end"]
                accepted = res["statuses"].get(200, 0) * factory.spans
                wait_stored(t, stored0 + accepted, args.phoenix_timeout, t.poll_interval)
                cpu_stored, t_stored = tree_cpu_seconds(t.pid), time.perf_counter()
                tot = totals[t.name]
                tot["spans"] += accepted
                tot["cpu_accept"] += cpu_accepted - mark["cpu"]
                tot["wall_accept"] += t_accepted - mark["t"]
                tot["cpu_all"] += cpu_stored - mark["cpu"]
                tot["wall_all"] += t_stored - mark["t"]
                for code, n in res["statuses"].items():
                    tot["st"][code] = tot["st"].get(code, 0) + n
                print(
                    f"  round {rnd + 1} {t.name:<26} {accepted:>7,} spans: accepted in {t_accepted - mark['t']:6.2f} s "
                    f"({cpu_accepted - mark['cpu']:6.2f} CPU-s), stored after {t_stored - mark['t']:7.2f} s "
                    f"({cpu_stored - mark['cpu']:7.2f} CPU-s)"
                )
        print(
            f"\n  {'server':<26} {'spans':>8} {'accepted/s':>11} {'per CPU-s':>10} {'x upb':>7}   "
            f"{'stored/s':>9} {'per CPU-s':>10} {'x upb':>7}  {'RSS MB':>7}  statuses"
        )
        rates: dict[str, tuple[float, float]] = {}
        for t in targets:
            tot = totals[t.name]
            accept = tot["spans"] / max(1e-9, tot["cpu_accept"])
            allin = tot["spans"] / max(1e-9, tot["cpu_all"])
            rates[t.name] = (accept, allin)
            print(
                f"  {t.name:<26} {tot['spans']:>8,} {tot['spans'] / tot['wall_accept']:>11,.0f} {accept:>10,.0f} "
                f"{accept / anchor:>7.4f}   {tot['spans'] / tot['wall_all']:>9,.0f} {allin:>10,.0f} {allin / anchor:>7.4f}  "
                f"{tree_rss_mb(t.pid):>7.0f}  {tot['st']}"
            )
            early = "answers before decoding" if isinstance(t, PhoenixTarget) else ""
            for what, value, note in (("while accepting", accept, early), ("all-in, until stored", allin, "")):
                emit(
                    args.json_out,
                    "collector_ingest --against-phoenix",
                    f"{t.name}: spans per server CPU-s, {what}",
                    value,
                    "spans/CPU-s",
                    "upb decode",
                    anchor,
                    note=note,
                )
        phoenix = targets[-1]
        print(
            "  (accepted: from the first request to the last 200; stored: until the server holds them all. Phoenix "
            "answers 200 before decoding the spans, so its work comes after the accept window (a few clock ticks: not a "
            "figure to read); its span count was "
            f"polled {phoenix.polls} times over GraphQL, every {phoenix.poll_interval} s, and that CPU is counted. ragtrace waits "
            "assembly.grace_seconds (1 s) for stragglers after each root span, wall time not CPU.)"
        )
        for t in targets[:-1]:
            ratio = rates[t.name][1] / rates[phoenix.name][1]
            print(f"  {t.name} / {phoenix.name}, all-in spans per CPU-second: {ratio:,.1f}x")
            emit(
                args.json_out,
                "collector_ingest --against-phoenix",
                f"{t.name}: all-in spans per CPU-s",
                rates[t.name][1],
                "spans/CPU-s",
                phoenix.name,
                rates[phoenix.name][1],
            )
    finally:
        for t in targets:
            t.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

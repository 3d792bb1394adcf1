"""SDK overhead, side by side in one run (python bench/sdk_overhead.py [--quick]).

1. Call cost: bare call; raw OpenTelemetry span with 5 string attributes; ``@ragtrace.retriever``
   returning 5 documents of 1 KB. All spans go through a BatchSpanProcessor to a discarding
   exporter; figures are CPU time of the calling thread, best of interleaved batches.
2. Streaming: ``@ragtrace.generator`` over a generator of N chunks vs the bare generator;
   marginal cost per chunk = slope between 1,000 and 10,000 chunks, traced minus bare.
3. Export: total process CPU (all threads: app + BatchSpanProcessor + OTLP/HTTP encoding and
   sending) per traced request with the real OTLP/HTTP exporter to a local sink running in a
   separate process.
4. Loss: share of spans dropped or failed at a steady 500 requests/s with a healthy, a slow
   (1 s per export) and a dead sink.
5. Side by side (``--peers-only`` runs just this): the same app (a pipeline calling a retriever
   that returns 5 x 1 KB documents, then a streaming generator given their texts) traced by
   ragtrace, OpenLLMetry (``@workflow``/``@task``), OpenInference (``@tracer.chain``/
   ``.retriever``/``.llm``) and Langfuse (``@observe``), each in a process of its own
   (``PEER_SCRIPT``), normalised by a raw span made in that same process: thread CPU per call,
   process CPU per request with the real OTLP/HTTP exporter to a local sink (against the same
   three spans made raw), and OTLP protobuf bytes per request. For ragtrace the export phase uses what
   ``ragtrace.init(endpoint=...)`` builds (its provider, bounded processor and OTLP/HTTP exporter with
   ragtrace's protobuf encoder, ``ragtrace.otlp_encoding``), while its raw spans stay plain OpenTelemetry
   (a TracerProvider of their own with OpenTelemetry's OTLPSpanExporter, in the same process): "× same
   spans raw" is what a user gets with ragtrace against hand-made spans exported the standard way. Phases alternate across the
   tools and repeat (``--repeats``); the best figure of each is kept. Interpreters:
   ``$RAGTRACE_OPENLLMETRY_PYTHON`` (default ~/.cache/ragtrace-bench/openllmetry/bin/python:
   ``pip install --no-deps traceloop-sdk==0.62.4`` plus opentelemetry-api/sdk/
   exporter-otlp-proto-http/-grpc 1.45.1, -instrumentation/-semantic-conventions/
   -instrumentation-logging/-threading 0.66b1, opentelemetry-semantic-conventions-ai, aiohttp,
   colorama, cuid, deprecated, jinja2, pydantic, tenacity, httpx: its ~45 per-vendor
   instrumentations do not resolve together and ``@task`` needs none of them);
   ``$RAGTRACE_OPENINFERENCE_PYTHON`` (default ~/.cache/ragtrace-bench/openinference/bin/python:
   openinference-instrumentation 0.1.72, openinference-semantic-conventions 0.1.42,
   opentelemetry-sdk and -exporter-otlp-proto-http 1.45.2); ``$RAGTRACE_LANGFUSE_PYTHON``
   (default ``.peers/langfuse``, built by ``scripts/peers/build.sh langfuse``). A missing one
   is reported as not measured. With ``$RAGTRACE_BENCH_BASELINE`` set to a folder holding another
   copy of ``ragtrace/``, that copy runs too, interleaved with the others ("ragtrace (baseline)").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult  # noqa: E402

import ragtrace  # noqa: E402
from tests.support.net import free_port, wait_for_port  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from summary import add_json_out, emit  # noqa: E402

DOCS = [
    {
        "id": f"doc-{i}",
        "content": ("lorem ipsum " * 100)[:1024],
        "score": 1.0 - i / 10,
        "metadata": {"source": f"kb/{i}.md"},
    }
    for i in range(5)
]
OL_VENV = Path(
    os.environ.get("RAGTRACE_OPENLLMETRY_PYTHON", Path.home() / ".cache/ragtrace-bench/openllmetry/bin/python")
)


class NullExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def interleaved_us(cases: dict, n: int, rounds: int = 25) -> dict[str, float]:
    """µs of this thread's CPU per call for each case: batches of the cases alternate and the
    best batch counts, so that load from other processes on a shared machine hits every case
    alike (the export thread's work is not in these figures; section 3 measures it)."""
    batch = max(100, n // rounds)
    best = {k: float("inf") for k in cases}
    clock = time.thread_time  # CPU time of this thread: time preempted by other processes is not counted
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = clock()
            for _ in range(batch):
                fn("what is x?")
            best[name] = min(best[name], (clock() - t0) / batch)
    return {k: v * 1e6 for k, v in best.items()}


def bench_calls(n: int) -> dict[str, float]:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=100_000, schedule_delay_millis=200))
    ragtrace.init(tracer_provider=provider, set_global=False)
    tracer = provider.get_tracer("raw")

    def bare(query):
        return DOCS

    def raw(query):
        with tracer.start_as_current_span("raw") as s:
            s.set_attribute("a1", "retriever")
            s.set_attribute("a2", query)
            s.set_attribute("a3", "doc-0")
            s.set_attribute("a4", "doc-1")
            s.set_attribute("a5", "doc-2")
            return DOCS

    traced = ragtrace.retriever(name="search")(bare)
    traced_nocontent = ragtrace.retriever(name="search", capture_content=False)(bare)
    gc.collect()
    out = interleaved_us(
        {
            "bare call": bare,
            "raw OTel span, 5 attrs": raw,
            "@retriever 5x1KB docs": traced,
            "@retriever 5x1KB, capture off": traced_nocontent,
        },
        n,
    )
    provider.shutdown()
    return out


PEER_SCRIPT = r'''
import gc, json, os, sys, time, logging
logging.disable(logging.CRITICAL)
tool, phase, n, endpoint = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if len(sys.argv) > 5:
    sys.path.insert(0, sys.argv[5])
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
DOCS = [{"id": f"doc-{i}", "content": ("lorem ipsum " * 100)[:1024], "score": 1.0 - i / 10,
         "metadata": {"source": f"kb/{i}.md"}} for i in range(5)]
WORDS = ("The answer is in the second passage of the knowledge base " * 2).split()
class NullExporter(SpanExporter):
    def export(self, spans): return SpanExportResult.SUCCESS
    def shutdown(self): pass
class SizeExporter(SpanExporter):
    """Counts the OTLP/protobuf bytes the spans make (what an OTLP/HTTP exporter puts on the wire, uncompressed)."""
    bytes = 0; spans = 0
    def export(self, spans):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        SizeExporter.bytes += len(encode_spans(spans).SerializeToString()); SizeExporter.spans += len(spans)
        return SpanExportResult.SUCCESS
    def shutdown(self): pass
if phase == "export":
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces")
else:
    exporter = SizeExporter() if phase == "bytes" else NullExporter()
version = ""
import importlib.metadata as md
if tool == "ragtrace":
    from opentelemetry.sdk.trace import TracerProvider
    import ragtrace
    provider = TracerProvider()  # the raw spans' (and, but for the export phase, ragtrace's)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000))
    if phase == "export":
        # what a user gets: ragtrace.init()'s own provider, processor and OTLP/HTTP exporter (its encoder included);
        # the raw spans stay plain OpenTelemetry (the provider above, with OpenTelemetry's OTLPSpanExporter)
        handle = ragtrace.init(endpoint=endpoint, set_global=False, max_queue_size=100_000)
        flush = lambda: (handle.force_flush(60.0), provider.force_flush())
    else:
        ragtrace.init(tracer_provider=provider, set_global=False)
        flush = provider.force_flush
    @ragtrace.retriever(name="retrieve")
    def retrieve(query): return DOCS
    @ragtrace.generator(name="generate", model="m")
    def generate(question, contexts):
        for w in WORDS: yield w + " "
    @ragtrace.pipeline(name="rag")
    def rag(question):
        docs = retrieve(question)
        return "".join(generate(question, [d["content"] for d in docs]))
    version = "local"
elif tool == "openllmetry":
    from traceloop.sdk import Traceloop
    from traceloop.sdk.decorators import task, workflow
    Traceloop.init(app_name="bench", exporter=exporter, telemetry_enabled=False, instruments=set())
    from opentelemetry import trace
    provider = trace.get_tracer_provider()
    @task(name="retrieve")
    def retrieve(query): return DOCS
    @task(name="generate")
    def generate(question, contexts):
        for w in WORDS: yield w + " "
    @workflow(name="rag")
    def rag(question):
        docs = retrieve(question)
        return "".join(generate(question, [d["content"] for d in docs]))
    flush = lambda: Traceloop.get_default_span_processor() and provider.force_flush()
    version = md.version("traceloop-sdk")
elif tool == "openinference":
    from openinference.instrumentation import TracerProvider
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=100_000))
    tracer = provider.get_tracer("bench")
    @tracer.retriever(name="retrieve")
    def retrieve(query): return DOCS
    @tracer.llm(name="generate")
    def generate(question, contexts):
        for w in WORDS: yield w + " "
    @tracer.chain(name="rag")
    def rag(question):
        docs = retrieve(question)
        return "".join(generate(question, [d["content"] for d in docs]))
    flush = provider.force_flush
    version = md.version("openinference-instrumentation")
elif tool == "langfuse":
    from opentelemetry.sdk.trace import TracerProvider
    from langfuse import Langfuse, observe
    provider = TracerProvider()
    lf = Langfuse(public_key="pk-lf-bench", secret_key="sk-lf-bench", base_url="http://127.0.0.1:9",
                  tracer_provider=provider, span_exporter=exporter, tracing_enabled=True)
    @observe(name="retrieve", as_type="retriever")
    def retrieve(query): return DOCS
    @observe(name="generate", as_type="generation")
    def generate(question, contexts):
        for w in WORDS: yield w + " "
    @observe(name="rag")
    def rag(question):
        docs = retrieve(question)
        return "".join(generate(question, [d["content"] for d in docs]))
    flush = lf.flush
    version = md.version("langfuse")
raw_tracer = provider.get_tracer("langfuse-sdk" if tool == "langfuse" else "raw")  # Langfuse exports only its own scope's spans
def raw(query):
    with raw_tracer.start_as_current_span("raw") as s:
        for i in range(5): s.set_attribute(f"a{i}", query)
        return DOCS
def raw_rag(question):
    """The same three spans (5 short attributes each), raw: the unit a traced request is compared with."""
    with raw_tracer.start_as_current_span("rag") as s:
        for i in range(5): s.set_attribute(f"a{i}", question)
        with raw_tracer.start_as_current_span("retrieve") as r:
            for i in range(5): r.set_attribute(f"a{i}", question)
            docs = DOCS
        def gen():
            with raw_tracer.start_as_current_span("generate") as g:
                for i in range(5): g.set_attribute(f"a{i}", question)
                for w in WORDS: yield w + " "
        return "".join(gen())
cases = {"raw": raw, "retriever": retrieve, "raw3": raw_rag, "request": rag}
out = {"version": version}
if phase == "calls":
    batch = max(50, n // 25); best = {k: float("inf") for k in cases}
    gc.collect()
    for _ in range(25):
        for name, fn in cases.items():
            t0 = time.thread_time()
            for _ in range(batch): fn("what is x?")
            best[name] = min(best[name], (time.thread_time() - t0) / batch * 1e6)
    out.update(best)
elif phase == "bytes":
    for name in ("raw3", "request"):
        flush(); SizeExporter.bytes = SizeExporter.spans = 0
        for _ in range(50): cases[name]("what is x?")
        flush(); time.sleep(0.2); flush()
        out[name + "_bytes"] = SizeExporter.bytes / 50; out[name + "_spans"] = SizeExporter.spans / 50
elif phase == "export":
    # process CPU (app + export thread + OTLP encoding), alternating rounds, best round
    best = {"raw3": float("inf"), "request": float("inf")}
    rounds = 5
    for _ in range(rounds):
        for name in ("raw3", "request"):
            flush()
            c0 = time.process_time()
            for _ in range(n // rounds): cases[name]("what is x?")
            flush()
            best[name] = min(best[name], (time.process_time() - c0) / (n // rounds) * 1e6)
    out.update({k + "_export": v for k, v in best.items()})
print(json.dumps(out))
'''

# Each tool runs in a process of its own (its own venv): (python, extra sys.path entry or "")
PEER_PYTHONS = {
    "openllmetry": Path(
        os.environ.get("RAGTRACE_OPENLLMETRY_PYTHON", Path.home() / ".cache/ragtrace-bench/openllmetry/bin/python")
    ),
    "openinference": Path(
        os.environ.get("RAGTRACE_OPENINFERENCE_PYTHON", Path.home() / ".cache/ragtrace-bench/openinference/bin/python")
    ),
    "langfuse": Path(os.environ.get("RAGTRACE_LANGFUSE_PYTHON", REPO / ".peers/langfuse/bin/python")),
}


def run_harness(tool: str, phase: str, n: int, endpoint: str = "-") -> dict | str:
    """One phase of :data:`PEER_SCRIPT` for one tool, in its own interpreter; a reason string when it cannot run."""
    if tool.startswith("ragtrace"):
        # "ragtrace (baseline)": the copy of ragtrace/ in the folder $RAGTRACE_BENCH_BASELINE (before and after, interleaved)
        root = os.environ["RAGTRACE_BENCH_BASELINE"] if tool == BASELINE else str(REPO)
        cmd = [sys.executable, "-c", PEER_SCRIPT, "ragtrace", phase, str(n), endpoint, root]
    else:
        py = PEER_PYTHONS[tool]
        if not py.exists():
            return f"not measured: no interpreter at {py} (see this file's docstring for how it was made)"
        cmd = [str(py), "-c", PEER_SCRIPT, tool, phase, str(n), endpoint]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd="/tmp")
    except Exception as exc:
        return f"not measured: {exc!r}"
    if out.returncode != 0:
        return "not measured: " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]
    return json.loads(out.stdout.strip().splitlines()[-1])


BASELINE = "ragtrace (baseline)"
TOOLS = (
    "ragtrace",
    *((BASELINE,) if os.environ.get("RAGTRACE_BENCH_BASELINE") else ()),
    "openllmetry",
    "openinference",
    "langfuse",
)


def bench_peers(n: int, repeats: int) -> dict[str, dict]:
    """Every tool's harness, phases interleaved across tools and repeated (best of the repeats per figure), the
    export phase against one sink process shared by all."""
    results: dict[str, dict] = {t: {} for t in TOOLS}
    failed: dict[str, str] = {}
    sink, port = start_sink()
    try:
        for phase in ("bytes", "calls", "export"):
            for _ in range(1 if phase == "bytes" else repeats):
                for tool in TOOLS:
                    if tool in failed:
                        continue
                    r = run_harness(
                        tool, phase, n if phase == "calls" else max(200, n // 5), f"http://127.0.0.1:{port}"
                    )
                    if isinstance(r, str):
                        failed[tool] = r
                        continue
                    for k, v in r.items():
                        old = results[tool].get(k)
                        results[tool][k] = v if old is None or isinstance(v, str) else min(old, v)
    finally:
        sink.terminate()
        sink.wait()
    for tool, why in failed.items():
        results[tool] = {"error": why}
    return results


def emit_peers(res: dict[str, dict], json_out: Path | None) -> None:
    """Section 5's ratios for bench/summary.py: ragtrace against each tool measured beside it."""
    ours = res.get("ragtrace", {})
    if "error" in ours:
        return
    for tool, r in res.items():
        if tool.startswith("ragtrace") or "error" in r:
            continue
        name = f"{tool} {r['version']}"
        emit(
            json_out,
            "sdk_overhead peers",
            "ragtrace CPU per request incl. export",
            ours["request_export"],
            "µs",
            name,
            r["request_export"],
        )
        emit(
            json_out,
            "sdk_overhead peers",
            "ragtrace OTLP bytes per request",
            ours["request_bytes"],
            "B",
            name,
            r["request_bytes"],
        )
    for tool, r in res.items():
        if "error" in r:
            emit(json_out, "sdk_overhead peers", f"{tool}: {r['error'][:60]}", None, "")


def print_peers(res: dict[str, dict]) -> None:
    print(
        "\n== 5. side by side, each tool in its own process and venv (the same app: rag -> retrieve 5x1KB -> stream) =="
    )
    print("   thread CPU per call (BatchSpanProcessor -> discarding exporter), normalised by that process's raw span;")
    print("   process CPU per request incl. OTLP/HTTP export to a local sink; bytes = OTLP protobuf per request")
    head = f"{'tool':22s} {'raw µs':>7s} {'retr. x raw':>11s} {'req. x raw':>10s} {'req+exp µs':>10s} {'x raw3+exp':>10s} {'bytes/req':>9s}"
    print(head)
    for tool, r in res.items():
        if "error" in r:
            print(f"{tool:22s} {r['error']}")
            continue
        print(
            f"{tool if tool == BASELINE else tool + ' ' + r['version']:22s} {r['raw']:7.2f} {r['retriever'] / r['raw']:11.2f} "
            f"{r['request'] / r['raw']:10.2f} {r['request_export']:10.1f} {r['request_export'] / r['raw3_export']:10.2f} "
            f"{r['request_bytes']:9.0f}"
        )
    ours = res.get("ragtrace", {})
    if "error" in ours:
        return
    for tool, r in res.items():
        if not tool.startswith("ragtrace") and "error" not in r:
            print(
                f"ragtrace / {tool}: request incl. export {ours['request_export'] / r['request_export']:.2f} "
                f"(target < 1), bytes {ours['request_bytes'] / r['request_bytes']:.2f} (target <= 1)"
            )
    print(
        f"ragtrace: request incl. export / the same 3 spans raw = {ours['request_export'] / ours['raw3_export']:.2f} "
        f"(target <= 1.5); @retriever / raw span = {ours['retriever'] / ours['raw']:.2f} (target <= 1.3)"
    )


def bench_streaming(rounds: int = 30) -> dict[str, float]:
    """Per-chunk cost; bare and traced runs of 1,000 and 10,000 chunks alternate (thread CPU time)."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NullExporter(), max_queue_size=100_000))
    ragtrace.init(tracer_provider=provider, set_global=False)

    def bare(prompt, n):
        for _ in range(n):
            yield "tok "

    traced = ragtrace.generator(name="gen", model="m")(bare)
    clock = time.thread_time
    best: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for name, fn in (("bare", bare), ("traced", traced)):
            for n in (1000, 10000):
                t0 = clock()
                for _c in fn("p", n):
                    pass
                el = clock() - t0
                best[(name, n)] = min(best.get((name, n), el), el)
    provider.shutdown()
    slope_bare = (best[("bare", 10000)] - best[("bare", 1000)]) / 9000
    slope_traced = (best[("traced", 10000)] - best[("traced", 1000)]) / 9000
    return {
        "bare generator ns/chunk": slope_bare * 1e9,
        "@generator ns/chunk": slope_traced * 1e9,
        "marginal ns/chunk": (slope_traced - slope_bare) * 1e9,
        "all-in ns/chunk, 1000 chunks incl. span": (best[("traced", 1000)] - best[("bare", 1000)]) / 1000 * 1e9,
    }


SINK_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from tests.support.otlp_sink import OtlpSink
    s = OtlpSink(delay=float(sys.argv[3]))
    s.start_http(int(sys.argv[2]))
    while True:
        time.sleep(3600)
""")


def start_sink(delay: float = 0.0) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SINK_SCRIPT, str(REPO), str(port), str(delay)])
    wait_for_port(port)
    return proc, port


def make_app():
    @ragtrace.retriever(name="retrieve")
    def retrieve(query):
        return DOCS

    @ragtrace.generator(name="generate", model="m")
    def generate(question, contexts):
        for w in ("The answer is in the second passage of the knowledge base " * 2).split():
            yield w + " "

    @ragtrace.pipeline(name="rag")
    def rag(question):
        docs = retrieve(question)
        return "".join(generate(question, [d["content"] for d in docs]))

    def bare_rag(question):
        return "".join(w + " " for w in ("The answer is in the second passage of the knowledge base " * 2).split())

    return rag, retrieve, bare_rag


def bench_export_cpu(n: int) -> dict[str, float]:
    sink, port = start_sink()
    try:
        rag, retrieve, bare_rag = make_app()
        handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False, max_queue_size=100_000)
        tracer = handle.provider.get_tracer("raw")

        def raw(query):
            with tracer.start_as_current_span("raw") as s:
                for i in range(5):
                    s.set_attribute(f"a{i}", query)
                return DOCS

        quiet = ragtrace.retriever(name="retrieve_quiet", capture_content=False)(lambda query: DOCS)
        res = {}
        for name, fn in (
            ("bare request (no tracing)", bare_rag),
            ("raw OTel span, 5 attrs", raw),
            ("@retriever span 5x1KB", retrieve),
            ("@retriever 5x1KB, capture off", quiet),
            ("traced request (3 spans)", rag),
        ):
            handle.force_flush(30)
            c0 = time.process_time()
            for _i in range(n):
                fn("what is x?")
            handle.force_flush(60)
            res[name] = (time.process_time() - c0) / n * 1e6
        stats = handle.stats()
        handle.shutdown(10)
        res["_exported"] = stats["spans_exported"]
        res["_dropped"] = stats["spans_dropped"] + stats["spans_failed"]
        return res
    finally:
        sink.terminate()
        sink.wait()


def bench_drops(seconds: float) -> dict[str, dict]:
    out = {}
    for label in ("healthy sink", "slow sink (1 s/export)", "dead sink"):
        proc = None
        if label == "dead sink":
            port = free_port()
        else:
            proc, port = start_sink(delay=1.0 if label.startswith("slow") else 0.0)
        try:
            rag, _, _ = make_app()
            handle = ragtrace.init(endpoint=f"http://127.0.0.1:{port}", set_global=False, export_timeout_s=2.0)
            rate = 500.0
            n = int(rate * seconds)
            t_start = time.perf_counter()
            lat = []
            for i in range(n):
                target = t_start + i / rate
                now = time.perf_counter()
                if target > now:
                    time.sleep(target - now)
                t0 = time.perf_counter()
                rag("q")
                lat.append(time.perf_counter() - t0)
            lat.sort()
            elapsed = time.perf_counter() - t_start
            handle.force_flush(5)
            handle.shutdown(3)
            st = handle.stats()
            lost = st["spans_dropped"] + st["spans_failed"]
            out[label] = {
                "achieved req/s": n / elapsed,
                "spans": st["spans_ended"],
                "dropped": st["spans_dropped"],
                "failed export": st["spans_failed"],
                "lost share": lost / max(1, st["spans_ended"]),
                "p50 ms": lat[len(lat) // 2] * 1e3,
                "p99 ms": lat[int(len(lat) * 0.99)] * 1e3,
            }
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait()
    return out


def main() -> int:
    import logging

    logging.disable(logging.CRITICAL)  # the exporter logs every failed batch in the dead-sink run
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (noisier)")
    ap.add_argument("--peers-only", action="store_true", help="only section 5 (the tools side by side)")
    ap.add_argument("--repeats", type=int, default=3, help="section 5: rounds over the tools (best figure kept)")
    add_json_out(ap)
    a = ap.parse_args()
    n = 2000 if a.quick else 10000

    if a.peers_only:
        peers = bench_peers(n, a.repeats)
        print_peers(peers)
        emit_peers(peers, a.json_out)
        return 0
    calls = bench_calls(n)
    raw = calls["raw OTel span, 5 attrs"]
    print("\n== 1. per-call cost (µs, best interleaved batch; BatchSpanProcessor -> discarding exporter) ==")
    print(f"{'case':40s} {'µs/call':>9s} {'x raw span':>11s}")
    for k, v in calls.items():
        print(f"{k:40s} {v:9.2f} {v / raw:11.2f}")
    ret = calls["@retriever 5x1KB docs"]
    print(f"@retriever / raw 5-attr span = {ret / raw:.2f} (target <= 1.3)")
    emit(
        a.json_out,
        "sdk_overhead",
        "@retriever 5x1KB docs, thread CPU per call",
        ret,
        "µs",
        "raw OTel span, 5 attrs",
        raw,
    )

    st = bench_streaming()
    print("\n== 2. streaming (@generator over a generator of str chunks) ==")
    for k, v in st.items():
        print(f"{k:40s} {v:9.1f}")
    print(f"marginal per-chunk overhead = {st['marginal ns/chunk']:.0f} ns (target <= 100 ns)")
    emit(
        a.json_out,
        "sdk_overhead",
        "@generator per chunk",
        st["@generator ns/chunk"],
        "ns",
        "bare generator",
        st["bare generator ns/chunk"],
    )

    ex = bench_export_cpu(n // 5)
    print("\n== 3. process CPU per request, real OTLP/HTTP exporter to a local sink (separate process) ==")
    for k, v in ex.items():
        if not k.startswith("_"):
            print(f"{k:40s} {v:9.1f} µs CPU")
    print(f"(spans exported: {ex['_exported']}, lost: {ex['_dropped']})")
    emit(
        a.json_out,
        "sdk_overhead",
        "traced request (3 spans), process CPU incl. OTLP export",
        ex["traced request (3 spans)"],
        "µs",
        "3 x raw OTel span, 5 attrs, incl. export",
        3 * ex["raw OTel span, 5 attrs"],
    )

    dr = bench_drops(2.0 if a.quick else 4.0)
    print("\n== 4. steady 500 requests/s (3 spans each), default queue 2048 ==")
    print(
        f"{'sink':26s} {'req/s':>7s} {'spans':>7s} {'dropped':>8s} {'failed':>7s} {'lost':>7s} {'p50 ms':>7s} {'p99 ms':>7s}"
    )
    for k, row in dr.items():
        print(
            f"{k:26s} {row['achieved req/s']:7.0f} {row['spans']:7d} {row['dropped']:8d} {row['failed export']:7d} "
            f"{row['lost share']:7.1%} {row['p50 ms']:7.3f} {row['p99 ms']:7.3f}"
        )
    for k, row in dr.items():
        emit(a.json_out, "sdk_overhead", f"spans lost at 500 req/s, {k}", 100 * row["lost share"], "%")
    peers = bench_peers(n, a.repeats)
    print_peers(peers)
    emit_peers(peers, a.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

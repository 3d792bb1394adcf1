"""A receiver's wait on Redis per OTLP request, with assembly shared in Redis: one call per trace against one
pipelined round trip per request (``RedisAssemblyState.add_many``), side by side in one run.

The receivers hand a request's traces to assembly on their event loop, so every millisecond spent there is a
millisecond no other request is read. Measured twice: Redis on loopback, and behind a TCP proxy adding
``--delay-ms`` each way (Redis on another host of the same network).

    python bench/redis_assembly_add.py [--traces 170] [--delay-ms 0.25] [--rounds 5]

Everything is real: Debian's redis-server (free loopback port), the collector's ``RedisAssemblyState``, a 3-span
trace per item (as the ragtrace SDK's pipeline → retriever → generator); best of ``--rounds``, the two ways
alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "collector")]

from ragtrace_collector.model.spans import SpanData  # noqa: E402
from ragtrace_collector.processor.assembly.redis_state import RedisAssemblyState  # noqa: E402
from ragtrace_collector.processor.assembly.state import AddItem  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from summary import add_json_out, emit  # noqa: E402


def delaying_proxy(target_port: int, delay_s: float) -> int:
    """A loopback TCP proxy to ``target_port`` that holds every chunk ``delay_s`` before passing it on (both ways)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await asyncio.sleep(delay_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: asyncio.run(serve()), daemon=True).start()
    time.sleep(0.3)
    return port


def request_items(traces: int) -> list[AddItem]:
    """One request's traces: a root and two children each, fresh ids."""
    items: list[AddItem] = []
    for _ in range(traces):
        trace_id = uuid.uuid4().hex
        spans = [
            SpanData(trace_id, f"{j + 1:016x}", "" if j == 0 else f"{1:016x}", "s", 1, 2, attrs={"k": "v" * 50})
            for j in range(3)
        ]
        items.append((trace_id, spans, 900, True))
    return items


def measure(url: str, traces: int, rounds: int) -> tuple[float, float]:
    """Best seconds per request: (one ``add`` per trace, one ``add_many``)."""
    state = RedisAssemblyState(url, 5.0, 30.0, max_traces=1_000_000, prefix=f"bench{uuid.uuid4().hex[:6]}")
    one, many = float("inf"), float("inf")
    try:
        for _ in range(rounds):
            items = request_items(traces)
            t0 = time.perf_counter()
            for trace_id, spans, nbytes, root in items:
                state.add(trace_id, spans, nbytes, root, time.monotonic())
            one = min(one, time.perf_counter() - t0)
            items = request_items(traces)
            t0 = time.perf_counter()
            state.add_many(items, time.monotonic())
            many = min(many, time.perf_counter() - t0)
    finally:
        state.close()
    return one, many


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=170, help="traces in one OTLP request (default 170)")
    ap.add_argument("--delay-ms", type=float, default=0.25, help="the proxy's delay each way, ms (default 0.25)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds, best kept (default 5)")
    ap.add_argument("--quick", action="store_true", help="2 rounds")
    add_json_out(ap)
    args = ap.parse_args()
    rounds = 2 if args.quick else args.rounds
    server = RedisServer().start()
    try:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        ways = (
            ("Redis on loopback", port),
            (f"Redis {args.delay_ms:g} ms away each way", delaying_proxy(port, args.delay_ms / 1000)),
        )
        print(
            f"one OTLP request of {args.traces} traces (3 spans each) into the Redis assembly state, best of {rounds}"
        )
        for label, via in ways:
            one, many = measure(f"redis://127.0.0.1:{via}/0", args.traces, rounds)
            print(
                f"  {label:>28}: one call per trace {one * 1000:8.1f} ms, one round trip (add_many) "
                f"{many * 1000:6.1f} ms: {one / many:.1f}x"
            )
            emit(
                args.json_out,
                "redis_assembly_add",
                f"ms of a receiver's loop per {args.traces}-trace request, add_many, {label}",
                many * 1000,
                "ms",
                "one call per trace",
                one * 1000,
            )
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

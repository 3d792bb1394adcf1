"""What holding records on disk during a Redis outage costs a receiver: puts per second into the memory spill and
into the SQLite spill file side by side in one run, then how fast each is sent once Redis is back.

Real parts: Debian's redis-server on a free loopback port (AOF), :class:`RedisStreamQueue` as a receiver uses it,
records shaped like a RAG record (a question, three 600-character passages, an answer). Redis is stopped before the
puts, so every put goes to the spill; it is started again and the clock runs until the spill is empty.

    python bench/redis_spill.py               # ~10 s on 2 cores
    python bench/redis_spill.py --records 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ragtrace_collector.model.record import RagRecord  # noqa: E402
from ragtrace_collector.queue.redis import RedisStreamQueue  # noqa: E402
from ragtrace_collector.queue.spill import MEMORY  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from summary import add_json_out, emit  # noqa: E402


def record(i: int) -> RagRecord:
    passage = f"The passage says something about fact {i}. " * 15
    return RagRecord(
        trace_id=f"{i:032x}",
        user_input=f"What is fact {i}?",
        retrieved_contexts=[passage, passage[::-1], passage.upper()],
        response=f"Fact {i} is blue and round.",
        pipeline="bench",
    )


def run(kind: str, records: list[RagRecord], workdir: Path) -> dict[str, float]:
    (workdir / f"redis-{kind}").mkdir()
    srv = RedisServer(data_dir=workdir / f"redis-{kind}").start()
    spill = MEMORY if kind == "memory" else str(workdir / f"{kind}.sqlite")
    try:
        queue = RedisStreamQueue(
            f"{srv.url}?prefix=b{uuid.uuid4().hex[:6]}",
            max_depth=len(records) * 2,
            buffer_size=len(records),
            retry_interval=0.05,
            spill=spill,
        )
        srv.stop()
        queue.put(records[0])  # the first put meets the dead Redis (connection refused) and opens the breaker
        start = time.perf_counter()
        for rec in records[1:]:
            assert queue.put(rec)
        put_seconds = time.perf_counter() - start
        assert queue.buffered == len(records)
        srv.start()
        start = time.perf_counter()
        while queue.buffered:
            time.sleep(0.005)
        flush_seconds = time.perf_counter() - start
        queue.close()
        size = (workdir / f"{kind}.sqlite").stat().st_size if kind == "file" else 0
        return {
            "put_us": put_seconds / (len(records) - 1) * 1e6,
            "puts_per_s": (len(records) - 1) / put_seconds,
            "flush_per_s": len(records) / flush_seconds,
            "file_mib": size / 2**20,
        }
    finally:
        srv.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000, help="records held during the outage (default 5000)")
    add_json_out(parser)
    args = parser.parse_args()
    records = [record(i) for i in range(args.records)]
    size = len(records[0].model_dump_json(exclude_none=True))
    with tempfile.TemporaryDirectory(prefix="ragtrace-bench-spill-") as tmp:
        results = {kind: run(kind, records, Path(tmp)) for kind in ("memory", "file")}
    mem, disk = results["memory"], results["file"]
    print(f"{args.records} records of {size} bytes held while Redis is down, then sent when it is back")
    print(f"{'spill':8} {'µs per put':>11} {'puts/s':>9} {'sent/s after':>13} {'file MiB':>9}")
    for kind, r in results.items():
        print(f"{kind:8} {r['put_us']:11.1f} {r['puts_per_s']:9.0f} {r['flush_per_s']:13.0f} {r['file_mib']:9.1f}")
    print(
        f"file / memory: put time {disk['put_us'] / mem['put_us']:.2f}x, "
        f"send rate {disk['flush_per_s'] / mem['flush_per_s']:.2f}x"
    )
    emit(
        args.json_out,
        "redis_spill",
        "µs per put into the spill file",
        disk["put_us"],
        "µs",
        "into memory",
        mem["put_us"],
    )
    emit(
        args.json_out,
        "redis_spill",
        "records/s sent from the file once Redis is back",
        disk["flush_per_s"],
        "records/s",
        "from memory",
        mem["flush_per_s"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

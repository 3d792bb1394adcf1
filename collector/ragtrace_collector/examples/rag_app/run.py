"""Send N traced requests from the example app to an OTLP endpoint."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import ragtrace

from .app import RagApp
from .questions import QUESTIONS


def run_requests(
    n: int,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    service_name: str = "ragtrace-example",
    degrade_every: int = 0,
    rate: float = 0.0,
    with_reference: bool = True,
    app: RagApp | None = None,
    init: bool = True,
    on_answer: Callable[[int, Any], None] | None = None,
    **app_kwargs: Any,
) -> dict[str, int]:
    """Answer ``n`` sample questions (cycling), every ``degrade_every``-th one degraded.

    Returns the tracing handle's counters after a bounded flush.
    """
    handle = ragtrace.init(service_name=service_name, endpoint=endpoint, protocol=protocol) if init else None
    app = app or RagApp(**app_kwargs)
    interval = 1.0 / rate if rate > 0 else 0.0
    try:
        for i in range(n):
            t0 = time.perf_counter()
            q = QUESTIONS[i % len(QUESTIONS)]
            degrade = bool(degrade_every) and (i + 1) % degrade_every == 0
            ans = app.answer(
                q["question"],
                degrade=degrade,
                reference=q["reference"] if with_reference else None,
                session_id=f"example-{i // 5}",
            )
            if on_answer is not None:
                on_answer(i, ans)
            if interval:
                time.sleep(max(0.0, interval - (time.perf_counter() - t0)))
    finally:
        stats: dict[str, int] = {}
        if handle is not None:
            handle.force_flush(10.0)
            stats = handle.stats()
            handle.shutdown(5.0)
    return stats


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragtrace_collector.examples.rag_app", description=__doc__)
    p.add_argument("--requests", "-n", type=int, default=20)
    p.add_argument("--endpoint", default=None, help="OTLP endpoint (default: env, else http://127.0.0.1:4318)")
    p.add_argument("--protocol", choices=["http/protobuf", "grpc"], default=None)
    p.add_argument("--service-name", default="ragtrace-example")
    p.add_argument("--drop-best", action="store_true", help="drop the best passage from retrieval")
    p.add_argument("--add-unsupported-claim", action="store_true", help="append an invented claim to answers")
    p.add_argument("--slow-first-token", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--degrade-every", type=int, default=0, metavar="K", help="degrade every K-th request")
    p.add_argument("--token-delay", type=float, default=0.004, metavar="SECONDS")
    p.add_argument("--rate", type=float, default=0.0, help="requests per second (0 = as fast as possible)")
    p.add_argument("--model", default=None, help="litellm model (default: env RAGTRACE_EXAMPLE_MODEL; unset = offline)")
    p.add_argument("--quiet", "-q", action="store_true")
    a = p.parse_args(argv)

    def show(i: int, ans: Any) -> None:
        if not a.quiet:
            flag = " [degraded]" if any(ans.faults.values()) else ""
            print(f"{i + 1:4d} {ans.trace_id} {ans.question}{flag}\n     -> {ans.text[:160]}")

    stats = run_requests(
        a.requests,
        endpoint=a.endpoint,
        protocol=a.protocol,
        service_name=a.service_name,
        degrade_every=a.degrade_every,
        rate=a.rate,
        on_answer=show,
        model=a.model,
        token_delay=a.token_delay,
        drop_best=a.drop_best,
        add_unsupported_claim=a.add_unsupported_claim,
        slow_first_token=a.slow_first_token,
    )
    print(f"spans: {stats}", file=sys.stderr)
    return 0

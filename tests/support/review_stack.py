"""A real collector for the quality loop's tests: one token per scope, fed by the example RAG app.

Tokens: ``TOKEN`` (``auth.bearer_token``: every scope, what the example app sends spans with), ``READ`` (read
only), ``REVIEW`` (review and read), ``INGEST`` (spans and feedback). Agreement is never cached (each read sees the
latest review), and ``sample_rate`` is the test's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.explorer_stack import METRICS, TOKEN, Fed, Turn, q, send, served_collector

READ = "read-only-token-0123456789"
REVIEW = "review-token-0123456789abc"
INGEST = "ingest-token-0123456789abc"


def turns(n: int) -> list[Turn]:
    """``n`` requests of two services, every third with the example app's faults on (an unsupported claim)."""
    return [
        Turn(
            f"r{i}",
            "shop-assistant" if i % 2 else "docs-bot",
            q(i)["question"],
            q(i)["reference"],
            None,
            None,
            degrade=i % 3 == 0,
        )
        for i in range(n)
    ]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def review_collector(workdir: Path, n: int, sample_rate: float = 0.5) -> Iterator[Fed]:
    """A collector with every scope's token, ``n`` records scored and stored."""
    auth = {"read_tokens": [READ], "review_tokens": [REVIEW], "ingest_tokens": [INGEST]}
    review = {"sample_rate": sample_rate, "agreement_cache_seconds": 0, "max_body_bytes": 64 * 1024}
    with served_collector(workdir, auth=auth, extra={"review": review}) as fed:
        sent = turns(n)
        fed.traces = send(fed.otlp, sent)
        fed.turns = {t.name: t for t in sent}
        deadline = time.monotonic() + 90
        while True:
            body = httpx.get(fed.base + "/api/v1/records", params={"limit": 1000}, headers=bearer(TOKEN), timeout=10)
            found = body.json()
            if found["total"] == n and all(len(r["scores"]) == len(METRICS) for r in found["records"]):
                break
            assert time.monotonic() < deadline, f"{found}\n" + fed.log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        yield fed

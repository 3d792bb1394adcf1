"""Guessing a token through any listener (issue 33, D3, D11, D12), against a real ``ragtrace-collector serve``.

* D3: the OTLP receivers checked the token with no limit (620–735 guesses/s). Now wrong tokens on OTLP/HTTP,
  OTLP/gRPC, the explorer's sign-in and its API count together per client address: past the limit, 429 /
  ``RESOURCE_EXHAUSTED`` everywhere, the right token included.
* D12: rotating addresses (Linux routes all of 127.0.0.0/8 to loopback, so a client bound to 127.0.0.9 is another
  address) never free a limited one, and past the global window a fresh address is refused while a client that
  presented the right token lately goes on.
* D11: separate ingest / read / review tokens: an app's ingest token reads nothing (403), a read token sends no
  spans (403), and two tokens of a scope both work (rotation).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from ragtrace_collector.receiver.otlp_grpc import SERVICE
from tests.support import span_fixtures as F
from tests.support.explorer_stack import Fed, served_collector
from tests.support.net import free_port

LIMIT = 3
INGEST = ["ingest-token-aaaaaaaaaaaaaaaa", "ingest-token-bbbbbbbbbbbbbbbb"]  # two: one being rotated out
READ = "read-token-cccccccccccccccccc"
REVIEW = "review-token-dddddddddddddddd"
PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fed, str]]:
    grpc_port = free_port()
    auth = {
        "ingest_tokens": INGEST,
        "read_tokens": [READ],
        "review_tokens": [REVIEW],
        "max_failed_attempts": LIMIT,
        "failed_attempt_window_seconds": 120,
        "max_tracked_addresses": 4,
        "max_failed_attempts_total": 20,
    }
    with served_collector(
        tmp_path_factory.mktemp("guessing"), token=None, listen={"grpc_port": grpc_port}, auth=auth
    ) as fed:
        yield fed, f"127.0.0.1:{grpc_port}"


def _body() -> bytes:
    return F.to_request(F.ragtrace_shaped())[1].SerializeToString()


def _client(base: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=base, transport=httpx.HTTPTransport(local_address=address), timeout=10)


def _otlp(fed: Fed, address: str, token: str) -> httpx.Response:
    with _client(fed.otlp, address) as c:
        return c.post("/v1/traces", content=_body(), headers={**PB, "Authorization": f"Bearer {token}"})


def _grpc(target: str, token: str) -> grpc.StatusCode:
    """One Export from 127.0.0.1 (grpc-core picks the source address) with ``token``."""
    with grpc.insecure_channel(target) as channel:
        try:
            channel.unary_unary(f"/{SERVICE}/Export")(
                _body(), metadata=(("authorization", f"Bearer {token}"),), timeout=10
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def _api(fed: Fed, address: str, token: str) -> httpx.Response:
    with _client(fed.base, address) as c:
        return c.get("/api/v1/records", headers={"Authorization": f"Bearer {token}"})


def test_guesses_on_otlp_are_limited_and_shared_with_every_listener(served: tuple[Fed, str]) -> None:
    fed, target = served
    assert _grpc(target, INGEST[0]) == grpc.StatusCode.OK  # grpc's client address is 127.0.0.1: keep it clean
    attacker = "127.0.0.2"
    for i in range(LIMIT):
        assert _otlp(fed, attacker, f"guess-{i}-xxxxxxxxxxxxxxxx").status_code == 401
    limited = _otlp(fed, attacker, "guess-next-xxxxxxxxxxxxxxxx")
    assert limited.status_code == 429 and 1 <= int(limited.headers["Retry-After"]) <= 120
    assert _otlp(fed, attacker, INGEST[0]).status_code == 429  # a hit looks like a miss while limited
    assert _api(fed, attacker, READ).status_code == 429  # the explorer shares the count
    with _client(fed.base, attacker) as c:
        assert c.post("/explorer/login", data={"token": READ}).status_code == 429
    # another address is not affected
    assert _otlp(fed, "127.0.0.3", INGEST[1]).status_code == 200


def test_grpc_guesses_count_too(tmp_path: Path) -> None:
    grpc_port = free_port()
    auth = {"ingest_tokens": INGEST, "max_failed_attempts": LIMIT, "failed_attempt_window_seconds": 120}
    with served_collector(tmp_path, token=None, listen={"grpc_port": grpc_port}, auth=auth) as fed:
        target = f"127.0.0.1:{grpc_port}"
        for i in range(LIMIT):
            assert _grpc(target, f"guess-{i}-xxxxxxxxxxxxxxxx") == grpc.StatusCode.UNAUTHENTICATED
        assert _grpc(target, INGEST[0]) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert _otlp(fed, "127.0.0.1", INGEST[0]).status_code == 429  # and HTTP from the same address
        metrics = httpx.get(fed.base + "/metrics", timeout=10).text
    assert 'ragtrace_auth_attempts_total{status="unauthenticated",via="otlp_grpc"} 3.0' in metrics
    assert 'ragtrace_otlp_requests_total{status="rate_limited",transport="grpc"} 1.0' in metrics


def test_rotating_addresses_neither_free_a_limited_one_nor_guess_for_ever(served: tuple[Fed, str]) -> None:
    fed, _ = served
    known = "127.0.0.50"
    assert _otlp(fed, known, INGEST[0]).status_code == 200  # an app that exports with its token
    limited = "127.0.0.60"
    for i in range(LIMIT):
        _otlp(fed, limited, f"guess-{i}-xxxxxxxxxxxxxxxx")
    assert _otlp(fed, limited, INGEST[0]).status_code == 429
    refused_fresh = 0
    for i in range(30):  # more addresses than tracked (4), more failures than the global window holds (20)
        reply = _otlp(fed, f"127.0.1.{i + 1}", f"guess-{i}-xxxxxxxxxxxxxxxx")
        refused_fresh += reply.status_code == 429
    assert _otlp(fed, limited, INGEST[0]).status_code == 429  # still limited: rotation did not free it
    assert refused_fresh > 0 and _otlp(fed, "127.0.2.1", INGEST[0]).status_code == 429  # global window full
    assert _otlp(fed, known, INGEST[1]).status_code == 200  # a client that presented a good token goes on


def test_separate_ingest_read_review_tokens(tmp_path: Path) -> None:
    auth = {"ingest_tokens": INGEST, "read_tokens": [READ], "review_tokens": [REVIEW]}
    with served_collector(tmp_path, token=None, auth=auth) as fed:
        for token in INGEST:  # both ingest tokens send spans; neither reads
            assert _otlp(fed, "127.0.0.1", token).status_code == 200
            assert _api(fed, "127.0.0.1", token).status_code == 403
        for token in (READ, REVIEW):  # read and review tokens read; neither sends spans
            assert _api(fed, "127.0.0.1", token).status_code == 200
            assert _otlp(fed, "127.0.0.1", token).status_code == 403
        with _client(fed.base, "127.0.0.1") as c:
            refused = c.post("/explorer/login", data={"token": INGEST[0]})
            assert refused.status_code == 403 and "may not read records" in refused.text
            assert c.post("/explorer/login", data={"token": READ}).status_code == 303
            assert c.get("/explorer/").status_code == 200

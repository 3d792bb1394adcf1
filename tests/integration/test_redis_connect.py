"""``internal.redis.connect`` against a real redis-server: every URL form redis-py takes, and Redis's refusals named.

Every Redis user (queue, assembly state, pairing, budget) falls back locally on ``UNAVAILABLE``; a refusal that
redis-py reports as a plain ``ResponseError`` would instead raise out of a receiver and lose the record.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis

from ragtrace_collector.internal.redis import UNAVAILABLE, Busy, WritesDisabled, connect, key_prefix
from tests.support.redis_server import REFUSALS, RedisServer, refuse_writes, take_writes_again


def test_a_unix_socket_url_with_our_options_connects(tmp_path: Path) -> None:
    """``unix:///path?db=0&prefix=...``: our options are taken off and the socket path is kept."""
    sock = tmp_path / "redis.sock"
    srv = RedisServer(data_dir=tmp_path, args=("--unixsocket", str(sock), "--unixsocketperm", "700")).start()
    try:
        url = f"unix://{sock}?db=0&prefix=team-a"
        client = connect(url)
        assert client.set("k", "v") and client.get("k") == "v"
        assert key_prefix(url) == "team-a"
        client.close()
    finally:
        srv.cleanup()


@pytest.mark.parametrize("refusal", REFUSALS)
def test_each_way_a_redis_refuses_writes_is_unavailable(tmp_path: Path, refusal: str) -> None:
    """OOM, READONLY, MISCONF (a failed snapshot: a full disk; redis-py has no name for it) and NOPERM (an ACL
    change; inside a script Redis 7.0 gives it no code) are outages."""
    srv = RedisServer(data_dir=tmp_path, args=("--enable-protected-configs", "yes")).start()
    admin = redis.Redis.from_url(srv.url)
    client = connect(srv.url)
    try:
        refuse_writes(admin, refusal, tmp_path)
        with pytest.raises(UNAVAILABLE) as refused:
            client.set("k", "v")
        if refusal == "snapshot_failing":
            assert isinstance(refused.value, WritesDisabled) and "MISCONF" in str(refused.value)
        pipe = client.pipeline(transaction=False)
        pipe.set("k", "v")
        with pytest.raises(UNAVAILABLE):
            pipe.execute()
        assert client.get("k") is None  # reads still served
        take_writes_again(admin, refusal, tmp_path)
        deadline = time.monotonic() + 10
        while admin.info("persistence")["rdb_bgsave_in_progress"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert client.set("k", "v")
    finally:
        client.close()
        admin.close()
        srv.cleanup()


def test_a_redis_stuck_in_a_script_is_unavailable_and_a_bad_command_is_not(redis_server: RedisServer) -> None:
    """BUSY (a script past ``busy-reply-threshold``) is named and an outage; a wrong-type command stays an error."""
    admin = redis.Redis.from_url(redis_server.url)
    client = connect(redis_server.url)
    stuck = redis.Redis.from_url(redis_server.url)
    admin.config_set("busy-reply-threshold", "50")
    spinning = threading.Thread(target=lambda: _swallow(stuck.eval, "while true do end", 0), daemon=True)
    try:
        spinning.start()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
            except Busy as exc:
                assert isinstance(exc, UNAVAILABLE)
                break
            assert time.monotonic() < deadline, "Redis never answered BUSY"
            time.sleep(0.02)
    finally:
        admin.script_kill()
        spinning.join(10)
        admin.config_set("busy-reply-threshold", "5000")
    client.set("a-string", "x")
    with pytest.raises(redis.exceptions.ResponseError) as wrong:
        client.lpush("a-string", "y")
    assert not isinstance(wrong.value, UNAVAILABLE)
    for c in (client, stuck, admin):
        c.close()


def _swallow(call, *args) -> None:
    try:
        call(*args)
    except redis.exceptions.ResponseError:
        pass  # the script was killed

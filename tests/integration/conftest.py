"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os

import pytest

from tests.support.redis_server import REDIS_SERVER, RedisServer


@pytest.fixture(scope="module")
def redis_server() -> RedisServer:
    """Debian's real redis-server on a free loopback port (AOF on), one per test module."""
    if not os.path.exists(REDIS_SERVER):
        pytest.skip("redis-server not installed")
    srv = RedisServer().start()
    yield srv
    srv.cleanup()

"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from tests.support.binaries import require
from tests.support.redis_server import RedisServer


@pytest.fixture(autouse=True)
def _needs_redis_server(request: pytest.FixtureRequest) -> None:
    """Tests in a module that starts its own ``RedisServer`` skip where redis-server is not installed."""
    if getattr(request.module, "RedisServer", None) is RedisServer:
        require("redis-server", "redis-server")


@pytest.fixture(scope="module")
def redis_server() -> RedisServer:
    """Debian's real redis-server on a free loopback port (AOF on), one per test module."""
    require("redis-server", "redis-server")
    srv = RedisServer().start()
    yield srv
    srv.cleanup()

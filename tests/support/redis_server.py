"""Run Debian's real ``redis-server`` on a free loopback port for tests and benchmarks.

AOF is on (``--appendonly yes``, fsync every write) and RDB snapshots off, so ``restart()``
keeps streams, consumer groups and keys exactly as a production restart with AOF would.
The server is stopped by its PID, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.net import free_port, wait_for_port

if TYPE_CHECKING:
    import redis

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


class RedisServer:
    """One redis-server process; ``url`` stays the same across ``restart()``."""

    def __init__(
        self, port: int | None = None, data_dir: str | os.PathLike | None = None, args: Sequence[str] = ()
    ) -> None:
        self.port = port or free_port()
        self.args = tuple(args)  # more redis-server options, e.g. ("--enable-protected-configs", "yes")
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="ragtrace-redis-"))
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        if not os.path.exists(REDIS_SERVER):
            raise FileNotFoundError(f"redis-server not found at {REDIS_SERVER}")
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.data_dir),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                "--logfile",
                str(self.data_dir / "redis.log"),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, timeout=15)
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 15.0) -> None:
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client.ping():
                    client.close()
                    return
            except redis.exceptions.ConnectionError:  # includes BusyLoadingError while the AOF loads
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self, down_seconds: float = 0.0) -> None:
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


REFUSALS = ("maxmemory", "replica", "snapshot_failing", "acl")


def refuse_writes(admin: redis.Redis, refusal: str, scratch: Path) -> None:
    """Make a running Redis refuse writes as production ones do: ``maxmemory`` reached (OOM), a replica after a
    failover (READONLY), a snapshot it cannot write (MISCONF; needs ``--enable-protected-configs yes``) or an ACL
    change taking write commands from the clients' user (NOPERM)."""
    if refusal == "maxmemory":
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")  # anything more is refused
    elif refusal == "replica":
        admin.replicaof("127.0.0.1", "1")  # a replica of nobody: read-only
    elif refusal == "acl":  # ACL SETUSER is not a write command: the same user can give them back
        admin.acl_setuser("default", enabled=True, commands=["-@write"])
    else:  # a snapshot that cannot be written (disk full, directory gone): MISCONF until one succeeds
        gone = scratch / "gone"
        gone.mkdir()
        admin.config_set("dir", str(gone))
        gone.rmdir()
        admin.config_set("save", "3600 1")
        admin.config_set("stop-writes-on-bgsave-error", "yes")
        admin.bgsave()
        deadline = time.monotonic() + 10
        while admin.info("persistence")["rdb_last_bgsave_status"] != "err":
            assert time.monotonic() < deadline, "the snapshot did not fail"
            time.sleep(0.02)


def take_writes_again(admin: redis.Redis, refusal: str, scratch: Path) -> None:
    """Undo :func:`refuse_writes` the way an operator would."""
    if refusal == "maxmemory":
        admin.config_set("maxmemory", "0")
    elif refusal == "replica":
        admin.replicaof("NO", "ONE")
    elif refusal == "acl":
        admin.acl_setuser("default", enabled=True, commands=["+@all"])
    else:  # the operator frees the disk: the next snapshot succeeds
        admin.config_set("dir", str(scratch))
        admin.bgsave()

"""A real full disk for tests: a small tmpfs mounted on a temporary directory, filled on demand.

Why not a mock: SQLite's behaviour on ``SQLITE_FULL`` (its WAL, its automatic rollbacks) is what the spill has to
survive. Mounting needs root (CAP_SYS_ADMIN); where that is refused the test is skipped, saying why.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


class FullDisk:
    """A mounted tmpfs of ``size`` bytes at ``path``; ``fill`` takes the free space, ``free`` gives it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / "filler"

    def fill(self) -> None:
        with open(self._filler, "ab", buffering=0) as fh:
            try:
                while fh.write(b"\0" * 4096):
                    pass
            except OSError:  # ENOSPC: full
                pass

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)


@contextmanager
def small_disk(path: Path, size: str = "2m") -> Iterator[FullDisk]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill ({done.stderr.strip() or done.returncode})")
    try:
        yield FullDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)

"""A data directory the collector cannot write is one clear line, not a traceback (issue 33, D18).

``ragtrace-collector serve`` with its queue or its results store on a read-only file system (a tmpfs remounted
read-only: root, who runs the tests here, ignores file permissions but not a read-only mount) must exit 1 saying
which file, why, and what to set, with no traceback and no port opened.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ragtrace_collector.queue.sqlite import SQLiteQueue
from ragtrace_collector.scoring.results_store import ResultsStore
from tests.support.collector_process import Served, collector_config, serve


@contextmanager
def read_only_dir(path: Path, prepare: Callable[[Path], None] = lambda _: None) -> Iterator[Path]:
    """A tmpfs at ``path``, filled by ``prepare``, then remounted read-only; unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to make read-only ({done.stderr.strip() or done.returncode})")
    try:
        prepare(path)
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _exited(served: Served) -> str:
    served.proc.wait(120)
    return served.output()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _one_clear_line(served: Served, file: Path, hint: str) -> str:
    """The process exited 1 with one ``cannot start`` line naming ``file`` and ``hint``, and no traceback."""
    out = _exited(served)
    assert served.proc.returncode == 1, out
    assert "Traceback" not in out, out
    lines = [line for line in out.splitlines() if "cannot start" in line]
    assert len(lines) == 1, out
    line = lines[0]
    assert line.startswith(f"ragtrace-collector serve: cannot start: cannot write the {file.stem.split('.')[0]}"), line
    assert str(file) in line and hint in line, line
    assert not _listening(served.http_port) and not _listening(served.metrics_port)
    return line


def _says_why(line: str) -> bool:
    """SQLite's cause: no file can be created (or its WAL index opened) there, or the file is read-only."""
    return any(cause in line for cause in ("unable to open database file", "readonly database", "Read-only"))


def _queue_file(path: Path) -> None:
    """What an earlier run leaves: a queue file (its WAL checkpointed and removed at close)."""
    SQLiteQueue(path / "queue.sqlite").close()


def _plain_file(path: Path) -> None:
    """A database file not in WAL mode (copied in by hand, say): SQLite opens it, then refuses to write it."""
    db = sqlite3.connect(path / "queue.sqlite")
    db.execute("CREATE TABLE x (a)")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    "prepare", [lambda _: None, _queue_file, _plain_file], ids=["empty", "earlier-queue", "read-only-file"]
)
def test_read_only_data_dir_is_one_line(tmp_path: Path, prepare: Callable[[Path], None]) -> None:
    with read_only_dir(tmp_path / "data", prepare) as data, serve(tmp_path, collector_config(tmp_path)) as served:
        line = _one_clear_line(served, data / "queue.sqlite", "set data_dir or RAGTRACE_DATA_DIR")
    assert _says_why(line), line


def test_read_only_results_store_is_one_line(tmp_path: Path) -> None:
    def earlier_store(path: Path) -> None:
        ResultsStore(path / "results.sqlite").close()

    with read_only_dir(tmp_path / "results", earlier_store) as results:
        store = results / "results.sqlite"
        config = collector_config(tmp_path, export={"results_path": str(store)})
        with serve(tmp_path, config) as served:
            line = _one_clear_line(served, store, "export.results_path")
    assert _says_why(line), line

"""``ragtrace-collector serve``: run the collector until SIGTERM/SIGINT, then shut down gracefully.

Shutdown stops the receivers, flushes every in-flight trace through sampling into the queue, and gives the
scoring worker, its exporters and the forwarder what remains of ``shutdown_timeout_seconds`` (``--drain-timeout``,
default 8 s: under Docker's 10 s grace before SIGKILL) to finish; what they leave is counted, unscored records stay
queued and scores not exported are sent again at the next start.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sqlite3
import sys

from ragtrace_collector.config import CollectorConfig, describe_error, load_config
from ragtrace_collector.internal.secrets import Scrubber, config_secrets, install_log_scrubber
from ragtrace_collector.internal.urls import mask_credentials_in


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        help="YAML config file (default: $RAGTRACE_CONFIG, else built-in defaults); any key can also be set "
        "from the environment as RAGTRACE_<SECTION>__<KEY>",
    )
    defaults = CollectorConfig()  # help texts show the model's defaults (written there only)
    parser.add_argument(
        "--role", choices=["all", "receiver", "worker"], help=f"which parts to run (default: {defaults.role})"
    )
    parser.add_argument("--host", help=f"address to bind the receivers and /metrics (default {defaults.listen.host})")
    parser.add_argument("--http-port", type=int, help=f"OTLP/HTTP port (default {defaults.listen.http_port})")
    parser.add_argument("--grpc-port", type=int, help=f"OTLP/gRPC port (default {defaults.listen.grpc_port})")
    parser.add_argument("--metrics-port", type=int, help=f"/metrics port (default {defaults.listen.metrics_port})")
    parser.add_argument(
        "--data-dir", help=f"directory of the embedded queue and results store (default {defaults.data_dir})"
    )
    parser.add_argument("--queue-url", help="sqlite:///path or redis://host:port/db")
    parser.add_argument(
        "--sampling-rate", type=float, help=f"fraction of records scored, 0..1 (default {defaults.sampling.rate})"
    )
    parser.add_argument(
        "--judge", help=f"judge model: 'local' (embedded) or a litellm model name (default {defaults.judge.model})"
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        help="seconds a graceful stop may take in all, whatever the downstreams do (default: shutdown_timeout_seconds,"
        f" {defaults.shutdown_timeout_seconds:g})",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")


def overrides_from_args(args: argparse.Namespace) -> dict:
    """CLI arguments as config overrides (only those given)."""
    out: dict = {}

    def put(path: tuple[str, ...], value) -> None:
        if value is None:
            return
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value

    put(("role",), getattr(args, "role", None))
    put(("listen", "host"), getattr(args, "host", None))
    put(("listen", "http_port"), getattr(args, "http_port", None))
    put(("listen", "grpc_port"), getattr(args, "grpc_port", None))
    put(("listen", "metrics_port"), getattr(args, "metrics_port", None))
    put(("data_dir",), getattr(args, "data_dir", None))
    put(("queue", "url"), getattr(args, "queue_url", None))
    put(("sampling", "rate"), getattr(args, "sampling_rate", None))
    put(("judge", "model"), getattr(args, "judge", None))
    put(("shutdown_timeout_seconds",), getattr(args, "drain_timeout", None))
    return out


def tune_gc() -> None:
    """Fewer cyclic-GC passes for a long-running ingest process.

    Spans in flight are many small dicts and lists that never form cycles, yet each one counts towards
    the generation-0 threshold and every full collection walks all of them: with CPython's defaults
    that is ~25% of ingest CPU. Startup objects are frozen out of collection, and generation 0 is
    collected every 50,000 allocations instead of 700 (cycles are still collected, just in bigger batches).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


async def serve(config, drain_timeout: float | None = None, stop_event: asyncio.Event | None = None) -> None:
    """Run a :class:`CollectorApp` until ``stop_event`` is set (or SIGTERM/SIGINT arrives), then stop it within
    ``drain_timeout`` seconds (None: the config's ``shutdown_timeout_seconds``)."""
    from ragtrace_collector.service.app import CollectorApp

    stop_event = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop_event.set)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    app = CollectorApp(config)
    try:
        await app.start()
    except BaseException:
        await app.stop(0.0)  # whatever did start (a bound port, the queue) is let go
        raise
    tune_gc()
    print(
        f"ragtrace-collector serving: role={config.role} otlp/http={app.http_port} otlp/grpc={app.grpc_port} "
        f"metrics={app.metrics_port}",
        file=sys.stderr,
        flush=True,
    )
    try:
        await stop_event.wait()
    finally:
        await app.stop(drain_timeout)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(args.config, overrides_from_args(args))
    except (OSError, ValueError) as exc:
        print(
            f"ragtrace-collector serve: bad configuration: {mask_credentials_in(describe_error(exc))}", file=sys.stderr
        )
        return 2
    # configured secrets never reach the log, whoever echoes them (a provider's error, a URL)
    install_log_scrubber(Scrubber(config_secrets(config, os.environ)))
    try:
        asyncio.run(serve(config))  # --drain-timeout is the config's shutdown_timeout_seconds
    # a port in use, an unknown metric, an unreachable queue, a data file that cannot be written (sqlite3.Error: a
    # store opened elsewhere than the queue and results store, which say which file and what to set)...
    except (OSError, ValueError, sqlite3.Error) as exc:
        print(f"ragtrace-collector serve: cannot start: {mask_credentials_in(str(exc))}", file=sys.stderr)
        return 1
    return 0

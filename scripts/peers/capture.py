"""Run the peer apps and keep the raw OTLP request bytes they export, as test fixtures.

    .venv/bin/python scripts/peers/capture.py                  # every setup whose environment is built
    .venv/bin/python scripts/peers/capture.py oi_langchain     # one setup
    .venv/bin/python scripts/peers/capture.py --live URL ...   # export to a running collector instead

Each setup's app runs in its peer environment (``.peers/<env>``, made by ``scripts/peers/build.sh``)
against a loopback sink that writes every ``POST /v1/traces`` body, unchanged, to
``tests/fixtures/peers/<setup>/requests-NNN.binpb`` and every ``POST /v1/logs`` body to ``logs-NNN.binpb``
(one numbering for both, in arrival order: a replay sends them in that order), with ``versions.json`` (the
packages the environment resolved, the Python version and the command). ``/v1/metrics`` is answered and
dropped. The replay tests read these files.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".peers"
APPS = ROOT / "scripts" / "peers" / "apps"
FIXTURES = ROOT / "tests" / "fixtures" / "peers"
# setup (an app in apps/) -> the environment it runs in
SETUPS: dict[str, str] = {
    "oi_langchain": "openinference",
    "oi_langchain_openai": "openinference",
    "oi_openai": "openinference",
    "oi_llamaindex": "openinference",
    "tl_decorators": "traceloop",
    "tl_langchain": "traceloop",
    "tl_llamaindex": "traceloop",
    "openlit_qdrant": "openlit",
    "openlit_langchain": "openlit",
    "openlit_scored": "openlit",
    "langfuse_observe": "langfuse",
    "langfuse_langchain": "langfuse",
    "otel_genai_events": "otel_genai",
    "otel_genai_spans": "otel_genai",
    "otel_genai_message_events": "otel_genai_message_events",
}
_VERSIONED = (
    "opentelemetry",
    "openinference",
    "langchain",
    "llama-index",
    "openai",
    "traceloop",
    "openlit",
    "qdrant",
    "langfuse",
)
TRACES, LOGS = "/v1/traces", "/v1/logs"


class Sink:
    """A loopback OTLP/HTTP endpoint that keeps each trace and log export's body as received (decompressed)."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []  # (path, body) in arrival order
        sink = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                enc = (self.headers.get("Content-Encoding") or "").lower()
                body = gzip.decompress(body) if enc == "gzip" else zlib.decompress(body) if enc == "deflate" else body
                path = self.path.rstrip("/")
                if path in (TRACES, LOGS):
                    with lock:
                        sink.bodies.append((path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_app(setup: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    """The setup's app in its peer environment, exporting to ``endpoint``."""
    python = PEERS / SETUPS[setup] / "bin" / "python"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACELOOP_", "OPENLIT_", "LANGFUSE_"))},
        "PYTHONPATH": f"{ROOT}{os.pathsep}{APPS}",
        "PEER_OTLP_ENDPOINT": endpoint,
        "PEER_SERVICE": f"peer-{setup}",
        "OPENAI_API_KEY": "k",
        "TRACELOOP_TELEMETRY": "false",
        "TRACELOOP_TRACE_CONTENT": "true",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "requests,urllib3,urllib,httpx,aiohttp-client",
        "TIKTOKEN_CACHE_DIR": str(PEERS / "tiktoken"),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [str(python), str(APPS / f"{setup}.py")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def versions(setup: str) -> dict[str, Any]:
    freeze = (PEERS / SETUPS[setup] / "freeze.txt").read_text().splitlines()
    return {
        "setup": setup,
        "environment": SETUPS[setup],
        "python": platform.python_version(),
        "command": f"bash scripts/peers/build.sh {SETUPS[setup]} && .venv/bin/python scripts/peers/capture.py {setup}",
        "packages": dict(
            line.split("==", 1) for line in freeze if "==" in line and line.lower().startswith(_VERSIONED)
        ),
    }


def capture(setup: str) -> int:
    """Run one setup against a fresh sink and rewrite its fixtures; the number of requests kept."""
    sink = Sink()
    try:
        proc = run_app(setup, f"http://127.0.0.1:{sink.port}")
    finally:
        sink.stop()
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"{setup}: the app failed (exit {proc.returncode})")
    out = FIXTURES / setup
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for i, (path, body) in enumerate(sink.bodies):
        (out / f"{'logs' if path == LOGS else 'requests'}-{i:03d}.binpb").write_bytes(body)
    (out / "versions.json").write_text(json.dumps(versions(setup), indent=2, sort_keys=True) + "\n")
    size = sum(len(b) for _, b in sink.bodies)
    logs = sum(1 for path, _ in sink.bodies if path == LOGS)
    print(
        f"{setup}: {len(sink.bodies)} OTLP requests ({logs} of logs), {size / 1024:.1f} KiB -> {out.relative_to(ROOT)}"
    )
    return len(sink.bodies)


def main(argv: list[str]) -> int:
    live = None
    if argv[:1] == ["--live"]:
        live, argv = argv[1], argv[2:]
    setups = argv or [s for s, env in SETUPS.items() if (PEERS / env / "freeze.txt").exists()]
    for setup in setups:
        if not (PEERS / SETUPS[setup] / "freeze.txt").exists():
            print(f"{setup}: environment .peers/{SETUPS[setup]} not built, skipped")
            continue
        if live:
            proc = run_app(setup, live)
            print(f"{setup}: exit {proc.returncode}")
            if proc.returncode != 0:
                sys.stderr.write(proc.stderr[-4000:])
        else:
            capture(setup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

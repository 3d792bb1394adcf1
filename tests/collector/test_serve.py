"""``ragtrace-collector serve`` startup failures: a clear message and exit code, nothing left bound."""

from __future__ import annotations

import argparse
import socket

from collector import serve
from tests.support.net import free_port


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_port_in_use_is_a_clear_error_and_frees_what_started(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        http_port = free_port()  # bound before the gRPC receiver fails
        args = parse("--role", "receiver", "--data-dir", str(tmp_path), "--http-port", str(http_port),
                     "--grpc-port", str(port), "--metrics-port", "0")
        assert serve.run(args) == 1
    with socket.socket() as again:
        again.bind(("127.0.0.1", http_port))  # released on the way out
    err = capsys.readouterr().err
    assert "ragtrace-collector serve: cannot start:" in err and str(port) in err
    assert "Traceback" not in err


def test_unknown_metric_in_config_is_a_clear_error(tmp_path, capsys):
    config = tmp_path / "collector.yaml"
    config.write_text("scoring:\n  metrics: [faithfulness, no_such_metric]\n")
    args = parse("--config", str(config), "--role", "worker", "--data-dir", str(tmp_path), "--metrics-port", "0")
    assert serve.run(args) in (1, 2)
    err = capsys.readouterr().err
    assert "no_such_metric" in err and "Traceback" not in err

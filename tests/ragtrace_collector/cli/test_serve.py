"""``ragtrace-collector serve`` startup failures: a clear message and exit code, nothing left bound."""

from __future__ import annotations

import argparse
import os
import socket

from ragtrace_collector.cli import serve
from ragtrace_collector.config import load_config
from ragtrace_collector.scoring.options import ScoringOptions
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
        args = parse(
            "--role",
            "receiver",
            "--data-dir",
            str(tmp_path),
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(port),
            "--metrics-port",
            "0",
        )
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


def serve_config(env: dict[str, str], *argv: str):
    """The configuration ``serve`` resolves for ``argv`` under environment ``env``."""
    args = parse(*argv)
    return load_config(args.config, serve.overrides_from_args(args), environ=env)


def test_judge_shorthand_in_the_environment_does_not_stop_serve(tmp_path, capsys, monkeypatch):
    """RAGTRACE_JUDGE=openai/gpt-4o-mini, as evaluate documents it, used to be a ValidationError at startup."""
    monkeypatch.setenv("RAGTRACE_JUDGE", "openai/gpt-4o-mini")
    assert serve_config(dict(os.environ)).judge.model == "openai/gpt-4o-mini"
    with socket.socket() as taken:  # past the configuration, the receiver fails on a taken port: exit 1, not 2
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args = parse(
            "--role",
            "receiver",
            "--data-dir",
            str(tmp_path),
            "--http-port",
            str(taken.getsockname()[1]),
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
        )
        assert serve.run(args) == 1
    err = capsys.readouterr().err
    assert "bad configuration" not in err and "cannot start" in err


def test_legacy_judge_variables_reach_serves_config():
    env = {
        "RAGTRACE_JUDGE": "openai/x",
        "RAGTRACE_JUDGE_BASE_URL": "http://judge:8000/v1",
        "RAGTRACE_JUDGE_API_KEY": "k",
        "RAGTRACE_EMBEDDING_MODEL": "openai/emb",
    }
    judge = serve_config(env).judge
    assert (judge.model, judge.base_url, judge.api_key, judge.embedding_model) == (
        "openai/x",
        "http://judge:8000/v1",
        "k",
        "openai/emb",
    )
    assert serve_config(env, "--judge", "local").judge.model == "local"  # the argument wins


def test_metric_options_from_yaml_reach_serves_config(tmp_path):
    config = tmp_path / "collector.yaml"
    config.write_text(
        "scoring:\n  metrics: [faithfulness, geval]\n"
        "  options: {geval: {criteria: Is the answer concise, name: conciseness}}\n"
    )
    options = ScoringOptions.from_config(serve_config({}, "--config", str(config)).scoring.options)
    assert options.geval == {"criteria": "Is the answer concise", "name": "conciseness"}


def test_bad_metric_options_are_a_one_line_configuration_error(tmp_path, capsys):
    config = tmp_path / "collector.yaml"
    args = parse("--config", str(config), "--role", "worker", "--data-dir", str(tmp_path), "--metrics-port", "0")
    for yaml_text, key in [
        ("scoring: {options: {answer_relevancy_variant: statement}}", "scoring.options.answer_relevancy_variant"),
        ("scoring: {options: {safety_categories: [toxic, rude]}}", "scoring.options.safety_categories[1]"),
        # listing geval starts fine and then skips every record unless its criteria are configured
        ("scoring: {metrics: [faithfulness, geval]}", "scoring.options.geval"),
    ]:
        config.write_text(yaml_text + "\n")
        assert serve.run(args) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("ragtrace-collector serve: bad configuration: ") and key in line


def test_a_port_beyond_65535_is_a_clear_error(tmp_path, capsys):
    """Issue 34's first hour: ``--metrics-port 70000`` / ``http_port: 99999`` ended in an OverflowError traceback."""
    assert serve.run(parse("--data-dir", str(tmp_path), "--metrics-port", "70000")) == 2
    config = tmp_path / "collector.yaml"
    config.write_text("listen: {http_port: 99999}\n")
    assert serve.run(parse("--config", str(config), "--data-dir", str(tmp_path))) == 2
    err = capsys.readouterr().err
    assert "listen.metrics_port" in err and "listen.http_port" in err and "65535" in err
    assert "Traceback" not in err and "OverflowError" not in err

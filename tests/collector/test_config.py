"""Config resolution: defaults → YAML → environment → overrides, and the shipped example file."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
import yaml

from collector.config import CollectorConfig, env_overrides, load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "collector" / "collector.example.yaml"


def test_defaults_need_no_file():
    c = load_config(environ={})
    assert (c.listen.host, c.listen.grpc_port, c.listen.http_port, c.listen.metrics_port) == (
        "127.0.0.1",
        4317,
        4318,
        9464,
    )
    assert c.judge.model == "local" and c.role == "all"
    assert c.queue_url.startswith("sqlite:///") and c.queue_url.endswith("queue.sqlite")


def test_precedence_yaml_env_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling: {rate: 0.5, pipelines: {a: 0.2}}\nlisten: {http_port: 1111}\nrole: worker\n")
    env = {
        "RAGTRACE_SAMPLING__RATE": "0.25",
        "RAGTRACE_QUEUE__URL": "redis://127.0.0.1:6379/0",
        "RAGTRACE_SAMPLING__PIPELINES__B": "0.75",
        "RAGTRACE_ENDPOINT": "http://x",  # the SDK's variable: not a config key, ignored
        "RAGTRACE_AUTH__BEARER_TOKEN": "s3cret",
    }
    c = load_config(str(path), overrides={"role": "receiver"}, environ=env)
    assert c.sampling.rate == 0.25
    assert c.sampling.pipelines == {"a": 0.2, "b": 0.75}
    assert c.listen.http_port == 1111
    assert c.queue_url == "redis://127.0.0.1:6379/0"
    assert c.auth.bearer_token == "s3cret"
    assert c.role == "receiver"


def test_config_file_from_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data_dir: /tmp/x\n")
    assert load_config(environ={"RAGTRACE_CONFIG": str(path)}).data_dir == "/tmp/x"


def test_bad_values_name_the_key(tmp_path):
    with pytest.raises(pydantic.ValidationError, match="rate"):
        load_config(overrides={"sampling": {"rate": 1.5}}, environ={})
    with pytest.raises(pydantic.ValidationError, match="listne"):
        load_config(overrides={"listne": {}}, environ={})
    with pytest.raises(FileNotFoundError):
        load_config(str(tmp_path / "missing.yaml"), environ={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("sampling: {rate: 0.5\n")
    with pytest.raises(ValueError, match="broken.yaml: not valid YAML"):
        load_config(str(broken), environ={})


def test_env_ignores_unknown_names():
    assert env_overrides({"RAGTRACE_NOPE": "1", "RAGTRACE_LISTEN__NOPE": "2", "OTHER": "3"}) == {}


def test_example_file_is_complete_and_valid():
    data = yaml.safe_load(EXAMPLE.read_text())
    c = CollectorConfig.model_validate(data)
    assert c == load_config(str(EXAMPLE), environ={})

    def keys(model, prefix=""):
        out = set()
        for name, f in type(model).model_fields.items():
            value = getattr(model, name)
            out.add(prefix + name)
            if isinstance(value, pydantic.BaseModel):
                out |= keys(value, prefix + name + ".")
        return out

    def present(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict) and k not in ("pipelines", "headers"):
                out |= present(v, prefix + k + ".")
        return out

    assert keys(CollectorConfig()) <= present(data)

"""deploy/docker-compose.yml, checked statically (docker cannot run here): valid YAML, every mounted
path exists, ports match the collector's defaults and are published on loopback unless told otherwise, the
token reaches the collector (which will not start without one), Prometheus stores exemplars, configs validate."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from ragtrace_collector.config import CollectorConfig, load_config
from ragtrace_collector.internal.hosts import HostPolicy, host_name
from ragtrace_collector.service.app import CollectorApp
from tests.support.binaries import require
from tests.support.compose import MissingVariable, interpolate

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_services(compose):
    assert {"collector", "prometheus", "alertmanager", "grafana"} <= set(compose["services"])


def test_every_mounted_path_exists(compose):
    named = set(compose.get("volumes") or {})
    checked = 0
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source in named:
                continue
            assert (DEPLOY / source).exists(), f"{name}: mounted path {source} does not exist"
            checked += 1
        build = service.get("build")
        if build:
            context = DEPLOY / build["context"]
            dockerfile = context / build["dockerfile"]
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY "):
                    for src in line.split()[1:-1]:
                        assert (context / src).exists(), f"Dockerfile COPY source {src} missing"
    assert checked >= 6


def test_ports_match_collector_defaults(compose):
    defaults = CollectorConfig().listen
    wanted = {defaults.grpc_port, defaults.http_port, defaults.metrics_port}
    assert wanted == {4317, 4318, 9464}
    published = set()
    for port in interpolate(compose["services"]["collector"]["ports"], {}):
        address, host, container = str(port).split(":")
        assert host == container
        assert address == "127.0.0.1"  # published on loopback unless RAGTRACE_PUBLISH_ADDRESS says otherwise
        published.add(int(container))
    assert published == wanted
    config = load_config(str(DEPLOY / "collector.yaml"))
    assert (config.listen.grpc_port, config.listen.http_port, config.listen.metrics_port) == (4317, 4318, 9464)
    assert config.listen.host == "0.0.0.0"  # reachable from the other containers
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"collector:{defaults.metrics_port}" in targets
    am = prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert am == ["alertmanager:9093"]


def test_prometheus_service_wired_to_rules_and_exemplars(compose):
    prom = compose["services"]["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    assert mounts["/etc/prometheus/rules"] == "../grafana/prometheus/rules"
    assert any(
        r.startswith("/etc/prometheus/rules/")
        for r in yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["rule_files"]
    )


def test_grafana_service_wired_to_provisioning(compose):
    grafana = compose["services"]["grafana"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == "../grafana/provisioning"
    provider = yaml.safe_load((REPO / "grafana/provisioning/dashboards/ragtrace.yaml").read_text())["providers"][0]
    assert mounts[provider["options"]["path"]] == "../grafana/dashboards"
    env = grafana["environment"]
    assert env["PROMETHEUS_URL"] == "http://prometheus:9090"
    datasources = (REPO / "grafana/provisioning/datasources/ragtrace.yaml").read_text()
    for var in re.findall(r"\$\{(\w+)\}", datasources):
        assert var in env, f"datasource provisioning needs {var} in grafana's environment"


def test_compose_prometheus_config_valid():
    promtool = require("promtool", "prometheus")
    r = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_alertmanager_config_valid():
    amtool = require("amtool", "prometheus-alertmanager")
    r = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_port_published_on_loopback_unless_told(compose):
    """No service publishes on all host interfaces by default; RAGTRACE_PUBLISH_ADDRESS moves them all."""
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert interpolate(str(port), {}).startswith("127.0.0.1:"), (name, port)
            assert interpolate(str(port), {"RAGTRACE_PUBLISH_ADDRESS": "0.0.0.0"}).startswith("0.0.0.0:"), (name, port)


def _collector_config(compose: dict, environ: dict[str, str]) -> CollectorConfig:
    env = interpolate(compose["services"]["collector"]["environment"], environ)
    return load_config(str(DEPLOY / "collector.yaml"), environ=env)


def test_token_reaches_the_collector_and_is_required(compose):
    token = "compose-token-0123456789abcdef"
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": token})
    assert config.auth.bearer_token == token
    assert (
        interpolate(compose["services"]["grafana"]["environment"], {"RAGTRACE_AUTH__BEARER_TOKEN": token})[
            "COLLECTOR_TOKEN"
        ]
        == token
    )
    for unset in ({}, {"RAGTRACE_AUTH__BEARER_TOKEN": ""}):  # compose refuses to start, naming the variable
        with pytest.raises(MissingVariable, match="RAGTRACE_AUTH__BEARER_TOKEN"):
            _collector_config(compose, unset)


def test_collector_without_token_refuses_to_listen_on_all_interfaces():
    """The compose collector config (host 0.0.0.0) without the token: the collector itself refuses to start."""
    config = load_config(str(DEPLOY / "collector.yaml"), environ={})
    assert config.auth.bearer_token is None and not config.auth.allow_unauthenticated
    with pytest.raises(ValueError, match="reachable from other machines and no credential"):
        CollectorApp(config)._check_exposure()


def test_collector_answers_the_names_the_other_containers_use(compose):
    """Prometheus scrapes collector:9464 and Grafana calls COLLECTOR_URL: those names pass the DNS-rebinding check."""
    config = _collector_config(compose, {"RAGTRACE_AUTH__BEARER_TOKEN": "compose-token-0123456789abcdef"})
    policy = HostPolicy(config.listen.host, config.listen.allowed_hosts)
    prom = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    urls = [interpolate(compose["services"]["grafana"]["environment"]["COLLECTOR_URL"], {})]
    for name in [host_name(t) for t in targets if t.startswith("collector:")] + [
        host_name(u.split("//")[1]) for u in urls
    ]:
        assert policy.allows(name), name
    assert not policy.allows("attacker.example")
